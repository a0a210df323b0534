"""Static resource model of the forward kernel: what a config needs before it compiles.

Shared memory, fitted to Triton 3.6's own figures on the H200 (BENCHMARKS.md,
"Feasibility model"): with Hopper's wgmma (compute capability 9, BLOCK_M >= 64) the
pipeliner keeps ``num_stages`` buffers of the K and V tiles (BLOCK_N x HEAD_DIM each) plus
one Q tile (BLOCK_M x HEAD_DIM). On the mma.sync path (older GPUs, or BLOCK_M = 32 on
Hopper) it keeps ``num_stages - 1`` K/V buffers plus a BLOCK_N x 64-byte scratch once
pipelined; one stage is one K/V buffer either way.

The decode kernel (``kernel="decode"``) is modelled by the same formulas with its packed
query tile (``block_h`` rows, ``kernels.space.decode_block_h``) in place of BLOCK_M: its
loop is the prefill kernel's (the same K/V buffers per stage). Its mma.sync scratch is
its P tile, 2 x block_h x BLOCK_N bytes, and its register estimate counts the K and V
tiles (fitted to the H200 decode sweep, experiments/data/h200_decode).

The figures hold at every length: a launch with a query or key length of 1 compiles
without Triton's specialization of integers equal to 1 (``launch_support.LengthTwins``),
which built kernels of their own there (up to twice the shared memory, failed passes).

Registers: the fp32 accumulator (BLOCK_M x HEAD_DIM), the fp32 score tile
(BLOCK_M x BLOCK_N) and Q (BLOCK_M x HEAD_DIM, 16-bit) spread over the program's
threads. Past 255 per thread the compiler spills, which is legal but slow.

What a config launches (its variant, its switches, its compile options) is read from its
plan (kernels/launch_plan.py), not from knob values again: the Gluon kernel's consumer
groups are its ``NUM_GROUPS``, the lean overlap its ``OVERLAP``. Rules measured on one
``loads`` value name that value in their messages.
"""

from __future__ import annotations

from collections.abc import Mapping

from flashtune.kernels.config import Value
from flashtune.kernels.launch_plan import LaunchPlan, launch_plan
from flashtune.kernels.space import DECODE_MIN_BLOCK_H, SPECIALIZED_MIN_BLOCK_M, kernel_of, setting

#: The plan's variants that read Q, K, V and O through host-made descriptors (the lean
#: launcher's and the Gluon kernel's).
_HOST_DESCRIPTOR_VARIANTS = ("lean", "oneloop", "gluon")

#: Bytes of an output element: the kernels write fp16/bf16, fp8 inputs included.
OUTPUT_BYTES = 2

MAX_REGISTERS_PER_THREAD = 255
# Registers beyond the tiles: indices, pointers, softmax state, loop bookkeeping.
_REGISTER_OVERHEAD = 40


def query_rows(config: Mapping[str, Value], block_h: int = DECODE_MIN_BLOCK_H) -> int:
    """Rows of a program's query tile: BLOCK_M, or ``block_h`` for a decode config."""
    return block_h if kernel_of(config) == "decode" else int(config["BLOCK_M"])


def uses_wgmma(config: Mapping[str, Value], compute_capability: tuple[int, int],
               block_h: int = DECODE_MIN_BLOCK_H) -> bool:
    """Whether Triton lowers the dots to Hopper's wgmma (a warpgroup needs 64 rows)."""
    return compute_capability[0] == 9 and query_rows(config, block_h) >= 64


