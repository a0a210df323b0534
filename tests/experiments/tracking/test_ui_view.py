"""The study's saved view for the MLflow UI: the tag MLflow reads, and finding it again."""

from __future__ import annotations

import json

import pytest
from mlflow import MlflowClient

from flashtune.experiments.tracking.ui_view import (
    OBJECTIVE_METRIC,
    VIEW_TAG_PREFIX,
    saved_studies,
    view_id,
    view_tag,
    view_url_path,
)


def test_the_view_is_mlflows_envelope_sorted_by_the_objective() -> None:
    key, value = view_tag("k1", now_ms=123)
    assert key == VIEW_TAG_PREFIX + view_id("k1")
    envelope = json.loads(value)
    assert envelope["name"] == "flashtune study k1" and envelope["createdAt"] == 123
    state = json.loads(envelope["state"])
    assert state["orderByKey"] == f"metrics.`{OBJECTIVE_METRIC}`" and state["orderByAsc"] is True
    assert state["searchFilter"] == "tags.study = 'k1' AND tags.role = 'trial'"
    assert state["selectedColumns"][0] == f"metrics.`{OBJECTIVE_METRIC}`"
    assert "params.`BLOCK_M`" in state["selectedColumns"] and "params.`num_splits`" in state["selectedColumns"]
    assert state["runsHiddenMode"] == "FIRST_10_RUNS"  # with the sort above: the 10 fastest on the charts


def test_one_view_per_study_and_a_url_that_opens_it() -> None:
    assert view_id("a") == view_id("a") != view_id("b")
    assert view_url_path("7", "a") == f"/#/experiments/7/runs?workflowType=machine_learning&viewStateShareKey={view_id('a')}"


def test_a_quote_in_a_study_name_is_refused() -> None:
    with pytest.raises(ValueError, match="quote"):
        view_tag("it's", now_ms=0)


def test_saved_studies_reads_a_real_store_and_skips_other_views(stores) -> None:
    client = MlflowClient(tracking_uri=stores["tracking_uri"])
    eid = client.create_experiment("flashtune/view-test")
    for study in ("beta", "alpha"):
        client.set_experiment_tag(eid, *view_tag(study, now_ms=1))
    client.set_experiment_tag(eid, VIEW_TAG_PREFIX + "someone", json.dumps({"name": "my view", "createdAt": 1, "state": "{}"}))
    client.set_experiment_tag(eid, VIEW_TAG_PREFIX + "broken", "not json")
    client.set_experiment_tag(eid, VIEW_TAG_PREFIX + "forged", json.dumps({"name": "flashtune study alpha"}))
    assert saved_studies(client.get_experiment(eid).tags) == ["alpha", "beta"]
