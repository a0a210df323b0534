"""Adding a knob is its declaration plus the kernel code that reads it, measured by doing it:
on a copy of the package, one ``Knob`` line in kernels/knobs.py and a constexpr in each
kernel that takes it (the prefill kernel's forward, lean, one-loop and Gluon variants; the
decode kernel, whose knob is a second line), and nothing else. The space, the
translator, the launchers (run in the interpreter; the Gluon kernel's launch arguments,
which the interpreter cannot run), feasibility, the sweep's ``--where``, the compile pool
(a real sm90 compile, no GPU), MLflow and file priors then all take it.

The dummy knob multiplies the softmax's scale (``DUMMY_TEMP``: 1 or 2), so its effect on
the output shows the value reached the kernel.

A compile-option knob (``maxnreg``) is one declaration and no kernel code: every launcher
passes it to Triton, and the compiled kernel keeps to it.
"""

from __future__ import annotations

import filecmp
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from flashtune.kernels.space import DECODE_TUNABLES, TUNABLES

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("values", "kernels", "objectives", "search", "experiments", "runtime")
#: The declaration, appended last to the prefill kernel's knobs (kernels/knobs.py's rule).
DECLARATION = '    Knob("dummy_temp", (1, 2), implied=1, launch=Constexpr("DUMMY_TEMP")),\n'
#: Each kernel's file, JIT function and constexpr annotation: the prefill variants', then
#: decode's split kernel.
KERNELS = (("_flash_fwd.py", "attention_forward_kernel", "tl"), ("_flash_fwd_lean.py", "lean_attention_kernel", "tl"),
           ("_flash_fwd_oneloop.py", "one_loop_attention_kernel", "tl"),
           ("_flash_fwd_gluon.py", "gluon_attention_kernel", "gl"), ("_flash_decode.py", "decode_split_kernel", "tl"))
#: A compile-option knob, appended last to both kernels' knobs: no kernel code reads it.
COMPILE_OPTION = '    Knob("max_registers", (255, 128), implied=255, launch=CompileOption("maxnreg")),\n'


def _add_constexpr(source: str, kernel: str, language: str) -> str:
    """``kernel`` with a last constexpr ``DUMMY_TEMP`` that scales its ``qk_scale``."""
    start = source.index(f"def {kernel}(")
    close = source.index("\n):\n", start) + 1
    body = close + len("):\n")
    if source.startswith('    """', body):  # after the docstring
        body = source.index('"""\n', body + len('    """')) + len('"""\n')
    return (source[:close] + f"    DUMMY_TEMP: {language}.constexpr = 1,\n" + source[close:body]
            + "    qk_scale = qk_scale * DUMMY_TEMP\n" + source[body:])


def _package_with_dummy_knob(root: Path, declaration: str = DECLARATION, kernels: tuple = KERNELS) -> Path:
    """A copy of the package under ``root`` with ``declaration`` appended to both kernels' knobs
    and ``DUMMY_TEMP`` added to ``kernels``; returns the import path."""
    package = root / "flashtune"
    for name in PACKAGES:
        shutil.copytree(REPO / name, package / name, ignore=shutil.ignore_patterns("__pycache__"))
    knobs = package / "kernels" / "knobs.py"
    text = knobs.read_text()
    last = '    Knob.choice("kernel", {"prefill": sets()}, implied="prefill"),\n)'
    assert text.count(last) == 1, "the prefill kernel's last knob moved: update the test's anchor"
    text = text.replace(last, last[:-1] + declaration + ")")
    last = '    Knob("combine", ("launch", "fused"), implied="launch", launch=HostArg("combine")),\n)'
    assert text.count(last) == 1, "the decode kernel's last knob moved: update the test's anchor"
    knobs.write_text(text.replace(last, last[:-1] + declaration + ")"))
    for file, kernel, language in kernels:
        path = package / "kernels" / file
        path.write_text(_add_constexpr(path.read_text(), kernel, language))
    return root


def _changed_files(root: Path) -> list[str]:
    changed = []
    for name in PACKAGES:
        for path in sorted((root / "flashtune" / name).rglob("*.py")):
            if not filecmp.cmp(path, REPO / path.relative_to(root / "flashtune"), shallow=False):
                changed.append(str(path.relative_to(root / "flashtune")))
    return changed


