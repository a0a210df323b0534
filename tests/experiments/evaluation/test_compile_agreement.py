"""`compile_agreement` on a recorded table: compiled here, the figures equal the GPU's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TABLE = ROOT / "experiments" / "data" / "h200_lean" / "b4_h32_n4096_d128_full_bfloat16.jsonl"


def test_a_lean_table_sample_compiles_to_the_h200s_figures(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # real compiles, not the interpreter
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "lab" / "tools" / "compile_agreement.py"),
                           "--tables", str(TABLE), "--sample", "2", "--json", str(tmp_path / "a.json")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (result,) = json.loads((tmp_path / "a.json").read_text())
    assert result["ok"] == 2 and result["exact"] == 2, result["differences"]
    assert "| **all** | 2 | 2 | 2 | 2 |" in done.stdout
