"""The input dtypes the kernel takes, and whether Triton runs in its CPU interpreter.

One copy of each fact. Torch-free on purpose: the feasibility model and the strategies
read the table without importing torch; torch code maps a name with ``getattr(torch, name)``.
"""

from __future__ import annotations

import os

#: Supported input dtypes by name, with their element size in bytes.
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
#: The names, in the order error messages list them.
DTYPES = tuple(DTYPE_BYTES)
#: The 16-bit ones: what the Gluon kernel reads (its fp8 configs quantize these themselves).
HALF_DTYPES = ("float16", "bfloat16")
#: Short names accepted where a user types a dtype (``--workload 1,8,1024,64,fp16``).
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "f16": "float16",
                 "fp32": "float32", "float": "float32", "f32": "float32"}


def interpreting() -> bool:
    """Whether ``TRITON_INTERPRET`` is set (Triton's CPU interpreter runs the kernels)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
