"""Optuna's Gaussian-process sampler over the open feasible configs ("gp").

GP rather than CMA-ES: with the ordinal encoding (``flashtune.search._optuna``) every
tunable is an integer, which GPSampler models directly (Matern 5/2 with one length
scale per tunable) and optimises by exhaustive line search per discrete parameter.
CMA-ES would round a continuous Gaussian onto 4-5 values per knob and needs more
trials than this space has feasible configs to adapt its covariance.

Optuna's GP runs on torch (CPU): this module never imports torch itself, Optuna does
when the first model is fitted.
"""

from __future__ import annotations

from typing import Any, ClassVar

import optuna
from optuna.samplers import BaseSampler

from flashtune.search._base import register
from flashtune.search._optuna import OptunaStrategy


@register
class OptunaGP(OptunaStrategy):
    """GP-based Bayesian optimisation (log expected improvement) with the shared plumbing.

    Options, besides ``n_startup``, ``startup``, ``prior_trials`` and ``encoding``:
        deterministic: fit the GP without a noise term (a replayed table answers the
            same time twice); leave False on a live GPU, whose times move by a few %.
    """

    name = "gp"
    options_defaults: ClassVar[dict[str, Any]] = {
        **OptunaStrategy.options_defaults,
        "deterministic": False,
    }

    def _make_sampler(self, seed: int) -> BaseSampler:
        return optuna.samplers.GPSampler(
            seed=seed,
            n_startup_trials=self.n_startup,
            deterministic_objective=bool(self.options["deterministic"]),
            warn_independent_sampling=False,
        )
