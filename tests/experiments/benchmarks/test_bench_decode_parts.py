"""CPU parts of the decode GPU benchmark: which configs it sweeps, the bytes it counts, the
variants the extra rows reuse, the table it prints."""

import math

from flashtune.experiments.benchmarks import bench_decode as bd
from flashtune.kernels.config import Config
from flashtune.objectives.types import Measurement, Status, Workload


def test_sweep_covers_every_split_up_to_the_tiles():
    row = bd.Row("r", Workload(1, 32, 8, 1, 4096, 128),
                 sweep=({"loads": ("pointer",), "BLOCK_N": (64, 128), "num_warps": (4,), "num_stages": (3,)},))
    configs = bd.sweep_configs(row)
    by_n = {n: [c["num_splits"] for c in configs if c["BLOCK_N"] == n] for n in (64, 128)}
    assert by_n[64] == [1, 2, 4, 8, 16, 32, 64]  # 64 tiles: 128 splits would leave half empty
    assert by_n[128] == [1, 2, 4, 8, 16, 32]
    assert all(c["kernel"] == "decode" for c in configs)
    assert bd.sweep_configs(row, lambda c: c["BLOCK_N"] == 64) == [c for c in configs if c["BLOCK_N"] == 64]


def test_kv_bytes_count_what_is_read():
    w = Workload(8, 32, 8, 1, 8192, 128)
    assert bd.kv_bytes(bd.Row("r", w)) == 2 * 8 * 8192 * 8 * 128 * 2
    assert bd.kv_bytes(bd.Row("r", w, seqlens=bd.SEQLENS)) == 2 * sum(bd.SEQLENS) * 8 * 128 * 2


def _m(n, warps, stages, splits, ms, status=Status.OK, loads="pointer"):
    cfg = Config(kernel="decode", BLOCK_N=n, num_warps=warps, num_stages=stages, num_splits=splits, loads=loads)
    return Measurement(config=cfg, workload=Workload(1, 4, 1, 1, 64, 32), status=status, median_ms=ms)


def test_best_variants_are_distinct_and_fastest_first():
    ms = [_m(64, 4, 3, 8, 0.02), _m(64, 4, 3, 16, 0.01), _m(64, 4, 3, 4, 0.015, loads="tma"),
          _m(128, 8, 3, 1, 0.001, Status.WRONG_RESULT), _m(128, 4, 4, 2, 0.05)]
    best = bd.best_variants(ms, top=2)
    assert best == ({"loads": ("pointer",), "BLOCK_N": (64,), "num_warps": (4,), "num_stages": (3,)},
                    {"loads": ("tma",), "BLOCK_N": (64,), "num_warps": (4,), "num_stages": (3,)})
    assert bd.variants(best) == [("pointer", 64, 4, 3), ("tma", 64, 4, 3)]


def test_default_sweep_size():
    # Compiles dominate the GPU run: 27 pointer + 12 TMA variants per head_dim.
    assert len(bd.variants(bd.SWEEP)) == 39


def test_table_ratio_and_bandwidth():
    result = {"label": "1,32/8,1/32768,128", "kv_bytes": 134e6, "best_config": {"loads": "tma", "BLOCK_N": 64,
              "num_warps": 4, "num_stages": 3, "num_splits": 32},
              "us": {"op_best": 40.0, "op_default": 45.0, "op_api": 60.0, "sdpa_cudnn": 50.0, "sdpa_flash": 59.0,
                     "sdpa_efficient": math.inf}}
    line = bd.format_table([result]).splitlines()[2]
    assert "| tma/64/4/3/32 | 40.0 | n/a | 45.0 | 60.0 | 50.0 | 59.0 | n/a | 3350 | 1.25 |" in line
    assert bd._finite({"a": [math.inf, 1.0]}) == {"a": [None, 1.0]}
