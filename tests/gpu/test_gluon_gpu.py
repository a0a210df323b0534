"""GPU numerics of the Gluon kernel with FlashAttention 3's schedule (``loads="gluon_ws"`` and
``"gluon_pingpong"``, kernels/_flash_fwd_gluon.py; ``pytest -m gpu`` on the H200): bf16 and
fp16 against the float32 reference at head dims 64, 128 and 256, ragged lengths (1000, and
333 queries against 1000 keys and back, where causal rows see no key), 4096, causal
bottom-right, grouped-query heads (32 query heads on 8 K/V heads) and strided inputs; the
tiles grid and the persistent one, also in its zigzag order (``grid="persistent_zigzag"``, also
with three programs for many tiles); the ping-pong free-running and ordered; the kernel's
share of P's exp2 as a polynomial (``EXP2_POLY``: every share; the space's ``gluon_pingpong_poly``
takes 2 of 16).

The interpreter runs no Gluon, so these are the kernel's only numerics; the CPU checks its
declarations and its sm90 compile (tests/kernels/test_gluon_declarations.py). fp8:
tests/gpu/test_gluon_fp8_gpu.py.
"""

import dataclasses

import pytest
import torch

from flashtune.kernels import Config, flash_attention
from flashtune.kernels.launch_support import LOG2_E
from flashtune.kernels.reference import reference_attention, relative_error
from flashtune.kernels.space import validate_config
from flashtune.objectives import Workload
from flashtune.objectives.bench import TOLERANCE, make_inputs
from flashtune.objectives.feasibility import check

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
                       reason="needs a Hopper GPU"),
]


def configs(head_dim: int, pingpong: str = "gluon_pingpong") -> list[Config]:
    """Ping-pong at FA3's tiles (two 64-row groups; two 128-row groups at D64), one consumer
    group, a deeper ring, and the causal tile order; ``pingpong``: free-running or ordered;
    the persistent grid too (32-key blocks at D256, where Q's second buffer leaves room for
    one stage of 64 keys, which spilled)."""
    wide = 128 if head_dim <= 128 else 64
    tiles = [(128, wide, 2, pingpong, "head_major", "tiles"), (128, wide // 2, 3, pingpong, "head_major", "tiles"),
             (64, wide, 2, "gluon_ws", "head_major", "tiles"), (128, wide, 2, pingpong, "longest_first", "tiles")]
    if head_dim == 64:
        tiles.append((256, 64, 3, pingpong, "head_major", "tiles"))
    keys = wide if head_dim <= 128 else wide // 2
    tiles += [(128, keys, 2, pingpong, "head_major", "persistent"), (128, keys, 2, pingpong, "longest_first", "persistent"),
              (64, keys, 2, "gluon_ws", "longest_first", "persistent")]
    return [validate_config(dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=4, num_stages=s, loads=loads, tile_order=order,
                                 grid=grid))
            for bm, bn, s, loads, order, grid in tiles]


CASES = [
    # (head_dim, causal, q_heads, kv_heads, q_len, kv_len, dtype)
    (128, False, 8, 8, 1000, 1000, "bfloat16"),
    (128, True, 8, 8, 1000, 1000, "bfloat16"),
    (128, True, 32, 8, 1024, 1024, "bfloat16"),
    (128, False, 32, 8, 4096, 4096, "float16"),
    (128, True, 8, 8, 4096, 4096, "float16"),
    (128, True, 32, 8, 333, 1000, "bfloat16"),
    (128, True, 32, 8, 1000, 333, "float16"),
    (64, False, 8, 8, 1000, 1000, "bfloat16"),
    (64, True, 16, 4, 1000, 1000, "float16"),
    (64, True, 8, 8, 4096, 4096, "bfloat16"),
    (256, False, 4, 4, 1000, 1000, "bfloat16"),
    (256, True, 8, 2, 1000, 333, "bfloat16"),
    (256, False, 4, 4, 4096, 4096, "float16"),
]


def zigzag_configs(head_dim: int) -> list[Config]:
    """The persistent configs of ``configs``, free-running and ordered, on the zigzag grid."""
    persistent = [c for c in configs(head_dim) if c["grid"] == "persistent"]
    ordered = [c.replace(loads="gluon_pingpong_ordered") for c in persistent if c["loads"] == "gluon_pingpong"]
    return [c.replace(grid="persistent_zigzag") for c in persistent + ordered]


def _workload(case) -> Workload:
    head_dim, causal, q_heads, kv_heads, q_len, kv_len, dtype = case
    return Workload(2, q_heads, kv_heads, q_len, kv_len, head_dim, dtype, causal)


@pytest.fixture(scope="module")
def hardware():
    from flashtune.objectives.hardware import HardwareSpec

    return HardwareSpec.from_device()


