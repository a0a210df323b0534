"""Launcher of the Gluon kernel with FlashAttention 3's schedule (``_flash_fwd_gluon``).

A :class:`GluonVariant` is the kernel's part of a config: the program's query rows
(``BLOCK_M``), split over one or two consumer warpgroups (``loads="gluon_ws"``: one;
``"gluon_pingpong"``: two, each ``BLOCK_M // 2`` rows, free-running; ``"gluon_pingpong_ordered"``:
two whose GEMMs take turns), the key block, the warps of a
consumer group, the depth of the K/V ring, the causal tile order and the grid (one program a
tile, or ``persistent``: at most the SMs' programs, each looping over tiles).

The config's part comes from its plan (kernels/launch_plan.py): what the launcher derives
from the fields (``M_TILE``, ``LONGEST_FIRST``, the ring's ``NUM_STAGES``) it computes, and
every other constexpr of the plan the kernel declares, and every other compile option, it
passes as the plan has it, so a knob declared since reaches the kernel with no edit here.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import torch
import triton
from triton.experimental import gluon

from flashtune.kernels._flash_fwd_gluon import gluon_attention_kernel
from flashtune.kernels.config import Value
from flashtune.kernels.dtypes import HALF_DTYPES, interpreting
from flashtune.kernels.launch_plan import launch_plan
from flashtune.kernels.launch_support import LOG2_E, LengthTwins, binding_enabled, launch_hooks_set

#: Registers a thread of the producer warp keeps (FA3's producer: 24-56); the rest of the
#: register file goes to the consumers. A worker partition's count must be a multiple of
#: 8 in [24, 256] (setmaxnreg).
PRODUCER_REGS = 24
#: Registers a thread of a consumer worker partition asks for: with two consumer
#: warpgroups, one producer warp and 64K registers an SM, 2 x 128 x 240 + 32 x 24 fit.
#: (Three consumer groups at 160, FA3's split at head_dim 64, ran slower on every suite
#: workload: BENCHMARKS.md, 2026-12-04b.)
CONSUMER_REGS = 240
#: From this head dim on, 16-bit variants rescale a warp's accumulator only in blocks where one of
#: its rows' maxima moved (the kernel's ``LAZY_RESCALE``, FA4's conditional rescaling): at
#: head_dim 256 a block's rescale is 4 multiplies a score (128 accumulator registers a thread
#: against 32 scores at 64 keys a block), and skipping it ran 4-8 % faster on the H200; at 64
#: and 128, where it is 0.5-1, the branches cost more than they save (1-5 % slower), and for
#: fp8 (no lag allowed, and spills) 3-9 % slower (BENCHMARKS.md, 2026-12-04c).
LAZY_RESCALE_MIN_HEAD_DIM = 256


#: How an fp8 variant's P reaches the PV product (the kernel's ``FP8_P``; 16-bit variants
#: ignore it): ``"multiply"``: exp2, then x448 (e4m3's range), the accumulator layout
#: converted to the A operand's by warp shuffles (the first fp8 form); ``"exp2"``: the
#: stretch folded into exp2 (the row maximum less log2 448: no multiply a score);
#: ``"permuted"``: that, and FA3's key order inside each 16-key group, so the conversion is
#: in-thread byte permutes; it reads V^T written in that order (``quantize_fp8(...,
#: v_order="fa3")``), and the launcher picks it from the V^T it is given; ``"permuted_h2"``:
#: that, with the exponentials in half precision (PTX ``ex2.approx.f16x2``; e4m3 keeps 3
#: mantissa bits, f16 10), P converted to e4m3 from f16 pairs, the row sum in fp32. On sm90
#: ptxas splits each into two MUFU.EX2.F16, so it saves no MUFU and costs repacks: slower on
#: the H200 (BENCHMARKS.md, part F, third step), kept to time against.
FP8_P_FORMS = ("multiply", "exp2", "permuted", "permuted_h2")
#: The forms that read V^T in FA3's key order (``quantize_fp8(..., v_order="fa3")``).
FA3_ORDER_FORMS = ("permuted", "permuted_h2")
#: The form the op runs (``flash_attention`` and ``launch`` quantize V^T in its key order).
DEFAULT_FP8_P = "permuted"


@dataclasses.dataclass(frozen=True)
class GluonVariant:
    """One point of the Gluon kernel's knobs."""

    BLOCK_M: int = 128
    BLOCK_N: int = 128
    num_warps: int = 4
    num_stages: int = 2
    groups: int = 1
    #: Two groups' GEMMs take turns (FA3's warp-scheduler barrier); without it they run free.
    ordered: bool = False
    longest_first: bool = False
    #: A persistent grid: ``min(programs, tiles)`` programs, each looping over tiles (the
    #: producer loading the next tile's Q and K/V under this tile's last products and epilogue).
    persistent: bool = False
    #: Constexprs of the config the fields above do not name that the kernel declares (knobs
    #: declared since, in kernels/knobs.py), passed to it as they are.
    extra: tuple[tuple[str, Value], ...] = ()
    #: Compile options of the config beyond ``num_warps`` and ``num_stages`` (``maxnreg``, ...),
    #: passed to Triton as they are.
    options: tuple[tuple[str, Value], ...] = ()

    def __post_init__(self) -> None:
        if self.groups not in (1, 2):
            raise ValueError(f"groups must be 1 or 2, got {self.groups}")
        if self.ordered and self.groups != 2:
            raise ValueError("ordered turns need two consumer groups")
        if self.BLOCK_M % self.groups or self.m_tile < 16 * self.num_warps:
            raise ValueError(f"BLOCK_M={self.BLOCK_M} over {self.groups} group(s) of {self.num_warps} warps: "
                             f"each group needs at least 16 rows a warp")

    @property
    def m_tile(self) -> int:
        """Query rows of one consumer group."""
        return self.BLOCK_M // self.groups

    def label(self) -> str:
        parts = [f"{self.BLOCK_M}x{self.BLOCK_N}", f"{self.num_warps}w", f"{self.num_stages}st",
                 "gluon_ws" if self.groups == 1 else "gluon_pingpong_ordered" if self.ordered else "gluon_pingpong"]
        extra = dict(self.extra)
        return " ".join(parts + (["longest"] if self.longest_first else []) + (["pers"] if self.persistent else [])
                        + (["zigzag"] if extra.get("ZIGZAG") else [])
                        + ([f"poly {extra['EXP2_POLY']}/16"] if extra.get("EXP2_POLY") else [])
                        + (["lazy"] if extra.get("LAZY_RESCALE") else []))


