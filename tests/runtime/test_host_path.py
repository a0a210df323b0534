"""The eager decode path's per-call host work, cut without losing what it protects: the
transformers attention function takes a key-range mask's views once per mask object (every
layer of a forward pass gets the same one) and still sees in-place updates of its values;
a prepared call still rejects a per-sequence tensor of the wrong form, naming it.

Real kernels in the Triton interpreter (fp32), SDPA with an explicit mask as the reference.
"""

from __future__ import annotations

import pytest
import torch

from flashtune.runtime.dispatching.dispatch import Dispatcher
from flashtune.runtime.integrations import hf_attention

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter suite; tests/gpu covers the GPU")

BATCH, Q_HEADS, KV_HEADS, KV_LEN, HEAD_DIM = 2, 4, 2, 16, 32


class _Layer(torch.nn.Module):
    is_causal = True


def _inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(BATCH, Q_HEADS, 1, HEAD_DIM, generator=g)
    k = torch.randn(BATCH, KV_HEADS, KV_LEN, HEAD_DIM, generator=g)
    v = torch.randn(BATCH, KV_HEADS, KV_LEN, HEAD_DIM, generator=g)
    return q, k, v


def _reference(q, k, v, starts: list[int], ends: list[int]) -> torch.Tensor:
    """SDPA of one query per sequence over keys [start, end), as (batch, 1, heads, head_dim)."""
    cols = torch.arange(KV_LEN)
    keep = (cols >= torch.tensor(starts)[:, None]) & (cols < torch.tensor(ends)[:, None])
    group = Q_HEADS // KV_HEADS
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), attn_mask=keep[:, None, None, :])
    return out.transpose(1, 2)


def _ranges(starts: list[int], ends: list[int]) -> torch.Tensor:
    return torch.tensor([starts, ends], dtype=torch.int32)[:, :, None, None]


def test_a_range_mask_is_read_once_per_object_and_in_place_updates_still_count(monkeypatch):
    monkeypatch.setattr(hf_attention, "_LAST_RANGES", (None, None))
    q, k, v = _inputs()
    layer = _Layer()
    mask = _ranges([0, 3], [16, 12])
    out = hf_attention.attention_forward(layer, q, k, v, mask)[0]
    torch.testing.assert_close(out, _reference(q, k, v, [0, 3], [16, 12]), atol=1e-4, rtol=1e-4)
    views = hf_attention._ranges_views(mask)
    assert views is hf_attention._ranges_views(mask)  # the next layer's call: no new views
    mask[1, 1] = 9  # the same object, new values (views share its storage)
    mask[0, 0] = 2
    out = hf_attention.attention_forward(layer, q, k, v, mask)[0]
    torch.testing.assert_close(out, _reference(q, k, v, [2, 3], [16, 9]), atol=1e-4, rtol=1e-4)
    other = _ranges([5, 0], [11, 16])  # a new forward pass's mask
    out = hf_attention.attention_forward(layer, q, k, v, other)[0]
    torch.testing.assert_close(out, _reference(q, k, v, [5, 0], [11, 16]), atol=1e-4, rtol=1e-4)
    assert hf_attention._LAST_RANGES[0] is other


