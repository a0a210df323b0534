"""The run loop: ask -> evaluate -> tell -> callbacks, under a trial and a time budget.

The loop, not the strategies, guarantees that no config is measured twice in a study:
a repeated ask is answered from the history (told again, not counted, not measured), so
every strategy keeps its own logic and none can waste GPU time on a duplicate. Every new
config is a trial, infeasible ones included (the objective answers those without
compiling); strategies that consult ``space.is_feasible`` first waste fewer trials.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from flashtune.kernels.config import Config
from flashtune.objectives.types import Measurement
from flashtune.search._base import Strategy, cost_ms

#: Consecutive asks that bring nothing new before the loop calls the strategy exhausted.
MAX_STALE_ASKS = 1000


@dataclass(frozen=True)
class Trial:
    number: int  # 0-based count of measured trials
    config: Config
    measurement: Measurement
    elapsed_s: float  # since the loop started

    @property
    def cost_ms(self) -> float:
        return cost_ms(self.measurement)


Evaluate = Callable[[Config], Measurement]
Callback = Callable[[Trial, Sequence[Trial]], None]


class History:
    """What a study knows: measured trials in order, and every config already seen."""

    def __init__(self) -> None:
        self.trials: list[Trial] = []
        self.known: dict[Config, Measurement] = {}

    def best(self) -> Trial | None:
        ok = [t for t in self.trials if math.isfinite(t.cost_ms)]
        return min(ok, key=lambda t: t.cost_ms) if ok else None


def run(
    strategy: Strategy,
    evaluate: Evaluate,
    *,
    max_trials: int | None = None,
    max_seconds: float | None = None,
    callbacks: Iterable[Callback] = (),
    priors: Iterable[Measurement] = (),
    history: History | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> History:
    """Run ``strategy`` against ``evaluate`` until a budget or the strategy runs out.

    Args:
        strategy: asks configs and is told measurements.
        evaluate: measures one config (live objective, replay, anything).
        max_trials: stop after this many measured trials in total (``history`` included).
        max_seconds: stop starting new trials after this much wall time.
        callbacks: called after each measured trial with (trial, all trials so far).
        priors: measurements from elsewhere, told before the first ask; they are not
            trials of this study and may be re-measured here.
        history: trials of an earlier run of the same study (resume): told to the
            strategy first, counted against ``max_trials``, never measured again.
    """
    if max_trials is None and max_seconds is None:
        raise ValueError("run: give max_trials or max_seconds, or the loop may never end")
    if max_trials is not None and max_trials < 0:
        raise ValueError(f"max_trials must be >= 0, got {max_trials}")
    callbacks = list(callbacks)
    history = history or History()
    for prior in priors:
        strategy.tell(prior.config, prior)
    for trial in history.trials:
        strategy.tell(trial.config, trial.measurement)
    started = clock()
    stale = 0
    while max_trials is None or len(history.trials) < max_trials:
        if max_seconds is not None and clock() - started >= max_seconds:
            break
        config = strategy.ask()
        if config is None:
            break
        if config in history.known:
            strategy.tell(config, history.known[config])
            stale += 1
            if stale >= MAX_STALE_ASKS:
                break
            continue
        stale = 0
        measurement = evaluate(config)
        trial = Trial(len(history.trials), config, measurement, clock() - started)
        history.trials.append(trial)
        history.known[config] = measurement
        strategy.tell(config, measurement)
        for callback in callbacks:
            callback(trial, history.trials)
    return history
