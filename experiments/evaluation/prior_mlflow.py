"""Trials read back from MLflow: a study's, or every study's of a GPU model's experiment.

A study is tracked as one parent run with a child run per trial
(``flashtune.experiments.tracking.tracker``): the child holds the config as params, the
measurement as metrics and its status as a tag; the parent holds the workload (params
``workload.*``), the GPU and its fingerprint and versions (tags). This module turns
children back into :class:`~flashtune.objectives.types.Measurement` s: as recorded
(:func:`trial_measurements_of_run`, :func:`trial_measurements_of_experiment`, which
``flashtune export`` stores the best of), or with ``source="prior"`` (:func:`read_run`,
:func:`read_experiment`), so what one GPU learned steers a study on another.

Children still RUNNING (a write cut short by a kill) are skipped: the study's resume
rewrites them, and their metrics may be incomplete.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from flashtune.experiments.evaluation.prior_files import as_prior
from flashtune.experiments.tracking.tracker import (
    DEFAULT_TAG,
    PARENT_TAG,
    ROLE_TAG,
    STATUS_TAG,
    experiment_name,
    mlflow_client,
)
from flashtune.kernels.config import Config, Value
from flashtune.kernels.space import IMPLIED, KERNEL_TUNABLES
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.metrics import from_mlflow
from flashtune.objectives.types import Measurement, Status, Workload

_VERSION_TAGS = ("driver", "cuda", "torch", "triton")


#: Key of ``Measurement.versions`` naming the trial's MLflow run.
RUN_ID_KEY = "run_id"


def trial_measurements_of_run(tracking_uri: str, run_id: str) -> list[Measurement]:
    """The trials of one study, given its parent run's id, as measured (each names its
    child run in ``versions["run_id"]``).

    Raises:
        ValueError: no such run, or the run is not a flashtune study's parent (a trial's
            run names its parent in the message).
    """
    client = mlflow_client(tracking_uri)
    try:
        parent = client.get_run(run_id)
    except Exception as exc:  # MLflow raises its own exception types per store
        raise ValueError(f"mlflow:{run_id}: no such run in {tracking_uri} ({type(exc).__name__})") from None
    role = parent.data.tags.get(ROLE_TAG)
    if role == "trial":
        raise ValueError(f"mlflow:{run_id} is one trial; give its study's run, "
                         f"mlflow:{parent.data.tags.get(PARENT_TAG, '?')}")
    if role != "study":
        raise ValueError(f"mlflow:{run_id} is not a flashtune study run (tag {ROLE_TAG}={role!r})")
    children = _search(client, [parent.info.experiment_id],
                       f"tags.{ROLE_TAG} = 'trial' AND tags.{PARENT_TAG} = '{run_id}'")
    return [m for child in children if (m := _measurement(child, parent)) is not None]


def trial_measurements_of_experiment(tracking_uri: str, name: str) -> list[Measurement]:
    """The trials of every study in a GPU model's experiment, as measured.

    Args:
        tracking_uri: the MLflow tracking URI.
        name: the experiment's name (``flashtune/NVIDIA H200``), the GPU's name
            (``NVIDIA H200``) or a shipped spec's short name (``h200``).

    Raises:
        ValueError: no such experiment (the message lists the flashtune experiments there).
    """
    client = mlflow_client(tracking_uri)
    experiment = _find_experiment(client, name)
    if experiment is None:
        known = sorted(e.name for e in client.search_experiments() if e.name.startswith("flashtune/"))
        raise ValueError(f"mlflow-experiment:{name}: no such experiment in {tracking_uri}; "
                         f"flashtune experiments there: {known or 'none'}")
    ids = [experiment.experiment_id]
    parents = {run.info.run_id: run for run in _search(client, ids, f"tags.{ROLE_TAG} = 'study'")}
    measurements = []
    for child in _search(client, ids, f"tags.{ROLE_TAG} = 'trial'"):
        parent = parents.get(child.data.tags.get(PARENT_TAG, ""))
        if parent is not None and (m := _measurement(child, parent)) is not None:
            measurements.append(m)
    return measurements


def default_measurements(tracking_uri: str, kind: str, value: str) -> list[Measurement]:
    """The runtime's default config as measured by each study of an ``mlflow:RUN_ID`` or
    ``mlflow-experiment:NAME`` source (``flashtune tune`` tags its parent run with it;
    studies from before that tag have none).

    Raises:
        ValueError: as :func:`trial_measurements_of_run` and :func:`trial_measurements_of_experiment`.
    """
    client = mlflow_client(tracking_uri)
    if kind == "mlflow":
        parents = [client.get_run(value)]
    else:
        experiment = _find_experiment(client, value)
        parents = [] if experiment is None else _search(client, [experiment.experiment_id],
                                                        f"tags.{ROLE_TAG} = 'study'")
    defaults = []
    for parent in parents:
        text = parent.data.tags.get(DEFAULT_TAG)
        try:
            defaults.append(Measurement.from_dict(json.loads(text)))
        except (TypeError, ValueError, KeyError):
            continue  # no default recorded (an older study), or not readable: nothing to compare with
    return defaults


def read_run(tracking_uri: str, run_id: str, label: str) -> list[Measurement]:
    """:func:`trial_measurements_of_run` as priors of source ``label``."""
    return [as_prior(m, label) for m in trial_measurements_of_run(tracking_uri, run_id)]


def read_experiment(tracking_uri: str, name: str, label: str) -> list[Measurement]:
    """:func:`trial_measurements_of_experiment` as priors of source ``label``."""
    return [as_prior(m, label) for m in trial_measurements_of_experiment(tracking_uri, name)]


def _find_experiment(client: Any, name: str) -> Any:
    candidates = [name, experiment_name(name)]
    try:

        candidates.append(experiment_name(load_spec(name).name))
    except ValueError:  # not a shipped spec's name: the names above are all there is
        pass
    for candidate in candidates:
        experiment = client.get_experiment_by_name(candidate)
        if experiment is not None and experiment.lifecycle_stage != "deleted":
            return experiment
    return None


def _search(client: Any, experiment_ids: list[str], filter_string: str) -> list[Any]:
    runs, token = [], None
    while True:
        page = client.search_runs(experiment_ids, filter_string=filter_string, max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _measurement(child: Any, parent: Any) -> Measurement | None:
    """A trial's child run as a Measurement; None for a child still RUNNING or unreadable."""
    if child.info.status not in ("FINISHED", "FAILED"):
        return None
    tags, metrics = child.data.tags, child.data.metrics
    try:
        config = parse_config(child.data.params)
        workload = parse_workload(parent.data.params)
        status = Status(tags.get(STATUS_TAG, ""))
    except (ValueError, TypeError):
        return None  # not a flashtune trial (or from a version that logged otherwise)
    fields = from_mlflow(metrics)
    if status is Status.OK and not math.isfinite(fields.get("median_ms", math.inf)):
        return None  # a success without a time says nothing a ranking can use
    ptags = parent.data.tags
    versions = {k: ptags[k] for k in _VERSION_TAGS if ptags.get(k)}
    return Measurement(
        config=config, workload=workload, status=status, fingerprint=ptags.get("fingerprint", ""),
        hardware=ptags.get("gpu", ""), error=tags.get("error", ""), source=tags.get("source", "measured"),
        versions={**versions, RUN_ID_KEY: child.info.run_id}, **fields,
    )


