"""scikit-optimize Gaussian-process Bayesian optimisation ("skopt").

skopt's ``Optimizer`` keeps the measurements (``tell``) and fits its Gaussian process
(Matern 5/2 with one length scale per tunable, a learned noise term, normalised
inputs and outputs) after each batch of them. Its own ``ask`` maximises the
acquisition over random points of the unconstrained box; here the acquisition is
scored on the open feasible configs instead (a few hundred at most; by default those
next to the best measured, a trust region), which is exact and cheaper, never proposes
an infeasible or measured config, and finds the optima that sit on the shared-memory
boundary.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import numpy as np
from skopt import Optimizer
from skopt.acquisition import gaussian_ei, gaussian_lcb, gaussian_pi
from skopt.learning.gaussian_process.kernels import Sum, WhiteKernel
from skopt.space import Integer
from skopt.utils import cook_estimator

from flashtune.search._pooled import PooledStrategy
from flashtune.search.space import SearchSpace
from flashtune.search.strategy import check_int_option
from flashtune.values.config import Config

ACQUISITIONS = ("EI", "LCB", "PI")


class SkoptBO(PooledStrategy):
    """GP-based BO on index vectors, acquisition scored over the open feasible configs.

    Options, besides ``n_startup``, ``startup`` and ``prior_trials``:
        acq_func: ``"EI"`` (expected improvement), ``"LCB"`` or ``"PI"``.
        xi: improvement (in log ms, so about a fraction) EI and PI ask for; larger explores.
        kappa: LCB's exploration weight.
        n_restarts: restarts of the GP's hyperparameter fit (each costs a fit).
        trust_steps: score only open configs within this many value steps of the best
            ``trust_best`` measured ones while there are any (``PooledStrategy.candidates``);
            0 scores every open config.
        trust_best: how many of the best measured configs the trust region surrounds.
    """

    name = "skopt"
    options_defaults: ClassVar[dict[str, Any]] = {
        **PooledStrategy.options_defaults,
        "acq_func": "EI",
        "xi": 0.01,
        "kappa": 1.96,
        "n_restarts": 0,
        "trust_steps": 1,
        "trust_best": 3,
    }

    def __init__(self, space: SearchSpace, *, seed: int = 0, **options: Any) -> None:
        super().__init__(space, seed=seed, **options)
        if self.options["acq_func"] not in ACQUISITIONS:
            raise ValueError(f"{self.name}: acq_func must be one of {ACQUISITIONS}, got {self.options['acq_func']!r}")
        check_int_option(self, "n_restarts", minimum=0)
        check_int_option(self, "trust_steps", minimum=0)
        check_int_option(self, "trust_best", minimum=1)
        # A tunable with one value carries no information and skopt rejects an empty range.
        self._modelled = [i for i, name in enumerate(space.names) if len(space.values(name)) > 1]
        self._optimizer: Optimizer | None = None
        if self._modelled:
            dimensions = [Integer(0, len(space.values(space.names[i])) - 1, name=space.names[i])
                          for i in self._modelled]
            model_seed = int(self.rng.integers(2**31 - 1))
            estimator = cook_estimator("GP", space=dimensions, random_state=model_seed,
                                       n_restarts_optimizer=int(self.options["n_restarts"]))
            self._optimizer = Optimizer(
                dimensions, base_estimator=estimator, n_initial_points=max(self.n_startup, 1),
                acq_optimizer="sampling",
                # skopt scores its own random candidates after each fit; we score ours.
                acq_optimizer_kwargs={"n_points": 1}, random_state=model_seed, model_queue_size=1,
            )
        self._unfitted: tuple[list[list[int]], list[float]] = ([], [])

    def _coordinates(self, config: Config) -> list[int]:
        indices = self.space.to_indices(config)
        return [int(indices[i]) for i in self._modelled]

    def _observe(self, config: Config, cost: float) -> None:
        # Batched: one GP fit per ask, however many configs were told since the last.
        self._unfitted[0].append(self._coordinates(config))
        self._unfitted[1].append(cost)

    def _propose(self) -> Config | None:
        optimizer = self._optimizer
        if optimizer is None:
            return None
        xs, ys = self._unfitted
        if xs:
            with warnings.catch_warnings():
                # The GP's hyperparameters often sit on a bound with a dozen points.
                warnings.simplefilter("ignore")
                optimizer.tell(xs, ys, fit=True)
            self._unfitted = ([], [])
            if optimizer.models:
                _warm_start(optimizer)
        if not optimizer.models:
            return None  # fewer measurements than n_startup: let the pool pick
        configs = self.candidates(int(self.options["trust_steps"]), int(self.options["trust_best"]))
        acquisition = self._acquisition(optimizer, optimizer.space.transform([self._coordinates(c) for c in configs]))
        best = np.flatnonzero(acquisition >= acquisition.max() - 1e-12 * max(1.0, abs(acquisition.max())))
        return configs[int(self.rng.choice(best))]

    def _acquisition(self, optimizer: Optimizer, points: np.ndarray) -> np.ndarray:
        """Higher is better, for every acquisition function."""
        model, y_opt = optimizer.models[-1], float(np.min(optimizer.yi))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if self.options["acq_func"] == "EI":
                return np.asarray(gaussian_ei(points, model, y_opt=y_opt, xi=float(self.options["xi"])))
            if self.options["acq_func"] == "PI":
                return np.asarray(gaussian_pi(points, model, y_opt=y_opt, xi=float(self.options["xi"])))
            return -np.asarray(gaussian_lcb(points, model, kappa=float(self.options["kappa"])))


def _warm_start(optimizer: Optimizer) -> None:
    """Start the next GP fit from the last fitted hyperparameters (a few steps, not a search).

    skopt fits a clone of ``base_estimator_`` from its initial kernel at every tell; most
    of a trial's CPU time went there. After a fit skopt zeroes the white-noise level of
    ``kernel_`` (for prediction) and keeps the fitted one in ``noise_``: put it back.
    """
    model = optimizer.models[-1]
    kernel = model.kernel_
    if not (isinstance(kernel, Sum) and isinstance(kernel.k2, WhiteKernel)):
        return
    bounds = kernel.k2.noise_level_bounds
    noise = float(np.clip(model.noise_ or bounds[0], bounds[0], bounds[1]))
    optimizer.base_estimator_.set_params(kernel=kernel.k1 + WhiteKernel(noise_level=noise, noise_level_bounds=bounds))
