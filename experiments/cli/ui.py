"""``flashtune ui``: the MLflow UI on 127.0.0.1 over the store ``flashtune tune`` used.

Prints the runs table URL of each flashtune experiment (one per GPU model),
``http://127.0.0.1:PORT/#/experiments/ID/runs``: a fresh browser otherwise lands on
MLflow's GenAI overview page, where a study's runs are not shown (docs/reference.md).
Under it, one URL per study opens the study's saved view: its trials fastest first, with
their metrics and knobs as columns and the best 10 on the charts.
The server binds loopback only and keeps MLflow's host checks; Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType
from typing import IO

from flashtune.experiments.tracking.tracker import (
    DEFAULT_TRACKING_URI,
    check_tracking_uri,
    mlflow_client,
    sqlite_path,
    uri_scheme,
)
from flashtune.experiments.tracking.ui_view import runs_url_path, saved_studies, view_url_path

#: MLflow's server took about 20 s to answer on the reference machine; CI is slower.
_READY_TIMEOUT_S = 180.0


def add_parser(subparsers: argparse._SubParsersAction) -> None:

    parser = subparsers.add_parser("ui", help="start the MLflow UI on 127.0.0.1 for a study store",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI,
                        help=f"the store `flashtune tune` wrote (default: {DEFAULT_TRACKING_URI})")
    parser.add_argument("--port", type=int, default=5000, help="port on 127.0.0.1 (default: 5000; 0: any free)")
    parser.set_defaults(func=run_ui)


def run_ui(args: argparse.Namespace) -> int:

    uri = args.tracking_uri
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port {args.port}: use 0..65535")
    if uri_scheme(uri) in ("", "file"):
        # MLflow 3 serves a folder store only in "maintenance mode", with a page of text.
        raise ValueError(f"--tracking-uri {uri!r}: the UI needs a database URI ({DEFAULT_TRACKING_URI}, "
                         "postgresql://...) or a server (http://...), not a folder")
    db = sqlite_path(uri)
    if db is not None and not db.exists():
        # MLflow would create an empty store here and show nothing: say what is wrong.
        raise ValueError(f"tracking URI {uri!r}: {db} does not exist; run `flashtune tune` first (same directory)")
    check_tracking_uri(uri)
    experiments = flashtune_experiments(uri)
    if uri.startswith(("http://", "https://")):
        print_links(uri.rstrip("/"), experiments)
        print("this tracking URI is a server already: open it in a browser", file=sys.stderr)
        return 0
    port = args.port or free_port()
    if not port_free(port):
        raise ValueError(f"port {port} on 127.0.0.1 is in use (another `flashtune ui`?); pass --port 0 for a free one")
    log = tempfile.NamedTemporaryFile(prefix="flashtune-ui-", suffix=".log", delete=False)  # the server writes it
    proc = start_server(uri, port, log)
    stop = _Stopper(proc)
    previous = signal.signal(signal.SIGTERM, stop.on_signal)
    try:
        base = f"http://127.0.0.1:{port}"
        try:
            wait_ready(base, proc)
        except RuntimeError as exc:
            # One line for the user, as for bad input: the server's last words and its log.
            raise ValueError(f"{exc}: {_last_line(log.name)} (server log: {log.name})") from None
        if not experiments:
            print(f"MLflow UI: {base} (no flashtune study in this store yet)", flush=True)
        print_links(base, experiments)
        print(f"Ctrl-C stops the UI (server log: {log.name}).", file=sys.stderr, flush=True)
        code = proc.wait()  # until Ctrl-C or SIGTERM (then KeyboardInterrupt below)
        print(f"mlflow ui exited with code {code}", file=sys.stderr)
        return code or 1
    except KeyboardInterrupt:
        Path(log.name).unlink(missing_ok=True)  # stopped as asked: nothing in it to read
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop.stop()
        log.close()


def _last_line(path: str) -> str:
    """The last non-empty line the server wrote (why it stopped, most often)."""
    lines = [line for line in Path(path).read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else "it printed nothing"


def flashtune_experiments(uri: str) -> list[tuple[str, str, list[str]]]:
    """(name, id, studies with a saved view) of the store's flashtune experiments, most
    recently updated first."""

    client = mlflow_client(uri)
    found = [e for e in client.search_experiments(max_results=1000) if e.name.startswith("flashtune/")]
    found.sort(key=lambda e: e.last_update_time or 0, reverse=True)
    return [(e.name, e.experiment_id, saved_studies(e.tags)) for e in found]


def print_links(base: str, experiments: list[tuple[str, str, list[str]]]) -> None:
    """Each experiment's runs table, then each of its studies' views (fastest trials first)."""
    for name, eid, studies in experiments:
        print(f"{name}: {base}{runs_url_path(eid)}", flush=True)
        for study in studies:
            print(f"  study {study} (fastest first): {base}{view_url_path(eid, study)}", flush=True)


def port_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:``port`` (checked by binding it for a moment)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(uri: str, port: int, log: IO[bytes]) -> subprocess.Popen[bytes]:
    """``mlflow ui`` on 127.0.0.1:``port`` in its own process group (stopped as a whole),
    its output into ``log``: MLflow's registry notice, uvicorn's request lines and
    Starlette's warnings would otherwise bury the URLs a user came for."""
    # One worker: a single person's UI; MLflow's default four start slowly on a small
    # machine, and under load uvicorn's supervisor was seen killing them while they started.
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
               "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": os.environ.get("MLFLOW_DISABLE_TELEMETRY", "true")}
    return subprocess.Popen(command, start_new_session=True, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, env=env)


def wait_ready(base: str, proc: subprocess.Popen[bytes], timeout_s: float = _READY_TIMEOUT_S) -> None:
    """Poll ``/health`` until the server answers; raise if it exits or never answers."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow ui exited with code {proc.returncode} before answering on {base}")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"mlflow ui did not answer on {base} within {timeout_s:.0f} s")


class _Stopper:
    """Stops the server's process group once, on SIGTERM or on the way out."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.stopped = False

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)  # the group we started: mlflow and its workers
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
