"""2026-12-07 lab probe: transformers' generate_batch with the varlen kernel's pack-GQA on
(``op-packgqa``) beside the op as it ships (``op``, pack-GQA off) and sdpa, one process, the
benchmark's own turns. The flag is flipped around each packed call only, so ``op`` in the same
process still launches one query head a tile.

    python docs/lab/gpu/cb_pack_bench.py --requests 64 --implementations sdpa,op,op-packgqa --rounds 1 --out F
"""

import flashtune.kernels.varlen as varlen_kernel
from flashtune.experiments.benchmarks import bench_continuous_batching as bench
from flashtune.runtime.integrations.hf_continuous_batching import register, varlen_attention


def packed_varlen_attention(*args, **kwargs):
    shipped, varlen_kernel.PACK_GQA = varlen_kernel.PACK_GQA, True
    try:
        return varlen_attention(*args, **kwargs)
    finally:
        varlen_kernel.PACK_GQA = shipped


bench.IMPLEMENTATIONS["op-packgqa"] = lambda: register("flash_packgqa", varlen=packed_varlen_attention)

if __name__ == "__main__":
    raise SystemExit(bench.main())
