"""Launcher of the lean descriptor kernel (``_flash_fwd_lean``) for one variant.

A :class:`LeanVariant` names every constexpr switch of the kernel plus the tile and launch
options; the exploration benchmark times variants side by side, the op's TMA path runs
the one that measured best.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
import triton

from flashtune.kernels._flash_fwd_lean import lean_attention_kernel
from flashtune.kernels._flash_fwd_oneloop import one_loop_attention_kernel, specializes
from flashtune.kernels.config import Value
from flashtune.kernels.launch_plan import launch_plan
from flashtune.kernels.launch_support import LOG2_E, LengthTwins, device_sm_count, use_descriptor_scratch

DESC_MODES = ("head", "flat", "rank4")
#: The descriptor layout the op's lean path uses where the inputs allow it (flat needs
#: (batch, heads, len) contiguous, made once on the host) ...
PREFERRED_DESC = "flat"
#: ... and for other layouts: rank-4 descriptors with the tensors' own strides, also made
#: on the host. Not per-head device descriptors ("head"): on the H200 (bench_prefill,
#: 2026-12-01) host-made descriptors ran 0-10 % faster, and the warp-specialized loop with
#: device-made ones fails to compile at 4 warps (PassManager::run failed) where the
#: host-made ones compile -- but compile unspecialized: at 4 warps ``lean_ws`` is ``lean``
#: (same registers, spills and shared memory for sm90, same time on the H200; BENCHMARKS.md
#: "Prefill: the minimal kernel's costs, one at a time"); ``one_loop`` is the form that
#: specializes there.
FALLBACK_DESC = "rank4"


@dataclasses.dataclass(frozen=True)
class LeanVariant:
    """One point of the lean kernel's switches (see ``_flash_fwd_lean``'s docstring)."""

    BLOCK_M: int = 128
    BLOCK_N: int = 128
    num_warps: int = 8
    num_stages: int = 2
    desc: str = "flat"
    host_desc: bool = True
    q_desc: bool = True
    scale_early: bool = False
    lazy_rescale: bool = False
    overlap: bool = False
    warp_specialize: bool = False
    persistent: bool = False
    programs_per_sm: int = 1  # persistent programs per SM (small tiles leave room for two)
    bh_major: bool = False
    #: Every key block in one loop, descriptors made on the device (``_flash_fwd_oneloop``:
    #: the form Triton 3.6 warp-specializes at 4 warps); ``desc``, ``host_desc``,
    #: ``q_desc``, ``scale_early``, ``lazy_rescale`` and ``overlap`` do not apply to it.
    one_loop: bool = False
    #: Constexprs of the config the switches above do not name (knobs declared since, in
    #: kernels/knobs.py), passed to the kernel as they are: its JIT function refuses one it
    #: does not declare.
    extra: tuple[tuple[str, Value], ...] = ()
    #: Compile options of the config beyond ``num_warps`` and ``num_stages`` (a knob declared
    #: since: ``maxnreg``, ...), passed to Triton as they are.
    options: tuple[tuple[str, Value], ...] = ()

    def __post_init__(self) -> None:
        if self.desc not in DESC_MODES:
            raise ValueError(f"desc must be one of {DESC_MODES}, got {self.desc!r}")
        if self.one_loop and self.persistent:
            raise ValueError("one_loop has no persistent grid (it launches one program a tile)")

    def label(self) -> str:
        """A short readable name: tile, warps, stages, then the switches that are on."""
        if self.one_loop:
            return " ".join([f"{self.BLOCK_M}x{self.BLOCK_N}", f"{self.num_warps}w", f"{self.num_stages}st", "oneloop"]
                            + [name for name, on in (("ws", self.warp_specialize), ("bhmajor", self.bh_major)) if on])
        parts = [f"{self.BLOCK_M}x{self.BLOCK_N}", f"{self.num_warps}w", f"{self.num_stages}st", self.desc]
        if self.desc != "head":
            parts.append("host" if self.host_desc else "dev")
        parts += [name for name, on in (("qdesc", self.q_desc), ("early", self.scale_early),
                                         ("lazy", self.lazy_rescale), ("overlap", self.overlap), ("ws", self.warp_specialize),
                                         ("pers", self.persistent), ("bhmajor", self.bh_major)) if on]
        if self.persistent and self.programs_per_sm != 1:
            parts.append(f"x{self.programs_per_sm}")
        return " ".join(parts)


#: The config's constexprs (``launch_plan``) each lean variant takes, as LeanVariant fields.
_LEAN_FIELDS = {"BLOCK_M": "BLOCK_M", "BLOCK_N": "BLOCK_N", "WARP_SPECIALIZE": "warp_specialize",
                "OVERLAP": "overlap", "PERSISTENT": "persistent", "BH_MAJOR": "bh_major"}
#: The plan's compile options LeanVariant names as fields (the label shows them).
_LEAN_OPTIONS = ("num_warps", "num_stages")
#: The variants of ``launch_plan`` this launcher runs, and whether each is the one-loop kernel.
LEAN_VARIANTS = {"lean": False, "oneloop": True}
#: The kernels to launch for a pair of lengths (a length of 1: its twin, launch_support.LengthTwins).
_LEAN_KERNEL = LengthTwins(lean_attention_kernel)
_ONE_LOOP_KERNEL = LengthTwins(one_loop_attention_kernel)


def variant_for(config: Mapping[str, Value], *tensors: torch.Tensor) -> LeanVariant:
    """The lean kernel's switches for a config whose plan (``launch_plan``) picks a lean
    variant, and the tensors it will read and write (their layout picks the descriptors).

    Raises:
        ValueError: the plan's variant is not this launcher's, or the combination is one
            LeanVariant refuses.
    """
    plan = launch_plan(config)
    if plan.variant not in LEAN_VARIANTS:
        raise ValueError(f"config {dict(config)}: variant {plan.variant!r} is not one of the lean launcher's "
                         f"{list(LEAN_VARIANTS)}")
    # FP8 is the launcher's scales argument (launch_lean's ``scales``).
    extra = tuple((name, value) for name, value in plan.constexprs.items()
                  if name not in _LEAN_FIELDS and name != "FP8")
    desc = PREFERRED_DESC
    if desc == "flat" and not all(flat_compatible(t) for t in tensors):
        desc = FALLBACK_DESC
    switches = {field: plan.constexprs[name] for name, field in _LEAN_FIELDS.items() if name in plan.constexprs}
    named = {name: plan.options[name] for name in _LEAN_OPTIONS}
    options = tuple((name, value) for name, value in plan.options.items() if name not in _LEAN_OPTIONS)
    return LeanVariant(**switches, **named, desc=desc, host_desc=desc != "head", q_desc=True,
                       one_loop=LEAN_VARIANTS[plan.variant], extra=extra, options=options)


def flat_compatible(t: torch.Tensor) -> bool:
    """Whether (batch, heads, len) of ``t`` collapse into one row index (flat descriptors)."""
    _, heads, length, _ = t.shape
    return t.stride(1) == length * t.stride(2) and t.stride(0) == heads * t.stride(1)


def _descriptor(t: torch.Tensor, block: list[int], desc: str) -> Any:
    from triton.tools.tensor_descriptor import TensorDescriptor

    if desc == "rank4":
        return TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, *block])
    # flat: rows of every (batch, head) one after another.
    rows = t.shape[0] * t.shape[1] * t.shape[2]
    return TensorDescriptor(t, [rows, t.shape[3]], [t.stride(2), 1], block)


def launch_lean(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    *,
    causal: bool,
    scale: float,
    variant: LeanVariant,
    scales: torch.Tensor | None = None,
    sm_count: int | None = None,
    warmup: bool = False,
) -> Any:
    """Launch (or, with ``warmup``, only compile) the lean kernel into ``out``.

    Args:
        q, k, v: contiguous-in-head_dim inputs; with ``scales`` (fp8), ``v`` is V^T of
            shape (batch, kv_heads, head_dim, kv_len) and ``scales`` the per-tensor
            q, k, v scales (``attention.quantize_fp8``).
        sm_count: SMs a persistent grid fills (default: the device's), times the variant's
            ``programs_per_sm``.
        warmup: compile into Triton's cache without launching (the precompile pool).
    """
    if variant.one_loop:
        return _launch_one_loop(q, k, v, out, causal=causal, scale=scale, variant=variant, scales=scales,
                                warmup=warmup)
    batch, q_heads, q_len, head_dim = q.shape
    kv_heads, kv_len = k.shape[1], k.shape[2]
    fp8 = scales is not None
    bm, bn = variant.BLOCK_M, variant.BLOCK_N
    if variant.desc != "head" and variant.host_desc:
        if variant.desc == "flat" and not all(flat_compatible(t) for t in (q, k, v, out)):
            raise ValueError("flat descriptors need q, k, v and out with (batch, heads, len) contiguous")
        qd = _descriptor(q, [bm, head_dim], variant.desc)
        od = _descriptor(out, [bm, head_dim], variant.desc)
        kd = _descriptor(k, [bn, head_dim], variant.desc)
        if fp8:
            # V^T: rows are (batch, head, d), columns the keys (row length padded to 16).
            from triton.tools.tensor_descriptor import TensorDescriptor

            if variant.desc == "rank4":
                vd = TensorDescriptor(v, list(v.shape), list(v.stride()), [1, 1, head_dim, bn])
            else:
                vd = TensorDescriptor(v, [batch * kv_heads * head_dim, kv_len], [v.stride(2), 1], [head_dim, bn])
        else:
            vd = _descriptor(v, [bn, head_dim], variant.desc)
    else:
        use_descriptor_scratch()
        qd, kd, vd, od = q, k, v, out
    if fp8:
        stride_v = (v.stride(0), v.stride(1), v.stride(3), v.stride(2))  # (z, h, n, d) of V^T
    else:
        stride_v = (v.stride(0), v.stride(1), v.stride(2), v.stride(3))
    m_blocks = triton.cdiv(q_len, bm)
    if variant.persistent:
        programs = (sm_count or _sm_count(q.device)) * variant.programs_per_sm
        grid: tuple[int, ...] = (min(programs, m_blocks * batch * q_heads),)
    elif variant.bh_major:
        grid = (batch * q_heads, m_blocks)
    else:
        grid = (m_blocks, batch * q_heads)
    args = (qd, kd, vd, od, q, k, v, out, scales if fp8 else q,
            *q.stride()[:3], *k.stride()[:3], *stride_v, *out.stride()[:3],
            batch, q_heads, kv_heads, q_len, kv_len, scale * LOG2_E)
    options = dict(
        HEAD_DIM=head_dim, BLOCK_M=bm, BLOCK_N=bn, IS_CAUSAL=bool(causal), DESC=variant.desc,
        HOST_DESC=variant.host_desc and variant.desc != "head", Q_DESC=variant.q_desc,
        SCALE_EARLY=variant.scale_early, LAZY_RESCALE=variant.lazy_rescale, OVERLAP=variant.overlap,
        WARP_SPECIALIZE=variant.warp_specialize, FP8=fp8, PERSISTENT=variant.persistent,
        BH_MAJOR=variant.bh_major, num_warps=variant.num_warps, num_stages=variant.num_stages, **dict(variant.extra),
        **dict(variant.options),
    )
    if warmup:
        return _LEAN_KERNEL(q_len, kv_len).warmup(*args, grid=grid, **options)
    return _LEAN_KERNEL(q_len, kv_len)[grid](*args, **options)


def _launch_one_loop(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, *, causal: bool,
                     scale: float, variant: LeanVariant, scales: torch.Tensor | None, warmup: bool) -> Any:
    """``launch_lean`` for a ``one_loop`` variant (its descriptors are made on the device)."""
    use_descriptor_scratch()
    batch, q_heads, q_len, head_dim = q.shape
    kv_heads, kv_len = k.shape[1], k.shape[2]
    fp8 = scales is not None
    # Flat descriptors where every tensor's (batch, heads, len) collapse into rows (fp8's
    # V^T: (batch, heads, head_dim)); else rank-4 ones (run unspecialized: ``specializes``).
    flat = all(flat_compatible(t) for t in (q, k, v, out))
    m_blocks = triton.cdiv(q_len, variant.BLOCK_M)
    grid = (batch * q_heads, m_blocks) if variant.bh_major else (m_blocks, batch * q_heads)
    args = (q, k, v, out, scales if fp8 else q, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
            *out.stride()[:3], batch, q_heads, kv_heads, q_len, kv_len, v.shape[3] if fp8 else head_dim,
            scale * LOG2_E)
    options = dict(HEAD_DIM=head_dim, BLOCK_M=variant.BLOCK_M, BLOCK_N=variant.BLOCK_N, IS_CAUSAL=bool(causal),
                   WARP_SPECIALIZE=variant.warp_specialize and specializes(variant.BLOCK_M, flat), FP8=fp8, BH_MAJOR=variant.bh_major,
                   FLAT=flat, EVEN_M=q_len % variant.BLOCK_M == 0,
                   MASK=bool(causal) or kv_len % variant.BLOCK_N != 0, EMPTY_ROWS=bool(causal) and q_len > kv_len,
                   num_warps=variant.num_warps, num_stages=variant.num_stages, **dict(variant.extra),
                   **dict(variant.options))
    if warmup:
        return _ONE_LOOP_KERNEL(q_len, kv_len).warmup(*args, grid=grid, **options)
    return _ONE_LOOP_KERNEL(q_len, kv_len)[grid](*args, **options)


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 3  # the interpreter: a few programs, so each loops over several tiles
    return device_sm_count(device)
