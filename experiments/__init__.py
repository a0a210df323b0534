"""Studies per GPU model, MLflow tracking, priors, strategy comparison and the CLI."""
