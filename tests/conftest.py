"""Shared fixtures. Without a GPU the kernels run in Triton's CPU interpreter.

TRITON_INTERPRET must be set before any @triton.jit function is defined, so it is set
here, before test modules import flashtune.kernels.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest


@pytest.fixture
def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
