"""A config's kernel under compute-sanitizer's four tools, at small edge-case shapes.

Each tool (memcheck, racecheck, synccheck, initcheck) runs in a child process of its own:
``compute-sanitizer --tool T --error-exitcode 86 --print-limit 16 python -m
flashtune.objectives._sanitize_child REQUEST``, where the child launches the config's kernel
on the shapes :func:`edge_cases` describes (a ragged last tile, the causal diagonal with
query and key lengths apart, grouped-query heads, per-sequence lengths and key starts where
the kernel takes them, short decode queries). The report becomes a :class:`ToolResult`:
clean, a finding (the first error line the tool printed), or a timeout or crash of the
child, which is a finding of its own kind and never an exception into the caller. A report
whose every error is a known blind spot of the tool (:data:`TOOL_BLIND_SPOTS`) is ``waived``:
clean, with what was waived kept beside it.

:func:`sanitize_many` checks many configs a batch at a time: one child runs a whole batch's
configs (``{"batch": [REQUEST, ...]}``) under each tool, so the child's start (Python, torch,
the CUDA context under the tool), most of a one-config run, is paid once a batch. A report
cannot be pinned on one config of a batch reliably, so a tool vouches for a batch's configs
only when it ran the batch clean; a tool with any other outcome runs again on each config
alone (:func:`sanitize`), and a verdict keeps the meaning it has there.

Pure Python: no torch, no triton (the child has them). The parent never touches CUDA.
Keep shapes tiny: the sanitizer slows a kernel about 100x.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from flashtune.kernels.config import Config
from flashtune.kernels.launch_plan import launch_plan
from flashtune.kernels.space import PAGE_SIZE_KEY, PAGED_KERNEL, VARLEN_KERNEL, kernel_of, setting
from flashtune.objectives.packed import packed_kernel, validate_row

#: compute-sanitizer's tools, in the order they run (memcheck first: the classic out-of-bounds).
TOOLS: tuple[str, ...] = ("memcheck", "racecheck", "synccheck", "initcheck")
#: The exit code the sanitizer is told to return when it found an error (``--error-exitcode``);
#: any other non-zero code is the child's own failure.
ERROR_EXITCODE = 86
#: Errors a tool prints in full (``--print-limit``): a report is waived only when every error
#: it counted was printed and each is a known blind spot.
PRINT_LIMIT = 16
#: Bumped when what a report means changes (a blind spot learned): older cached verdicts
#: are then checked again instead of served.
CLASSIFIER_VERSION = 2
#: The child module the sanitizer runs.
CHILD_MODULE = "flashtune.objectives._sanitize_child"
#: Seconds one tool's run may take (compile included) before it is a ``timeout`` finding.
DEFAULT_TIMEOUT_S = 180.0
#: Configs a batched run (:func:`sanitize_many`) gives one child by default.
DEFAULT_BATCH_SIZE = 8
#: A batch's time limit over one config's, per config beyond the first, as a share of one
#: config's limit: the child's start (Python, torch, the CUDA context under the tool) is paid
#: once, but each config compiles and runs its own cases. Half of one config's limit, not all
#: of it: a batch that hangs costs its limit before its configs are checked alone, so it is
#: kept near what the work needs; one that runs out falls back to those checks, never wrong.
BATCH_SHARE_PER_CONFIG = 0.5
#: A compute-sanitizer to use instead of the one found on PATH or in the CUDA install.
ENV_BIN = "FLASHTUNE_COMPUTE_SANITIZER"
#: Extra sanitizer arguments (shell words) put before the tool's: a GPU session's knob, e.g.
#: ``--report-api-errors no`` should a PyTorch API probe read as a finding.
ENV_ARGS = "FLASHTUNE_SANITIZER_ARGS"
#: Where CUDA installs usually put it, checked after PATH.
CUDA_BINS = ("/usr/local/cuda/bin",)

#: How a tool's run ended (``waived``: every error it reported is a blind spot of the tool).
CLEAN, WAIVED, FINDING, TIMEOUT, CRASHED = "clean", "waived", "finding", "timeout", "crashed"

_PREFIX = "========="
_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+errors?")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY:.*?\((\d+)\s+errors?")
#: Lines of a report that are its frame, not a finding.
_NOISE = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY", "Target application returned",
          "Printing limit reached", "Use --print-limit", "Saved host backtrace", "Note:")
_MAX_FINDING_CHARS = 400


@dataclass(frozen=True)
class ToolResult:
    """One tool's verdict on one config.

    Attributes:
        tool: ``memcheck``, ``racecheck``, ``synccheck`` or ``initcheck``.
        outcome: ``clean``, ``waived`` (clean but for a tool blind spot), ``finding`` (the
            tool reported an error), ``timeout`` or ``crashed`` (the child or the sanitizer
            failed on its own).
        finding: the first error the tool printed (with where, when it said), or why it
            timed out or crashed, or which blind spot was waived; "" when clean.
        errors: the count of the report's ``ERROR SUMMARY`` (0 when it printed none).
        seconds: wall time of the run, compile included; for a config of a clean batch, the
            batch's time divided by its configs.
        batch: how many configs the run checked (1: this config alone; more: a clean batch
            of :func:`sanitize_many` vouched for it).
    """

    tool: str
    outcome: str
    finding: str = ""
    errors: int = 0
    seconds: float = 0.0
    batch: int = 1

    @property
    def clean(self) -> bool:
        return self.outcome in (CLEAN, WAIVED)

    def to_dict(self) -> dict[str, Any]:
        data = {"tool": self.tool, "outcome": self.outcome, "finding": self.finding, "errors": self.errors,
                "seconds": round(self.seconds, 3)}
        if self.batch != 1:  # a one-config run is written as before batches existed
            data["batch"] = self.batch
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolResult:
        return cls(str(data["tool"]), str(data["outcome"]), str(data.get("finding", "")),
                   int(data.get("errors", 0)), float(data.get("seconds", 0.0)), int(data.get("batch", 1)))


@dataclass(frozen=True)
class Verdict:
    """Every tool's result on one config at one head dim and dtype, on one GPU."""

    config: Config
    head_dim: int
    dtype: str
    results: tuple[ToolResult, ...]
    gpu: str = ""
    cached: bool = field(default=False, compare=False)

    @property
    def safe(self) -> bool:
        """Every tool ran clean (a timeout or a crash is not clean: nothing pretends)."""
        return bool(self.results) and all(r.clean for r in self.results)

    @property
    def first_problem(self) -> ToolResult | None:
        return next((r for r in self.results if not r.clean), None)

    @property
    def reason(self) -> str:
        """``compute-sanitizer TOOL: FINDING`` for the first tool that was not clean; "" if safe."""
        problem = self.first_problem
        return "" if problem is None else unsafe_reason(problem)

    @property
    def waived(self) -> str:
        """``TOOL: what was waived`` for each tool whose report was a blind spot; "" if none."""
        return "; ".join(f"{r.tool}: {r.finding}" for r in self.results if r.outcome == WAIVED)

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "head_dim": self.head_dim, "dtype": self.dtype, "gpu": self.gpu,
                "results": [r.to_dict() for r in self.results]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, cached: bool = False) -> Verdict:
        return cls(Config.from_dict(data["config"]), int(data["head_dim"]), str(data["dtype"]),
                   tuple(ToolResult.from_dict(r) for r in data["results"]), str(data.get("gpu", "")), cached)


