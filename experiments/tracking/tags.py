"""The MLflow tag keys of a study's runs: plain words, so filters need no backticks and
the UI columns read well."""

from __future__ import annotations

ROLE_TAG, STUDY_TAG, TRIAL_TAG, STATUS_TAG = "role", "study", "trial", "status"
PARENT_TAG = "mlflow.parentRunId"
#: Parent tag: the runtime's default config measured on the study's workload
#: (``Measurement.to_dict`` as JSON), so ``flashtune export`` can keep the default when
#: it is faster than every trial.
DEFAULT_TAG = "default_measurement"
#: Child tag: host:pid of the process that wrote it (shared studies: is its writer alive?).
WORKER_TAG = "worker"
#: Child tags of an ``unsafe`` trial: the compute-sanitizer tool that found an error in its
#: kernel and its first finding (objectives/sanitize.py).
SANITIZER_TOOL_TAG, SANITIZER_FINDING_TAG = "sanitizer.tool", "sanitizer.finding"


def int_or_none(text: str | None) -> int | None:
    """A tag's integer (a trial number), or None when it is missing or not a number."""
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


#: Child tag: the trial's ``Measurement.to_dict()`` as JSON (the compiler output left to the
#: run's ``compiler_output.txt``), so ``flashtune repair`` rebuilds a trial that its Optuna
#: database lost exactly as it was stored.
MEASUREMENT_TAG = "measurement"
#: MLflow's limit on a tag value (``mlflow.utils.validation.MAX_TAG_VAL_LENGTH``).
_TAG_VALUE_MAX = 8000


def measurement_tag(measurement: dict) -> str:
    """The :data:`MEASUREMENT_TAG` value of a measurement dict: without the compiler output,
    and its error clipped where the whole would not fit in a tag."""
    import json

    data = {**measurement, "compiler_output": ""}
    text = json.dumps(data, sort_keys=True)
    if len(text) > _TAG_VALUE_MAX:
        data["error"] = str(data.get("error", ""))[:1000]
        text = json.dumps(data, sort_keys=True)
    return text