@pytest.fixture(scope="module")
def precompiled(hardware):
    """``precompiled(pingpong)``: every case's configs of that ping-pong compiled ahead in a pool
    of processes (Triton compiles one kernel at a time here), once, when a test first needs
    them (a run filtered to one ping-pong compiles only its configs)."""
    from flashtune.objectives.precompile import CompilePool

    done = set()

    def compile_for(pingpong: str) -> None:
        if pingpong in done:
            return
        pool = CompilePool(16)
        of = zigzag_configs if pingpong == "zigzag" else lambda d: configs(d, pingpong)
        pairs = [(c, _workload(case)) for case in CASES for c in of(case[0])]
        pairs = [(c, w) for c, w in pairs if check(c, w, hardware).feasible]
        for c, w in pairs:
            pool.submit(c, w)
        for c, w in pairs:
            pool.wait(c, w)
        pool.close()
        done.add(pingpong)

    return compile_for


def _check_all(w: Workload, hardware, q=None, k=None, v=None, pingpong: str = "gluon_pingpong",
               of=None) -> int:
    """``of``: the configs to check at a head dim (``configs`` of ``pingpong`` by default)."""
    if q is None:
        q, k, v = make_inputs(w, seed=7, dev=torch.device("cuda"))
    ref = reference_attention(q, k, v, causal=w.causal)
    failures, checked = [], 0
    for config in (of or (lambda d: configs(d, pingpong)))(w.head_dim):
        assert check(config, w, hardware).feasible, config
        out = flash_attention(q, k, v, causal=w.causal, config=config)
        err = relative_error(out, ref)
        checked += 1
        if not err <= TOLERANCE[w.dtype]:
            failures.append((config.to_dict(), err))
    assert not failures, failures
    return checked


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"d{c[0]}-{'causal' if c[1] else 'full'}-{c[2]}x{c[3]}"
                                                     f"-{c[4]}x{c[5]}-{c[6]}")
def test_matches_the_float32_reference(case, hardware, precompiled):
    precompiled("gluon_pingpong")
    assert _check_all(_workload(case), hardware) == len(configs(case[0]))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"d{c[0]}-{'causal' if c[1] else 'full'}-{c[2]}x{c[3]}"
                                                     f"-{c[4]}x{c[5]}-{c[6]}")
def test_ordered_pingpong_matches_the_float32_reference(case, hardware, precompiled):
    # Causal: the groups take turns over the blocks both read, then the later group runs alone.
    precompiled("gluon_pingpong_ordered")
    assert _check_all(_workload(case), hardware, pingpong="gluon_pingpong_ordered") == len(configs(case[0]))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"d{c[0]}-{'causal' if c[1] else 'full'}-{c[2]}x{c[3]}"
                                                     f"-{c[4]}x{c[5]}-{c[6]}")
def test_polynomial_pingpong_matches_the_float32_reference(case, hardware, precompiled):
    # The space's gluon_pingpong_poly: 2 of 16 exp2s of P on the FMA pipe (none where a causal
    # row sees no key: those cases run it on MUFU alone), at every tile and grid of the others.
    precompiled("gluon_pingpong_poly")
    assert _check_all(_workload(case), hardware, pingpong="gluon_pingpong_poly") == len(configs(case[0]))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"d{c[0]}-{'causal' if c[1] else 'full'}-{c[2]}x{c[3]}"
                                                     f"-{c[4]}x{c[5]}-{c[6]}")
def test_zigzag_persistent_grid_matches_the_float32_reference(case, hardware, precompiled):
    # The odd rounds of tiles in reverse: every tile once, whatever the programs and tiles.
    precompiled("zigzag")
    assert _check_all(_workload(case), hardware, of=zigzag_configs) == len(zigzag_configs(case[0]))


@pytest.mark.parametrize("case", [(64, True, 16, 4, 1000, 1000, "bfloat16"), (128, False, 8, 8, 1000, 333, "float16")],
                         ids=["d64-causal-gqa", "d128-full-ragged-keys"])
@pytest.mark.parametrize("poly", [1, 3, 8, 16])
def test_every_share_of_the_polynomial_matches_the_reference(poly, case):
    # The kernel's EXP2_POLY (the space's gluon_pingpong_poly takes 2), one to all 16 of 16
    # exp2s of P by the polynomial, masked keys (-inf) among them.
    from flashtune.kernels.gluon import gluon_variant_for, launch_gluon

    w = _workload(case)
    q, k, v = make_inputs(w, seed=5, dev=torch.device("cuda"))
    ref = reference_attention(q, k, v, causal=w.causal)
    config = validate_config(dict(BLOCK_M=128, BLOCK_N=128, num_warps=4, num_stages=2, loads="gluon_pingpong",
                                  grid="persistent"))
    variant = dataclasses.replace(gluon_variant_for(config), extra=(("EXP2_POLY", poly), ("FP8", False)))
    out = torch.empty_like(q)
    launch_gluon(q, k, v, out, causal=w.causal, scale=w.head_dim ** -0.5, variant=variant, programs=132)
    assert relative_error(out, ref) <= TOLERANCE[w.dtype], poly


