"""Shared fixtures. Without a GPU the kernels run in Triton's CPU interpreter.

TRITON_INTERPRET must be set before any @triton.jit function is defined, so it is set
here, before test modules import flashtune.kernels.
"""

import os
import sys
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

# The lab's tools and the GPU runner's scripts live outside the package (docs/lab/tools/,
# docs/gpu/), run as ``python docs/.../NAME.py``; their tests import them by name.
_ROOT = Path(__file__).resolve().parents[1]
for _folder in (_ROOT / "docs" / "lab" / "tools", _ROOT / "docs" / "gpu"):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))


@pytest.fixture
def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