# Runs on the copy, in the interpreter: every reader of the space takes the knob.
_INTERPRETED = textwrap.dedent('''
    import json, math, sys
    from pathlib import Path

    import torch

    import flashtune.kernels.knobs
    assert flashtune.kernels.knobs.__file__.startswith(sys.argv[1]), flashtune.kernels.knobs.__file__
    from flashtune.experiments.cli.sweep import _parse_where, _select
    from flashtune.experiments.evaluation import prior_files, prior_mlflow
    from flashtune.experiments.study.runner import Study, run_study
    from flashtune.kernels import flash_attention
    from flashtune.kernels.launch_plan import launch_plan
    from flashtune.kernels.reference import reference_attention
    from flashtune.kernels.space import DECODE_TUNABLES, IMPLIED, SAFE_DEFAULT, TUNABLES, all_configs, validate_config
    from flashtune.objectives.feasibility import check, for_workload
    from flashtune.objectives.hardware import load_spec
    from flashtune.objectives.replay import write_table
    from flashtune.objectives.types import Measurement, Status, Workload

    out, tmp = {}, Path(sys.argv[2])
    h200, workload = load_spec("h200"), Workload.parse("1,2,40,32,float32")
    out["space"] = [list(TUNABLES["dummy_temp"]), IMPLIED["dummy_temp"], sum(1 for _ in all_configs())]
    hot = validate_config({**SAFE_DEFAULT, "dummy_temp": 2})
    out["recorded_before"] = validate_config(dict(SAFE_DEFAULT))["dummy_temp"]  # a config without it
    try:
        validate_config({**SAFE_DEFAULT, "dummy_temp": 3})
    except ValueError as exc:
        out["refused"] = str(exc)
    out["plan"] = launch_plan(hot).constexprs["DUMMY_TEMP"]
    out["feasible"] = check(hot, workload, h200).feasible
    out["search_space"] = "dummy_temp" in for_workload(workload, h200).tunables
    out["where"] = len(_select(_parse_where(["dummy_temp=2", "loads=pointer"]), None, TUNABLES))

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 32) for _ in range(3))
    errors = {}
    for loads in ("pointer", "lean", "lean_ws_oneloop"):
        for temp in (1, 2):
            config = {**hot, "loads": loads, "dummy_temp": temp, "BLOCK_M": 32, "BLOCK_N": 32}
            got = flash_attention(q, k, v, causal=True, config=config)
            want = reference_attention(q, k, v, causal=True, scale=temp / math.sqrt(32))
            errors[f"{loads}/{temp}"] = float((got - want).abs().max())
    for combine in ("launch", "fused"):
        for temp in (1, 2):
            config = {"kernel": "decode", "BLOCK_N": 16, "num_splits": 2, "num_warps": 4, "num_stages": 2,
                      "loads": "pointer", "combine": combine, "dummy_temp": temp}
            qd, kd, vd = torch.randn(1, 8, 1, 32), torch.randn(1, 2, 64, 32), torch.randn(1, 2, 64, 32)
            got = flash_attention(qd, kd, vd, causal=True, config=config)
            want = reference_attention(qd, kd, vd, causal=True, scale=temp / math.sqrt(32))
            errors[f"decode-{combine}/{temp}"] = float((got - want).abs().max())
    out["errors"] = errors
    # The Gluon kernel (no interpreter): what its launcher would pass it, by temp.
    from flashtune.kernels.gluon import gluon_variant_for, launch_options
    gluon = {**hot, "loads": "gluon_pingpong", "BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4}
    out["gluon"] = [launch_options(gluon_variant_for({**gluon, "dummy_temp": temp}), head_dim=64, causal=True,
                                   q_len=256, kv_len=256).get("DUMMY_TEMP") for temp in (1, 2)]
    out["decode_space"] = sum(1 for _ in all_configs(DECODE_TUNABLES))

    uri, storage = f"sqlite:///{tmp / 'mlflow.db'}", f"sqlite:///{tmp / 'optuna.db'}"
    def timed(config):
        ms = 0.01 * config["dummy_temp"]
        return Measurement(config=config, workload=workload, status=Status.OK, median_ms=ms, tflops=1.0,
                           fingerprint="fp", hardware="NVIDIA H200")
    study = Study(name="dummy-knob", workload=workload, hardware=h200, strategy="random", trials=4, seed=3)
    result = run_study(study, timed, tracking_uri=uri, storage_url=storage)
    told = sorted(t.config.key() for t in result.trials)
    back = prior_mlflow.trial_measurements_of_run(uri, result.parent_run_id)
    out["mlflow"] = [told == sorted(m.config.key() for m in back), sorted({m.config["dummy_temp"] for m in back})]
    write_table(tmp / "table.jsonl", [t.measurement for t in result.trials])
    from_file = prior_files.read_tables(tmp / "table.jsonl", "table")
    out["file_priors"] = told == sorted(m.config.key() for m in from_file)
    print(json.dumps(out))
''')

