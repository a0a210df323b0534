"""``flashtune sweep``: measure every config of the space for workloads, write recorded tables.

One JSON-lines table per workload (``<out>/<workload.name>.jsonl``), the raw material of
the replay objective. Measurements are appended to ``<table>.partial`` as they come, so
a killed sweep resumes where it stopped; the finished table is written atomically.

``--kernel varlen`` and ``--kernel paged --page-size N`` sweep a packed kernel's space
instead (objectives/packed.py): the same objective, worker and checks, each row's config
naming its kernel (and page size), the convention ``flashtune export`` stores in the
``varlen`` / ``paged`` classes. The workload is read in the packed kernel's terms: varlen,
batch sequences of the workload's lengths packed end to end; paged, batch sequences of
kv_len cached keys in pages of the page size (the block table's capacity, kv_len rounded up
to whole pages, must fall in kv_len's bucket). Their tables lie beside the dense ones,
named ``<workload.name>.varlen.jsonl`` and ``<workload.name>.paged-p<N>.jsonl``: a dense, a
varlen and a paged sweep of one workload (of any page sizes) never share a table, and one
``flashtune export table:<out>`` reads them all. (Replay and ``--like`` read the dense
table of a workload by its exact name, never a packed one.)
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

from tqdm import tqdm

from flashtune.experiments.evaluation.sweep_plan import SweepPlan, plan_sweep
from flashtune.experiments.study.measurers import default_replay_dirs, gpu_names, recorded_workloads, table_path
from flashtune.kernels.config import Config
from flashtune.kernels.space import (
    KERNEL_TUNABLES,
    PAGE_SIZE_MULTIPLE,
    PAGED_KERNEL,
    VARLEN_KERNEL,
    all_configs,
    tunables_for,
    validate_config,
)
from flashtune.objectives.feasibility import check
from flashtune.objectives.hardware import HardwareSpec, known_specs, load_spec
from flashtune.objectives.objective import Objective
from flashtune.objectives.packed import PACKED_TUNABLES, packed_row, table_suffix, validate_row
from flashtune.objectives.replay import load_table, write_table
from flashtune.objectives.types import SUITE, Measurement, Status, Workload
from flashtune.runtime.dispatching.resolve import PACKED_DEFAULTS
from flashtune.runtime.storage.buckets import pow2_bucket

#: ``--kernel``'s default: the dense op's kernels (prefill or decode, by the workload's q_len).
DENSE = "dense"
#: The kernels ``--kernel`` names.
SWEPT_KERNELS = (DENSE, VARLEN_KERNEL, PAGED_KERNEL)


@dataclasses.dataclass(frozen=True)
class SweptKernel:
    """The kernel a sweep measures: ``dense`` (the op's prefill or decode kernel, by the
    workload), ``varlen``, or ``paged`` at a page size."""

    name: str = DENSE
    page_size: int | None = None
    #: The GPU swept (None: unknown), for the tile its op serves without a store entry.
    hardware: HardwareSpec | None = None

    def select(self, where: dict[str, set[str]], limit: int | None, workload: Workload) -> list[Config]:
        """The rows of the space ``workload`` is swept in that ``where`` selects, the first
        ``limit``; a packed space starts with the tile the op serves without a store entry."""
        if self.name == DENSE:
            return _select(where, limit, tunables_for(workload))
        tiles = _select(where, None, PACKED_TUNABLES[self.name])
        served, _ = PACKED_DEFAULTS[self.name](self.hardware, workload)
        # First, so that a sweep cut short still says how much its best beats what is served today.
        tiles.sort(key=lambda tile: tile != served)
        return [packed_row(tile, self.name, page_size=self.page_size) for tile in tiles[:limit]]

    def table(self, out_dir: Path, workload: Workload) -> Path:
        """The table's file (see the module: packed tables have a suffix of their own)."""
        if self.name == DENSE:
            return out_dir / f"{workload.name}.jsonl"
        return out_dir / f"{workload.name}.{table_suffix(self.name, self.page_size)}.jsonl"


