"""A hash of the kernel's source, for caches and stores that must not outlive the kernel.

A tuned config is only as good as the kernel it was timed on: a store or a prior keyed
without the kernel source silently serves configs tuned for code that no longer exists
(docs/reference.md, "What goes wrong in tuners"). Pure Python: reads the file, imports nothing.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

#: The files whose bytes decide the hash: the ``@triton.jit`` kernels, their launchers
#: (which decide the fp8 quantization, the grid and the decode splits), and the knobs'
#: declarations with their translator (which decide the kernel variant, constexprs and
#: compile options a config launches with). The one-loop kernel joined with them: it had
#: been left out, so a change to it kept serving entries timed on the code before.
KERNEL_SOURCES = tuple(Path(__file__).with_name(name)
                       for name in ("_flash_fwd.py", "_flash_fwd_lean.py", "lean.py", "attention.py",
                                    "_flash_decode.py", "decode.py", "_flash_fwd_oneloop.py", "knobs.py",
                                    "launch_plan.py", "_flash_fwd_gluon.py", "gluon.py"))


@functools.lru_cache(maxsize=1)
def kernel_source_hash() -> str:
    """First 16 hex digits of the SHA-256 of the kernel's and launcher's source bytes.

    Cached for the life of the process: the kernel cannot change under a running
    process without a re-import, which a cache key should not try to follow.
    """
    digest = hashlib.sha256()
    for path in KERNEL_SOURCES:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


#: The packed ops' kernels and launchers, by store class: the hash their store entries carry,
#: apart from the dense kernels' (a change to the varlen kernel makes the varlen entries stale,
#: and leaves the dense entries served; a change to a dense kernel leaves these served). The
#: varlen kernel runs the prefill kernel's key loop (``_flash_fwd._attend_tiles``); the paged op
#: launches the dense decode kernel's combine and reads its default's rules.
PACKED_SOURCES = {
    "varlen": tuple(Path(__file__).with_name(name) for name in ("_flash_fwd_varlen.py", "varlen.py", "_flash_fwd.py")),
    "paged": tuple(Path(__file__).with_name(name)
                   for name in ("_flash_decode_paged.py", "paged.py", "_flash_decode.py", "decode.py")),
}


@functools.lru_cache(maxsize=None)
def packed_source_hash(kernel: str) -> str:
    """First 16 hex digits of the SHA-256 of a packed kernel's (``varlen``, ``paged``) and
    its launcher's source bytes, with the kernel's name (cached as :func:`kernel_source_hash`).

    Raises:
        KeyError: not a packed kernel.
    """
    digest = hashlib.sha256(kernel.encode())
    for path in PACKED_SOURCES[kernel]:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
