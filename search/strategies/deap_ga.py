"""A DEAP genetic algorithm whose offspring are handed out one ``ask`` at a time ("ga").

Individuals are index vectors (``SearchSpace.to_indices``). The initial population is
the shared start (priors' best, then a spread design); each generation the
``population`` best configs measured so far are the parents (elitist mu + lambda), and
DEAP's ``varOr`` breeds ``offspring`` children by uniform crossover or Gaussian creep
mutation (a step of about ``sigma`` values per mutated gene, rounded and clipped: on
ordered knobs a neighbour is a better guess than a redraw of the whole range). A child that is infeasible or already measured (a clone, or a mutation that
changed nothing) is moved to the nearest open config, which turns wasted children into
a local search around the parents.

DEAP's operators draw from Python's module-level ``random``. Breeding runs inside
``_own_random``, which lends the module this strategy's own ``random.Random`` state and
takes it back afterwards: the GA is reproducible from its seed, and the program's
global random sequence is left as it was (not thread-safe: breed one GA at a time).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any, ClassVar

from deap import algorithms, base, tools

from flashtune.search._pooled import PooledStrategy
from flashtune.search.space import SearchSpace
from flashtune.search.strategy import check_int_option
from flashtune.values.config import Config


class _Fitness(base.Fitness):
    weights = (-1.0,)  # minimise time


class _Individual(list):
    """An index vector with a DEAP fitness (local classes: no global ``creator`` state)."""

    def __init__(self, iterable: Iterator[int] | list[int] = ()) -> None:
        super().__init__(iterable)
        self.fitness = _Fitness()


@contextlib.contextmanager
def _own_random(generator: random.Random) -> Iterator[None]:
    """Run DEAP's ``random`` calls on ``generator``'s state, then restore the global state."""
    saved = random.getstate()
    random.setstate(generator.getstate())
    try:
        yield
    finally:
        generator.setstate(random.getstate())
        random.setstate(saved)


class DeapGA(PooledStrategy):
    """Elitist genetic algorithm over index vectors.

    Options, besides ``n_startup`` (initial population), ``startup`` and ``prior_trials``:
        population: parents kept each generation (the best measured configs).
        offspring: children bred per generation, asked one at a time.
        cxpb: probability a child comes from uniform crossover of two parents.
        mutpb: probability a child is a mutant of one parent (else a clone, which the
            pool moves to the nearest open config).
        indpb: per-gene probability, in crossover (swap) and mutation (creep).
        sigma: standard deviation of a creep, in steps between neighbouring values.
    """

    name = "ga"
    options_defaults: ClassVar[dict[str, Any]] = {
        **PooledStrategy.options_defaults,
        "population": 8,
        "offspring": 8,
        "cxpb": 0.5,
        "mutpb": 0.4,
        "indpb": 0.35,
        "sigma": 1.0,
    }

    def __init__(self, space: SearchSpace, *, seed: int = 0, **options: Any) -> None:
        super().__init__(space, seed=seed, **options)
        check_int_option(self, "population", minimum=2)
        check_int_option(self, "offspring", minimum=1)
        for name in ("cxpb", "mutpb", "indpb"):
            value = self.options[name]
            if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ValueError(f"{self.name}: option {name} must be in [0, 1], got {value!r}")
        if self.options["cxpb"] + self.options["mutpb"] > 1.0:
            raise ValueError(f"{self.name}: cxpb + mutpb must be <= 1, got {self.options['cxpb'] + self.options['mutpb']}")
        self._random = random.Random(int(self.rng.integers(2**63)))
        self._evaluated: list[_Individual] = []
        self._brood: list[Config] = []
        sigma = self.options["sigma"]
        if not isinstance(sigma, (int, float)) or isinstance(sigma, bool) or sigma <= 0:
            raise ValueError(f"{self.name}: option sigma must be a number > 0, got {sigma!r}")
        self._uppers = [len(space.values(name)) - 1 for name in space.names]
        self._toolbox = base.Toolbox()
        self._toolbox.register("mate", tools.cxUniform, indpb=float(self.options["indpb"]))
        self._toolbox.register("mutate", tools.mutGaussian, mu=0.0, sigma=float(sigma),
                               indpb=float(self.options["indpb"]))

    def _propose(self) -> Config | None:
        if not self._brood:
            self._brood = self._breed()
        return self._brood.pop(0) if self._brood else None

    def _breed(self) -> list[Config]:
        """One generation's children, in the order DEAP made them."""
        if len(self._evaluated) < 2:
            return []  # nothing to mate yet: the pool picks at random
        parents = tools.selBest(self._evaluated, int(self.options["population"]))
        with _own_random(self._random):
            children = algorithms.varOr(parents, self._toolbox, int(self.options["offspring"]),
                                        float(self.options["cxpb"]), float(self.options["mutpb"]))
        return [self.space.from_indices([min(max(round(g), 0), up) for g, up in zip(child, self._uppers)])
                for child in children]

    def _observe(self, config: Config, cost: float) -> None:
        individual = _Individual(self.space.to_indices(config))
        individual.fitness.values = (cost,)
        self._evaluated.append(individual)
