"""The static resource model and the feasibility verdict."""

from pathlib import Path

import pytest

from flashtune.kernels import Config, all_configs
from flashtune.kernels.resources import shared_memory_bytes
from flashtune.objectives import SUITE, Workload, known_specs
from flashtune.objectives.feasibility import check, for_workload


def test_model_matches_the_requirement_measured_on_the_h200():
    # docs/reference.md: 64/128/stages 4 at head_dim 128 needed exactly 278,528 B.
    cfg = Config(BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=4)
    assert shared_memory_bytes(cfg, head_dim=128) == 278_528


def test_verdict_follows_the_gpu_limit():
    h200, l40s = known_specs()["h200"], known_specs()["l40s"]
    w = Workload(1, 1, 1, 4096, 4096, 128)
    cfg = Config(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=4)  # 163,840 B
    assert check(cfg, w, h200).feasible
    verdict = check(cfg, w, l40s)
    assert not verdict.feasible and "NVIDIA L40S" in verdict.reason


@pytest.mark.parametrize("name", ["h200", "h100", "a100", "l40s", "rtx4090"])
def test_every_shipped_gpu_has_feasible_and_infeasible_configs(name):
    spec = known_specs()[name]
    for workload in SUITE:
        verdicts = [check(c, workload, spec).feasible for c in all_configs()]
        assert any(verdicts), (name, workload.name)
    # head_dim 256 with deep pipelines exceeds every GPU's shared memory
    assert not all(check(c, SUITE[5], spec).feasible for c in all_configs())


def test_fp32_needs_twice_the_shared_memory():
    cfg = Config(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)
    assert shared_memory_bytes(cfg, head_dim=64, dtype_bytes=4) == 2 * shared_memory_bytes(cfg, head_dim=64)


RECORDED = sorted((Path(__file__).parents[2] / "experiments" / "data" / "h200").glob("*.jsonl"))


@pytest.mark.skipif(not RECORDED, reason="no recorded H200 tables")
def test_model_agrees_with_triton_on_the_recorded_h200_space():
    """The sweeps compiled every config (--no-static-check): grade the model on them."""
    from flashtune.objectives.feasibility import grade
    from flashtune.objectives.replay import load_table

    measurements = [m for path in RECORDED for m in load_table(path)]
    result = grade(measurements, known_specs()["h200"])
    assert result.total >= 400
    assert result.fraction >= 0.98, (result.false_feasible[:3], result.false_infeasible[:3])
    # Where Triton reported its shared memory, the model predicts the very byte count.
    for m in measurements:
        if m.shared_bytes is not None and m.status.value != "infeasible":
            assert shared_memory_bytes(m.config, head_dim=m.workload.head_dim) == m.shared_bytes, m.config


DECODE_W = Workload(1, 32, 8, 1, 32768, 128)


def test_decode_configs_are_modelled_with_their_packed_query_tile():
    cfg = Config(kernel="decode", BLOCK_N=64, num_splits=16, num_warps=4, num_stages=3)
    # 16 packed rows (4 heads x 1 query, padded for tl.dot), mma.sync: 2 K/V buffers + P tile
    # (71,680 B: Triton's own figure on the H200).
    assert shared_memory_bytes(cfg, head_dim=128, block_h=16) == 16 * 128 * 2 + 2 * 2 * 64 * 128 * 2 + 2 * 16 * 64
    assert shared_memory_bytes(cfg, head_dim=128, block_h=16) == 71_680
    # 64 packed rows on Hopper take wgmma: one buffer per stage.
    assert shared_memory_bytes(cfg, head_dim=128, block_h=64) == 64 * 128 * 2 + 3 * 2 * 64 * 128 * 2
    mqa = Workload(1, 32, 1, 4, 4096, 128)  # 32 heads x 4 queries: rows capped at 64
    assert check(cfg, mqa, known_specs()["h200"]).shared_bytes == shared_memory_bytes(cfg, head_dim=128, block_h=64)


def test_decode_space_on_the_h200():
    from flashtune.kernels.space import DECODE_TUNABLES

    h200 = known_specs()["h200"]
    space = for_workload(DECODE_W, h200)
    assert space.tunables == dict(DECODE_TUNABLES)
    feasible = space.feasible_configs()
    assert 0 < len(feasible) < space.size
    deep = Config(kernel="decode", BLOCK_N=256, num_splits=1, num_warps=8, num_stages=5)
    verdict = check(deep, DECODE_W, h200)
    assert not verdict.feasible and "shared memory" in verdict.reason
    # The split count changes no resource: the verdict is the same for every value.
    for c in feasible[:20]:
        assert all(space.is_feasible(c.replace(num_splits=s)) for s in DECODE_TUNABLES["num_splits"])
    tma = Config(kernel="decode", BLOCK_N=64, num_splits=8, num_warps=4, num_stages=3, loads="tma")
    assert check(tma, DECODE_W, h200).feasible
    assert not check(tma, DECODE_W, known_specs()["a100"]).feasible  # TMA is Hopper-and-newer
    prefill = for_workload(Workload(1, 32, 8, 17, 4096, 128), h200)
    assert "BLOCK_M" in prefill.names and "num_splits" not in prefill.names