# Runs on the copy without the interpreter: the compile pool compiles the knob into each kernel.
_COMPILED = textwrap.dedent('''
    import json, sys

    import flashtune.kernels.knobs
    assert flashtune.kernels.knobs.__file__.startswith(sys.argv[1])
    from flashtune.kernels.space import SAFE_DEFAULT
    from flashtune.objectives.aot import compiled_resources
    from flashtune.objectives.hardware import load_spec
    from flashtune.objectives.types import Workload

    h200, out = load_spec("h200"), {}
    used = compiled_resources({**SAFE_DEFAULT, "dummy_temp": 2}, Workload.parse("1,8,256,64,bfloat16"), h200)
    out["prefill"] = [used.registers, used.shared_bytes]
    decode = {"kernel": "decode", "BLOCK_N": 64, "num_splits": 4, "num_warps": 4, "num_stages": 2,
              "loads": "pointer", "combine": "fused", "dummy_temp": 2}
    used = compiled_resources(decode, Workload.parse("1,8/2,1/4096,128,bfloat16"), h200)
    out["decode"] = [used.registers, used.shared_bytes]
    # The Gluon kernel compiled with each temp: two binaries (the constexpr reached it).
    from flashtune.kernels.space import validate_config
    from flashtune.objectives.aot import compiling_for
    from flashtune.objectives.precompile import compile_config
    gluon = {**SAFE_DEFAULT, "loads": "gluon_ws", "BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}
    with compiling_for(h200):
        out["gluon_hashes"] = [compile_config(validate_config({**gluon, "dummy_temp": temp}),
                                              Workload.parse("1,2,256,64,bfloat16,causal"), device="cpu").hash
                               for temp in (1, 2)]
    print(json.dumps(out))
''')