#: The plan's constexprs (``launch_plan``) the Gluon variant takes, as GluonVariant fields.
_GLUON_FIELDS = {"BLOCK_M": "BLOCK_M", "BLOCK_N": "BLOCK_N", "NUM_GROUPS": "groups", "ORDERED": "ordered",
                 "BH_MAJOR": "longest_first", "PERSISTENT": "persistent"}
#: The plan's compile options the fields name (the ring's depth is the kernel's NUM_STAGES:
#: Gluon pipelines by hand).
_GLUON_OPTIONS = ("num_warps", "num_stages")
#: Every argument the kernel declares: of the plan's other constexprs it takes those (FP8).
_DECLARED = frozenset(gluon_attention_kernel.arg_names)
#: The kernel to launch for a pair of lengths (a length of 1: its twin, launch_support.LengthTwins).
_GLUON_KERNEL = LengthTwins(gluon_attention_kernel, jit=gluon.jit)


def gluon_variant_for(config: Mapping[str, Value]) -> GluonVariant:
    """The Gluon kernel's variant for a config whose plan (``launch_plan``) picks it."""
    plan = launch_plan(config)
    if plan.variant != "gluon":
        raise ValueError(f"config {dict(config)}: variant {plan.variant!r} is not the Gluon kernel's")
    fields = {field: plan.constexprs[name] for name, field in _GLUON_FIELDS.items()}
    extra = tuple((name, value) for name, value in plan.constexprs.items()
                  if name not in _GLUON_FIELDS and name in _DECLARED)
    options = tuple((name, value) for name, value in plan.options.items() if name not in _GLUON_OPTIONS)
    return GluonVariant(**fields, num_warps=int(plan.options["num_warps"]), num_stages=int(plan.options["num_stages"]),
                        extra=extra, options=options)


