"""The run loop of one worker among many on a shared study (see ``claims.py``).

The same ask -> evaluate -> tell as ``search.loop.run``, with the history read from the
storage before each ask instead of kept in memory:

- every trial another worker measured since the last ask is told to this worker's
  strategy first, so model-based strategies (TPE, GP, skopt, DEAP) learn from all GPUs;
- a config that is measured or claimed (RUNNING elsewhere) is skipped, not measured;
- the budget counts the whole study: a worker stops when the study has ``max_trials``
  measured trials, and waits (reaping dead workers' claims) while the last ones run.

Strategies without native parallel suggestions (skopt, DEAP, grid, random) need nothing
more: each worker runs its own instance, seeded differently (partitioning by seed), and
the RUNNING claims act as the constant liar: a config in flight is never asked twice.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable

from flashtune.experiments.study.claims import SharedTrials, wall_elapsed_s
from flashtune.kernels.config import Config
from flashtune.objectives.types import Measurement
from flashtune.search._base import Strategy, cost_ms
from flashtune.search.loop import MAX_STALE_ASKS, Callback, Evaluate, History, Trial

#: Seconds between reads of the study while the last trials of the budget run elsewhere.
POLL_S = 0.2


def run_shared(
    strategy: Strategy,
    shared: SharedTrials,
    evaluate: Evaluate,
    *,
    max_trials: int,
    max_seconds: float | None = None,
    callbacks: Iterable[Callback] = (),
    priors: Iterable[Measurement] = (),
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> History:
    """Run ``strategy`` as one worker of a shared study until the study's budget is spent.

    Returns:
        The study's measured trials (every worker's) as this worker last read them.
    """
    callbacks = list(callbacks)
    for prior in priors:
        strategy.tell(prior.config, prior)
    told: set[int] = set()
    lied: set[Config] = set()
    started = clock()
    stale = 0
    while True:
        snap = shared.snapshot()
        for number in sorted(set(snap.measured) - told):
            trial = snap.measured[number]
            strategy.tell(trial.config, trial.measurement)
            told.add(number)
        if len(snap.measured) >= max_trials:
            break
        if max_seconds is not None and clock() - started >= max_seconds:
            break
        if len(snap.measured) + len(snap.claims) >= max_trials:
            # The rest of the budget is in flight: wait for it, or for a dead worker's claim
            # to be reaped (then this worker measures in its place).
            if not shared.reap():
                sleep(POLL_S)
            continue
        config = strategy.ask()
        if config is None:
            break
        if config in snap.known:
            strategy.tell(config, snap.known[config])  # as search.loop does with a repeat
            stale += 1
            if stale >= MAX_STALE_ASKS:
                break
            continue
        if config in snap.claims.values():
            # In flight on another worker: tell the constant liar once, so a deterministic
            # model (skopt) moves on instead of asking it again; the truth follows later.
            lie = _liar(config, snap.known.values())
            if lie is not None and config not in lied:
                lied.add(config)
                strategy.tell(config, lie)
            else:
                sleep(POLL_S)
            continue
        claim = shared.claim(config, max_trials)
        if claim is None:
            continue  # an older claim won; the next read shows it
        stale = 0
        try:
            with shared.heartbeat(claim):
                measurement = evaluate(config)
        except BaseException:
            shared.abandon(claim)
            raise
        trial = shared.finish(claim, measurement, wall_elapsed_s(snap))
        told.add(trial.number)
        strategy.tell(config, measurement)
        trials = sorted([*snap.measured.values(), trial], key=lambda t: t.number)
        for callback in callbacks:
            callback(trial, trials)
    history = History()
    for trial in shared.snapshot().trials():
        history.trials.append(trial)
        history.known[trial.config] = trial.measurement
    return history


def _liar(config: Config, measured: Iterable[Measurement]) -> Measurement | None:
    """The constant liar: the worst successful time so far, for a config still in flight
    (pessimistic, so the models do not crowd around configs nobody has measured)."""
    ok = [m for m in measured if math.isfinite(cost_ms(m))]
    if not ok:
        return None
    worst = max(ok, key=cost_ms)
    return dataclasses.replace(worst, config=config)


__all__ = ["POLL_S", "run_shared", "Trial"]
