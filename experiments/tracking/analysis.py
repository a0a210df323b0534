"""Read studies back from MLflow as tables, for notebooks: runs, curves, best configs,
parameter importance. Everything comes from the tracking store, nothing from Optuna, so a
notebook works on any store people share (a file, a server)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from flashtune.experiments.tracking.tracker import mlflow_client

#: Parent-run tags that describe a study (columns of :func:`studies`).
STUDY_TAGS = ("study", "gpu", "compute_capability", "fingerprint", "strategy", "seed", "workload", "objective",
              "torch", "triton", "cuda", "driver")


def _search(uri: str, experiment_ids: Sequence[str], filter_string: str) -> list[Any]:
    client, runs, token = mlflow_client(uri), [], None
    while True:
        page = client.search_runs(list(experiment_ids), filter_string=filter_string, max_results=5000,
                                  page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def experiment_ids(uri: str) -> dict[str, str]:
    """Flashtune experiments of the store: id -> name (one per GPU model)."""
    return {e.experiment_id: e.name for e in mlflow_client(uri).search_experiments(max_results=1000)
            if e.name.startswith("flashtune/")}


def studies(uri: str) -> pd.DataFrame:
    """One row per study (parent run): its tags, status, best time and trial counts."""
    ids = experiment_ids(uri)
    rows = []
    for run in _search(uri, list(ids), "tags.role = 'study'") if ids else []:
        row = {tag: run.data.tags.get(tag, "") for tag in STUDY_TAGS}
        metrics = run.data.metrics
        row.update(run_id=run.info.run_id, experiment=ids[run.info.experiment_id], status=run.info.status,
                   best_ms=metrics.get("best_ms", math.nan), best_tflops=metrics.get("best_tflops", math.nan),
                   trials=metrics.get("trials", math.nan), trials_failed=metrics.get("trials_failed", math.nan))
        rows.append(row)
    columns = [*STUDY_TAGS, "run_id", "experiment", "status", "best_ms", "best_tflops", "trials", "trials_failed"]
    return pd.DataFrame(rows, columns=columns)


def curves(uri: str, parents: pd.DataFrame) -> pd.DataFrame:
    """Best-so-far per trial of each study: columns run_id, step (trial number), best_ms."""
    client, rows = mlflow_client(uri), []
    for run_id in parents["run_id"]:
        for metric in client.get_metric_history(run_id, "best_ms"):
            rows.append({"run_id": run_id, "step": metric.step, "best_ms": metric.value})
    frame = pd.DataFrame(rows, columns=["run_id", "step", "best_ms"])
    # A resumed study may log a step again; the latest value is the truth.
    return frame.drop_duplicates(["run_id", "step"], keep="last").sort_values(["run_id", "step"])


def trials(uri: str, parents: pd.DataFrame) -> pd.DataFrame:
    """One row per trial (child run) of the given studies: config params, status, metrics."""
    ids = experiment_ids(uri)
    wanted = set(parents["run_id"])
    by_parent = parents.set_index("run_id")
    rows = []
    for run in _search(uri, list(ids), "tags.role = 'trial'") if ids else []:
        parent = run.data.tags.get("mlflow.parentRunId")
        if parent not in wanted:
            continue
        row: dict[str, Any] = {"run_id": parent, "trial": int(run.data.tags.get("trial", -1)),
                               "status": run.data.tags.get("status", ""),
                               "gpu": by_parent.at[parent, "gpu"], "workload": by_parent.at[parent, "workload"],
                               "strategy": by_parent.at[parent, "strategy"]}
        row.update({f"param.{k}": _value(v) for k, v in run.data.params.items()})
        row.update(run.data.metrics)
        rows.append(row)
    return pd.DataFrame(rows)


def _value(text: str) -> int | bool | str:
    """MLflow keeps params as text; configs hold ints, bools and strings."""
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        return text


def config_columns(frame: pd.DataFrame) -> list[str]:
    return sorted(c for c in frame.columns if c.startswith("param."))


def best_configs(trial_rows: pd.DataFrame) -> pd.DataFrame:
    """The fastest ok trial per (GPU, workload), with its config and numbers."""
    ok = trial_rows[trial_rows["status"] == "ok"]
    if ok.empty:
        return pd.DataFrame()
    best = ok.loc[ok.groupby(["gpu", "workload"])["median_ms"].idxmin()]
    columns = ["gpu", "workload", "strategy", *config_columns(ok), "median_ms", "tflops"]
    return best[columns].rename(columns=lambda c: c.removeprefix("param.")).reset_index(drop=True)


def param_importance(trial_rows: pd.DataFrame, groups: Iterable[str] = ("gpu", "workload")) -> pd.DataFrame:
    """Optuna's parameter importance of log(median ms) per group, from the ok trials.

    Every study's trials of a group are pooled (the landscape is the GPU's and the
    workload's, not the strategy's). Parameters that took one value are left out.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    ok = trial_rows[trial_rows["status"] == "ok"]
    for key, group in ok.groupby(list(groups)):
        params = [c for c in config_columns(group) if group[c].nunique() > 1]
        if len(group) < 4 or not params:
            continue
        distributions = {c.removeprefix("param."): optuna.distributions.CategoricalDistribution(
            sorted(group[c].astype(str).unique())) for c in params}
        study = optuna.create_study()
        for _, row in group.drop_duplicates(params).iterrows():
            study.add_trial(optuna.trial.create_trial(
                params={c.removeprefix("param."): str(row[c]) for c in params},
                distributions=distributions, value=math.log(row["median_ms"])))
        evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
        importance = optuna.importance.get_param_importances(study, evaluator=evaluator)
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(groups, key)), **importance})
    return pd.DataFrame(rows).fillna(0.0)


def per_value_slowdown(trial_rows: pd.DataFrame) -> pd.DataFrame:
    """A simple per-parameter view: for each value, the median slowdown vs the group's best.

    Slowdown = median_ms / best median_ms of the same (GPU, workload); 1.0 is the best.
    """
    ok = trial_rows[trial_rows["status"] == "ok"].copy()
    if ok.empty:
        return pd.DataFrame(columns=["param", "value", "median_slowdown", "trials"])
    ok["slowdown"] = ok["median_ms"] / ok.groupby(["gpu", "workload"])["median_ms"].transform("min")
    rows = []
    for column in config_columns(ok):
        for value, group in ok.groupby(column):
            rows.append({"param": column.removeprefix("param."), "value": value,
                         "median_slowdown": float(group["slowdown"].median()), "trials": len(group)})
    return pd.DataFrame(rows)