def shared_memory_bytes(
    config: Mapping[str, Value],
    *,
    head_dim: int,
    dtype_bytes: int = 2,
    compute_capability: tuple[int, int] = (9, 0),
    block_h: int = DECODE_MIN_BLOCK_H,
) -> int:
    """Predicted shared memory per program in bytes (fp8 configs stage 1-byte tiles).

    ``block_h``: the decode kernel's query-tile rows for the workload (ignored by prefill).
    """
    plan = launch_plan(config)
    if _fp8(plan):
        dtype_bytes = 1
    block_m, block_n = query_rows(config, block_h), int(plan.constexprs["BLOCK_N"])
    stages = max(int(plan.options["num_stages"]), 1)
    warps = int(plan.options["num_warps"])
    if _tma_ws(plan) and warps == 4 and not uses_wgmma(config, compute_capability):
        # Measured on the H200 (Triton 3.6): this loop is not pipelined, its shared memory is
        # the one-stage figure whatever num_stages says.
        stages = 1
    kv_tile = 2 * block_n * head_dim * dtype_bytes
    q_tile = block_m * head_dim * dtype_bytes
    extra = 0
    if plan.variant in _HOST_DESCRIPTOR_VARIANTS:
        # Measured on the H200 (bench_prefill, 2026-12-01): the lean kernel's persistent
        # loop stages O for its descriptor store in a buffer of its own (tiles reuse the
        # pipeline's), and lean_overlap keeps one more K tile in flight. Compiled for sm90
        # (objectives/aot.py, Triton 3.6, 2026-12-03: head dims 64 and 128, BLOCK_M 64-256,
        # BLOCK_N 64 and 128, 2-3 stages, 4 and 8 warps, bf16 and fp8; within 1 KB on each):
        # O's buffer holds the 16-bit output whatever the inputs (fp8 configs asked up to
        # 65 KB more than an 8-bit buffer, past the H200's limit on some); the overlap's
        # extra K tile exists only with a ring to overlap (2+ stages: the H200's 1-stage rows
        # hold none), and at 8 warps on 64 rows it comes with a 64-column slice of K more
        # (BLOCK_N x 64 elements at every head dim: the H200's rows at 64-256, the compiles).
        if plan.constexprs["PERSISTENT"]:
            extra += block_m * head_dim * OUTPUT_BYTES
        if plan.constexprs.get("OVERLAP", False) and stages > 1:
            extra += block_n * head_dim * dtype_bytes
            if warps == 8 and block_m == 64:
                extra += block_n * 64 * dtype_bytes
    if (plan.variant == "oneloop" and plan.constexprs["WARP_SPECIALIZE"] and warps == 4
            and uses_wgmma(config, compute_capability, block_h)):
        # Compiled for sm90 (objectives/aot.py, Triton 3.6, 2026-12-01: bf16 and fp8, head
        # dims 64-256, BLOCK_M 64-256, 1-5 stages; exact on each): the warp-specialized loop
        # at 4 warps keeps one more buffer of max(BLOCK_M, 128) rows x head_dim x 2 bytes,
        # whatever the dtype, and its mbarriers (392-536 bytes seen; 1 KB counted). At 8
        # warps, and at BLOCK_M 32 (no wgmma), the plain figure held or over-predicted.
        extra += max(block_m, 128) * head_dim * 2 + 1024
    if plan.variant == "gluon":
        # Compiled for sm90 (objectives/aot.py, Triton 3.6, 2026-12-02: head dims 64-256, one
        # and two consumer groups, 1-4 stages): exactly Q (every group's rows, reused for the
        # output's TMA store) plus num_stages K and V buffers, plus 252-360 bytes of mbarriers
        # and alignment (512 counted). A persistent grid double-buffers Q (the next tile's
        # loads while this tile's output goes out through its buffer). fp8 (the same compiles,
        # the fp8 kernel): the same sum in 1-byte elements (V^T tiles as large as V's; the
        # output goes out by pointer stores).
        q_buffers = 2 if plan.constexprs["PERSISTENT"] else 1
        return q_buffers * q_tile + stages * kv_tile + 512
    if stages == 1 or uses_wgmma(config, compute_capability, block_h):
        return q_tile + stages * kv_tile + extra
    # The scratch of the mma.sync path: for the decode kernel it is its 16-bit P tile
    # (block_h x BLOCK_N; exact on every config of the H200 decode sweep); the prefill
    # fit (BLOCK_M 32 on Hopper, 64 bytes a key) is the same at 32 rows.
    scratch = 2 * block_m * block_n if kernel_of(config) == "decode" else block_n * 64
    return q_tile + (stages - 1) * kv_tile + scratch + extra


