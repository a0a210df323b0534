"""transformers' continuous batching on the op: ``generate_batch`` of a small random Llama
gives SDPA's greedy tokens, token for token, with the packed varlen kernel running every
step (the Triton interpreter, float32, on the CPU); what the kernel cannot express runs SDPA
with one log line; a name transformers would misroute is refused."""

from __future__ import annotations

import inspect
import logging

import pytest
import torch
from hf_packed import packed_forward  # tests/ is on sys.path (its conftest's folder)

transformers = pytest.importorskip("transformers")

from flashtune.runtime.integrations import hf_continuous_batching as cb  # noqa: E402


@pytest.fixture(scope="module")
def model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=96, hidden_size=128, intermediate_size=192, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM(config).eval()


def _generate(model, implementation: str, prompts: list[list[int]], new_tokens: int) -> dict[str, list[int]]:
    from transformers import GenerationConfig

    model.set_attn_implementation(implementation)
    config = GenerationConfig(max_new_tokens=new_tokens, do_sample=False, eos_token_id=-1, pad_token_id=0)
    out = model.generate_batch(inputs=prompts, generation_config=config, progress_bar=False)
    return {request: result.generated_tokens for request, result in out.items()}


class _Spy:
    """Counts the kernel's calls (the real kernel runs)."""

    def __init__(self, function) -> None:
        self.function, self.calls, self.max_q = function, 0, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        self.max_q = max(self.max_q, int(args[5]))
        return self.function(*args, **kwargs)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def log_lines():
    handler = _Lines()
    logger = logging.getLogger("flashtune.attention")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    cb._LOGGED.clear()
    yield handler.lines
    logger.removeHandler(handler)


def test_generate_batch_gives_sdpas_greedy_tokens_with_the_kernel_on_every_step(model, monkeypatch, log_lines):
    prompts = [[1, 5, 7, 9, 11, 13, 15, 17, 19], [1, 2], [1] + list(range(3, 40)), [1], [4, 4, 4, 4, 4]]
    expected = _generate(model, "sdpa", prompts, new_tokens=5)
    spy = _Spy(cb.flash_attention_varlen)
    monkeypatch.setattr(cb, "flash_attention_varlen", spy)
    name = cb.register()
    assert _generate(model, name, prompts, new_tokens=5) == expected
    layers = model.config.num_hidden_layers
    assert spy.calls >= 5 * layers  # a prefill step and every decode step, every layer
    assert spy.max_q == max(map(len, prompts))  # the longest prompt went through it whole
    assert log_lines == []  # no fallback


def test_a_varlen_function_of_ones_own_serves_every_packed_step(model) -> None:
    # register(varlen=...): another flash_attn_varlen_func (a peer a benchmark runs, another
    # kernel) through the same path, on both routes (the registered forward, the loader).
    prompts = [[1, 5, 7, 9, 11], [1, 2], [1] + list(range(3, 30))]
    expected = _generate(model, "sdpa", prompts, new_tokens=4)
    calls = []

    def peer(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=None, causal=True, **_):
        calls.append(int(max_seqlen_q))
        return cb.packed_sdpa(q, k, v, cu_seqlens_q, cu_seqlens_k, scale=softmax_scale, causal=causal)

    name = cb.register("flash_peer", varlen=peer)
    from transformers import modeling_flash_attention_utils as fa_utils

    assert inspect.unwrap(fa_utils.lazy_import_flash_attention(name)[0][1]) is peer
    assert _generate(model, name, prompts, new_tokens=4) == expected
    assert len(calls) >= 4 * model.config.num_hidden_layers and max(calls) == max(map(len, prompts))
    # The op's own name still loads the op's function.
    assert inspect.unwrap(fa_utils.lazy_import_flash_attention(cb.register())[0][1]) is cb.varlen_attention
    with pytest.raises(ValueError, match="block-table function"):
        cb.register(cb.PAGED_NAME, paged=True, varlen=peer)


def test_a_packed_forward_gives_each_sequences_own_logits(model) -> None:
    # Teacher-forced, as a continuous-batching prefill runs: three sequences in one row.
    sequences = [[1, 5, 9, 2, 7], [3], [4, 8, 15, 16, 23, 42, 11, 12]]
    with torch.no_grad():
        packed = packed_forward(model, sequences, cb.register())
        model.set_attn_implementation("sdpa")
        alone = torch.cat([model(torch.tensor([s])).logits[0] for s in sequences])
    torch.testing.assert_close(packed, alone, atol=1e-4, rtol=1e-4)


