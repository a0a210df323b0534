"""The online tuner's real parts: the isolated benchmark worker and the MLflow callback."""

from __future__ import annotations

import pytest
import torch

from flashtune.kernels.space import SAFE_DEFAULT
from flashtune.objectives.types import Status, Workload


@pytest.mark.slow
def test_worker_benchmark_measures_in_a_separate_process():
    from flashtune.runtime.retuning.worker import WorkerBenchmark

    bench = WorkerBenchmark(timeout_s=120, env={"TRITON_INTERPRET": "1"})
    try:
        workload = Workload(1, 2, 1, 16, 16, 32, "float16", True)
        first, second = bench(SAFE_DEFAULT, workload), bench(SAFE_DEFAULT.replace(BLOCK_M=32), workload)
    finally:
        bench.close()
    assert first.status is Status.OK and second.status is Status.OK
    assert first.rel_error < 5e-3 and first.median_ms > 0


@pytest.mark.slow
def test_mlflow_callback_logs_each_flush_as_a_step(tmp_path, store_path, h200, recorder):
    from mlflow.tracking import MlflowClient

    from flashtune.runtime.dispatching.dispatch import Dispatcher
    from flashtune.runtime.retuning.mlflow_callback import MlflowMetrics
    from flashtune.runtime.retuning.online import OnlineOptions, OnlineTuner
    from flashtune.runtime.retuning.timing import InjectedTiming

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    callback = MlflowMetrics(tracking_uri=uri, experiment="runtime-test")
    dispatcher = Dispatcher(store_path, hardware=lambda device: h200)
    options = OnlineOptions(window=8, min_samples=4, probation_samples=4, sample_every=1, metrics_every_s=3600)
    q = torch.zeros(1, 2, 64, 32, dtype=torch.float16)
    with OnlineTuner(dispatcher, options=options, timing=InjectedTiming(lambda c: 2.0), benchmark=lambda c, w: None, callbacks=[callback]) as tuner:  # type: ignore[arg-type, return-value]
        for _ in range(5):
            dispatcher(q, q, q)
        tuner.flush_metrics()
    # close() flushed once more: two steps.
    client = MlflowClient(uri)
    history = client.get_metric_history(callback.run_id, "runtime/latency_ms")
    assert [m.step for m in history] == [0, 1] and history[0].value == 2.0
    metrics = client.get_run(callback.run_id).data.metrics
    assert "runtime/tuning_overhead_pct" in metrics and "runtime/config_stability" in metrics
    assert any(name.startswith("runtime/buckets/float16_full_d32") for name in metrics)


@pytest.mark.slow
def test_online_retune_end_to_end_with_the_real_worker(store_path, h200):
    """The default candidates and benchmark: real kernels in the interpreter, in a worker."""
    from flashtune.runtime.dispatching.dispatch import Dispatcher
    from flashtune.runtime.retuning.online import OnlineOptions, OnlineTuner
    from flashtune.runtime.retuning.timing import InjectedTiming

    clock = {"t": 0.0}
    drift = {"x": 1.0}

    def latency(config):
        clock["t"] += 10.0
        return drift["x"]

    dispatcher = Dispatcher(store_path, hardware=lambda device: h200)
    options = OnlineOptions(window=8, min_samples=4, probation_samples=4, sample_every=1, cooldown_s=0.0, max_candidates=2)
    q = torch.randn(1, 2, 16, 32, dtype=torch.float16)
    k = torch.randn(1, 1, 16, 32, dtype=torch.float16)
    with OnlineTuner(dispatcher, options=options, timing=InjectedTiming(latency), clock=lambda: clock["t"]) as tuner:
        for _ in range(8):
            dispatcher(q, k, k, causal=True)
        drift["x"] = 2.0
        for _ in range(8):
            dispatcher(q, k, k, causal=True)
            if tuner.events:
                break
        assert tuner.wait_idle(600)
        kinds = [e["kind"] for e in tuner.events]
        metrics = tuner.metrics()
    assert kinds[0] == "degraded" and kinds[1] in ("swap", "no_gain"), kinds
    assert metrics["tuning_s"] == 0.0 or metrics["tuning_overhead_pct"] <= 5.0
    assert tuner.events[1].get("tried", 0) >= 1