def parse_config(params: Mapping[str, str]) -> Config:
    """A config from MLflow params (all text): each value read back as its kernel (the
    ``kernel`` param: ``decode``; none: ``prefill``) declares it.

    Raises:
        ValueError: the kernel is unknown, a value is none of its tunable's declared values,
            or a key is not a tunable of the kernel.
    """
    kernel = params.get("kernel", IMPLIED["kernel"])
    if kernel not in KERNEL_TUNABLES:
        raise ValueError(f"param kernel={kernel!r} is not one of {list(KERNEL_TUNABLES)}")
    tunables = KERNEL_TUNABLES[kernel]
    values: dict[str, Value] = {}
    for name, text in params.items():
        if name not in tunables:
            raise ValueError(f"param {name!r} is not a tunable of the {kernel} kernel")
        allowed = {str(v): v for v in tunables[name]}
        if text not in allowed:
            raise ValueError(f"param {name}={text!r} is not one of {list(allowed)}")
        values[name] = allowed[text]
    if not values:
        raise ValueError("no config params")
    return Config(values)


def parse_workload(params: Mapping[str, str]) -> Workload:
    """A workload from a study parent's ``workload.*`` params."""
    fields: dict[str, Any] = {}
    for key, text in params.items():
        if not key.startswith("workload."):
            continue
        name = key[len("workload."):]
        if name == "dtype":
            fields[name] = text
        elif name == "causal":
            fields[name] = _bool(text)
        else:
            fields[name] = int(text)
    return Workload.from_dict(fields)


def _bool(text: str) -> bool:
    if text not in ("True", "False"):
        raise ValueError(f"not a bool: {text!r}")
    return text == "True"


__all__: Iterable[str] = ("RUN_ID_KEY", "default_measurements", "parse_config", "parse_workload", "read_experiment", "read_run",
                          "trial_measurements_of_experiment", "trial_measurements_of_run")
