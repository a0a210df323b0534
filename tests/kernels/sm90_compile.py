"""Compile configs for the H200's target (sm90) on this CPU box, in a child process.

The suite imports the kernels under Triton's interpreter (tests/conftest.py), where nothing
compiles; a child without ``TRITON_INTERPRET`` and without a visible GPU compiles through
``objectives.aot`` (the stand-in driver names sm90) and reports what each config uses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

_CHILD = """
import json, sys
from flashtune.kernels.space import validate_config
from flashtune.objectives.aot import compiled_resources
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.types import Workload
out = []
for workload, knobs in json.load(sys.stdin):
    r = compiled_resources(validate_config(knobs), Workload.parse(workload), load_spec("h200"))
    out.append([r.registers, r.spills, r.shared_bytes])
print(json.dumps(out))
"""


def compiled_for_sm90(cases: Sequence[tuple[str, Mapping[str, Any]]], timeout: float = 900) -> list[list[int]]:
    """[registers, spilled words, shared bytes] of each (workload text, knobs) case, compiled."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps([[w, dict(k)] for w, k in cases]),
                          capture_output=True, text=True, env=env, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
