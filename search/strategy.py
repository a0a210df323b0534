"""The one interface every search strategy implements, and the checks of its options.

Strategies import neither torch, triton nor mlflow: they see configs and numbers. The
loop (``flashtune.search.loop``) owns ask -> evaluate -> tell -> callbacks.
"""

from __future__ import annotations

import abc
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from flashtune.search.priors import PriorBook
from flashtune.search.space import SearchSpace
from flashtune.values.config import Config
from flashtune.values.types import Measurement

#: Multiplier on the worst time seen, told to strategies for a failed config: failures
#: must look worse than any success, never 0 (which a minimizer would love).
FAILURE_PENALTY_FACTOR = 10.0
#: Told for a failure before any success was seen (milliseconds).
FAILURE_PENALTY_MS = 1.0e4


def cost_ms(measurement: Measurement) -> float:
    """The value strategies minimize: median ms, or inf for a failure."""
    return measurement.median_ms if measurement.ok and math.isfinite(measurement.median_ms) else math.inf


class Strategy(abc.ABC):
    """Ask for a config, tell its measurement. Seeded; unknown options raise.

    Subclasses declare ``name`` and ``options`` (option name -> default) and read their
    options from ``self.options``.
    """

    name: ClassVar[str]
    options_defaults: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, space: SearchSpace, *, seed: int = 0, **options: Any) -> None:
        if not isinstance(space, SearchSpace):
            raise TypeError(f"space must be a SearchSpace, got {type(space).__name__}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"seed must be an int, got {seed!r}")
        check_options(self.name, self.options_defaults, options)
        self.space = space
        self.seed = seed
        self.options: dict[str, Any] = {**self.options_defaults, **options}
        self._worst_ok_ms = 0.0
        #: Measurements from another GPU or workload (``warm_start``): they order the search,
        #: they are not trials of this study and never exclude a region.
        self.priors = PriorBook()

    @abc.abstractmethod
    def ask(self) -> Config | None:
        """The next config to measure, or None when the strategy has nothing left to try."""

    @abc.abstractmethod
    def tell(self, config: Config, measurement: Measurement) -> None:
        """Record a measurement of this study; ``config`` may be one ``ask`` never produced
        (a resumed trial, another worker's trial)."""

    def warm_start(self, priors: Iterable[Measurement]) -> None:
        """Hand over priors (measurements from elsewhere) before the first ``ask``.

        Priors order the search: each strategy measures the priors' best configs early and
        follows their order while it agrees with the measurements here. They are never
        told as trials: their configs stay open to be measured on this GPU.
        """
        for prior in priors:
            self.priors.add(prior)

    def penalized_ms(self, measurement: Measurement) -> float:
        """A finite cost for model-based strategies: the time, or a penalty for failures."""
        value = cost_ms(measurement)
        if math.isfinite(value):
            self._worst_ok_ms = max(self._worst_ok_ms, value)
            return value
        if self._worst_ok_ms > 0:
            return self._worst_ok_ms * FAILURE_PENALTY_FACTOR
        return FAILURE_PENALTY_MS


def option_value(text: str) -> Any:
    """An option's value as typed on a command line: JSON (``3``, ``0.5``, ``true``,
    ``[1, 2]``), Python's ``True``/``False`` as the defaults print, else the text itself."""
    if text in ("True", "False"):
        return text == "True"
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def check_options(strategy: str, defaults: Mapping[str, Any], options: Mapping[str, Any]) -> None:
    """Raise naming the option when one is unknown or not of its default's kind.

    Why the kind: a flag typed on a command line arrives as text, and ``"False"`` is
    truthy; a bool option must get a bool, a number option a number (an int is a fine
    float). Options whose default is None or text take anything: their strategy checks them.

    Raises:
        ValueError: an unknown option (the known ones listed).
        TypeError: a value of the wrong kind.
    """
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise ValueError(f"{strategy}: unknown option(s) {unknown}; known options are {sorted(defaults)}")
    for name, value in options.items():
        default = defaults[name]
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, (int, float)):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:
            continue
        if not ok:
            raise TypeError(f"{strategy}: option {name} must be {type(default).__name__} like its default "
                            f"{default!r}, got {value!r}")


def check_int_option(strategy: Strategy, name: str, *, minimum: int) -> None:
    """Raise naming the option unless ``strategy.options[name]`` is an int >= ``minimum``."""
    value = strategy.options[name]
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{strategy.name}: option {name} must be an int >= {minimum}, got {value!r}")
