"""The torch.library op and the transformers attention function, on the CPU interpreter."""

from __future__ import annotations

import logging
import types

import pytest
import torch

import flashtune.runtime.integrations.torch_op  # noqa: F401 - registers torch.ops.flashtune.flash_attention
from flashtune.kernels.reference import reference_attention, relative_error
from flashtune.runtime.integrations import hf_attention
from flashtune.runtime.integrations.hf_attention import attention_forward


def _qkv(batch, heads, kv_heads, q_len, kv_len, head_dim, dtype=torch.float16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    make = lambda h, n: torch.randn(batch, h, n, head_dim, generator=gen).to(dtype)  # noqa: E731 - a one-line helper reads better as a lambda here
    return make(heads, q_len), make(kv_heads, kv_len), make(kv_heads, kv_len)


@pytest.mark.parametrize(
    "shape, causal, scale",
    [((1, 2, 1, 33, 47, 32), True, None), ((2, 2, 2, 16, 16, 64), False, 0.25), ((1, 4, 2, 1, 40, 32), True, None)],
)
def test_op_matches_the_reference(shape, causal, scale):
    q, k, v = _qkv(*shape)
    out = torch.ops.flashtune.flash_attention(q, k, v, causal, scale)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert relative_error(out, reference_attention(q, k, v, causal=causal, scale=scale)) < 5e-3


def test_opcheck_passes():
    q, k, v = _qkv(1, 2, 1, 16, 16, 32)
    torch.library.opcheck(torch.ops.flashtune.flash_attention.default, (q, k, v, True, None))


def test_compiles_without_graph_breaks():
    q, k, v = _qkv(1, 2, 2, 16, 24, 32)

    def f(q, k, v):
        return torch.ops.flashtune.flash_attention(q * 1.0, k, v, True, 0.2).float().sum(dim=-1)

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    expected = reference_attention(q, k, v, causal=True, scale=0.2).sum(dim=-1)
    assert torch.allclose(compiled(q, k, v), expected, atol=2e-2, rtol=1e-2)


def test_fake_tensor_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 8, 128, 64, dtype=torch.float16)
        k = torch.empty(2, 2, 256, 64, dtype=torch.float16)
        out = torch.ops.flashtune.flash_attention(q, k, k, False, None)
    assert out.shape == (2, 8, 128, 64) and out.dtype == torch.float16


def _module(causal: bool = True, groups: int = 1) -> types.SimpleNamespace:
    # What transformers' attention layers expose that the function reads.
    return types.SimpleNamespace(is_causal=causal, num_key_value_groups=groups, training=False)


def test_transformers_signature_returns_bshd_and_no_weights():
    q, k, v = _qkv(2, 4, 2, 12, 12, 32)
    out, weights = attention_forward(_module(groups=2), q, k, v, None, scaling=0.3, dropout=0.0, position_ids=None)
    assert weights is None and out.shape == (2, 12, 4, 32) and out.is_contiguous()
    ref = reference_attention(q, k, v, causal=True, scale=0.3).transpose(1, 2)
    assert relative_error(out, ref) < 5e-3
    # is_causal in kwargs wins over the module's attribute (encoders, cross-attention).
    out, _ = attention_forward(_module(), q, k, v, None, is_causal=False)
    assert relative_error(out, reference_attention(q, k, v, causal=False).transpose(1, 2)) < 5e-3


