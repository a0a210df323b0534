"""sanitize_probe.py's child: the sanitize child, its descriptor scratch zeroed or not."""
import sys

import torch
import triton

from flashtune.kernels import launch_support
from flashtune.objectives import _sanitize_child

if sys.argv[1] == "zero":
    def zeroed(size, alignment, stream):
        return torch.zeros(size, dtype=torch.int8, device="cuda")
    launch_support._descriptor_scratch = zeroed
    triton.set_allocator(zeroed)
sys.exit(_sanitize_child.main(sys.argv[2:]))