def _packed(lengths_q, lengths_k, q_heads=4, kv_heads=2, head_dim=32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(1, q_heads, sum(lengths_q), head_dim, generator=generator)
    k = torch.randn(1, kv_heads, sum(lengths_k), head_dim, generator=generator)
    v = torch.randn(1, kv_heads, sum(lengths_k), head_dim, generator=generator)
    cum = lambda lengths: torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)  # noqa: E731
    kwargs = dict(cu_seq_lens_q=cum(lengths_q), cu_seq_lens_k=cum(lengths_k), max_length_q=max(lengths_q),
                  max_length_k=max(lengths_k), is_causal=True)
    return q, k, v, kwargs


def test_a_packed_step_matches_sdpa_request_by_request() -> None:
    # Prefill, chunked prefill (fewer queries than keys), decode and an empty request in one step.
    q, k, v, kwargs = _packed([7, 3, 1, 0, 5], [7, 11, 9, 0, 5])
    module = torch.nn.Module()
    out, weights = cb.attention_forward(module, q, k, v, None, scaling=0.2, **kwargs)
    reference = cb.packed_sdpa(q[0].transpose(0, 1), k[0].transpose(0, 1), v[0].transpose(0, 1),
                               kwargs["cu_seq_lens_q"], kwargs["cu_seq_lens_k"], scale=0.2, causal=True)
    assert weights is None and out.shape == (1, q.shape[2], 4, 32)
    torch.testing.assert_close(out[0], reference, atol=2e-5, rtol=2e-5)


def _window_reference(q, k, v, lengths_q, lengths_k, window):
    """SDPA request by request with a bottom-right causal band of ``window`` keys (tril/triu)."""
    out, q0, k0 = [], 0, 0
    for nq, nk in zip(lengths_q, lengths_k):
        band = torch.ones(nq, nk, dtype=torch.bool).tril(nk - nq) & ~torch.ones(nq, nk, dtype=torch.bool).tril(
            nk - nq - window)
        rep = q.shape[1] // k.shape[1]
        out.append(torch.nn.functional.scaled_dot_product_attention(
            q[0, :, q0:q0 + nq], k[0, :, k0:k0 + nk].repeat_interleave(rep, 0),
            v[0, :, k0:k0 + nk].repeat_interleave(rep, 0), attn_mask=band).transpose(0, 1))
        q0, k0 = q0 + nq, k0 + nk
    return torch.cat(out)


def test_what_the_kernel_cannot_do_runs_sdpa_with_one_line(log_lines) -> None:
    lengths_q, lengths_k = [4, 2], [6, 2]
    q, k, v, kwargs = _packed(lengths_q, lengths_k)
    module = torch.nn.Module()
    module.sliding_window = 3
    first, _ = cb.attention_forward(module, q, k, v, None, scaling=None, **kwargs)
    cb.attention_forward(module, q, k, v, None, scaling=None, **kwargs)
    assert log_lines == ["flashtune continuous batching: sliding window 3: this attention runs PyTorch's SDPA"]
    torch.testing.assert_close(first[0], _window_reference(q, k, v, lengths_q, lengths_k, window=3))


