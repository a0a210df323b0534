"""Optuna's Tree-structured Parzen Estimator over the open feasible configs ("tpe")."""

from __future__ import annotations

from typing import Any, ClassVar

import optuna
from optuna.samplers import BaseSampler

from flashtune.search._optuna import OptunaStrategy


class OptunaTPE(OptunaStrategy):
    """TPE with the shared start design, repair and priors (``flashtune.search._pooled``).

    Options, besides ``n_startup``, ``startup``, ``prior_trials`` and ``encoding``:
        n_ei_candidates: samples TPE draws from its good-config density per ask; more
            exploits harder.
        multivariate: model the tunables jointly (BLOCK_N and num_stages interact
            through shared memory) instead of one at a time.
    """

    name = "tpe"
    options_defaults: ClassVar[dict[str, Any]] = {
        **OptunaStrategy.options_defaults,
        "n_ei_candidates": 24,
        "multivariate": True,
    }

    def _make_sampler(self, seed: int) -> BaseSampler:
        return optuna.samplers.TPESampler(
            seed=seed,
            # The start design is handed out by PooledStrategy; TPE models from then on.
            n_startup_trials=self.n_startup,
            n_ei_candidates=int(self.options["n_ei_candidates"]),
            multivariate=bool(self.options["multivariate"]),
            constant_liar=False,  # one trial at a time: nothing to lie about
        )
