"""Serving tuned configs: store, dispatch with fallback, online re-tuning."""