def unsafe_reason(result: ToolResult) -> str:
    """The ``error`` text of an ``unsafe`` measurement: ``compute-sanitizer TOOL: FINDING``
    (a timeout or a crash says so: ``compute-sanitizer TOOL: timeout: ...``)."""
    what = result.finding if result.outcome == FINDING else f"{result.outcome}: {result.finding}"
    return f"compute-sanitizer {result.tool}: {what}"


def parse_unsafe_reason(error: str) -> tuple[str, str] | None:
    """(tool, finding) of an :func:`unsafe_reason` text; None for any other text."""
    match = re.match(r"compute-sanitizer (\w+): (.*)", error or "", re.S)
    return (match[1], match[2]) if match and match[1] in TOOLS else None


# --- the report ---------------------------------------------------------------------------


def parse_report(text: str) -> tuple[int | None, str]:
    """The error count and the first finding of a compute-sanitizer report (see
    :func:`report_findings`)."""
    errors, findings = report_findings(text)
    ranked = [f for f in findings if not f[0].startswith("Warning")] or findings
    if not ranked:
        return errors, ""
    line, where = ranked[0][0], ranked[0][1]
    finding = f"{line} {where}".strip() if where else line
    return errors, finding[:_MAX_FINDING_CHARS]


def report_findings(text: str) -> tuple[int | None, list[tuple[str, str, list[str]]]]:
    """The error count and every finding a compute-sanitizer report printed.

    The report's lines start with ``=========``; the child's own output is mixed in and
    ignored. A finding is a report line that is not indented (indented lines continue a
    finding: where, which thread, the address, racecheck's other side) and is not the
    report's frame (summaries, backtrace notes); racecheck's ``Warning:`` hazards rank
    after its ``Error`` lines. Its first ``at ...`` continuation line is its ``where``.

    Returns:
        (errors, findings): errors from ``ERROR SUMMARY: N errors`` (racecheck's summary when
        that is all there is), None when the report has no summary; each finding as
        (line, where, continuation lines).
    """
    errors: int | None = None
    findings: list[tuple[str, str, list[str]]] = []
    last: list | None = None
    for raw in text.splitlines():
        if not raw.startswith(_PREFIX):
            continue
        body = raw[len(_PREFIX):]
        content = body.strip()
        summary = _SUMMARY.search(content)
        if summary:
            errors = int(summary[1])
            continue
        race = _RACE_SUMMARY.search(content)
        if race and errors is None:
            errors = int(race[1])
        if not content or content.startswith(_NOISE):
            last = None
            continue
        if body.startswith(("  ", "\t")):  # a continuation of the finding above
            if last is not None:
                last[2].append(content)
                if not last[1] and content.startswith("at "):
                    last[1] = content
            continue
        last = [content, "", []]
        findings.append(last)  # type: ignore[arg-type]
    return errors, [(line, where, more) for line, where, more in findings]


