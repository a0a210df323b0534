"""A real headless browser over the real MLflow UI that `flashtune ui` starts.

Debian's chromium driven by Playwright (never a downloaded browser): open the study's view
that `flashtune ui` prints (trials fastest first, metrics as columns, the best on the
charts), then the experiment's runs URL: find the study's parent run by name, open it and
read its best-so-far metric and its child runs. Screenshots land in $FLASHTUNE_ARTIFACTS/ui
(CI keeps them) or the test's folder.
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
#: More trials than MLflow's charts draw by default (10): the charts must hold the best ones.
TRIALS = 16


def read_urls(proc: subprocess.Popen, timeout_s: float) -> tuple[str, str]:
    """The experiment's runs URL and the study's view URL from `flashtune ui`'s stdout (it
    prints them once the server answers)."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    deadline = time.monotonic() + timeout_s
    seen: list[str] = []
    runs_url = ""
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        match = re.search(r"http://127\.0\.0\.1:\d+/#/experiments/\d+/runs\S*", line)
        if match and f"study {STUDY} " in line:
            return runs_url, match.group(0)
        if match:
            runs_url = match.group(0)
    pytest.fail(f"flashtune ui printed no runs and view URLs in {timeout_s} s (rc {proc.poll()}): {seen}")


def artifacts_dir(tmp_path: Path) -> Path:
    """Where the screenshots go: $FLASHTUNE_ARTIFACTS (CI keeps that folder), else the test's."""
    folder = Path(os.environ["FLASHTUNE_ARTIFACTS"]) / "ui" if os.environ.get("FLASHTUNE_ARTIFACTS") else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return folder


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
    trials = client.search_runs([experiment.experiment_id], filter_string=f"tags.role = 'trial' AND tags.study = '{STUDY}'")
    timed = sorted((run.data.metrics["median_ms"], run.info.run_name) for run in trials if "median_ms" in run.data.metrics)
    fastest_first = [name for _, name in timed]
    assert len(fastest_first) > 10, "the charts check needs more timed trials than the charts draw"
    shots = artifacts_dir(tmp_path)

    ui = subprocess.Popen(flashtune_command("ui", "--tracking-uri", stores["tracking_uri"], "--port", "0"),
                          cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        runs_url, view_url = read_urls(ui, timeout_s=300)
        assert f"/#/experiments/{experiment.experiment_id}/runs" in runs_url
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                check_study_view(browser, view_url, fastest_first, shots)
                check_runs_table(browser, runs_url, best_ms, shots)
            finally:
                browser.close()
    finally:
        ui.send_signal(signal.SIGTERM)
        assert ui.wait(timeout=60) == 0
    # `flashtune ui` took its server down with it.
    port = int(re.search(r":(\d+)/", view_url).group(1))
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)


def check_study_view(browser, url: str, fastest_first: list[str], shots: Path) -> None:
    """The study's view: trials fastest first, the metrics and knobs as columns, the best
    10 on the charts and the rest hidden from them."""
    # Wide enough that the grid renders every column (it leaves off-screen ones out).
    page = browser.new_page(viewport={"width": 3200, "height": 1100})
    page.goto(url)
    try:
        page.get_by_role("link", name=fastest_first[0], exact=True).wait_for(timeout=180_000)
        page.get_by_role("columnheader", name="BLOCK_M").first.wait_for(timeout=60_000)
    finally:
        page.screenshot(path=str(shots / "study-view.png"))
    rows = page.locator(".ag-center-cols-container .ag-row, .ag-pinned-left-cols-container .ag-row")
    shown: dict[int, str] = {}
    for row in rows.all():
        names = row.get_by_role("link", name=re.compile(r"^trial \d+$")).all_inner_texts()
        if names:
            shown[int(row.get_attribute("row-index"))] = names[0]
    assert [shown[i] for i in sorted(shown)][: len(fastest_first)] == fastest_first
    headers = set(page.get_by_role("columnheader").all_inner_texts())
    assert {"median_ms", "tflops", "rel_error", "status", "BLOCK_M", "num_warps", "loads"} <= headers, headers

    page.locator("label:has(input[value=CHART])").click()  # the chart view
    chart_title = page.get_by_text("median_ms", exact=True).first
    try:
        chart_title.wait_for(timeout=60_000)
        page.wait_for_timeout(2_000)  # the bars draw after the cards
    finally:
        page.screenshot(path=str(shots / "study-charts.png"))
    # In the chart view each run's row says whether the charts draw it.
    for rank, name in enumerate(fastest_first):
        row = page.get_by_role("row").filter(has=page.get_by_role("link", name=name, exact=True))
        toggle = "Hide run" if rank < 10 else "Unhide run"
        assert row.get_by_text(toggle, exact=True).count() == 1, (rank, name, row.inner_text())
    page.close()


def check_runs_table(browser, url: str, best_ms: float, shots: Path) -> None:
    """The experiment's runs table: the study's parent, its trials as child runs, and the
    parent's page with its best-so-far metric and hardware tags."""
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.goto(url)
    run_link = page.get_by_role("link", name=STUDY, exact=True).first
    try:
        run_link.wait_for(timeout=180_000)  # the UI loads its bundle slowly on a busy machine
    finally:
        page.screenshot(path=str(shots / "runs.png"))

    # The parent's row expands to its trials (child runs), one per trial.
    row = page.get_by_role("row").filter(has=run_link)
    expand = row.get_by_role("gridcell").filter(has=run_link).get_by_role("button").first
    expand.click()
    try:
        page.get_by_role("link", name=f"trial {TRIALS - 1}", exact=True).wait_for(timeout=60_000)
    finally:
        page.screenshot(path=str(shots / "runs-expanded.png"))
    for number in range(TRIALS):
        assert page.get_by_role("link", name=f"trial {number}", exact=True).count() == 1

    # The parent's page: its best-so-far metric, as MLflow shows it, and its tags.
    run_link.click()
    metric_row = page.get_by_role("row").filter(has_text="best_ms").first
    try:
        metric_row.wait_for(timeout=120_000)
    finally:
        page.screenshot(path=str(shots / "run.png"), full_page=True)
    shown = [float(x) for x in re.findall(r"\d+\.\d+(?:e-?\d+)?", metric_row.inner_text())]
    assert any(abs(value - best_ms) <= 1e-3 * best_ms for value in shown), (shown, best_ms)
    body = page.inner_text("body")
    assert "NVIDIA H200" in body and "fingerprint" in body
    page.close()
