"""A hash of the kernel's source, for caches and stores that must not outlive the kernel.

A tuned config is only as good as the kernel it was timed on: a store or a prior keyed
without the kernel source silently serves configs tuned for code that no longer exists
(REFERENCE.md, "What goes wrong in tuners"). Pure Python: reads the file, imports nothing.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

#: The file whose bytes decide the hash: the ``@triton.jit`` kernels themselves.
KERNEL_SOURCE = Path(__file__).with_name("_flash_fwd.py")


@functools.lru_cache(maxsize=1)
def kernel_source_hash() -> str:
    """First 16 hex digits of the SHA-256 of ``kernels/_flash_fwd.py``'s bytes.

    Cached for the life of the process: the kernel cannot change under a running
    process without a re-import, which a cache key should not try to follow.
    """
    return hashlib.sha256(KERNEL_SOURCE.read_bytes()).hexdigest()[:16]
