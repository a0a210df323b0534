"""Prefill exploration: where the TMA path loses to cuDNN, measured variant by variant.

One GPU run, side by side on each workload: torch SDPA (cuDNN, flash), the project's kernel
(``loads`` tma / tma_ws / pointer at recorded winners and at the issue's equal-tile
config), and the lean descriptor kernel (``kernels/_flash_fwd_lean.py``) with one suspected
cost switched at a time: descriptor layout (per-head made per tile, flat, rank-4), made on
the host or once per program, Q/O through descriptors, the scale's place, lazy rescaling,
persistent grid, tile order, warp specialization at 4 and 8 warps and 1-3 stages; then a
few tiles around the recorded winners for the leanest variants.

Every candidate is checked against a float32 reference (relative error; NaN never passes)
before it is timed (``do_bench`` median, L2 flushed). Compilation runs ahead in a spawn
pool (it is nearly all of the cost). Each result is appended to ``$OUT/bench_prefill.jsonl``
as it comes; at the end the best few of each workload are re-timed interleaved with the
peers and a short table is printed.

    python docs/lab/tools/bench_prefill.py [--budget-s 480] [--only NAME]

GPU only; imports nothing beyond torch, triton and flashtune's kernel/objective modules.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing
import os
import statistics
import time
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

from flashtune.kernels._flash_fwd import attention_forward_kernel
from flashtune.kernels.attention import compile_options, kernel_arguments, launch
from flashtune.kernels.lean import LeanVariant, launch_lean
from flashtune.kernels.reference import reference_attention, relative_error
from flashtune.kernels.resources import COMPILER_ERROR_MARKERS
from flashtune.kernels.space import validate_config

#: The workloads the exploration covers (name: batch, heads, len, head_dim, causal).
WORKLOADS = {
    "b4_h32_n4096_d128_full": (4, 32, 4096, 128, False),
    "b4_h32_n4096_d128_causal": (4, 32, 4096, 128, True),
    "b2_h16_n8192_d256_full": (2, 16, 8192, 256, False),
    "b16_h16_n1024_d64_full": (16, 16, 1024, 64, False),
    "b8_h16_n2048_d64_causal": (8, 16, 2048, 64, True),
}

#: (BLOCK_M, BLOCK_N, num_warps, num_stages): the ablation's reference tiles (the issue's
#: equal-tile config and the recorded winner per head dim), then the tile sweep's tiles.
ABLATION_TILES = {
    128: [(64, 128, 4, 1), (128, 128, 8, 3)],
    256: [(128, 64, 8, 2), (64, 128, 4, 1)],
    64: [(64, 64, 4, 3), (128, 64, 8, 3)],
}
SWEEP_TILES = {
    128: [(64, 128, 4, 1), (64, 128, 4, 2), (128, 64, 8, 2), (128, 64, 8, 3), (128, 128, 8, 2),
          (128, 128, 8, 3), (64, 64, 4, 3)],
    256: [(128, 64, 8, 2), (128, 64, 8, 1), (64, 64, 4, 2), (64, 128, 4, 1), (128, 128, 8, 1),
          (64, 64, 4, 3)],
    64: [(64, 64, 4, 3), (64, 64, 4, 2), (128, 64, 8, 3), (128, 128, 8, 2), (64, 128, 4, 2),
         (128, 64, 4, 3), (128, 128, 8, 3)],
}
#: Project-kernel configs: the issue's equal-tile config and the recorded bests per part
#: (shared/h200-grown README, experiments/data/h200).
PROJECT_CONFIGS = {
    128: [("tma", "tiles", (64, 128, 4, 1)), ("tma", "tiles", (128, 128, 8, 3)),
          ("tma_ws", "tiles", (128, 128, 8, 3)), ("pointer", "tiles", (128, 64, 8, 3))],
    256: [("tma", "persistent", (128, 64, 8, 2)), ("tma", "tiles", (128, 64, 8, 2)),
          ("tma_ws", "tiles", (128, 64, 8, 2))],
    64: [("pointer", "tiles", (64, 64, 4, 3)), ("pointer", "tiles", (128, 64, 8, 3)),
         ("tma", "tiles", (64, 64, 4, 3)), ("tma", "tiles", (128, 64, 8, 3))],
}


#: Where inputs live; the CPU smoke test (tests/experiments) sets "cpu" under the interpreter.
DEVICE = "cuda"


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One thing to time: the project's kernel with a config, or the lean kernel with a variant."""

    kind: str  # "project" or "lean"
    group: str  # which question it answers: ablation, sweep, ws, project
    params: tuple  # project: (loads, grid, tile); lean: LeanVariant fields as a sorted tuple

    @property
    def label(self) -> str:
        if self.kind == "project":
            loads, grid, (bm, bn, w, s), *extra = self.params
            knobs = "".join(f" {k}={v}" for k, v in (extra[0] if extra else ()))
            return f"project {loads}/{grid} {bm}x{bn} {w}w {s}st{knobs}"
        return "lean " + self.variant().label()

    def variant(self):

        return LeanVariant(**dict(self.params))

    def config(self):

        loads, grid, (bm, bn, w, s), *extra = self.params
        return validate_config({"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": s,
                                "loads": loads, "grid": grid, "use_fp8": False, **dict(extra[0] if extra else ())})

    @property
    def tolerance(self) -> float:
        """bf16's budget, or fp8's own (objectives.bench.FP8_TOLERANCE)."""
        fp8 = self.kind == "project" and len(self.params) > 3 and dict(self.params[3]).get("use_fp8")
        return 0.1 if fp8 else 2e-2


