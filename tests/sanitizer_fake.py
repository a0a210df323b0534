"""A fake ``compute-sanitizer`` for the CPU tests: a real executable put first on PATH.

``install(folder, report=TEXT, exitcode=N)`` writes ``folder/compute-sanitizer``, a Python
script that appends its arguments as one JSON line to ``folder/calls.jsonl`` (the tests
count runs there), then either prints ``report`` and exits with ``exitcode``, or, with
``run_child=True``, runs the command it was given (the real sanitize child) between the
report's header and an ``ERROR SUMMARY: 0 errors`` line and exits with its exit code, as
the real tool does for a clean run. ``sleep_s`` makes it hang first (a timeout).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

_SCRIPT = '''#!{python}
import json, subprocess, sys, time
args = sys.argv[1:]
with open({calls!r}, "a") as log:
    log.write(json.dumps(args) + "\\n")
time.sleep({sleep_s!r})
if {run_child!r}:
    tool = args[args.index("--tool") + 1]
    target = args[args.index("--print-limit") + 2:]
    print("========= COMPUTE-SANITIZER", flush=True)
    code = subprocess.call(target)
    print("========= ERROR SUMMARY: 0 errors", flush=True)
    sys.exit(code)
tool = args[args.index("--tool") + 1]
if ({unsafe_if!r} and {unsafe_if!r} not in args[-1]) or ({only_tool!r} and tool != {only_tool!r}):
    sys.stdout.write("========= COMPUTE-SANITIZER\\n========= ERROR SUMMARY: 0 errors\\n")
    sys.exit(0)
sys.stdout.write({report!r})
sys.exit({exitcode!r})
'''


def install(folder: Path, *, report: str = "", exitcode: int = 0, run_child: bool = False,
            sleep_s: float = 0.0, unsafe_if: str = "", only_tool: str = "") -> Path:
    """Write the fake into ``folder``; returns its path. With ``unsafe_if``, only a request
    (the child's JSON) holding that text gets ``report``; with ``only_tool``, only that tool's
    runs; the others a clean report."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "compute-sanitizer"
    path.write_text(_SCRIPT.format(python=sys.executable, calls=str(folder / "calls.jsonl"), sleep_s=sleep_s,
                                   run_child=run_child, report=report, exitcode=exitcode,
                                   unsafe_if=unsafe_if, only_tool=only_tool))
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def calls(folder: Path) -> list[list[str]]:
    """The argument lists of every run so far."""
    log = folder / "calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def on_path(monkeypatch, folder: Path) -> None:
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
