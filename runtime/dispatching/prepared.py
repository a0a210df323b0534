"""Prepared calls: what one call key of the tuned op derives, computed once.

The launcher (``kernels.attention.flash_attention``) validates every input, the config,
the scale and the device's shared memory, allocates, then launches: 57 µs of host time a
call on the H200 (BENCHMARKS.md, "Runtime"), the whole cost of a decode step. The
dispatcher runs the launcher on the first call of a *call key* (devices, dtypes, q's shape
and strides, KV heads, the kv_len bucket, causal, scale: see ``Dispatcher.__call__``) and
keeps a :class:`PreparedCall`; later calls of the key re-check only what the key does not
fix (K and V's own shape and last stride, which a growing KV cache changes every step),
allocate the output and launch the Triton kernel with the grid, compile options, scale
and split workspace worked out on the first call (decode and the Gluon prefill kernel: the
compiled kernel object, past Triton's jit dispatcher).

Every check that protects a user still runs: those fixed by the key ran on its first
call; the others run here on every call and hand the call back to the launcher
(``None``), which raises the error naming the argument. Values that live on the device
(``cache_seqlens``) are checked by the launcher on the first call only: checking them
every call would synchronise with the GPU and break CUDA-graph capture.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from flashtune.kernels.attention import (
    check_descriptor_alignment,
    compile_options,
    forward_kernel_for,
    kernel_arguments,
    launch_grid,
    persistent_programs,
    resolve_scale,
)
from flashtune.kernels.config import Config
from flashtune.kernels.decode import TRANSIENT, BoundDecode, DecodeWorkspace, launch_decode
from flashtune.kernels.gluon import BoundGluon
from flashtune.kernels.launch_plan import launch_plan
from flashtune.kernels.launch_support import binding_enabled, use_descriptor_scratch

#: Split workspaces one prepared decode call keeps (one per CUDA stream it ran on).
MAX_WORKSPACES = 8


def _no_object() -> None:
    """A weak reference's stand-in that answers None (no tensor checked yet, or None passed)."""
    return None


def _weak(obj: Any) -> Callable[[], Any]:
    """A weak reference to a tensor, or a callable answering None for None."""
    return _no_object if obj is None else weakref.ref(obj)


class PreparedCall:
    """The prefill kernel's launch for one call key (pointer or TMA loads, not fp8), with
    or without per-sequence key ranges (``cache_seqlens``, ``kv_start``).

    Args:
        q: the first call's query (its shape, strides, device and dtype are the key's).
        k: the first call's keys (for the KV head count).
        causal: the mask.
        scale: the softmax scale as the caller passed it (None: 1/sqrt(head_dim)).
        config: the validated config the first call launched.
        with_seqlens: whether calls of this key pass ``cache_seqlens``.
        with_kv_start: whether calls of this key pass ``kv_start``.
    """

    __slots__ = ("batch", "head_dim", "out_shape", "out_dtype", "device", "grid", "options",
                 "tma", "static", "scale", "with_seqlens", "with_kv_start", "seq_shape")

    def __init__(self, q: torch.Tensor, k: torch.Tensor, *, causal: bool, scale: float | None, config: Config,
                 with_seqlens: bool = False, with_kv_start: bool = False) -> None:
        batch, q_heads, q_len, head_dim = q.shape
        self.batch, self.head_dim = batch, head_dim
        self.out_shape, self.out_dtype, self.device = tuple(q.shape), q.dtype, q.device  # a tuple: see PreparedDecode
        self.seq_shape = torch.Size((batch,))
        self.grid = launch_grid(config, q_len=q_len, batch_heads=batch * q_heads, device=q.device)
        self.options = compile_options(config, head_dim=head_dim, causal=causal, has_seqlens=with_seqlens,
                                       has_kv_start=with_kv_start)
        self.with_seqlens, self.with_kv_start = with_seqlens, with_kv_start
        self.tma = bool(launch_plan(config).constexprs["USE_TMA"])
        self.scale = resolve_scale(scale, head_dim)
        # The output is allocated contiguous: its strides follow from the key's shape.
        out_strides = (q_heads * q_len * head_dim, q_len * head_dim, head_dim)
        self.static = {"stride_q": q.stride()[:3], "stride_o": out_strides, "batch": batch,
                       "q_heads": q_heads, "kv_heads": k.shape[1], "q_len": q_len}

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache_seqlens: torch.Tensor | None = None,
                 kv_start: torch.Tensor | None = None) -> torch.Tensor | None:
        """Launch for these inputs; None when they need the launcher's checks (bad K/V)."""
        shape, k_strides, v_strides = k.shape, k.stride(), v.stride()
        if (shape != v.shape or shape[0] != self.batch or shape[3] != self.head_dim or not shape[2]
                or k_strides[3] != 1 or v_strides[3] != 1):
            return None
        if ((self.with_seqlens and not _per_sequence_ok(cache_seqlens, self.seq_shape, self.device))
                or (self.with_kv_start and not _per_sequence_ok(kv_start, self.seq_shape, self.device))):
            return None
        if self.tma:
            check_descriptor_alignment(q, k, v)  # raises naming the argument
            use_descriptor_scratch()
        out = q.new_empty(self.out_shape)  # q's dtype and device are the key's
        args = kernel_arguments(q, k, v, out, q, stride_k=k_strides[:3], stride_v=v_strides,
                                kv_len=shape[2], scale=self.scale, seqlens=cache_seqlens, kv_start=kv_start,
                                **self.static)
        forward_kernel_for(self.static["q_len"], shape[2])[self.grid](*args, **self.options)
        return out


