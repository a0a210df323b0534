"""A new GPU's sweep chosen from a known GPU's recorded space: the known top share, a
space-filling sample with every variant, failures for the feasibility grade, and the
variants the known GPU never recorded."""

from __future__ import annotations

import argparse
import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from flashtune.experiments.cli import sweep
from flashtune.experiments.cli.main import main
from flashtune.experiments.evaluation.sweep_plan import plan_sweep
from flashtune.experiments.study.measurers import default_replay_dirs, table_path
from flashtune.kernels.space import all_configs, tunables_for, validate_config
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.replay import load_table
from flashtune.objectives.types import SUITE

WORKLOAD = SUITE[0]  # D128 full: every recorded variant, some failures


@pytest.fixture(scope="module")
def h200_rows():
    rows = []
    for folder in default_replay_dirs(load_spec("h200")):
        path = table_path(folder, WORKLOAD)
        if path.exists():
            rows += load_table(path)
    return [dataclasses.replace(m, config=validate_config(m.config)) for m in rows]


def test_the_plan_takes_the_known_top_share_fastest_first(h200_rows) -> None:
    plan = plan_sweep(h200_rows, top_share=0.05, sample=100, seed=0)
    last = {m.config: m for m in h200_rows}
    ran = sorted((m for m in last.values() if m.ok), key=lambda m: m.median_ms)
    assert list(plan.top) == [m.config for m in ran[: round(0.05 * len(ran))]]
    assert len(plan.sample) + len(plan.failed) == 100 and len(plan.failed) == 10
    assert len(set(plan.configs)) == len(plan.configs)  # nothing measured twice


def test_the_sample_represents_every_variant_the_known_gpu_ran(h200_rows) -> None:
    plan = plan_sweep(h200_rows, top_share=0.05, sample=90, seed=0)
    ran_variants = {m.config["loads"] for m in h200_rows if m.ok}
    counts = Counter(c["loads"] for c in plan.sample)
    assert set(counts) == ran_variants
    assert max(counts.values()) - min(counts.values()) <= 1  # an equal share each
    assert all(not {m.config: m for m in h200_rows}[c].ok for c in plan.failed)


def test_the_sample_is_space_filling_not_a_corner(h200_rows) -> None:
    # Within one variant, a maximin design spreads over every value of each knob it varies.
    plan = plan_sweep(h200_rows, top_share=0.05, sample=180, seed=0)
    pointer = [c for c in plan.sample if c["loads"] == "pointer"]
    ran_pointer = [m.config for m in h200_rows if m.ok and m.config["loads"] == "pointer"]
    for knob in ("BLOCK_M", "BLOCK_N", "num_stages", "grid"):
        assert {c[knob] for c in pointer} == {c[knob] for c in ran_pointer}, knob


def test_the_plan_is_seeded(h200_rows) -> None:
    one = plan_sweep(h200_rows, top_share=0.05, sample=60, seed=3)
    assert one == plan_sweep(h200_rows, top_share=0.05, sample=60, seed=3)
    assert one.sample != plan_sweep(h200_rows, top_share=0.05, sample=60, seed=4).sample


def test_variants_the_known_gpu_never_recorded_are_sampled_from_the_space(h200_rows) -> None:
    space = list(all_configs(tunables_for(WORKLOAD)))
    plan = plan_sweep(h200_rows, top_share=0.05, sample=20, space=space, per_unrecorded_variant=4, seed=0)
    recorded = {m.config["loads"] for m in h200_rows}
    never = {c["loads"] for c in space} - recorded
    assert never and Counter(c["loads"] for c in plan.unrecorded) == dict.fromkeys(never, 4)


@pytest.mark.parametrize(("kwargs", "named"), [({"top_share": 0}, "top_share"), ({"sample": -1}, "sample"),
                                               ({"failed_share": 2}, "failed_share")])
def test_bad_arguments_name_themselves(h200_rows, kwargs, named) -> None:
    with pytest.raises(ValueError, match=named):
        plan_sweep(h200_rows, **{"top_share": 0.05, "sample": 10, **kwargs})


def test_sweep_like_prints_each_workloads_plan_before_it_needs_a_gpu(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    code = main(["sweep", "--suite", "--like", "h200", "--where", "use_fp8=False", "--sample", "40",
                 "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "no NVIDIA GPU visible" in err
    plans = [line for line in err.splitlines() if line.startswith("flashtune sweep --like h200: ")]
    assert [line.split(": ")[1] for line in plans] == [w.name for w in SUITE]
    assert all(" fastest + 36 sampled + 4 it could not run + " in line for line in plans)


def test_sweep_like_a_gpu_without_tables_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert main(["sweep", "--suite", "--like", "a100", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--like a100: no recorded table of" in err, err


def test_like_plans_only_what_where_selects() -> None:
    args = argparse.Namespace(like="h200", where=["loads=tma,pointer"], top_share=0.05, sample=30, seed=0)
    plan = sweep._like_plan(args, WORKLOAD, sweep._parse_where(args.where), load_spec("h100"))
    assert {c["loads"] for c in plan.configs} <= {"tma", "pointer"}


def test_the_plan_is_the_one_the_recorded_h100_sweep_measured() -> None:
    # experiments/data/h100_sampled was recorded with `sweep --suite --like h200 --where use_fp8=False`
    # (defaults otherwise): the same command plans the same configs, so the recording can be redone.
    args = argparse.Namespace(like="h200", where=["use_fp8=False"], top_share=0.05, sample=200, seed=0)
    plan = sweep._like_plan(args, WORKLOAD, sweep._parse_where(args.where), load_spec("h100"))
    recorded = load_table(Path(__file__).parents[3] / "experiments" / "data" / "h100_sampled" / f"{WORKLOAD.name}.jsonl")
    assert set(plan.configs) == {validate_config(m.config) for m in recorded}
