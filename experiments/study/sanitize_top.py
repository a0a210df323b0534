"""``flashtune tune --sanitize-top N``: a live study's N best configs under compute-sanitizer
before it reports a winner.

The N fastest successful trials are checked together (``runtime.storage.sanitized.checked_many``:
the four tools at edge-case shapes, a batch of configs to a sanitizer run, cached per kernel,
config and GPU); one found unsafe
becomes an ``unsafe`` trial in the result the study reports (its time dropped) and in its
MLflow child run (status, tool and first finding). The Optuna record keeps the trial as it
was measured (a finished Optuna trial cannot change): a resumed study's strategy sees it as
measured, and the verdict cache makes the next check of it free.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from flashtune.experiments.tracking.tracker import mark_trial_unsafe
from flashtune.objectives.hardware import HardwareSpec
from flashtune.objectives.sanitize import DEFAULT_TIMEOUT_S, Check, Verdict
from flashtune.objectives.types import Measurement, Status
from flashtune.runtime.storage.sanitized import SanitizedCache, checked_many
from flashtune.search.loop import Trial


def unsafe_measurement(m: Measurement, verdict: Verdict) -> Measurement:
    """``m`` as an ``unsafe`` failure: no time (a failure has none), the verdict's reason as its error."""
    return dataclasses.replace(m, status=Status.UNSAFE, median_ms=math.inf, p20_ms=math.inf, p80_ms=math.inf,
                               tflops=0.0, error=verdict.reason)


def sanitize_top(result: Any, n: int, *, gpu: HardwareSpec, tracking_uri: str | None,
                 cache: SanitizedCache | None = None, sanitizer: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, say: Callable[[str], None] = print) -> tuple[Any, list[Verdict]]:
    """Check the ``n`` fastest successful trials of ``result`` (a ``StudyResult``).

    Returns:
        (the result with unsafe trials re-labelled, so that its ``best`` is the fastest trial
        not found unsafe; every verdict, fastest trial first).
    """
    workload = result.study.workload
    ranked = sorted((t for t in result.trials if t.measurement.ok), key=lambda t: t.cost_ms)[:n]
    checks = [Check(trial.config, workload.head_dim, workload.dtype) for trial in ranked]
    verdicts = checked_many(checks, gpu=gpu.fingerprint, cache=cache if cache is not None else SanitizedCache(),
                            sanitizer=sanitizer, timeout_s=timeout_s) if checks else []
    relabelled: dict[int, Trial] = {}
    for trial, verdict in zip(ranked, verdicts):
        if verdict.safe:
            say(f"sanitized trial {trial.number} ({trial.cost_ms:.4f} ms): clean under {len(verdict.results)} tools"
                f"{' (cached)' if verdict.cached else ''}")
            continue
        unsafe = unsafe_measurement(trial.measurement, verdict)
        relabelled[trial.number] = dataclasses.replace(trial, measurement=unsafe)
        say(f"sanitized trial {trial.number} ({trial.cost_ms:.4f} ms): unsafe: {verdict.reason}")
        if tracking_uri is not None:
            mark_trial_unsafe(tracking_uri, result.parent_run_id, trial.number, unsafe)
    trials = tuple(relabelled.get(t.number, t) for t in result.trials)
    updated = dataclasses.replace(result, trials=trials)
    best = updated.best
    if best is not None and all(best.number != t.number for t in ranked):
        say(f"the winner, trial {best.number}, was not sanitized: the {len(ranked)} best were unsafe")
    return updated, verdicts
