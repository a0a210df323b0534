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

Registers: the fp32 accumulator (BLOCK_M x HEAD_DIM), the fp32 score tile
(BLOCK_M x BLOCK_N) and Q (BLOCK_M x HEAD_DIM, 16-bit) spread over the program's
threads. Past 255 per thread the compiler spills, which is legal but slow.
"""

from __future__ import annotations

from collections.abc import Mapping

from flashtune.kernels.config import Value
from flashtune.kernels.space import DECODE_MIN_BLOCK_H, kernel_of

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
    if config.get("use_fp8"):
        dtype_bytes = 1
    block_m, block_n = query_rows(config, block_h), int(config["BLOCK_N"])
    stages = max(int(config["num_stages"]), 1)
    kv_tile = 2 * block_n * head_dim * dtype_bytes
    q_tile = block_m * head_dim * dtype_bytes
    if stages == 1 or uses_wgmma(config, compute_capability, block_h):
        return q_tile + stages * kv_tile
    # The scratch of the mma.sync path: for the decode kernel it is its 16-bit P tile
    # (block_h x BLOCK_N; exact on every config of the H200 decode sweep); the prefill
    # fit (BLOCK_M 32 on Hopper, 64 bytes a key) is the same at 32 rows.
    scratch = 2 * block_m * block_n if kernel_of(config) == "decode" else block_n * 64
    return q_tile + (stages - 1) * kv_tile + scratch


def registers_per_thread(config: Mapping[str, Value], *, head_dim: int, dtype_bytes: int = 2,
                         block_h: int = DECODE_MIN_BLOCK_H) -> int:
    """Predicted 32-bit registers per thread (before the compiler's cap)."""
    if config.get("use_fp8"):
        dtype_bytes = 1
    block_m, block_n = query_rows(config, block_h), int(config["BLOCK_N"])
    threads = 32 * int(config["num_warps"])
    acc = block_m * head_dim  # fp32
    scores = block_m * block_n  # fp32
    q = block_m * head_dim * dtype_bytes // 4
    if kernel_of(config) == "decode":
        # A decode tile is short (block_h rows), so the K and V operands held in registers
        # for the dots weigh as much as the accumulator: without them the H200 sweep's
        # spilling configs (BLOCK_N 128 at 2 warps, 255 registers) were predicted at 120.
        q += 2 * block_n * head_dim * dtype_bytes // 4
    return (acc + scores + q) // threads + _REGISTER_OVERHEAD