class PreparedGluon:
    """The Gluon prefill kernel's launch for one call key (16-bit; the kernel takes no key
    ranges): K and V re-checked a call, the compiled kernel bound (``kernels.gluon.BoundGluon``).

    The launcher's host path for this kernel was 154 us a call on the H200 (2026-12-04), which
    the empty store's Hopper default at head_dim 64, 128 and 256 paid on every prefill call.
    """

    __slots__ = ("batch", "head_dim", "kv_heads", "out_shape", "descriptor_q", "bound")

    def __init__(self, q: torch.Tensor, k: torch.Tensor, *, causal: bool, scale: float | None,
                 config: Config) -> None:
        batch, _, _, head_dim = q.shape
        self.batch, self.head_dim, self.kv_heads = batch, head_dim, k.shape[1]
        self.out_shape = tuple(q.shape)
        self.descriptor_q = bool(launch_plan(config).descriptor_q)
        self.bound = BoundGluon(q, k, causal=causal, scale=resolve_scale(scale, head_dim), config=config,
                                programs=persistent_programs(q.device))

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache_seqlens: torch.Tensor | None = None,
                 kv_start: torch.Tensor | None = None) -> torch.Tensor | None:
        """Launch for these inputs; None when they need the launcher (bad K/V, key ranges)."""
        shape = k.shape
        if (cache_seqlens is not None or kv_start is not None or shape != v.shape or shape[0] != self.batch
                or shape[1] != self.kv_heads or shape[3] != self.head_dim or not shape[2]
                or k.stride(3) != 1 or v.stride(3) != 1):
            return None
        check_descriptor_alignment(q, k, v, with_q=self.descriptor_q)  # raises naming the argument
        out = q.new_empty(self.out_shape)  # q's dtype and device are the key's
        self.bound(q, k, v, out)
        return out


