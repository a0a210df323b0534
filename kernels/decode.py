"""The decode kernel's launcher: per-sequence lengths, the split workspace, the default config.

``launch_decode`` is the lower-level entry (inputs and config already validated, as the
runtime caches them); ``flashtune.kernels.flash_attention`` validates and calls it.
"""

from __future__ import annotations

import contextvars
import functools
import os
from dataclasses import dataclass
from typing import Any

import torch
import triton

from flashtune.kernels._flash_decode import decode_combine_kernel, decode_split_kernel
from flashtune.kernels.config import Config
from flashtune.kernels.launch_plan import launch_plan
from flashtune.kernels.launch_support import (
    LOG2_E,
    capturing,
    device_sm_count,
    launch_hooks_set,
    use_descriptor_scratch,
)
from flashtune.kernels.space import DECODE_TUNABLES, decode_block_h

#: Splits merged per step of the combine kernel's loop: the space's largest split count,
#: so one step loads all of a row (a constexpr: one compile for every split count).
COMBINE_BLOCK_S = max(DECODE_TUNABLES["num_splits"])
#: Output columns per combine program (head_dim 128: two programs a row), so that a
#: program's BLOCK_S x BLOCK_D float32 tile is 64 registers a thread at 4 warps.
COMBINE_BLOCK_D = 64


#: How the splits' partials are merged: a second launch (``decode_combine_kernel``), or
#: by the last split of each row block in the split kernel itself (one launch a call).
COMBINES = ("launch", "fused")


@dataclass(frozen=True)
class DecodeWorkspace:
    """Float32 scratch for the split partials: ``partial_out`` (rows x splits x head_dim) and
    ``partial_lse`` (rows x splits), rows = batch x q_heads x q_len; and ``counters``, int32
    zeros (one per row: at least one per row block), the fused combine's arrival counts,
    back at zero after every call.

    Allocate once for the largest shape and split count a caller will use and pass it to
    every ``launch_decode``: no allocation per call, and the same addresses on every call,
    as CUDA-graph replay needs.
    """

    partial_out: torch.Tensor
    partial_lse: torch.Tensor
    counters: torch.Tensor

    @classmethod
    def allocate(cls, *, rows: int, head_dim: int, num_splits: int, device: torch.device | str) -> DecodeWorkspace:
        return cls(torch.empty(rows * num_splits * head_dim, dtype=torch.float32, device=device),
                   torch.empty(rows * num_splits, dtype=torch.float32, device=device),
                   torch.zeros(rows, dtype=torch.int32, device=device))

    @classmethod
    def for_query(cls, q: torch.Tensor, num_splits: int = max(DECODE_TUNABLES["num_splits"])) -> DecodeWorkspace:
        """A workspace for queries shaped like ``q`` (batch, q_heads, q_len, head_dim) and up
        to ``num_splits`` splits (by default the space's largest)."""
        batch, q_heads, q_len, head_dim = q.shape
        return cls.allocate(rows=batch * q_heads * q_len, head_dim=head_dim, num_splits=num_splits, device=q.device)

    def fits(self, rows: int, head_dim: int, num_splits: int) -> bool:
        return (self.partial_lse.numel() >= rows * num_splits
                and self.partial_out.numel() >= rows * num_splits * head_dim
                and self.counters.numel() >= rows)


