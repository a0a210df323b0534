"""2026-12-07 lab probe: transformers' generate_batch with the varlen kernel's untimed launch options on
beside the op as it ships (``op``: one query head a tile, the grid by the longest sequence) and sdpa, one
process, the benchmark's own turns: ``op-packgqa`` (pack-GQA), ``op-auto`` (the grid by the packed rows
where that halves the programs, ``GRID_BY="auto"``) and ``op-packgqa-auto`` (both). The op's flags are
set around each such call only and restored as they were, so ``op`` in the same process launches as it
ships.

    python docs/lab/gpu/cb_pack_bench.py --requests 64 --implementations sdpa,op,op-packgqa,op-auto --rounds 1 --out F
"""

import flashtune.kernels.varlen as varlen_kernel
from flashtune.experiments.benchmarks import bench_continuous_batching as bench
from flashtune.runtime.integrations.hf_continuous_batching import register, varlen_attention


def with_flags(**flags):
    """``varlen_attention`` with the varlen module's ``flags`` set for the call."""
    def attention(*args, **kwargs):
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
bench.IMPLEMENTATIONS["op-auto"] = lambda: register("flash_auto", varlen=with_flags(GRID_BY="auto"))
bench.IMPLEMENTATIONS["op-packgqa-auto"] = lambda: register("flash_packgqa_auto",
                                                            varlen=with_flags(PACK_GQA=True, GRID_BY="auto"))

if __name__ == "__main__":
    raise SystemExit(bench.main())
