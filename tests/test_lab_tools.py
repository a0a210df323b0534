"""The scripts outside the package still start: the lab's tools (docs/lab/tools/: one-investigation
benchmarks the log cites) and the GPU runner's table scripts (docs/gpu/), each run as
``python docs/.../NAME.py``: each parses its arguments and prints its help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
#: Every script of the lab's tools (a module with no ``__main__`` is a helper the scripts import).
TOOLS = sorted(p for p in (DOCS / "lab" / "tools").glob("*.py") if '__name__ == "__main__"' in p.read_text())
HELPERS = sorted(p for p in (DOCS / "lab" / "tools").glob("*.py") if p not in TOOLS)
#: The GPU runner's scripts that left the package (docs/gpu/record-gpu.sh, retime-gluon.sh, sanitize.sh run them).
GPU_SCRIPTS = [DOCS / "gpu" / "retimed_tables.py", DOCS / "gpu" / "sanitize_tables.py"]


def test_the_lab_has_tools() -> None:
    assert len(TOOLS) >= 10
    assert [p.stem for p in HELPERS] == ["best_configs"]


@pytest.mark.parametrize("tool", TOOLS + GPU_SCRIPTS, ids=lambda p: p.stem)
def test_a_script_starts(tool) -> None:
    # From another folder: a script finds its neighbours (best_configs, sass_count) by its own path.
    done = subprocess.run([sys.executable, str(tool), "--help"], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parent)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage" in done.stdout.lower()