def flat(t: torch.Tensor, row: int | None = None) -> bool:
    """Whether every (batch, head, row) of ``t`` is one row of a 2-D view whose rows are
    ``row`` elements apart (the last dimension's size when None: contiguous)."""
    batch, heads, length, width = t.shape
    row = width if row is None else row
    return t.stride(3) == 1 and t.stride(2) == row and t.stride(1) == length * row \
        and t.stride(0) == heads * length * row


@functools.lru_cache(maxsize=None)
def _shared_layout(block: tuple[int, ...], dtype: torch.dtype) -> Any:
    """The NVMMA shared layout of a descriptor's ``block`` of ``dtype``. Cached: working it out
    took about 10 us a descriptor on a call's host path (and the jit dispatcher keys on it)."""
    from triton.experimental.gluon import language as gl

    element = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16, torch.float8_e4m3fn: gl.float8e4nv}[dtype]
    return gl.NVMMASharedLayout.get_default_for(list(block), element)


def _flat_descriptor(t: torch.Tensor, block: list[int]) -> Any:
    """A 2-D descriptor over every (batch, head, row) of ``t`` (rows ``t.stride(2)`` apart,
    so quantize_fp8's padded V^T rows are read as they lie; columns past the last dimension
    load as zeros)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    batch, heads, length, width = t.shape
    return TensorDescriptor(t, [batch * heads * length, width], [t.stride(2), 1], block,
                            _shared_layout(tuple(block), t.dtype))


def _head_descriptor(t: torch.Tensor, rows: int) -> Any:
    """A (batch * heads, length, head_dim) descriptor of ``rows``-row blocks: a block past a
    head's last row is clipped (the output's stores of ragged tiles)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    batch, heads, length, head_dim = t.shape
    block = [1, rows, head_dim]
    return TensorDescriptor(t, [batch * heads, length, head_dim], [length * head_dim, head_dim, 1], block,
                            _shared_layout(tuple(block), t.dtype))


def launch_options(variant: GluonVariant, *, head_dim: int, causal: bool, q_len: int, kv_len: int,
                   fp8_p: str = "exp2") -> dict[str, Any]:
    """The kernel's constexprs and compile options for ``variant`` and a call's shape (one place:
    the launch, and the tests that read what a config would launch with on a CPU).

    ``fp8_p``: one of :data:`FP8_P_FORMS` (read by fp8 variants only).
    """
    if fp8_p not in FP8_P_FORMS:
        raise ValueError(f"fp8_p must be one of {FP8_P_FORMS}, got {fp8_p!r}")
    extra = dict(variant.extra)
    # The head-dim rule, unless the variant names it (docs/gpu/variants_probe.py times both).
    lazy = extra.pop("LAZY_RESCALE", head_dim >= LAZY_RESCALE_MIN_HEAD_DIM and not extra.get("FP8", False))
    return dict(
        HEAD_DIM=head_dim, M_TILE=variant.m_tile, BLOCK_N=variant.BLOCK_N, NUM_STAGES=variant.num_stages,
        NUM_GROUPS=variant.groups, ORDERED=variant.ordered, IS_CAUSAL=causal,
        LONGEST_FIRST=causal and variant.longest_first, PERSISTENT=variant.persistent, MASK=causal or kv_len % variant.BLOCK_N != 0,
        EMPTY_ROWS=causal and q_len > kv_len, EVEN_M=q_len % variant.BLOCK_M == 0, CONSUMER_REGS=CONSUMER_REGS,
        PRODUCER_REGS=PRODUCER_REGS, FP8_P=fp8_p, num_warps=variant.num_warps, LAZY_RESCALE=lazy,
        **extra, **dict(variant.options),
    )


