"""The Gluon kernel (``loads`` gluon_ws / gluon_pingpong / gluon_pingpong_ordered) as part of the
declared space: its configs validate, the resource model knows what it cannot run and how
much shared memory it takes, the op refuses it where it cannot run, and (slow) it compiles
for sm90 on this CPU box without spills, within the model's shared memory.

Its numerics are GPU-only (the interpreter runs no Gluon): tests/gpu/test_gluon_gpu.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from sm90_compile import compiled_for_sm90

from flashtune.kernels import flash_attention
from flashtune.kernels.resources import known_failure, registers_per_thread, shared_memory_bytes
from flashtune.kernels.space import GLUON_LOADS, LEAN_LOADS, TUNABLES, validate_config
from flashtune.objectives.feasibility import check
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.types import Workload

PINGPONG = dict(BLOCK_M=128, BLOCK_N=128, num_warps=4, num_stages=2, loads="gluon_pingpong")


def test_its_loads_are_declared_last_and_launch_through_a_host_descriptor_launcher():
    assert TUNABLES["loads"][-len(GLUON_LOADS):] == GLUON_LOADS
    assert set(GLUON_LOADS) <= set(LEAN_LOADS)  # no key ranges, no prepared call, host descriptors
    config = validate_config(PINGPONG)
    assert config["use_fp8"] is False and config["grid"] == "tiles" and config["kernel"] == "prefill"


@pytest.mark.parametrize("knobs,reason", [
    (dict(grid="persistent", use_fp8=True), "with fp8 has no persistent grid"),
    (dict(BLOCK_M=64), "needs at least 64 rows, BLOCK_M=64 gives it 32"),  # two groups of 32 rows
    (dict(BLOCK_M=256, num_warps=8), "two 8-warp consumer groups"),
    (dict(loads="gluon_ws", BLOCK_M=32), "needs at least 64 rows"),
    (dict(grid="persistent_zigzag", use_fp8=True), "with fp8 has no persistent grid"),
    (dict(grid="persistent_zigzag", loads="lean"), "the other kernels have no zigzag order"),
])
def test_known_failures_name_the_reason(knobs, reason):
    config = validate_config({**PINGPONG, **knobs})
    assert reason in known_failure(config, (9, 0))
    verdict = check(config, Workload(2, 8, 8, 4096, 4096, 128), load_spec("h200"))
    assert not verdict.feasible and reason in verdict.reason


@pytest.mark.parametrize("capability", [(8, 0), (8, 9), (10, 0)])
def test_it_is_hopper_only(capability):
    assert "Hopper" in known_failure(validate_config(PINGPONG), capability)


def test_the_persistent_grid_is_feasible_where_two_q_buffers_and_the_ring_fit():
    h200 = load_spec("h200")
    d128, d256 = Workload(4, 32, 32, 4096, 4096, 128, causal=True), Workload(2, 16, 16, 8192, 8192, 256)
    persistent = {**PINGPONG, "grid": "persistent", "tile_order": "longest_first"}
    assert known_failure(validate_config(persistent)) == ""
    assert check(validate_config(persistent), d128, h200).feasible
    # D256: two 128-row Q buffers (128 KB) and one stage of 64-key K and V (64 KB) fit; two stages do not.
    assert check(validate_config({**persistent, "BLOCK_N": 64, "num_stages": 1}), d256, h200).feasible
    verdict = check(validate_config({**persistent, "BLOCK_N": 64}), d256, h200)
    assert not verdict.feasible and "shared memory" in verdict.reason


def test_the_persistent_grid_launches_at_most_the_programs_asked_for_and_never_more_than_the_tiles():
    from flashtune.kernels.gluon import gluon_grid, gluon_variant_for, launch_options

    tiles = gluon_variant_for(validate_config(PINGPONG))
    persistent = gluon_variant_for(validate_config({**PINGPONG, "grid": "persistent"}))
    assert persistent.persistent and not tiles.persistent
    # 16 query tiles of 128 rows (2048 rows, the last one ragged) x 8 (batch, head)s.
    assert gluon_grid(tiles, q_len=2000, batch_heads=8, programs=132) == (16, 8)
    assert gluon_grid(persistent, q_len=2000, batch_heads=8, programs=132) == (128,)
    assert gluon_grid(persistent, q_len=2000, batch_heads=16, programs=132) == (132,)
    assert launch_options(persistent, head_dim=128, causal=False, q_len=2000, kv_len=2000)["PERSISTENT"] is True


def test_feasible_at_fa3s_tiles_on_the_h200_and_refused_past_its_shared_memory():
    h200 = load_spec("h200")
    d128, d256 = Workload(4, 32, 32, 4096, 4096, 128), Workload(2, 16, 16, 8192, 8192, 256)
    for loads in GLUON_LOADS[1:]:
        assert check(validate_config({**PINGPONG, "loads": loads}), d128, h200).feasible
        assert check(validate_config({**PINGPONG, "loads": loads, "BLOCK_N": 64}), d256, h200).feasible
        # 128 rows of Q plus two stages of 128-key K and V tiles at D256: 256 KB.
        verdict = check(validate_config({**PINGPONG, "loads": loads}), d256, h200)
        assert not verdict.feasible and "shared memory" in verdict.reason


def test_shared_memory_is_q_plus_the_ring_and_two_groups_split_the_registers():
    # Compiled for sm90 (tests below): 164,136 B at this tile, D128, bf16.
    assert shared_memory_bytes(validate_config(PINGPONG), head_dim=128) == 128 * 128 * 2 + 2 * 2 * 128 * 128 * 2 + 512
    # A persistent grid double-buffers Q (196,968 B compiled).
    persistent = validate_config({**PINGPONG, "grid": "persistent"})
    assert shared_memory_bytes(persistent, head_dim=128) == 2 * 128 * 128 * 2 + 2 * 2 * 128 * 128 * 2 + 512
    one_group = validate_config({**PINGPONG, "loads": "gluon_ws"})
    assert registers_per_thread(one_group, head_dim=128) > registers_per_thread(validate_config(PINGPONG), head_dim=128)


def test_fp8_is_part_of_the_space_with_one_byte_tiles():
    # Compiled for sm90 (the slow test below): 82,232 B at 128x128 D128 fp8, Q plus the ring in
    # 1-byte elements (the output goes out by the pointer store, no staging buffer).
    h200 = load_spec("h200")
    fp8 = validate_config({**PINGPONG, "use_fp8": True})
    assert known_failure(fp8, (9, 0)) == ""
    assert shared_memory_bytes(fp8, head_dim=128) == 128 * 128 + 2 * 2 * 128 * 128 + 512
    for loads in GLUON_LOADS:
        for knobs, workload in [(dict(BLOCK_N=128), Workload(2, 32, 32, 8192, 8192, 128)),
                                (dict(BLOCK_N=64), Workload(2, 32, 32, 8192, 8192, 128)),
                                (dict(BLOCK_N=64), Workload(2, 16, 16, 8192, 8192, 256))]:
            config = validate_config({**fp8, "loads": loads, **knobs,
                                      **({"BLOCK_M": 64} if loads == "gluon_ws" else {})})
            assert check(config, workload, h200).feasible, (loads, knobs, workload)


def _quantized(batch=2, kv_heads=2, q_len=100, kv_len=77, head_dim=64, q_heads=4):
    from flashtune.kernels.attention import quantize_fp8

    g = torch.Generator().manual_seed(0)
    q = torch.randn(batch, q_heads, q_len, head_dim, generator=g, dtype=torch.float16)
    k, v = (torch.randn(batch, kv_heads, kv_len, head_dim, generator=g, dtype=torch.float16) for _ in range(2))
    return (q, k, v), quantize_fp8(q, k, v)


def test_the_fp8_v_descriptor_reads_quantize_fp8s_v_transposed_tile_by_tile():
    """The producer loads fp8 V^T at [head's first row, block * BLOCK_N] of the flat
    [batch * kv_heads * head_dim, kv_len] descriptor (kernels/_flash_fwd_gluon.py): read
    that way, through the descriptor's own shape and strides, every block is V's block
    transposed, and the ragged tail past kv_len is outside the descriptor (TMA: zeros)."""
    from flashtune.kernels.attention import FP8_MAX, fp8_v_row
    from flashtune.kernels.gluon import _flat_descriptor

    (_, _, v), (_, _, v8_t, scales) = _quantized()
    batch, kv_heads, kv_len, head_dim = v.shape
    block_n = 32
    desc = _flat_descriptor(v8_t, [head_dim, block_n])
    assert list(desc.shape) == [batch * kv_heads * head_dim, kv_len]
    assert list(desc.strides) == [fp8_v_row(kv_len), 1] and list(desc.block_shape) == [head_dim, block_n]
    rows = torch.as_strided(desc.base, list(desc.shape), list(desc.strides))
    for z in range(batch):
        for h in range(kv_heads):
            v_row = (z * kv_heads + h) * head_dim  # the kernel's v_row under FP8
            for start_n in range(0, kv_len, block_n):  # block j at column j * BLOCK_N
                tile = rows[v_row:v_row + head_dim, start_n:start_n + block_n].float()
                keys = v[z, h, start_n:start_n + block_n].float() / float(scales[2])
                assert tile.shape == (head_dim, min(block_n, kv_len - start_n))
                # e4m3 keeps 3 mantissa bits: within 1/16 of each value's magnitude (and of FP8_MAX's scale).
                assert torch.allclose(tile.T, keys, rtol=1 / 16, atol=FP8_MAX * 2 ** -9)


def test_an_fp8_config_is_refused_with_16_bit_inputs_and_a_16_bit_config_with_fp8_ones():
    from flashtune.kernels.gluon import gluon_variant_for, launch_gluon

    (q, k, v), (q8, k8, v8_t, scales) = _quantized()
    out = torch.empty_like(q)
    fp8 = gluon_variant_for(validate_config({**PINGPONG, "BLOCK_N": 64, "use_fp8": True}))
    bf16 = gluon_variant_for(validate_config({**PINGPONG, "BLOCK_N": 64}))
    with pytest.raises(ValueError, match="e4m3 q, k, V\\^T and their scales"):
        launch_gluon(q, k, v, out, causal=False, scale=0.125, programs=1, variant=fp8, scales=scales)
    with pytest.raises(ValueError, match="scales=none"):
        launch_gluon(q8, k8, v8_t, out, causal=False, scale=0.125, programs=1, variant=fp8)
    with pytest.raises(ValueError, match="fp8 V must be V\\^T"):  # V as it was, not transposed
        launch_gluon(q8, k8, k8, out, causal=False, scale=0.125, programs=1, variant=fp8, scales=scales)
    with pytest.raises(ValueError, match="a use_fp8=True config"):
        launch_gluon(q8, k8, v8_t, out, causal=False, scale=0.125, programs=1, variant=bf16)
    with pytest.raises(ValueError, match="writes fp16 or bf16"):
        launch_gluon(q8, k8, v8_t, torch.empty(q.shape, dtype=torch.float8_e4m3fn), causal=False, scale=0.125, programs=1,
                     variant=fp8, scales=scales)
    # Inputs as the variant reads them: past every check, refused only for the interpreter.
    with pytest.raises(ValueError, match="TRITON_INTERPRET"):
        launch_gluon(q8, k8, v8_t, out, causal=False, scale=0.125, programs=1, variant=fp8, scales=scales)


def test_the_op_quantizes_for_an_fp8_gluon_config_and_reaches_its_launcher():
    # flash_attention -> launch -> quantize_fp8 -> launch_quantized -> launch_gluon, as for the
    # other kernels' fp8: the call gets as far as the interpreter refusal (no Gluon there).
    (q, k, v), _ = _quantized()
    config = validate_config({**PINGPONG, "BLOCK_N": 64, "use_fp8": True})
    with pytest.raises(ValueError, match="TRITON_INTERPRET"):
        flash_attention(q, k, v, causal=True, config=config)


def test_the_op_refuses_it_under_the_interpreter_naming_why():
    # tests/conftest.py runs this suite under TRITON_INTERPRET=1, which runs no Gluon.
    q = torch.zeros(1, 2, 128, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="TRITON_INTERPRET"):
        flash_attention(q, q, q, causal=False, config=validate_config({**PINGPONG, "BLOCK_N": 64}))


#: (workload, knobs): the suite's shapes at the tiles timed on the H200 (BENCHMARKS.md), a
#: ragged causal GQA launch (masked per block, pointer store), and the ordered ping-pong;
#: fp8 (e4m3, V^T) at the tiles issue 20 part F times: 128x128 and 128x64 at D128, 128x64
#: at D256, free-running and ordered, and ragged causal GQA.
FP8 = {**PINGPONG, "use_fp8": True}
CASES = [
    ("4,32,4096,128", PINGPONG),
    ("2,16,8192,256", {**PINGPONG, "BLOCK_N": 64}),
    ("16,16,1024,64", {**PINGPONG, "BLOCK_M": 256, "BLOCK_N": 64, "num_stages": 3}),
    ("2,32/8,1000,128", PINGPONG),
    ("4,32,4096,128", {**PINGPONG, "loads": "gluon_pingpong_ordered"}),
    # The persistent grid: the suite's D64 and D128 tiles, ordered, causal longest-first with
    # GQA and ragged lengths (a tile's rows clipped by the TMA store), one group, D256 at 32 keys
    # (128x64 with its one stage that fits spilled 20 words).
    ("16,16,1024,64", {**PINGPONG, "grid": "persistent"}),
    ("4,32,4096,128", {**PINGPONG, "grid": "persistent"}),
    ("4,32,4096,128", {**PINGPONG, "loads": "gluon_pingpong_ordered", "grid": "persistent"}),
    ("2,32/8,1000,128,causal", {**PINGPONG, "grid": "persistent", "tile_order": "longest_first"}),
    ("16,16,1024,64", {**PINGPONG, "loads": "gluon_ws", "BLOCK_M": 64, "grid": "persistent"}),
    ("2,16,8192,256", {**PINGPONG, "BLOCK_N": 32, "grid": "persistent"}),
    ("2,32,8192,128", FP8),
    ("2,32,8192,128", {**FP8, "BLOCK_N": 64}),
    ("2,16,8192,256", {**FP8, "BLOCK_N": 64}),
    ("2,16,8192,256", {**FP8, "BLOCK_N": 64, "loads": "gluon_pingpong_ordered"}),
    ("2,32/8,1000,128,causal", FP8),
    # The zigzag persistent grid: the causal D64 and D128 tiles, ordered, ragged causal GQA.
    ("8,16,2048,64,causal", {**PINGPONG, "grid": "persistent_zigzag"}),
    ("4,32,4096,128,causal", {**PINGPONG, "grid": "persistent_zigzag", "tile_order": "longest_first"}),
    ("4,32,4096,128,causal", {**PINGPONG, "loads": "gluon_pingpong_ordered", "grid": "persistent_zigzag"}),
    ("2,32/8,1000,128,causal", {**PINGPONG, "grid": "persistent_zigzag", "tile_order": "longest_first"}),
    # The polynomial share of exp2 (gluon_pingpong_poly): D64 full persistent, fp8 at D128.
    ("16,16,1024,64", {**PINGPONG, "loads": "gluon_pingpong_poly", "grid": "persistent"}),
    ("2,32,8192,128", {**FP8, "loads": "gluon_pingpong_poly"}),
]

@pytest.mark.slow
def test_compiles_for_sm90_without_spills_within_the_modelled_shared_memory() -> None:
    got = compiled_for_sm90(CASES, timeout=900)
    for (workload, knobs), (registers, spills, shared) in zip(CASES, got):
        w = Workload.parse(workload)
        predicted = shared_memory_bytes(validate_config(knobs), head_dim=w.head_dim)
        # Two 4-warp consumer groups and the producer warp: 12 warps at launch (168 registers
        # each); setmaxnreg moves the producer's to the consumers.
        # One consumer group: 5 warps at launch, the register cap (255).
        expected = 168 if knobs["loads"] != "gluon_ws" else 255
        assert registers == expected and spills == 0, (workload, knobs, registers, spills)
        assert predicted - 512 <= shared <= predicted, (workload, shared, predicted)


# What the launcher passed the kernel before it took the plan's constexprs by name (the
# hand-built dict of kernels/gluon.py at 1864018), for a config of each schedule; since the
# persistent grid (u20p) also PERSISTENT=False, the tiles grid these configs launched before,
# and since the fp8 path (u20f) the plan's FP8, which the kernel declares; since u20f's second
# part the fp8 P form (FP8_P, the launcher's: "exp2" unless V^T comes in FA3's key order).
# Since 2026-12-04c LAZY_RESCALE, the launcher's: on for 16-bit variants from head_dim 256.
_LAUNCHED_BEFORE = [
    (dict(PINGPONG), dict(head_dim=128, causal=True, q_len=1000, kv_len=1000),
     dict(HEAD_DIM=128, M_TILE=64, BLOCK_N=128, NUM_STAGES=2, NUM_GROUPS=2, ORDERED=False, IS_CAUSAL=True,
          LONGEST_FIRST=False, PERSISTENT=False, MASK=True, EMPTY_ROWS=False, EVEN_M=False, CONSUMER_REGS=240, PRODUCER_REGS=24,
          num_warps=4, FP8=False, FP8_P="exp2", LAZY_RESCALE=False)),
    (dict(BLOCK_M=256, BLOCK_N=64, num_warps=8, num_stages=3, loads="gluon_ws", tile_order="longest_first"),
     dict(head_dim=64, causal=False, q_len=512, kv_len=333),
     dict(HEAD_DIM=64, M_TILE=256, BLOCK_N=64, NUM_STAGES=3, NUM_GROUPS=1, ORDERED=False, IS_CAUSAL=False,
          LONGEST_FIRST=False, PERSISTENT=False, MASK=True, EMPTY_ROWS=False, EVEN_M=True, CONSUMER_REGS=240, PRODUCER_REGS=24,
          num_warps=8, FP8=False, FP8_P="exp2", LAZY_RESCALE=False)),
    (dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=2, loads="gluon_pingpong_ordered",
          tile_order="longest_first"),
     dict(head_dim=256, causal=True, q_len=256, kv_len=128),
     dict(HEAD_DIM=256, M_TILE=64, BLOCK_N=64, NUM_STAGES=2, NUM_GROUPS=2, ORDERED=True, IS_CAUSAL=True,
          LONGEST_FIRST=True, PERSISTENT=False, MASK=True, EMPTY_ROWS=True, EVEN_M=True, CONSUMER_REGS=240, PRODUCER_REGS=24,
          num_warps=4, FP8=False, FP8_P="exp2", LAZY_RESCALE=True)),
    # fp8 (issue 20 part F): the plan's FP8, which the kernel now declares, reaches it as it is.
    (dict(PINGPONG, use_fp8=True), dict(head_dim=128, causal=False, q_len=4096, kv_len=4096),
     dict(HEAD_DIM=128, M_TILE=64, BLOCK_N=128, NUM_STAGES=2, NUM_GROUPS=2, ORDERED=False, IS_CAUSAL=False,
          LONGEST_FIRST=False, PERSISTENT=False, MASK=False, EMPTY_ROWS=False, EVEN_M=True, CONSUMER_REGS=240,
          PRODUCER_REGS=24, num_warps=4, FP8=True, FP8_P="exp2", LAZY_RESCALE=False)),
]


@pytest.mark.parametrize("config,call,before", _LAUNCHED_BEFORE)
def test_the_launcher_passes_what_it_passed_before_and_only_what_the_kernel_declares(config, call, before):
    from flashtune.kernels._flash_fwd_gluon import gluon_attention_kernel
    from flashtune.kernels.gluon import gluon_variant_for, launch_options

    options = launch_options(gluon_variant_for(validate_config(config)), **call)
    assert options == before
    # Of the plan's constexprs the kernel does not declare (BLOCK_M, BH_MAJOR) none leaks in.
    assert set(options) <= set(gluon_attention_kernel.arg_names)


def test_lazy_rescaling_is_on_for_16_bit_variants_from_head_dim_256_only():
    from flashtune.kernels.gluon import LAZY_RESCALE_MIN_HEAD_DIM, gluon_variant_for, launch_options

    call = dict(causal=False, q_len=4096, kv_len=4096)
    for fp8 in (False, True):
        variant = gluon_variant_for(validate_config({**PINGPONG, "BLOCK_N": 64, "use_fp8": fp8}))
        lazy = {d: launch_options(variant, head_dim=d, **call)["LAZY_RESCALE"] for d in (64, 128, 256)}
        assert LAZY_RESCALE_MIN_HEAD_DIM == 256
        assert lazy == {64: False, 128: False, 256: not fp8}, (fp8, lazy)


#: Compiles a Gluon config for sm90 (a child process: the suite runs under TRITON_INTERPRET) and
#: prints whether the PV wait follows the block's exponentials.
_SCHEDULE_CHILD = """
import json, sys
from sass_count import compiled_sass, pv_wait_follows_the_exponentials
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.types import Workload
config, workload = json.loads(sys.stdin.read())
print(json.dumps(pv_wait_follows_the_exponentials(compiled_sass(config, Workload.parse(workload), load_spec("h200"))[0])))
"""


@pytest.mark.slow
@pytest.mark.parametrize("workload,knobs", [("4,32,4096,128", PINGPONG),
                                            ("2,32,8192,128", {**FP8, "loads": "gluon_pingpong_poly"})],
                         ids=["bf16-d128", "fp8-d128-poly"])
def test_ptxas_places_the_pv_wait_ahead_of_the_exponentials(workload, knobs):
    # The kernel's docstring says so, and the choice to keep that schedule rests on it: ptxas
    # keeps waits, barriers and mbarrier arrivals in program order but moves arithmetic across
    # them, so the PV product's wait, written after the block's softmax, lands before its
    # exponentials. If a Triton or ptxas update changes this, re-time the overlap it then gives
    # (docs/results/overlap-2026-12-05/overlap-pv.patch measured holding the wait down by hand).
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    # sass_count is a lab tool (docs/lab/tools/), outside the package.
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2] / "docs" / "lab" / "tools"),
                                         *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, "-c", _SCHEDULE_CHILD], input=json.dumps([knobs, workload]),
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) is False

