"""The tuner-target measurement (docs/lab/tools/tuner_target.py) on a real recorded
table: what it reports is what the replayed runs did."""

import dataclasses
import json

import pytest
import tuner_target

from flashtune.experiments import DATA_DIR
from flashtune.experiments.evaluation.landscape import build_landscape
from flashtune.objectives.hardware import load_spec

WORKLOAD = "b2_h16_n8192_d256_full_bfloat16"
TABLES = [DATA_DIR / "h200_grown" / f"{WORKLOAD}.jsonl", DATA_DIR / "h200_lean" / f"{WORKLOAD}.jsonl"]


def test_trials_to_within_counts_from_one_and_says_none_when_never():
    assert tuner_target.trials_to_within([3.0, float("inf"), 1.01, 1.0], 1.0, 0.02) == 3
    assert tuner_target.trials_to_within([3.0, 2.0], 1.0, 0.02) is None


def test_random_search_report_matches_the_merged_table(tmp_path):
    # Random search: fast, and the same parts (run loop, replay) as the default strategy's runs.
    out = tmp_path / "target.json"
    assert tuner_target.main(["--tables", *map(str, TABLES), "--strategy", "random", "--seeds", "2",
                              "--budget", "40", "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["workloads"]
    ls = build_landscape(TABLES, load_spec("h200"))
    # The optimum is the merged table's fastest feasible config (the lean rows join the grown ones).
    assert row["optimum_config"] == ls.optimum_config.to_dict()
    assert row["optimum_tflops"] == pytest.approx(ls.workload.flops / (ls.optimum_ms * 1e-3) / 1e12)
    for reached, fraction, best in zip(row["trials_to_target"], row["best_fraction"], row["best_configs"]):
        # A run that reached the target has its best within it, and a run's best is a recorded config.
        assert 0 < fraction <= 1.0
        assert (reached is not None) == (fraction >= 1 / 1.02 - 1e-12)
        assert any(c.to_dict() == best for c in ls.feasible)
    assert row["met"] == all(t is not None for t in row["trials_to_target"])


def test_a_config_retimed_in_a_later_table_replays_its_later_reading(tmp_path):
    # As RECORDED_SPACE lists h200_retimed after the sweeps: a config in two tables is the later
    # row, for the optimum and for what the replayed studies measure (the tables used to be
    # concatenated into one file, which replay refuses as a config recorded twice).
    from flashtune.objectives.replay import load_table, write_table

    rows = load_table(TABLES[0])
    slowest = max((m for m in rows if m.ok), key=lambda m: m.median_ms)
    later = tmp_path / "retimed" / f"{WORKLOAD}.jsonl"
    later.parent.mkdir()
    fast = slowest.median_ms / 100  # the slowest config re-timed as by far the fastest
    write_table(later, [dataclasses.replace(slowest, median_ms=fast, p20_ms=fast, p80_ms=fast)])
    out = tmp_path / "target.json"
    assert tuner_target.main(["--tables", *map(str, TABLES), str(later.parent), "--strategy", "random",
                              "--seeds", "1", "--budget", "40", "--priors", "none", "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["workloads"]
    ls = build_landscape([*TABLES, later], load_spec("h200"))
    assert ls.optimum_ms == pytest.approx(fast)
    assert row["optimum_config"] == ls.optimum_config.to_dict()
    assert ls.optimum_config.to_dict().items() >= slowest.config.to_dict().items()  # completed with newer knobs


#: Two suite workloads in suite order (D64 full runs before D256), from one small table each.
PAIR = {name: [DATA_DIR / "h200_grown" / f"{name}.jsonl"]
        for name in ("b16_h16_n1024_d64_full_bfloat16", "b2_h16_n8192_d256_full_bfloat16")}


def _pair_folder(tmp_path):
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name, parts in PAIR.items():
        (tmp_path / f"{name}.jsonl").write_text("".join(p.read_text() for p in parts))
    return tmp_path


def test_a_run_tells_each_study_the_ones_before_it(tmp_path):
    spec = load_spec("h200")
    landscapes = [build_landscape(parts, spec) for parts in PAIR.values()]
    folder = _pair_folder(tmp_path)
    studies = tuner_target.replay_run(landscapes, folder, spec, strategy="tpe", seed=3, budget=6)
    assert list(studies) == list(PAIR)
    first, second = studies.values()
    cold = [tuner_target.replay_study(ls.workload, folder, spec, strategy="tpe", seed=3, budget=6) for ls in landscapes]
    # The first study is a cold one; the second starts with configs that ran in the first.
    assert [t.config for t in first.trials] == [t.config for t in cold[0].trials]
    assert [t.config for t in second.trials] != [t.config for t in cold[1].trials]
    assert second.trials[0].config in {t.config for t in first.trials if t.measurement.ok}


def test_an_unknown_workload_is_named():
    with pytest.raises(ValueError, match="no table for.*b9"):
        tuner_target.main(["--tables", *map(str, TABLES), "--workloads", "b9_h1_n1_d64_full_bfloat16"])


@pytest.mark.slow
def test_its_runs_propose_what_flashtune_tune_proposes(stores, tmp_path):
    # The claim the measurement rests on: a replayed `flashtune tune` study of the default
    # strategy, seed 0, proposes the same configs in the same order as replay_study.
    import optuna

    from flashtune.experiments.cli.main import main
    from flashtune.experiments.cli.tune import DEFAULT_STRATEGY

    folder = tmp_path / "tables"
    folder.mkdir()
    (folder / f"{WORKLOAD}.jsonl").write_text("".join(p.read_text() for p in TABLES))
    assert main(["tune", "--tracking-uri", stores["tracking_uri"], "--storage", stores["storage"], "--objective",
                 "replay", "--replay-dir", str(folder), "--workload", WORKLOAD, "--trials", "12", "--seed", "0",
                 "--study-name", "fidelity", "--no-progress"]) == 0
    (name,) = optuna.get_all_study_names(stores["storage"])
    trials = sorted(optuna.load_study(study_name=name, storage=stores["storage"]).trials, key=lambda t: t.number)
    ls = build_landscape(TABLES, load_spec("h200"))
    history = tuner_target.replay_study(ls.workload, folder, load_spec("h200"), strategy=DEFAULT_STRATEGY, seed=0,
                                        budget=12)
    proposed = [{k: t.config[k] for k in trial.params} for t, trial in zip(history.trials, trials)]
    assert len(history.trials) == len(trials) == 12
    assert proposed == [trial.params for trial in trials]


@pytest.mark.slow
def test_a_replayed_run_proposes_what_flashtune_tune_over_two_workloads_proposes(stores, tmp_path):
    # replay_run's claim: tune over several workloads tells each study the earlier ones' trials.
    import optuna

    from flashtune.experiments.cli.main import main
    from flashtune.experiments.cli.tune import DEFAULT_STRATEGY

    folder = _pair_folder(tmp_path / "tables")
    assert main(["tune", "--tracking-uri", stores["tracking_uri"], "--storage", stores["storage"], "--objective",
                 "replay", "--replay-dir", str(folder), *[a for name in PAIR for a in ("--workload", name)],
                 "--trials", "10", "--seed", "0", "--study-name", "pair", "--no-progress"]) == 0
    spec = load_spec("h200")
    studies = tuner_target.replay_run([build_landscape(parts, spec) for parts in PAIR.values()], folder, spec,
                                      strategy=DEFAULT_STRATEGY, seed=0, budget=10)
    for name, history in studies.items():
        trials = sorted(optuna.load_study(study_name=f"NVIDIA H200/pair/{name}", storage=stores["storage"]).trials,
                        key=lambda t: t.number)
        assert [{k: t.config[k] for k in trial.params} for t, trial in zip(history.trials, trials)] == \
            [trial.params for trial in trials]
        assert len(trials) == 10


@pytest.mark.slow
def test_the_default_finds_d128_causals_lone_optimum(tmp_path):
    # D128 causal B4's optimum (gluon_pingpong 128x128, 3 stages, longest_first) is the one
    # config of 786 within 2 %. With `loads` and `tile_order` as integers, GP never asked it in
    # 40 trials on seed 9 (the best stayed 9 % off): read as categories, it does.
    from optuna.distributions import CategoricalDistribution, IntDistribution

    from flashtune.experiments.cli.tune import DEFAULT_STRATEGY
    from flashtune.objectives.feasibility import for_workload
    from flashtune.search import make_strategy

    workload = "b4_h32_n4096_d128_causal_bfloat16"
    parts = [DATA_DIR / d / f"{workload}.jsonl" for d in ("h200_grown", "h200_lean", "h200_lean_order", "h200_gluon")]
    parts = [p for p in parts if p.exists()]
    spec = load_spec("h200")
    ls = build_landscape(parts, spec)
    (tmp_path / f"{workload}.jsonl").write_text("".join(p.read_text() for p in parts))
    history = tuner_target.replay_study(ls.workload, tmp_path, spec, strategy=DEFAULT_STRATEGY, seed=9,
                                        budget=tuner_target.BUDGET)
    reached = tuner_target.trials_to_within([t.cost_ms for t in history.trials], ls.optimum_ms,
                                            tuner_target.TOLERANCE)
    assert reached is not None and reached <= tuner_target.BUDGET
    # The encoding itself: choices as categories, numbers as ordinals.
    gp = make_strategy("gp", for_workload(ls.workload, spec))
    assert isinstance(gp._distributions["loads"], CategoricalDistribution)
    assert isinstance(gp._distributions["BLOCK_M"], IntDistribution)
