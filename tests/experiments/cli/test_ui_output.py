"""`flashtune ui` prints its URLs, not the MLflow server's chatter; a folder store is one line."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
from study_support import cli_env, flashtune_command

from flashtune.experiments.cli.main import main


def test_ui_refuses_a_folder_store_in_one_line(tmp_path, capsys) -> None:
    (tmp_path / "mlruns").mkdir()
    assert main(["ui", "--tracking-uri", str(tmp_path / "mlruns")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs a database URI" in err and "maintenance" not in err, err


@pytest.mark.slow  # starts MLflow's server: ~30 s on 2 cores
def test_ui_prints_its_urls_before_anything_of_the_server(stores, tmp_path) -> None:
    ui = subprocess.Popen(flashtune_command("ui", "--tracking-uri", stores["tracking_uri"], "--port", "0"),
                          cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 300
        for line in ui.stdout:  # stdout and stderr in the order they were written
            seen.append(line)
            if line.startswith("Ctrl-C stops the UI") or time.monotonic() > deadline:
                break
    finally:
        ui.send_signal(signal.SIGTERM)
        ui.wait(timeout=60)
    assert seen and seen[0].startswith("MLflow UI: http://127.0.0.1:"), seen
    assert seen[-1].startswith("Ctrl-C stops the UI (server log: "), seen
    assert len(seen) == 2, seen  # no registry notice, uvicorn line or Starlette warning