def gluon_grid(variant: GluonVariant, *, q_len: int, batch_heads: int, programs: int) -> tuple[int, ...]:
    """The launch grid: (query tiles, batch * heads), or with ``persistent`` at most
    ``programs`` programs (never more than the tiles)."""
    tiles = (triton.cdiv(q_len, variant.BLOCK_M), batch_heads)
    if variant.persistent:
        return (min(tiles[0] * tiles[1], programs),)
    return tiles


def launch_gluon(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, *, causal: bool,
                 scale: float, variant: GluonVariant, programs: int, scales: torch.Tensor | None = None,
                 fp8_p: str | None = None, warmup: bool = False) -> Any:
    """Launch (or, with ``warmup``, only compile) the Gluon kernel into ``out``.

    ``programs``: the persistent grid's programs when there are more tiles (the SMs times
    programs a SM); a tiles grid launches one program a tile.

    Strided inputs (a (batch, len, heads, dim) projection viewed as (batch, heads, len,
    dim)) are copied contiguous first, and a strided ``out`` is written through a contiguous
    buffer: one pass over each more, where per-head (rank-3) descriptors would need none.

    An fp8 variant (``use_fp8=True``) takes what ``kernels.attention.quantize_fp8`` returns:
    e4m3 ``q`` and ``k``, ``v`` as V^T (batch, kv_heads, head_dim, kv_len) with rows padded
    to 16, and ``scales``; ``out`` is 16-bit. Given V^T in FA3's key order (``quantize_fp8(...,
    v_order="fa3")``: 5-D, (batch, kv_heads, head_dim, key groups, 16)) it runs P in that order
    (``fp8_p="permuted"``); given it in key order, ``fp8_p`` (default ``"exp2"``) picks how P
    is formed (:data:`FP8_P_FORMS`).

    Raises:
        ValueError: the tensors' types do not match the variant (fp16/bf16, or e4m3 with
            ``scales`` and V^T for fp8), ``fp8_p`` does not match V^T's key order, or Triton's
            interpreter is on (it cannot run Gluon).
    """
    fp8 = bool(dict(variant.extra).get("FP8", False))
    _check_operands(q, k, v, out, scales, fp8)
    fp8_p = _fp8_p_for(v, fp8_p) if fp8 else "exp2"
    if interpreting():
        raise ValueError("the Gluon kernel cannot run under TRITON_INTERPRET=1 (Triton's interpreter runs "
                         "no Gluon); it compiles for Hopper only")
    if fp8:
        q, k = (t if flat(t) else t.contiguous() for t in (q, k))
    else:
        q, k, v = (t if flat(t) else t.contiguous() for t in (q, k, v))
    if not flat(out):
        staged = torch.empty(q.shape, dtype=out.dtype, device=out.device)
        done = launch_gluon(q, k, v, staged, causal=causal, scale=scale, variant=variant, programs=programs,
                            scales=scales, fp8_p=fp8_p, warmup=warmup)
        if not warmup:
            out.copy_(staged)
        return done
    batch, q_heads, q_len, head_dim = q.shape
    kv_heads, kv_len = k.shape[1], k.shape[2]
    m_tile, bn = variant.m_tile, variant.BLOCK_N
    qd, od = _flat_descriptor(q, [m_tile, head_dim]), _head_descriptor(out, m_tile)
    # fp8: V^T tiles of every head dimension and BLOCK_N keys (wgmma's 8-bit B operand K-major).
    if v.dim() == 5:
        # FA3's key order: the descriptor spans the padded key groups, whose zeros some of the
        # last group's positions hold (a position past kv_len may hold a key before it).
        v = v.reshape(*v.shape[:3], v.shape[3] * v.shape[4])
    kd, vd = _flat_descriptor(k, [bn, head_dim]), _flat_descriptor(v, [head_dim, bn] if fp8 else [bn, head_dim])
    grid = gluon_grid(variant, q_len=q_len, batch_heads=batch * q_heads, programs=programs)
    # Without fp8 the scales are not read: ``out`` stands in for the pointer.
    args = (qd, kd, vd, od, out, out if scales is None else scales, batch, q_heads, kv_heads, q_len, kv_len,
            scale * LOG2_E)
    options = launch_options(variant, head_dim=head_dim, causal=causal, q_len=q_len, kv_len=kv_len, fp8_p=fp8_p)
    if warmup:
        return _GLUON_KERNEL(q_len, kv_len).warmup(*args, grid=grid, **options)
    return _GLUON_KERNEL(q_len, kv_len)[grid](*args, **options)


