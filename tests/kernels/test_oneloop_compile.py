"""``lean_ws_oneloop`` compiled for sm90 on this CPU box (objectives/aot.py): warp-specialized
at 4 warps without spills (the lean kernel's ``lean_ws`` at the D256 tile compiled
unspecialized with 312 spilled words a thread), and the feasibility model's shared memory at
or above the compiler's, within the 1 KB it counts for barriers.

Compiled in a child process: this suite imports the kernels under the interpreter
(tests/conftest.py), where nothing compiles.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sm90_compile import compiled_for_sm90

from flashtune.kernels.resources import shared_memory_bytes
from flashtune.kernels.space import validate_config
from flashtune.objectives.types import Workload

#: (workload, knobs, whether the model is exact there): a ragged last query tile is stored by
#: pointers, which stages less than the model counts (16 KB less at 128x128 D128: safe).
CASES = [
    ("2,16,8192,256", dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=1), True),  # the minimal kernel's D256 tile
    ("4,32,4096,128", dict(BLOCK_M=128, BLOCK_N=128, num_warps=4, num_stages=2, use_fp8=True), True),
    ("4,32,4096,128,causal", dict(BLOCK_M=256, BLOCK_N=32, num_warps=4, num_stages=1), True),  # a 256-row buffer
    ("2,8/2,1000,128,causal", dict(BLOCK_M=128, BLOCK_N=128, num_warps=4, num_stages=2), False),  # ragged, GQA
]

@pytest.mark.slow
def test_warp_specialized_at_4_warps_without_spills_and_the_model_covers_its_shared_memory() -> None:
    cases = [(w, {**knobs, "loads": "lean_ws_oneloop"}) for w, knobs, _ in CASES]
    got = compiled_for_sm90(cases, timeout=600)
    for (workload, knobs), (registers, spills, shared), (_, _, exact) in zip(cases, got, CASES):
        w = Workload.parse(workload)
        config = validate_config(knobs)
        plain = shared_memory_bytes({**knobs, "loads": "lean"}, head_dim=w.head_dim)
        predicted = shared_memory_bytes(config, head_dim=w.head_dim)
        # Specialized: the producer warp and the consumers split the registers (168 each
        # here, below the 255 of an unspecialized loop) and the loop keeps its extra buffer.
        assert spills == 0 and registers < 255 and shared > plain, (workload, registers, spills, shared)
        assert shared <= predicted and (not exact or shared >= predicted - 1024), (workload, shared, predicted)


_FORMS_CHILD = """
import json
from aot_oneloop import compile_case
print(json.dumps([compile_case("16,16,1024,64", dict(BLOCK_M=bm, BLOCK_N=128, num_stages=1)) for bm in (64, 128)]))
"""


@pytest.mark.slow
def test_64_row_tiles_compile_unspecialized_and_fill_the_sm():
    # The specialized loop takes the whole register file (12 warps x 168 registers): one
    # program an SM, 64 rows at BLOCK_M 64, where the plain loop holds 4 programs (before
    # the fix the 64-row tile compiled specialized and ran at about half lean's speed).
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    # aot_oneloop is a lab tool (docs/lab/tools/), outside the package.
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2] / "docs" / "lab" / "tools"),
                                         *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, "-c", _FORMS_CHILD], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows, specialized = json.loads(done.stdout.strip().splitlines()[-1])
    assert rows["warps"] == 4 and rows["spills"] == 0 and rows["programs_per_sm"] >= 3, rows
    assert specialized["warps"] == 12 and specialized["spills"] == 0 and specialized["programs_per_sm"] == 1, specialized
