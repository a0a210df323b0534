"""The Gluon kernel's exp2 split (``loads="gluon_pingpong_poly"``, kernels/_flash_fwd_gluon.py
``_exp2_split_asm``): the PTX it emits, run instruction by instruction in numpy (float32,
each instruction's rounding), computes 2^x where the softmax takes it, x - row max in
[-inf, 0] (and up to fp8's shift, 9), within the polynomial's 1e-4, far under bf16's step.

On the GPU the same text runs inside the kernel: tests/gpu/test_gluon_gpu.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from flashtune.kernels._flash_fwd_gluon import _PACK, _exp2_split_asm


def _f32(word: str) -> np.float32:
    return np.array([int(word[2:], 16)], dtype=np.uint32).view(np.float32)[0]


def _run(asm: str, x: np.ndarray) -> np.ndarray:
    """The asm's results for ``_PACK`` arguments, each element of ``x`` in every operand slot."""
    f32, u32 = np.float32, np.uint32
    regs = {f"${_PACK + i}": x.astype(f32) for i in range(_PACK)}

    def val(name: str) -> np.ndarray:
        return np.full(x.shape, _f32(name), f32) if name.startswith("0f") else regs[name]

    results = []
    for line in asm.strip("{} ").split(";"):
        parts = line.replace(",", " ").split()
        if not parts or parts[0] == ".reg":
            continue
        op, dst, *src = parts
        a = [val(s) for s in src] if not op.startswith("shl") else [regs[src[0]]]
        if op == "max.ftz.f32":
            out = np.maximum(a[0], a[1])
        elif op == "add.rm.ftz.f32":
            # The exact sum (float64 holds it), rounded toward -inf to float32.
            exact = a[0].astype(np.float64) + a[1].astype(np.float64)
            out = exact.astype(f32)
            out = np.where(out.astype(np.float64) > exact, np.nextafter(out, f32(-np.inf)), out).astype(f32)
        elif op == "sub.rn.ftz.f32":
            out = (a[0] - a[1]).astype(f32)
        elif op == "fma.rn.ftz.f32":
            out = (a[0].astype(np.float64) * a[1] + a[2]).astype(f32)  # one rounding, as fma
        elif op == "shl.b32":
            out = (a[0].view(u32) << u32(int(src[1]))).view(f32)
        elif op == "add.s32":
            out = (a[0].view(u32) + a[1].view(u32)).view(f32)  # two's complement wraps alike
        elif op == "ex2.approx.ftz.f32":
            out = np.exp2(a[0]).astype(f32)
        else:
            raise AssertionError(f"an instruction the model does not know: {line!r}")
        regs[dst] = out
        if dst.startswith("$"):
            results.append(int(dst[1:]))
    assert sorted(results) == list(range(_PACK))  # every result written once
    return np.stack([regs[f"${i}"] for i in range(_PACK)])


@pytest.mark.parametrize("poly", [0, 3, _PACK])
def test_the_first_poly_of_every_pack_go_to_the_fma_pipe(poly):
    asm = _exp2_split_asm(poly)
    assert asm.count("ex2.approx") == _PACK - poly and asm.count("fma.rn") == 3 * poly


def test_the_polynomial_is_exp2_where_the_softmax_takes_it():
    x = np.concatenate([np.linspace(-126.0, 9.0, 200_001), -np.logspace(-8, 2, 1001), [0.0, -1.0, -0.5, 8.807]])
    got = _run(_exp2_split_asm(_PACK), x.astype(np.float32))
    want = np.exp2(x)
    rel = np.abs(got.astype(np.float64) - want) / want
    assert rel.max() < 1.5e-4  # FA4's degree-3 minimax: about 9e-5
    assert np.all(got[:, x == 0.0] == 1.0)  # the row's maximum weighs exactly 1


def test_masked_and_underflowing_scores_weigh_nothing_next_to_the_maximum():
    # -inf (a masked key) clamps to -127: a denormal weight, not 0 (why the kernel keeps MUFU's
    # exp2 where a whole row can be masked).
    x = np.array([-np.inf, -1e30, -200.0, -127.5, -126.5], dtype=np.float32)
    got = _run(_exp2_split_asm(_PACK), x)
    assert np.all(got >= 0) and np.all(got < 2.0 ** -125)