class BoundGluon:
    """``launch_gluon`` for one prepared call key (16-bit, not fp8) with the compiled kernels bound.

    The generic launch of a Gluon call cost 95-158 us of host time on the H200 (2026-12-04,
    BENCHMARKS.md "Prefill: the suite against SDPA"), about as long as D64 full's 167 us
    kernel: the variant, options and four descriptors' shared layouts worked out again, and Triton's jit
    dispatcher binding 30 arguments and keying each descriptor by its layout's text. Here what
    the key fixes (the grid, the lengths but the keys', the scale, the layouts) is built once;
    a call makes its four descriptors and, after the first call of a specialization class of
    what still varies (the key count: equal to 1, a multiple of 16 or of ``BLOCK_N``, past the
    queries), launches the compiled kernel object directly, as ``kernels.decode.BoundDecode``
    does. Triton keys a Gluon descriptor by its dtype, block and layout only (all fixed here),
    and the output (allocated by the caller, 16-byte aligned) stands in for the scales.

    ``binding_enabled()`` off or a launch hook set (a profiler's): every call through the jit
    dispatcher, as ``launch_gluon``. CUDA only.
    """

    __slots__ = ("variant", "causal", "grid", "fixed", "qk_scale", "kernels", "bind", "device_index")

    def __init__(self, q: torch.Tensor, k: torch.Tensor, *, causal: bool, scale: float, config: Mapping[str, Value],
                 programs: int) -> None:
        batch, q_heads, q_len, head_dim = q.shape
        self.variant = gluon_variant_for(config)
        if dict(self.variant.extra).get("FP8", False):
            raise ValueError("BoundGluon launches 16-bit Gluon configs; fp8 quantizes on every call (launch_gluon)")
        self.causal = causal
        grid = gluon_grid(self.variant, q_len=q_len, batch_heads=batch * q_heads, programs=programs)
        self.grid = (*grid, *(1,) * (3 - len(grid)))
        self.fixed = (batch, q_heads, k.shape[1], q_len)
        self.qk_scale = scale * LOG2_E
        self.kernels: dict[tuple[bool, ...], tuple[Any, tuple[Any, ...]]] = {}
        self.bind = binding_enabled()
        self.device_index = (q.device.index if q.device.index is not None
                             else torch.cuda.current_device() if q.device.type == "cuda" else -1)

    def arguments(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  out: torch.Tensor) -> tuple[tuple[Any, ...], tuple[bool, ...]]:
        """(the kernel's positional arguments, the specialization class of this call): the host
        work before the launch (no CUDA call). q, k, v flat (``flat``), out contiguous."""
        head_dim, m_tile, bn = q.shape[3], self.variant.m_tile, self.variant.BLOCK_N
        kv_len = k.shape[2]
        args = (_flat_descriptor(q, [m_tile, head_dim]), _flat_descriptor(k, [bn, head_dim]),
                _flat_descriptor(v, [bn, head_dim]), _head_descriptor(out, m_tile), out, out, *self.fixed, kv_len,
                self.qk_scale)
        # What Triton specializes kv_len on (1: a twin kernel; a multiple of 16; 64-bit) and what
        # the options read of it (MASK: a ragged key tail; EMPTY_ROWS: more queries than keys).
        key = (kv_len == 1, kv_len % 16 == 0, kv_len >= 2**31, kv_len % bn == 0, self.fixed[3] > kv_len)
        return args, key

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 stream: int | None = None) -> None:
        """Launch into ``out`` (contiguous); q, k, v that are not flat are copied first, as
        ``launch_gluon`` does."""
        q, k, v = (t if flat(t) else t.contiguous() for t in (q, k, v))
        args, key = self.arguments(q, k, v, out)
        bound = self.kernels.get(key)
        if bound is None or not self.bind or launch_hooks_set():
            q_len, kv_len = self.fixed[3], k.shape[2]
            options = launch_options(self.variant, head_dim=q.shape[3], causal=self.causal, q_len=q_len, kv_len=kv_len)
            kernel = _GLUON_KERNEL(q_len, kv_len)
            compiled = kernel[self.grid](*args, **options)
            # The compiled kernel takes every parameter, the constexprs too (bound as the jit binds them).
            consts = tuple(options[p.name] if p.name in options else p.default for p in kernel.params if p.is_constexpr)
            self.kernels[key] = (compiled, consts)
            return
        compiled, consts = bound
        if stream is None:
            stream = torch._C._cuda_getCurrentRawStream(self.device_index)
        compiled.run(*self.grid, stream, compiled.function, compiled.packed_metadata, None, None, None, *args, *consts)


