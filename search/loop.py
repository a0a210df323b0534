"""The one trial loop: ask -> evaluate -> tell -> record, over a ledger of the study's trials.

Every study runs this loop: one process in memory (``compare``, ``transfer``, the search
tests), one process persisted in Optuna storage, or many workers sharing one study. What
differs is the :class:`Ledger` (where trials are kept and who may measure which config),
never the loop.

The loop, not the strategies, guarantees that no config is measured twice in a study:
a repeated ask is answered from the ledger (told again, not counted, not measured), so
every strategy keeps its own logic and none can waste GPU time on a duplicate. Every new
config is a trial, infeasible ones included (the objective answers those without
compiling); strategies that consult ``space.is_feasible`` first waste fewer trials.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from flashtune.search.strategy import Strategy, cost_ms
from flashtune.values.config import Config
from flashtune.values.types import Measurement

#: Consecutive asks that bring nothing new before the loop calls the strategy exhausted.
MAX_STALE_ASKS = 1000


@dataclass(frozen=True)
class Trial:
    number: int  # 0-based count of measured trials
    config: Config
    measurement: Measurement
    elapsed_s: float  # tuning time of the study when it was recorded

    @property
    def cost_ms(self) -> float:
        return cost_ms(self.measurement)


Evaluate = Callable[[Config], Measurement]
Callback = Callable[[Trial, Sequence[Trial]], None]


class History:
    """What a study knows: measured trials in order, and every config already seen."""

    def __init__(self, trials: Iterable[Trial] = ()) -> None:
        self.trials: list[Trial] = []
        self.known: dict[Config, Measurement] = {}
        for trial in trials:
            self.add(trial)

    def add(self, trial: Trial) -> None:
        self.trials.append(trial)
        self.known[trial.config] = trial.measurement

    def best(self) -> Trial | None:
        return best_trial(self.trials)


def best_trial(trials: Iterable[Trial]) -> Trial | None:
    """The fastest successful trial (the earlier one of a tie), or None if none succeeded."""
    ok = [t for t in trials if math.isfinite(t.cost_ms)]
    return min(ok, key=lambda t: (t.cost_ms, t.number)) if ok else None


class Ledger(abc.ABC):
    """The trials of one study, and who may measure which config: the loop's only state.

    A ledger that others write too (workers sharing a study) also reports configs in
    flight elsewhere and waits while the rest of the budget is measured there.
    """

    @abc.abstractmethod
    def refresh(self) -> Sequence[Trial]:
        """Read the study: every measured trial, in order (earlier runs and other workers')."""

    @abc.abstractmethod
    def known(self, config: Config) -> Measurement | None:
        """The measurement of ``config`` if the study has one (as of the last refresh)."""

    @abc.abstractmethod
    def measure(self, config: Config, evaluate: Evaluate, *, budget: int | None,
                elapsed_s: Callable[[], float]) -> Trial | None:
        """Measure ``config`` as the study's next trial and record it.

        Args:
            config: a config the study has not measured.
            evaluate: the objective.
            budget: the study's trial budget (None: no limit).
            elapsed_s: this run's elapsed time (a ledger may keep the study's own).

        Returns:
            The recorded trial, or None when another worker won the config or the budget.
        """

    @property
    @abc.abstractmethod
    def trials(self) -> Sequence[Trial]:
        """The measured trials as last read, with the ones this run recorded since."""

    def in_flight(self) -> Sequence[Config]:
        """Configs being measured by other workers now (none for a ledger of one process)."""
        return ()

    def wait(self) -> None:  # nothing is in flight in a one-process ledger
        """Called while the rest of the budget is in flight elsewhere: pause, reap the dead."""

    def history(self) -> History:
        """The study's measured trials, read once more (what ``run`` returns)."""
        return History(self.refresh())


class MemoryLedger(Ledger):
    """A study in memory: one process, gone with it (resume by handing its ``History``)."""

    def __init__(self, history: History | None = None) -> None:
        self._history = history if history is not None else History()

    def refresh(self) -> Sequence[Trial]:
        return self._history.trials

    def known(self, config: Config) -> Measurement | None:
        return self._history.known.get(config)

    def history(self) -> History:
        return self._history

    def measure(self, config: Config, evaluate: Evaluate, *, budget: int | None,
                elapsed_s: Callable[[], float]) -> Trial:
        measurement = evaluate(config)
        trial = Trial(len(self._history.trials), config, measurement, elapsed_s())
        self._history.add(trial)
        return trial

    @property
    def trials(self) -> Sequence[Trial]:
        return self._history.trials


def run(
    strategy: Strategy,
    evaluate: Evaluate,
    *,
    max_trials: int | None = None,
    max_seconds: float | None = None,
    callbacks: Iterable[Callback] = (),
    priors: Iterable[Measurement] = (),
    history: History | None = None,
    ledger: Ledger | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> History:
    """Run ``strategy`` against ``evaluate`` until a budget or the strategy runs out.

    Args:
        strategy: asks configs and is told measurements.
        evaluate: measures one config (live objective, replay, anything).
        max_trials: stop when the study has this many measured trials (earlier runs' and
            other workers' included).
        max_seconds: stop starting new trials after this much wall time.
        callbacks: called after each trial this run measured, with (trial, all trials).
        priors: measurements from elsewhere, handed to ``strategy.warm_start`` before the
            first ask; they are not trials of this study and may be re-measured here.
        history: trials of an earlier run of the same study (resume, in memory): told to the
            strategy first, counted against ``max_trials``, never measured again.
        ledger: where the study's trials are kept (default: in memory, from ``history``).

    Returns:
        The study's measured trials.
    """
    if max_trials is None and max_seconds is None:
        raise ValueError("run: give max_trials or max_seconds, or the loop may never end")
    if max_trials is not None and max_trials < 0:
        raise ValueError(f"max_trials must be >= 0, got {max_trials}")
    if ledger is not None and history is not None:
        raise ValueError("run: give history (an in-memory study) or ledger, not both")
    ledger = ledger if ledger is not None else MemoryLedger(history)
    callbacks = list(callbacks)
    strategy.warm_start(list(priors))
    started = clock()
    told: set[int] = set()
    lied: set[Config] = set()
    stale = 0
    while True:
        measured = ledger.refresh()
        for trial in measured:
            if trial.number not in told:  # an earlier run's or another worker's trial
                strategy.tell(trial.config, trial.measurement)
                told.add(trial.number)
        if max_trials is not None and len(measured) >= max_trials:
            break
        if max_seconds is not None and clock() - started >= max_seconds:
            break
        in_flight = ledger.in_flight()
        if max_trials is not None and len(measured) + len(in_flight) >= max_trials:
            ledger.wait()  # the rest of the budget runs elsewhere, or a dead worker's is reaped
            continue
        config = strategy.ask()
        if config is None:
            break
        known = ledger.known(config)
        if known is not None:
            strategy.tell(config, known)
            stale += 1
            if stale >= MAX_STALE_ASKS:
                break
            continue
        if config in in_flight:
            # In flight on another worker: tell the constant liar once, so a deterministic
            # model (skopt) moves on instead of asking it again; the truth follows later.
            lie = _liar(config, [t.measurement for t in measured])
            if lie is not None and config not in lied:
                lied.add(config)
                strategy.tell(config, lie)
            else:
                ledger.wait()
            continue
        trial = ledger.measure(config, evaluate, budget=max_trials, elapsed_s=lambda: clock() - started)
        if trial is None:
            continue  # another worker won it; the next refresh shows theirs
        stale = 0
        told.add(trial.number)
        strategy.tell(config, trial.measurement)
        trials = ledger.trials
        for callback in callbacks:
            callback(trial, trials)
    return ledger.history()


def _liar(config: Config, measured: Iterable[Measurement]) -> Measurement | None:
    """The constant liar: the worst successful time so far, for a config still in flight
    (pessimistic, so the models do not crowd around configs nobody has measured)."""
    ok = [m for m in measured if math.isfinite(cost_ms(m))]
    if not ok:
        return None
    worst = max(ok, key=cost_ms)
    return dataclasses.replace(worst, config=config)
