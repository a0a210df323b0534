"""The torch-facing op and its launcher: validate inputs, pick the grid, launch the kernel."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import triton

from flashtune.kernels._flash_fwd import attention_forward_kernel
from flashtune.kernels.config import Config, Value
from flashtune.kernels.decode import check_cache_seqlens, check_kv_start, default_decode_config, launch_decode
from flashtune.kernels.dtypes import DTYPES, interpreting
from flashtune.kernels.gluon import DEFAULT_FP8_P, gluon_variant_for, launch_gluon
from flashtune.kernels.launch_plan import LaunchPlan, launch_plan
from flashtune.kernels.launch_support import LOG2_E, LengthTwins, device_sm_count, use_descriptor_scratch
from flashtune.kernels.lean import LEAN_VARIANTS, launch_lean, variant_for
from flashtune.kernels.resources import COMPILER_ERROR_MARKERS, known_failure, shared_memory_bytes
from flashtune.kernels.space import (
    SAFE_DEFAULT,
    decode_block_h,
    uses_decode_kernel,
    validate_config,
)
from flashtune.values.inputs import SUPPORTED_HEAD_DIMS as SUPPORTED_HEAD_DIMS  # re-export: launchers read it here

#: Torch dtype of each supported dtype name (``dtypes.DTYPE_BYTES``: the one table).
TORCH_DTYPES = {name: getattr(torch, name) for name in DTYPES}
SUPPORTED_DTYPES = tuple(TORCH_DTYPES.values())
#: The forward kernel to launch for a pair of lengths (a length of 1: its twin,
#: launch_support.LengthTwins); every launch and warm-up of it asks here.
forward_kernel_for = LengthTwins(attention_forward_kernel)


def check_qkv_agree(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raise naming the mismatch unless q, k, v share a dtype and a device and k, v a shape
    (every layout's check: dense and packed)."""
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")


def check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raise TypeError/ValueError naming the argument when q, k, v cannot be attended."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(
                f"{name} must have rank 4 (batch, heads, seq_len, head_dim), got shape {tuple(t.shape)}"
            )
        if t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name}.dtype must be float16, bfloat16 or float32, got {t.dtype}")
        if t.shape[-1] > 1 and t.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dim (head_dim), got strides {t.stride()}")
    check_qkv_agree(q, k, v)
    batch, q_heads, _, head_dim = q.shape
    if k.shape[0] != batch:
        raise ValueError(f"k batch {k.shape[0]} differs from q batch {batch}")
    if k.shape[3] != head_dim:
        raise ValueError(f"k head_dim {k.shape[3]} differs from q head_dim {head_dim}")
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {list(SUPPORTED_HEAD_DIMS)}, got {head_dim}")
    kv_heads = k.shape[1]
    if kv_heads == 0 or q_heads % kv_heads:
        raise ValueError(f"q heads ({q_heads}) must be a multiple of k/v heads ({kv_heads})")
    if q.shape[2] == 0 or k.shape[2] == 0 or batch == 0 or q_heads == 0:
        raise ValueError(f"empty input: q {tuple(q.shape)}, k {tuple(k.shape)}")
    if q.device.type == "cpu" and not interpreting():
        raise ValueError("q is on the CPU: move it to a CUDA device, or set TRITON_INTERPRET=1 to run the interpreter")


def launch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    *,
    causal: bool,
    scale: float,
    config: Config,
    warmup: bool = False,
    cache_seqlens: torch.Tensor | None = None,
    kv_start: torch.Tensor | None = None,
) -> Any:
    """Launch the kernel into ``out`` with an already validated config.

    Returns Triton's compiled-kernel handle (registers, spills, shared memory), or None
    under the interpreter. Triton errors (OutOfResources, compilation) propagate: the
    objective turns them into statuses. With ``warmup`` the kernel is only compiled into
    Triton's cache (the precompile pool), nothing runs.
    A decode config runs the decode kernel (``flashtune.kernels.decode.launch_decode``,
    a fresh split workspace).
    """
    plan = launch_plan(config)
    variant = KERNEL_VARIANTS[plan.variant]
    if (cache_seqlens is not None or kv_start is not None) and not takes_key_ranges(config):
        raise ValueError("cache_seqlens/kv_start need the decode kernel or a prefill config with pointer or "
                         f"tma loads and no fp8, got {config.to_dict()}")
    if plan.constexprs.get("FP8"):
        q, k, v, scales = quantize_fp8(q, k, v, v_order=variant.fp8_v_order)
        return launch_quantized(q, k, v, scales, out, causal=causal, scale=scale, config=config, warmup=warmup)
    return variant.launch(q, k, v, out, q, None, plan=plan, config=config, causal=causal, scale=scale, warmup=warmup,
                          seqlens=cache_seqlens, kv_start=kv_start)


