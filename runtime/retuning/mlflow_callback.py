"""Log the online tuner's metrics to MLflow: the one runtime module that imports mlflow.

Pass an instance in ``OnlineTuner(callbacks=[...])``; the tuner calls it from its worker
thread every ``metrics_every_s`` with :meth:`OnlineTuner.metrics`. Nested per-bucket
metrics become ``buckets/<bucket>/<metric>`` names; each call is one step.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import mlflow
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from flashtune.runtime.retuning.monitor import flatten_metrics

EXPERIMENT = "flashtune-runtime"


class MlflowMetrics:
    """A metrics callback writing to one MLflow run.

    Args:
        run_id: the run to log to; None creates one in ``experiment`` on the first call
            (or uses the active run, if there is one).
        experiment: experiment name for a new run.
        run_name: name of a new run.
        tracking_uri: MLflow tracking URI; None uses MLflow's current one.
        prefix: prepended to every metric name.
    """

    def __init__(
        self,
        run_id: str | None = None,
        *,
        experiment: str = EXPERIMENT,
        run_name: str = "online-tuning",
        tracking_uri: str | None = None,
        prefix: str = "runtime/",
    ) -> None:
        if run_id is not None and not isinstance(run_id, str):
            raise TypeError(f"run_id must be a str or None, got {type(run_id).__name__}")
        self._client = MlflowClient(tracking_uri=tracking_uri)
        self.run_id = run_id
        self.experiment = experiment
        self.run_name = run_name
        self.prefix = prefix
        self.step = 0

    def _run(self) -> str:
        if self.run_id is None:
            active = mlflow.active_run()
            if active is not None:
                self.run_id = active.info.run_id
            else:
                found = self._client.get_experiment_by_name(self.experiment)
                experiment_id = found.experiment_id if found else self._client.create_experiment(self.experiment)
                run = self._client.create_run(experiment_id, run_name=self.run_name, tags={"flashtune.kind": "runtime"})
                self.run_id = run.info.run_id
        return self.run_id

    def __call__(self, metrics: Mapping[str, Any]) -> None:
        """Log one step of ``metrics``."""
        flat = flatten_metrics(metrics, self.prefix)
        if not flat:
            return
        now_ms = int(time.time() * 1000)
        batch = [Metric(name, value, now_ms, self.step) for name, value in sorted(flat.items())]
        self._client.log_batch(self._run(), metrics=batch)
        self.step += 1
