"""Opt-in online re-tuning: the tuner, its options, latency monitor, timing, candidates, worker."""