def _run(script: str, root: Path, tmp: Path, interpret: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(root)
    env["TRITON_CACHE_DIR"] = str(tmp / "triton-cache")
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    done = subprocess.run([sys.executable, "-c", script, str(root), str(tmp)], env=env, cwd=tmp,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_new_knob_is_one_declaration_and_its_kernel_code(tmp_path: Path) -> None:
    root = _package_with_dummy_knob(tmp_path / "src")
    # What adding it took: the declarations, and the code of each kernel that reads it.
    assert _changed_files(root) == ["kernels/_flash_decode.py", "kernels/_flash_fwd.py", "kernels/_flash_fwd_gluon.py",
                                    "kernels/_flash_fwd_lean.py", "kernels/_flash_fwd_oneloop.py", "kernels/knobs.py"]

    seen = _run(_INTERPRETED, root, tmp_path, interpret=True)
    # The spaces as this package declares them, without the dummy knob.
    prefill, decode = (math.prod(len(values) for values in tables.values()) for tables in (TUNABLES, DECODE_TUNABLES))
    assert seen["space"] == [[1, 2], 1, 2 * prefill] and seen["decode_space"] == 2 * decode
    assert seen["recorded_before"] == 1  # configs recorded without the knob mean its implied value
    assert "dummy_temp=3" in seen["refused"]
    assert seen["plan"] == 2 and seen["feasible"] and seen["search_space"]
    assert seen["where"] == prefill // len(TUNABLES["loads"])  # --where takes it: of the doubled space, pointer loads and temp 2
    # Every variant ran with the value the config named: temp 2 doubles the softmax's scale.
    assert all(error < 1e-4 for error in seen["errors"].values()), seen["errors"]
    assert seen["gluon"] == [1, 2]  # the Gluon launcher passes the kernel the plan's constexpr
    assert seen["mlflow"][0] and seen["mlflow"][1] and seen["file_priors"]

    compiled = _run(_COMPILED, root, tmp_path, interpret=False)
    hashes = compiled.pop("gluon_hashes")
    assert all(registers > 0 and shared > 0 for registers, shared in compiled.values()), compiled
    assert hashes[0] != hashes[1]


# Runs on the copy: a compile option reaches every launcher, in the interpreter (which takes
# the options it knows) and for a compile for sm90 (the compiled kernel keeps to it).
_COMPILE_OPTION = textwrap.dedent('''
    import json, math, os, sys

    import flashtune.kernels.knobs
    assert flashtune.kernels.knobs.__file__.startswith(sys.argv[1])
    from flashtune.kernels.gluon import gluon_variant_for, launch_options
    from flashtune.kernels.launch_plan import launch_plan
    from flashtune.kernels.lean import variant_for
    from flashtune.kernels.space import SAFE_DEFAULT, validate_config

    out = {}
    lean = validate_config({**SAFE_DEFAULT, "loads": "lean", "BLOCK_M": 64, "BLOCK_N": 64, "max_registers": 128})
    out["plan"] = launch_plan(lean).options["maxnreg"]
    out["gluon"] = launch_options(gluon_variant_for({**lean, "loads": "gluon_ws"}), head_dim=64, causal=False,
                                  q_len=128, kv_len=128).get("maxnreg")
    if os.environ.get("TRITON_INTERPRET") == "1":
        import torch
        from flashtune.kernels import flash_attention
        from flashtune.kernels.reference import reference_attention

        torch.manual_seed(0)
        q, k, v = (torch.randn(1, 2, 40, 32) for _ in range(3))
        errors = {}
        for loads in ("pointer", "lean", "lean_ws_oneloop"):
            config = {**lean, "loads": loads, "BLOCK_M": 32, "BLOCK_N": 32}
            got = flash_attention(q, k, v, causal=True, config=config)
            errors[loads] = float((got - reference_attention(q, k, v, causal=True)).abs().max())
        for combine in ("launch", "fused"):
            config = {"kernel": "decode", "BLOCK_N": 16, "num_splits": 2, "num_warps": 4, "num_stages": 2,
                      "loads": "pointer", "combine": combine, "max_registers": 128}
            qd, kd, vd = torch.randn(1, 8, 1, 32), torch.randn(1, 2, 64, 32), torch.randn(1, 2, 64, 32)
            got = flash_attention(qd, kd, vd, causal=True, config=config)
            errors[f"decode-{combine}"] = float((got - reference_attention(qd, kd, vd, causal=True)).abs().max())
        out["errors"] = errors
    else:
        from flashtune.objectives.aot import compiled_resources
        from flashtune.objectives.hardware import load_spec
        from flashtune.objectives.types import Workload

        h200, workload = load_spec("h200"), Workload.parse("1,4,256,128,bfloat16,causal")
        # 8 warps of a 128x128 tile at head_dim 128 take well over 128 registers uncapped.
        wide = {**lean, "BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8}
        out["registers"] = {f"{loads}/{cap}": compiled_resources({**wide, "loads": loads, "max_registers": cap},
                                                                 workload, h200).registers
                            for loads in ("pointer", "lean") for cap in (255, 128)}
    print(json.dumps(out))
''')


@pytest.mark.slow
def test_a_new_compile_option_knob_is_one_declaration(tmp_path: Path) -> None:
    root = _package_with_dummy_knob(tmp_path / "src", COMPILE_OPTION, kernels=())
    assert _changed_files(root) == ["kernels/knobs.py"]  # no kernel reads a compile option

    seen = _run(_COMPILE_OPTION, root, tmp_path, interpret=True)
    assert seen["plan"] == 128 and seen["gluon"] == 128
    # Every launcher took the option (the lean one refused it as a keyword before).
    assert all(error < 1e-4 for error in seen["errors"].values()), seen["errors"]

    compiled = _run(_COMPILE_OPTION, root, tmp_path, interpret=False)["registers"]
    for loads in ("pointer", "lean"):
        assert compiled[f"{loads}/128"] <= 128 < compiled[f"{loads}/255"], compiled
