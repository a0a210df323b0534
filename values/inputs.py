"""What the kernel takes as input, declared once, below the types that check it.

:class:`~flashtune.values.types.Workload` validates its dtype and parses a head dim against
these; the kernels import them from here (kernels/dtypes.py, kernels/space.py). Pure data.
"""

from __future__ import annotations

#: Supported input dtypes by name, with their element size in bytes.
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
#: The names, in the order error messages list them.
DTYPES = tuple(DTYPE_BYTES)
#: Short names accepted where a user types a dtype (``--workload 1,8,1024,64,fp16``).
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "f16": "float16",
                 "fp32": "float32", "float": "float32", "f32": "float32"}

#: The head dims the kernel compiles for (``tl.arange`` over the head dim needs a power of
#: two). Here, torch-free and below the kernels, so that the CLI's workload parser checks
#: them too. kernels/attention.py keeps an equal tuple (a test holds them equal) rather than
#: importing this one, because its bytes are part of the kernel source hash that keys every store.
SUPPORTED_HEAD_DIMS = (32, 64, 128, 256)
