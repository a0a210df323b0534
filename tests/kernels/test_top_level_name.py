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


def test_without_the_installed_kernels_the_name_reads_as_not_installed():
    # -S: no site-packages, so no PyPI kernels. transformers before 5.25 (the H200 image's 5.17)
    # imports the name to look for a version, without a try: an ImportError there broke every
    # `from transformers import ...` from the checkout's root; an import with neither __file__ nor
    # __version__ it counts as not installed.
    done = _run_in_checkout("-S", "-c", (
        "import kernels; print(kernels.__file__, getattr(kernels, '__version__', 'N/A'))\n"
        "try:\n    from kernels import get_kernel\nexcept ImportError as e:\n    print('ImportError')\n"
        "try:\n    kernels.get_kernel\nexcept AttributeError as e:\n    print(e)"))
    assert done.returncode == 0, done.stderr
    version_line, import_line, attribute_line = done.stdout.splitlines()
    assert version_line == "None N/A"
    assert import_line == "ImportError"
    assert "PyPI's kernels is not installed" in attribute_line and "is flashtune.kernels" in attribute_line
