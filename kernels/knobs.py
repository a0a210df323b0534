"""Every kernel knob, declared once: its values, the kernel it belongs to, and the value a
config recorded before the knob existed means.

kernels/space.py builds its tables (``TUNABLES``, ``DECODE_TUNABLES``, ``IMPLIED``) from
these declarations; everything else reads those tables. A kernel's space enumerates its
knobs in the order they are declared here, so that order is part of every recorded table a
replay reads: a new knob goes last in its kernel's tuple (and names ``implied``, the value
configs recorded without it were timed with).

Pure data, no torch: the CLI's validation reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from flashtune.kernels.config import Value


@dataclass(frozen=True)
class Knob:
    """One tunable of one kernel.

    Attributes:
        name: The config key.
        values: Its allowed values, in the order the grid enumerates them.
        implied: The value a config that omits the knob means (configs recorded before the
            knob joined the space), or None when every config must name it.
    """

    name: str
    values: tuple[Value, ...]
    implied: Value | None = None

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"knob {self.name!r}: declares no values")
        if len({type(v) for v in self.values}) != 1:
            raise ValueError(f"knob {self.name!r}: values {list(self.values)} are not all of one type")
        if self.implied is not None and (type(self.implied) is not type(self.values[0])
                                         or self.implied not in self.values):
            raise ValueError(f"knob {self.name!r}: implied {self.implied!r} is not one of {list(self.values)}")


#: The prefill kernel's knobs (one program per block of queries), in enumeration order.
PREFILL_KNOBS: tuple[Knob, ...] = (
    Knob("BLOCK_M", (32, 64, 128, 256)),
    Knob("BLOCK_N", (32, 64, 128)),
    Knob("num_warps", (4, 8)),
    Knob("num_stages", (1, 2, 3, 4, 5)),
    # How K/V tiles are loaded: pointer loads, or tensor descriptors (TMA), optionally
    # with the main loop warp-specialized (load warps apart from math warps). ``lean``:
    # the lean descriptor kernel (kernels/_flash_fwd_lean.py: Q, K, V and O through
    # descriptors, made once on the host where heads are contiguous; nothing but the
    # dots and the softmax in the hot loop); ``lean_ws`` warp-specializes its unmasked
    # loop; ``lean_overlap`` issues block j+1's Q @ K^T before block j's softmax
    # (FlashAttention 3's in-warpgroup overlap of the softmax with the GEMMs);
    # ``lean_ws_oneloop``: every key block in one warp-specialized loop, masked per row,
    # device-made descriptors (kernels/_flash_fwd_oneloop.py: the form Triton 3.6
    # warp-specializes at 4 warps; tiles grid only). ``gluon_ws`` and ``gluon_pingpong``:
    # the Gluon kernel with FlashAttention 3's schedule (kernels/_flash_fwd_gluon.py: a TMA
    # producer warp, asynchronous wgmma with the softmax of one block under the PV product
    # of the previous; one consumer warpgroup of BLOCK_M rows, or two of BLOCK_M / 2 rows
    # each, free-running, or ``gluon_pingpong_ordered``: their GEMMs taking turns (FA3's
    # ping-pong); num_warps: a consumer group's warps; num_stages: the K/V ring's depth;
    # bf16/fp16, tiles grid only).
    Knob("loads", ("pointer", "tma", "tma_ws", "lean", "lean_ws", "lean_overlap", "lean_ws_oneloop",
                   "gluon_ws", "gluon_pingpong", "gluon_pingpong_ordered"),
         implied="pointer"),
    # e4m3 Q, K, V with per-tensor scales (Hopper, Ada); checked against its own budget.
    Knob("use_fp8", (False, True), implied=False),
    # How programs map to tiles: one program per (query block, batch, head) tile, or a
    # persistent grid of one program per SM, each looping over tiles (BENCHMARKS.md,
    # "The knee": many short tiles pay a fixed cost per program that nothing overlaps).
    Knob("grid", ("tiles", "persistent"), implied="tiles"),
    # Which tiles start first: a head's query blocks side by side (they share K/V in
    # L2), or every head's longest causal tiles first (the (batch, head) index varies
    # fastest; balances the causal triangle across SMs).
    Knob("tile_order", ("head_major", "longest_first"), implied="head_major"),
    # Last, and with one value: the enumeration order and content of the space recorded
    # tables replay against stay what they were before the decode kernel joined. Configs
    # recorded before then omit it and mean this kernel.
    Knob("kernel", ("prefill",), implied="prefill"),
)

#: The decode kernel's knobs (kernels/_flash_decode.py), in enumeration order. One program
#: reads each K/V tile once for all query rows of one KV head (kv_group heads x q_len rows,
#: packed into a tile of ``decode_block_h`` rows); the keys of a sequence are split over
#: ``num_splits`` programs whose partial results one combine launch merges. ``num_splits``
#: is a runtime argument of the kernel: trying another value costs no compile.
DECODE_KNOBS: tuple[Knob, ...] = (
    Knob("kernel", ("decode",)),
    Knob("BLOCK_N", (16, 32, 64, 128, 256)),
    Knob("num_splits", (1, 2, 4, 8, 16, 32, 64, 128)),
    Knob("num_warps", (1, 2, 4, 8)),
    Knob("num_stages", (1, 2, 3, 4, 5)),
    # K/V tiles by pointer loads or by tensor descriptors (TMA, Hopper and newer):
    # decode is a stream of K/V tiles, and TMA moves a tile with one instruction.
    Knob("loads", ("pointer", "tma"), implied="pointer"),
    # How the splits' partials are merged: a second launch, or by the last split of
    # each row block inside the split kernel (one launch a call: less host time and no
    # launch gap). Last, so configs recorded before it enumerate in their old order;
    # they omit it and mean ``launch``, what they were timed with.
    Knob("combine", ("launch", "fused"), implied="launch"),
)

#: Every kernel's knobs, by the value of its ``kernel`` knob (the prefill kernel first: a
#: config that omits ``kernel`` means it).
KERNEL_KNOBS: Mapping[str, tuple[Knob, ...]] = MappingProxyType({"prefill": PREFILL_KNOBS, "decode": DECODE_KNOBS})


def space_of(knobs: tuple[Knob, ...]) -> Mapping[str, tuple[Value, ...]]:
    """A kernel's space: each knob's values by name, in declaration order (read-only).

    Raises:
        ValueError: two knobs of the kernel share a name.
    """
    space = {knob.name: knob.values for knob in knobs}
    if len(space) != len(knobs):
        raise ValueError(f"a kernel declares a knob twice: {[knob.name for knob in knobs]}")
    return MappingProxyType(space)


def implied_of(kernel_knobs: Mapping[str, tuple[Knob, ...]]) -> Mapping[str, Value]:
    """Every knob a config may omit and the value the omission means, over all kernels, in
    declaration order (read-only).

    Raises:
        ValueError: two kernels declare a knob of one name with different implied values
            (one omitted key must mean one thing).
    """
    implied: dict[str, Value] = {}
    for knobs in kernel_knobs.values():
        for knob in knobs:
            if knob.implied is None:
                continue
            if implied.setdefault(knob.name, knob.implied) != knob.implied:
                raise ValueError(f"knob {knob.name!r}: kernels disagree on its implied value "
                                 f"({implied[knob.name]!r} and {knob.implied!r})")
    return MappingProxyType(implied)
