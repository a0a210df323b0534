"""``flashtune compare`` end to end on synthetic recorded tables."""

from __future__ import annotations

import json
import math

import pytest

from flashtune.experiments.cli.main import main
from flashtune.experiments.evaluation.landscape import build_landscape
from flashtune.objectives.hardware import load_spec


def test_landscape_of_a_recorded_table(recorded_tables) -> None:
    landscape = build_landscape(recorded_tables[0], load_spec("h200"))
    assert landscape.space.size == 120
    assert 0 < len(landscape.feasible) < 120  # head_dim 256: shared memory rules some out
    assert landscape.optimum_ms == min(landscape.cost(c) for c in landscape.feasible)
    assert landscape.random_curve[-1] == pytest.approx(landscape.optimum_ms)
    assert 1 <= landscape.score_budget <= len(landscape.feasible)
    assert landscape.within(0.02) >= 1


def test_compare_writes_the_issue_schema_curves_and_a_table(recorded_tables, tmp_path, capsys) -> None:
    report_path = tmp_path / "compare.json"
    rc = main(["compare", "--tables", *map(str, recorded_tables), "--seeds", "3", "--budget", "15",
               "--strategies", "random,tpe,ga", "--jobs", "1", "--json", str(report_path), "--out", str(tmp_path / "out")])
    assert rc == 0
    report = json.loads(report_path.read_text())
    assert set(report["strategies"]) == {"random", "tpe", "ga"}
    # Each workload's own space and feasible count (head dim 256 leaves fewer feasible than 64).
    assert report["space_size"] == {w: 120 for w in report["workloads"]}
    assert report["feasible"] == {w: d["feasible"] for w, d in report["workloads"].items()}
    assert len(set(report["feasible"].values())) == 2 and max(report["feasible"].values()) == 120
    # Cold first (it compares the strategies), the held-out comparison after it.
    assert report["priors"] == "loo" and report["evaluation"].startswith("cold")
    assert report["held_out"]["evaluation"].startswith("held out")
    assert set(report["held_out"]["strategies"]) == {"random", "tpe", "ga"}
    for entry in report["strategies"].values():
        assert isinstance(entry["score"], float) and math.isfinite(entry["score"])
        for key in ("evals_to_2pct", "evals_to_5pct"):
            assert 1 <= entry[key]["median"] <= 16  # budget + 1 when never reached
        assert set(entry["workloads"]) == set(report["workloads"])
        for name, detail in entry["workloads"].items():
            assert detail["runs"] == 3
            # The score averages over at most the 15 evaluations a run had.
            assert detail["score_window"] == min(15, report["workloads"][name]["score_budget"])
            assert detail["evals_to_2pct"]["median"] >= detail["evals_to_5pct"]["median"]
    assert "flashtune compare" in report["command"] and "--seeds 3" in report["command"]
    pngs = sorted(p.name for p in (tmp_path / "out").glob("*.png"))
    # One set of curves per comparison.
    assert {"curves.png", "curves_held_out.png"} <= set(pngs) and len(pngs) == 2 * (1 + len(recorded_tables))
    assert (tmp_path / "out" / "report.json").exists()
    runs = [json.loads(line) for line in (tmp_path / "out" / "runs.jsonl").read_text().splitlines()]
    assert len(runs) == 2 * 3 * 3 * len(recorded_tables)
    assert {r["priors"] for r in runs} == {"none", "loo"}
    assert all(len(r["costs_ms"]) == 15 and r["budget"] == 15 for r in runs)
    printed = capsys.readouterr().out
    assert all(name in printed for name in ("random", "tpe", "ga", "feasible", "window", "held out"))
    assert printed.index("== COLD") < printed.index("== HELD OUT")


def test_tables_in_folders_are_merged_per_workload(recorded_tables, tmp_path) -> None:
    """A space recorded in parts (one folder per kernel variant) is one landscape per workload."""
    halves = [tmp_path / "part1", tmp_path / "part2"]
    for folder in halves:
        folder.mkdir()
    for table in recorded_tables:
        lines = table.read_text().splitlines()
        (halves[0] / table.name).write_text("\n".join(lines[::2]) + "\n")
        (halves[1] / table.name).write_text("\n".join(lines[1::2]) + "\n")
    merged = tmp_path / "merged.json"
    whole = tmp_path / "whole.json"
    common = ["--seeds", "2", "--budget", "10", "--strategies", "random", "--jobs", "1", "--priors", "none"]
    assert main(["compare", "--tables", *map(str, halves), *common, "--json", str(merged)]) == 0
    assert main(["compare", "--tables", *map(str, recorded_tables), *common, "--json", str(whole)]) == 0
    merged_report, whole_report = json.loads(merged.read_text()), json.loads(whole.read_text())
    assert merged_report["feasible"] == whole_report["feasible"]
    for name, detail in merged_report["workloads"].items():
        assert [p.rsplit("/", 2)[-2] for p in detail["tables"]] == ["part1", "part2"]
        assert detail["optimum_ms"] == whole_report["workloads"][name]["optimum_ms"]
    assert _without_timing(merged_report["strategies"]) == _without_timing(whole_report["strategies"])