DECODE_RECORDED = sorted((Path(__file__).parents[2] / "experiments" / "data" / "h200_decode").glob("*.jsonl"))


@pytest.mark.skipif(not DECODE_RECORDED, reason="no recorded H200 decode tables")
def test_decode_model_predicts_triton_shared_memory_on_the_recorded_sweep():
    from flashtune.kernels.space import decode_block_h
    from flashtune.objectives.replay import load_table

    measured = [m for path in DECODE_RECORDED for m in load_table(path) if m.shared_bytes is not None]
    assert len(measured) >= 1000
    for m in measured:
        w = m.workload
        block_h = decode_block_h(w.q_heads // w.kv_heads, w.q_len)
        assert shared_memory_bytes(m.config, head_dim=w.head_dim, block_h=block_h) == m.shared_bytes, m.config


GROWN = sorted((Path(__file__).resolve().parents[2] / "experiments" / "data" / "h200_grown").glob("*.jsonl"))


@pytest.mark.skipif(not GROWN, reason="no recorded grown H200 tables")
def test_model_predicts_the_compile_errors_of_the_grown_h200_space():
    """720 configs a workload (pointer, tma, tma_ws; tiles and persistent), compiled without
    the static check: every compile error and out-of-resources is predicted, with Triton's reason."""
    from flashtune.objectives.feasibility import grade
    from flashtune.objectives.replay import load_table
    from flashtune.objectives.types import Status

    measurements = [m for path in GROWN for m in load_table(path)]
    h200 = known_specs()["h200"]
    result = grade(measurements, h200)
    assert result.total == 7 * 720
    assert not result.false_feasible, result.false_feasible[:3]
    assert result.fraction == 1.0, result.false_infeasible[:3]
    for m in measurements:
        if m.status is Status.COMPILE_ERROR:
            assert "PassManager::run failed" in m.error
            assert "PassManager::run failed" in check(m.config, m.workload, h200).reason


def test_tile_order_and_the_lean_loads_fit_where_their_tiles_fit():
    w = Workload(1, 1, 1, 1024, 1024, 128)
    h200 = known_specs()["h200"]
    for loads in ("pointer", "tma", "tma_ws", "lean", "lean_ws", "lean_overlap"):
        cfg = Config(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2, loads=loads, tile_order="longest_first")
        assert check(cfg, w, h200).feasible, loads


def test_the_overlapped_softmax_holds_a_second_score_tile():
    from flashtune.kernels.resources import registers_per_thread

    serial = Config(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=2, loads="lean")
    overlap = serial.replace(loads="lean_overlap")
    extra = registers_per_thread(overlap, head_dim=128) - registers_per_thread(serial, head_dim=128)
    assert extra == 128 * 128 // 256  # one more fp32 score tile over 256 threads


@pytest.mark.parametrize("config,head_dim,fits", [
    # Ran (bench_prefill on the H200, 2026-12-01): the tiles grid reuses the pipeline's buffers for O.
    (Config(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3, loads="lean"), 128, True),
    # Out of shared memory there (Triton asked for 263,168 and 262,200 B): O's staging buffer
    # in the persistent loop, one more K tile in flight for lean_overlap.
    (Config(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3, loads="lean", grid="persistent"), 128, False),
    (Config(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2, loads="lean", grid="persistent"), 256, False),
    (Config(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3, loads="lean_overlap"), 128, False),
    (Config(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3, loads="lean_overlap"), 256, False),
])
def test_lean_shared_memory_as_measured(config, head_dim, fits):
    w = Workload(1, 1, 1, 4096, 4096, head_dim)
    assert check(config, w, known_specs()["h200"]).feasible is fits


def test_fp8_warp_specialized_persistent_configs_are_a_known_failure():
    """Seen on the H200: the pipeliner cannot predicate the per-tile fp8 descriptor."""
    h200 = known_specs()["h200"]
    w = Workload(1, 8, 2, 1, 1, 128, "bfloat16", False)
    bad = Config(BLOCK_M=32, BLOCK_N=64, num_warps=4, num_stages=5, loads="tma_ws", use_fp8=True, grid="persistent")
    verdict = check(bad, w, h200)
    assert not verdict.feasible and "tensormap_create" in verdict.reason
    assert check(bad.replace(use_fp8=False), w, h200).feasible
    assert check(bad.replace(grid="tiles"), w, h200).feasible


def test_the_one_loop_kernels_deeper_rings_at_128_rows_are_a_known_failure():
    """Seen on the H200 (2026-12-02, 8192 keys) and the H100 (2026-12-07, every length from 1,024):
    NaN outputs with 3 and 4 stages, a race; 2 stages exact."""
    ring = Config(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3, loads="lean_ws_oneloop")
    for gpu in ("h200", "h100"):
        for keys in (1024, 8192):
            hardware, w = known_specs()[gpu], Workload(1, 8, 8, keys, keys, 128, "bfloat16", False)
            verdict = check(ring, w, hardware)
            assert not verdict.feasible and "NaN outputs at any length" in verdict.reason
            assert check(ring.replace(num_stages=2), w, hardware).feasible
            assert check(ring.replace(BLOCK_M=64), w, hardware).feasible  # unspecialized: not measured so, not refused
