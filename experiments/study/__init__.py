"""A study: the trial loop over Optuna storage, workers that share it, and where measurements come from."""
