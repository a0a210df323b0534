"""GPU numerics of the Gluon kernel's fp8 path (``use_fp8=True`` with the gluon loads,
kernels/_flash_fwd_gluon.py; ``pytest -m gpu`` on the H200): e4m3 Q, K and V^T from
``quantize_fp8``, P in e4m3, bf16/fp16 out, against the float32 reference within the fp8
accuracy gate (``FP8_TOLERANCE``) at head dims 64, 128 and 256: ragged lengths (1000, 333
queries against 1000 keys and back, where causal rows see no key), 4096, causal
bottom-right, grouped-query heads, strided inputs; and one 16-bit launch through the same
kernel beside them (the fp8 edit touched its arguments). The op runs P in FA3's key order
(kernels/gluon.py ``DEFAULT_FP8_P``); the two other P forms (``FP8_P_FORMS``: the first one,
x448 after exp2, the stretch folded into exp2, and the permuted one with f16 exponentials) are
checked beside it at two hard cases.

The interpreter runs no Gluon and Triton's interpreter no fp8 wgmma: these are the path's
only numerics; the CPU checks its declarations, plumbing and sm90 compile
(tests/kernels/test_gluon_declarations.py). Own file, own precompile: ``-k`` on the 16-bit
file still compiles all of that file's configs.
"""

import pytest
import torch

from flashtune.kernels import Config, flash_attention
from flashtune.kernels.reference import reference_attention, relative_error
from flashtune.kernels.space import validate_config
from flashtune.objectives import Workload
from flashtune.objectives.bench import FP8_TOLERANCE, TOLERANCE, make_inputs
from flashtune.objectives.feasibility import check

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
                       reason="needs a Hopper GPU"),
]


def configs(head_dim: int) -> list[Config]:
    """fp8 ping-pong at the compiled tiles (tests/kernels/test_gluon_declarations.py): free-running
    and ordered at the wide tile, the narrow tile, one consumer group, and the wide tile with 2 of
    16 exp2s of P by the polynomial (shifted by log2 448 before it)."""
    wide = 128 if head_dim <= 128 else 64
    tiles = [(128, wide, "gluon_pingpong"), (128, wide, "gluon_pingpong_ordered"), (128, wide // 2, "gluon_pingpong"),
             (64, wide, "gluon_ws"), (128, wide, "gluon_pingpong_poly")]
    return [validate_config(dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=4, num_stages=2, loads=loads, use_fp8=True))
            for bm, bn, loads in tiles]


CASES = [
    # (head_dim, causal, q_heads, kv_heads, q_len, kv_len, dtype)
    (128, False, 8, 8, 1000, 1000, "bfloat16"),
    (128, True, 32, 8, 1024, 1024, "bfloat16"),
    (128, True, 32, 8, 333, 1000, "float16"),
    (128, True, 8, 8, 1000, 333, "bfloat16"),
    (128, False, 4, 4, 4096, 4096, "bfloat16"),
    (64, True, 16, 4, 1000, 1000, "bfloat16"),
    (256, False, 4, 4, 1000, 1000, "bfloat16"),
    (256, True, 8, 2, 1000, 333, "float16"),
]

#: A 16-bit config of the same kernel, ragged causal GQA (masked blocks, pointer store).
BF16 = validate_config(dict(BLOCK_M=128, BLOCK_N=128, num_warps=4, num_stages=2, loads="gluon_pingpong"))
BF16_CASE = Workload(2, 32, 8, 1000, 1000, 128, "bfloat16", True)
STRIDED = Workload(2, 16, 4, 1000, 1000, 128, "bfloat16", True)

#: Every P form at a ragged causal GQA case whose rows past the diagonal see keys of a
#: partial 16-key group, and at D256 ordered with rows that see no key.
FORM_CASES = [
    (Workload(2, 32, 8, 333, 1000, 128, "float16", True),
     validate_config(dict(BLOCK_M=128, BLOCK_N=128, num_warps=4, num_stages=2, loads="gluon_pingpong", use_fp8=True))),
    (Workload(2, 8, 2, 1000, 333, 256, "float16", True),
     validate_config(dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=2, loads="gluon_pingpong_ordered",
                          use_fp8=True))),
]


def _workload(case) -> Workload:
    head_dim, causal, q_heads, kv_heads, q_len, kv_len, dtype = case
    return Workload(2, q_heads, kv_heads, q_len, kv_len, head_dim, dtype, causal)


@pytest.fixture(scope="module")
def hardware():
    from flashtune.objectives.hardware import HardwareSpec

    return HardwareSpec.from_device()


