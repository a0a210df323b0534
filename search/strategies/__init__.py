"""Built-in strategies, one module each; importing this package registers them."""

from flashtune.search.strategies import deap_ga, grid, optuna_gp, optuna_tpe, portfolio, random_search, skopt_bo  # noqa: F401
