"""Compiler output goes into the trial's record, never onto the terminal (real Triton compiles)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from flashtune.kernels import SAFE_DEFAULT
from flashtune.objectives import Status, Workload
from flashtune.objectives.compiler_output import captured_output, first_meaningful_line
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.objective import Objective

TESTS_DIR = Path(__file__).parent
WORKLOAD = Workload(1, 2, 1, 33, 47, 32, "float16", True)
EXPECTED_ERROR = "RuntimeError: PassManager::run failed (MLIR pass NVGPUWarpSpecialization failed)"


def _compiling_env() -> dict[str, str]:
    """This environment without the interpreter: triton.compile then really compiles."""
    return {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}


def test_a_real_compile_failure_is_captured_not_printed():
    proc = subprocess.run([sys.executable, str(TESTS_DIR / "compile_failure.py"), "captured"],
                          capture_output=True, text=True, env=_compiling_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == ""  # not one line of the dump reached the terminal
    record = json.loads(proc.stdout)
    assert record["error"] == EXPECTED_ERROR
    # The whole reproducer is kept for the trial's artifacts.
    assert "tt.func public @attention_forward_kernel" in record["text"]
    assert "reproducer generated" in record["text"] and record["text"].count("\n") > 100


def test_the_worker_records_the_output_of_a_failing_compile(capfd):
    env = {"TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])}
    with Objective(hardware=load_spec("h200"), env=env, timeout_s=600, launcher="faults:compile_failure") as obj:
        m = obj.evaluate(SAFE_DEFAULT, WORKLOAD)
    assert m.status is Status.COMPILE_ERROR, m.error
    assert m.error == EXPECTED_ERROR
    assert "tt.func public @attention_forward_kernel" in m.compiler_output
    terminal = capfd.readouterr().err  # the worker's stderr is this process's
    assert "tt.func" not in terminal and "reproducer" not in terminal and "NVGPUWarpSpecialization" not in terminal


def test_fd_level_writes_are_captured_and_the_descriptors_restored(capfd):
    with captured_output() as output:
        os.write(2, b"ptxas fatal   : Unresolved extern function 'f'\n")
        os.write(1, b"from fd 1\n")
        print("from python", file=sys.__stderr__)  # the process's own stream (pytest swaps sys.stderr)
    print("after", file=sys.stderr)
    assert output.text.splitlines() == ["ptxas fatal   : Unresolved extern function 'f'", "from fd 1", "from python"]
    assert capfd.readouterr().err == "after\n"


def test_the_first_meaningful_line():
    assert first_meaningful_line("module {\n  tt.func @k()\n}\nLLVM ERROR: Cannot select: intrinsic\n") == \
        "LLVM ERROR: Cannot select: intrinsic"
    assert first_meaningful_line("\n// -----// IR Dump\nx.py:3:0: error: operand #0 does not dominate this use\n") == \
        "operand #0 does not dominate this use"
    assert first_meaningful_line("  \nsomething odd happened\n") == "something odd happened"
    assert first_meaningful_line("") == ""