def _lean(group: str, tile: tuple[int, int, int, int], **switches: Any) -> Candidate:
    bm, bn, w, s = tile
    fields = {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": s, **switches}
    return Candidate("lean", group, tuple(sorted(fields.items())))


#: The ablation ladder: each row switches one suspected cost relative to its neighbour.
LADDER = [
    dict(desc="head", host_desc=False, q_desc=False, scale_early=True),  # ~ the project's tma kernel
    dict(desc="head", host_desc=False, q_desc=False),  # scale folded into exp2's FMA
    dict(desc="head", host_desc=False, q_desc=True),  # + Q and O through descriptors
    dict(desc="flat", host_desc=False, q_desc=True),  # flat, made once per program
    dict(desc="flat", host_desc=True, q_desc=True),  # flat, made on the host (the minimal kernel)
    dict(desc="flat", host_desc=True, q_desc=False),  # ... with Q by pointers
    dict(desc="rank4", host_desc=True, q_desc=True),  # 4-D: clips per head, any strides
    dict(desc="rank4", host_desc=False, q_desc=True),
    dict(desc="flat", host_desc=True, q_desc=True, lazy_rescale=True),
    dict(desc="flat", host_desc=True, q_desc=True, overlap=True),  # next Q @ K^T under this softmax
    dict(desc="flat", host_desc=True, q_desc=True, persistent=True),
    dict(desc="rank4", host_desc=True, q_desc=True, persistent=True),
    dict(desc="flat", host_desc=True, q_desc=True, persistent=True, programs_per_sm=2),
]
CAUSAL_LADDER = [
    dict(desc="flat", host_desc=True, q_desc=True, bh_major=True),
    dict(desc="flat", host_desc=True, q_desc=True, persistent=True, bh_major=True),
]
LEANEST = [dict(desc="flat", host_desc=True, q_desc=True), dict(desc="rank4", host_desc=True, q_desc=True),
           dict(desc="flat", host_desc=True, q_desc=True, lazy_rescale=True),
           dict(desc="flat", host_desc=True, q_desc=True, overlap=True)]


def candidates(head_dim: int, causal: bool) -> list[Candidate]:
    """Everything to time on one workload, deduplicated, in a stable order."""
    out: list[Candidate] = []
    for loads, grid, tile in PROJECT_CONFIGS[head_dim]:
        out.append(Candidate("project", "project", (loads, grid, tile)))
    # The op's new path (kernels.attention with loads lean/lean_ws) at the ablation's first
    # tile: the same binary as the matching lean variant, through the op's launcher; and fp8
    # (quantization included in the time) to show the path keeps it.
    tile = ABLATION_TILES[head_dim][0]
    for loads, extra in (("lean", ()), ("lean_overlap", ()), ("lean", (("use_fp8", True),)),
                         ("lean_overlap", (("use_fp8", True),)), ("lean_ws", ()),
                         ("lean", (("tile_order", "longest_first"),))):
        out.append(Candidate("project", "project", (loads, "tiles", tile, extra)))
    for tile in ABLATION_TILES[head_dim]:
        for switches in LADDER + (CAUSAL_LADDER if causal else []):
            out.append(_lean("ablation", tile, **switches))
    for tile in SWEEP_TILES[head_dim]:
        for switches in LEANEST:
            out.append(_lean("sweep", tile, **switches))
    # Warp specialization: 4 and 8 warps, 1-3 stages, at the two tiles it can use.
    ws_tiles = [(128, 128), (64, 128)] if head_dim <= 128 else [(128, 64), (64, 64)]
    for bm, bn in ws_tiles:
        for warps in (4, 8):
            for stages in (1, 2, 3):
                out.append(_lean("ws", (bm, bn, warps, stages), desc="flat", host_desc=True, q_desc=True,
                                 warp_specialize=True))
    wide = (128, 128 if head_dim <= 128 else 64, 8, 2)
    out.append(_lean("ws", wide, desc="flat", host_desc=True, q_desc=True, warp_specialize=True, lazy_rescale=True))
    out.append(_lean("ws", wide, desc="flat", host_desc=True, q_desc=True, warp_specialize=True, overlap=True))
    out.append(_lean("ws", wide, desc="rank4", host_desc=True, q_desc=True, warp_specialize=True))
    # Why the project's tma_ws fails at 4 warps: per-head descriptors, Q by pointers or not.
    narrow = (64, 128 if head_dim <= 128 else 64, 4, 2)
    out.append(_lean("ws", narrow, desc="head", host_desc=False, q_desc=False, warp_specialize=True))
    out.append(_lean("ws", narrow, desc="head", host_desc=False, q_desc=True, warp_specialize=True))
    seen, unique = set(), []
    for c in out:
        key = (c.kind, c.params)
        if key not in seen:
            seen.add(key)
            unique.append(c)
    return unique


def _shapes(name: str) -> tuple[tuple[int, ...], bool]:
    batch, heads, length, head_dim, causal = WORKLOADS[name]
    return (batch, heads, length, head_dim), causal


def _runner(c: Candidate, q, k, v, out, causal: bool) -> Callable[[], Any]:
    """A zero-argument launch of candidate ``c`` into ``out``."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    if c.kind == "project":

        config = c.config()
        return lambda: launch(q, k, v, out, causal=causal, scale=scale, config=config)

    variant = c.variant()
    return lambda: launch_lean(q, k, v, out, causal=causal, scale=scale, variant=variant)


def _compile(c: Candidate, name: str) -> tuple[str, float]:
    """Pool process: compile ``c`` for workload ``name`` (warm-up, no launch); (error, s)."""

    started = time.perf_counter()
    try:
        shape, causal = _shapes(name)
        # Uninitialised buffers of the real shape: Triton specializes on strides and
        # lengths (divisibility by 16), so the binary is the one the timed launch uses.
        q, k, v, out = (torch.empty(shape, device=DEVICE, dtype=torch.bfloat16) for _ in range(4))
        if c.kind == "project":

            config = c.config()
            args = kernel_arguments(q, k, v, out, q, stride_q=q.stride()[:3], stride_k=k.stride()[:3],
                                    stride_v=v.stride(), stride_o=out.stride()[:3], batch=shape[0],
                                    q_heads=shape[1], kv_heads=shape[1], q_len=shape[2], kv_len=shape[2],
                                    scale=1 / math.sqrt(shape[3]))
            attention_forward_kernel.warmup(*args, grid=(1,), **compile_options(config, head_dim=shape[3],
                                                                                 causal=causal))
        else:

            launch_lean(q, k, v, out, causal=causal, scale=1 / math.sqrt(shape[3]), variant=c.variant(),
                        warmup=True)
    except Exception as exc:  # reported; the main process reproduces it
        return f"{type(exc).__name__}: {str(exc)[:300]}", time.perf_counter() - started
    return "", time.perf_counter() - started


def _tflops(name: str, ms: float) -> float:
    (batch, heads, length, head_dim), causal = _shapes(name)
    flops = 4.0 * batch * heads * length * length * head_dim * (0.5 if causal else 1.0)
    return flops / (ms * 1e-3) / 1e12 if ms and math.isfinite(ms) else 0.0


def _sdpa(backend_name: str, q, k, v, causal: bool) -> Callable[[], Any]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"sdpa_cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa_flash": SDPBackend.FLASH_ATTENTION}[backend_name]

    def run() -> None:
        with sdpa_kernel([backend]):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return run


def _time_ms(fn: Callable[[], Any], rep: int = 100) -> float:
    """Median milliseconds of ``fn`` (Triton's do_bench: CUDA events, L2 flushed)."""
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=rep, return_mode="median"))