def launch_quantized(
    q8: torch.Tensor,
    k8: torch.Tensor,
    v8_t: torch.Tensor,
    scales: torch.Tensor,
    out: torch.Tensor,
    *,
    causal: bool,
    scale: float,
    config: Config,
    warmup: bool = False,
    fp8_p: str | None = None,
) -> Any:
    """Launch an fp8 config on inputs already quantized by :func:`quantize_fp8`.

    ``fp8_p``: the Gluon kernel's fp8 P form (kernels/gluon.py ``FP8_P_FORMS``; None: what
    ``v8_t``'s key order reads), for benchmarks that time the forms side by side.

    Why: ``launch`` quantizes on every call (memory-bound passes over Q, K, V), which hides
    the kernel's own fp8 speed; a model that keeps fp8 activations, or a benchmark that
    quantizes once outside the timed region, calls this instead (bench_fp8).
    """
    plan = launch_plan(config)
    if not plan.constexprs["FP8"]:
        raise ValueError("launch_quantized needs a config with use_fp8=True")
    variant = KERNEL_VARIANTS[plan.variant]
    if not variant.fp8_v_descriptor:
        if v8_t.dim() != 4:
            raise ValueError(f"V^T in FA3's key order (quantize_fp8(..., v_order='fa3'), shape {tuple(v8_t.shape)}) "
                             f"is read only by the Gluon kernel, not by {config.to_dict()}")
        if fp8_p is not None:
            raise ValueError("fp8_p picks the Gluon kernel's fp8 P form; this config is not the Gluon kernel's")
        stride_v = (v8_t.stride(0), v8_t.stride(1), v8_t.stride(3), v8_t.stride(2))  # (z, h, n, d) of V^T
    else:
        stride_v = None
    return variant.launch(q8, k8, v8_t, out, scales, stride_v, plan=plan, config=config, causal=causal, scale=scale,
                          warmup=warmup, fp8_p=fp8_p)


def fp8_v_order(config: Mapping[str, Value]) -> str:
    """The order of V^T's keys an fp8 config's kernel reads by default (``quantize_fp8``'s
    ``v_order``): FA3's for the Gluon kernel (``DEFAULT_FP8_P``), key order for the others."""
    return KERNEL_VARIANTS[launch_plan(config).variant].fp8_v_order


def takes_key_ranges(config: Mapping[str, Value]) -> bool:
    """Whether a config's kernel takes per-sequence key ranges (``cache_seqlens``, ``kv_start``):
    the decode kernel, and the prefill kernel's forward variant without fp8."""
    plan = launch_plan(config)
    return KERNEL_VARIANTS[plan.variant].key_ranges and not plan.constexprs.get("FP8")


# The launchers of KERNEL_VARIANTS, one signature: the inputs (fp8: quantized, with their
# scales and V^T's strides as the kernel reads them; else ``scales`` is q, ``stride_v`` None)
# and the output, then the config with its plan and the call's options.

def _launch_forward(q, k, v, out, scales, stride_v, *, plan: LaunchPlan, config: Config, causal: bool, scale: float,
                    warmup: bool = False, seqlens: Any = None, kv_start: Any = None, fp8_p: str | None = None) -> Any:
    if stride_v is None:
        stride_v = v.stride()
    if plan.constexprs["USE_TMA"]:
        use_descriptor_scratch()
    batch, q_heads, q_len, head_dim = q.shape
    grid = launch_grid(config, q_len=q_len, batch_heads=batch * q_heads, device=q.device)
    args = kernel_arguments(q, k, v, out, scales, stride_q=q.stride()[:3], stride_k=k.stride()[:3],
                            stride_v=stride_v, stride_o=out.stride()[:3], batch=batch, q_heads=q_heads,
                            kv_heads=k.shape[1], q_len=q_len, kv_len=k.shape[2], scale=scale, seqlens=seqlens,
                            kv_start=kv_start)
    options = compile_options(config, head_dim=head_dim, causal=causal, has_seqlens=seqlens is not None,
                              has_kv_start=kv_start is not None)
    if warmup:
        return forward_kernel_for(q_len, k.shape[2]).warmup(*args, grid=grid, **options)
    return forward_kernel_for(q_len, k.shape[2])[grid](*args, **options)