def test_a_dense_mask_is_not_taken_for_ranges_nor_kept(monkeypatch, caplog):
    monkeypatch.setattr(hf_attention, "_LOGGED", set())
    q, k, v = _inputs(1)
    ranges = _ranges([0, 0], [16, 16])
    hf_attention.attention_forward(_Layer(), q, k, v, ranges)
    dense = torch.zeros(BATCH, 1, 1, KV_LEN)
    dense[1, ..., :4] = torch.finfo(torch.float32).min
    out = hf_attention.attention_forward(_Layer(), q, k, v, dense)[0]
    torch.testing.assert_close(out, _reference(q, k, v, [0, 4], [16, 16]), atol=1e-4, rtol=1e-4)
    assert hf_attention._LAST_RANGES[0] is ranges  # only key-range masks are memoized
    assert any("dense attention mask" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("name", ["cache_seqlens", "kv_start"])
def test_a_prepared_call_still_rejects_a_per_sequence_tensor_of_the_wrong_dtype(tmp_path, name):
    dispatcher = Dispatcher(tmp_path / "none.json")
    q, k, v = _inputs(2)
    good = {"kv_start": torch.zeros(BATCH, dtype=torch.int32), "cache_seqlens": torch.full((BATCH,), KV_LEN, dtype=torch.int32)}
    first = dispatcher(q, k, v, causal=True, **good)  # prepares the call key
    second = dispatcher(q, k, v, causal=True, **good)
    assert second is not first  # a fresh output every call (callers keep them)
    torch.testing.assert_close(second, first)
    bad = {**good, name: good[name].to(torch.int64)}
    with pytest.raises((TypeError, ValueError), match=name):
        dispatcher(q, k, v, causal=True, **bad)


class _CountOps(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the aten ops run inside it, and the host reads among them (``_local_scalar_dense``)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))

    @property
    def reads(self) -> int:
        return sum("_local_scalar_dense" in op for op in self.ops)


@pytest.mark.parametrize("padded", [False, True])
def test_the_eager_mask_builder_of_a_dynamic_cache_step_reads_once_and_runs_few_ops(padded):
    # A decode step of a dynamic cache (q_offset an int): without padding the builder costs
    # what transformers' own sdpa builder costs (a sum and one read) and answers None (the
    # plain kernel); a padded batch then pays for its ranges (and their holes check).
    pytest.importorskip("transformers")
    hf_attention._forget_chain()  # no mask checked before (see the chained steps' test below)
    mask = torch.ones(2, 13, dtype=torch.bool)
    if padded:
        mask[1, :5] = False
    with _CountOps() as counted:
        built = hf_attention.key_range_mask(2, q_length=1, kv_length=13, q_offset=12, attention_mask=mask)
    assert counted.reads == 1  # the sum (the holes check's .tolist() is not an aten op)
    if padded:
        assert built.tolist() == [[[[0]], [[5]]], [[[13]], [[13]]]]
    else:
        assert built is None and len(counted.ops) <= 3, counted.ops
    with _CountOps() as counted:  # no 2-D mask: decided on the host
        assert hf_attention.key_range_mask(2, q_length=1, kv_length=13, q_offset=12) is None
    assert counted.ops == []


@pytest.mark.parametrize("batch,kv_len,combine", [(1, 8192, "fused"), (2, 1024, "fused"), (2, 8192, "launch")])
def test_key_ranges_keep_the_fused_combine_for_a_single_sequence_or_a_short_cache(tmp_path, batch, kv_len, combine):
    # A static cache's decode step at batch 1: no other sequence to wait for, so the one-launch
    # fused combine serves; so it does for a batch in a short cache (the wait for the longest
    # sequence is short there: kernels.decode.default_combine); a batch in a long cache takes
    # the launched combine. Each matches SDPA.
    dispatcher = Dispatcher(tmp_path / "none.json")
    g = torch.Generator().manual_seed(3)
    q = torch.randn(batch, 4, 1, 32, generator=g)
    k, v = torch.randn(2, batch, 2, kv_len, 32, generator=g)
    starts, ends = [5, 0][:batch], [700, kv_len][:batch]
    ranges = {"kv_start": torch.tensor(starts, dtype=torch.int32), "cache_seqlens": torch.tensor(ends, dtype=torch.int32)}
    out = dispatcher(q, k, v, causal=True, **ranges)
    (prepared,) = dispatcher._calls.values()
    assert prepared.splits > 1 and prepared.config["combine"] == combine
    cols = torch.arange(kv_len)
    keep = (cols >= torch.tensor(starts)[:, None]) & (cols < torch.tensor(ends)[:, None])
    ref = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                                           attn_mask=keep[:, None, None, :])
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


