"""Tune any kernel: a user's own space and objective, searched and logged to MLflow like ours.

    from flashtune.experiments.tune_any import tune

    def time_my_kernel(config):          # anything: a timer, a replay, a simulator
        return run_and_time(**config)    # ms (float), or a Measurement, or raise on failure

    result = tune({"block": [32, 64, 128], "unroll": [1, 2, 4], "fraction": [0.25, 0.5]},
                  time_my_kernel, restrictions=["block * unroll <= 256"], trials=50,
                  study_name="my-kernel", gpu_name="RTX 3090")
    result.best.config, result.best.cost_ms

The study runs the same ask / evaluate / tell / record loop as ``flashtune tune``
(``flashtune.search.run``), and, with a ``tracking_uri``, the same MLflow tracker: one
experiment per GPU model, a parent run per study, one child per trial (config as params,
status as a tag), the best so far as ``best_ms``, the convergence plot and trials table as
artifacts. Nothing of attention is involved: measurements carry no workload.

Failures are values: an objective that raises, or returns ``inf``, ``nan`` or a failure
string (Kernel Tuner's ``"RuntimeFailedConfig"``...), records a failed trial and the study
goes on.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flashtune.kernels.config import Config, Value
from flashtune.objectives.kernel_tuner_files import CACHE_FAILURES
from flashtune.objectives.types import Measurement, Status
from flashtune.search import History, SearchSpace, make_strategy, run
from flashtune.search.loop import Trial, best_trial
from flashtune.search.space import Restriction

#: What a user's objective may return for one config.
Outcome = Measurement | float | int | str | None
Objective = Callable[[Config], Outcome]


@dataclass(frozen=True)
class TuneResult:
    """A finished study: its trials, the best one, and where MLflow keeps it ("" untracked)."""

    history: History
    experiment_id: str = ""
    parent_run_id: str = ""

    @property
    def trials(self) -> list[Trial]:
        return self.history.trials

    @property
    def best(self) -> Trial | None:
        return best_trial(self.history.trials)


def tune(
    space: SearchSpace | Mapping[str, Sequence[Value]],
    objective: Objective,
    *,
    restrictions: Iterable[Restriction] = (),
    strategy: str = "portfolio",
    trials: int = 50,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
    priors: Iterable[Measurement] = (),
    study_name: str = "study",
    gpu_name: str = "unknown GPU",
    tracking_uri: str | None = None,
) -> TuneResult:
    """Search ``space`` for the config ``objective`` finds fastest.

    Args:
        space: a ``SearchSpace``, or each parameter's values (then ``restrictions`` apply).
        objective: measures one config: milliseconds, a ``Measurement``, a failure string,
            or an exception (a failed trial).
        restrictions: Kernel Tuner-style expressions over parameter names, or predicates.
        strategy: a registered strategy (``flashtune.search.strategy_names()``).
        trials: the budget of measured configs.
        seed: seeds the strategy.
        options: the strategy's options.
        priors: measurements from another GPU of the same space (they order the search).
        study_name: names the MLflow parent run.
        gpu_name: picks the MLflow experiment (one per GPU model).
        tracking_uri: an MLflow tracking URI (``sqlite:///mlflow.db``); None: not logged.

    Raises:
        ValueError: a malformed space, strategy, option or budget (named).
    """
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise ValueError(f"trials must be an int >= 1, got {trials!r}")
    if not isinstance(space, SearchSpace):
        space = SearchSpace(space, restrictions=restrictions)
    elif list(restrictions):
        raise ValueError("restrictions: give them with the value lists, or build the SearchSpace with them")
    searcher = make_strategy(strategy, space, seed=seed, **dict(options or {}))

    def evaluate(config: Config) -> Measurement:
        return as_measurement(config, objective, fingerprint=gpu_name)

    callbacks = []
    tracker = None
    if tracking_uri is not None:
        from flashtune.experiments.tracking.tracker import MlflowTracker  # mlflow only when tracked

        tracker = MlflowTracker(
            tracking_uri, study_name=study_name, gpu_name=gpu_name,
            parent_tags={"strategy": strategy, "seed": str(seed), "gpu": gpu_name, "space": "user"},
            parent_params={"strategy": strategy, "seed": str(seed), "trials": str(trials),
                           # MLflow caps a param's length: a long value list is clipped (the trials carry the configs).
                           **{f"space.{name}": str(list(values))[:500] for name, values in space.tunables.items()}},
            child_tags={"strategy": strategy, "gpu": gpu_name},
            study_info={"strategy": strategy, "seed": seed, "budget_trials": trials},
        )
        tracker.start([])
        callbacks.append(tracker)
    history = History()
    status = "FAILED"
    try:
        run(searcher, evaluate, max_trials=trials, callbacks=callbacks, priors=list(priors), history=history)
        status = "FINISHED"
    finally:
        if tracker is not None:  # closed FAILED by a KeyboardInterrupt too, never left RUNNING
            tracker.end(status, history.trials)
    if len(history.trials) < trials:
        # The loop stops when the strategy has no new config to ask: on a space smaller than
        # the budget the study is complete, but a caller reading len(result.trials) should
        # not have to guess why it is short.
        warnings.warn(_short_run(space, len(history.trials), trials), UserWarning, stacklevel=2)
    return TuneResult(history, tracker.experiment_id if tracker else "", tracker.parent_run_id if tracker else "")


#: Above this many combinations the admitted configs are not counted for the short-run warning.
_COUNT_LIMIT = 100_000


def _short_run(space: SearchSpace, ran: int, asked: int) -> str:
    """Why a study measured fewer configs than its budget, with the space's size where cheap."""
    admitted = f"; the space admits {len(space.feasible_configs())} configs" if space.size <= _COUNT_LIMIT else ""
    return (f"tune: {ran} of the {asked} trials asked ran: the strategy had no new config left to measure"
            f"{admitted}")


def as_measurement(config: Config, objective: Objective, *, fingerprint: str = "") -> Measurement:
    """The user's outcome for ``config`` as a ``Measurement``; every failure is a value."""
    try:
        outcome = objective(config)
    except Exception as exc:  # the user's kernel failed: a failed trial, not a crash
        return Measurement.failure(config, None, Status.RUNTIME_ERROR, f"{type(exc).__name__}: {exc}",
                                   fingerprint=fingerprint)
    if isinstance(outcome, Measurement):
        return outcome
    if isinstance(outcome, str):
        return Measurement.failure(config, None, CACHE_FAILURES.get(outcome, Status.RUNTIME_ERROR), outcome,
                                   fingerprint=fingerprint)
    if outcome is None or isinstance(outcome, bool) or not isinstance(outcome, (int, float)):
        return Measurement.failure(config, None, Status.RUNTIME_ERROR,
                                   f"objective returned {outcome!r}, not milliseconds", fingerprint=fingerprint)
    if not math.isfinite(outcome) or outcome <= 0:
        return Measurement.failure(config, None, Status.RUNTIME_ERROR, f"objective returned {outcome!r} ms",
                                   fingerprint=fingerprint)
    value = float(outcome)
    return Measurement(config, None, Status.OK, fingerprint=fingerprint, median_ms=value, p20_ms=value, p80_ms=value)