# --- what a tool cannot see -----------------------------------------------------------------

#: Where a race's read side is: ``Read access at KERNEL+0xOFFSET in FILE:LINE``.
_RACE_READ = re.compile(r"Race reported between Read access at (\w+)\+0x([0-9a-f]+) in ([\w.]+):(\d+)")
#: The kernel code before which warp-specialized partitions start: the worker warps' switch loop.
_PROLOGUE_BYTES = 0x200


def _is_kernel_definition(kernel: str, file: str, line: int) -> bool:
    """Whether ``file:line`` (a kernels/ source) is the ``def`` line of ``kernel``: code the
    compiler generated, with no source line of ours."""
    path = Path(__file__).resolve().parent.parent / "kernels" / file
    try:
        text = path.read_text().splitlines()[line - 1]
    except (OSError, IndexError):
        return False
    return text.lstrip().startswith(f"def {kernel}(")


def warp_specialize_handoff(line: str, where: str) -> str | None:
    """racecheck's report of Triton's warp-specialization state handoff, or None.

    Triton 3.6 lowers ``warp_specialize`` (Gluon, ``tl.range(warp_specialize=True)``) to a
    byte of shared memory per worker warp: the default warpgroup writes the next partition's
    number, then all warps meet at CTA barrier 1; the worker warps, in a switch loop at the
    kernel's start, pass barrier 1 and read it. Every write and read is separated by that
    barrier (SASS on the H100, 2026-12-06: docs/sanitizer.md), yet racecheck reports the
    worker's read at the kernel's prologue against the default warpgroup's writes, 4 errors
    on every 4-warp warp-specialized config. The read side is what identifies it: in the
    prologue, at the kernel's ``def`` line (compiler-generated code, no source line).
    """
    match = _RACE_READ.search(line)
    if not match:
        return None
    kernel, offset, file, source_line = match[1], int(match[2], 16), match[3], int(match[4])
    if offset >= _PROLOGUE_BYTES or not _is_kernel_definition(kernel, file, source_line):
        return None
    return f"racecheck cannot see Triton's warp-specialization barrier ({kernel}+0x{offset:x}, the worker warps' state read)"


