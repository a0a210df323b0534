"""Packed variable-length prefill (``flash_attention_varlen``) against a float32 reference
computed on each sequence alone with torch SDPA, and its bad inputs.

Lengths mix 0, 1, a ragged tile and more than one tile; causal is aligned bottom-right per
sequence (chunked prefill: fewer queries than keys). CPU interpreter, float32 (one float16
case); the GPU's bf16 is not covered here.
"""

import itertools
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from flashtune.kernels import SAFE_DEFAULT, Config, flash_attention, flash_attention_varlen, varlen
from flashtune.objectives.hardware import load_spec

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter suite; tests/gpu covers the GPU")

TOL = {torch.float16: 5e-3, torch.float32: 1e-5}
SMALL = Config(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2)
LENGTHS = [0, 1, 5, 17, 33]


def _cumulative(lengths):
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)


def _packed(q_lens, k_lens, hq=4, hkv=2, d=32, dtype=torch.float32, seed=0):
    """Packed q, k, v of these per-sequence lengths and their cumulative lengths."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(q_lens), hq, d, generator=g).to(dtype)
    k = torch.randn(sum(k_lens), hkv, d, generator=g).to(dtype)
    v = torch.randn(sum(k_lens), hkv, d, generator=g).to(dtype)
    return q, k, v, _cumulative(q_lens), _cumulative(k_lens)


def _reference(q, k, v, cu_q, cu_k, causal, scale=None):
    """Each sequence alone through SDPA in float32, causal by an explicit bottom-right mask;
    rows that see no key are zeros (the kernels' contract, where SDPA's softmax has none)."""
    out = torch.zeros(q.shape, dtype=torch.float32)
    group = q.shape[1] // k.shape[1]
    for b in range(cu_q.numel() - 1):
        qs, qe, ks, ke = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        q_len, k_len = qe - qs, ke - ks
        if q_len == 0 or k_len == 0:
            continue
        keep = torch.ones(q_len, k_len, dtype=torch.bool)
        if causal:
            keep = torch.arange(k_len)[None, :] <= torch.arange(q_len)[:, None] + (k_len - q_len)
        qb = q[qs:qe].float().transpose(0, 1)
        kb = k[ks:ke].float().transpose(0, 1).repeat_interleave(group, dim=0)
        vb = v[ks:ke].float().transpose(0, 1).repeat_interleave(group, dim=0)
        rows = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=keep, scale=scale).transpose(0, 1)
        out[qs:qe] = torch.where(keep.any(dim=1)[:, None, None], rows, 0.0)
    return out


def _check(q_lens, k_lens, causal, config=None, dtype=torch.float32, scale=None, **shape):
    q, k, v, cu_q, cu_k = _packed(q_lens, k_lens, dtype=dtype, **shape)
    out = flash_attention_varlen(q, k, v, cu_q, cu_k, max(q_lens), max(k_lens), causal=causal, scale=scale,
                                 config=config)
    assert out.shape == q.shape and out.dtype == q.dtype
    ref = _reference(q, k, v, cu_q, cu_k, causal, scale)
    err = (torch.linalg.vector_norm(out.float() - ref) / torch.linalg.vector_norm(ref)).item()
    assert err < TOL[dtype], f"relative error {err:.2e}"
    return out


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("config", [None, SMALL, Config(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=1)])
def test_mixed_lengths_match_each_sequence_alone(causal, config):
    # GQA 4/2; an empty sequence, one of length 1, a ragged tile and one over a tile.
    _check(LENGTHS, LENGTHS, causal, config)


@pytest.mark.parametrize("causal", [False, True])
def test_chunked_prefill_fewer_queries_than_keys(causal):
    # A chunk of a prompt whose earlier chunks are cached: its queries are the last of its keys.
    _check([3, 1, 16, 0, 9, 33], [40, 1, 16, 7, 9, 70], causal, SMALL, hkv=1)


def test_rows_that_see_no_key_are_zeros_as_in_the_dense_op():
    # More queries than keys: under the bottom-right alignment the first 6 queries of the
    # first sequence see nothing; the second sequence has no keys at all.
    q, k, v, cu_q, cu_k = _packed([10, 5], [4, 0])
    out = flash_attention_varlen(q, k, v, cu_q, cu_k, 10, 4, causal=True, config=SMALL)
    assert torch.count_nonzero(out[:6]) == 0 and torch.count_nonzero(out[10:]) == 0
    assert torch.allclose(out, _reference(q, k, v, cu_q, cu_k, True), atol=1e-6)
    dense = flash_attention(q[:10].transpose(0, 1)[None], k[:4].transpose(0, 1)[None], v[:4].transpose(0, 1)[None],
                            causal=True, config=SMALL)
    assert torch.equal(out[:10], dense[0].transpose(0, 1))


@pytest.mark.parametrize("causal", [False, True])
def test_one_sequence_equals_the_dense_op(causal):
    q, k, v, cu_q, cu_k = _packed([45], [70])
    out = flash_attention_varlen(q, k, v, cu_q, cu_k, 45, 70, causal=causal, config=SMALL)
    dense = flash_attention(*(t.transpose(0, 1)[None] for t in (q, k, v)), causal=causal, config=SMALL)
    assert torch.equal(out, dense[0].transpose(0, 1))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hq,hkv,config", [(4, 2, SMALL), (8, 1, SMALL), (8, 2, Config(BLOCK_M=64, BLOCK_N=32,
                                                                                        num_warps=4, num_stages=1))],
                         ids=["group2", "group8-four-queries-a-tile", "group4-64-rows"])
def test_packed_query_heads_give_what_a_tile_per_head_gives(causal, hq, hkv, config, monkeypatch):
    # A K/V group's query heads as a tile's rows (pack-GQA): mixed lengths with 0 and 1, a
    # chunk with cached keys, a sequence with keys and no queries, against the reference and
    # the unpacked tiles.
    q_lens, k_lens = [3, 1, 16, 0, 9, 33, 0], [40, 1, 16, 7, 9, 70, 0]
    monkeypatch.setattr(varlen, "PACK_GQA", True)
    assert varlen.packed_group(hq // hkv, config["BLOCK_M"]) == hq // hkv
    packed = _check(q_lens, k_lens, causal, config, hq=hq, hkv=hkv)
    q, k, v, cu_q, cu_k = _packed(q_lens, k_lens, hq=hq, hkv=hkv)
    # The argument overrides the module's flag (the sanitizer's cases name the path they run).
    one_head = flash_attention_varlen(q, k, v, cu_q, cu_k, 33, 70, causal=causal, config=config, pack_gqa=False)
    assert torch.allclose(packed, one_head, atol=1e-6, rtol=0)


@pytest.mark.parametrize("flag,argument,packed", [(True, False, False), (False, True, True), (True, None, True),
                                                  (False, None, False)])
def test_the_pack_gqa_argument_overrides_the_ops_flag(flag, argument, packed, monkeypatch):
    # The sanitizer's cases name the path they run, whatever the op launches today.
    groups = []
    real = varlen.packed_group  # consulted only where a launch packs
    monkeypatch.setattr(varlen, "packed_group", lambda *a: groups.append(real(*a)) or groups[-1])
    monkeypatch.setattr(varlen, "PACK_GQA", flag)
    q, k, v, cu_q, cu_k = _packed([5, 1], [9, 4], hq=8, hkv=2)
    out = flash_attention_varlen(q, k, v, cu_q, cu_k, 5, 9, causal=True, config=SMALL, pack_gqa=argument)
    assert groups == ([4] if packed else [])
    one_head = flash_attention_varlen(q, k, v, cu_q, cu_k, 5, 9, causal=True, config=SMALL, pack_gqa=False)
    assert torch.allclose(out, one_head, atol=1e-6, rtol=0)


def test_packed_tiles_leave_padding_rows_alone_and_take_64_bit_offsets(monkeypatch):
    monkeypatch.setattr(varlen, "PACK_GQA", True)
    q, k, v, cu_q, cu_k = _packed([5, 17], [5, 20], hq=8, hkv=2)
    q = torch.cat([q, torch.full((3, 8, 32), 7.0)])  # 3 rows past the last sequence
    out = torch.full_like(q, 7.0)
    varlen.launch_varlen(q, k, v, out, cu_q, cu_k, 17, causal=True, scale=32 ** -0.5, config=SMALL)
    assert torch.all(out[22:] == 7.0)  # never written
    monkeypatch.setattr(varlen, "INT32_OFFSETS", 1)
    wide = flash_attention_varlen(q, k, v, cu_q, cu_k, 17, 20, causal=True, config=SMALL)
    assert torch.equal(wide[:22], out[:22])


#: A continuous batch's step: one chunk among decoding sequences, empty ones, rows whose start
#: is not a tile's.
STEP_Q = [1, 0, 2] * 6 + [45, 1, 3]
STEP_K = [9, 4, 2] * 6 + [60, 1, 3]


@pytest.mark.parametrize("pack", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_tiles_by_packed_rows_give_what_tiles_by_the_longest_give(causal, pack):
    q, k, v, cu_q, cu_k = _packed(STEP_Q, STEP_K, hq=8, hkv=2)
    q = torch.cat([q, torch.full((5, 8, 32), 7.0)])  # rows past the last sequence: never written
    rows = sum(STEP_Q)
    longest = flash_attention_varlen(q, k, v, cu_q, cu_k, 45, 60, causal=causal, config=SMALL, pack_gqa=pack,
                                     grid_by="longest")
    out = flash_attention_varlen(q, k, v, cu_q, cu_k, 45, 60, causal=causal, config=SMALL, pack_gqa=pack,
                                 grid_by="tokens")
    assert torch.equal(out[:rows], longest[:rows])
    torch.testing.assert_close(out[:rows], _reference(q[:rows], k, v, cu_q, cu_k, causal), atol=1e-5, rtol=1e-5)


def test_a_slot_finds_its_sequence_past_the_first_search_block():
    # The kernel reads the cumulative lengths 128 sequences at a time: 153 take two reads.
    q_lens, k_lens = [1, 0, 2] * 50 + [45, 1, 3], [9, 4, 2] * 50 + [60, 1, 3]
    q, k, v, cu_q, cu_k = _packed(q_lens, k_lens, hq=1, hkv=1)
    by = {g: flash_attention_varlen(q, k, v, cu_q, cu_k, 45, 60, causal=True, config=SMALL, grid_by=g)
          for g in ("longest", "tokens")}
    assert torch.equal(by["tokens"], by["longest"]) and torch.count_nonzero(by["tokens"][-49:]) > 0


def test_the_grid_follows_the_longest_sequence_or_the_packed_rows():
    # 64 sequences, one of 2,048 queries: by the longest, 64 x 32 tiles of 64 rows; by packed
    # rows, (2,048 + 63) // 64 + 64 slots. "auto" takes the rows where they halve the programs.
    assert varlen.tiles_by("longest", 2048, 2111, 64, 64) == (2048, False)
    assert varlen.tiles_by("tokens", 2048, 2111, 64, 64) == (96, True)
    assert varlen.tiles_by("auto", 2048, 2111, 64, 64) == (96, True)
    # Equal lengths, 64 x 256: the longest's 256 tiles against 320 slots.
    assert varlen.tiles_by("auto", 256, 64 * 256, 64, 64) == (256, False)
    assert varlen.tiles_by("auto", 64, 64, 64, 64) == (64, False)  # a decode step: 1 tile a sequence


def test_unchecked_lengths_stay_inside_the_buffers_with_tiles_by_packed_rows():
    # Lengths that decrease (unchecked) send a slot's search to some sequence; its rows are clamped.
    q, k, v, _, _ = _packed([12], [10])
    bad_q = torch.tensor([0, 9, 3, 40, 2], dtype=torch.int32)
    bad_k = torch.tensor([0, 8, 90, 1, 5], dtype=torch.int32)
    out = flash_attention_varlen(q, k, v, bad_q, bad_k, 40, 90, causal=True, config=SMALL, check_lengths=False,
                                 grid_by="tokens")
    assert torch.isfinite(out[:9]).all()


def test_a_group_that_does_not_divide_the_tile_is_not_packed():
    assert varlen.packed_group(7, 64) == 1 and varlen.packed_group(1, 64) == 1 and varlen.packed_group(4, 32) == 4


def test_multi_query_head_dim_64_and_a_custom_scale():
    _check([7, 0, 40], [7, 3, 40], True, SMALL, scale=0.3, hq=8, hkv=1, d=64)


def test_float16():
    _check(LENGTHS, LENGTHS, True, SMALL, dtype=torch.float16)


def test_heads_strided_inside_a_fused_qkv_and_a_generous_max_seqlen():
    # transformers' fused projections give q, k, v as views of one (tokens, 3 x heads, dim)
    # buffer: the row stride is 3 x heads x dim. A max_seqlen above the longest only adds
    # programs that return at once.
    g = torch.Generator().manual_seed(2)
    qkv = torch.randn(sum(LENGTHS), 3 * 2, 32, generator=g)
    q, k, v = qkv[:, 0:2], qkv[:, 2:4], qkv[:, 4:6]
    cu = _cumulative(LENGTHS)
    out = flash_attention_varlen(q, k, v, cu, cu, 100, 100, causal=True, config=SMALL)
    assert torch.allclose(out, _reference(q, k, v, cu, cu, True), atol=1e-5)


def test_a_padded_step_leaves_its_padding_rows_alone():
    # transformers' continuous batching pads a step's queries and keys to a captured graph's
    # size: the rows past each last cumulative length belong to no sequence.
    q, k, v, cu_q, cu_k = _packed([3, 6], [8, 6])
    q_pad, k_pad, v_pad = (torch.cat([x, torch.full((4, *x.shape[1:]), 7.0)]) for x in (q, k, v))
    out = flash_attention_varlen(q_pad, k_pad, v_pad, cu_q, cu_k, 8, 8, causal=True, config=SMALL)
    ref = _reference(q, k, v, cu_q, cu_k, True)
    torch.testing.assert_close(out[:9], ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_keys_past_a_sequence_never_reach_its_rows_even_non_finite_ones(causal):
    # The causal band masks scores by causality alone (it implies key < keys for every stored
    # row); the keys after a ragged sequence, another sequence's or padding, must still never
    # be read into it: here they are inf and NaN, which a zero weight would not cancel.
    q, k, v, cu_q, cu_k = _packed([5, 3, 20], [21, 3, 45])
    ref = _reference(q, k, v, cu_q, cu_k, causal)
    k, v = k.clone(), v.clone()
    k[21:24], v[21:24] = float("inf"), float("nan")  # the second sequence's keys
    k[24 + 45 - 1] = float("nan")  # the last key of the third sequence: seen by its last query only
    out = flash_attention_varlen(q, k, v, cu_q, cu_k, 20, 45, causal=causal, config=SMALL)
    torch.testing.assert_close(out[:5], ref[:5], atol=1e-5, rtol=1e-5)
    if causal:  # the third sequence's rows before its last see no NaN key
        torch.testing.assert_close(out[8:27], ref[8:27], atol=1e-5, rtol=1e-5)
        assert out[27].isnan().all()


def test_unchecked_lengths_are_clamped_to_the_buffers():
    # check_lengths=False reads nothing on the host: lengths past the buffers must still
    # keep every access inside them (the kernel clamps), and the sequences inside are right.
    q, k, v, cu_q, cu_k = _packed([3, 6], [8, 6])
    bad_q = torch.tensor([0, 3, 40], dtype=torch.int32)  # the last sequence runs past q's 9 rows
    bad_k = torch.tensor([0, 8, 90], dtype=torch.int32)
    out = flash_attention_varlen(q, k, v, bad_q, bad_k, 40, 90, causal=True, config=SMALL, check_lengths=False)
    ref = _reference(q, k, v, cu_q, cu_k, True)
    torch.testing.assert_close(out[:3], ref[:3], atol=1e-5, rtol=1e-5)
    assert torch.isfinite(out).all()


def test_no_query_rows_launch_nothing():
    q, k, v, cu_q, cu_k = _packed([0, 0], [3, 0])
    assert flash_attention_varlen(q, k, v, cu_q, cu_k, 0, 3, causal=True).shape == (0, 4, 32)
    q, k, v, cu_q, cu_k = _packed([], [])
    assert flash_attention_varlen(q, k, v, cu_q, cu_k, 0, 0).shape == (0, 4, 32)


def _call(**changes):
    """flash_attention_varlen on a valid batch of LENGTHS, with some arguments replaced."""
    q, k, v, cu_q, cu_k = _packed(LENGTHS, LENGTHS)
    args = dict(q=q, k=k, v=v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=33, max_seqlen_k=33)
    args.update({name: change(args[name]) if callable(change) else change for name, change in changes.items()})
    return flash_attention_varlen(**args)


@pytest.mark.parametrize(
    "changes,error,match",
    [
        (dict(q=lambda q: q[None]), ValueError, r"q must have rank 3 \(total_q, q_heads, head_dim\)"),
        (dict(k=lambda k: k.half()), TypeError, "q, k, v must share one dtype"),
        (dict(v=lambda v: v.to(torch.int32)), TypeError, "v.dtype must be float16, bfloat16 or float32"),
        (dict(v=lambda v: v[:-1]), ValueError, "k and v must have the same shape"),
        (dict(v=lambda v: v.transpose(1, 2).contiguous().transpose(1, 2)), ValueError,
         "v must be contiguous in its last dim"),
        (dict(q=lambda q: q[..., :16], k=lambda k: k[..., :16], v=lambda v: v[..., :16]), ValueError,
         r"head_dim must be one of \[32, 64, 128, 256\], got 16"),
        (dict(q=lambda q: q[:, :3]), ValueError, r"q heads \(3\) must be a positive multiple of k/v heads \(2\)"),
        (dict(cu_seqlens_q=lambda c: c.long()), ValueError, "cu_seqlens_q.dtype must be torch.int32"),
        (dict(cu_seqlens_k=lambda c: c[None]), ValueError, "cu_seqlens_k must be 1-D with batch \\+ 1 entries"),
        (dict(cu_seqlens_q=[0, 1]), ValueError, "cu_seqlens_q must be a torch.Tensor of int32"),
        (dict(cu_seqlens_q=lambda c: c.to("meta")), ValueError, "cu_seqlens_q must be on q's device cpu"),
        (dict(cu_seqlens_q=lambda c: c + 1), ValueError, r"cu_seqlens_q\[0\] must be 0, got 1"),
        (dict(cu_seqlens_k=torch.tensor([0, 5, 1, 6, 23, 56], dtype=torch.int32)), ValueError,
         r"cu_seqlens_k must not decrease, got cu_seqlens_k\[1\] = 5 > cu_seqlens_k\[2\] = 1"),
        (dict(k=lambda k: k[:50], v=lambda v: v[:50]), ValueError,
         r"cu_seqlens_k\[-1\] = 56 must be at most total_k \(k.shape\[0\]\) = 50"),
        (dict(q=lambda q: q[:23], cu_seqlens_q=lambda c: c[:-1]), ValueError,
         "cu_seqlens_q and cu_seqlens_k must have one entry per sequence plus one, got 5 and 6"),
        (dict(max_seqlen_q=16), ValueError, "max_seqlen_q = 16 is shorter than sequence 4's 33 queries"),
        (dict(max_seqlen_k=-1), ValueError, "max_seqlen_k must be an int >= 0, got -1"),
        (dict(max_seqlen_k=33.0), ValueError, "max_seqlen_k must be an int >= 0, got 33.0"),
    ],
)
def test_bad_inputs_name_the_argument(changes, error, match):
    with pytest.raises(error, match=match):
        _call(**changes)


@pytest.mark.parametrize(
    "keywords,error,match",
    [
        (dict(config=dict(SMALL, BLOCK_M=48)), ValueError, r"config: BLOCK_M=48 is not one of \[32, 64, 128, 256\]"),
        (dict(config=dict(SMALL, loads="tma")), ValueError, "config: loads='tma' is not implemented by the varlen"),
        (dict(config=dict(SMALL, num_splits=2)), ValueError, "config: unknown key 'num_splits' for the varlen kernel"),
        (dict(config=dict(BLOCK_M=32)), ValueError, r"config: missing key\(s\) \['BLOCK_N', 'num_warps', 'num_sta"),
        (dict(causal=1), TypeError, "causal must be a bool, got int"),
        (dict(scale=-1.0), ValueError, "scale must be a positive finite number, got -1.0"),
        (dict(grid_by="rows"), ValueError, r"grid_by must be one of \['longest', 'tokens', 'auto'\] or None, got 'rows'"),
    ],
)
def test_bad_keywords_name_the_argument(keywords, error, match):
    q, k, v, cu_q, cu_k = _packed(LENGTHS, LENGTHS)
    with pytest.raises(error, match=match):
        flash_attention_varlen(q, k, v, cu_q, cu_k, 33, 33, **keywords)


def test_a_prefill_config_of_pointer_loads_runs_here():
    # The dense kernel's safe default, all its knobs named, runs the same tile.
    q, k, v, cu_q, cu_k = _packed(LENGTHS, LENGTHS)
    out = flash_attention_varlen(q, k, v, cu_q, cu_k, 33, 33, causal=True, config=SAFE_DEFAULT)
    assert torch.equal(out, flash_attention_varlen(q, k, v, cu_q, cu_k, 33, 33, causal=True))


#: Compiles the kernel for the H200's target (objectives/aot.py's stand-in driver) and prints
#: [registers, spilled words, shared bytes] of each (dtype, head_dim, BLOCK_M, BLOCK_N, causal, warps, stages).
_SM90_CHILD = """
import json, sys, torch
from flashtune.objectives.aot import compiling_for, resource_usage
from flashtune.objectives.hardware import load_spec
from flashtune.kernels._flash_fwd_varlen import varlen_forward_kernel
out = []
for dtype, d, bm, bn, causal, warps, stages, wide, pack, tokens in json.loads(sys.argv[1]):
    q = torch.empty(100, 8, d, dtype=getattr(torch, dtype))
    k = torch.empty(120, 2, d, dtype=q.dtype)
    cu = torch.zeros(5, dtype=torch.int32)
    with compiling_for(load_spec("h200")):
        kernel = varlen_forward_kernel.warmup(
            q, k, k, q, cu, cu, *q.stride()[:2], *k.stride()[:2], *k.stride()[:2], *q.stride()[:2],
            4, 8, 4, 100, 120, 40, 0.1, HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, IS_CAUSAL=causal,
            WIDE_OFFSETS=wide, PACK_GQA=pack, BY_TOKENS=tokens, num_warps=warps, num_stages=stages, grid=(1,))
    usage = resource_usage(kernel.asm["cubin"])
    out.append([usage["REG"], (usage["STACK"] + usage["LOCAL"]) // 4, kernel.metadata.shared])
print(json.dumps(out))
"""


@pytest.mark.slow
def test_compiles_for_sm90_without_spills_at_the_default_tile():
    # The interpreter runs the early return and the packed addressing; this compiles them
    # (in a child: this process imported the kernels under the interpreter). None spills: head
    # dim 256 causal spilled 2 words (255 registers) while the output's rows were held through
    # the key loops (loaded values live in vector registers, where the dense kernel's lengths
    # are arguments); re-read after them, 244 registers.
    # Then Hopper's varlen tile (64x64, 4 warps, 3 stages), which the runtime serves up to head dim 128.
    # Each with 64-bit row offsets (buffers of 2**31 elements or more), then the 32-bit ones
    # every smaller buffer gets.
    cases = [["bfloat16", 128, 64, 32, True, 4, 2], ["float16", 64, 64, 32, False, 4, 2],
             ["bfloat16", 256, 64, 32, True, 4, 2], ["bfloat16", 128, 64, 64, True, 4, 3],
             ["bfloat16", 64, 64, 64, False, 4, 3]]
    cases = [[*case, wide, 1, False] for wide in (True, False) for case in cases]
    most_spills = [0, 0, 0, 0, 0] * 2
    # Registers at most what keeps the programs an SM of 4 warps (4 at 128, 3 at 168): the rows
    # re-read after the loops, not held through them (held, the first 32-bit case took 144
    # and missed its fourth program); the 64-bit cases only must not spill.
    most_registers = [255] * 5 + [128, 128, 255, 168, 128]
    # And Hopper's tile with a group of 4 query heads packed into its rows (pack-GQA).
    cases += [["bfloat16", 128, 64, 64, True, 4, 3, False, 4, False], ["bfloat16", 128, 64, 64, True, 4, 3, True, 4, False]]
    most_spills += [0, 0]
    most_registers += [168, 255]
    # And the tiles by packed rows, whose prologue searches the cumulative lengths.
    cases += [["bfloat16", 128, 64, 64, True, 4, 3, False, 1, True], ["bfloat16", 128, 64, 64, True, 4, 3, False, 4, True]]
    most_spills += [0, 0]
    most_registers += [168, 168]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    done = subprocess.run([sys.executable, "-c", _SM90_CHILD, json.dumps(cases)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    for case, (registers, spills, shared), most, most_regs in zip(cases, got, most_spills, most_registers):
        assert spills <= most and registers <= most_regs and \
            0 < shared <= load_spec("h200").shared_memory_per_block_bytes, \
            f"{case}: {registers} registers, {spills} spilled words, {shared} B shared"


#: One sequence whose last keys sit past 2**31 elements from its first (rows of a wide buffer:
#: only the first 2 x D columns are touched, so ~20 MB is resident of the 4.4 GB mapped).
#: transformers' CUDA-graph warm-up hands one sequence the whole paged cache; 32-bit row
#: offsets wrapped there (an illegal address on the H100, a segfault here), so it runs in a child.
_FAR_KEYS_CHILD = """
import torch
from flashtune.kernels import flash_attention_varlen
D, W = 32, 1 << 19
rows = (1 << 31) // W + 64
big = torch.empty(rows, W, dtype=torch.float16)
k, v = big[:, :D].view(rows, 1, D), big[:, D:2 * D].view(rows, 1, D)
k.zero_(); v.zero_()
v[-1] = 1.0
q = torch.zeros(1, 1, D, dtype=torch.float16)
cu_q, cu_k = torch.tensor([0, 1], dtype=torch.int32), torch.tensor([0, rows], dtype=torch.int32)
config = {"BLOCK_M": 32, "BLOCK_N": 64, "num_warps": 4, "num_stages": 1}
out = flash_attention_varlen(q, k, v, cu_q, cu_k, 1, rows, causal=True, config=config)
print(rows, out.float().mean().item())
"""


def test_offsets_are_64_bit_exactly_where_a_buffer_needs_them():
    small = torch.empty(10, 4, 32)
    assert varlen.last_offset(small) == 9 * 128 + 3 * 32 + 31 < varlen.INT32_OFFSETS
    rows = varlen.INT32_OFFSETS // (4 * 32) + 1  # its last row starts past 2**31 elements
    wide = torch.empty(rows, 4, 32, device="meta")  # shape and strides, no memory
    assert varlen.last_offset(wide) >= varlen.INT32_OFFSETS
    assert varlen.last_offset(torch.empty(0, 4, 32)) == 0


def test_the_64_bit_path_computes_what_the_32_bit_one_does(monkeypatch):
    # The wide path on small buffers (the limit lowered): the same answer, bit for bit.
    q, k, v, cu_q, cu_k = _packed(LENGTHS, LENGTHS)
    narrow = flash_attention_varlen(q, k, v, cu_q, cu_k, 33, 33, causal=True)
    monkeypatch.setattr(varlen, "INT32_OFFSETS", 1)
    assert torch.equal(flash_attention_varlen(q, k, v, cu_q, cu_k, 33, 33, causal=True), narrow)


def test_keys_past_two_to_the_31_elements_are_addressed_in_64_bit():
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-c", _FAR_KEYS_CHILD], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-1500:]}"
    rows, mean = done.stdout.split()
    # Every score is 0: the softmax weighs all keys alike, and only the last key has a value.
    assert float(mean) == pytest.approx(1 / int(rows), rel=1e-2)
