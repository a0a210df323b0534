"""The Gluon kernel's persistent programs and their tiles (kernels/_flash_fwd_gluon.py
``_program_tiles``, ``_program_tile``; ``grid="persistent_zigzag"`` reverses the odd rounds),
run on Python ints: every tile goes to one program, and at the suite's causal shapes on the
H200's 132 SMs the zigzag evens out the key blocks the programs take.

GPU numerics of both orders: tests/gpu/test_gluon_gpu.py.
"""

from __future__ import annotations

import pytest

from flashtune.kernels._flash_fwd_gluon import _program_tile, _program_tiles

tiles_of, tile_of = _program_tiles.fn, _program_tile.fn


def _flip(first: int, step: int, zigzag: bool) -> int:
    # As gluon_attention_kernel derives it from ZIGZAG.
    return step - 1 - 2 * first if zigzag else 0


def _programs(n_tiles: int, step: int, zigzag: bool) -> list[list[int]]:
    return [[tile_of(i, p, step, _flip(p, step, zigzag)) for i in range(tiles_of(p, step, _flip(p, step, zigzag), n_tiles))]
            for p in range(step)]


@pytest.mark.parametrize("zigzag", [False, True])
@pytest.mark.parametrize("n_tiles,step", [(1, 1), (7, 7), (8, 3), (9, 3), (10, 3), (512, 5), (256, 3), (2048, 132),
                                          (4096, 132), (133, 132), (263, 132)])
def test_every_tile_goes_to_one_program(n_tiles, step, zigzag):
    programs = _programs(n_tiles, step, zigzag)
    assert sorted(t for tiles in programs for t in tiles) == list(range(n_tiles))
    if not zigzag:  # program p: tiles p, p + step, ... (the order before the zigzag)
        assert programs == [list(range(p, n_tiles, step)) for p in range(step)]


def _imbalance(q_tiles: int, heads: int, zigzag: bool, sms: int = 132) -> float:
    # Causal, head by head, each head's longest tile first: tile t has q_tiles - t % q_tiles blocks.
    work = [sum(q_tiles - t % q_tiles for t in tiles) for tiles in _programs(q_tiles * heads, sms, zigzag)]
    return max(work) / (sum(work) / len(work))


@pytest.mark.parametrize("q_tiles,heads,before,after", [
    (16, 8 * 16, 1.21, 1.04),  # 8 x 16 heads x 2048 queries in 128-row tiles (D64 causal)
    (32, 4 * 32, 1.13, 1.04),  # 4 x 32 heads x 4096 (D128 causal, and GQA's 32 query heads)
    (128, 32, 1.06, 1.04),  # 1 x 32 heads x 16384
])
def test_the_zigzag_evens_out_the_causal_blocks_over_the_h200s_programs(q_tiles, heads, before, after):
    # 132 = 4 mod 16: program p alone saw 4 of a head's 16 lengths, every round the same 4.
    assert _imbalance(q_tiles, heads, False) == pytest.approx(before, abs=0.01)
    assert _imbalance(q_tiles, heads, True) <= after
