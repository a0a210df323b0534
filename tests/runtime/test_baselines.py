"""The hardware feature library: every baseline fits its architecture, priors and fallbacks."""

from __future__ import annotations

import pytest

from flashtune.kernels.attention import SUPPORTED_HEAD_DIMS, takes_key_ranges
from flashtune.kernels.space import SAFE_DEFAULT, validate_config
from flashtune.objectives.feasibility import check
from flashtune.objectives.hardware import HardwareSpec, known_specs
from flashtune.objectives.types import SUITE, Status, Workload
from flashtune.runtime.dispatching.baselines import (
    ARCH_SHARED_MEMORY_BYTES,
    ARCHES,
    BASELINES,
    arch_of,
    arch_specs,
    baseline_priors,
    baselines_for,
    fallback_config,
    fit,
)


def _workloads(head_dim: int, causal: bool | None, dtype: str = "bfloat16") -> list[Workload]:
    masks = [False, True] if causal is None else [causal]
    return [Workload(1, 8, 8, 4096, 4096, head_dim, dtype, mask) for mask in masks]


@pytest.mark.parametrize("baseline", BASELINES, ids=lambda b: f"{b.arch}-d{b.head_dim}-{b.causal}-{b.config.key()}")
def test_every_baseline_is_feasible_on_every_spec_of_its_arch(baseline):
    for spec in arch_specs(baseline.arch):
        for workload in _workloads(baseline.head_dim, baseline.causal):
            verdict = check(baseline.config, workload, spec)
            assert verdict.feasible, (spec.name, verdict.reason)


def test_shipped_specs_are_used_where_they_exist():
    shipped_arches = {spec.arch for spec in known_specs().values()}
    assert {"sm80", "sm89", "sm90"} <= shipped_arches
    for arch in ARCHES:
        specs = arch_specs(arch)
        assert specs and all(s.arch == arch for s in specs)
        if arch in shipped_arches:
            assert not any(s.source.startswith("synthetic") for s in specs)
        else:
            assert specs[0].shared_memory_per_block_bytes == ARCH_SHARED_MEMORY_BYTES[arch]


def test_every_arch_head_dim_and_mask_has_a_labelled_valid_baseline():
    for arch in ARCHES:
        for head_dim in SUPPORTED_HEAD_DIMS:
            for causal in (False, True):
                rows = baselines_for(arch, head_dim, causal)
                assert rows and rows[0].head_dim == head_dim and rows[0].causal in (None, causal)
    for b in BASELINES:
        assert b.label.strip()
        assert validate_config(b.config) == b.config


def test_sm8x_causal_and_non_causal_differ_at_head_dim_128():
    # FlashAttention-2 picks square tiles for causal on sm86/sm89.
    assert baselines_for("sm86", 128, True)[0].config != baselines_for("sm86", 128, False)[0].config


def test_arch_of_borrows_the_nearest_older_covered_arch():
    def spec(cc: tuple[int, int]) -> HardwareSpec:
        return HardwareSpec("x", cc, 1, 100_000)

    assert arch_of(spec((9, 0))) == "sm90"
    assert arch_of(spec((8, 7))) == "sm86"
    assert arch_of(spec((12, 0))) == "sm100"
    assert arch_of(spec((7, 0))) == "sm75"


def test_priors_are_feasible_prior_measurements_without_duplicates():
    for spec in known_specs().values():
        for workload in [*SUITE, Workload(2, 8, 2, 512, 512, 256, "float32", True)]:
            priors = baseline_priors(spec, workload)
            assert priors, (spec.name, workload.name)
            assert len({p.config for p in priors}) == len(priors)
            for rank, prior in enumerate(priors):
                assert prior.source == "prior" and prior.status is Status.OK
                assert prior.workload == workload and prior.fingerprint == f"baseline-{spec.arch}"
                assert prior.versions["arch"] == spec.arch and prior.versions["label"]
                assert check(prior.config, workload, spec).feasible
                assert prior.median_ms == pytest.approx(1.0 + 0.1 * rank)  # a rank proxy, best first


def test_priors_rank_first_in_the_search_prior_book(h200):
    book_module = pytest.importorskip("flashtune.search.priors")
    workload = SUITE[1]
    priors = baseline_priors(h200, workload)
    book = book_module.PriorBook()
    for prior in reversed(priors):
        book.add(prior)
    assert book.ranked() == [p.config for p in priors]


def test_fit_shrinks_stages_first_and_gives_up_when_nothing_fits():
    tiny = HardwareSpec("tiny", (8, 0), 1, 40_000)
    workload = Workload(1, 1, 1, 128, 128, 128, "float16", False)
    big = baselines_for("sm80", 128, False)[0].config
    fitted = fit(big, workload, tiny)
    assert fitted is not None and check(fitted, workload, tiny).feasible
    assert fitted["BLOCK_M"] == big["BLOCK_M"] or fitted["num_stages"] == 1
    impossible = HardwareSpec("none", (8, 0), 1, 1_000)
    assert fit(big, workload, impossible) is None
    assert fallback_config(impossible, workload) == SAFE_DEFAULT


def test_fallback_fits_float32_and_defaults_without_a_spec():
    for spec in known_specs().values():
        for head_dim in SUPPORTED_HEAD_DIMS:
            workload = Workload(1, 4, 4, 1024, 1024, head_dim, "float32", True)
            assert check(fallback_config(spec, workload), workload, spec).feasible
    assert fallback_config(None, SUITE[0]) == SAFE_DEFAULT


def test_hopper_serves_the_gluon_kernel_where_the_h200_ranked_it_first_and_pointer_loads_elsewhere(h200):
    def loads(head_dim: int, dtype: str = "bfloat16", causal: bool = True, spec: HardwareSpec = h200,
              **kw) -> str:
        return str(fallback_config(spec, Workload(1, 32, 8, 2048, 2048, head_dim, dtype, causal), **kw)["loads"])

    assert loads(128) == loads(128, causal=False) == loads(256) == loads(128, "float16") == "gluon_pingpong"
    assert loads(64) == "gluon_pingpong" and loads(32) == "pointer"  # no Gluon row measured at 32
    assert loads(128, "float32") == "pointer"  # the Gluon kernel reads fp16 and bf16 only
    assert loads(128, spec=arch_specs("sm100")[0]) == "pointer"  # Hopper's wgmma: sm90's rows only
    # What a call with per-sequence key ranges needs (the Gluon kernel takes none):
    assert loads(128, accept=takes_key_ranges) == "pointer"


def test_the_gluon_kernel_is_infeasible_for_float32_and_head_dims_not_a_power_of_two(h200):
    gluon = baselines_for("sm90", 128, True)[0].config
    assert gluon["loads"] == "gluon_pingpong"
    verdict = check(gluon, Workload(1, 8, 8, 1024, 1024, 128, "float32", True), h200)
    assert not verdict.feasible and "float32" in verdict.reason
    verdict = check(gluon, Workload(1, 8, 8, 1024, 1024, 96, "bfloat16", True), h200)
    assert not verdict.feasible and "power-of-2 head_dim, got 96" in verdict.reason
    assert check(gluon, Workload(1, 8, 8, 1024, 1024, 64, "float16", True), h200).feasible
