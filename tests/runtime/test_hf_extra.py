"""transformers is an extra of the transformers integration, and a missing one says which."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_transformers_is_a_declared_extra_and_the_readme_says_so() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(re.match(r"transformers\b", req) for req in extras["hf"]), extras["hf"]
    readme = (ROOT / "README.md").read_text()
    serving = readme[readme.index("## Serving tuned configs"):]
    serving = serving[: serving.index("\n## ", 1)]
    # Said where the example is, before its code.
    before_example = serving[: serving.index("from flashtune.runtime.hf_attention import register")]
    assert 'pip install -e ".[hf]"' in before_example


def test_register_without_transformers_names_the_extra(monkeypatch) -> None:
    from flashtune.runtime.hf_attention import register

    monkeypatch.setitem(sys.modules, "transformers", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'flashtune\[hf\]'"):
        register()
