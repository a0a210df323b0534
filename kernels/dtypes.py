"""The input dtypes the kernel takes, and whether Triton runs in its CPU interpreter.

One copy of each fact. Torch-free on purpose: the feasibility model and the strategies
read the table without importing torch; torch code maps a name with ``getattr(torch, name)``.
"""

from __future__ import annotations

import os

# Re-exported: declared in the bottom layer (values/inputs.py), where a Workload checks its dtype.
from flashtune.values.inputs import DTYPE_ALIASES as DTYPE_ALIASES
from flashtune.values.inputs import DTYPE_BYTES as DTYPE_BYTES
from flashtune.values.inputs import DTYPES as DTYPES

#: The 16-bit ones: what the Gluon kernel reads (its fp8 configs quantize these themselves).
HALF_DTYPES = ("float16", "bfloat16")


def interpreting() -> bool:
    """Whether ``TRITON_INTERPRET`` is set (Triton's CPU interpreter runs the kernels)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
