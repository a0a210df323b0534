"""2026-12-07 lab probe: transformers' generate_batch with the varlen kernel's untimed launch options on
beside the op as it ships (``op``: one query head a tile, the grid by the longest sequence) and sdpa, one
process, the benchmark's own turns: ``op-packgqa`` (pack-GQA), ``op-auto`` (the grid by the packed rows
where that halves the programs, ``GRID_BY="auto"``) and ``op-packgqa-auto`` (both). The op's flags are
set around each such call only and restored as they were, so ``op`` in the same process launches as it
ships.

    python docs/lab/gpu/cb_pack_bench.py --requests 64 --implementations sdpa,op,op-packgqa,op-auto --rounds 1 --out F
"""

import atexit
import json
import os

import flashtune.kernels.varlen as varlen_kernel
from flashtune.experiments.benchmarks import bench_continuous_batching as bench
from flashtune.runtime.integrations.hf_continuous_batching import register, varlen_attention

#: Tiles a head each grid would launch for the packed calls ``op-auto`` served, at the Hopper
#: tile's 64 rows: how much of the longest's grid is tiles that exit at once, in this benchmark.
GRID_COUNTS = {"calls": 0, "longest": 0, "tokens": 0, "auto": 0, "calls_auto_took_tokens": 0}


def count_grids(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, *args, **kwargs):
    batch, rows = cu_seqlens_q.numel() - 1, q.shape[0]
    GRID_COUNTS["calls"] += 1
    for grid in ("longest", "tokens", "auto"):
        tiles, by_tokens = varlen_kernel.tiles_by(grid, int(max_seqlen_q), rows, batch, 64)
        GRID_COUNTS[grid] += tiles
    GRID_COUNTS["calls_auto_took_tokens"] += by_tokens


@atexit.register
def report_grids():
    if GRID_COUNTS["calls"]:
        print("grids (tiles a head, summed over op-auto's packed calls):", json.dumps(GRID_COUNTS), flush=True)
        with open(os.path.join(os.environ.get("OUT", "/tmp"), "cb_grid_counts.json"), "w") as sink:
            json.dump(GRID_COUNTS, sink)


def with_flags(count=False, **flags):
    """``varlen_attention`` with the varlen module's ``flags`` set for the call; ``count``: add
    the call's grids to :data:`GRID_COUNTS`."""
    def attention(*args, **kwargs):
        if count:
            count_grids(*args, **kwargs)
        shipped = {name: getattr(varlen_kernel, name) for name in flags}
        for name, value in flags.items():
            setattr(varlen_kernel, name, value)
        try:
            return varlen_attention(*args, **kwargs)
        finally:
            for name, value in shipped.items():
                setattr(varlen_kernel, name, value)
    return attention


bench.IMPLEMENTATIONS["op-packgqa"] = lambda: register("flash_packgqa", varlen=with_flags(PACK_GQA=True))
bench.IMPLEMENTATIONS["op-auto"] = lambda: register("flash_auto", varlen=with_flags(count=True, GRID_BY="auto"))
bench.IMPLEMENTATIONS["op-packgqa-auto"] = lambda: register("flash_packgqa_auto",
                                                            varlen=with_flags(PACK_GQA=True, GRID_BY="auto"))

if __name__ == "__main__":
    raise SystemExit(bench.main())
