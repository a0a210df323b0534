"""The values that flow between objectives, strategies and experiments, and the standard suite.

The types live in the bottom layer (values/types.py), where the search strategies read them
without importing the objectives; this module keeps the suite of workloads studies default to.
"""

from __future__ import annotations

# Re-exported: `flashtune.objectives.types` was their home, and the package and users import them from here.
from flashtune.values.inputs import DTYPES as DTYPES
from flashtune.values.types import Measurement as Measurement
from flashtune.values.types import Status as Status
from flashtune.values.types import Workload

#: The standard workload suite (bf16 forward): `flashtune sweep --suite`, the default study workloads.
SUITE: tuple[Workload, ...] = (
    Workload(4, 32, 32, 4096, 4096, 128, "bfloat16", False),
    Workload(4, 32, 32, 4096, 4096, 128, "bfloat16", True),
    Workload(16, 16, 16, 1024, 1024, 64, "bfloat16", False),
    Workload(1, 32, 32, 16384, 16384, 128, "bfloat16", True),
    Workload(8, 16, 16, 2048, 2048, 64, "bfloat16", True),
    Workload(2, 16, 16, 8192, 8192, 256, "bfloat16", False),
    Workload(4, 32, 8, 4096, 4096, 128, "bfloat16", True),
)