def _launch_lean(q, k, v, out, scales, stride_v, *, plan: LaunchPlan, config: Config, causal: bool, scale: float,
                 warmup: bool = False, seqlens: Any = None, kv_start: Any = None, fp8_p: str | None = None) -> Any:
    # Host-side descriptors: no device scratch, and the launch stays capturable in a graph.
    return launch_lean(q, k, v, out, causal=causal, scale=scale, variant=variant_for(config, q, k, v, out),
                       scales=scales if plan.constexprs["FP8"] else None, sm_count=persistent_programs(q.device),
                       warmup=warmup)


def _launch_gluon(q, k, v, out, scales, stride_v, *, plan: LaunchPlan, config: Config, causal: bool, scale: float,
                  warmup: bool = False, seqlens: Any = None, kv_start: Any = None, fp8_p: str | None = None) -> Any:
    return launch_gluon(q, k, v, out, causal=causal, scale=scale, variant=gluon_variant_for(config),
                        scales=scales if plan.constexprs["FP8"] else None, fp8_p=fp8_p,
                        programs=persistent_programs(q.device), warmup=warmup)


def _launch_decode(q, k, v, out, scales, stride_v, *, plan: LaunchPlan, config: Config, causal: bool, scale: float,
                   warmup: bool = False, seqlens: Any = None, kv_start: Any = None, fp8_p: str | None = None) -> Any:
    # Runs even for a warm-up: precompile warms the decode kernel through decode.warm_up.
    return launch_decode(q, k, v, out, causal=causal, scale=scale, config=config, cache_seqlens=seqlens,
                         kv_start=kv_start)


@dataclass(frozen=True)
class KernelVariant:
    """What the launcher does for one kernel variant (``launch_plan(config).variant``, which
    the config's knobs pick: kernels/knobs.py). A new variant is one entry of KERNEL_VARIANTS."""

    #: Its launcher (the signature above ``_launch_forward``).
    launch: Callable[..., Any]
    #: Takes per-sequence key ranges (``cache_seqlens``, ``kv_start``), without fp8.
    key_ranges: bool = False
    #: The order of V^T's keys its fp8 form reads by default (``quantize_fp8``'s ``v_order``).
    fp8_v_order: str = "keys"
    #: Its fp8 form reads V^T through a descriptor (either key order, and ``fp8_p``'s P
    #: forms); False: through V^T's strides, in key order.
    fp8_v_descriptor: bool = False
    #: A variant of the prefill kernel; False for the decode kernel, which the op launches
    #: on its inputs as they are (its compile errors pass unreworded).
    prefill: bool = True


#: Kernel variant name -> how the launcher treats it.
KERNEL_VARIANTS: dict[str, KernelVariant] = {
    "forward": KernelVariant(_launch_forward, key_ranges=True),
    **{name: KernelVariant(_launch_lean) for name in LEAN_VARIANTS},
    "gluon": KernelVariant(_launch_gluon, fp8_v_order="fa3" if DEFAULT_FP8_P == "permuted" else "keys",
                           fp8_v_descriptor=True),
    "decode": KernelVariant(_launch_decode, key_ranges=True, prefill=False),
}