def sweep_workload(
    objective: Objective,
    workload: Workload,
    out_dir: Path,
    *,
    progress: bool = True,
    limit: int | None = None,
    where: dict[str, set[str]] | None = None,
    configs: list[Config] | None = None,
    kernel: SweptKernel = SweptKernel(),
) -> list[Measurement]:
    """Measure every config of ``kernel``'s space (or those ``where`` selects, the first
    ``limit``; or the ``configs`` given) on ``workload``; resume from a partial or a
    finished table, measuring only what they lack."""
    out_dir.mkdir(parents=True, exist_ok=True)
    table = kernel.table(out_dir, workload)
    partial = table.with_suffix(".jsonl.partial")
    # A finished table and a partial one both count: a sweep run again measures only
    # what neither holds (a new knob's configs, a larger --limit), never the whole space.
    done = {**_read_measurements(table), **_read_measurements(partial)}
    if configs is None:
        configs = kernel.select(where or {}, limit, workload)
    todo = [c for c in configs if c not in done]
    if not todo:
        print(f"flashtune sweep: {table} already holds all {len(configs)} configs; nothing to measure",
              file=sys.stderr)
    elif len(todo) < len(configs):
        print(f"flashtune sweep: {len(configs) - len(todo)} of {len(configs)} configs already measured "
              f"in {out_dir}; measuring the other {len(todo)}", file=sys.stderr)
    objective.prefetch(todo, workload)
    with partial.open("a") as fh:
        for config in tqdm(todo, desc=workload.name, disable=not progress, unit="cfg"):
            m = objective.evaluate(config, workload)
            done[config] = m
            fh.write(json.dumps(m.to_dict()) + "\n")
            fh.flush()
    measurements = [done[c] for c in configs]
    selected = set(configs)
    # Configs a wider earlier sweep measured stay in the table: a narrower rerun loses nothing.
    write_table(table, measurements + [m for c, m in done.items() if c not in selected])
    partial.unlink()
    return measurements


def _read_measurements(path: Path) -> dict[Config, Measurement]:
    """The measurements of a table (finished or partial) by config; none if it is absent."""
    done: dict[Config, Measurement] = {}
    if not path.exists():
        return done
    for line in path.read_text().splitlines():
        try:
            m = Measurement.from_dict(json.loads(line))
            m = dataclasses.replace(m, config=validate_row(m.config))  # knobs added since
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by a kill: measure that config again
        done[m.config] = m
    return done


def _parse_where(items: list[str]) -> dict[str, set[str]]:
    where = {}
    for item in items:
        knob, sep, values = item.partition("=")
        spaces = [*KERNEL_TUNABLES.values(), *PACKED_TUNABLES.values()]
        knobs = sorted({name for tunables in spaces for name in tunables})
        if not sep or knob not in knobs:
            raise ValueError(f"--where {item!r}: expected KNOB=V1,V2 with KNOB one of {knobs}")
        where[knob] = set(values.split(","))
    return where


def _select(where: dict[str, set[str]], limit: int | None, tunables) -> list[Config]:
    """The configs of the workload's kernel's space that ``where`` selects (knobs the kernel
    lacks select nothing away: one --where serves a sweep of prefill and decode workloads)."""
    where = {k: vals for k, vals in where.items() if k in tunables}
    configs = [c for c in all_configs(tunables) if all(str(c[k]) in vals for k, vals in where.items())]
    return configs[:limit]


