"""Launchers with planted faults, loaded by the benchmark worker in the fault tests.

Each has the real launcher's signature; the worker imports it by ``module:function``.
"""

import os
import signal
import time

from flashtune.kernels.attention import launch


def hang(q, k, v, out, *, causal, scale, config):
    time.sleep(3600)


def crash(q, k, v, out, *, causal, scale, config):
    # What an illegal address does to a process: it dies without answering.
    os.kill(os.getpid(), signal.SIGSEGV)


def wrong(q, k, v, out, *, causal, scale, config):
    # Fast and wrong: skips the last key tile (as a bad tail mask would).
    launch(q, k[:, :, :-5], v[:, :, :-5], out, causal=causal, scale=scale, config=config)


def half_written(q, k, v, out, *, causal, scale, config):
    launch(q[:, :, :-3], k, v, out[:, :, :-3], causal=causal, scale=scale, config=config)


def out_of_resources(q, k, v, out, *, causal, scale, config):
    from triton.runtime.errors import OutOfResources

    raise OutOfResources(300000, 232448, "shared memory")


def compile_failure(q, k, v, out, *, causal, scale, config):
    # A real compile failure whose C++ output reaches this process's file descriptor 2: a
    # child compiles for sm_90 (no GPU needed) and inherits the descriptors, as ptxas does.
    import subprocess
    import sys
    from pathlib import Path

    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    script = Path(__file__).with_name("compile_failure.py")
    if subprocess.run([sys.executable, str(script), "raw"], env=env).returncode != 0:
        raise RuntimeError("PassManager::run failed")  # what triton.compile raises in-process
