"""Evaluation on recorded spaces: replay batches, strategy comparison, transfer, scoring, priors, plots."""