#: Per tool, the recognisers of reports that are the tool's blind spot, not a defect.
TOOL_BLIND_SPOTS = {"racecheck": (warp_specialize_handoff,)}


def blind_spot(tool: str, errors: int | None, findings: Sequence[tuple[str, str, list[str]]]) -> str | None:
    """Why the whole report is a blind spot of ``tool`` (every counted error printed and
    recognised), or None when any error is not."""
    recognisers = TOOL_BLIND_SPOTS.get(tool, ())
    errors_printed = [f for f in findings if not f[0].startswith("Warning")]
    if not recognisers or not errors_printed or (errors or 0) > len(errors_printed):
        return None
    reasons = []
    for line, where, _ in errors_printed:
        why = next((r for r in (rec(line, where) for rec in recognisers) if r), None)
        if why is None:
            return None
        reasons.append(why)
    return f"waived {len(reasons)} error(s): {reasons[0]}"


def interpret(tool: str, returncode: int, output: str, seconds: float) -> ToolResult:
    """The :class:`ToolResult` of one sanitizer run from its exit code and output."""
    errors, finding = parse_report(output)
    ran = any(line.startswith(_PREFIX) and "COMPUTE-SANITIZER" in line for line in output.splitlines())
    if returncode == ERROR_EXITCODE or (returncode == 0 and errors):
        waived = blind_spot(tool, errors, report_findings(output)[1])
        if waived:
            return ToolResult(tool, WAIVED, f"{waived}; first: {finding}"[:_MAX_FINDING_CHARS], errors or 0, seconds)
        return ToolResult(tool, FINDING, finding or f"{errors or 'some'} error(s) reported, none printed",
                          errors or 0, seconds)
    if returncode == 0 and ran:
        return ToolResult(tool, CLEAN, "", 0, seconds)
    if returncode == 0:
        return ToolResult(tool, CRASHED, "no compute-sanitizer report in its output", 0, seconds)
    how = f"killed by signal {-returncode}" if returncode < 0 else f"exit code {returncode}"
    return ToolResult(tool, CRASHED, f"{how}: {_last_line(output)}"[:_MAX_FINDING_CHARS], errors or 0, seconds)


def _last_line(output: str) -> str:
    """The child's last words: the last non-empty line outside the sanitizer's frame."""
    lines = [line.strip() for line in output.splitlines() if line.strip() and not line.startswith(_PREFIX)]
    return lines[-1] if lines else "no output"


# --- the shapes ---------------------------------------------------------------------------


