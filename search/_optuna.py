"""Optuna behind the ask/tell interface: shared by the TPE and GP adapters.

Each tunable is one Optuna parameter. ``encoding="ordinal"`` (TPE's default) makes it the
index of its value (``IntDistribution``), so the sampler sees that BLOCK_M 128 lies
between 64 and 256; ``"categorical"`` hides that order (Optuna's usual way with
choices, and what docs/reference.md found no better than random); ``"mixed"`` (GP's
default) keeps numbers ordinal and makes only the choices (load modes, grids, tile orders,
whose listed order is arbitrary) categorical: Optuna's GP then measures them by Hamming
distance, with no length scale along an order that does not exist.

Optuna's own trials follow the configs measured, not the ones proposed: a proposal that
``CandidatePool`` had to move is closed as FAIL (samplers skip failed trials) and the
config actually measured is added with ``Study.add_trial``, the same path as a config
told from elsewhere. The study is in memory: the run loop owns persistence and logging.
"""

from __future__ import annotations

import abc
import contextlib
import logging
from collections.abc import Iterator
from typing import Any, ClassVar

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import BaseSampler
from optuna.trial import Trial, TrialState

from flashtune.search._pooled import PooledStrategy
from flashtune.search.space import SearchSpace
from flashtune.values.config import Config

ENCODINGS = ("ordinal", "categorical", "mixed")


class OptunaStrategy(PooledStrategy):
    """An Optuna sampler asked one trial at a time; subclasses build the sampler."""

    options_defaults: ClassVar[dict[str, Any]] = {**PooledStrategy.options_defaults, "encoding": "ordinal"}

    def __init__(self, space: SearchSpace, *, seed: int = 0, **options: Any) -> None:
        super().__init__(space, seed=seed, **options)
        if self.options["encoding"] not in ENCODINGS:
            raise ValueError(f"{self.name}: encoding must be one of {ENCODINGS}, got {self.options['encoding']!r}")
        self._distributions = self._build_distributions()
        # The sampler's seed comes from this strategy's generator: one seed drives everything.
        sampler_seed = int(self.rng.integers(2**31 - 1))
        with _quiet_optuna():
            self.study = optuna.create_study(direction="minimize", sampler=self._make_sampler(sampler_seed))
        self._running: dict[Config, Trial] = {}

    @abc.abstractmethod
    def _make_sampler(self, seed: int) -> BaseSampler:
        """The Optuna sampler, seeded with ``seed``."""

    def _build_distributions(self) -> dict[str, BaseDistribution]:
        encoding = self.options["encoding"]
        return {
            name: IntDistribution(0, len(self.space.values(name)) - 1)
            if encoding == "ordinal" or (encoding == "mixed" and self.space.is_ordered(name))
            else CategoricalDistribution(list(range(len(self.space.values(name)))))
            for name in self.space.names
        }

    def _params(self, config: Config) -> dict[str, int]:
        return dict(zip(self.space.names, self.space.to_indices(config)))

    def _propose(self) -> Config | None:
        trial = self.study.ask(self._distributions)
        config = self.space.from_indices([trial.params[name] for name in self.space.names])
        self._running[config] = trial
        return config

    def _rejected(self, proposal: Config) -> None:
        trial = self._running.pop(proposal, None)
        if trial is not None:
            self.study.tell(trial, state=TrialState.FAIL)

    def _observe(self, config: Config, cost: float) -> None:
        trial = self._running.pop(config, None)
        if trial is not None:
            self.study.tell(trial, cost)
            return
        self.study.add_trial(
            optuna.trial.create_trial(params=self._params(config), distributions=self._distributions, value=cost)
        )


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[None]:
    """Hide "A new study created in memory" for a study the user never sees as such.

    Optuna logs it at INFO on its own logger; the level is raised for this call only.
    """
    logger = logging.getLogger("optuna")
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)
