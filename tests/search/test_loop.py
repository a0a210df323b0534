"""The one trial loop over a ledger: the in-memory ledger, and what the loop asks of any ledger."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from flashtune.kernels.config import Config
from flashtune.objectives.types import Measurement
from flashtune.search import History, Ledger, MemoryLedger, Trial, make_strategy, run


def test_memory_ledger_resumes_without_repeating(needle_space, needle_evaluate) -> None:
    first = run(make_strategy("random", needle_space, seed=3), needle_evaluate, max_trials=6)
    earlier = [t.config for t in first.trials]
    ledger = MemoryLedger(first)
    again = run(make_strategy("random", needle_space, seed=3), needle_evaluate, max_trials=10, ledger=ledger)
    configs = [t.config for t in again.trials]
    assert len(configs) == 10 and len(set(configs)) == 10
    assert configs[:6] == earlier and again is first  # the ledger kept the same history


def test_history_or_ledger_not_both(needle_space, needle_evaluate) -> None:
    with pytest.raises(ValueError, match="not both"):
        run(make_strategy("grid", needle_space), needle_evaluate, max_trials=1, history=History(),
            ledger=MemoryLedger())


class _Crowded(MemoryLedger):
    """A ledger where another worker is measuring ``busy``; it lands when the loop waits."""

    def __init__(self, busy: Config, other: Callable[[Config], Measurement]) -> None:
        super().__init__()
        self.busy = busy
        self.other = other
        self.waits = 0
        self.lost = 0

    def in_flight(self) -> Sequence[Config]:
        return [] if self.busy in self.history().known else [self.busy]

    def wait(self) -> None:
        self.waits += 1
        if self.busy not in self.history().known:  # the other worker's trial is recorded
            super().measure(self.busy, self.other, budget=None, elapsed_s=lambda: 0.0)

    def measure(self, config: Config, evaluate: Callable[[Config], Measurement], *, budget: int | None,
                elapsed_s: Callable[[], float]) -> Trial | None:
        if config == self.busy:
            self.lost += 1
            return None
        return super().measure(config, evaluate, budget=budget, elapsed_s=elapsed_s)


def test_a_config_in_flight_elsewhere_is_never_measured_here(needle_space, needle_evaluate) -> None:
    busy = make_strategy("grid", needle_space).ask()  # the grid's first ask: held by another worker
    ledger = _Crowded(busy, needle_evaluate)
    history = run(make_strategy("grid", needle_space), needle_evaluate, max_trials=5, ledger=ledger)
    configs = [t.config for t in history.trials]
    assert len(configs) == 5 and len(set(configs)) == 5 and busy in configs  # measured once, elsewhere
    assert ledger.lost == 0 and ledger.waits >= 1, "the loop tried to measure a config another worker holds"
    assert isinstance(ledger, Ledger)
