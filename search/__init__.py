"""Search strategies behind one ask/tell interface, and the loop that drives them."""

from flashtune.search.loop import History, Ledger, MemoryLedger, Trial, run
from flashtune.search.registry import make_strategy, option_defaults, register, strategy_names
from flashtune.search.space import SearchSpace
from flashtune.search.strategy import Strategy, check_options, cost_ms, option_value

__all__ = [
    "History", "Ledger", "MemoryLedger", "SearchSpace", "Strategy", "Trial", "check_options", "cost_ms",
    "make_strategy", "option_defaults", "option_value", "register", "run", "strategy_names",
]