class PreparedDecode:
    """The decode kernel's launch for one call key, with its split workspace kept.

    The workspace is reused by every call of the key on one CUDA stream (stream order
    makes that safe; a graph captured on a stream keeps the addresses it captured), one
    per stream, so concurrent streams never share one.

    Args:
        q: the first call's query.
        k: the first call's keys.
        causal: the mask.
        scale: the softmax scale as the caller passed it.
        config: the validated decode config the first call launched.
        with_seqlens: whether calls of this key pass ``cache_seqlens``.
        with_kv_start: whether calls of this key pass ``kv_start``.
    """

    __slots__ = ("batch", "head_dim", "out_shape", "out_dtype", "device", "causal", "scale", "config",
                 "with_seqlens", "with_kv_start", "workspaces", "splits", "tma", "bound", "seq_shape", "checked")

    def __init__(self, q: torch.Tensor, k: torch.Tensor, *, causal: bool, scale: float | None, config: Config,
                 with_seqlens: bool, with_kv_start: bool = False) -> None:
        self.batch, self.head_dim = q.shape[0], q.shape[3]
        # A tuple, not q's torch.Size: new_empty parses a tuple faster (CPU, 2026-12-02: 3.3
        # against 4.4 us a call).
        self.out_shape, self.out_dtype, self.device = tuple(q.shape), q.dtype, q.device
        self.seq_shape = torch.Size((self.batch,))  # a per-sequence tensor's, compared on its first call
        #: Weak references to the (cache_seqlens, kv_start) objects whose form was last
        #: checked: every layer of a forward pass passes the same ones (transformers' mask,
        #: hf_attention's views). Weak: a strong one would keep a tensor of a CUDA graph's
        #: pool alive past its replay, which CUDA-graph trees refuse ("tensor(s) in the
        #: cudagraph pool not tracked as outputs", the H200, 2026-12-02).
        self.checked: tuple[Any, Any] = (_no_object, _no_object)
        self.causal, self.scale, self.config = causal, resolve_scale(scale, q.shape[3]), config
        self.with_seqlens, self.with_kv_start = with_seqlens, with_kv_start
        plan = launch_plan(config)
        self.splits = int(plan.host["num_splits"])
        self.tma = bool(plan.constexprs["USE_TMA"])
        self.workspaces: dict[int, DecodeWorkspace] = {}
        # The compiled kernels bound once (CUDA); None: every call through launch_decode.
        self.bound = (BoundDecode(q, k, causal=causal, scale=self.scale, config=config, has_seqlens=with_seqlens,
                                  has_kv_start=with_kv_start)
                      if q.device.type == "cuda" and binding_enabled() else None)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 cache_seqlens: torch.Tensor | None = None, kv_start: torch.Tensor | None = None) -> torch.Tensor | None:
        """Launch for these inputs; None when they need the launcher's checks."""
        shape = k.shape
        if (shape != v.shape or shape[0] != self.batch or shape[3] != self.head_dim or not shape[2]
                or k.stride()[3] != 1 or v.stride()[3] != 1):
            return None
        checked = self.checked  # compared by identity: == on tensors compares values
        if (self.with_seqlens or self.with_kv_start) and (checked[0]() is not cache_seqlens
                                                         or checked[1]() is not kv_start):
            if not self._ranges_ok(cache_seqlens, kv_start):
                return None  # the launcher names what is wrong (the values are clamped by the kernel)
        if self.tma:
            check_descriptor_alignment(q, k, v)  # raises naming the argument
        out = q.new_empty(self.out_shape)  # q's dtype and device are the key's; fewer arguments to parse
        if self.bound is not None:
            stream = _current_stream(self.device)  # once a call: the workspace's and both launches'
            self.bound(q, k, v, out, cache_seqlens, kv_start, self._workspace(q, stream) if self.splits > 1 else None,
                       stream)
            return out
        launch_decode(q, k, v, out, causal=self.causal, scale=self.scale, config=self.config,
                      cache_seqlens=cache_seqlens, kv_start=kv_start, workspace=self._workspace(q) if self.splits > 1 else None)
        return out

    def _ranges_ok(self, cache_seqlens: Any, kv_start: Any) -> bool:
        """Whether the per-sequence tensors have the kernels' form; remembered per pair of
        objects (a tensor object's dtype, shape, device and layout do not change in normal
        use, ``resize_``/``set_`` aside), so a forward pass checks them at its first layer.
        A dead object's weak reference answers None, never a newer object at its address."""
        if ((self.with_seqlens and not _per_sequence_ok(cache_seqlens, self.seq_shape, self.device))
                or (self.with_kv_start and not _per_sequence_ok(kv_start, self.seq_shape, self.device))):
            return False
        self.checked = (_weak(cache_seqlens), _weak(kv_start))
        return True

    def _workspace(self, q: torch.Tensor, stream: int | None = None) -> DecodeWorkspace:
        if TRANSIENT.get():
            return DecodeWorkspace.for_query(q, self.splits)  # nothing kept (kernels.decode.TRANSIENT)
        if stream is None:
            stream = _current_stream(self.device)
        workspace = self.workspaces.get(stream)
        if workspace is None:
            if len(self.workspaces) >= MAX_WORKSPACES:
                self.workspaces.clear()
            workspace = self.workspaces[stream] = DecodeWorkspace.for_query(q, self.splits)
        return workspace


def _per_sequence_ok(t: torch.Tensor, shape: torch.Size, device: torch.device) -> bool:
    """Whether a per-sequence tensor has the form the kernels take (int32 ``shape``, i.e.
    (batch,), contiguous, on the device); its values are the kernels' to clamp (no host read)."""
    return t.dtype is torch.int32 and t.shape == shape and t.is_contiguous() and t.device == device


def _current_stream(device: torch.device) -> int:
    """The raw handle of the device's current CUDA stream (0 off CUDA: the interpreter)."""
    if device.type != "cuda":
        return 0
    return torch._C._cuda_getCurrentRawStream(device.index)


def prepare(q: torch.Tensor, k: torch.Tensor, *, causal: bool, scale: float | None, config: Config,
            cache_seqlens: Any = None, kv_start: Any = None) -> PreparedCall | PreparedDecode | None:
    """The prepared form of a call that just ran through the launcher, or None where every
    call must take the launcher (fp8 quantizes Q, K, V on every call anyway; the lean
    loads have their own launcher; the Gluon kernel runs on CUDA only)."""
    ranges = {"with_seqlens": cache_seqlens is not None, "with_kv_start": kv_start is not None}
    plan = launch_plan(config)
    if plan.variant == "decode":
        return PreparedDecode(q, k, causal=causal, scale=scale, config=config, **ranges)
    if plan.constexprs["FP8"] or plan.variant not in ("forward", "gluon"):
        return None
    if plan.variant == "gluon":
        if q.device.type != "cuda" or cache_seqlens is not None or kv_start is not None:
            return None
        return PreparedGluon(q, k, causal=causal, scale=scale, config=config)
    return PreparedCall(q, k, causal=causal, scale=scale, config=config, **ranges)
