"""The Gluon kernel (``loads`` gluon_ws / gluon_pingpong / gluon_pingpong_ordered) as part of the
declared space: its configs validate, the resource model knows what it cannot run and how
much shared memory it takes, the op refuses it where it cannot run, and (slow) it compiles
for sm90 on this CPU box without spills, within the model's shared memory.

Its numerics are GPU-only (the interpreter runs no Gluon): tests/gpu/test_gluon_gpu.py.
"""

from __future__ import annotations

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
    (dict(use_fp8=True), "no fp8 path"),
    (dict(BLOCK_M=64), "needs at least 64 rows, BLOCK_M=64 gives it 32"),  # two groups of 32 rows
    (dict(BLOCK_M=256, num_warps=8), "two 8-warp consumer groups"),
    (dict(loads="gluon_ws", BLOCK_M=32), "needs at least 64 rows"),
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


def test_the_op_refuses_it_under_the_interpreter_naming_why():
    # tests/conftest.py runs this suite under TRITON_INTERPRET=1, which runs no Gluon.
    q = torch.zeros(1, 2, 128, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="TRITON_INTERPRET"):
        flash_attention(q, q, q, causal=False, config=validate_config({**PINGPONG, "BLOCK_N": 64}))


#: (workload, knobs): the suite's shapes at the tiles timed on the H200 (BENCHMARKS.md), a
#: ragged causal GQA launch (masked per block, pointer store), and the ordered ping-pong.
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
# persistent grid (u20p) also PERSISTENT=False, the tiles grid these configs launched before.
_LAUNCHED_BEFORE = [
    (dict(PINGPONG), dict(head_dim=128, causal=True, q_len=1000, kv_len=1000),
     dict(HEAD_DIM=128, M_TILE=64, BLOCK_N=128, NUM_STAGES=2, NUM_GROUPS=2, ORDERED=False, IS_CAUSAL=True,
          LONGEST_FIRST=False, PERSISTENT=False, MASK=True, EMPTY_ROWS=False, EVEN_M=False, CONSUMER_REGS=240, PRODUCER_REGS=24,
          num_warps=4)),
    (dict(BLOCK_M=256, BLOCK_N=64, num_warps=8, num_stages=3, loads="gluon_ws", tile_order="longest_first"),
     dict(head_dim=64, causal=False, q_len=512, kv_len=333),
     dict(HEAD_DIM=64, M_TILE=256, BLOCK_N=64, NUM_STAGES=3, NUM_GROUPS=1, ORDERED=False, IS_CAUSAL=False,
          LONGEST_FIRST=False, PERSISTENT=False, MASK=True, EMPTY_ROWS=False, EVEN_M=True, CONSUMER_REGS=240, PRODUCER_REGS=24,
          num_warps=8)),
    (dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=2, loads="gluon_pingpong_ordered",
          tile_order="longest_first"),
     dict(head_dim=256, causal=True, q_len=256, kv_len=128),
     dict(HEAD_DIM=256, M_TILE=64, BLOCK_N=64, NUM_STAGES=2, NUM_GROUPS=2, ORDERED=True, IS_CAUSAL=True,
          LONGEST_FIRST=True, PERSISTENT=False, MASK=True, EMPTY_ROWS=True, EVEN_M=True, CONSUMER_REGS=240, PRODUCER_REGS=24,
          num_warps=4)),
]


@pytest.mark.parametrize("config,call,before", _LAUNCHED_BEFORE)
def test_the_launcher_passes_what_it_passed_before_and_only_what_the_kernel_declares(config, call, before):
    from flashtune.kernels._flash_fwd_gluon import gluon_attention_kernel
    from flashtune.kernels.gluon import gluon_variant_for, launch_options

    options = launch_options(gluon_variant_for(validate_config(config)), **call)
    assert options == before
    # Of the plan's constexprs the kernel does not declare (BLOCK_M, FP8, BH_MAJOR) none leaks in.
    assert set(options) <= set(gluon_attention_kernel.arg_names)