def _clock() -> dict[str, float]:
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return {"sm_clock_mhz": float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
                "temperature_c": float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))}
    except Exception:  # optional telemetry
        return {}


def main(argv: list[str] | None = None) -> int:
    """Plan, compile ahead, measure every candidate, re-time the best, print the tables."""
    args = _parse_args(argv)
    names = [n for n in WORKLOADS if not args.only or n in args.only]
    plan = {n: candidates(_shapes(n)[0][3], _shapes(n)[1]) for n in names}
    if args.plan:
        _print_plan(plan)
        return 0
    run = _Run(args=args, started=time.perf_counter(), out_dir=Path(os.environ.get("OUT", "out")),
               results={n: {} for n in names})  # every workload a row of the tables, measured or not
    run.out_dir.mkdir(parents=True, exist_ok=True)
    device_name = torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE
    print(f"{device_name} | torch {torch.__version__} | "
          f"{sum(map(len, plan.values()))} candidates on {len(names)} workloads", flush=True)
    pool = ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) if args.jobs > 0 else None
    futures = {(n, c): pool.submit(_compile, c, n) for n in names for c in plan[n]} if pool is not None else {}
    with run.log_path.open("a") as log:
        for n in names:
            if not _explore(run, n, plan[n], futures, log):
                break
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)
    summary = [_retime(run, n) for n in names]
    (run.out_dir / "bench_prefill_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    _print_ablation(names, run.results)
    _print_summary(summary)
    print(f"elapsed {time.perf_counter() - run.started:.0f} s; log {run.log_path}")
    return 0


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=470.0,
                        help="stop starting new candidates after this many seconds (the table still prints)")
    parser.add_argument("--only", action="append", default=[], help="workload names (default: all five)")
    parser.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1), help="compile processes")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the final re-timing")
    parser.add_argument("--top", type=int, default=4, help="candidates per workload in the final re-timing")
    parser.add_argument("--plan", action="store_true", help="print the candidates and exit (no GPU needed)")
    return parser.parse_args(argv)


