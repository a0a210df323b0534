"""From a checkout's root, `import kernels` is PyPI's package, never this folder.

`python -m ...` puts the working directory first on sys.path, and transformers (5.25 on)
imports PyPI's `kernels` whenever it is installed: CI's `python -m pytest` failed every test
that builds a transformers model until kernels/__init__.py handed the name over.
"""

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]


def _run_in_checkout(*python_args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *python_args], cwd=CHECKOUT, capture_output=True, text=True, timeout=120)


def _installed(distribution: str) -> bool:
    # Not importlib.util.find_spec("kernels"): from the checkout's root that finds this folder.
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(not _installed("kernels"), reason="PyPI's kernels is not installed")
def test_the_installed_kernels_takes_the_name_and_flashtune_kernels_keeps_its_own():
    done = _run_in_checkout("-c", (
        "import sys, kernels, flashtune.kernels as ours; "
        "print(kernels.__file__); print(ours.__file__); print(sorted(m for m in sys.modules if m.startswith('kernels.')))"))
    assert done.returncode == 0, done.stderr
    theirs, ours, helpers = done.stdout.splitlines()
    assert not Path(theirs).is_relative_to(CHECKOUT / "kernels"), theirs
    assert Path(ours) == CHECKOUT / "kernels" / "__init__.py"
    assert "_top_level_name" not in helpers


def test_without_the_installed_kernels_the_import_error_names_this_folder():
    done = _run_in_checkout("-S", "-c", "import kernels")  # -S: no site-packages, so no PyPI kernels
    assert done.returncode == 1
    assert "ModuleNotFoundError: No module named 'kernels'" in done.stderr
    assert "is flashtune.kernels" in done.stderr