def _rising_scores(w: Workload, rise_log2: float, seed: int = 11):
    """Inputs whose scores climb along the keys for every other query row (by ``rise_log2`` in
    log2 units from the first key to the last) and fall for the rows between: a rising row's
    maximum moves past LAZY_RESCALE's lag of 2^8 every few blocks while its warp's falling rows
    never move, so warps take the rescale in some blocks and skip it in others."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    dev, dtype = torch.device("cuda"), getattr(torch, w.dtype)
    shape_q = (w.batch, w.q_heads, w.q_len, w.head_dim)
    shape_k = (w.batch, w.kv_heads, w.kv_len, w.head_dim)
    u = torch.randn(w.head_dim, generator=g, device=dev)
    u = u / u.norm()
    # s_ij ~ a * b * sign_i * j / kv_len / sqrt(d) nats; a = b = the root of that in log2 units.
    a = (rise_log2 * w.head_dim ** 0.5 / LOG2_E) ** 0.5
    sign = (torch.arange(w.q_len, device=dev) % 2 * 2 - 1).float()
    q = torch.randn(shape_q, generator=g, device=dev) + a * sign[:, None] * u
    ramp = torch.arange(w.kv_len, device=dev).float() / w.kv_len
    k = torch.randn(shape_k, generator=g, device=dev) + a * ramp[:, None] * u
    v = torch.randn(shape_k, generator=g, device=dev)
    return q.to(dtype), k.to(dtype), v.to(dtype)


@pytest.mark.parametrize("head_dim", [256, 128], ids=lambda d: f"d{d}")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_maxima_that_keep_moving_match_the_float32_reference(head_dim, causal, hardware):
    """LAZY_RESCALE (on from head_dim 256 in 16 bits; 128: the plain rescale, the control) where
    half the rows' maxima climb by 80 log2 units over 2048 keys and the others never move."""
    w = Workload(2, 4, 4, 2048, 2048, head_dim, "bfloat16", causal)
    q, k, v = _rising_scores(w, rise_log2=80.0)
    assert _check_all(w, hardware, q, k, v) >= 5


def test_strided_inputs(hardware):
    # (batch, seq, heads, dim) storage viewed as (batch, heads, seq, dim): copied contiguous.
    g = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(2, 1000, 16, 128, generator=g, device="cuda").to(torch.bfloat16).transpose(1, 2)
    k, v = (torch.randn(2, 1000, 4, 128, generator=g, device="cuda").to(torch.bfloat16).transpose(1, 2)
            for _ in range(2))
    assert _check_all(Workload(2, 16, 4, 1000, 1000, 128, "bfloat16", True), hardware, q, k, v) == len(configs(128))


@pytest.mark.parametrize("case", [(128, True, 32, 8, 1000, 1000, "bfloat16"), (64, False, 16, 4, 1000, 333, "float16"),
                                  (128, True, 8, 8, 333, 1000, "float16")],
                         ids=["d128-causal-gqa", "d64-full-ragged-keys", "d128-causal-short-queries"])
@pytest.mark.parametrize("loads", ["gluon_pingpong", "gluon_pingpong_ordered", "gluon_ws", "gluon_pingpong_poly"])
@pytest.mark.parametrize("grid", ["persistent", "persistent_zigzag"])
def test_persistent_programs_loop_over_many_tiles(case, loads, grid, hardware):
    # Three programs for 64-512 tiles: the K/V ring's phases, Q's two buffers and the
    # ordered turns run on across many tiles of unequal length (causal) in one program.
    from flashtune.kernels.gluon import gluon_variant_for, launch_gluon

    w = _workload(case)
    q, k, v = make_inputs(w, seed=3, dev=torch.device("cuda"))
    ref = reference_attention(q, k, v, causal=w.causal)
    for order in ("head_major", "longest_first"):
        config = validate_config(dict(BLOCK_M=128 if loads != "gluon_ws" else 64, BLOCK_N=128, num_warps=4,
                                      num_stages=2, loads=loads, tile_order=order, grid=grid))
        for programs in (3, 5):  # the zigzag's last round: even or odd, full or not, across the cases
            out = torch.empty_like(q)
            launch_gluon(q, k, v, out, causal=w.causal, scale=w.head_dim ** -0.5, variant=gluon_variant_for(config),
                         programs=programs)
            assert relative_error(out, ref) <= TOLERANCE[w.dtype], (config.to_dict(), case, programs)
