"""Other people's recorded spaces: Kernel Tuner cache and T4 files, read, replayed, compared.

The files are slices of the development set (experiments/data/foreign/make_slices.py).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from flashtune.experiments.cli.main import main
from flashtune.experiments.evaluation.landscape import build_landscape
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.kernel_tuner_files import load_kernel_tuner
from flashtune.objectives.replay import ReplayObjective
from flashtune.objectives.types import Status

FOREIGN = Path(__file__).parents[3] / "experiments" / "data" / "foreign"
PNPOLY, PNPOLY_T4 = FOREIGN / "pnpoly_RTX_3090.json.gz", FOREIGN / "pnpoly_RTX_3090_T4.json.gz"


def test_a_cache_file_and_its_t4_twin_name_the_same_configs_and_failures() -> None:
    cache, t4 = load_kernel_tuner(PNPOLY), load_kernel_tuner(PNPOLY_T4)
    assert cache.name == "pnpoly_RTX_3090" and cache.device == "NVIDIA GeForce RTX 3090"
    assert list(cache.tunables) == ["between_method", "block_size_x", "tile_size", "use_method"]
    assert len(cache.measurements) == len(t4.measurements) == 288
    failed = {m.config for m in cache.measurements if not m.ok}
    assert len(failed) == 16 and failed == {m.config for m in t4.measurements if not m.ok}
    assert {m.status for m in cache.measurements if not m.ok} == {Status.RUNTIME_ERROR}
    assert all(m.workload is None and m.p20_ms <= m.median_ms * 1.5 for m in cache.measurements if m.ok)


def test_replay_answers_from_a_cache_file_with_failures_as_values() -> None:
    objective = ReplayObjective.from_files([PNPOLY])
    recorded = load_kernel_tuner(PNPOLY).measurements
    failed = next(m for m in recorded if not m.ok)
    assert objective.evaluate(failed.config).status is Status.RUNTIME_ERROR
    assert objective.evaluate(failed.config).error == "RuntimeFailedConfig"
    assert objective.optimum().median_ms == min(m.median_ms for m in recorded if m.ok)


def test_landscape_of_a_cache_file_is_its_recorded_configs() -> None:
    landscape = build_landscape(PNPOLY, load_spec("h200"))
    assert landscape.name == "pnpoly_RTX_3090" and landscape.workload is None
    assert landscape.space.size == 4 * 6 * 4 * 3 == len(landscape.feasible)  # the slice is exhaustive
    assert landscape.optimum_ms == min(m.median_ms for m in landscape.table.values() if m.ok)


def test_compare_reads_cache_and_t4_files(tmp_path, capsys) -> None:
    report_path = tmp_path / "report.json"
    rc = main(["compare", "--tables", str(PNPOLY), str(PNPOLY_T4), "--seeds", "2", "--budget", "12",
               "--strategies", "random,portfolio", "--priors", "none", "--jobs", "1", "--json", str(report_path)])
    assert rc == 0
    report = json.loads(report_path.read_text())
    assert set(report["workloads"]) == {"pnpoly_RTX_3090", "pnpoly_RTX_3090_T4"}
    assert report["workloads"]["pnpoly_RTX_3090"]["feasible"] == 288
    for entry in report["strategies"].values():
        assert 1 <= entry["evals_to_2pct"]["median"] <= 13
        reached = [w["evals_to_2pct"]["reached"] for w in entry["workloads"].values()]
        assert entry["hit_rate_2pct"] == pytest.approx(sum(reached) / 2)
    assert "hit rate (runs within 2 % of the optimum in budget)" in capsys.readouterr().out


def _write(path: Path, data: object) -> Path:
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    return path


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    data = json.loads(gzip.decompress(PNPOLY.read_bytes()))
    truncated = tmp_path / "truncated.json.gz"
    truncated.write_bytes(PNPOLY.read_bytes()[:5000])
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps(data)[:3000])
    version = _write(tmp_path / "version.json.gz", {**data, "schema_version": "9.9"})
    broken = json.loads(json.dumps(data))
    key = next(iter(broken["cache"]))
    broken["cache"][key]["tile_size"] = 3  # not one of its own tune_params
    outside = _write(tmp_path / "outside.json.gz", broken)
    return {"truncated gzip": (truncated, "truncated or corrupt gzip data"),
            "truncated json": (cut, "truncated"),
            "unknown version": (version, "unknown Kernel Tuner cache schema_version '9.9'"),
            "outside tune_params": (outside, "has tile_size=3, not one of its tune_params [1, 4, 12, 20]")}


@pytest.mark.parametrize("case", ["truncated gzip", "truncated json", "unknown version", "outside tune_params"])
def test_a_bad_cache_file_is_one_line_naming_file_and_problem(case, tmp_path, capsys) -> None:
    path, problem = _bad_files(tmp_path)[case]
    rc = main(["compare", "--tables", str(path), "--seeds", "1", "--budget", "5", "--strategies", "random",
               "--priors", "none", "--jobs", "1"])
    err = capsys.readouterr().err.strip()
    assert rc != 0
    assert len(err.splitlines()) == 1 and str(path) in err and problem in err


def test_a_strategy_at_the_optimum_is_drawn_on_the_log_axis_floor() -> None:
    """Curves at 0 % used to vanish below a symlog axis: they sit on a labelled floor now."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from flashtune.experiments.evaluation.compare import RunResult, RunSpec
    from flashtune.experiments.evaluation.compare_plot import FLOOR_PCT, _draw

    ls = build_landscape(PNPOLY, load_spec("h200"))
    at_optimum = RunResult(RunSpec("lucky", (), ls.name, 0, 10), (ls.optimum_ms,) * 10, 0.0)
    figure, ax = plt.subplots()
    _draw(ax, ls, {("lucky", ls.name): [at_optimum]}, ["lucky"], {"lucky": "C0"})
    line = next(line for line in ax.get_lines() if line.get_label() == "lucky")
    assert ax.get_yscale() == "log" and list(line.get_ydata()) == [FLOOR_PCT] * 10
    assert ax.get_ylim()[0] < FLOOR_PCT
    assert {t.get_text() for t in ax.texts} >= {"2 %", "5 %"}
    plt.close(figure)


def test_held_out_priors_of_another_kernel_are_said_to_change_nothing(tmp_path, capsys) -> None:
    """A cache file's held-out priors are the other tables; another kernel's give this space
    nothing to use, and the report says its held-out part repeats the cold one."""
    other = tmp_path / "toy_Synthetic.json"
    other.write_text(json.dumps({
        "device_name": "Synthetic GPU", "kernel_name": "toy", "problem_size": 1, "tune_params_keys": ["x"],
        "tune_params": {"x": [1, 2, 3]}, "objective": "time",
        "cache": {str(x): {"x": x, "time": float(x)} for x in (1, 2, 3)}}))
    report_path = tmp_path / "report.json"
    assert main(["compare", "--tables", str(PNPOLY), str(other), "--seeds", "2", "--budget", "3",
                 "--strategies", "random,gp", "--jobs", "1", "--workloads", PNPOLY.name.split(".")[0],
                 "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["held_out"]["same_as_cold"] == list(report["workloads"])
    held_out = capsys.readouterr().out.split("== HELD OUT")[1]
    assert "the priors changed no run" in held_out