def registers_per_thread(config: Mapping[str, Value], *, head_dim: int, dtype_bytes: int = 2,
                         block_h: int = DECODE_MIN_BLOCK_H) -> int:
    """Predicted 32-bit registers per thread (before the compiler's cap)."""
    plan = launch_plan(config)
    if _fp8(plan):
        dtype_bytes = 1
    block_m, block_n = query_rows(config, block_h), int(plan.constexprs["BLOCK_N"])
    threads = 32 * int(plan.options["num_warps"])
    if plan.variant == "gluon":
        # Each consumer warpgroup holds its share of the rows; the producer's warp holds 24.
        block_m //= int(plan.constexprs["NUM_GROUPS"])
    acc = block_m * head_dim  # fp32
    scores = block_m * block_n  # fp32
    if plan.constexprs.get("OVERLAP", False):
        scores *= 2  # the next block's scores are live during this block's softmax
    q = block_m * head_dim * dtype_bytes // 4
    if plan.variant == "gluon":
        # Q stays in shared memory (the QK^T's A operand); P is held in 16 bits as the PV
        # product's A operand beside the fp32 scores.
        q = block_m * block_n * dtype_bytes // 4
    if kernel_of(config) == "decode":
        # A decode tile is short (block_h rows), so the K and V operands held in registers
        # for the dots weigh as much as the accumulator: without them the H200 sweep's
        # spilling configs (BLOCK_N 128 at 2 warps, 255 registers) were predicted at 120.
        q += 2 * block_n * head_dim * dtype_bytes // 4
    return (acc + scores + q) // threads + _REGISTER_OVERHEAD


#: Messages of errors Triton's compiler passes raise as plain RuntimeErrors (seen on the
#: H200: the warp-specialization pass failing on some configs).
COMPILER_ERROR_MARKERS = ("PassManager::run failed", "MLIR", "LLVM ERROR", "ptxas")


def known_failure(config: Mapping[str, Value], compute_capability: tuple[int, int] = (9, 0)) -> str:
    """Why ``config`` cannot run correctly whatever the workload ('' when nothing is known).

    Measured, not guessed: each rule names where its failure was recorded (or, for a
    combination a kernel does not implement, why).
    """
    plan = launch_plan(config)
    if _tma_ws(plan) and int(plan.options["num_warps"]) == 4 and uses_wgmma(config, compute_capability):
        # Every such config of the H200 sweep at commit 411ddd8 (Triton 3.6.0, 2026-12-01):
        # 90 a workload, all 7 suite workloads; BLOCK_M 32 (no wgmma) compiled.
        return ("Triton 3.6's warp-specialization pass fails on the tma_ws kernel at 4 warps with "
                "BLOCK_M >= 64 (RuntimeError: PassManager::run failed, every such config on the H200)")
    if plan.variant == "oneloop" and plan.constexprs["PERSISTENT"]:
        # Not implemented (kernels/_flash_fwd_oneloop.py launches one program a tile; whether
        # a loop over tiles around its key loop still warp-specializes was not tried).
        return "loads='lean_ws_oneloop' runs one program a tile: it has no persistent grid"
    if (plan.variant == "oneloop" and int(plan.constexprs["BLOCK_M"]) >= SPECIALIZED_MIN_BLOCK_M
            and int(plan.options["num_stages"]) >= 3):
        # The H200, Triton 3.6.0, 2026-12-02 (docs/lab/gpu/merged-2026-12-02b.sh,
        # tests/gpu/test_oneloop_gpu.py::test_deeper_rings_on_long_keys): non-finite outputs at
        # 128x64 with 3 and 4 stages (bf16 and fp8) and 128x128 with 3 (fp8) on 8192 keys,
        # where 2 stages matched the reference. The H100, 2026-12-07 (docs/lab/gpu/oneloop_probe.py,
        # lab 2026-12-07): NaNs at 3 and 4 stages on every length from 1,024 to 16,384 keys,
        # causal or not, a count that changes from one launch to the next on the same inputs;
        # 2 stages clean on all; memcheck, racecheck and synccheck report nothing. A race
        # between the specialized partitions over the deeper ring's buffers, which the
        # sanitizer's tools do not watch (asynchronous copies and MMAs): fenced at every length.
        return ("loads='lean_ws_oneloop' with a K/V ring of 3 or more stages gives NaN outputs at any length "
                "(H100 and H200, Triton 3.6's warp-specialized loop, 128-row tiles; a race the sanitizer does "
                "not see): 1 or 2 stages only")
    if plan.constexprs.get("ZIGZAG") and plan.variant != "gluon":
        # Not written: the zigzag order of the persistent programs is the Gluon kernel's (the
        # other kernels would run their persistent grid and time it twice).
        return "grid='persistent_zigzag' is the Gluon kernel's (loads gluon_*): the other kernels have no zigzag order"
    if plan.variant == "gluon":
        failure = _gluon_failure(config, compute_capability)
        if failure:
            return failure
    if _tma_ws(plan) and plan.constexprs["PERSISTENT"] and _fp8(plan):
        # Seen once, on the H200 (Triton 3.6.0, 2026-12-01, tests/gpu/test_kernel_gpu.py's
        # odd-length sample: BLOCK_M 32, BLOCK_N 64, 4 warps, 5 stages): the fp8 V^T descriptor
        # made per tile inside the persistent loop stops the pipeliner; the bf16 grown sweep
        # compiled every other tma_ws persistent config. Refused as a family until measured.
        return ("Triton 3.6's pipeliner fails on the fp8 tma_ws kernel with a persistent grid "
                "('ttng.tensormap_create' op pipeliner doesn't know how to predicate this op: LLVM ERROR)")
    return ""


