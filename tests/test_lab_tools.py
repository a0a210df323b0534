"""The lab's scripts outside the package (docs/lab/tools/: one-investigation benchmarks the log
cites) still start: each parses its arguments and prints its help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = sorted((Path(__file__).resolve().parents[1] / "docs" / "lab" / "tools").glob("*.py"))


def test_the_lab_has_tools() -> None:
    assert TOOLS


@pytest.mark.parametrize("tool", TOOLS, ids=lambda p: p.stem)
def test_a_lab_tool_starts(tool) -> None:
    done = subprocess.run([sys.executable, str(tool), "--help"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage" in done.stdout.lower()
