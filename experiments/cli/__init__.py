"""The `flashtune` command: `main` and one module per subcommand, each adding its own parser."""