def launch_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    *,
    causal: bool,
    scale: float,
    config: Config,
    cache_seqlens: torch.Tensor | None = None,
    workspace: DecodeWorkspace | None = None,
    combine: str | None = None,
    kv_start: torch.Tensor | None = None,
) -> Any:
    """Launch the decode kernel(s) into ``out``; inputs and config already validated.

    One launch when ``num_splits`` is 1 (the split kernel writes ``out``); otherwise the
    split kernel writes partials into ``workspace`` (allocated here when None) and the
    combine kernel writes ``out``. No host synchronization: capturable in a CUDA graph
    when ``workspace`` is passed (allocation inside capture is legal too, but then the
    graph owns that memory).

    Args:
        q, k, v: as ``flash_attention`` takes them; k/v's dim 2 is the cache capacity.
        out: (batch, q_heads, q_len, head_dim), q's dtype, last dim contiguous.
        causal, scale: as ``flash_attention``; ``scale`` already resolved to a float.
        config: a validated decode config (``kernel="decode"``).
        cache_seqlens: int32 (batch,) contiguous on q's device, or None (all of the cache).
            Values outside [0, capacity] are clamped in the kernel, not checked here.
        kv_start: int32 (batch,) contiguous on q's device, or None (keys from 0): the first
            key of each sequence (left padding); clamped to [0, length] in the kernel.
        workspace: split scratch at least ``DecodeWorkspace.for_query(q, num_splits)``'s size.
        combine: ``launch`` (a second kernel merges the splits) or ``fused`` (the split
            kernel's last program per row block does: one launch); None: the config's
            ``combine`` knob (``launch`` for a config recorded without it).

    Returns:
        Triton's compiled handle of the split kernel (registers, spills, shared memory),
        or None under the interpreter.
    """
    plan = launch_plan(config)
    if combine is None:
        combine = plan.host["combine"]
    if combine not in COMBINES:
        raise ValueError(f"combine={combine!r} is not one of {list(COMBINES)}")
    batch, q_heads, q_len, head_dim = q.shape
    kv_heads, kv_cap = k.shape[1], k.shape[2]
    kv_group = q_heads // kv_heads
    num_splits = int(plan.host["num_splits"])
    block_h = decode_block_h(kv_group, q_len)
    rows = batch * q_heads * q_len
    if num_splits > 1:
        if workspace is None:
            workspace = DecodeWorkspace.allocate(rows=rows, head_dim=head_dim, num_splits=num_splits, device=q.device)
        elif not workspace.fits(rows, head_dim, num_splits):
            raise ValueError(f"workspace: too small for {rows} rows x {num_splits} splits x head_dim {head_dim}")
        part_o, part_lse, counters = workspace.partial_out, workspace.partial_lse, workspace.counters
    elif workspace is not None:
        part_o, part_lse, counters = workspace.partial_out, workspace.partial_lse, workspace.counters  # not used
    else:
        # Not written (the split kernel writes out directly), but typed like a workspace's,
        # so one split and many share a compiled binary.
        part_o = part_lse = _unused_float32(q.device)
        counters = _unused_int32(q.device)
    seqlens = cache_seqlens if cache_seqlens is not None else out  # not read without HAS_SEQLENS
    starts = kv_start if kv_start is not None else seqlens  # not read without HAS_KV_START
    if uses_tma(config):
        # Device-side descriptors live in a scratch buffer that Triton asks for at launch.
        use_descriptor_scratch()
    fused = combine == "fused" and num_splits > 1
    args = split_arguments(q, k, v, out, part_o, part_lse, seqlens, counters, starts, stride_q=q.stride()[:3],
                           stride_k=k.stride()[:3],
                           stride_v=v.stride()[:3], stride_o=out.stride()[:3], q_heads=q_heads, kv_heads=kv_heads,
                           q_len=q_len, kv_cap=kv_cap, num_splits=num_splits, scale=scale)
    grid = (num_splits, batch * kv_heads, triton.cdiv(kv_group * q_len, block_h))
    handle = decode_split_kernel[grid](*args, **split_options(config, head_dim=head_dim, kv_group=kv_group,
                                                              q_len=q_len, causal=causal,
                                                              has_seqlens=cache_seqlens is not None,
                                                              fused_combine=fused,
                                                              has_kv_start=kv_start is not None))
    if num_splits > 1 and not fused:
        combine_grid = (rows, triton.cdiv(head_dim, COMBINE_BLOCK_D))
        decode_combine_kernel[combine_grid](*combine_arguments(out, part_o, part_lse, stride_o=out.stride()[:3],
                                                               q_heads=q_heads, q_len=q_len, num_splits=num_splits),
                                            **combine_options(head_dim))
    return handle


