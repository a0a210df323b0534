"""The online tuner's knobs, validated on construction (messages name the field)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class OnlineOptions:
    """Knobs of the online tuner; validated on construction.

    Attributes:
        window: samples in each bucket's sliding window.
        min_samples: samples before a baseline is taken or degradation is judged.
        degradation_threshold: relative slowdown of the window's median over the
            baseline that triggers a re-tune.
        min_gain: relative speed-up a candidate needs in the benchmark to be tried live.
        rollback_tolerance: relative slowdown, live, over the incumbent's pre-swap median
            that rolls a candidate back.
        probation_samples: live samples that decide a candidate's fate.
        sample_every: time one call in this many outside probation.
        max_candidates: candidates measured per re-tune.
        overhead_cap: tuning time as a fraction of time since start (0.05 = 5 %).
        cooldown_s: minimum seconds between two re-tunes of one bucket.
        initial_cost_s: estimated cost of one benchmark before any was measured.
        metrics_every_s: seconds between metrics callbacks.
        persist: write kept configs to the dispatcher's store (source ``online``).
    """

    window: int = 64
    min_samples: int = 16
    degradation_threshold: float = 0.15
    min_gain: float = 0.03
    rollback_tolerance: float = 0.05
    probation_samples: int = 16
    sample_every: int = 8
    max_candidates: int = 6
    overhead_cap: float = 0.05
    cooldown_s: float = 60.0
    initial_cost_s: float = 2.0
    metrics_every_s: float = 10.0
    persist: bool = False

    def __post_init__(self) -> None:
        for name in ("window", "min_samples", "probation_samples", "sample_every", "max_candidates"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"OnlineOptions.{name} must be a positive int, got {value!r}")
        for name in ("degradation_threshold", "min_gain", "rollback_tolerance", "cooldown_s", "initial_cost_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
                raise ValueError(f"OnlineOptions.{name} must be a finite number >= 0, got {value!r}")
        if not isinstance(self.overhead_cap, (int, float)) or not 0 <= self.overhead_cap < 1:
            raise ValueError(f"OnlineOptions.overhead_cap must be in [0, 1), got {self.overhead_cap!r}")
        if not isinstance(self.metrics_every_s, (int, float)) or not self.metrics_every_s > 0:
            raise ValueError(f"OnlineOptions.metrics_every_s must be a positive number, got {self.metrics_every_s!r}")
        if self.min_samples > self.window or self.probation_samples > self.window:
            raise ValueError(
                f"OnlineOptions.min_samples ({self.min_samples}) and probation_samples "
                f"({self.probation_samples}) must not exceed window ({self.window})"
            )
        if not isinstance(self.persist, bool):
            raise ValueError(f"OnlineOptions.persist must be a bool, got {self.persist!r}")
