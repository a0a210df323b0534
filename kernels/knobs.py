"""Every kernel knob, declared once: its values, the kernel it belongs to, and the value a
config recorded before the knob existed means.

kernels/space.py builds its tables (``TUNABLES``, ``DECODE_TUNABLES``, ``IMPLIED``) from
these declarations; everything else reads those tables. A kernel's space enumerates its
knobs in the order they are declared here, so that order is part of every recorded table a
replay reads: a new knob goes last in its kernel's tuple (and names ``implied``, the value
configs recorded without it were timed with).

Each knob also says what it becomes at launch (``launch``: a constexpr of the kernel, a
compile option, a runtime argument of the launcher, or per value a kernel variant and
constexprs); kernels/launch_plan.py's ``launch_plan`` is the one translator from a config
to what the launchers pass, and reads nothing else of a knob.

Pure data, no torch: the CLI's validation reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from flashtune.kernels.config import Value


@dataclass(frozen=True)
class Constexpr:
    """The knob's value is passed as the kernel's constexpr ``name`` (one compile a value)."""

    name: str


@dataclass(frozen=True)
class CompileOption:
    """The knob's value is a Triton compile option (``num_warps``, ``num_stages``, ``maxnreg``)."""

    name: str


@dataclass(frozen=True)
class HostArg:
    """The knob's value is the launcher's to use: a runtime argument of the kernel or a
    choice on the host (no compile of its own)."""

    name: str


@dataclass(frozen=True)
class Sets:
    """What one value of a :class:`Choice` knob sets at launch.

    Attributes:
        variant: The kernel function that runs (None: another knob of the kernel picks it).
        constexprs: Constexprs of that kernel, by name.
    """

    variant: str | None = None
    constexprs: Mapping[str, Value] = field(default_factory=dict)


def sets(variant: str | None = None, **constexprs: Value) -> Sets:
    """A :class:`Sets`, written as a call: ``sets("forward", USE_TMA=True)``."""
    return Sets(variant, MappingProxyType(constexprs))


@dataclass(frozen=True)
class Choice:
    """Each value of the knob sets a kernel variant and constexprs (``by_value``: one
    :class:`Sets` for every value of the knob)."""

    by_value: Mapping[Value, Sets]


#: What a knob can become at launch.
Launch = Constexpr | CompileOption | HostArg | Choice


@dataclass(frozen=True)
class Knob:
    """One tunable of one kernel.

    Attributes:
        name: The config key.
        values: Its allowed values, in the order the grid enumerates them.
        implied: The value a config that omits the knob means (configs recorded before the
            knob joined the space), or None when every config must name it.
        launch: What the knob becomes at launch (kernels/launch_plan.py translates it).
    """

    name: str
    values: tuple[Value, ...]
    implied: Value | None = None
    launch: Launch | None = None

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"knob {self.name!r}: declares no values")
        if len({type(v) for v in self.values}) != 1:
            raise ValueError(f"knob {self.name!r}: values {list(self.values)} are not all of one type")
        if self.implied is not None and (type(self.implied) is not type(self.values[0])
                                         or self.implied not in self.values):
            raise ValueError(f"knob {self.name!r}: implied {self.implied!r} is not one of {list(self.values)}")
        if self.launch is None:
            raise ValueError(f"knob {self.name!r}: declares no launch (what it becomes when the kernel runs)")
        if isinstance(self.launch, Choice) and list(self.launch.by_value) != list(self.values):
            raise ValueError(f"knob {self.name!r}: its launch choice covers {list(self.launch.by_value)}, "
                             f"not its values {list(self.values)}")

    @classmethod
    def choice(cls, name: str, by_value: Mapping[Value, Sets], implied: Value | None = None) -> Knob:
        """A knob whose values are the keys of ``by_value``, each setting its own switches."""
        return cls(name, tuple(by_value), implied, Choice(MappingProxyType(dict(by_value))))