def kernel_arguments(q: Any, k: Any, v: Any, out: Any, scales: Any, *, stride_q: tuple[int, ...],
                     stride_k: tuple[int, ...], stride_v: tuple[int, ...], stride_o: tuple[int, ...],
                     batch: int, q_heads: int, kv_heads: int, q_len: int, kv_len: int,
                     scale: float, seqlens: Any = None, kv_start: Any = None) -> tuple[Any, ...]:
    """The kernel's positional arguments, in its order (one place: launch and precompile).

    Strides are (batch, head, row) for q, k and out, and (batch, head, row, column) for v;
    precompile passes the workload's strides with stand-in buffers, because Triton
    specializes a binary on the integers (equal to 1, divisible by 16), not on the data.
    ``seqlens`` / ``kv_start``: the per-sequence key range (None: not read, ``out`` stands in).
    """
    seqlens = out if seqlens is None else seqlens
    kv_start = out if kv_start is None else kv_start
    return (q, k, v, out, scales, seqlens, kv_start, *stride_q, *stride_k, *stride_v, *stride_o,
            batch, q_heads, q_heads // kv_heads, q_len, kv_len, scale * LOG2_E)


#: Persistent programs per SM. One: the configs that matter at scale (BLOCK_M 128, head
#: dim 128, 3+ stages) take more than half of an H200 SM's shared memory, so a second
#: program would not be resident anyway; a grid beyond what is resident would run as a
#: second, partial wave (the imbalance a persistent grid exists to remove). Small configs
#: could host several per SM; deriving this from the resource model is the next step once
#: measurements show it matters.
PROGRAMS_PER_SM = 1
#: Persistent programs under the interpreter (no SMs): few, so tests loop over several tiles.
INTERPRETER_PROGRAMS = 3


def launch_grid(config: Config, *, q_len: int, batch_heads: int, device: torch.device) -> tuple[int, ...]:
    """The launch grid: (query blocks, batch * heads) tiles (transposed for tile_order
    longest_first), or a 1-D persistent grid."""
    switches = launch_plan(config).constexprs
    m_blocks = triton.cdiv(q_len, int(switches["BLOCK_M"]))
    if switches["PERSISTENT"]:
        return (min(m_blocks * batch_heads, persistent_programs(device)),)
    if switches["BH_MAJOR"]:
        return (batch_heads, m_blocks)
    return (m_blocks, batch_heads)


def is_bh_major(config: Mapping[str, Value]) -> bool:
    """Whether tiles run (batch, head)-fastest: every head's longest causal tiles first."""
    return bool(launch_plan(config).constexprs["BH_MAJOR"])


def is_persistent(config: Mapping[str, Value]) -> bool:
    """Whether the config runs a persistent grid (one program per SM looping over tiles)."""
    return bool(launch_plan(config).constexprs["PERSISTENT"])


def persistent_programs(device: torch.device) -> int:
    """Programs of a persistent grid on ``device``: its SMs times PROGRAMS_PER_SM (few under the interpreter)."""
    if device.type != "cuda":
        return INTERPRETER_PROGRAMS
    return device_sm_count(device) * PROGRAMS_PER_SM


#: Largest finite float8 e4m3 value.
FP8_MAX = 448.0


def quantize_fp8(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                 v_order: str = "keys") -> tuple[torch.Tensor, ...]:
    """Per-tensor e4m3 quantization; V transposed to (batch, heads, head_dim, kv_len).

    Hopper's fp8 dot needs its second operand K-major: for P @ V the reduction runs over
    the keys, so V is stored with kv_len contiguous (padded to 16 elements for TMA).
    Returns (q8, k8, v8_t, scales) with scales = [q, k, v] as float32 on the device; no
    host sync, so the op stays capturable in a CUDA graph.

    ``v_order="fa3"`` (the Gluon kernel's fp8, kernels/gluon.py ``FP8_P_FORMS``): V^T's keys
    in FA3's order inside each 16-key group (position 16g + 4t + 2h + b holds key
    16g + 8h + 2t + b, the order in which the kernel's P reaches the PV product without
    leaving its threads), as a 5-D tensor (batch, heads, head_dim, key groups, 16) whose
    padding past kv_len is zeros: its own shape, so no kernel that reads V^T in key order
    takes it by mistake (launch_quantized refuses it for them).
    """
    if v_order not in V_ORDERS:
        raise ValueError(f"v_order must be one of {V_ORDERS}, got {v_order!r}")
    def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = (x.abs().amax().float() / FP8_MAX).clamp_min(1e-12)
        # Divide in the input's 16-bit type (more mantissa than e4m3 keeps): no fp32 copy.
        return (x / s.to(x.dtype)).to(torch.float8_e4m3fn), s

    q8, sq = quantize(q)
    k8, sk = quantize(k)
    v8, sv = quantize(v)
    batch, heads, kv_len, head_dim = v.shape
    v8_t = torch.empty((batch, heads, head_dim, fp8_v_row(kv_len)), dtype=torch.float8_e4m3fn, device=v.device)
    v8_t[..., :kv_len] = v8.transpose(-1, -2)
    if v_order == "fa3":
        # Padded keys: a zero weight times garbage could be NaN. (Zeroed as bytes: e4m3's 0 is
        # 0x00, and byte fills run on every device.)
        v8_t.view(torch.uint8)[..., kv_len:] = 0
        groups = v8_t.shape[-1] // 16
        v8_t = fa3_key_order(v8_t.view(batch, heads, head_dim, groups, 16))
        return q8, k8, v8_t, torch.stack([sq, sk, sv])
    return q8, k8, v8_t[..., :kv_len], torch.stack([sq, sk, sv])


#: quantize_fp8's orders of V^T's keys: as they are, or FA3's inside each 16-key group.
V_ORDERS = ("keys", "fa3")


def fa3_key_order(groups: torch.Tensor) -> torch.Tensor:
    """``groups`` (..., 16 keys) with position 4t + 2h + b taking key 8h + 2t + b (t < 4,
    h, b < 2), contiguous: the order in which the fp8 Gluon kernel's P (the scores'
    accumulator layout, keys 2t, 2t + 1, 8 + 2t, 9 + 2t in thread t of a quad) becomes the
    A operand (keys 4t..4t + 3 in thread t) with no data leaving its thread."""
    shape = groups.shape
    return groups.reshape(*shape[:-1], 2, 4, 2).transpose(-3, -2).reshape(shape).contiguous()


def fp8_v_row(kv_len: int) -> int:
    """Elements per row of :func:`quantize_fp8`'s V^T: kv_len padded to 16 (16-byte aligned
    rows, as tensor descriptors need)."""
    return triton.cdiv(kv_len, 16) * 16


def compile_options(config: Config, *, head_dim: int, causal: bool, has_seqlens: bool = False,
                    has_kv_start: bool = False) -> dict[str, Any]:
    """The forward kernel's constexprs and launch options for a config (one place: launch
    and precompile): the config's from :func:`launch_plan`, the call's from the arguments."""
    plan = launch_plan(config)
    return {"HAS_SEQLENS": has_seqlens, "HAS_KV_START": has_kv_start, "HEAD_DIM": head_dim, "IS_CAUSAL": bool(causal),
            **plan.constexprs, **plan.options}


def resolve_scale(scale: float | None, head_dim: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    return float(scale)


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    config: Mapping[str, Value] | None = None,
    cache_seqlens: torch.Tensor | None = None,
    kv_start: torch.Tensor | None = None,
) -> torch.Tensor:
    """Scaled dot-product attention, forward, with an explicit kernel config.

    Args:
        q: (batch, q_heads, q_len, head_dim), float16/bfloat16 (float32 for the interpreter).
        k: (batch, kv_heads, kv_len, head_dim); q_heads must be a multiple of kv_heads.
            With ``cache_seqlens``, kv_len is the cache's capacity.
        v: same shape as k.
        causal: mask future keys, aligned bottom-right when q_len != kv_len (against
            ``cache_seqlens[b]`` when given).
        scale: softmax scale; 1/sqrt(head_dim) when None.
        config: the tunables of one kernel (``flashtune.kernels.space.TUNABLES`` for
            ``kernel="prefill"``, the default when the config omits it;
            ``DECODE_TUNABLES`` for ``kernel="decode"``). None picks the decode kernel
            for q_len <= ``DECODE_MAX_Q_LEN`` (split count from the shape:
            ``flashtune.kernels.decode.choose_num_splits``), else the prefill kernel's
            static safe default. ``flashtune.runtime.flash_attention`` picks tuned ones.
        cache_seqlens: optional int32 tensor (batch,) on q's device: sequence b attends to
            its first ``cache_seqlens[b]`` keys of k/v (0 writes zeros), causal aligned
            bottom-right against that length (a static cache's filled part). The decode
            kernel, or the prefill kernel with pointer/tma loads and no fp8. Its values
            are checked on the host (one synchronization), except while a CUDA graph is
            being captured, where a host read is illegal: there the kernel clamps each
            length to [0, kv_len], so a bad one never reads out of bounds.
        kv_start: optional int32 tensor (batch,) on q's device: sequence b's keys start at
            ``kv_start[b]`` (left padding: the pad keys before it are not attended);
            within [0, its length]. Checked and clamped as ``cache_seqlens``.

    Returns:
        (batch, q_heads, q_len, head_dim) in q's dtype.

    Raises:
        TypeError, ValueError: bad inputs or config, naming the argument.
    """
    check_inputs(q, k, v)
    if config is not None:
        cfg = validate_config(config)
    elif uses_decode_kernel(q.shape[2]):
        cfg = default_decode_config(q, k, per_sequence_lengths=cache_seqlens is not None or kv_start is not None)
    else:
        cfg = SAFE_DEFAULT
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    scale_value = resolve_scale(scale, q.shape[-1])
    _check_known_failure(cfg, q)
    _check_fits(cfg, q, k)
    plan = launch_plan(cfg)
    variant = KERNEL_VARIANTS[plan.variant]
    if plan.reads_descriptors and not plan.constexprs.get("FP8"):  # fp8 copies land aligned
        check_descriptor_alignment(q, k, v, with_q=plan.descriptor_q)
    if cache_seqlens is not None:
        cache_seqlens = check_cache_seqlens(cache_seqlens, q, k)
    if kv_start is not None:
        kv_start = check_kv_start(kv_start, q, k, cache_seqlens)
    if not variant.prefill:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        variant.launch(q, k, v, out, q, None, plan=plan, config=cfg, causal=causal, scale=scale_value,
                       seqlens=cache_seqlens, kv_start=kv_start)
        return out
    if (cache_seqlens is not None or kv_start is not None) and not takes_key_ranges(cfg):
        raise ValueError("cache_seqlens/kv_start need the decode kernel or a prefill config with loads "
                         f"'pointer'/'tma'/'tma_ws' and use_fp8=False, got loads={cfg['loads']!r}, "
                         f"use_fp8={cfg['use_fp8']}")
    if plan.constexprs["FP8"]:
        _check_fp8_support(q)
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    try:
        launch(q, k, v, out, causal=causal, scale=scale_value, config=cfg, cache_seqlens=cache_seqlens,
               kv_start=kv_start)
    except RuntimeError as exc:
        if not any(marker in str(exc) for marker in COMPILER_ERROR_MARKERS):
            raise
        # Triton's own message is one bare line; say which config and what to do.
        raise ValueError(f"config {cfg.to_dict()} does not compile with Triton {triton.__version__}: "
                         f"{type(exc).__name__}: {str(exc).strip()[:300]}; choose another config") from exc
    return out


def _check_known_failure(config: Config, q: torch.Tensor) -> None:
    """Refuse a config the resource model knows cannot run (objectives.feasibility says the same)."""
    capability = torch.cuda.get_device_capability(q.device) if q.device.type == "cuda" else (9, 0)
    reason = known_failure(config, capability)
    if reason:
        raise ValueError(f"config {config.to_dict()} cannot run: {reason}")


def check_descriptor_alignment(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, with_q: bool = False) -> None:
    """Tensor descriptors (TMA) need 16-byte aligned bases and row strides (the lean kernel
    reads Q through one too)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if name == "q" and not with_q:
            continue
        misaligned = [s for s in t.stride()[:-1] if (s * t.element_size()) % 16]
        if t.data_ptr() % 16 or misaligned:
            raise ValueError(
                f"config loads='tma'/'tma_ws'/'lean'/'lean_ws' needs {name} with a 16-byte aligned start and "
                f"strides, got strides {t.stride()}; use loads='pointer' for this layout"
            )


def _check_fp8_support(q: torch.Tensor) -> None:
    if q.dtype == torch.float32:
        raise ValueError("config use_fp8=True needs float16 or bfloat16 inputs, got float32")
    if q.device.type == "cuda" and torch.cuda.get_device_capability(q.device) < (8, 9):
        raise ValueError(f"config use_fp8=True needs compute capability >= 8.9, "
                         f"{torch.cuda.get_device_name(q.device)} has {torch.cuda.get_device_capability(q.device)}")


def _check_fits(config: Config, q: torch.Tensor, k: torch.Tensor) -> None:
    """Reject a config that cannot fit this device's shared memory, before Triton does."""
    if q.device.type != "cuda":
        return
    props = torch.cuda.get_device_properties(q.device)
    limit = getattr(props, "shared_memory_per_block_optin", 0) or props.shared_memory_per_block
    need = shared_memory_bytes(config, head_dim=q.shape[-1], dtype_bytes=q.element_size(),
                               compute_capability=(props.major, props.minor),
                               block_h=decode_block_h(q.shape[1] // k.shape[1], q.shape[2]))
    if need > limit:
        raise ValueError(
            f"config {config.to_dict()} needs about {need} bytes of shared memory; "
            f"{torch.cuda.get_device_name(q.device)} allows {limit} per block"
        )
