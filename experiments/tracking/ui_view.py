"""A study's saved view in the MLflow UI: its trials fastest first, the metrics and knobs as columns.

Left to itself, MLflow's runs page shows no metric columns until "Show more columns", sorts
by start time, and its charts draw the first 10 runs of that order, so the best trial is
rarely on them. MLflow (3.x) keeps a saved view as an experiment tag
``mlflow.sharedViewState.<id>`` whose value is an envelope ``{name, createdAt, state}``;
``#/experiments/<experiment id>/runs?viewStateShareKey=<id>`` opens it, and the page's
"Views" menu lists it. The state used here:

- the study's trials only (``tags.study`` and ``tags.role``: a trial's parent would sort
  above them with no time of its own);
- sorted by ``median_ms`` ascending, fastest first (failed trials have no time and sort
  last);
- the time, TFLOP/s, correctness and resource metrics, the status tag and every knob as
  visible columns;
- charts over the first 10 runs of that order: the 10 best trials.

The fields are MLflow's own (``ExperimentPageUIState`` and the search facets of
``mlflow/server/js``); the UI fills any field left out with its default.
"""

from __future__ import annotations

import hashlib
import json

from flashtune.experiments.tracking.tags import ROLE_TAG, STATUS_TAG, STUDY_TAG
from flashtune.kernels.space import DECODE_TUNABLES, TUNABLES
from flashtune.objectives.metrics import view_metrics

VIEW_TAG_PREFIX = "mlflow.sharedViewState."
#: The URL parameter that opens a saved view on the runs page.
VIEW_URL_PARAM = "viewStateShareKey"
#: The objective: lower is better. A trial's child run logs it as a metric.
OBJECTIVE_METRIC = "median_ms"
VIEW_NAME_PREFIX = "flashtune study "


def view_id(study_name: str) -> str:
    """The view's id: fixed per study, so writing it again updates it instead of adding one."""
    return "flashtune-" + hashlib.sha256(study_name.encode()).hexdigest()[:24]


def view_state(study_name: str) -> dict:
    """The runs page state of the study's view (see the module docstring)."""
    knobs = list(dict.fromkeys([*TUNABLES, *DECODE_TUNABLES]))
    columns = [
        # The declared view metrics first, in their order (objectives/metrics.py); the knobs follow.
        *(_column("metrics", m.mlflow) for m in view_metrics()),
        _column("tags", STATUS_TAG),
        *(_column("params", name) for name in knobs),
    ]
    return {
        "searchFilter": f"tags.{STUDY_TAG} = '{_quoted(study_name)}' AND tags.{ROLE_TAG} = 'trial'",
        "orderByKey": _column("metrics", OBJECTIVE_METRIC),
        "orderByAsc": True,
        "selectedColumns": columns,
        # Without an order the grid sorts a group's columns by name (compile_s first).
        "columnOrder": columns,
        "runsHiddenMode": "FIRST_10_RUNS",
        "hideEmptyCharts": True,
    }


def view_tag(study_name: str, now_ms: int) -> tuple[str, str]:
    """The experiment tag (key, value) that saves the study's view."""
    envelope = {
        "name": VIEW_NAME_PREFIX + study_name,
        "createdAt": now_ms,
        "updatedAt": now_ms,
        # MLflow writes this field deflate-compressed; it reads plain JSON as well.
        "state": json.dumps(view_state(study_name), separators=(",", ":")),
    }
    return VIEW_TAG_PREFIX + view_id(study_name), json.dumps(envelope, separators=(",", ":"))


def view_url_path(experiment_id: str, study_name: str) -> str:
    """The UI path (append to the UI's base URL) that opens the study's view."""
    return f"{runs_url_path(experiment_id)}&{VIEW_URL_PARAM}={view_id(study_name)}"


def runs_url_path(experiment_id: str) -> str:
    """The UI path of an experiment's runs table, with the sidebar on its training pages
    (MLflow 3 opens on its GenAI ones, which hold nothing for a study)."""
    return f"/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def saved_studies(experiment_tags: dict[str, str]) -> list[str]:
    """The studies whose view an experiment's tags hold, by name (other saved views skipped)."""
    names = []
    for key, value in experiment_tags.items():
        if not key.startswith(VIEW_TAG_PREFIX):
            continue
        try:
            name = json.loads(value).get("name", "")
        except (ValueError, AttributeError):
            continue  # a view someone saved by hand, or a broken one: not ours to list
        if isinstance(name, str) and name.startswith(VIEW_NAME_PREFIX):
            study = name[len(VIEW_NAME_PREFIX):]
            if key == VIEW_TAG_PREFIX + view_id(study):
                names.append(study)
    return sorted(names)


def _column(kind: str, name: str) -> str:
    # MLflow's canonical column key: kind.`name`.
    return f"{kind}.`{name}`"


def _quoted(text: str) -> str:
    # Study names never hold a quote (study.runner.check_study_name); one here would end
    # the filter's string early, so it is refused rather than escaped.
    if "'" in text:
        raise ValueError(f"study name {text!r}: a quote cannot go into an MLflow filter")
    return text
