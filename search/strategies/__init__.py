"""Built-in strategies, one module each; ``flashtune.search.registry`` names them."""