def edge_cases(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The small problems a config's kernel is sanitized on (torch-free descriptions the
    child turns into tensors): each a dict of batch, q_heads, kv_heads, q_len, kv_len,
    causal and, where the kernel takes them, cache_seqlens and kv_start (per sequence).

    Prefill: a ragged last tile in both directions (lengths 45 past a tile, never a
    multiple of 16), grouped-query heads (4 query heads a KV head), the causal diagonal
    with fewer queries than keys (bottom-right) and with more (rows that see no key), and
    per-sequence key ranges (one sequence whole, one cut on both sides off a tile
    boundary, one empty) where the variant takes them. Decode: one query and a few
    against a ragged cache, with the same ranges. The packed kernels (a config naming
    ``kernel="varlen"`` or ``"paged"``, as their table rows do): :func:`varlen_cases`,
    :func:`paged_cases`.
    """
    cfg = validate_row(config)
    if packed_kernel(cfg) == VARLEN_KERNEL:
        return varlen_cases(cfg)
    if packed_kernel(cfg) == PAGED_KERNEL:
        return paged_cases(cfg)
    if kernel_of(cfg) == "decode":
        return [
            dict(batch=3, q_heads=8, kv_heads=2, q_len=1, kv_len=301, causal=True,
                 cache_seqlens=[301, 77, 0], kv_start=[0, 13, 0]),
            dict(batch=2, q_heads=8, kv_heads=2, q_len=5, kv_len=173, causal=True),
            dict(batch=2, q_heads=4, kv_heads=4, q_len=3, kv_len=45, causal=False),
        ]
    tile = max(int(setting(cfg, "BLOCK_M")), int(setting(cfg, "BLOCK_N")))
    long = tile + 45  # two tiles, the last one ragged
    cases = [
        dict(batch=2, q_heads=8, kv_heads=2, q_len=long, kv_len=long, causal=True),
        dict(batch=1, q_heads=4, kv_heads=2, q_len=tile // 2 + 19, kv_len=long + 70, causal=True),
        dict(batch=1, q_heads=4, kv_heads=4, q_len=long, kv_len=45, causal=False),
        dict(batch=1, q_heads=4, kv_heads=4, q_len=long, kv_len=45, causal=True),
    ]
    if takes_key_ranges(cfg):
        cases.append(dict(batch=3, q_heads=8, kv_heads=2, q_len=37, kv_len=long, causal=True,
                          cache_seqlens=[long, long - 23, 0], kv_start=[0, 7, 0]))
    return cases


def takes_key_ranges(config: Config) -> bool:
    """As ``kernels.attention.takes_key_ranges`` (torch-free here): the decode kernel, and
    the forward variant without fp8."""
    if packed_kernel(config) is not None:
        return False  # their own lengths: cumulative (varlen) or per sequence (paged)
    plan = launch_plan(config)
    return plan.variant == "decode" or (plan.variant == "forward" and not plan.constexprs.get("FP8"))


def varlen_cases(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The varlen kernel's cases (``layout="varlen"``): packed sequences given by their query
    and key lengths. Mixed lengths with 1 and 0 and a ragged last tile, grouped-query heads;
    more queries than keys under the causal mask (rows that see no key); chunked prefill (more
    keys than queries, a sequence with keys and no queries), a sequence with no keys; and rows
    past the last sequence (transformers pads a step's packed rows to a captured graph's size),
    which the kernel must leave unwritten; and the same with pack-GQA's tiles, and with tiles by
    packed rows (a chunk among decoding sequences, ``grid_by="tokens"``)."""
    long = max(int(config["BLOCK_M"]), int(config["BLOCK_N"])) + 45  # past a tile, the last one ragged
    return [
        dict(layout="varlen", q_heads=8, kv_heads=2, q_lens=[long, 1, 0, 37, 20], k_lens=[long, 1, 0, 37, 4],
             causal=True, pad_rows=0),
        dict(layout="varlen", q_heads=4, kv_heads=2, q_lens=[19, long, 0], k_lens=[19 + 70, long + 3, 5],
             causal=True, pad_rows=7),
        dict(layout="varlen", q_heads=4, kv_heads=4, q_lens=[long, 3], k_lens=[45, 0], causal=False, pad_rows=5),
        # pack-GQA (a group's 4 query heads in one tile's rows): a decode step's one query, a
        # chunk, an empty sequence and padding rows, whichever way the op launches today.
        dict(layout="varlen", q_heads=8, kv_heads=2, q_lens=[1, long, 0, 1], k_lens=[70, long + 9, 3, 1],
             causal=True, pad_rows=6, pack_gqa=True),
        # Tiles by packed rows, each finding its sequence in the cumulative lengths: a chunk among
        # decoding sequences (the step "auto" takes them for), packed and not.
        dict(layout="varlen", q_heads=8, kv_heads=2, q_lens=[1, 1, long, 0, 1], k_lens=[50, 1, long + 20, 3, 9],
             causal=True, pad_rows=4, grid_by="tokens"),
        dict(layout="varlen", q_heads=8, kv_heads=2, q_lens=[1, long, 1], k_lens=[33, long, 70],
             causal=True, pad_rows=0, pack_gqa=True, grid_by="tokens"),
    ]


