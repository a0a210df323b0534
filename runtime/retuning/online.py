"""Opt-in online adaptation: notice a bucket slowing down, re-tune it in the background,
swap the winner in only if it is faster, roll it back if it turns out slower.

The loop per bucket:

1. Time some calls (:mod:`flashtune.runtime.retuning.timing`) into a sliding window
   (:class:`~flashtune.runtime.retuning.monitor.LatencyMonitor`). The first full window's median
   is the bucket's baseline.
2. When the window's median exceeds the baseline by ``degradation_threshold``, queue a
   re-tune, unless one is running, the bucket is cooling down, or the overhead budget
   says no.
3. A worker thread measures the incumbent and a few candidates (store priors, the
   architecture's baselines, one-step neighbours of the incumbent) with the benchmark
   (by default in a separate process, :mod:`flashtune.runtime.retuning.worker`), stopping when
   the budget runs out.
4. A candidate faster than the incumbent by ``min_gain`` is swapped in (one assignment
   in the dispatcher) and put on probation: every call is timed until
   ``probation_samples`` samples are in. Its live median against the incumbent's live
   median before the swap decides: keep it, or roll back on the spot (the rollback is
   the same assignment, done on the call that completes the verdict) and
   never try that config for the bucket again.

Overhead: the benchmark's wall time is charged against ``overhead_cap`` (5 %) of the
time since the tuner started; a candidate is measured only if its estimated cost fits.

Time comes from injectable sources (``timing``, ``clock``, ``benchmark``) so that the
whole loop runs on a CPU with invented latencies.
"""

from __future__ import annotations

import math
import queue
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from flashtune.kernels.config import Config
from flashtune.kernels.dtypes import interpreting
from flashtune.kernels.space import SAFE_DEFAULT, validate_config
from flashtune.objectives.feasibility import check
from flashtune.objectives.types import Measurement, Workload
from flashtune.runtime.dispatching.dispatch import CacheKey, Dispatcher, get_dispatcher
from flashtune.runtime.retuning.candidates import default_candidates
from flashtune.runtime.retuning.monitor import LatencyMonitor
from flashtune.runtime.retuning.online_options import OnlineOptions
from flashtune.runtime.retuning.timing import CudaEventTiming, HostTiming, Reader, TimingSource
from flashtune.runtime.retuning.worker import WorkerBenchmark
from flashtune.runtime.storage.store import StoreEntry

Benchmark = Callable[[Config, Workload], Measurement]
CandidateFn = Callable[[CacheKey, Config, Workload], Sequence[Config]]
MetricsCallback = Callable[[dict[str, Any]], None]

_MAX_PENDING = 256  # unread GPU samples kept; older ones are dropped, not waited for


@dataclass
class _Bucket:
    """What the tuner knows of one (device, bucket)."""

    current: Config
    workload: Workload
    baseline_ms: float | None = None
    previous: Config | None = None  # the rollback target while ``current`` is on probation
    reference_ms: float = math.nan  # the incumbent's live median when the candidate went in
    candidate_ms: float = math.nan  # the candidate's benchmark median
    tuning: bool = False
    last_retune: float = -math.inf
    rejected: set[Config] = field(default_factory=set)
    calls: int = 0

    @property
    def probation(self) -> bool:
        return self.previous is not None


@dataclass(frozen=True)
class _Retune:
    key: CacheKey


@dataclass(frozen=True)
class _Persist:
    key: CacheKey
    config: Config
    median_ms: float


@dataclass(frozen=True)
class _Tick:
    """No job: the worker woke up to emit metrics."""


def _workload_of(q: torch.Tensor, k: torch.Tensor, causal: bool) -> Workload:
    batch, q_heads, q_len, head_dim = q.shape
    dtype = str(q.dtype).removeprefix("torch.")
    return Workload(batch, q_heads, k.shape[1], q_len, k.shape[2], head_dim, dtype, bool(causal))


