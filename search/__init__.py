"""Search strategies behind one ask/tell interface, and the loop that drives them."""

from flashtune.search._base import Strategy, cost_ms, make_strategy, register, strategy_names
from flashtune.search.loop import History, Trial, run
from flashtune.search.space import SearchSpace

__all__ = [
    "History", "SearchSpace", "Strategy", "Trial", "cost_ms", "make_strategy", "register", "run", "strategy_names",
]