def test_soft_capping_and_sinks_in_the_fallback_reduce_to_plain_attention_at_their_limits() -> None:
    q, k, v, kwargs = _packed([5, 3], [5, 8])
    args = [x[0].transpose(0, 1) for x in (q, k, v)] + [kwargs["cu_seq_lens_q"], kwargs["cu_seq_lens_k"]]
    plain = cb.packed_sdpa(*args, scale=0.3, causal=True)
    capped = cb.packed_sdpa(*args, scale=0.3, causal=True, softcap=1e4)  # tanh(x / c) * c -> x
    sunk = cb.packed_sdpa(*args, scale=0.3, causal=True, sinks=torch.full((4,), -1e4))  # a sink no one attends
    torch.testing.assert_close(capped, plain, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(sunk, plain, atol=1e-5, rtol=1e-5)
    drained = cb.packed_sdpa(*args, scale=0.3, causal=True, sinks=torch.full((4,), 1e4))  # all to the sink
    assert drained.abs().max() < 1e-6


@pytest.mark.parametrize(("name", "paged", "why"), [("tuned_varlen", False, "must contain 'flash'"),
                                                     ("flash_tuned_2", False, "no 2 or 3 after it"),
                                                     ("flashtune_paged", True, "a 2 or 3 after it")])
def test_a_name_transformers_would_misroute_is_refused(name, paged, why) -> None:
    with pytest.raises(ValueError, match=why):
        cb.register(name, paged=paged)


def test_the_loader_answers_the_block_table_function_only_for_the_paged_name() -> None:
    from transformers import modeling_flash_attention_utils as fa_utils

    varlen, paged = cb.register(), cb.register(paged=True)
    assert paged == cb.PAGED_NAME
    def loaded(name):  # transformers wraps the block-table function (torch.compiler.disable)
        functions = fa_utils.lazy_import_flash_attention(name)[0][1:3]
        return tuple(None if f is None else inspect.unwrap(f) for f in functions)

    assert loaded(paged) == (cb.varlen_attention, cb.kvcache_attention)
    assert loaded(varlen) == (cb.varlen_attention, None)


def _paged_step(cache_lengths, page=16, q_heads=4, kv_heads=2, head_dim=32, seed=0):
    """A decode-only step as transformers' block-table path hands it: one new token a request
    (query, key, value as (1, heads, n, D)), the page pool with the cached keys, a shuffled
    block table padded with -1, and the keys' cumulative lengths counting the new token."""
    g = torch.Generator().manual_seed(seed)
    n = len(cache_lengths)
    per_seq = max(-(-(length + 1) // page) for length in cache_lengths)
    pool = n * per_seq + 2
    k_cache, v_cache = (torch.randn(pool, page, kv_heads, head_dim, generator=g) for _ in "kv")
    order = torch.randperm(pool, generator=g)
    table = torch.full((n, per_seq + 1), -1, dtype=torch.int32)
    for b, length in enumerate(cache_lengths):
        used = -(-(length + 1) // page)
        table[b, :used] = order[b * per_seq:b * per_seq + used].to(torch.int32)
    query = torch.randn(1, q_heads, n, head_dim, generator=g)
    key, value = (torch.randn(1, kv_heads, n, head_dim, generator=g) for _ in "kv")
    cu_k = torch.tensor([0, *torch.tensor([length + 1 for length in cache_lengths]).cumsum(0).tolist()],
                        dtype=torch.int32)
    kwargs = dict(block_table=table, k_cache=k_cache, v_cache=v_cache, cu_seq_lens_k=cu_k,
                  cu_seq_lens_q=torch.arange(n + 1, dtype=torch.int32), max_length_q=1,
                  max_length_k=max(cache_lengths) + 1, is_causal=True)
    return query, key, value, kwargs


def _gathered_reference(query, key, value, kwargs):
    """Each request's cached keys gathered from its pages, its new key appended, then SDPA."""
    table, k_cache, v_cache = kwargs["block_table"], kwargs["k_cache"], kwargs["v_cache"]
    page, rows = k_cache.shape[1], []
    lengths = (kwargs["cu_seq_lens_k"].diff() - 1).tolist()
    for b, length in enumerate(lengths):
        position = torch.arange(length)
        pages = table[b].long()[position // page]
        keys = torch.cat([k_cache[pages, position % page], key[0, :, b][None]])
        values = torch.cat([v_cache[pages, position % page], value[0, :, b][None]])
        rep = query.shape[1] // keys.shape[1]
        rows.append(torch.nn.functional.scaled_dot_product_attention(
            query[0, :, b:b + 1], keys.transpose(0, 1).repeat_interleave(rep, 0),
            values.transpose(0, 1).repeat_interleave(rep, 0)).transpose(0, 1))
    return torch.cat(rows)[None]


def test_a_block_table_step_reads_the_pages_in_place_and_appends_the_new_keys() -> None:
    query, key, value, kwargs = _paged_step([0, 1, 17, 40])
    expected = _gathered_reference(query, key, value, {**kwargs, "k_cache": kwargs["k_cache"].clone(),
                                                       "v_cache": kwargs["v_cache"].clone()})
    before = kwargs["k_cache"].clone()
    out, weights = cb.attention_forward(torch.nn.Module(), query, key, value, None, **kwargs)
    assert weights is None and out.shape == (1, 4, 4, 32)
    torch.testing.assert_close(out, expected, atol=2e-5, rtol=2e-5)
    changed = (kwargs["k_cache"] != before).any(-1).any(-1).nonzero().tolist()  # (page, row) written
    table, page = kwargs["block_table"], kwargs["k_cache"].shape[1]
    assert sorted(map(tuple, changed)) == sorted(
        (int(table[b, length // page]), length % page) for b, length in enumerate([0, 1, 17, 40]))


def test_a_block_table_step_the_kernel_cannot_do_runs_in_pytorch_with_the_same_answer(log_lines) -> None:
    module = torch.nn.Module()
    module.sliding_window = 10_000  # wider than any cache: the same attention, through the fallback
    query, key, value, kwargs = _paged_step([3, 33])
    fallback, _ = cb.attention_forward(module, query, key, value, None,
                                       **{**kwargs, "k_cache": kwargs["k_cache"].clone(),
                                          "v_cache": kwargs["v_cache"].clone()})
    kernel, _ = cb.attention_forward(torch.nn.Module(), query, key, value, None, **kwargs)
    assert log_lines == ["flashtune continuous batching: sliding window 10000: this attention runs PyTorch's SDPA"]
    torch.testing.assert_close(fallback, kernel, atol=2e-5, rtol=2e-5)


def test_a_plain_forward_without_packed_lengths_says_which_name_to_use() -> None:
    q, k, v, _ = _packed([3], [3])
    with pytest.raises(ValueError, match="generate_batch"):
        cb.attention_forward(torch.nn.Module(), q, k, v, None)
