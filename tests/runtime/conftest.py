"""Fixtures of the runtime tests: stores in tmp dirs, a simulated H200, a recording launcher."""

from __future__ import annotations

from pathlib import Path

import pytest
from runtime_helpers import Recorder

from flashtune.objectives.hardware import HardwareSpec, load_spec


@pytest.fixture
def h200() -> HardwareSpec:
    return load_spec("h200")


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "configs.json"


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    """Replace the launcher the dispatcher calls (no kernel runs)."""
    import flashtune.runtime.dispatching.dispatch as dispatch

    rec = Recorder()
    monkeypatch.setattr(dispatch, "_launcher", rec)
    monkeypatch.setattr(dispatch, "_prepare", lambda *a, **kw: None)  # every call reaches the recorder
    return rec


@pytest.fixture(autouse=True)
def isolated_default_store(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never read or write the user's real store: a fresh default dispatcher on a tmp store."""
    import flashtune.runtime.dispatching.dispatch as dispatch

    monkeypatch.setenv("FLASHTUNE_STORE", str(tmp_path_factory.mktemp("default-store") / "configs.json"))
    monkeypatch.setattr(dispatch, "_DEFAULT", None)