def test_a_bound_decode_builds_the_jit_launch_arguments_and_keys_each_specialization_class_once():
    # BoundDecode's per-call host work (kernels.decode): the arguments must be split_arguments'
    # and the key must tell two calls apart exactly when Triton specializes them apart (an
    # integer's == 1 / % 16 / 64-bit class, a pointer's 16-byte alignment), over a growing
    # dynamic cache, a static cache's slices and a misaligned view.
    from flashtune.kernels.config import Config
    from flashtune.kernels.decode import BoundDecode, _int_class, split_arguments

    config = Config(kernel="decode", BLOCK_N=64, num_splits=4, num_warps=4, num_stages=3, loads="pointer",
                    combine="launch")
    q = torch.randn(2, 4, 1, 32, dtype=torch.bfloat16)
    bound = BoundDecode(q, torch.empty(2, 2, 8, 32), causal=True, scale=0.125, config=config, has_seqlens=True,
                        has_kv_start=False)
    # The compiled kernels take their constexprs in declared order, read by name: the combine
    # kernel's HEAD_DIM, BLOCK_D, BLOCK_S (its num_warps is a compile option, not an argument).
    assert bound.combine_consts == (32, 32, 128)
    assert len(bound.split_consts) == len([n for n in bound.split_options if n not in ("num_warps", "num_stages")])
    lengths = torch.full((2,), 5, dtype=torch.int32)
    buffer = torch.randn(2, 2, 70, 32, dtype=torch.bfloat16)
    flat = torch.randn(2 * 2 * 33 * 32 + 1, dtype=torch.bfloat16)
    caches = [torch.randn(2, 2, n, 32, dtype=torch.bfloat16) for n in (1, 15, 16, 17, 31, 32, 48, 49)]
    caches += [buffer[:, :, :n] for n in (16, 17, 64)]  # static-cache slices: strides of 70 slots
    caches.append(flat[1:].view(2, 2, 33, 32))  # 2-byte offset: not 16-byte aligned
    keys, classes = [], []
    for k in caches:
        out = torch.empty_like(q)
        args, key = bound.arguments(q, k, k, out, lengths, None, None)
        expected = split_arguments(q, k, k, out, args[4], args[5], lengths, args[7], lengths,
                                   stride_q=q.stride()[:3], stride_k=k.stride()[:3], stride_v=k.stride()[:3],
                                   stride_o=out.stride()[:3], q_heads=4, kv_heads=2, q_len=1, kv_cap=k.shape[2],
                                   num_splits=4, scale=0.125)
        assert args == expected
        # The bound launch's form: the pointers as device addresses, the same key.
        addressed, same_key = bound.arguments(q, k, k, out, lengths, None, None, addresses=True)
        assert same_key == key and type(same_key) is type(key)
        assert addressed[:9] == tuple(t.data_ptr() for t in args[:9]) and addressed[9:] == args[9:]
        ints = (k.shape[2], *k.stride()[:3], *k.stride()[:3])
        pointers = (q, k, k, lengths, lengths)
        keys.append(key)
        classes.append((*map(_int_class, ints), *(t.data_ptr() % 16 for t in pointers)))
    for i in range(len(caches)):
        for j in range(len(caches)):
            assert (keys[i] == keys[j]) == (classes[i] == classes[j]), (caches[i].shape, caches[j].shape)


def test_a_static_cache_step_that_fills_the_cache_still_gets_ranges():
    # generate(cache_implementation="static") builds each decode step's mask eagerly and hands
    # it to the compiled step: the step that fills the cache must get the same form (ranges)
    # as the others, or it compiles and CUDA-graphs a step of its own.
    pytest.importorskip("transformers")
    full = torch.ones(2, 12, dtype=torch.bool)
    built = hf_attention.key_range_mask(2, q_length=1, kv_length=12, q_offset=torch.tensor(11), attention_mask=full)
    assert built is not None and built.tolist() == [[[[0]], [[0]]], [[[12]], [[12]]]]
    partial = hf_attention.key_range_mask(2, q_length=1, kv_length=12, q_offset=torch.tensor(9),
                                          attention_mask=full[:, :10])
    assert partial.tolist() == [[[[0]], [[0]]], [[[10]], [[10]]]]


