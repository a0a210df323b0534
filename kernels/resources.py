"""Static resource model of the forward kernel: what a config needs before it compiles.

Shared memory: Triton's pipeliner keeps ``num_stages`` buffers of the K and V tiles
(BLOCK_N x HEAD_DIM each) and one Q tile (BLOCK_M x HEAD_DIM). REFERENCE.md found this
exact on the H200 for stages >= 2; the GPU sweep checks the model against Triton's own
``OutOfResources`` outcome on the whole space (BENCHMARKS.md, "Feasibility model").

Registers: the fp32 accumulator (BLOCK_M x HEAD_DIM), the fp32 score tile
(BLOCK_M x BLOCK_N) and Q (BLOCK_M x HEAD_DIM, 16-bit) spread over the program's
threads. Past 255 per thread the compiler spills, which is legal but slow.
"""

from __future__ import annotations

from collections.abc import Mapping

from flashtune.kernels.config import Value

MAX_REGISTERS_PER_THREAD = 255
# Registers beyond the tiles: indices, pointers, softmax state, loop bookkeeping.
_REGISTER_OVERHEAD = 40


def shared_memory_bytes(config: Mapping[str, Value], *, head_dim: int, dtype_bytes: int = 2) -> int:
    """Predicted shared memory per program in bytes."""
    block_m, block_n = int(config["BLOCK_M"]), int(config["BLOCK_N"])
    stages = max(int(config["num_stages"]), 1)
    kv_tiles = stages * 2 * block_n * head_dim * dtype_bytes
    q_tile = block_m * head_dim * dtype_bytes
    return kv_tiles + q_tile


def registers_per_thread(config: Mapping[str, Value], *, head_dim: int, dtype_bytes: int = 2) -> int:
    """Predicted 32-bit registers per thread (before the compiler's cap)."""
    block_m, block_n = int(config["BLOCK_M"]), int(config["BLOCK_N"])
    threads = 32 * int(config["num_warps"])
    acc = block_m * head_dim  # fp32
    scores = block_m * block_n  # fp32
    q = block_m * head_dim * dtype_bytes // 4
    return (acc + scores + q) // threads + _REGISTER_OVERHEAD
