"""Attention against a paged KV cache (``flash_attention_with_kvcache``) against a float32
reference that gathers each sequence's keys from its pages and runs SDPA with an explicit
bottom-right mask; the in-place append; split counts; bad inputs; unchecked values.

Pages are handed out shuffled (no sequence's pages are contiguous or in order) with -1 past
each sequence's last page. CPU interpreter, float32; the GPU's half types are not covered here.
"""

import functools

import pytest
import torch
import torch.nn.functional as F

from flashtune.kernels.paged import (
    PAGED_TUNABLES,
    default_paged_config,
    flash_attention_with_kvcache,
    validate_paged_config,
)

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter suite; tests/gpu covers the GPU")

LENGTHS = [0, 1, 17, 70]
HQ, HKV, D = 4, 2, 32


def _tile(block_n, splits):
    return dict(BLOCK_N=block_n, num_splits=splits, num_warps=4, num_stages=2)


class Paged:
    """A page pool, shuffled block tables for ``lengths`` cached keys plus ``new`` appended
    ones (-1 past each sequence's pages, a spare page no sequence owns), queries and new keys."""

    def __init__(self, lengths=LENGTHS, *, page=16, q_len=1, new=0, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.page, self.new = page, new
        need = [-(-(n + new) // page) for n in lengths]
        self.max_pages = max(need) + 1
        pages = sum(need) + 1
        self.k_cache = torch.randn(pages, page, HKV, D, generator=g)
        self.v_cache = torch.randn(pages, page, HKV, D, generator=g)
        order = torch.randperm(pages, generator=g).int()
        self.block_table = torch.full((len(lengths), self.max_pages), -1, dtype=torch.int32)
        taken = 0
        for b, n in enumerate(need):
            self.block_table[b, :n] = order[taken:taken + n]
            taken += n
        self.cache_seqlens = torch.tensor(lengths, dtype=torch.int32)
        self.q = torch.randn(len(lengths), q_len, HQ, D, generator=g)
        self.k = torch.randn(len(lengths), new, HKV, D, generator=g) if new else None
        self.v = torch.randn(len(lengths), new, HKV, D, generator=g) if new else None

    def run(self, config=None, **keywords):
        args = dict(cache_seqlens=self.cache_seqlens, block_table=self.block_table, config=config)
        return flash_attention_with_kvcache(self.q, self.k_cache, self.v_cache, self.k, self.v, **{**args, **keywords})

    def keys(self, b, cache):
        """Sequence b's keys (or values) in order, gathered from its pages of ``cache``."""
        total = int(self.cache_seqlens[b]) + self.new
        pages = self.block_table[b, :-(-total // self.page)].long()
        return cache[pages].reshape(-1, HKV, D)[:total]

    def reference(self, causal=True):
        out = torch.zeros(self.q.shape)
        q_len = self.q.shape[1]
        for b in range(self.q.shape[0]):
            keys, values = self.keys(b, self.k_cache), self.keys(b, self.v_cache)
            n = keys.shape[0]
            if n == 0:
                continue
            visible = torch.ones(q_len, n, dtype=torch.bool)
            if causal:
                visible = torch.arange(n)[None, :] <= torch.arange(q_len)[:, None] + (n - q_len)
            per_head = [x.transpose(0, 1).repeat_interleave(HQ // HKV, dim=0) for x in (keys, values)]
            rows = F.scaled_dot_product_attention(self.q[b].transpose(0, 1), *per_head, attn_mask=visible)
            out[b] = torch.where(visible.any(1)[None, :, None], rows, 0.0).transpose(0, 1)
        return out


def _close(out, ref):
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("page,block_n", [(16, 16), (16, 32), (32, 16)])  # one page a tile, or two
@pytest.mark.parametrize("q_len", [1, 3])
@pytest.mark.parametrize("splits", [1, 4])
def test_matches_each_sequence_gathered_from_its_pages(page, block_n, q_len, splits):
    case = Paged(page=page, q_len=q_len)
    out = case.run(_tile(block_n, splits))
    assert out.shape == case.q.shape and out.dtype == case.q.dtype
    _close(out, case.reference())
    assert torch.count_nonzero(out[0]) == 0  # no keys: zeros


def test_not_causal_and_a_query_that_sees_no_key():
    case = Paged(page=32, q_len=3)
    _close(case.run(_tile(32, 2), causal=False), case.reference(causal=False))
    out = case.run(_tile(32, 2))
    # Length 1 and three queries, causal bottom-right: the first two see nothing, the last key 0.
    assert torch.count_nonzero(out[1, :2]) == 0
    _close(out[1, 2], case.v_cache[case.block_table[1, 0], 0].repeat_interleave(HQ // HKV, dim=0))


@pytest.mark.parametrize("page,q_len,new", [(16, 1, 1), (32, 3, 3)])
def test_append_writes_the_new_rows_through_the_table_and_nothing_else(page, q_len, new):
    case = Paged(page=page, q_len=q_len, new=new)
    k_before, v_before = case.k_cache.clone(), case.v_cache.clone()
    out = case.run(_tile(16, 2))
    written = torch.zeros(case.k_cache.shape[:2], dtype=torch.bool)
    for b, cached in enumerate(case.cache_seqlens.tolist()):
        for i in range(new):
            page_index, row = divmod(cached + i, page)
            p = int(case.block_table[b, page_index])
            torch.testing.assert_close(case.k_cache[p, row], case.k[b, i], atol=0, rtol=0)
            torch.testing.assert_close(case.v_cache[p, row], case.v[b, i], atol=0, rtol=0)
            written[p, row] = True
    assert torch.equal(case.k_cache[~written], k_before[~written])
    assert torch.equal(case.v_cache[~written], v_before[~written])
    # The keys attended are the cached ones and the appended ones (the reference gathers them).
    _close(out, case.reference())


def test_split_counts_agree():
    case = Paged(page=16, q_len=3)
    one = case.run(_tile(16, 1))
    for splits in (2, 16):  # 16: more splits than any sequence has tiles
        _close(case.run(_tile(16, splits)), one)


def test_the_default_config_and_a_scale():
    case = Paged(page=32)
    config = default_paged_config(batch=4, q_heads=HQ, kv_heads=HKV, q_len=1, capacity=case.max_pages * 32,
                                  head_dim=D, device=torch.device("cpu"))
    assert validate_paged_config(config) == config
    out = case.run(softmax_scale=0.5)
    case.q *= 0.5 / D ** -0.5  # the same logits at the default scale
    _close(out, case.reference())


def test_unchecked_values_stay_inside_the_buffers():
    # check_values=False reads nothing on the host. A length past the table, a negative one,
    # -1 and out-of-pool entries in pages in use: every read and write stays inside the
    # cache (here a slice of a larger buffer whose guard pages must not change).
    case = Paged(page=16, new=2)
    pages = case.k_cache.shape[0]
    guarded = torch.randn(2, pages + 2, 16, HKV, D)
    guarded[:, 1:-1] = torch.stack([case.k_cache, case.v_cache])
    before = guarded.clone()
    case.k_cache, case.v_cache = guarded[0, 1:-1], guarded[1, 1:-1]
    case.cache_seqlens = torch.tensor([-5, 1, 10_000, 17], dtype=torch.int32)
    case.block_table[3, :2] = torch.tensor([-1, pages], dtype=torch.int32)  # just past: a guard page
    out = case.run(_tile(16, 4), check_values=False)
    assert torch.isfinite(out).all()
    assert torch.equal(guarded[:, 0], before[:, 0]) and torch.equal(guarded[:, -1], before[:, -1])
    # Sequence 1 is right as given: its own pages, written and read.
    case.cache_seqlens = torch.tensor([0, 1, 0, 0], dtype=torch.int32)
    _close(out[1], case.reference()[1])


def _bad(**changes):
    """A valid call (page 16, two new keys) with some arguments replaced; each change is a
    value or a function of the valid one."""
    case = Paged(page=16, new=2)
    args = dict(q=case.q, k_cache=case.k_cache, v_cache=case.v_cache, k=case.k, v=case.v,
                cache_seqlens=case.cache_seqlens, block_table=case.block_table, config=_tile(16, 2))
    for name, change in changes.items():
        args[name] = change(args[name]) if callable(change) else change
    return flash_attention_with_kvcache(**args)


def _int32(*values):
    return torch.tensor(values, dtype=torch.int32)


BAD = {
    "q rank": (dict(q=lambda q: q[0]), ValueError, r"q must have rank 4 \(batch, seqlen_q, q_heads, head_dim\)"),
    "cache dtype": (dict(k_cache=lambda c: c.double()), TypeError, "k_cache.dtype must be float16, bfloat16"),
    "mixed dtypes": (dict(v_cache=lambda c: c.half()), TypeError, "v_cache.dtype torch.float16 differs from q"),
    "device": (dict(v_cache=lambda c: c.to("meta")), ValueError, "v_cache must be on q's device cpu"),
    "v_cache shape": (dict(v_cache=lambda c: c[1:]), ValueError, "k_cache and v_cache must have the same shape"),
    "strided head_dim": (dict(k_cache=lambda c: c.transpose(2, 3).contiguous().transpose(2, 3)), ValueError,
                         "k_cache must be contiguous in its last dim"),
    "page size": (dict(k_cache=lambda c: c[:, :8], v_cache=lambda c: c[:, :8]), ValueError,
                  r"k_cache page size \(k_cache.shape\[1\]\) must be a positive multiple of 16, got 8"),
    "head_dim": (dict(q=lambda q: q[..., :16], k_cache=lambda c: c[..., :16], v_cache=lambda c: c[..., :16],
                      k=lambda k: k[..., :16], v=lambda v: v[..., :16]), ValueError,
                 r"head_dim must be one of \[32, 64, 128, 256\], got q.shape\[3\] = 16"),
    "cache head_dim": (dict(k_cache=lambda c: torch.cat([c, c], -1), v_cache=lambda c: torch.cat([c, c], -1)),
                       ValueError, "k_cache head_dim 64 differs from q head_dim 32"),
    "heads": (dict(q=lambda q: q[:, :, :3]), ValueError, r"q heads \(3\) must be a positive multiple of k_cache"),
    "k alone": (dict(v=None), ValueError, "k and v must be given together"),
    "k heads": (dict(k=lambda k: k[:, :, :1]), ValueError, r"k must have shape \(batch, seqlen_new, kv_heads"),
    "v length": (dict(v=lambda v: v[:, :1]), ValueError, "k and v must have the same shape"),
    "seqlens dtype": (dict(cache_seqlens=lambda s: s.long()), ValueError, "cache_seqlens.dtype must be torch.int32"),
    "seqlens shape": (dict(cache_seqlens=lambda s: s[:3]), ValueError, r"cache_seqlens must have shape \(batch,\)"),
    "seqlens list": (dict(cache_seqlens=[0, 1, 17, 70]), ValueError, "cache_seqlens must be a torch.Tensor"),
    "table dtype": (dict(block_table=lambda t: t.long()), ValueError, "block_table.dtype must be torch.int32"),
    "table rows": (dict(block_table=lambda t: t[:2]), ValueError,
                   r"block_table must have shape \(batch, max_pages_per_seq\) = \(4, ...\), got \(2, 6\)"),
    "table device": (dict(block_table=lambda t: t.to("meta")), ValueError, "block_table must be on q's device"),
    "negative length": (dict(cache_seqlens=_int32(0, -1, 17, 70)), ValueError,
                        r"cache_seqlens must be >= 0, got cache_seqlens\[1\] = -1"),
    "too long": (dict(cache_seqlens=_int32(0, 1, 17, 100)), ValueError,
                 r"cache_seqlens\[3\] \+ seqlen_new = 102 keys do not fit the block table's 6 pages of 16"),
    "page -1 in use": (dict(cache_seqlens=_int32(0, 1, 50, 70)), ValueError,
                       r"block_table\[2, 2\] = -1 is not a page of the cache \[0, 10\)"),
    "page past the pool": (dict(block_table=lambda t: torch.where(t == t.max(), 10, t)), ValueError,
                           r"= 10 is not a page of the cache \[0, 10\)"),
    "config value": (dict(config=_tile(48, 2)), ValueError, r"config: BLOCK_N=48 is not one of \[16, 32, 64, 128\]"),
    "config key": (dict(config={**_tile(16, 2), "loads": "tma"}), ValueError, r"config: unknown key\(s\) \['loads'\]"),
    "config kernel": (dict(config={**_tile(16, 2), "kernel": "decode"}), ValueError,
                      "config: kernel='decode' is not the paged kernel"),
    "config missing": (dict(config=dict(BLOCK_N=16)), ValueError, r"config: missing key\(s\) \['num_splits'"),
}


@pytest.mark.parametrize("changes,error,match", list(BAD.values()), ids=list(BAD))
def test_bad_inputs_name_the_argument(changes, error, match):
    with pytest.raises(error, match=match):
        _bad(**changes)


def test_causal_and_scale_are_checked():
    with pytest.raises(TypeError, match="causal must be a bool, got int"):
        Paged().run(causal=1)
    with pytest.raises(ValueError, match="scale must be a positive finite number, got 0.0"):
        Paged().run(softmax_scale=0.0)


def test_the_space_is_declared_as_data():
    assert list(PAGED_TUNABLES) == ["BLOCK_N", "num_splits", "num_warps", "num_stages"]
    assert all(PAGED_TUNABLES["BLOCK_N"])


@pytest.mark.parametrize("padded", [False, True])
def test_transformers_decode_fast_path_call(padded):
    # transformers' _flash_attention_forward with a block table (its continuous batching's
    # decode steps): one query token a sequence as (tokens, 1, heads, head_dim), the keyword
    # arguments its signature inspection lets through, cache_seqlens from cumulative key
    # lengths minus the new token. A padded step (CUDA graphs) adds sequences of no keys
    # (cache_seqlens -1, table rows of -1): the unchecked call must leave the cache alone.
    utils = pytest.importorskip("transformers.modeling_flash_attention_utils")
    fn = functools.partial(flash_attention_with_kvcache, check_values=False) if padded else flash_attention_with_kvcache
    case = Paged([5, 40, 16], page=16, new=1)
    totals = case.cache_seqlens + 1
    if padded:
        case.block_table = torch.cat([case.block_table, torch.full_like(case.block_table[:1], -1)])
        case.q, case.k, case.v = (torch.cat([x, torch.randn_like(x[:1])]) for x in (case.q, case.k, case.v))
        totals = torch.cat([totals, torch.zeros(1, dtype=torch.int32)])
    cu_seq_lens_k = torch.cat([torch.zeros(1, dtype=torch.int32), totals.cumsum(0).int()])
    cache_seqlens = cu_seq_lens_k[1:] - cu_seq_lens_k[:-1] - 1
    process = utils._lazy_define_process_function(fn)
    kwargs = process(query_length=1, key_length=1, is_causal=True, softmax_scale=None, max_seqlen_q=1,
                     max_seqlen_k=1, block_table=case.block_table, cache_seqlens=cache_seqlens)
    assert set(kwargs) == {"causal", "softmax_scale", "block_table", "cache_seqlens"}
    k_before = case.k_cache.clone()
    out = fn(case.q, case.k_cache, case.v_cache, case.k, case.v, **kwargs)
    real = slice(0, 3)
    case.cache_seqlens, case.q = cache_seqlens[real], case.q[real]
    _close(out[real], case.reference())
    assert torch.isfinite(out).all()
    assert torch.count_nonzero(case.k_cache != k_before) == 3 * HKV * D  # the three real tokens' rows