def test_per_sequence_forms_are_checked_once_per_object_and_a_new_bad_one_still_raises(tmp_path):
    # The prepared decode call checks a (cache_seqlens, kv_start) pair's form on its first use
    # only (every layer of a forward pass passes the same pair); any other object is checked,
    # so a bad tensor after good ones still gets the launcher's error naming it.
    dispatcher = Dispatcher(tmp_path / "none.json")
    q, k, v = _inputs(3)
    ends, starts = torch.tensor([16, 9], dtype=torch.int32), torch.tensor([0, 3], dtype=torch.int32)
    first = dispatcher(q, k, v, causal=True, cache_seqlens=ends, kv_start=starts)
    (prepared,) = dispatcher._calls.values()
    again = dispatcher(q, k, v, causal=True, cache_seqlens=ends, kv_start=starts)
    assert prepared.checked[0]() is ends and prepared.checked[1]() is starts
    torch.testing.assert_close(again, first)
    torch.testing.assert_close(first.transpose(1, 2), _reference(q, k, v, [0, 3], [16, 9]), atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="cache_seqlens"):
        dispatcher(q, k, v, causal=True, cache_seqlens=torch.tensor([16, 9, 4], dtype=torch.int32), kv_start=starts)
    with pytest.raises(ValueError, match="kv_start"):
        dispatcher(q, k, v, causal=True, cache_seqlens=ends, kv_start=torch.zeros(2, 1, dtype=torch.int32))
    assert prepared.checked[0]() is ends  # a rejected pair is not remembered
    moved = torch.tensor([12, 16], dtype=torch.int32)  # a new good object: checked, then served
    out = dispatcher(q, k, v, causal=True, cache_seqlens=moved, kv_start=starts)
    assert prepared.checked[0]() is moved
    torch.testing.assert_close(out.transpose(1, 2), _reference(q, k, v, [0, 3], [12, 16]), atol=1e-4, rtol=1e-4)


def test_the_checked_pair_is_not_kept_alive(tmp_path):
    # A strong reference kept a tensor of a CUDA graph's pool alive past its replay, which
    # CUDA-graph trees refuse (test_compiled_step_with_key_ranges_is_captured_and_replays_new_lengths
    # on the H200, 2026-12-02): the memo holds weak references.
    import gc
    import weakref

    dispatcher = Dispatcher(tmp_path / "none.json")
    q, k, v = _inputs(3)
    ends, starts = torch.tensor([16, 9], dtype=torch.int32), torch.tensor([0, 3], dtype=torch.int32)
    dispatcher(q, k, v, causal=True, cache_seqlens=ends, kv_start=starts)
    watched = weakref.ref(ends)
    del ends
    gc.collect()
    assert watched() is None
    (prepared,) = dispatcher._calls.values()
    assert prepared.checked[0]() is None  # a dead object: the next pair is checked anew