class OnlineTuner:
    """Watches the dispatcher's calls per bucket and re-tunes the ones that slow down.

    Args:
        dispatcher: the dispatcher whose configs it swaps (default: the process-wide one).
        options: the knobs.
        timing: how calls are timed; default CUDA events on a GPU, the host clock otherwise.
        benchmark: measures a candidate; default a :class:`~flashtune.runtime.retuning.worker.WorkerBenchmark`
            (the objectives' isolated worker process on the served GPU).
        clock: seconds, monotonic; for run time and tuning overhead.
        candidates: (cache key, incumbent, workload) -> candidates; default store priors,
            baselines and neighbours, feasible on the live spec.
        callbacks: called with :meth:`metrics` every ``metrics_every_s`` from the worker
            thread (e.g. :class:`flashtune.runtime.retuning.mlflow_callback.MlflowMetrics`).
    """

    def __init__(
        self,
        dispatcher: Dispatcher | None = None,
        *,
        options: OnlineOptions | None = None,
        timing: TimingSource | None = None,
        benchmark: Benchmark | None = None,
        clock: Callable[[], float] = time.monotonic,
        candidates: CandidateFn | None = None,
        callbacks: Sequence[MetricsCallback] = (),
    ) -> None:
        if options is not None and not isinstance(options, OnlineOptions):
            raise TypeError(f"options must be OnlineOptions, got {type(options).__name__}")
        if timing is not None and not isinstance(timing, TimingSource):
            raise TypeError(f"timing must be a TimingSource, got {type(timing).__name__}")
        for name, fn in (("benchmark", benchmark), ("clock", clock), ("candidates", candidates)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable, got {type(fn).__name__}")
        if any(not callable(cb) for cb in callbacks):
            raise TypeError("callbacks must be callables taking the metrics dict")
        self.dispatcher = dispatcher or get_dispatcher()
        self.options = options or OnlineOptions()
        self._timing = timing
        self._benchmark = benchmark
        self._own_benchmarks: dict[torch.device, Any] = {}  # created here, closed here
        self._clock = clock
        self._candidate_fn = candidates
        self._callbacks = list(callbacks)
        self.monitor = LatencyMonitor(self.options.window)
        self._lock = threading.RLock()
        self._buckets: dict[CacheKey, _Bucket] = {}
        self._pending: deque[tuple[CacheKey, Config, int, Reader]] = deque()
        self._jobs: queue.Queue[_Retune | _Persist | None] = queue.Queue()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        self._started_at = clock()
        self._tuning_s = 0.0
        self._cost_estimate_s = self.options.initial_cost_s
        self._sampled = 0
        self._changes = 0
        self._switches = 0
        self._rollbacks = 0
        self._retunes = 0
        self._deferred = 0
        self._last_emit = time.monotonic()
        self.rollback_latencies_s: list[float] = []
        self.events: deque[dict[str, Any]] = deque(maxlen=1000)

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> OnlineTuner:
        """Start the worker thread and route the dispatcher's calls through this tuner."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="flashtune-online", daemon=True)
            self._thread.start()
        self.dispatcher.attach(self)
        return self

    def close(self) -> None:
        """Detach, stop the worker (after its current job), flush metrics once more."""
        if self.dispatcher._online is self:
            self.dispatcher.attach(None)
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join(timeout=60)
            self._thread = None
        self.flush_metrics()
        for bench in self._own_benchmarks.values():
            bench.close()
        self._own_benchmarks.clear()

    def __enter__(self) -> OnlineTuner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no re-tune is queued or running; False on timeout."""
        return self._idle.wait(timeout)

    # --- the hot path -----------------------------------------------------------------------

    def run(self, key: CacheKey, config: Config, call: Callable[[Config], torch.Tensor], q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """Launch ``call(config)`` for a dispatcher call, timing it when due."""
        state = self._buckets.get(key)
        if state is None:
            state = self._register(key, config, q, k)
        state.calls += 1
        due = state.probation or state.calls % self.options.sample_every == 0
        if not due or (q.is_cuda and torch.cuda.is_current_stream_capturing()):
            out = call(config)
        else:
            timing = self._timing_for(q)
            token = timing.start(config)
            out = call(config)
            self._pending.append((key, config, q.shape[0] * q.shape[2], timing.stop(token)))
        if self._pending:
            self._drain()
        return out

    def launch_failed(self, key: CacheKey, config: Config) -> Config | None:
        """The dispatcher could not launch ``config`` for ``key``; pick what to serve instead.

        A candidate on probation is rolled back to the incumbent; a failing incumbent is
        replaced by the kernel's safe default, with a fresh baseline. The config is never
        tried again for the bucket.

        Returns:
            The config to serve, or None when this tuner does not track the bucket.
        """
        with self._lock:
            state = self._buckets.get(key)
            if state is None or state.current != config:
                return None
            state.rejected.add(config)
            if state.previous is not None:
                state.current, state.previous = state.previous, None
                state.baseline_ms = state.reference_ms
                self._rollbacks += 1
                self._event("rollback", key, config=config.key(), reason="launch failed")
            else:
                state.current, state.baseline_ms = SAFE_DEFAULT, None
                self._event("replaced", key, config=config.key(), reason="launch failed")
            self.monitor.reset(key)
            self._changes += 1
            return state.current

    def _timing_for(self, q: torch.Tensor) -> TimingSource:
        if self._timing is None:
            self._timing = CudaEventTiming() if q.is_cuda else HostTiming()
        return self._timing

    def _register(self, key: CacheKey, config: Config, q: torch.Tensor, k: torch.Tensor) -> _Bucket:
        with self._lock:
            state = self._buckets.get(key)
            if state is None:
                state = self._buckets[key] = _Bucket(current=config, workload=_workload_of(q, k, key[2]))
            return state

    def _drain(self) -> None:
        with self._lock:
            while len(self._pending) > _MAX_PENDING:
                self._pending.popleft()
            for _ in range(len(self._pending)):
                item = self._pending.popleft()
                ms = item[3]()
                if ms is None:
                    self._pending.append(item)  # still running on the GPU: read it later
                else:
                    self._on_sample(item[0], item[1], ms, item[2])

    def _on_sample(self, key: CacheKey, config: Config, ms: float, tokens: int) -> None:
        state = self._buckets[key]
        if config != state.current:
            served = self.dispatcher.current(key)
            if served is None or served == state.current:
                return  # timed before a swap: describes a config no longer served
            # The dispatcher serves another config than this tuner put there (a reload,
            # another store): follow it and start the bucket afresh.
            state.current, state.previous, state.baseline_ms = served, None, None
            self.monitor.reset(key)
            self._event("followed", key, config=served.key())
            if config != served:
                return
        self.monitor.record(key, ms, tokens)
        self._sampled += 1
        opts = self.options
        n = self.monitor.count(key)
        if state.probation:
            if n >= opts.probation_samples:
                live = self.monitor.median(key)
                if live > state.reference_ms * (1.0 + opts.rollback_tolerance):
                    self._rollback(key, state, live)
                else:
                    self._keep(key, state, live)
            return
        if state.baseline_ms is None:
            if n >= opts.min_samples:
                state.baseline_ms = self.monitor.median(key)
            return
        if self.monitor.degraded(key, state.baseline_ms, opts.degradation_threshold, opts.min_samples):
            self._maybe_retune(key, state)

    # --- decisions (under the lock) -----------------------------------------------------------

    def _event(self, kind: str, key: CacheKey, **data: Any) -> None:
        bucket = self.dispatcher.bucket_of(key)
        self.events.append({"t": self._clock(), "kind": kind, "bucket": bucket.name if bucket else str(key), **data})

    def _rollback(self, key: CacheKey, state: _Bucket, live_ms: float) -> None:
        detected = time.perf_counter()
        assert state.previous is not None
        slow, state.current = state.current, state.previous
        self.dispatcher.swap(key, state.current)
        self.rollback_latencies_s.append(time.perf_counter() - detected)
        state.rejected.add(slow)
        state.previous = None
        state.baseline_ms = state.reference_ms  # the incumbent's level before the attempt
        self.monitor.reset(key)
        self._rollbacks += 1
        self._changes += 1
        self._event("rollback", key, config=slow.key(), live_ms=live_ms, reference_ms=state.reference_ms)

    def _keep(self, key: CacheKey, state: _Bucket, live_ms: float) -> None:
        state.previous = None
        state.baseline_ms = live_ms
        self._event("keep", key, config=state.current.key(), live_ms=live_ms, reference_ms=state.reference_ms)
        if self.options.persist:
            self._jobs.put(_Persist(key, state.current, state.candidate_ms))

    def _budget_allows(self, cost_s: float) -> bool:
        run_s = self._clock() - self._started_at
        return self._tuning_s + cost_s <= self.options.overhead_cap * run_s

    def _maybe_retune(self, key: CacheKey, state: _Bucket) -> None:
        now = self._clock()
        if state.tuning or now - state.last_retune < self.options.cooldown_s:
            return
        # The incumbent and at least one candidate must fit the budget, or nothing can win.
        if not self._budget_allows(2 * self._cost_estimate_s):
            self._deferred += 1
            return
        state.tuning = True
        state.last_retune = now
        self._retunes += 1
        self._event("degraded", key, live_ms=self.monitor.median(key), baseline_ms=state.baseline_ms)
        self._idle.clear()
        self._jobs.put(_Retune(key))

    # --- the worker thread ------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self.options.metrics_every_s)
            except queue.Empty:
                job = _Tick()
            if job is None:
                self._idle.set()
                return
            try:
                if isinstance(job, _Retune):
                    self._retune(job.key)
                elif isinstance(job, _Persist):
                    self._persist(job.key, job.config, job.median_ms)
            except Exception as exc:  # a failed re-tune must not stop serving
                warnings.warn(f"flashtune online re-tune failed: {type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=1)
                if isinstance(job, _Retune):
                    with self._lock:
                        self._buckets[job.key].tuning = False
            if self._jobs.empty():
                self._idle.set()
            if time.monotonic() - self._last_emit >= self.options.metrics_every_s:
                self.flush_metrics()

    def _measure(self, config: Config, workload: Workload, device: torch.device) -> Measurement:
        began = self._clock()
        try:
            return self._benchmark_for(device)(config, workload)
        finally:
            spent = self._clock() - began
            with self._lock:
                self._tuning_s += spent
                self._cost_estimate_s = max(self._cost_estimate_s * 0.5, spent)

    def _benchmark_for(self, device: torch.device) -> Benchmark:
        """The injected benchmark, or one isolated worker process per served GPU."""
        if self._benchmark is not None:
            return self._benchmark
        bench = self._own_benchmarks.get(device)
        if bench is None:
            interpret = interpreting()
            bench = self._own_benchmarks[device] = WorkerBenchmark(
                device.index if device.type == "cuda" else None,
                env={"TRITON_INTERPRET": "1"} if interpret else None,
            )
        return bench

    def _retune(self, key: CacheKey) -> None:
        with self._lock:
            state = self._buckets[key]
            incumbent, workload = state.current, state.workload
            rejected = set(state.rejected)
        pool = [c for c in self._candidates(key, incumbent, workload) if c != incumbent and c not in rejected]
        pool = pool[: self.options.max_candidates]
        base = self._measure(incumbent, workload, key[0])
        best: Measurement | None = None
        tried = 0
        if base.ok:
            for config in pool:
                with self._lock:
                    if not self._budget_allows(self._cost_estimate_s):
                        self._deferred += 1
                        break
                m = self._measure(config, workload, key[0])
                tried += 1
                if m.ok and (best is None or m.median_ms < best.median_ms):
                    best = m
        with self._lock:
            state.tuning = False
            gain_ok = best is not None and best.median_ms < base.median_ms * (1.0 - self.options.min_gain)
            if not gain_ok or state.current != incumbent or state.probation:
                # Nothing better: the slower level is the new normal (no re-tune storm).
                recent = self.monitor.recent_median(key, self.options.min_samples)
                state.baseline_ms = recent if not math.isnan(recent) else state.baseline_ms
                self._event("no_gain", key, tried=tried, incumbent_ms=base.median_ms, best_ms=best.median_ms if best else None)
                return
            assert best is not None
            # The incumbent's level now: its most recent samples, not the whole window,
            # which may still hold samples from before the slowdown.
            recent = self.monitor.recent_median(key, self.options.min_samples)
            state.reference_ms = recent if not math.isnan(recent) else state.baseline_ms or math.inf
            state.previous, state.current = incumbent, best.config
            state.candidate_ms = best.median_ms
            self.monitor.reset(key)
            self.dispatcher.swap(key, best.config)
            self._switches += 1
            self._changes += 1
            self._event("swap", key, config=best.config.key(), bench_ms=best.median_ms, incumbent_ms=base.median_ms, tried=tried)

    def _candidates(self, key: CacheKey, incumbent: Config, workload: Workload) -> list[Config]:
        if self._candidate_fn is not None:
            raw = list(self._candidate_fn(key, incumbent, workload))
        else:
            raw = default_candidates(self.dispatcher, key, incumbent, workload)
        spec, _ = self.dispatcher.hardware_for(key[0])
        result: list[Config] = []
        for config in raw:
            try:
                config = validate_config(config)
            except (ValueError, TypeError):
                continue
            if config in result or not self.dispatcher.accepts(config):
                continue
            if spec is not None and not check(config, workload, spec).feasible:
                continue
            result.append(config)
        return result

    def _persist(self, key: CacheKey, config: Config, median_ms: float) -> None:
        spec, store_key = self.dispatcher.hardware_for(key[0])
        bucket = self.dispatcher.bucket_of(key)
        if spec is None or store_key is None or bucket is None:
            return
        entry = StoreEntry(
            fingerprint=store_key[0], kernel_hash=store_key[1], triton=store_key[2], bucket=bucket,
            config=config, hardware=spec.name, median_ms=median_ms if math.isfinite(median_ms) else None,
            source="online",
        )
        self.dispatcher.store.merge([entry], policy="replace")

    # --- metrics ----------------------------------------------------------------------------

    def metrics(self) -> dict[str, Any]:
        """Latency, tokens/s, tuning overhead %, config stability, counts, and per bucket."""
        with self._lock:
            run_s = max(self._clock() - self._started_at, 1e-12)
            seconds, tokens = self.monitor.totals()
            buckets = {}
            for key, state in self._buckets.items():
                bucket = self.dispatcher.bucket_of(key)
                buckets[bucket.name if bucket else str(key)] = {
                    "latency_ms": self.monitor.median(key),
                    "p90_ms": self.monitor.quantile(key, 0.9),
                    "tokens_per_s": self.monitor.tokens_per_s(key),
                    "samples": self.monitor.count(key),
                    "baseline_ms": state.baseline_ms if state.baseline_ms is not None else math.nan,
                    "probation": state.probation,
                    "config": state.current.key(),
                }
            return {
                "latency_ms": self.monitor.pooled_median(),
                "tokens_per_s": tokens / seconds if seconds > 0 else math.nan,
                "tuning_overhead_pct": 100.0 * self._tuning_s / run_s,
                "tuning_s": self._tuning_s,
                "run_s": run_s,
                "config_stability": 1.0 - self._changes / self._sampled if self._sampled else 1.0,
                "config_switches": self._switches,
                "rollbacks": self._rollbacks,
                "retunes": self._retunes,
                "retunes_deferred_for_budget": self._deferred,
                "sampled_calls": self._sampled,
                "buckets": buckets,
            }

    def flush_metrics(self) -> None:
        """Call every metrics callback now; a failing callback warns and is kept."""
        self._last_emit = time.monotonic()
        if not self._callbacks:
            return
        snapshot = self.metrics()
        for callback in self._callbacks:
            try:
                callback(snapshot)
            except Exception as exc:  # logging must not break serving
                warnings.warn(f"flashtune metrics callback {callback!r} failed: {exc}", RuntimeWarning, stacklevel=1)


def enable_online(**kwargs: Any) -> OnlineTuner:
    """Start online adaptation on the process-wide dispatcher (see :class:`OnlineTuner`)."""
    return OnlineTuner(get_dispatcher(), **kwargs).start()
