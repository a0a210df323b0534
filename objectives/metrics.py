"""The metrics of a :class:`~flashtune.objectives.types.Measurement`, each declared once.

A metric is a numeric ``Measurement`` field with its unit, its type, its MLflow metric
name, whether a trial's MLflow run logs it and whether the trials table shows it. The
MLflow tracker (child metrics), the priors reader (MLflow metrics back into a
Measurement) and the reports (trials table columns) iterate over :data:`METRICS`; a new
metric is its ``Measurement`` field plus one line here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Metric:
    """One numeric field of a Measurement.

    Attributes:
        field: the ``Measurement`` field.
        unit: what it counts ("ms", "TFLOP/s", "bytes", ... ; "" for a ratio).
        kind: ``float`` or ``int``: the type it is read back as (MLflow stores floats).
        mlflow: its MLflow metric name (the field's own name unless said otherwise).
        logged: a trial's MLflow run logs it.
        column: the trials table (report, CSV artifact) shows it.
        view: its place among the metric columns of a study's saved MLflow UI view
            (0 first); None: not shown there.
    """

    field: str
    unit: str
    kind: type = float
    mlflow: str = ""
    logged: bool = True
    column: bool = True
    view: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in (float, int):
            raise ValueError(f"Metric {self.field}: kind must be float or int, got {self.kind!r}")
        if not self.mlflow:
            object.__setattr__(self, "mlflow", self.field)


#: Every metric, in the order reports show them.
METRICS: tuple[Metric, ...] = (
    Metric("median_ms", "ms", view=0),
    Metric("p20_ms", "ms"),
    Metric("p80_ms", "ms"),
    Metric("tflops", "TFLOP/s", view=1),
    Metric("compile_s", "s", view=6),
    Metric("registers", "registers a thread", int, view=3),
    Metric("spills", "4-byte words a thread", int, view=4),
    Metric("shared_bytes", "bytes a program", int, view=5),
    Metric("rel_error", "", view=2),
    Metric("sm_clock_mhz", "MHz"),
    Metric("temperature_c", "degrees C"),
)


def logged_metrics() -> tuple[Metric, ...]:
    """The metrics a trial's MLflow run logs (read at call time: the declaration may grow)."""
    return tuple(m for m in METRICS if m.logged)


def column_metrics() -> tuple[Metric, ...]:
    """The metrics the trials table shows."""
    return tuple(m for m in METRICS if m.column)


def view_metrics() -> tuple[Metric, ...]:
    """The metrics a study's saved MLflow UI view shows, in their order."""
    return tuple(sorted((m for m in logged_metrics() if m.view is not None), key=lambda m: m.view))


def from_mlflow(metrics: Mapping[str, float]) -> dict[str, Any]:
    """``Measurement`` fields from a run's MLflow metrics (those it lacks are left out),
    each as its declared type."""
    return {m.field: m.kind(metrics[m.mlflow]) for m in logged_metrics() if m.mlflow in metrics}