def test_a_static_cache_decode_step_continuing_a_checked_mask_runs_few_ops_and_one_read():
    # generate(cache_implementation="static") builds each decode step's mask eagerly, outside
    # the compiled step: the full build's ~30 ops and host read cost the op's compiled static
    # generate ~1 ms a step on the H200 (2026-12-02). A step whose mask is the last checked
    # one plus one real key is checked by a few ops and one read (it then has no holes); any
    # other mask is built in full (and checked) and starts a new chain, or none.
    pytest.importorskip("transformers")
    hf_attention._forget_chain()
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, :3] = False  # left padding
    # The prefill (generate passes its offset as an int) is built and checked in full.
    prefill = hf_attention.key_range_mask(2, q_length=9, kv_length=12, q_offset=0, attention_mask=mask)
    assert prefill.tolist() == [[[[0]], [[3]]], [[[9]], [[9]]]]
    for step in range(2):  # two decode steps, each mask one real token longer
        mask = torch.cat([mask, torch.ones(2, 1, dtype=torch.bool)], dim=1)
        offset = torch.tensor(9 + step)
        with _CountOps() as counted:
            built = hf_attention.key_range_mask(2, q_length=1, kv_length=12, q_offset=offset, attention_mask=mask)
        compute = [op for op in counted.ops if not any(v in op for v in ("view", "expand", "unsqueeze", "select",
                                                                         "slice"))]
        assert counted.reads == 1 and len(compute) <= 12, counted.ops
        assert built.tolist() == [[[[0]], [[3]]], [[[10 + step]], [[10 + step]]]]
    # A same-shaped mask that is not this chain's continuation (another batch's, a cleared
    # column, a padded new key) is checked in full: its own first keys, or SDPA for holes.
    other = torch.ones(2, 12, dtype=torch.bool)
    other[0, :5] = False
    built = hf_attention.key_range_mask(2, q_length=1, kv_length=12, q_offset=torch.tensor(11), attention_mask=other)
    assert built.tolist() == [[[[5]], [[0]]], [[[12]], [[12]]]]
    cleared = torch.cat([other, torch.ones(2, 1, dtype=torch.bool)], dim=1)
    cleared[1, 6] = False
    dense = hf_attention.key_range_mask(2, q_length=1, kv_length=13, q_offset=torch.tensor(12), attention_mask=cleared)
    assert not hf_attention.is_key_ranges(dense)
    assert hf_attention._CHAIN.state is None  # and a mask with holes starts no chain


def test_a_padded_dynamic_cache_decode_step_continuing_a_checked_mask_runs_few_ops_and_one_read():
    # A left-padded batch on a dynamic cache: its first decode step is built and checked in
    # full (the sum's read, ~30 ops, the holes check's read); each later step's mask is the
    # last one plus one real key, and the cache one key longer: a few ops and one read. A
    # step that does not continue it (a jump in the offset, a padded new key) is built in full.
    pytest.importorskip("transformers")
    hf_attention._forget_chain()
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, :3] = False
    first = hf_attention.key_range_mask(2, q_length=1, kv_length=9, q_offset=8, attention_mask=mask)
    assert first.tolist() == [[[[0]], [[3]]], [[[9]], [[9]]]] and hf_attention._CHAIN.state is not None
    for step in range(2):
        mask = torch.cat([mask, torch.ones(2, 1, dtype=torch.bool)], dim=1)
        with _CountOps() as counted:
            built = hf_attention.key_range_mask(2, q_length=1, kv_length=10 + step, q_offset=9 + step,
                                                attention_mask=mask)
        compute = [op for op in counted.ops if not any(v in op for v in ("view", "expand", "unsqueeze", "select",
                                                                         "slice"))]
        assert counted.reads == 1 and len(compute) <= 10, counted.ops
        assert built.tolist() == [[[[0]], [[3]]], [[[10 + step]], [[10 + step]]]]
    # Another batch's mask of this shape (its first real keys differ): the full build, its own answer.
    jumped = torch.cat([mask, torch.ones(2, 1, dtype=torch.bool)], dim=1)
    jumped[0, :4] = False
    assert hf_attention.key_range_mask(2, q_length=1, kv_length=12, q_offset=11,
                                       attention_mask=jumped).tolist() == [[[[4]], [[3]]], [[[12]], [[12]]]]
    # A new key that is padding opens a hole: SDPA's dense mask, no chain.
    holed = torch.cat([jumped, torch.tensor([[True], [False]])], dim=1)
    holed = torch.cat([holed, torch.ones(2, 1, dtype=torch.bool)], dim=1)
    dense = hf_attention.key_range_mask(2, q_length=1, kv_length=14, q_offset=13, attention_mask=holed)
    assert not hf_attention.is_key_ranges(dense) and hf_attention._CHAIN.state is None
