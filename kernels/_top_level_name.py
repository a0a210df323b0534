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
import types

_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def import_the_installed_kernels() -> None:
    """Loads the `kernels` found on sys.path beyond this checkout into sys.modules["kernels"];
    without one there, an empty module that says it is not installed (``_absent``)."""
    elsewhere = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _CHECKOUT]
    spec = importlib.machinery.PathFinder.find_spec("kernels", elsewhere)
    if spec is None or spec.loader is None:
        sys.modules["kernels"] = _absent()
    else:
        module = importlib.util.module_from_spec(spec)
        sys.modules["kernels"] = module
        spec.loader.exec_module(module)
    sys.modules.pop(__name__, None)  # this helper, imported as kernels._top_level_name, is not part of it


def _absent() -> types.ModuleType:
    """What ``import kernels`` gives when PyPI's package is not installed: an empty module with
    no ``__file__`` and no ``__version__``, as a namespace folder shadowing the name would be.

    Not an ImportError: transformers before 5.25 (the H200 image's 5.17) finds a spec for
    `kernels` here (this folder), reads no installed version and imports the name to look for
    one, without a try; it counts an import with neither attribute as "not installed" and goes on.
    Raising there broke every `from transformers import ...` run from a checkout's root.
    """
    module = types.ModuleType("kernels", "PyPI's kernels is not installed; this checkout's kernels/ is flashtune.kernels.")
    module.__file__ = None
    module.__path__ = []

    def __getattr__(name: str):
        raise AttributeError(f"module 'kernels' has no attribute {name!r}: PyPI's kernels is not installed "
                             f"({_CHECKOUT}/kernels is flashtune.kernels)")

    module.__getattr__ = __getattr__
    return module
