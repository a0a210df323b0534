"""``flashtune.experiments.tune_any.tune``: a user's own space and objective, logged to MLflow."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashtune.experiments.evaluation.landscape import build_landscape
from flashtune.experiments.tune_any import tune
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.replay import ReplayObjective
from flashtune.objectives.types import Status

PNPOLY = Path(__file__).parents[2] / "experiments" / "data" / "foreign" / "pnpoly_RTX_3090.json.gz"


def test_a_users_space_and_callable_are_tuned_and_logged(stores) -> None:
    from mlflow import MlflowClient

    def objective(config):
        if config["unroll"] == 4 and config["block"] == 128:
            raise RuntimeError("too many registers")  # a failure is a value, not a crash
        if config["fraction"] == 0.75:
            return "RuntimeFailedConfig"
        return 1.0 + abs(config["block"] - 64) / 64 + config["fraction"] + 0.1 * config["unroll"]

    space = {"block": [16, 32, 64, 128], "unroll": [1, 2, 4], "fraction": [0.25, 0.5, 0.75]}
    result = tune(space, objective, restrictions=["block * unroll <= 256"], trials=12, strategy="portfolio",
                  seed=3, study_name="user-kernel", gpu_name="RTX 3090", tracking_uri=stores["tracking_uri"])
    assert len(result.trials) == 12
    assert all(t.config["block"] * t.config["unroll"] <= 256 for t in result.trials)
    assert result.best is not None and result.best.measurement.workload is None
    client = MlflowClient(stores["tracking_uri"])
    parent = client.get_run(result.parent_run_id)
    assert parent.info.status == "FINISHED" and parent.data.tags["space"] == "user"
    assert client.get_experiment(result.experiment_id).name.endswith("RTX 3090")
    children = client.search_runs([result.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert len(children) == 12
    failed = {t.number for t in result.trials if not t.measurement.ok}
    assert {int(r.data.tags["trial"]) for r in children if r.info.status == "FAILED"} == failed
    assert parent.data.metrics["best_ms"] == pytest.approx(result.best.cost_ms)


def test_a_recorded_cache_file_is_a_space_and_objective_without_tracking() -> None:
    landscape = build_landscape(PNPOLY, load_spec("h200"))
    replay = ReplayObjective(landscape.table.values())
    result = tune(landscape.space, replay.evaluate, trials=20, strategy="random", seed=0)
    assert len(result.trials) == 20 and result.parent_run_id == ""
    statuses = {t.measurement.status for t in result.trials}
    assert statuses <= {Status.OK, Status.RUNTIME_ERROR}
    assert result.best.cost_ms == min(landscape.cost(t.config) for t in result.trials)
    with pytest.raises(ValueError, match="trials must be an int >= 1"):
        tune(landscape.space, replay.evaluate, trials=0)


def test_a_space_smaller_than_the_budget_runs_what_it_holds_and_says_so() -> None:
    space = {"block": [32, 64, 128], "unroll": [1, 2]}
    with pytest.warns(UserWarning, match=r"tune: 5 of the 50 trials asked ran: .*the space admits 5 configs"):
        result = tune(space, lambda c: c["block"] / c["unroll"], restrictions=["block * unroll <= 128"],
                      trials=50, strategy="grid")
    assert len(result.trials) == 5