def _gluon_failure(config: Mapping[str, Value], compute_capability: tuple[int, int]) -> str:
    """Why a config of the Gluon kernel (``loads`` gluon_*) cannot run ('' when it can)."""
    loads, plan = setting(config, "loads"), launch_plan(config)
    if compute_capability[0] != 9:
        # Written with Hopper's warpgroup MMA (wgmma), which no other generation has.
        return f"loads={loads!r} is written for Hopper's wgmma: needs compute capability 9.x"
    if _fp8(plan) and plan.constexprs["PERSISTENT"]:
        # Not written: the persistent loop stages its output in Q's buffer for a TMA store (the
        # masked pointer store spilled there), and an 8-bit Q buffer is too small for it.
        return f"loads={loads!r} with fp8 has no persistent grid (Q's 8-bit buffer cannot stage the output)"
    groups = int(plan.constexprs["NUM_GROUPS"])
    rows = int(plan.constexprs["BLOCK_M"]) // groups
    if rows < 16 * int(plan.options["num_warps"]):
        # A warpgroup MMA spreads its rows 16 a warp (kernels/gluon.py refuses the variant).
        return (f"loads={loads!r}: a consumer group of {config['num_warps']} warps needs at least "
                f"{16 * int(config['num_warps'])} rows, BLOCK_M={config['BLOCK_M']} gives it {rows}")
    if groups == 2 and int(plan.options["num_warps"]) == 8:
        # Compiled for sm90 (objectives/aot.py, 2026-12-02): 256x128 at D128 got 96 registers a
        # thread and 462 spilled words; two 8-warp consumer groups and the producer leave about
        # 100 registers a thread, too few for any tile.
        return (f"loads={loads!r} with two 8-warp consumer groups leaves about 100 registers a thread "
                "(462 spills at 256x128, D128, compiled for sm90)")
    return ""


def _fp8(plan: LaunchPlan) -> bool:
    """Whether the kernel reads e4m3 inputs (the decode kernel has no fp8 path)."""
    return bool(plan.constexprs.get("FP8", False))


def _tma_ws(plan: LaunchPlan) -> bool:
    """Whether the forward kernel runs its warp-specialized TMA loop (``loads="tma_ws"``),
    the one the measured rules of that loop are about."""
    return plan.variant == "forward" and bool(plan.constexprs["WARP_SPECIALIZE"])
