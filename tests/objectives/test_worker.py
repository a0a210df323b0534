"""The benchmark worker survives planted hangs, crashes and wrong results (real processes)."""

import os
from pathlib import Path

import pytest

from flashtune.kernels import SAFE_DEFAULT
from flashtune.objectives import Status, Workload
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.objective import Objective

WORKLOAD = Workload(1, 2, 1, 33, 47, 32, "float16", True)
TESTS_DIR = str(Path(__file__).parent)


def _objective(**kw) -> Objective:
    env = {"TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join([TESTS_DIR, os.environ.get("PYTHONPATH", "")])}
    return Objective(hardware=load_spec("h200"), env=env, **kw)


@pytest.mark.slow
def test_each_fault_costs_one_trial_and_the_next_config_is_measured():
    # A generous budget for real trials (a loaded CI box runs the interpreter slowly), a
    # short one only while the planted hang runs.
    with _objective(timeout_s=300) as obj:
        assert obj.evaluate(SAFE_DEFAULT, WORKLOAD).status is Status.OK
        for launcher, expected in [
            ("faults:hang", Status.TIMEOUT),
            ("faults:crash", Status.CRASHED),
            ("faults:wrong", Status.WRONG_RESULT),
            ("faults:half_written", Status.WRONG_RESULT),
            ("faults:out_of_resources", Status.OUT_OF_RESOURCES),
        ]:
            obj.worker.launcher = launcher
            obj.worker.timeout_s = 10 if launcher == "faults:hang" else 300
            m = obj.evaluate(SAFE_DEFAULT, WORKLOAD)
            assert m.status is expected, (launcher, m.error)
            assert m.median_ms == float("inf") and m.tflops == 0.0
            obj.worker.launcher, obj.worker.timeout_s = None, 300
            after = obj.evaluate(SAFE_DEFAULT, WORKLOAD)
            assert after.status is Status.OK, (launcher, after.error)
            assert after.rel_error < 5e-3
        # hang and crash each cost one restart; the others kept the process.
        assert obj.worker.restarts == 2


def test_static_model_rejects_without_compiling_and_bad_configs_are_values():
    with _objective(timeout_s=20) as obj:
        big = SAFE_DEFAULT.replace(BLOCK_M=256, BLOCK_N=128, num_stages=5)
        m = obj.evaluate(big, Workload(1, 1, 1, 64, 64, 256, "float16", False))
        assert m.status is Status.INFEASIBLE and "shared memory" in m.error
        bad = obj.evaluate({"BLOCK_M": 64.5, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "oops": 1}, WORKLOAD)
        assert bad.status is Status.INFEASIBLE and "unknown key" in bad.error
        # Neither needed the worker process.
        assert obj.worker._proc is None


def test_worker_whose_parent_is_gone_exits_quietly():
    """A tuning process killed with ``kill -9`` leaves its worker writing into a pipe nobody
    reads: the worker exits 0 without a BrokenPipeError traceback."""
    import json
    import subprocess
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "flashtune.objectives._worker_main"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert json.loads(proc.stdout.readline()) == {"hello": None}
    proc.stdout.close()  # the parent's end of the answers, gone as with kill -9
    request = {"config": SAFE_DEFAULT.to_dict(), "workload": WORKLOAD.to_dict(), "seed": 0,
               "launcher": "no_such_module:launch"}  # answered at once (a crashed trial)
    proc.stdin.write(json.dumps(request) + "\n")
    proc.stdin.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
