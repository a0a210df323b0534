"""The name `kernels` belongs to PyPI's package; this folder is only `flashtune.kernels`.

Python puts the working directory first on ``sys.path`` for ``python -m ...``, so from the
root of a checkout ``import kernels`` finds this folder before the installed distribution
(transformers 5.25 and later import that one whenever it is installed). ``kernels/__init__.py``
calls this when it is imported under the top-level name, and the installed package takes
the name in ``sys.modules``; the import statement returns what is there once it finishes.
"""

import importlib.machinery
import importlib.util
import os
import sys

_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def import_the_installed_kernels() -> None:
    """Loads the `kernels` found on sys.path beyond this checkout into sys.modules["kernels"]."""
    elsewhere = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _CHECKOUT]
    spec = importlib.machinery.PathFinder.find_spec("kernels", elsewhere)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(
            f"No module named 'kernels' ({_CHECKOUT}/kernels is flashtune.kernels, not PyPI's kernels)",
            name="kernels")
    module = importlib.util.module_from_spec(spec)
    sys.modules["kernels"] = module
    spec.loader.exec_module(module)
    sys.modules.pop(__name__, None)  # this helper, imported as kernels._top_level_name, is not part of it