def summarize(workload: Workload, measurements: list[Measurement]) -> str:
    counts = Counter(m.status.value for m in measurements)
    ok = [m for m in measurements if m.status is Status.OK]
    best = min(ok, key=lambda m: m.median_ms) if ok else None
    best_text = f"{best.tflops:7.1f} TFLOP/s {best.median_ms:8.3f} ms {best.config.to_dict()}" if best else "no config ran"
    status_text = " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
    return f"{workload.name:40s} {best_text}  [{status_text}]"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("sweep", help="measure every config of the space for workloads (recorded tables)")
    p.add_argument("--workload", action="append", default=[], help="B,H[/HKV],N[/NK],D[,causal][,dtype]; repeatable")
    p.add_argument("--suite", action="store_true", help="sweep the standard workload suite (objectives.types.SUITE, bf16)")
    p.add_argument("--out", type=Path, default=Path("sweeps"), help="folder for the tables (default: sweeps)")
    p.add_argument("--precompile", type=int, default=None, help="compile pool size (default: CPU count; 0 disables)")
    p.add_argument("--timeout", type=float, default=120.0, help="per-config seconds before the worker is killed")
    p.add_argument("--hardware", default=None, help="simulate a shipped spec or JSON file (needed without a GPU)")
    p.add_argument("--no-static-check", action="store_true",
                   help="compile configs the feasibility model rejects too (grades the model)")
    p.add_argument("--where", action="append", default=[], metavar="KNOB=V1,V2",
                   help="only configs whose KNOB is one of the values (repeatable), e.g. loads=tma,tma_ws")
    p.add_argument("--limit", type=int, default=None, help="only the first N configs of the space (throughput runs)")
    p.add_argument("--interpret", action="store_true", help="run the kernel in Triton's CPU interpreter")
    p.add_argument("--kernel", choices=SWEPT_KERNELS, default=DENSE,
                   help="the kernel whose space is swept: dense (the op's prefill or decode kernel, default), "
                        "varlen (packed prefill: batch sequences end to end) or paged (decode against a paged "
                        "KV cache; needs --page-size)")
    p.add_argument("--page-size", type=int, default=None, metavar="N",
                   help=f"with --kernel paged: the cache's page size (a multiple of {PAGE_SIZE_MULTIPLE})")
    like = p.add_argument_group("a new GPU recorded from a known one's space (instead of the whole space)")
    like.add_argument("--like", default=None, metavar="GPU",
                      help="measure configs of this GPU's recorded space (a shipped spec with tables, e.g. h200): "
                           "its fastest --top-share per workload, then a space-filling --sample of the rest")
    like.add_argument("--top-share", type=float, default=0.05, help="with --like: fastest share taken (default: 0.05)")
    like.add_argument("--sample", type=int, default=200,
                      help="with --like: configs sampled from the rest, every kernel variant represented, a tenth "
                           "of them configs the known GPU could not run (default: 200)")
    like.add_argument("--seed", type=int, default=0, help="with --like: seeds the sample (default: 0)")
    p.set_defaults(func=run_sweep)


def run_sweep(args: argparse.Namespace) -> int:
    workloads = [Workload.parse(text) for text in args.workload]
    if args.suite:
        workloads.extend(SUITE)
    if not workloads:
        raise ValueError("give --workload (repeatable) or --suite")
    for option, value, least in (("--limit", args.limit, 1), ("--precompile", args.precompile, 0)):
        if value is not None and value < least:
            raise ValueError(f"{option} must be an int >= {least}, got {value}")
    if not args.timeout > 0:
        raise ValueError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    if args.out.exists() and not args.out.is_dir():
        raise ValueError(f"--out {str(args.out)!r} is a file, not a folder")
    hardware: HardwareSpec | None = load_spec(args.hardware) if args.hardware else None
    where = _parse_where(args.where)
    kernel = _swept_kernel(args, workloads)
    if kernel.name != DENSE:
        kernel = dataclasses.replace(kernel, hardware=hardware or _device_spec())
    if args.like and args.limit:
        raise ValueError("--like chooses the configs itself: drop --limit")
    plans = {w: _like_plan(args, w, where, hardware or _device_spec()) for w in workloads} if args.like else {}
    if plans:
        _print_plans(args.like, plans)
    _check_device(args.interpret, hardware)
    if args.interpret:
        _check_interpretable(workloads)
    env = {"TRITON_INTERPRET": "1"} if args.interpret else None
    # The interpreter compiles nothing, so a pool would only cost start-up time.
    precompile = 0 if args.interpret else (_default_pool_size() if args.precompile is None else args.precompile)
    lines = []
    started = time.perf_counter()
    with Objective(hardware=hardware, timeout_s=args.timeout, env=env, precompile=precompile,
                   static_check=not args.no_static_check) as live:
        objective = InterpretedObjective(live) if args.interpret else live
        for workload in workloads:
            plan = plans[workload].configs if plans else None
            measurements = sweep_workload(objective, workload, args.out, limit=args.limit, where=where, configs=plan,
                                          kernel=kernel)
            lines.append(summarize(workload, measurements))
    elapsed = time.perf_counter() - started
    total = sum(len(plans[w].configs) if plans else len(kernel.select(where, args.limit, w))
                for w in workloads)
    print(f"\n{total} trials in {elapsed:.1f} s ({total / elapsed * 60:.1f} trials/min); tables in {args.out}/")
    if args.interpret:
        print("times are Triton's CPU interpreter's, not a GPU's: the tables say which configs run and "
              "compute right; `flashtune export` skips them")
    print("\n".join(lines))
    return 0


