"""Dispatch: the op, resolving a call to a config (exact, nearest, baseline), prepared calls."""
