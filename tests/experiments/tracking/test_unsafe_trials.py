"""An ``unsafe`` trial (compute-sanitizer found an error in its kernel) is a FAILED child run
tagged with the tool and the first finding, and never the study's best, however fast."""

from __future__ import annotations

from study_support import WORKLOAD

from flashtune.experiments.study.runner import Study, run_study
from flashtune.kernels.config import Config
from flashtune.objectives.types import Measurement, Status

FINDING = "Invalid __global__ read of size 4 bytes at _attn_fwd+0x1f70 in _flash_fwd.py:212"


def test_an_unsafe_trial_is_a_failed_child_with_the_tool_and_finding(stores, h200, mlflow_client) -> None:
    calls: list[Config] = []

    def evaluate(config: Config) -> Measurement:
        calls.append(config)
        if len(calls) == 2:  # the fastest time of the study, but unsafe
            return Measurement(config, WORKLOAD, Status.UNSAFE, median_ms=0.01, p20_ms=0.01, p80_ms=0.01,
                               error=f"compute-sanitizer memcheck: {FINDING}")
        return Measurement(config, WORKLOAD, Status.OK, median_ms=1.0 + len(calls), p20_ms=1.0, p80_ms=2.0)

    study = Study(name="unsafe", workload=WORKLOAD, hardware=h200, trials=5)
    result = run_study(study, evaluate, tracking_uri=stores["tracking_uri"], storage_url=stores["storage"])
    unsafe = [t for t in result.trials if t.measurement.status is Status.UNSAFE]
    assert len(unsafe) == 1 and result.best.config != unsafe[0].config
    runs = mlflow_client.search_runs([result.experiment_id], filter_string="tags.role = 'trial'", max_results=100)
    flagged = [r for r in runs if r.data.tags["status"] == "unsafe"]
    assert len(flagged) == 1
    run = flagged[0]
    assert run.info.status == "FAILED" and run.data.metrics["ok"] == 0.0
    assert run.data.tags["sanitizer.tool"] == "memcheck" and run.data.tags["sanitizer.finding"] == FINDING
    assert not any("sanitizer.tool" in r.data.tags for r in runs if r is not run)
