"""Entry point of the benchmark worker process: JSON requests in, JSON measurements out.

Protocol (one JSON object per line): the worker first writes ``{"hello": spec}`` with
its HardwareSpec (or null on a CPU), then answers each request
``{"config": {...}, "workload": {...}, "seed": int, "launcher": str, "tolerance": float|null, "fp8_tolerance": float|null}``
with a ``Measurement.to_dict()``. A ContextLost error is answered, then the process exits:
its CUDA context cannot be trusted any more.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO

from flashtune.kernels.config import Config
from flashtune.objectives.hardware import HardwareSpec
from flashtune.objectives.types import Measurement, Status, Workload


def main() -> None:
    # Keep the protocol channel private: anything else writing to fd 1 (Triton, ptxas,
    # print) goes to stderr instead of corrupting the JSON stream.
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    # After fd 1 is private: importing torch and Triton may print (and must not corrupt it).
    import torch

    from flashtune.objectives.bench import ContextLost, measure  # imports Triton: after fd 1 is private

    spec = HardwareSpec.from_device().to_dict() if torch.cuda.is_available() else None
    _send(channel, {"hello": spec})

    for line in sys.stdin:
        request = json.loads(line)
        config = Config.from_dict(request["config"])
        workload = Workload.from_dict(request["workload"])
        try:
            result = measure(
                config, workload,
                seed=int(request.get("seed", 0)),
                launcher=request.get("launcher") or "flashtune.kernels.attention:launch",
                tolerance=request.get("tolerance"),
                fp8_tolerance=request.get("fp8_tolerance"),
            )
        except ContextLost as exc:
            crashed = Measurement.failure(config, workload, Status.CRASHED, str(exc))
            _send(channel, {**crashed.to_dict(), "_exiting": True})
            os._exit(3)
        except Exception as exc:  # anything unexpected is a crash of this trial
            result = Measurement.failure(config, workload, Status.CRASHED, f"{type(exc).__name__}: {exc}")
        _send(channel, result.to_dict())


def _send(channel: TextIO, message: dict[str, Any]) -> None:
    """Write one protocol line; if the parent is gone (killed, ``kill -9`` included), exit
    quietly: nobody reads the answer, and a BrokenPipeError traceback would only alarm."""
    try:
        channel.write(json.dumps(message) + "\n")
        channel.flush()
    except (BrokenPipeError, ConnectionResetError):
        os._exit(0)  # not sys.exit: the interpreter's exit would flush the dead pipe again


if __name__ == "__main__":
    main()
