"""Objectives: hardware specs, feasibility, and measuring a config (live or replayed).

Only pure-data types are imported here; the live objective (torch, subprocesses) is in
``flashtune.objectives.objective`` so that strategies and stores load without torch.
"""

from flashtune.objectives.hardware import HardwareSpec, known_specs, load_spec
from flashtune.objectives.types import SUITE, Measurement, Status, Workload

__all__ = ["SUITE", "HardwareSpec", "Measurement", "Status", "Workload", "known_specs", "load_spec"]