def paged_cases(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The paged kernel's cases (``layout="paged"``) at the row's page size: per-sequence cache
    lengths ending mid-page, on a page boundary and at 0, through a shuffled block table whose
    unused entries are -1; one query (decode) and a few (a chunk, causal), grouped-query heads;
    new keys appended into the pages first (``new_keys``): the serving path's decode step (one
    query, its key appended) and a chunk's, each opening a new page somewhere; and more queries
    than keys under the causal mask (rows that see no key)."""
    page = int(config[PAGE_SIZE_KEY])
    return [
        dict(layout="paged", page_size=page, q_heads=8, kv_heads=2, q_len=1,
             cache_seqlens=[3 * page + 5, 0, page], causal=True, new_keys=1),
        dict(layout="paged", page_size=page, q_heads=8, kv_heads=2, q_len=3, cache_seqlens=[2 * page - 1, 7],
             causal=True, new_keys=3),
        dict(layout="paged", page_size=page, q_heads=4, kv_heads=4, q_len=2, cache_seqlens=[45, page + 1],
             causal=False, new_keys=0),
        dict(layout="paged", page_size=page, q_heads=4, kv_heads=2, q_len=4, cache_seqlens=[2, page],
             causal=True, new_keys=0),
    ]


def variant_of(config: Mapping[str, Any]) -> str:
    """The kernel a config launches: ``forward``, ``lean``, ``oneloop``, ``gluon``, ``decode``
    (``kernels.launch_plan``), ``-fp8`` appended for fp8 configs; or a packed kernel's name."""
    if kernel := packed_kernel(config):
        return kernel
    plan = launch_plan(validate_row(config))
    return plan.variant + ("-fp8" if plan.constexprs.get("FP8") else "")


def request(config: Mapping[str, Any], *, head_dim: int, dtype: str = "bfloat16") -> dict[str, Any]:
    """The child's JSON request for ``config`` at ``head_dim`` and ``dtype``."""
    cfg = validate_row(config)
    return {"config": cfg.to_dict(), "head_dim": int(head_dim), "dtype": dtype, "cases": edge_cases(cfg), "seed": 0}


class Check(NamedTuple):
    """One config to check at a head dim and dtype (an item of :func:`sanitize_many`)."""

    config: Mapping[str, Any]
    head_dim: int
    dtype: str = "bfloat16"


def batch_request(checks: Sequence[Check]) -> dict[str, Any]:
    """The child's JSON request for every check of ``checks``, run in turn in one process."""
    return {"batch": [request(c.config, head_dim=c.head_dim, dtype=c.dtype) for c in checks]}


def batch_timeout(timeout_s: float, size: int) -> float:
    """A batch of ``size`` configs' limit: one config's, and a share of it for each other
    (see :data:`BATCH_SHARE_PER_CONFIG`)."""
    return timeout_s * (1 + BATCH_SHARE_PER_CONFIG * max(size - 1, 0))


# --- running ------------------------------------------------------------------------------


def find_sanitizer() -> str | None:
    """The compute-sanitizer to run: ``$FLASHTUNE_COMPUTE_SANITIZER``, else PATH, else the
    CUDA install's bin (``$CUDA_HOME/bin``, /usr/local/cuda/bin); None when there is none."""
    explicit = os.environ.get(ENV_BIN)
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    homes = [os.path.join(h, "bin") for h in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")) if h]
    for folder in (*homes, *CUDA_BINS):
        candidate = Path(folder, "compute-sanitizer")
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


#: The child's environment on top of the caller's: PyTorch's caching allocator off, so every
#: tensor is an allocation of its own and a read a few bytes past one is out of bounds for
#: memcheck (inside a cached 2 MB block it would not be).
CHILD_ENV = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}


