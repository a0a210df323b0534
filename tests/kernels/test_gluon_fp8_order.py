"""fp8 P in FA3's key order (the Gluon kernel's ``FP8_P="permuted"``, kernels/gluon.py): the
order quantize_fp8 writes V^T in, that it pairs every weight with its own key's value, the
launcher's choice of form from the V^T it is given, and the clear errors where they do not
match. The kernel's own numerics are GPU-only (tests/gpu/test_gluon_fp8_gpu.py); its sm90
compile is in tests/kernels/test_gluon_declarations.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from flashtune.kernels.attention import fa3_key_order, fp8_v_order, launch_quantized, quantize_fp8
from flashtune.kernels.gluon import FP8_P_FORMS, fp8_p_v_order, gluon_variant_for, launch_gluon, launch_options
from flashtune.kernels.space import validate_config

PINGPONG_FP8 = dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=2, loads="gluon_pingpong", use_fp8=True)


def _inputs(kv_len: int, head_dim: int = 32):
    g = torch.Generator().manual_seed(kv_len)
    q = torch.randn(1, 2, 40, head_dim, generator=g, dtype=torch.float16)
    k, v = (torch.randn(1, 2, kv_len, head_dim, generator=g, dtype=torch.float16) for _ in range(2))
    return q, k, v


def test_position_4t_2h_b_of_a_group_holds_key_8h_2t_b():
    keys = torch.arange(32).reshape(2, 16)  # two 16-key groups
    order = fa3_key_order(keys)
    for g in range(2):
        for t in range(4):
            for h in range(2):
                for b in range(2):
                    assert order[g, 4 * t + 2 * h + b] == 16 * g + 8 * h + 2 * t + b
    # Thread t of a quad holds keys 2t, 2t+1, 8+2t, 9+2t of a group in the scores' accumulator and
    # positions 4t..4t+3 in fp8's A operand: each position's key is one its own thread holds.
    for t in range(4):
        assert set(order[0, 4 * t:4 * t + 4].tolist()) == {2 * t, 2 * t + 1, 8 + 2 * t, 9 + 2 * t}


@pytest.mark.parametrize("kv_len", [16, 77, 1000])
def test_quantize_fp8_writes_v_transposed_in_fa3_order_with_zeros_past_kv_len(kv_len):
    q, k, v = _inputs(kv_len)
    _, _, plain, scales = quantize_fp8(q, k, v)
    _, _, fa3, scales_fa3 = quantize_fp8(q, k, v, v_order="fa3")
    groups = -(-kv_len // 16)
    assert fa3.shape == (1, 2, 32, groups, 16) and fa3.is_contiguous() and torch.equal(scales, scales_fa3)
    padded = torch.zeros(1, 2, 32, groups * 16)
    padded[..., :kv_len] = plain.float()
    assert torch.equal(fa3.float(), fa3_key_order(padded.reshape(1, 2, 32, groups, 16)))


@pytest.mark.parametrize("kv_len", [64, 77])
def test_weights_relabelled_as_the_kernel_does_meet_their_own_keys_values(kv_len):
    """The kernel relabels P (M, N) as ``reshape(M, N/16, 2, 4, 2).permute(0, 1, 3, 2, 4)`` (its
    _p_operand); summed against V^T in quantize_fp8's FA3 order that is P @ V, the padding's
    weights (zero past kv_len, as the mask makes them) meeting zeros."""
    q, k, v = _inputs(kv_len)
    _, _, plain, _ = quantize_fp8(q, k, v)
    _, _, fa3, _ = quantize_fp8(q, k, v, v_order="fa3")
    n = fa3.shape[3] * 16
    p = torch.rand(24, n, generator=torch.Generator().manual_seed(1))
    p[:, kv_len:] = 0
    relabelled = p.reshape(24, n // 16, 2, 4, 2).permute(0, 1, 3, 2, 4).reshape(24, n)
    for h in range(2):
        want = p[:, :kv_len] @ plain[0, h].float().T
        got = relabelled @ fa3[0, h].float().reshape(32, n).T
        # float32 sums in another order: equal to rounding (values reach ~1e3 here).
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-3)


def test_the_op_runs_the_permuted_form_on_the_gluon_kernel_and_key_order_elsewhere():
    assert fp8_v_order(validate_config(PINGPONG_FP8)) == "fa3"
    assert fp8_v_order(validate_config({**PINGPONG_FP8, "loads": "lean_ws_oneloop"})) == "keys"
    with pytest.raises(ValueError, match="v_order must be one of"):
        quantize_fp8(*_inputs(32), v_order="permuted")


def test_the_form_follows_v_transposed_and_a_mismatch_is_named():
    q, k, v = _inputs(77)
    q8, k8, plain, scales = quantize_fp8(q, k, v)
    fa3 = quantize_fp8(q, k, v, v_order="fa3")[2]
    out = torch.empty_like(q)
    variant = gluon_variant_for(validate_config(PINGPONG_FP8))
    call = dict(causal=False, scale=0.125, programs=1, variant=variant, scales=scales)
    with pytest.raises(ValueError, match="reads V\\^T in key order, got V\\^T in FA3's key order"):
        launch_gluon(q8, k8, fa3, out, fp8_p="exp2", **call)
    with pytest.raises(ValueError, match="fp8_p='permuted' reads V\\^T in FA3's key order"):
        launch_gluon(q8, k8, plain, out, fp8_p="permuted", **call)
    with pytest.raises(ValueError, match="FA3's key order must be contiguous"):
        launch_gluon(q8, k8, fa3[..., :3, :], out, **call)
    # Matching pairs pass every check (refused only by the interpreter, which runs no Gluon).
    with pytest.raises(ValueError, match="fp8_p='permuted_h2' reads V\\^T in FA3's key order"):
        launch_gluon(q8, k8, plain, out, fp8_p="permuted_h2", **call)
    for v8, form in [(fa3, None), (fa3, "permuted"), (fa3, "permuted_h2"), (plain, None), (plain, "multiply")]:
        with pytest.raises(ValueError, match="TRITON_INTERPRET"):
            launch_gluon(q8, k8, v8, out, fp8_p=form, **call)
    with pytest.raises(ValueError, match="fp8_p must be one of"):
        launch_options(variant, head_dim=32, causal=False, q_len=40, kv_len=77, fp8_p="shuffle")


def test_other_fp8_kernels_refuse_v_transposed_in_fa3_order():
    q, k, v = _inputs(77)
    q8, k8, fa3, scales = quantize_fp8(q, k, v, v_order="fa3")
    oneloop = validate_config({**PINGPONG_FP8, "loads": "lean_ws_oneloop"})
    with pytest.raises(ValueError, match="read only by the Gluon kernel"):
        launch_quantized(q8, k8, fa3, scales, torch.empty_like(q), causal=False, scale=0.125, config=oneloop)
    plain = quantize_fp8(q, k, v)[2]
    with pytest.raises(ValueError, match="fp8_p picks the Gluon kernel's"):
        launch_quantized(q8, k8, plain, scales, torch.empty_like(q), causal=False, scale=0.125, config=oneloop,
                         fp8_p="exp2")


def test_bench_fp8_times_the_forms_of_gluon_configs_only():
    from bench_fp8 import gluon_forms, parse_forms

    assert parse_forms("multiply,exp2,permuted") == ["multiply", "exp2", "permuted"]
    with pytest.raises(SystemExit, match="shuffle"):
        parse_forms("exp2,shuffle")
    assert gluon_forms(validate_config(PINGPONG_FP8), ["exp2", "permuted"]) == ["exp2", "permuted"]
    assert gluon_forms(validate_config({**PINGPONG_FP8, "loads": "lean_ws_oneloop"}), ["exp2"]) == [None]
    assert gluon_forms(validate_config(PINGPONG_FP8), []) == [None]


def test_each_p_form_names_the_key_order_its_v_transposed_is_written_in():
    assert {form: fp8_p_v_order(form) for form in FP8_P_FORMS} == {
        "multiply": "keys", "exp2": "keys", "permuted": "fa3", "permuted_h2": "fa3"}
    with pytest.raises(ValueError, match="fp8_p must be one of"):
        fp8_p_v_order("h2")


#: Compiles one fp8 config for sm90 in each P form given on stdin, prints its f16 MUFU count,
#: MUFU count and spilled bytes (a child process: the suite runs under TRITON_INTERPRET).
_SASS_CHILD = """
import json, sys
from sass_count import compiled_sass, opcode_counts
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.types import Workload
config, workload, forms = json.loads(sys.stdin.read())
rows = {}
for form in forms:
    sass, usage = compiled_sass(config, Workload.parse(workload), load_spec("h200"), form)
    rows[form] = [sass.count("MUFU.EX2.F16"), opcode_counts(sass)["MUFU"], usage.get("STACK", 0) + usage.get("LOCAL", 0)]
print(json.dumps(rows))
"""


@pytest.mark.slow
def test_permuted_h2_takes_its_exponentials_in_half_precision_on_sm90():
    # Compiled for sm90 here (no GPU): P's exponentials are f16 MUFUs, with no spills. ptxas
    # splits ex2.approx.f16x2 into two of them on sm90, so there are as many MUFUs as with
    # fp32 (BENCHMARKS.md, "part F, third step").
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    # sass_count is a lab tool (docs/lab/tools/), outside the package.
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2] / "docs" / "lab" / "tools"),
                                         *filter(None, [env.get("PYTHONPATH")])])
    job = [{**PINGPONG_FP8, "BLOCK_N": 128}, "1,2,1024,128", ["permuted", "permuted_h2"]]
    done = subprocess.run([sys.executable, "-c", _SASS_CHILD], input=json.dumps(job), capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    (f16_fp32, mufu_fp32, _), (f16_h2, mufu_h2, spilled) = rows["permuted"], rows["permuted_h2"]
    assert f16_fp32 == 0 and f16_h2 >= 4 * 64  # four block bodies, 64 scores a thread each
    assert spilled == 0
    assert mufu_h2 == mufu_fp32