def test_what_the_kernel_cannot_do_goes_to_sdpa_with_one_log_line(monkeypatch, caplog):
    monkeypatch.setattr(hf_attention, "_LOGGED", set())
    q, k, v = _qkv(1, 2, 1, 8, 8, 32, dtype=torch.float32)
    mask = torch.zeros(1, 1, 8, 8)
    mask[..., :2] = float("-inf")  # a dense mask (the mask builder gives one only for what ranges cannot say)
    mask[..., 7, :] = 0.0

    def logged() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "flashtune.attention"]

    with caplog.at_level(logging.INFO, logger="flashtune.attention"):
        out, _ = attention_forward(_module(), q, k, v, mask)
        assert len(logged()) == 1 and "dense attention mask" in logged()[0]
        k2, v2 = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
        expected = torch.nn.functional.scaled_dot_product_attention(q, k2, v2, attn_mask=mask).transpose(1, 2)
        assert torch.allclose(out, expected, atol=1e-5)
        attention_forward(_module(), q, k, v, mask)  # logged once already: no second line
        assert len(logged()) == 1
        attention_forward(_module(), q, k, v, None, softcap=30.0)
        assert "softcap" in logged()[-1]
        q48, k48, v48 = _qkv(1, 2, 2, 8, 8, 48, dtype=torch.float32)
        out, _ = attention_forward(_module(), q48, k48, v48, None)
        assert "head_dim 48" in logged()[-1] and out.shape == (1, 8, 2, 48)


def test_key_ranges_with_a_fallback_reason_give_sdpa_the_same_attention(monkeypatch):
    # Dropout is not the kernel's: the ranges become a dense mask for SDPA (dropout 0 here
    # through the kwargs path is not a reason, so use output_attentions).
    monkeypatch.setattr(hf_attention, "_LOGGED", set())
    q, k, v = _qkv(2, 2, 1, 3, 10, 32, dtype=torch.float32)
    ranges = torch.tensor([[2, 0], [9, 10]], dtype=torch.int32)[:, :, None, None]  # left padding; an empty slot
    kernel, _ = attention_forward(_module(), q, k, v, ranges)
    fallback, _ = attention_forward(_module(), q, k, v, ranges, output_attentions=True)
    assert torch.allclose(kernel, fallback, atol=1e-5)


@pytest.mark.parametrize("name", ["flashtune", "my_sdpa", "org/repo"])
def test_register_refuses_names_transformers_routes_elsewhere(name):
    with pytest.raises(ValueError, match="transformers would not route"):
        hf_attention.register(name)


def test_register_with_transformers():
    transformers = pytest.importorskip("transformers")
    name = hf_attention.register()
    assert transformers.AttentionInterface()[name] is attention_forward


def test_transformers_function_compiles_without_graph_breaks():
    q, k, v = _qkv(1, 4, 2, 16, 16, 32)
    module = torch.nn.Module()
    module.is_causal = True

    def layer(q, k, v):
        out, _ = attention_forward(module, q, k, v, None, scaling=0.2, dropout=0.0)
        return out

    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
    expected = reference_attention(q, k, v, causal=True, scale=0.2).transpose(1, 2)
    assert relative_error(compiled(q, k, v), expected) < 5e-3


def test_the_op_keeps_no_split_workspace_between_calls(tmp_path):
    # CUDA graphs of compiled code refuse memory that outlives a captured call unless it is
    # an output (H200: "3 tensor(s) in the cudagraph pool not tracked as outputs", the
    # cached split workspace): through the custom op nothing is kept; the eager op keeps it.
    from flashtune.runtime.dispatching.dispatch import Dispatcher, get_dispatcher, set_store
    from flashtune.runtime.dispatching.prepared import PreparedDecode

    set_store(tmp_path / "none.json")
    q, k, v = _qkv(1, 4, 1, 1, 512, 32, dtype=torch.float32)
    for _ in range(2):
        out = torch.ops.flashtune.flash_attention(q, k, v, True, None)
    decode = [p for p in get_dispatcher()._calls.values() if isinstance(p, PreparedDecode)]
    assert decode and decode[0].splits > 1 and not decode[0].workspaces
    assert relative_error(out, reference_attention(q, k, v, causal=True)) < 1e-4
    eager = Dispatcher(tmp_path / "none.json")
    for _ in range(2):
        eager(q, k, v, causal=True)
    assert any(p.workspaces for p in eager._calls.values() if isinstance(p, PreparedDecode))
