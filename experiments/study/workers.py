"""``flashtune tune --workers N``: N worker processes on one study, one GPU each.

The launcher only starts processes and waits: it is not a scheduler. Each worker is the
same ``flashtune tune`` command with ``--worker-index i`` (which seeds its strategy
apart) and, measuring live, ``CUDA_VISIBLE_DEVICES=i`` so it owns GPU ``i`` and starts
its own benchmark worker there. The workers coordinate only through the study's Optuna
storage (``claims.py``); starting the same command by hand on other hosts, with other
``--worker-index`` values, joins the same study.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from types import FrameType


def worker_command(argv: Sequence[str], index: int, objective: str) -> list[str]:
    """The command of worker ``index``: this process's command without ``--workers``."""
    args: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--workers":
            skip = True
            continue
        if arg.startswith("--workers="):
            continue
        args.append(arg)
    # The launcher resolved the objective once: workers must not decide differently.
    return [*args, "--worker-index", str(index), "--objective", objective]


def launch(workers: int, objective: str, argv: Sequence[str] | None = None) -> int:
    """Start ``workers`` processes, forward SIGTERM/SIGINT to them, wait for all.

    Returns:
        0 if every worker succeeded, else the first non-zero exit status.
    """
    argv = list(sys.orig_argv if argv is None else argv)
    argv[0] = sys.executable  # the interpreter running us, whatever the shell called
    procs = []
    for index in range(workers):
        env = dict(os.environ)
        env["FLASHTUNE_WORKER_INDEX"] = str(index)
        if objective == "live":
            env["CUDA_VISIBLE_DEVICES"] = str(index)  # one GPU per worker
        procs.append(subprocess.Popen(worker_command(argv, index, objective), env=env))
    print(f"flashtune tune: started {workers} workers (pids {', '.join(str(p.pid) for p in procs)})",
          file=sys.stderr)

    def forward(signum: int, frame: FrameType | None) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    saved = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        codes = [proc.wait() for proc in procs]
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    failed = [c for c in codes if c != 0]
    return (128 - failed[0] if failed[0] < 0 else failed[0]) if failed else 0