def _swept_kernel(args: argparse.Namespace, workloads: list[Workload]) -> SweptKernel:
    """The kernel ``--kernel`` and ``--page-size`` name.

    Raises:
        ValueError: --page-size without --kernel paged or missing with it, or not a multiple
            of ``PAGE_SIZE_MULTIPLE``; --like with a packed kernel (no GPU's packed space is
            recorded); a paged workload whose block table's capacity leaves its bucket.
    """
    if args.kernel != PAGED_KERNEL:
        if args.page_size is not None:
            raise ValueError(f"--page-size is the paged kernel's: add --kernel paged (got --kernel {args.kernel})")
    elif args.page_size is None or args.page_size < 1 or args.page_size % PAGE_SIZE_MULTIPLE:
        raise ValueError(f"--kernel paged needs --page-size N, a positive multiple of {PAGE_SIZE_MULTIPLE} "
                         f"(got {args.page_size})")
    if args.kernel != DENSE and args.like:
        raise ValueError(f"--like reads a GPU's recorded dense tables: it cannot plan a --kernel {args.kernel} sweep")
    if args.kernel == PAGED_KERNEL:
        for w in workloads:
            _check_capacity(w, args.page_size)
    return SweptKernel(args.kernel, args.page_size)


def _check_capacity(workload: Workload, page_size: int) -> None:
    """Raise ValueError unless the block table of ``workload``'s paged layout (kv_len rounded
    up to whole pages) falls in kv_len's bucket: the runtime keys a paged call by that
    capacity, the row's bucket by kv_len (runtime/storage/export.py)."""
    capacity = -(-workload.kv_len // page_size) * page_size
    if pow2_bucket(capacity) != pow2_bucket(workload.kv_len):
        raise ValueError(f"{workload.name}: {workload.kv_len} keys take a block table of {capacity} keys at "
                         f"--page-size {page_size}, another bucket than {workload.kv_len}'s; give kv_len "
                         f"{capacity} or a smaller page size")


def _like_plan(args: argparse.Namespace, workload: Workload, where: dict[str, set[str]],
               hardware: HardwareSpec | None) -> SweepPlan:
    """``workload``'s configs from the recorded space of the GPU ``--like`` names (the folders
    replay reads for it, merged), those ``--where`` excludes left out."""
    known = load_spec(args.like)
    folders = default_replay_dirs(known)
    paths = [path for folder in folders if (path := table_path(folder, workload)).exists()]
    if not paths:
        raise ValueError(f"--like {args.like}: no recorded table of {workload.name} in "
                         f"{', '.join(map(str, folders))} (recorded there: {recorded_workloads(folders) or 'none'})")
    space = _select(where, None, tunables_for(workload))
    selected = set(space)
    rows = []
    for path in paths:
        for m in load_table(path):
            config = validate_config(m.config)  # knobs added since the recording: their implied values
            if config in selected:
                rows.append(dataclasses.replace(m, config=config))
    target = hardware or known  # without a GPU (a dry run) the known GPU's limits stand in
    runnable = [c for c in space if check(c, workload, target).feasible]
    # Sorted by text: the order the recorded H100 sweep was planned in (the sample depends on it).
    return plan_sweep(rows, top_share=args.top_share, sample=args.sample, space=sorted(runnable, key=str),
                      seed=args.seed)


def _print_plans(like: str, plans: dict[Workload, SweepPlan]) -> None:
    for workload, plan in plans.items():
        print(f"flashtune sweep --like {like}: {workload.name}: {len(plan.top)} fastest + {len(plan.sample)} sampled "
              f"+ {len(plan.failed)} it could not run + {len(plan.unrecorded)} of variants it never recorded",
              file=sys.stderr)


def _device_spec() -> HardwareSpec | None:
    """This machine's GPU's spec for the plan's feasibility filter (None without a GPU: the parent
    process never touches CUDA, so it is read by nvidia-smi's name from the shipped specs)."""
    names = gpu_names()
    if not names:
        return None
    for spec in known_specs().values():
        if spec.name == names[0]:
            return spec
    return None


def _check_device(interpret: bool, hardware: HardwareSpec | None) -> None:
    """Refuse a sweep that has nothing to measure on, before the objective's worker starts.

    Raises:
        ValueError: no GPU is visible and the kernel is not interpreted, or the interpreter
            has no GPU and no --hardware to simulate.
    """
    if gpu_names():
        return
    if not interpret:
        raise ValueError("no NVIDIA GPU visible here (nvidia-smi): a sweep measures on a GPU; "
                         "add --interpret --hardware h200 and a float16 workload (B,H,N,D,float16) to run "
                         "the kernel in Triton's CPU interpreter")
    if hardware is None:
        raise ValueError("--interpret without a GPU needs --hardware (a shipped spec such as h200, or a JSON file)")


def _check_interpretable(workloads: list[Workload]) -> None:
    """Refuse bfloat16 under the interpreter: its bf16 dot is wrong (docs/reference.md), so
    every config would be recorded as ``wrong_result``.

    Raises:
        ValueError: naming the bfloat16 workloads and the dtypes the interpreter computes right.
    """
    bf16 = [w.name for w in workloads if w.dtype == "bfloat16"]
    if bf16:
        raise ValueError(f"--interpret: Triton's CPU interpreter computes bfloat16 wrong (every config would be "
                         f"wrong_result): {', '.join(bf16)}; give the workload a float16 or float32 dtype "
                         "(B,H,N,D[,causal],float16)")


#: ``Measurement.source`` of a config run in Triton's CPU interpreter: its time is the CPU's.
INTERPRETED_SOURCE = "interpreted"


class InterpretedObjective:
    """An objective run in Triton's CPU interpreter, its measurements stamped as such.

    The interpreter checks that a config runs and computes the right numbers, but its
    time is the CPU's: the measurement carries no GPU fingerprint (so ``flashtune export``
    never serves it as a GPU's entry), ``hardware`` names the interpreter and the
    simulated GPU, and the versions are this machine's.
    """

    def __init__(self, objective: Objective) -> None:
        self._objective = objective
        self._versions = {"torch": _installed("torch"), "triton": _installed("triton"),
                          "cuda": "none (CPU)", "driver": "none (Triton's CPU interpreter)"}

    def prefetch(self, configs: list[Config], workload: Workload) -> None:
        self._objective.prefetch(configs, workload)

    def evaluate(self, config: Config, workload: Workload) -> Measurement:
        m = self._objective.evaluate(config, workload)
        return dataclasses.replace(m, fingerprint="", source=INTERPRETED_SOURCE, versions=dict(self._versions),
                                   hardware=f"Triton CPU interpreter (simulating {self._objective.hardware.name})")


def _installed(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _default_pool_size() -> int:
    return max(1, min(16, (os.cpu_count() or 2) - 1))