def _print_plan(plan: dict[str, list[Candidate]]) -> None:
    for n, planned in plan.items():
        print(f"{n}: {len(planned)} candidates")
        for c in planned:
            print(f"  [{c.group}] {c.label}")


@dataclasses.dataclass
class _Run:
    """What the steps of one run share: its options and clock, where it writes, what it found."""

    args: argparse.Namespace
    started: float
    out_dir: Path
    #: workload -> label -> the row logged for it (peers included).
    results: dict[str, dict[str, dict]] = dataclasses.field(default_factory=dict)
    #: workload -> label -> a callable that runs it again (what ran correctly).
    runners: dict[str, dict[str, Callable]] = dataclasses.field(default_factory=dict)
    context_lost: bool = False

    @property
    def log_path(self) -> Path:
        return self.out_dir / "bench_prefill.jsonl"

    def out_of_time(self, grace_s: float = 0.0) -> bool:
        return time.perf_counter() - self.started > self.args.budget_s + grace_s


def _explore(run: _Run, n: str, planned: list[Candidate], futures: dict[tuple[str, Candidate], Future],
             log: Any) -> bool:
    """The first pass on workload ``n``: the peers, then every candidate checked and timed,
    each row logged as it comes. False when the run must stop (out of time, context lost)."""
    shape, causal = _shapes(n)
    gen = torch.Generator(device=DEVICE).manual_seed(1234)
    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float16  # the interpreter's bf16 dot is wrong
    q, k, v = (torch.randn(shape, generator=gen, device=DEVICE, dtype=torch.float32).to(dtype) for _ in range(3))
    ref = reference_attention(q, k, v, causal=causal)
    out = torch.empty_like(q)
    results, runners = run.results.setdefault(n, {}), run.runners.setdefault(n, {})
    _time_peers(n, q, k, v, causal, results, runners)
    for c in planned:
        if run.out_of_time():
            return False
        try:
            compile_error, compile_s = futures[(n, c)].result(timeout=120) if (n, c) in futures else ("", math.nan)
        except Exception as exc:  # a hung or broken compile is this candidate's row
            compile_error, compile_s = f"pool: {type(exc).__name__}: {exc}", math.nan
        row: dict[str, Any] = {"workload": n, "label": c.label, "group": c.group, "kind": c.kind,
                               "params": dict(c.params) if c.kind == "lean" else list(c.params),
                               "compile_s": compile_s}
        if any(marker in compile_error for marker in COMPILER_ERROR_MARKERS):
            # Triton's compiler refused it in the pool: recompiling here would only say so again.
            row.update(status="compile_error", error=compile_error)
            results[c.label] = row
            _log_row(log, row)
            print(f"  compile_error  {c.label}  [{compile_error[:90]}]", flush=True)
            continue
        fn = _check_and_time(c, n, q, k, v, out, ref, causal, row, compile_error)
        if fn is not None:
            runners[c.label] = fn
        if row.get("context_lost"):
            print(f"  CUDA context lost at {c.label}: {row['error'][:200]}", flush=True)
            _log_row(log, row)
            run.context_lost = True
            return False
        row.update(_clock())
        results[c.label] = row
        _log_row(log, row)
        shown = f"{row['tflops']:6.0f}" if row["status"] == "ok" else f"{row['status']:>6}"
        print(f"  {shown}  {c.label}" + (f"  [{row.get('error', '')[:90]}]" if row["status"] == "error" else ""),
              flush=True)
    return True