#: The prefill kernel's knobs (one program per block of queries), in enumeration order.
PREFILL_KNOBS: tuple[Knob, ...] = (
    Knob("BLOCK_M", (32, 64, 128, 256), launch=Constexpr("BLOCK_M")),
    Knob("BLOCK_N", (32, 64, 128), launch=Constexpr("BLOCK_N")),
    Knob("num_warps", (4, 8), launch=CompileOption("num_warps")),
    Knob("num_stages", (1, 2, 3, 4, 5), launch=CompileOption("num_stages")),
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
    # bf16/fp16 and fp8 (V^T tiles); a tiles or a persistent grid (fp8: tiles only), whose causal
    # longest_first order goes head by head, each head's longest tile first).
    # ``gluon_pingpong_poly``: the free-running ping-pong with 2 of every 16 of P's exponentials
    # on the FMA pipe (a Cody-Waite split and FA4's degree-3 polynomial; the rest on MUFU):
    # where a block's exp2s on MUFU take as long as its GEMMs (head_dim 64; fp8 at 128).
    # The variants: ``forward`` (kernels/_flash_fwd.py), ``lean``, ``oneloop``, ``gluon`` (the
    # launchers' tables: KERNEL_VARIANTS in kernels/attention.py, LEAN_VARIANTS in kernels/lean.py).
    Knob.choice("loads", {
        "pointer": sets("forward", USE_TMA=False, WARP_SPECIALIZE=False),
        "tma": sets("forward", USE_TMA=True, WARP_SPECIALIZE=False),
        "tma_ws": sets("forward", USE_TMA=True, WARP_SPECIALIZE=True),
        "lean": sets("lean", WARP_SPECIALIZE=False, OVERLAP=False),
        "lean_ws": sets("lean", WARP_SPECIALIZE=True, OVERLAP=False),
        "lean_overlap": sets("lean", WARP_SPECIALIZE=False, OVERLAP=True),
        "lean_ws_oneloop": sets("oneloop", WARP_SPECIALIZE=True),
        "gluon_ws": sets("gluon", NUM_GROUPS=1, ORDERED=False),
        "gluon_pingpong": sets("gluon", NUM_GROUPS=2, ORDERED=False),
        "gluon_pingpong_ordered": sets("gluon", NUM_GROUPS=2, ORDERED=True),
        "gluon_pingpong_poly": sets("gluon", NUM_GROUPS=2, ORDERED=False, EXP2_POLY=2),
    }, implied="pointer"),
    # e4m3 Q, K, V with per-tensor scales (Hopper, Ada); checked against its own budget.
    # The launcher quantizes the inputs when the constexpr is on.
    Knob("use_fp8", (False, True), implied=False, launch=Constexpr("FP8")),
    # How programs map to tiles: one program per (query block, batch, head) tile, or a
    # persistent grid of one program per SM, each looping over tiles (BENCHMARKS.md,
    # "The knee": many short tiles pay a fixed cost per program that nothing overlaps).
    # ``persistent_zigzag`` (the Gluon kernel's): the persistent grid whose programs take every
    # other round of tiles in reverse order, so that causal tiles of unequal length even out
    # over a program's tiles (a program taking every programs-th tile saw few of a head's lengths).
    Knob.choice("grid", {"tiles": sets(PERSISTENT=False), "persistent": sets(PERSISTENT=True),
                         "persistent_zigzag": sets(PERSISTENT=True, ZIGZAG=True)}, implied="tiles"),
    # Which tiles start first: a head's query blocks side by side (they share K/V in
    # L2), or every head's longest causal tiles first (the (batch, head) index varies
    # fastest; balances the causal triangle across SMs).
    Knob.choice("tile_order", {"head_major": sets(BH_MAJOR=False), "longest_first": sets(BH_MAJOR=True)},
                implied="head_major"),
    # Last, and with one value: the enumeration order and content of the space recorded
    # tables replay against stay what they were before the decode kernel joined. Configs
    # recorded before then omit it and mean this kernel.
    # (Its variant is the ``loads`` knob's.)
    Knob.choice("kernel", {"prefill": sets()}, implied="prefill"),
)

#: The decode kernel's knobs (kernels/_flash_decode.py), in enumeration order. One program
#: reads each K/V tile once for all query rows of one KV head (kv_group heads x q_len rows,
#: packed into a tile of ``decode_block_h`` rows); the keys of a sequence are split over
#: ``num_splits`` programs whose partial results one combine launch merges. ``num_splits``
#: is a runtime argument of the kernel: trying another value costs no compile.
DECODE_KNOBS: tuple[Knob, ...] = (
    Knob.choice("kernel", {"decode": sets("decode")}),
    Knob("BLOCK_N", (16, 32, 64, 128, 256), launch=Constexpr("BLOCK_N")),
    Knob("num_splits", (1, 2, 4, 8, 16, 32, 64, 128), launch=HostArg("num_splits")),
    Knob("num_warps", (1, 2, 4, 8), launch=CompileOption("num_warps")),
    Knob("num_stages", (1, 2, 3, 4, 5), launch=CompileOption("num_stages")),
    # K/V tiles by pointer loads or by tensor descriptors (TMA, Hopper and newer):
    # decode is a stream of K/V tiles, and TMA moves a tile with one instruction.
    Knob.choice("loads", {"pointer": sets(USE_TMA=False), "tma": sets(USE_TMA=True)}, implied="pointer"),
    # How the splits' partials are merged: a second launch, or by the last split of
    # each row block inside the split kernel (one launch a call: less host time and no
    # launch gap). Last, so configs recorded before it enumerate in their old order;
    # they omit it and mean ``launch``, what they were timed with.
    # (The launcher sets the kernel's FUSED_COMBINE when there is more than one split.)
    Knob("combine", ("launch", "fused"), implied="launch", launch=HostArg("combine")),
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
