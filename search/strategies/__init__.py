"""Built-in strategies, one module each; importing this package registers them."""

from flashtune.search.strategies import grid, random_search  # noqa: F401