def _time_peers(n: str, q, k, v, causal: bool, results: dict[str, dict],
                runners: dict[str, Callable]) -> None:
    """torch SDPA's cuDNN and flash backends on workload ``n`` (inf where one does not run)."""
    for peer in ("sdpa_cudnn", "sdpa_flash"):
        fn = _sdpa(peer, q, k, v, causal)
        try:
            ms = _time_ms(fn)
        except RuntimeError as exc:  # a backend that does not take this shape
            print(f"  {peer} unavailable: {str(exc).splitlines()[0][:120]}")
            ms = math.inf
        results[peer] = {"label": peer, "group": "peer", "status": "ok", "ms": ms, "tflops": _tflops(n, ms)}
        if math.isfinite(ms):
            runners[peer] = fn
    print(f"\n== {n}: cuDNN {results['sdpa_cudnn']['tflops']:.0f}, "
          f"flash {results['sdpa_flash']['tflops']:.0f} TFLOP/s", flush=True)


def _check_and_time(c: Candidate, n: str, q, k, v, out, ref, causal: bool,
                    row: dict[str, Any], compile_error: str) -> Callable | None:
    """Run candidate ``c`` once against the reference, then time it; the outcome goes into
    ``row`` (``context_lost`` set when the CUDA context cannot be trusted any more). Returns
    the runner of a candidate that computed the right numbers."""
    try:
        fn = _runner(c, q, k, v, out, causal)
        out.fill_(float("nan"))  # poisoned: every element must be written
        fn()
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        err = relative_error(out, ref)
        row["rel_error"] = err
        if not err < c.tolerance:
            row["status"] = "wrong_result"
            return None
        ms = _time_ms(fn)
        row.update(status="ok", ms=ms, tflops=_tflops(n, ms))
        return fn
    except Exception as exc:  # a config that cannot compile or launch is its row
        message = str(exc)
        compiler = any(marker in message for marker in COMPILER_ERROR_MARKERS)
        row["status"] = ("out_of_resources" if type(exc).__name__ == "OutOfResources"
                         else "compile_error" if compiler else "error")
        row["error"] = f"{type(exc).__name__}: {message[:400]}"
        if compile_error:
            row["pool_error"] = compile_error
        if "illegal" in message.lower() or "CUDA error" in message:
            row["context_lost"] = True
        return None


