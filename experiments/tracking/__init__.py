"""MLflow tracking of studies: the loop callback, shared-study runs, reports, and reading them back."""