#: The torch dtypes the kernel reads and writes (16-bit; fp8 configs read e4m3 made from them).
_HALF = tuple(getattr(torch, name) for name in HALF_DTYPES)


def _check_operands(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                    scales: torch.Tensor | None, fp8: bool) -> None:
    """One clear error when the tensors are not what the variant reads."""
    if out.dtype not in _HALF:
        raise ValueError(f"the Gluon kernel writes fp16 or bf16, got out of {out.dtype}")
    if not fp8:
        if q.dtype not in _HALF:
            raise ValueError(f"the Gluon kernel runs fp16 and bf16 (fp8: a use_fp8=True config), got {q.dtype}")
        return
    if any(t.dtype != torch.float8_e4m3fn for t in (q, k, v)) or scales is None:
        raise ValueError("an fp8 Gluon config takes e4m3 q, k, V^T and their scales (kernels.attention.quantize_fp8), "
                         f"got {q.dtype}, {k.dtype}, {v.dtype} and scales={'none' if scales is None else 'given'}")
    batch, kv_heads, kv_len, head_dim = k.shape
    if v.dim() == 5:
        groups = triton.cdiv(kv_len, 16)
        if tuple(v.shape) != (batch, kv_heads, head_dim, groups, 16) or not v.is_contiguous():
            raise ValueError(f"fp8 V^T in FA3's key order must be contiguous {(batch, kv_heads, head_dim, groups, 16)}, "
                             f"as quantize_fp8(..., v_order='fa3') makes it; got shape {tuple(v.shape)}, "
                             f"strides {v.stride()}")
        return
    if tuple(v.shape) != (batch, kv_heads, head_dim, kv_len) or not flat(v, row=v.stride(2)) \
            or v.stride(2) % 16 or v.stride(2) < kv_len:
        raise ValueError(f"fp8 V must be V^T {(batch, kv_heads, head_dim, kv_len)} with rows 16-element aligned, "
                         f"as quantize_fp8 makes it; got shape {tuple(v.shape)}, strides {v.stride()}")


def fp8_p_v_order(fp8_p: str) -> str:
    """The key order (``quantize_fp8``'s ``v_order``) V^T must be written in for P form ``fp8_p``."""
    if fp8_p not in FP8_P_FORMS:
        raise ValueError(f"fp8_p must be one of {FP8_P_FORMS}, got {fp8_p!r}")
    return "fa3" if fp8_p in FA3_ORDER_FORMS else "keys"


def _fp8_p_for(v: torch.Tensor, fp8_p: str | None) -> str:
    """How P is formed for fp8 V^T ``v``: FA3's order (5-D V^T) needs one of FA3_ORDER_FORMS
    (``"permuted"`` unless asked), key order one of the other forms (``"exp2"`` unless asked)."""
    if v.dim() == 5:
        if fp8_p is not None and fp8_p not in FA3_ORDER_FORMS:
            raise ValueError(f"fp8_p={fp8_p!r} reads V^T in key order, got V^T in FA3's key order (5-D)")
        return "permuted" if fp8_p is None else fp8_p
    if fp8_p in FA3_ORDER_FORMS:
        raise ValueError(f"fp8_p={fp8_p!r} reads V^T in FA3's key order (quantize_fp8(..., v_order='fa3')), "
                         "got V^T in key order")
    return "exp2" if fp8_p is None else fp8_p