def _log_row(log: Any, row: dict[str, Any]) -> None:
    log.write(json.dumps(row) + "\n")
    log.flush()


def _retime(run: _Run, n: str) -> dict[str, Any]:
    """The best few of workload ``n`` re-timed interleaved with the peers (the first pass's
    figures when no time or no CUDA context is left)."""
    results, runners = run.results.get(n, {}), run.runners.get(n, {})
    ok = sorted((r for r in results.values() if r["status"] == "ok" and r["group"] != "peer"),
                key=lambda r: -r["tflops"])
    best_project = next((r["label"] for r in ok if _is_old(r["label"])), None)
    best_new = next((r["label"] for r in ok if not _is_old(r["label"])), None)
    chosen = [r["label"] for r in ok[: run.args.top]]
    chosen += [lbl for lbl in (best_project, best_new) if lbl and lbl not in chosen]
    chosen += ["sdpa_cudnn", "sdpa_flash"]
    samples: dict[str, list[float]] = {lbl: [] for lbl in chosen if lbl in runners}
    if not run.context_lost and not run.out_of_time(grace_s=60):
        for _ in range(run.args.rounds):
            for lbl in samples:
                samples[lbl].append(_time_ms(runners[lbl], rep=60))
    retimed = {lbl: _tflops(n, statistics.median(ms)) for lbl, ms in samples.items() if ms}
    if not retimed:
        retimed = {lbl: results[lbl].get("tflops", 0.0) for lbl in chosen if lbl in results}
    return {"workload": n, "retimed": retimed, "best_project": best_project,
            "first_pass": {lbl: r.get("tflops", 0.0) for lbl, r in results.items()}}


def _print_summary(summary: list[dict[str, Any]]) -> None:
    """The re-timed table: the best new and old kernel against cuDNN and flash, as ratios."""
    print("\n| workload | best new (lean kernel, re-timed) | TFLOP/s | best old kernel | cuDNN | flash | new/cuDNN | old/cuDNN |")
    print("|---|---|---|---|---|---|---|---|")
    ratios = []
    for s in summary:
        r = s["retimed"]
        lean = max((lbl for lbl in r if lbl not in ("sdpa_cudnn", "sdpa_flash") and not _is_old(lbl)),
                   key=r.get, default=None)
        cudnn = r.get("sdpa_cudnn", 0.0)
        proj = r.get(s["best_project"] or "", 0.0)
        lean_t = r.get(lean, 0.0) if lean else 0.0
        if cudnn and lean_t:
            ratios.append(lean_t / cudnn)
        print(f"| {s['workload']} | {lean} | {lean_t:.0f} | {proj:.0f} | {cudnn:.0f} | {r.get('sdpa_flash', 0):.0f} | "
              f"{lean_t / cudnn if cudnn else 0:.2f}x | {proj / cudnn if cudnn else 0:.2f}x |")
    if ratios:
        print(f"geomean best new / cuDNN: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}x")


def _is_old(label: str) -> bool:
    """Whether a candidate runs the project's kernel as recorded (loads pointer/tma/tma_ws)."""
    return label.startswith(("project pointer/", "project tma/", "project tma_ws/"))


def _print_ablation(names: list[str], results: dict[str, dict[str, dict]]) -> None:
    """The ablation ladder at each workload's tiles, TFLOP/s of the first pass (one column per tile)."""
    columns = [(n, tile) for n in names for tile in ABLATION_TILES[_shapes(n)[0][3]]]
    print("\n| switches | " + " | ".join(f"{n.replace('_bfloat16', '')} {t[0]}x{t[1]} {t[2]}w {t[3]}st"
                                        for n, t in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for switches in LADDER + CAUSAL_LADDER:
        cells = []
        for n, tile in columns:
            label = _lean("ablation", tile, **switches).label
            row = results[n].get(label)
            cells.append("" if row is None else (f"{row['tflops']:.0f}" if row["status"] == "ok" else row["status"]))
        name = " ".join(label.split()[4:])  # the label without "lean" and the tile
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("| cuDNN | " + " | ".join(f"{results[n].get('sdpa_cudnn', {}).get('tflops', 0):.0f}" for n, _ in columns) + " |")


if __name__ == "__main__":
    raise SystemExit(main())