@pytest.fixture(scope="module", autouse=True)
def precompiled(hardware):
    """Compiled ahead in a pool of processes (Triton compiles one kernel at a time here)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from flashtune.objectives.precompile import CompilePool, compile_form

    pool = CompilePool(12)
    pairs = [(c, _workload(case)) for case in CASES for c in configs(case[0])]
    pairs += [(BF16, BF16_CASE)] + [(c, STRIDED) for c in configs(128)] + [(c, w) for w, c in FORM_CASES]
    for c, w in pairs:
        pool.submit(c, w)
    with ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("spawn")) as forms:
        compiled = [forms.submit(compile_form, c.to_dict(), w.to_dict(), form)
                    for w, c in FORM_CASES for form in ("multiply", "exp2")]
        for c, w in pairs:
            pool.wait(c, w)
        for future in compiled:
            future.result()
    pool.close()


def _errors(w: Workload, hardware, q=None, k=None, v=None) -> list[tuple[dict, float]]:
    if q is None:
        q, k, v = make_inputs(w, seed=7, dev=torch.device("cuda"))
    ref = reference_attention(q, k, v, causal=w.causal)
    errors = []
    for config in configs(w.head_dim):
        assert check(config, w, hardware).feasible, config
        out = flash_attention(q, k, v, causal=w.causal, config=config)
        assert out.dtype == q.dtype
        errors.append((config.to_dict(), relative_error(out, ref)))
    return errors


def _within_the_fp8_gate(errors: list[tuple[dict, float]]) -> None:
    # Above 1e-3: it really ran in e4m3 (16-bit errors are ~1e-3 and below); below the gate.
    assert all(1e-3 < err < FP8_TOLERANCE for _, err in errors), errors


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"d{c[0]}-{'causal' if c[1] else 'full'}-{c[2]}x{c[3]}"
                                                     f"-{c[4]}x{c[5]}-{c[6]}")
def test_fp8_matches_the_float32_reference_within_its_gate(case, hardware):
    _within_the_fp8_gate(_errors(_workload(case), hardware))


def test_fp8_strided_inputs(hardware):
    # (batch, seq, heads, dim) storage viewed as (batch, heads, seq, dim): quantize_fp8 writes
    # contiguous e4m3 copies (and V^T) whatever the input's strides.
    g = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(2, 1000, 16, 128, generator=g, device="cuda").to(torch.bfloat16).transpose(1, 2)
    k, v = (torch.randn(2, 1000, 4, 128, generator=g, device="cuda").to(torch.bfloat16).transpose(1, 2)
            for _ in range(2))
    _within_the_fp8_gate(_errors(STRIDED, hardware, q, k, v))


def test_the_16_bit_path_of_the_same_kernel_still_matches(hardware):
    q, k, v = make_inputs(BF16_CASE, seed=7, dev=torch.device("cuda"))
    out = flash_attention(q, k, v, causal=True, config=BF16)
    assert relative_error(out, reference_attention(q, k, v, causal=True)) <= TOLERANCE["bfloat16"]


@pytest.mark.parametrize("case", range(len(FORM_CASES)), ids=["d128-causal-gqa-333x1000", "d256-ordered-1000x333"])
def test_every_p_form_is_within_the_gate_and_the_permuted_one_sums_the_same_pairs(case, hardware):
    from flashtune.kernels.attention import launch_quantized, quantize_fp8
    from flashtune.kernels.gluon import FP8_P_FORMS, fp8_p_v_order

    w, config = FORM_CASES[case]
    q, k, v = make_inputs(w, seed=11, dev=torch.device("cuda"))
    ref = reference_attention(q, k, v, causal=True)
    outs = {}
    for form in FP8_P_FORMS:
        quantized = quantize_fp8(q, k, v, v_order=fp8_p_v_order(form))
        outs[form] = torch.full_like(q, float("nan"))  # every element must be written
        launch_quantized(*quantized, outs[form], causal=True, scale=w.head_dim ** -0.5, config=config, fp8_p=form)
    errors = {form: relative_error(out, ref) for form, out in outs.items()}
    assert all(1e-3 < err < FP8_TOLERANCE for err in errors.values()), errors
    # The same e4m3 weights and values, summed in another order inside each 16-key group.
    assert relative_error(outs["permuted"], outs["exp2"].float()) < 1e-3, errors
    # f16 exponentials (permuted_h2): the same weights but where an f16 exp2 rounds to the other
    # side of an e4m3 step, so close to the fp32 one, not equal to it.
    assert relative_error(outs["permuted_h2"], outs["permuted"].float()) < 1e-2, errors
