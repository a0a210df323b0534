"""Sliding-window latency per workload bucket, and the metrics it derives.

Pure data and arithmetic: the policy (when to re-tune, when to roll back) is the online
tuner's. Not thread-safe by itself; the tuner holds its lock around every call.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Window:
    ms: deque[float]
    tokens: deque[int]
    total_samples: int = 0


@dataclass
class LatencyMonitor:
    """The last ``window`` latencies of each bucket.

    Args:
        window: samples kept per bucket.
    """

    window: int = 64
    _windows: dict[Hashable, _Window] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.window, int) or isinstance(self.window, bool) or self.window < 1:
            raise ValueError(f"window must be a positive int, got {self.window!r}")

    def _get(self, key: Hashable) -> _Window:
        win = self._windows.get(key)
        if win is None:
            win = self._windows[key] = _Window(deque(maxlen=self.window), deque(maxlen=self.window))
        return win

    def record(self, key: Hashable, ms: float, tokens: int = 0) -> None:
        """Add one sample (milliseconds of one call, and the query tokens it processed)."""
        win = self._get(key)
        win.ms.append(float(ms))
        win.tokens.append(int(tokens))
        win.total_samples += 1

    def reset(self, key: Hashable) -> None:
        """Forget a bucket's window (its config changed: old samples describe another config)."""
        win = self._get(key)
        win.ms.clear()
        win.tokens.clear()

    def count(self, key: Hashable) -> int:
        win = self._windows.get(key)
        return len(win.ms) if win else 0

    def median(self, key: Hashable) -> float:
        """Median latency of the window in ms; NaN when empty."""
        win = self._windows.get(key)
        return statistics.median(win.ms) if win and win.ms else math.nan

    def recent_median(self, key: Hashable, n: int) -> float:
        """Median of the last ``n`` samples in ms; NaN when empty."""
        win = self._windows.get(key)
        if not win or not win.ms:
            return math.nan
        return statistics.median(list(win.ms)[-n:])

    def quantile(self, key: Hashable, q: float) -> float:
        """Nearest-rank quantile ``q`` in [0, 1] of the window in ms; NaN when empty."""
        win = self._windows.get(key)
        if not win or not win.ms:
            return math.nan
        ordered = sorted(win.ms)
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    def tokens_per_s(self, key: Hashable) -> float:
        """Query tokens per second over the window; NaN when empty."""
        win = self._windows.get(key)
        if not win or not win.ms:
            return math.nan
        seconds = sum(win.ms) / 1e3
        return sum(win.tokens) / seconds if seconds > 0 else math.nan

    def degraded(self, key: Hashable, baseline_ms: float, threshold: float, min_samples: int) -> bool:
        """Whether the window's median exceeds ``baseline_ms`` by more than ``threshold``."""
        return self.count(key) >= min_samples and self.median(key) > baseline_ms * (1.0 + threshold)

    def keys(self) -> list[Hashable]:
        return list(self._windows)

    def totals(self) -> tuple[float, int]:
        """(seconds, tokens) summed over every bucket's window."""
        seconds = sum(sum(w.ms) for w in self._windows.values()) / 1e3
        tokens = sum(sum(w.tokens) for w in self._windows.values())
        return seconds, tokens

    def pooled_median(self) -> float:
        samples = [ms for w in self._windows.values() for ms in w.ms]
        return statistics.median(samples) if samples else math.nan


def flatten_metrics(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a nested metrics dict as ``a/b/c`` names (MLflow's metric names).

    Booleans become 0/1; NaN and non-numbers are dropped (MLflow rejects NaN on some
    backends, and strings are not metrics).
    """
    flat: dict[str, float] = {}
    for name, value in metrics.items():
        full = f"{prefix}{name}"
        if isinstance(value, Mapping):
            flat.update(flatten_metrics(value, full + "/"))
        elif isinstance(value, bool):
            flat[full] = float(value)
        elif isinstance(value, (int, float)) and math.isfinite(value):
            flat[full] = float(value)
    return flat