def split_arguments(q: Any, k: Any, v: Any, out: Any, part_o: Any, part_lse: Any, seqlens: Any, counters: Any,
                    kv_start: Any, *,
                    stride_q: tuple[int, ...], stride_k: tuple[int, ...], stride_v: tuple[int, ...],
                    stride_o: tuple[int, ...], q_heads: int, kv_heads: int, q_len: int, kv_cap: int,
                    num_splits: int, scale: float) -> tuple[Any, ...]:
    """The split kernel's positional arguments, in its order (one place: launch and
    precompile). Strides are (batch, head, row) of q, k, v and out."""
    return (q, k, v, out, part_o, part_lse, seqlens, counters, kv_start, *stride_q, *stride_k, *stride_v, *stride_o,
            q_heads, kv_heads, q_heads // kv_heads, q_len, kv_cap, num_splits, scale * LOG2_E)


def split_options(config: Config, *, head_dim: int, kv_group: int, q_len: int, causal: bool,
                  has_seqlens: bool, fused_combine: bool = False, has_kv_start: bool = False) -> dict[str, Any]:
    """The split kernel's constexprs and launch options for a config: the config's from
    :func:`launch_plan`, the call's from the arguments."""
    plan = launch_plan(config)
    return {"HEAD_DIM": head_dim, "BLOCK_H": decode_block_h(kv_group, q_len), "IS_CAUSAL": bool(causal),
            "HAS_SEQLENS": has_seqlens, "FUSED_COMBINE": fused_combine, "HAS_KV_START": has_kv_start,
            **plan.constexprs, **plan.options}


def uses_tma(config: Config) -> bool:
    """Whether the split kernel reads K/V through device-made descriptors (it then needs the scratch allocator)."""
    return bool(launch_plan(config).constexprs["USE_TMA"])


def combine_arguments(out: Any, part_o: Any, part_lse: Any, *, stride_o: tuple[int, ...], q_heads: int,
                      q_len: int, num_splits: int) -> tuple[Any, ...]:
    return (out, part_o, part_lse, *stride_o, q_heads, q_len, num_splits)


def combine_options(head_dim: int) -> dict[str, Any]:
    return {"HEAD_DIM": head_dim, "BLOCK_D": min(head_dim, COMBINE_BLOCK_D), "BLOCK_S": COMBINE_BLOCK_S,
            "num_warps": 4}


def warm_up(config: Config, *, batch: int, q_heads: int, kv_heads: int, q_len: int, kv_len: int, head_dim: int,
            dtype: torch.dtype, causal: bool, device: str = "cuda", combine: str | None = None) -> Any:
    """Compile (into Triton's cache) what ``launch_decode`` runs for contiguous inputs of
    these shapes, without running it: the compile pool's job (objectives.precompile).
    Returns the split kernel's compiled kernel. ``device``: where the stand-in buffers live
    (only their dtype and alignment are read)."""
    buf = torch.empty(64, device=device, dtype=dtype)
    f32 = torch.empty(64, device=device, dtype=torch.float32)
    i32 = torch.zeros(64, device=device, dtype=torch.int32)
    stride_q = (q_heads * q_len * head_dim, q_len * head_dim, head_dim)
    stride_k = (kv_heads * kv_len * head_dim, kv_len * head_dim, head_dim)
    plan = launch_plan(config)
    splits = int(plan.host["num_splits"])
    combine = plan.host["combine"] if combine is None else combine
    args = split_arguments(buf, buf, buf, buf, f32, f32, buf, i32, i32, stride_q=stride_q, stride_k=stride_k,
                           stride_v=stride_k, stride_o=stride_q, q_heads=q_heads, kv_heads=kv_heads, q_len=q_len,
                           kv_cap=kv_len, num_splits=splits, scale=1.0)
    fused = combine == "fused" and splits > 1
    split = decode_split_kernel.warmup(*args, **split_options(config, head_dim=head_dim, kv_group=q_heads // kv_heads,
                                                              q_len=q_len, causal=causal, has_seqlens=False,
                                                              fused_combine=fused),
                                       grid=(1,))
    if splits > 1 and not fused:
        decode_combine_kernel.warmup(*combine_arguments(buf, f32, f32, stride_o=stride_q, q_heads=q_heads,
                                                        q_len=q_len, num_splits=splits),
                                     **combine_options(head_dim), grid=(1,))
    return split


#: True while a call must keep no device memory past its return: the op under
#: ``torch.compile``, whose CUDA graphs (``mode="reduce-overhead"``) refuse tensors that
#: outlive a captured call without being its outputs ("Detected 3 tensor(s) in the
#: cudagraph pool not tracked as outputs": a cached split workspace, H200, 2026-12-01).
TRANSIENT = contextvars.ContextVar("flashtune_transient_workspace", default=False)


def _unused_float32(device: torch.device) -> torch.Tensor:
    return torch.empty(1, dtype=torch.float32, device=device) if TRANSIENT.get() else _kept_float32(device)


def _unused_int32(device: torch.device) -> torch.Tensor:
    return torch.zeros(1, dtype=torch.int32, device=device) if TRANSIENT.get() else _kept_int32(device)


@functools.lru_cache(maxsize=None)
def _kept_float32(device: torch.device) -> torch.Tensor:
    return torch.empty(1, dtype=torch.float32, device=device)


@functools.lru_cache(maxsize=None)
def _kept_int32(device: torch.device) -> torch.Tensor:
    return torch.zeros(1, dtype=torch.int32, device=device)


def _check_per_sequence(name: str, value: Any, q: torch.Tensor) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is an int32 (batch,) tensor on q's device."""
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of int32, got {type(value).__name__}")
    if value.dtype != torch.int32:
        raise ValueError(f"{name}.dtype must be torch.int32, got {value.dtype}")
    if tuple(value.shape) != (q.shape[0],):
        raise ValueError(f"{name} must have shape (batch,) = ({q.shape[0]},), got {tuple(value.shape)}")
    if value.device != q.device:
        raise ValueError(f"{name} must be on q's device {q.device}, got {value.device}")


def check_cache_seqlens(cache_seqlens: Any, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Raise ValueError naming ``cache_seqlens`` unless it is an int32 (batch,) tensor on
    q's device with every value in [0, k.shape[2]]; return it contiguous.

    The value check reads the tensor on the host (one synchronization). Inside CUDA-graph
    capture a host read is illegal, so the values go unchecked there; the kernel clamps
    each length to [0, capacity], so a bad value gives wrong attention, never an
    out-of-bounds read.
    """
    _check_per_sequence("cache_seqlens", cache_seqlens, q)
    capacity = k.shape[2]
    if not capturing(q.device):
        low, high = (int(x) for x in torch.aminmax(cache_seqlens))
        if low < 0:
            raise ValueError(f"cache_seqlens must be >= 0, got a length of {low}")
        if high > capacity:
            raise ValueError(f"cache_seqlens: a length of {high} is longer than the cache (k.shape[2] = {capacity})")
    return cache_seqlens.contiguous()


def check_kv_start(kv_start: Any, q: torch.Tensor, k: torch.Tensor, cache_seqlens: torch.Tensor | None) -> torch.Tensor:
    """Raise ValueError naming ``kv_start`` unless it is an int32 (batch,) tensor on q's
    device with every value in [0, that sequence's length] (``cache_seqlens[b]``, else
    k.shape[2]); return it contiguous. Values are read on the host as for
    :func:`check_cache_seqlens` (not inside CUDA-graph capture: the kernel clamps them)."""
    _check_per_sequence("kv_start", kv_start, q)
    if not capturing(q.device):
        ends = cache_seqlens if cache_seqlens is not None else torch.full_like(kv_start, k.shape[2])
        bad = torch.nonzero((kv_start < 0) | (kv_start > ends))
        if bad.numel():
            b = int(bad[0, 0])
            raise ValueError(f"kv_start[{b}] = {int(kv_start[b])} is outside [0, {int(ends[b])}] "
                             f"(the sequence's length: cache_seqlens[{b}], else k.shape[2])")
    return kv_start.contiguous()



#: Fewest keys a split should read: its partial write (head_dim x 4 B per packed row) and
#: the combine's read of it then stay near 3 % of its K/V read at kv_group 4. On the H200
#: (1, 32/8, 4096, 128) was fastest at 16-32 splits, 128-256 keys each.
MIN_KEYS_PER_SPLIT = 128
#: Programs per SM the split count aims for. On the H200 sweep (experiments/data/
#: h200_decode) every q_len-1 row was within 2 % of its best once batch x kv_heads x
#: splits reached about 2 x 132; past that, more splits only add combine traffic.
PROGRAMS_PER_SM_TARGET = 2
#: With per-sequence lengths the longest sequence sets the time and the host does not know
#: the lengths (no read inside a CUDA graph): aim for 4 x more, shorter splits (each
#: sequence's splits divide its own length). H200, batch 8 of lengths 0-8192 around 4400:
#: 54 us at 1024 programs, 75 us at 256.
SEQLENS_PROGRAMS_FACTOR = 4
#: SMs assumed under the interpreter (no GPU): small, so tests split the keys.
INTERPRETER_SMS = 4


def choose_num_splits(*, programs: int, kv_len: int, sm_count: int, per_sequence_lengths: bool = False) -> int:
    """The default split count: the smallest power of two that gives at least 90 % of
    ``PROGRAMS_PER_SM_TARGET`` x ``sm_count`` programs (x ``SEQLENS_PROGRAMS_FACTOR`` with
    per-sequence lengths), but no split shorter than ``MIN_KEYS_PER_SPLIT`` keys, and
    within the declared space. (90 %: 256 programs on 132 SMs is as good as 264.)

    Args:
        programs: programs without splitting (batch x kv_heads x row blocks).
        kv_len: keys per sequence (the cache capacity, or the longest length).
        sm_count: the GPU's SMs.
        per_sequence_lengths: the call passes ``cache_seqlens``.
    """
    target = PROGRAMS_PER_SM_TARGET * sm_count * (SEQLENS_PROGRAMS_FACTOR if per_sequence_lengths else 1)
    allowed = DECODE_TUNABLES["num_splits"]
    splits = 1
    while (splits * 2 in allowed and 10 * programs * splits < 9 * target
           and kv_len >= 2 * splits * MIN_KEYS_PER_SPLIT):
        splits *= 2
    return splits


#: Bytes of one K (or V) tile the default config streams: BLOCK_N = this / head_dim / 2
#: (64 keys at head_dim 128, 128 at 64). On the H200 a 16 KB tile at 3 stages kept the
#: memory busy with one program per SM (BLOCK_N 64 at head_dim 64 needed twice the splits).
DEFAULT_TILE_BYTES = 16384


def default_decode_config(q: torch.Tensor, k: torch.Tensor, *, per_sequence_lengths: bool = False) -> Config:
    """The decode config ``flash_attention`` uses without one (:func:`decode_default_for`
    with the live GPU's SM count)."""
    batch, q_heads, q_len, head_dim = q.shape
    if q.device.type == "cuda":
        sms = device_sm_count(q.device)
    else:
        sms = INTERPRETER_SMS
    return decode_default_for(batch=batch, q_heads=q_heads, kv_heads=k.shape[1], q_len=q_len, kv_len=k.shape[2],
                              head_dim=head_dim, sm_count=sms, per_sequence_lengths=per_sequence_lengths)


def decode_default_for(*, batch: int, q_heads: int, kv_heads: int, q_len: int, kv_len: int, head_dim: int,
                       sm_count: int, per_sequence_lengths: bool = False) -> Config:
    """The default decode config for a shape on a GPU of ``sm_count`` SMs (also the runtime's
    per-architecture decode default), fitted to the H200 decode sweep
    (experiments/data/h200_decode):

    * BLOCK_N: a ``DEFAULT_TILE_BYTES`` K tile (32 to 128 keys), 4 warps, pointer loads;
    * num_stages 3 (two tiles in flight per program, about 72 KB of shared memory: fits
      every GPU flashtune knows), or 2 when batch x kv_heads alone already gives two
      programs per SM: then residency, not depth, keeps the memory busy (batch 64: 136 us
      at 2 stages, 148 at 3);
    * num_splits from :func:`choose_num_splits`;
    * the combine: :func:`default_combine`.
    """
    group = q_heads // kv_heads
    programs = batch * kv_heads * triton.cdiv(group * q_len, decode_block_h(group, q_len))
    splits = choose_num_splits(programs=programs, kv_len=kv_len, sm_count=sm_count,
                               per_sequence_lengths=per_sequence_lengths)
    block_n = min(max(DEFAULT_TILE_BYTES // (head_dim * 2), 32), 128)
    stages = 2 if programs >= PROGRAMS_PER_SM_TARGET * sm_count else 3
    return Config(kernel="decode", BLOCK_N=block_n, num_splits=splits, num_warps=4, num_stages=stages,
                  loads="pointer", combine=default_combine(batch=batch, kv_len=kv_len,
                                                           per_sequence_lengths=per_sequence_lengths))


#: Longest cache (keys) for which a batch with per-sequence lengths keeps the fused combine.
#: The fused combine's last split waits for the longest sequence's: on the H200 (bench_decode,
#: 2026-12-01) 65.9 against 56.5 us at batch 8 with lengths 0-8192, a wait that scales with
#: the length (about 5 us at 4,096 keys). A second launch costs about 8 us of host time a
#: call (op with key ranges, batch 8: 34 us against 26 with one launch, H200 2026-12-03) and
#: a gap on the device, which is more than the wait below this length.
FUSED_WITH_LENGTHS_MAX_KEYS = 4096


def default_combine(*, batch: int, kv_len: int, per_sequence_lengths: bool) -> str:
    """The default ``combine``: fused into the split kernel (one launch a call), except for a
    batch with per-sequence lengths past :data:`FUSED_WITH_LENGTHS_MAX_KEYS` keys. Without
    lengths fused was faster everywhere on the H200 (35 against 83 us at 1,32/8,4096, 79.2
    against 88.1 at q_len 4, 79.6 against 82.1 at 8,32/8,8192, within 1 % at 32k-128k); a
    batch of one sequence waits for no other."""
    if per_sequence_lengths and batch > 1 and kv_len > FUSED_WITH_LENGTHS_MAX_KEYS:
        return "launch"
    return "fused"


#: Set to 0 to hand bound launches the tensors rather than their device addresses (the
#: launcher then checks each pointer: ``BoundDecode.arguments``), read when a call is bound;
#: for measuring the difference in one run (docs/lab/gpu/t19.sh).
ENV_ADDRESSES = "FLASHTUNE_LAUNCH_ADDRESSES"


def _int_class(x: int) -> tuple[bool, bool, bool]:
    """What Triton specializes an integer argument on: equal to 1, divisible by 16, 64-bit."""
    return x == 1, x % 16 == 0, x >= 2**31


class BoundDecode:
    """``launch_decode`` for one prepared shape with the compiled kernels bound.

    Triton's jit dispatcher works out, on every launch, the specialization of every argument,
    a cache key, the compiled kernel and its launch metadata: 16-25 us a launch on the H200
    (BENCHMARKS.md, "Serving"), the larger part of a decode call's host time. Here what a
    prepared call key fixes (grid, constexprs, q/out strides, head counts, scale) is built
    once, and the compiled kernel of each specialization class of what still varies (the
    cache's length and strides, the pointers' 16-byte alignment: a dynamic cache grows every
    step) is kept: the first call of a class goes through the jit dispatcher (which compiles
    or finds the kernel), later ones launch the compiled kernel object directly.

    CUDA only (the interpreter has no compiled kernel); ``launch_decode``'s semantics.
    """

    __slots__ = ("config", "grid", "combine_grid", "split_options", "combine_options", "split_consts",
                 "combine_consts", "fused", "splits", "device_index", "kernels", "combine_kernel",
                 "causal", "scale", "tma", "stride_q", "middle", "tail", "combine_tail", "addresses")

    def __init__(self, q: torch.Tensor, k: torch.Tensor, *, causal: bool, scale: float, config: Config,
                 has_seqlens: bool, has_kv_start: bool) -> None:
        batch, q_heads, q_len, head_dim = q.shape
        kv_heads = k.shape[1]
        kv_group = q_heads // kv_heads
        self.config, self.causal, self.scale = config, causal, scale
        plan = launch_plan(config)
        self.splits = int(plan.host["num_splits"])
        self.fused = plan.host["combine"] == "fused" and self.splits > 1
        self.tma = uses_tma(config)
        block_h = decode_block_h(kv_group, q_len)
        rows = batch * q_heads * q_len
        self.grid = (self.splits, batch * kv_heads, triton.cdiv(kv_group * q_len, block_h))
        self.combine_grid = (rows, triton.cdiv(head_dim, COMBINE_BLOCK_D), 1)
        self.split_options = split_options(config, head_dim=head_dim, kv_group=kv_group, q_len=q_len, causal=causal,
                                           has_seqlens=has_seqlens, fused_combine=self.fused,
                                           has_kv_start=has_kv_start)
        self.combine_options = combine_options(head_dim)
        # The constexprs in the kernels' declared order (a compiled kernel takes every argument;
        # the options name every constexpr, so a knob's new one is taken too).
        self.split_consts = tuple(self.split_options[n] for n in decode_split_kernel.arg_names
                                  if n in self.split_options)
        self.combine_consts = tuple(self.combine_options[n] for n in decode_combine_kernel.arg_names
                                    if n in self.combine_options)
        out_strides = (q_heads * q_len * head_dim, q_len * head_dim, head_dim)
        # The split kernel's arguments in split_arguments' order, the fixed runs built once:
        # q's strides; out's strides and the head counts (between v's strides and kv_cap);
        # the split count and the scale (after kv_cap).
        self.stride_q = tuple(q.stride()[:3])
        self.middle = (*out_strides, q_heads, kv_heads, kv_group, q_len)
        self.tail = (self.splits, scale * LOG2_E)
        self.combine_tail = (*out_strides, q_heads, q_len, self.splits)
        self.device_index = (q.device.index if q.device.index is not None
                             else torch.cuda.current_device() if q.device.type == "cuda" else -1)
        self.kernels: dict[tuple[Any, ...], Any] = {}
        self.combine_kernel: Any = None
        self.addresses = os.environ.get(ENV_ADDRESSES, "1").lower() not in ("0", "false", "no")

    def arguments(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                  cache_seqlens: torch.Tensor | None, kv_start: torch.Tensor | None,
                  workspace: DecodeWorkspace | None, *, addresses: bool = False) -> tuple[tuple[Any, ...], Any]:
        """(the split kernel's positional arguments, the specialization key of this call):
        the host work of a call before its launch (no CUDA call, so timed on a CPU too).

        ``addresses``: the nine pointer arguments as their device addresses (ints) rather
        than the tensors. The compiled kernel's launcher takes an int as the address itself;
        a tensor costs it a ``data_ptr()`` call and a driver query (``cuPointerGetAttribute``,
        whose only job is to reject host memory) per pointer, on every launch. Every tensor
        here is on q's CUDA device (the call key holds q, k and v's devices, the prepared
        call checks the per-sequence tensors', ``out`` and the workspace are allocated
        there). The jit dispatcher needs the tensors (it specializes on their type)."""
        if workspace is not None:
            part_o, part_lse, counters = workspace.partial_out, workspace.partial_lse, workspace.counters
        else:
            part_o = part_lse = _unused_float32(q.device)
            counters = _unused_int32(q.device)
        seqlens = cache_seqlens if cache_seqlens is not None else out
        starts = kv_start if kv_start is not None else seqlens
        sk, sv = k.stride(), v.stride()
        kv_cap = k.shape[2]
        pq, pk, pv, ps, pst = q.data_ptr(), k.data_ptr(), v.data_ptr(), seqlens.data_ptr(), starts.data_ptr()
        if addresses:
            pointers: tuple[Any, ...] = (pq, pk, pv, out.data_ptr(), part_o.data_ptr(), part_lse.data_ptr(), ps,
                                         counters.data_ptr(), pst)
        else:
            pointers = (q, k, v, out, part_o, part_lse, seqlens, counters, starts)
        args = (*pointers, *self.stride_q, sk[0], sk[1], sk[2], sv[0], sv[1], sv[2], *self.middle, kv_cap, *self.tail)
        strides = sk[0] | sk[1] | sk[2] | sv[0] | sv[1] | sv[2]
        if not (strides | pq | pk | pv | ps | pst) & 15 and kv_cap != 1 and (strides | kv_cap) < 2**31:
            # The commonest case in a few integer operations: every stride divisible by 16,
            # every pointer 16-byte aligned, nothing 64-bit (an OR of values below 2**31 is
            # below it), kv_cap not 1: only kv_cap's divisibility by 16 is left to tell apart.
            # A bool, so it never equals the tuples below (whose classes differ from it).
            key: Any = not kv_cap & 15
            return args, key
        ints = (kv_cap, sk[0], sk[1], sk[2], sv[0], sv[1], sv[2])
        if 1 in ints or max(ints) >= 2**31 or (pq | pk | pv | ps | pst) & 15:
            # The exact classes (Triton's: == 1, % 16, 64-bit; each pointer's 16-byte alignment).
            key = (*map(_int_class, ints), *(p % 16 for p in (pq, pk, pv, ps, pst)))
        else:
            # No integer is 1 or 64-bit and every pointer is 16-byte aligned, so divisibility
            # by 16 alone is each one's class.
            key = (not kv_cap & 15, not sk[0] & 15, not sk[1] & 15, not sk[2] & 15, not sv[0] & 15,
                   not sv[1] & 15, not sv[2] & 15)
        return args, key

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 cache_seqlens: torch.Tensor | None, kv_start: torch.Tensor | None,
                 workspace: DecodeWorkspace | None, stream: int | None = None) -> None:
        """Launch into ``out``; ``stream``: the raw handle of the current CUDA stream when the
        caller already read it (None: read here)."""
        args, key = self.arguments(q, k, v, out, cache_seqlens, kv_start, workspace, addresses=self.addresses)
        if self.tma:
            use_descriptor_scratch()
        kernel = self.kernels.get(key)
        hooked = launch_hooks_set()
        if kernel is None or hooked:
            args = self.arguments(q, k, v, out, cache_seqlens, kv_start, workspace)[0]  # the jit dispatcher's
            self.kernels[key] = decode_split_kernel[self.grid](*args, **self.split_options)
        else:
            if stream is None:
                stream = torch._C._cuda_getCurrentRawStream(self.device_index)  # once a call: both launches use it
            kernel.run(*self.grid, stream, kernel.function, kernel.packed_metadata, None, None, None,
                       *args, *self.split_consts)
        if self.splits > 1 and not self.fused:
            combine = self.combine_kernel
            if combine is None or hooked:
                cargs = (out, *self.arguments(q, k, v, out, cache_seqlens, kv_start, workspace)[0][4:6],
                         *self.combine_tail)
                self.combine_kernel = decode_combine_kernel[self.combine_grid](*cargs, **self.combine_options)
            else:
                if stream is None:
                    stream = torch._C._cuda_getCurrentRawStream(self.device_index)
                combine.run(*self.combine_grid, stream, combine.function, combine.packed_metadata, None, None, None,
                            args[3], args[4], args[5], *self.combine_tail, *self.combine_consts)
