"""Metrics are declared once (objectives/metrics.py): the tracker, the priors reader and the
report take them from there; MLflow priors keep every kernel's trials, decode included."""

from __future__ import annotations

import dataclasses

from flashtune.experiments.evaluation import prior_mlflow
from flashtune.experiments.study.runner import Study, run_study
from flashtune.experiments.tracking import report
from flashtune.kernels.config import Config
from flashtune.objectives import metrics
from flashtune.objectives.metrics import Metric
from flashtune.objectives.types import Measurement, Status, Workload

DECODE = Workload.parse("1,8/2,1/256,64")


def _timed(config: Config, workload: Workload, cls: type = Measurement, **extra) -> Measurement:
    ms = 0.01 + 0.001 * len(config.key())
    return cls(config=config, workload=workload, status=Status.OK, median_ms=ms, p20_ms=ms, p80_ms=ms, tflops=1.0,
               compile_s=0.5, registers=96, spills=0, shared_bytes=4096, rel_error=1e-3, sm_clock_mhz=1980.0, temperature_c=40.0,
               fingerprint="fp", hardware="NVIDIA H200", **extra)


def test_every_declared_metric_goes_to_mlflow_and_comes_back_decode_trials_too(stores, h200) -> None:
    study = Study(name="decode-priors", workload=DECODE, hardware=h200, strategy="random", trials=3, seed=1)
    result = run_study(study, lambda c: _timed(c, DECODE), tracking_uri=stores["tracking_uri"],
                       storage_url=stores["storage"])
    back = prior_mlflow.trial_measurements_of_run(stores["tracking_uri"], result.parent_run_id)
    # Before: parse_config knew only the prefill knobs, so every decode trial came back as None.
    assert len(back) == 3 and all(m.config["kernel"] == "decode" for m in back)
    told = {t.config: t.measurement for t in result.trials}
    for m in back:
        for declared in metrics.logged_metrics():
            assert getattr(m, declared.field) == getattr(told[m.config], declared.field), declared.field
            assert type(getattr(m, declared.field)) is declared.kind


def test_the_report_shows_every_column_metric() -> None:
    # report.py used to leave out sm_clock_mhz and temperature_c.
    columns = report.measurement_columns()
    assert all(m.field in columns for m in metrics.METRICS if m.column)
    assert "sm_clock_mhz" in columns and "temperature_c" in columns


@dataclasses.dataclass(frozen=True)
class _WithDummy(Measurement):
    """A Measurement with one more numeric field, as a new metric would add."""

    dummy_count: int | None = None


def test_a_new_metric_is_its_field_and_one_declaration(stores, monkeypatch) -> None:
    from mlflow import MlflowClient

    from flashtune.experiments.tracking.tracker import MlflowTracker
    from flashtune.kernels.space import SAFE_DEFAULT
    from flashtune.search.loop import Trial

    dummy = Metric("dummy_count", "things", int, mlflow="dummy.count")
    monkeypatch.setattr(metrics, "METRICS", (*metrics.METRICS, dummy))
    workload = Workload.parse("1,8,128,64,float16")
    trial = Trial(number=0, config=SAFE_DEFAULT, measurement=_timed(SAFE_DEFAULT, workload, _WithDummy, dummy_count=7),
                  elapsed_s=1.0)
    tracker = MlflowTracker(stores["tracking_uri"], study_name="dummy-metric", gpu_name="NVIDIA H200",
                            parent_tags={"role": "study", "study": "dummy-metric"}, parent_params={})
    tracker.start([])
    tracker(trial, [trial])

    client = MlflowClient(tracking_uri=stores["tracking_uri"])
    (child,) = client.search_runs([tracker.experiment_id], filter_string="tags.role = 'trial'")
    assert child.data.metrics["dummy.count"] == 7.0  # the tracker logs it under its MLflow name
    assert metrics.from_mlflow(child.data.metrics)["dummy_count"] == 7  # the priors reader, as an int
    assert report.trial_row(trial)["dummy_count"] == 7  # the trials table


def test_the_ui_view_shows_the_declared_view_metrics_in_order(monkeypatch) -> None:
    from flashtune.experiments.tracking.ui_view import view_state

    def metric_columns() -> list[str]:
        return [c for c in view_state("s")["selectedColumns"] if c.startswith("metrics.")]

    assert metric_columns() == [f"metrics.`{name}`" for name in ("median_ms", "tflops", "rel_error", "registers",
                                                                  "spills", "shared_bytes", "compile_s")]
    dummy = Metric("dummy_count", "things", int, mlflow="dummy.count", view=7)
    monkeypatch.setattr(metrics, "METRICS", (dummy, *metrics.METRICS))  # declared first, shown where it says
    assert metric_columns()[-1] == "metrics.`dummy.count`" and len(metric_columns()) == 8