def test_an_empty_or_missing_table_folder_is_named(tmp_path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["compare", "--tables", str(tmp_path / "empty")]) == 2
    assert "holds no *.jsonl" in capsys.readouterr().err
    assert main(["compare", "--tables", str(tmp_path / "nowhere")]) == 2
    assert "nowhere" in capsys.readouterr().err


def test_random_strategy_scores_zero_on_average(recorded_tables, tmp_path) -> None:
    report_path = tmp_path / "random.json"
    assert main(["compare", "--tables", str(recorded_tables[0]), "--seeds", "300", "--strategies", "random",
                 "--priors", "none", "--jobs", "1", "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    # The baseline is random search's exact expectation, so random runs average 0; one
    # run's score spreads by about 0.8 here, the mean of 300 by 0.05: allow four of those.
    assert abs(report["strategies"]["random"]["score"]) < 0.2


def test_a_target_never_reached_counts_as_budget_plus_one(recorded_tables, tmp_path) -> None:
    report_path = tmp_path / "grid.json"
    assert main(["compare", "--tables", str(recorded_tables[0]), "--seeds", "1", "--budget", "1",
                 "--strategies", "grid", "--jobs", "1", "--json", str(report_path)]) == 0
    detail = next(iter(json.loads(report_path.read_text())["strategies"]["grid"]["workloads"].values()))
    # Grid starts at the smallest tiles, never within 2 % of this optimum.
    assert detail["evals_to_2pct"]["median"] == 2
    assert detail["evals_to_2pct"]["reached"] == 0.0


def test_the_evaluation_line_names_the_options_given(recorded_tables, tmp_path, capsys) -> None:
    """Defaults are claimed only when no --option was given; given ones are named."""
    common = ["compare", "--tables", str(recorded_tables[0]), "--seeds", "1", "--budget", "3",
              "--strategies", "random,tpe", "--jobs", "1", "--priors", "none"]
    defaults, given = tmp_path / "defaults.json", tmp_path / "given.json"
    assert main([*common, "--json", str(defaults)]) == 0
    assert main([*common, "--option", "tpe.n_startup=2", "--json", str(given)]) == 0
    assert json.loads(defaults.read_text())["evaluation"] == "cold: no priors; strategy options are the registered defaults"
    line = json.loads(given.read_text())["evaluation"]
    assert "tpe.n_startup=2" in line and "are the registered defaults" not in line
    assert "evaluation: cold: no priors; strategy options: tpe.n_startup=2" in capsys.readouterr().out


def test_held_out_priors_are_the_other_workloads_even_when_one_is_selected(recorded_tables, tmp_path) -> None:
    """Held out is the default; a workload selected alone still gets the others as priors."""
    cold, held_out = tmp_path / "cold.json", tmp_path / "held_out.json"
    common = ["compare", "--tables", *map(str, recorded_tables), "--seeds", "2", "--budget", "10",
              "--strategies", "random", "--jobs", "1", "--workloads", recorded_tables[0].stem]
    assert main([*common, "--priors", "none", "--json", str(cold)]) == 0
    assert main([*common, "--json", str(held_out)]) == 0
    cold_report, report = json.loads(cold.read_text()), json.loads(held_out.read_text())
    assert report["priors"] == "loo" and "--priors loo" in report["command"]
    assert cold_report["evaluation"].startswith("cold") and "held_out" not in cold_report
    # The report's cold comparison is the cold run's, exactly (same seeds).
    assert _without_timing(report["strategies"]) == _without_timing(cold_report["strategies"])
    # The priors (the other workload's table) change what random search measures first.
    assert _without_timing(report["held_out"]["strategies"]) != _without_timing(cold_report["strategies"])


def test_worker_processes_give_the_same_report(recorded_tables, tmp_path) -> None:
    reports = []
    for jobs in ("1", "2"):
        path = tmp_path / f"jobs{jobs}.json"
        assert main(["compare", "--tables", str(recorded_tables[1]), "--seeds", "2", "--budget", "12",
                     "--strategies", "ga,random", "--jobs", jobs, "--json", str(path)]) == 0
        reports.append(json.loads(path.read_text())["strategies"])
    # Seeded runs give the same numbers in any process; only the timing differs.
    assert _without_timing(reports[0]) == _without_timing(reports[1])


def _without_timing(strategies: dict) -> dict:
    return {name: {w: {k: v for k, v in d.items() if k != "seconds_per_run"} for w, d in entry["workloads"].items()}
            for name, entry in strategies.items()}


@pytest.mark.parametrize(("argv", "message"), [
    (["--strategies", "tpe,annealing"], "annealing"),
    (["--workloads", "b9_nothing"], "b9_nothing"),
    (["--option", "tpe.n_startp=3", "--strategies", "tpe"], "n_startp"),
    (["--option", "tpe-n_startup=3"], "STRATEGY.NAME=VALUE"),
    (["--option", "tpe.start_center=no", "--strategies", "tpe"], "start_center"),
    (["--seeds", "0"], "--seeds"),
])
def test_bad_arguments_fail_with_one_clear_line(recorded_tables, capsys, argv, message) -> None:
    assert main(["compare", "--tables", str(recorded_tables[0]), *argv]) == 2
    assert message in capsys.readouterr().err


def test_python_spelled_bools_are_bools() -> None:
    from flashtune.experiments.cli.compare import _parse_options

    options = _parse_options(["tpe.start_center=False", "ga.start_center=true"], ["tpe", "ga"])
    assert options == {"tpe": {"start_center": False}, "ga": {"start_center": True}}


def test_tables_of_two_workloads_are_not_one_landscape(recorded_tables) -> None:
    with pytest.raises(ValueError, match="2 workloads"):
        build_landscape(recorded_tables, load_spec("h200"))


def test_the_report_leads_cold_and_says_where_held_out_priors_placed_the_optimum_first(
        recorded_tables, tmp_path, capsys) -> None:
    """A twin workload (the same times, another batch) hands its held-out search the answer:
    the report leads with the cold comparison and notes, in the held-out one only, that
    the strategies are not being compared there."""
    table = recorded_tables[1]
    rows = [json.loads(line) for line in table.read_text().splitlines()]
    twin = tmp_path / "twin.jsonl"
    twin.write_text("".join(json.dumps({**r, "workload": {**r["workload"], "batch": 2 * r["workload"]["batch"]}}) + "\n"
                            for r in rows))
    report_path = tmp_path / "report.json"
    assert main(["compare", "--tables", str(table), str(twin), "--seeds", "2", "--budget", "10",
                 "--strategies", "random,tpe", "--jobs", "1", "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["first_is_optimal"] == [] and len(report["held_out"]["first_is_optimal"]) == 2
    assert report["held_out"]["same_as_cold"] == []  # the twin's priors changed the runs
    printed = capsys.readouterr().out
    cold, held_out = printed.split("== HELD OUT")
    assert cold.startswith("== COLD") and "NOTE" not in cold
    assert "NOTE: on 2 of 2 workloads every strategy's first evaluation is within 2 %" in held_out
    assert "the strategies are not being compared" in held_out


def test_by_default_compare_scores_the_space_tune_replays(tmp_path) -> None:
    """No --tables: the recorded space `flashtune tune` replays (not the 120-config folder), at
    tune's default budget (the whole space would be 510-1,314 trials a run there)."""
    from flashtune.experiments.study import measurers
    from flashtune.objectives.types import SUITE

    spec = load_spec("h200")
    workload = SUITE[0]
    measurer = measurers.open_replay(spec, [workload])  # what `flashtune tune` replays for it
    measurer.close()
    replayed = set(measurer._objective.table(workload))
    report_path = tmp_path / "compare.json"
    assert main(["compare", "--strategies", "random", "--seeds", "1", "--priors", "none", "--jobs", "1",
                 "--workloads", workload.name, "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["budget"] == 50 and "--budget 50" in report["command"]
    landscape = build_landscape([measurers.table_path(f, workload) for f in measurers.default_replay_dirs(spec)
                                 if measurers.table_path(f, workload).exists()], spec)
    assert set(landscape.table) == replayed  # the same configs as tune's replay
    assert report["feasible"][workload.name] == len(landscape.feasible) > 120
