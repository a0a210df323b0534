"""The strategies by name: the built-in ones, imported on first use, and any registered.

The built-ins are named as ``module:Class`` and imported when first built, so neither
``flashtune --help`` nor a GPU box without Optuna, DEAP or scikit-optimize pays for (or
fails on) a strategy it does not use, and no strategy module imports this registry (no cycle).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from flashtune.search.space import SearchSpace
from flashtune.search.strategy import Strategy

_BUILTIN = {
    "ga": "flashtune.search.strategies.deap_ga:DeapGA",
    "gp": "flashtune.search.strategies.optuna_gp:OptunaGP",
    "grid": "flashtune.search.strategies.grid:GridSearch",
    "random": "flashtune.search.strategies.random_search:RandomSearch",
    "skopt": "flashtune.search.strategies.skopt_bo:SkoptBO",
    "tpe": "flashtune.search.strategies.optuna_tpe:OptunaTPE",
}
_REGISTERED: dict[str, type[Strategy]] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    """Class decorator for strategies beyond the built-ins: make one available by its ``name``."""
    if not (isinstance(cls, type) and issubclass(cls, Strategy)):
        raise TypeError(f"register: expected a Strategy subclass, got {cls!r}")
    if cls.name in _BUILTIN or (cls.name in _REGISTERED and _REGISTERED[cls.name] is not cls):
        raise ValueError(f"strategy name {cls.name!r} is registered twice")
    _REGISTERED[cls.name] = cls
    return cls


def strategy_names() -> list[str]:
    """Every strategy ``make_strategy`` can build."""
    return sorted({*_BUILTIN, *_REGISTERED})


def strategy_class(name: str) -> type[Strategy]:
    """The class of a strategy by name (importing a built-in's module the first time)."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name not in _BUILTIN:
        raise ValueError(f"unknown strategy {name!r}; registered: {strategy_names()}")
    module, _, attribute = _BUILTIN[name].partition(":")
    return getattr(importlib.import_module(module), attribute)


def make_strategy(name: str, space: SearchSpace, *, seed: int = 0, **options: Any) -> Strategy:
    """Build a registered strategy by name (``"tpe"``, ``"random"``, ...)."""
    return strategy_class(name)(space, seed=seed, **options)


def option_defaults(name: str) -> Mapping[str, Any]:
    """A registered strategy's options and their defaults."""
    return strategy_class(name).options_defaults
