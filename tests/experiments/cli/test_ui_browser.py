"""A real headless browser over the real MLflow UI that `flashtune ui` starts.

Debian's chromium driven by Playwright (never a downloaded browser): open the runs URL
that `flashtune ui` prints, find the study's parent run by name, open it and read its
best-so-far metric and its child runs. Screenshots land in the test's folder.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow import MlflowClient
from study_support import cli_env, flashtune_command, run_cli, tune_args

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
STUDY = "browser-study"
TRIALS = 6


def read_url(proc: subprocess.Popen, timeout_s: float) -> str:
    """The runs URL from `flashtune ui`'s stdout (it prints it once the server answers)."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    deadline = time.monotonic() + timeout_s
    seen = []
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        match = re.search(r"http://127\.0\.0\.1:\d+/#/experiments/\d+/runs", line)
        if match:
            return match.group(0)
    pytest.fail(f"flashtune ui printed no runs URL in {timeout_s} s (rc {proc.poll()}): {seen}")


def test_runs_and_metrics_in_the_mlflow_ui(replay_dir, stores, tmp_path) -> None:
    if not Path(CHROMIUM).exists():
        message = "Debian's chromium is not installed (.ci/setup-browser.sh installs it)"
        if os.environ.get("FLASHTUNE_REQUIRE_SYSTEM_DEPS"):
            pytest.fail(message)  # CI: a missing browser is a failure, not a skip
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    made = run_cli(*tune_args(stores, replay_dir, "--study-name", STUDY, "--trials", str(TRIALS)), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    client = MlflowClient(tracking_uri=stores["tracking_uri"])
    experiment = client.get_experiment_by_name("flashtune/NVIDIA H200")
    parent = client.search_runs([experiment.experiment_id],
                                filter_string=f"tags.role = 'study' AND tags.study = '{STUDY}'")[0]
    best_ms = parent.data.metrics["best_ms"]

    ui = subprocess.Popen(flashtune_command("ui", "--tracking-uri", stores["tracking_uri"], "--port", "0"),
                          cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = read_url(ui, timeout_s=300)
        assert url.endswith(f"/#/experiments/{experiment.experiment_id}/runs")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1600, "height": 1000})
                page.goto(url)
                run_link = page.get_by_role("link", name=STUDY, exact=True).first
                try:
                    run_link.wait_for(timeout=180_000)  # the UI loads its bundle slowly on a busy machine
                finally:
                    page.screenshot(path=str(tmp_path / "runs.png"))

                # The parent's row expands to its trials (child runs), one per trial.
                row = page.get_by_role("row").filter(has=run_link)
                expand = row.get_by_role("gridcell").filter(has=run_link).get_by_role("button").first
                expand.click()
                try:
                    page.get_by_role("link", name=f"trial {TRIALS - 1}", exact=True).wait_for(timeout=60_000)
                finally:
                    page.screenshot(path=str(tmp_path / "runs-expanded.png"))
                for number in range(TRIALS):
                    assert page.get_by_role("link", name=f"trial {number}", exact=True).count() == 1

                # The parent's page: its best-so-far metric, as MLflow shows it, and its tags.
                run_link.click()
                metric_row = page.get_by_role("row").filter(has_text="best_ms").first
                try:
                    metric_row.wait_for(timeout=120_000)
                finally:
                    page.screenshot(path=str(tmp_path / "run.png"), full_page=True)
                shown = [float(x) for x in re.findall(r"\d+\.\d+(?:e-?\d+)?", metric_row.inner_text())]
                assert any(abs(value - best_ms) <= 1e-3 * best_ms for value in shown), (shown, best_ms)
                body = page.inner_text("body")
                assert "NVIDIA H200" in body and "fingerprint" in body
            finally:
                browser.close()
    finally:
        ui.send_signal(signal.SIGTERM)
        assert ui.wait(timeout=60) == 0
    # `flashtune ui` took its server down with it.
    port = int(re.search(r":(\d+)/", url).group(1))
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