def run_tool(tool: str, child_request: Mapping[str, Any] | None, *, sanitizer: str,
             timeout_s: float = DEFAULT_TIMEOUT_S, python: str = sys.executable, env: Mapping[str, str] | None = None,
             target: Sequence[str] | None = None) -> ToolResult:
    """One tool on one request, in a child process group killed whole on timeout.

    Never raises for what the child or the sanitizer does: a timeout, a crash or a sanitizer
    that cannot start is a :class:`ToolResult` saying so. ``target`` runs another command
    under the tool instead of the sanitize child (the GPU tests' deliberately broken kernel).

    Raises:
        ValueError: ``tool`` is not one of :data:`TOOLS`.
    """
    if tool not in TOOLS:
        raise ValueError(f"tool must be one of {list(TOOLS)}, got {tool!r}")
    extra = shlex.split(os.environ.get(ENV_ARGS, ""))
    if target is None:
        target = [python, "-m", CHILD_MODULE, json.dumps(dict(child_request or {}), sort_keys=True)]
    command = [sanitizer, "--tool", tool, "--error-exitcode", str(ERROR_EXITCODE), "--print-limit", str(PRINT_LIMIT),
               *extra, *target]
    start = time.monotonic()
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   errors="replace", start_new_session=True,
                                   env={**(os.environ if env is None else env), **CHILD_ENV})
    except OSError as exc:
        return ToolResult(tool, CRASHED, f"cannot start {sanitizer}: {exc.strerror or exc}", 0, 0.0)
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        return ToolResult(tool, TIMEOUT, f"no end within {timeout_s:.0f} s", 0, time.monotonic() - start)
    return interpret(tool, process.returncode, output, time.monotonic() - start)


def _kill_group(process: subprocess.Popen) -> None:
    """Kill the sanitizer and the Python it started (its own session's group), then reap."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.communicate()


def sanitize(config: Mapping[str, Any], *, head_dim: int, dtype: str = "bfloat16", gpu: str = "",
             tools: Sequence[str] = TOOLS, sanitizer: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
             env: Mapping[str, str] | None = None) -> Verdict:
    """Every tool of ``tools`` on ``config``'s kernel at ``head_dim`` and ``dtype``.

    Every tool runs, a finding or not (each finds its own kind of error; the study records
    the first), all at once; the results keep ``tools``' order. ``gpu`` only labels the verdict (a cache keys on it).

    Raises:
        FileNotFoundError: no compute-sanitizer (``sanitizer`` None and :func:`find_sanitizer` finds none).
        ValueError: a bad config or tool.
    """
    sanitizer = sanitizer or find_sanitizer()
    if sanitizer is None:
        raise FileNotFoundError("no compute-sanitizer on PATH or in /usr/local/cuda/bin")
    child = request(config, head_dim=head_dim, dtype=dtype)
    results = run_tools(tools, child, sanitizer=sanitizer, timeout_s=timeout_s, env=env)
    return Verdict(Config.from_dict(child["config"]), int(head_dim), dtype, results, gpu)


def run_tools(tools: Sequence[str], child_request: Mapping[str, Any], *, sanitizer: str, timeout_s: float,
              env: Mapping[str, str] | None) -> tuple[ToolResult, ...]:
    """Every tool on one request, side by side; the results in ``tools``' order."""
    # Each tool is its own child on the same GPU: a run is mostly the child's start (Python,
    # torch, a CUDA context under the tool) and the compile, not the GPU, so four at once
    # take about as long as one.
    with ThreadPoolExecutor(max_workers=max(len(tools), 1)) as pool:
        return tuple(pool.map(lambda tool: run_tool(tool, child_request, sanitizer=sanitizer, timeout_s=timeout_s,
                                                    env=env), tools))


def sanitize_many(checks: Sequence[Check], *, gpu: str = "", tools: Sequence[str] = TOOLS,
                  sanitizer: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                  env: Mapping[str, str] | None = None, batch_size: int = DEFAULT_BATCH_SIZE) -> list[Verdict]:
    """:func:`sanitize` on every check of ``checks``, ``batch_size`` configs to a child run;
    one verdict per check, in order.

    Each batch runs every tool once (side by side, as :func:`sanitize`), with a limit of
    :func:`batch_timeout`. A tool that ran the batch clean (exit 0, 0 errors) makes each of its
    configs clean under that tool (``batch`` set, ``seconds`` the batch's share). Any other
    outcome of a tool (a finding, a waiver, a timeout, a crash) has that tool run again on each
    config of the batch alone (:func:`sanitize`): which config a report belongs to cannot be
    told reliably, and a waiver is judged on one config's report. A batch of one is that check.

    Raises:
        FileNotFoundError: no compute-sanitizer (``sanitizer`` None and :func:`find_sanitizer` finds none).
        ValueError: a bad config or tool, or ``batch_size`` < 1.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    sanitizer = sanitizer or find_sanitizer()
    if sanitizer is None:
        raise FileNotFoundError("no compute-sanitizer on PATH or in /usr/local/cuda/bin")
    # Batches hold one kernel variant each: racecheck waives every warp-specialized kernel (a
    # blind spot), and a waiver reruns racecheck config by config, so one such config in a
    # batch of others would cost them all their shared racecheck run (2026-12-07, H100: mixed
    # batches of 8 reran racecheck on all 56 configs checked).
    groups: dict[str, list[int]] = {}
    for i, check in enumerate(checks):
        groups.setdefault(variant_of(check.config), []).append(i)
    verdicts: dict[int, Verdict] = {}
    for group in groups.values():
        for first in range(0, len(group), batch_size):
            batch = group[first:first + batch_size]
            done = _sanitize_batch([checks[i] for i in batch], gpu=gpu, tools=tools, sanitizer=sanitizer,
                                   timeout_s=timeout_s, env=env)
            verdicts.update(zip(batch, done))
    return [verdicts[i] for i in range(len(checks))]


def _sanitize_batch(checks: list[Check], *, gpu: str, tools: Sequence[str], sanitizer: str, timeout_s: float,
                    env: Mapping[str, str] | None) -> list[Verdict]:
    """One batch's verdicts: every config clean when every tool ran the batch clean, else
    each config's own :func:`sanitize`."""
    def alone(check: Check, which: Sequence[str] = tools) -> Verdict:
        return sanitize(check.config, head_dim=check.head_dim, dtype=check.dtype, gpu=gpu, tools=which,
                        sanitizer=sanitizer, timeout_s=timeout_s, env=env)

    if len(checks) == 1:
        return [alone(checks[0])]
    child = batch_request(checks)
    results = run_tools(tools, child, sanitizer=sanitizer, timeout_s=batch_timeout(timeout_s, len(checks)), env=env)
    if not results:
        return [alone(check) for check in checks]
    # A tool clean on the whole batch is clean on each config; only the others run again
    # config by config (racecheck's waiver of warp specialization, say, while memcheck,
    # synccheck and initcheck stay vouched for by the batch).
    shared = {r.tool: ToolResult(r.tool, CLEAN, "", 0, r.seconds / len(checks), len(checks))
              for r in results if r.outcome == CLEAN}
    again = tuple(tool for tool in tools if tool not in shared)
    verdicts = []
    for check, one in zip(checks, child["batch"]):
        own = {r.tool: r for r in alone(check, again).results} if again else {}
        verdicts.append(Verdict(Config.from_dict(one["config"]), int(check.head_dim), check.dtype,
                                tuple(shared.get(tool) or own[tool] for tool in tools), gpu))
    return verdicts


def probe_gpu(*, timeout_s: float = 120.0, python: str = sys.executable) -> dict[str, Any] | None:
    """The GPU a child process sees (``HardwareSpec.to_dict()``), or None without one.

    In a child, so that the caller never touches CUDA. Without an NVIDIA device node the
    answer is None at once, without starting Python.
    """
    if not (os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi")):
        return None
    try:
        done = subprocess.run([python, "-m", CHILD_MODULE, "--probe"], capture_output=True, text=True,
                              timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    try:
        return json.loads(lines[-1]) if done.returncode == 0 and lines else None
    except json.JSONDecodeError:
        return None
