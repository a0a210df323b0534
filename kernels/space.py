"""The tunable spaces the FlashAttention kernels declare, as data, and their validation.

Two kernels of the dense op, each with its own table: ``prefill`` (``TUNABLES``: one program per block of
queries) and ``decode`` (``DECODE_TUNABLES``: few query rows against a long KV cache, the
keys split across programs). A config names its kernel with the ``kernel`` knob; configs
recorded before the decode kernel existed omit it and mean ``prefill`` (``IMPLIED``).
The search space, the feasibility model, the sweep and the op all read these tables;
``tunables_for`` picks the one a workload is tuned in. The packed variable-length kernel
(``VARLEN_TUNABLES``, kernels/varlen.py) and the paged decode kernel (``PAGED_TUNABLES``,
kernels/paged.py) declare theirs here too, so that the store validates their entries
without torch. The dense tables are read-only views
built from the knobs' declarations in kernels/knobs.py: a knob's values, its kernel and
its implied value are declared there, once.

Two knobs of the original design map onto this table (BENCHMARKS.md, "The space"):
``prefetch distance`` is ``num_stages`` (Triton's software pipeliner keeps
``num_stages - 1`` K/V tiles in flight ahead of the one being used), and ``use_fp8``
runs both dots in e4m3 with per-tensor scales, checked against its own accuracy budget.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from types import MappingProxyType

from flashtune.kernels.config import Config, Value
from flashtune.kernels.knobs import KERNEL_KNOBS, CompileOption, Constexpr, HostArg, Knob, implied_of, space_of

# Re-exported: the head dims the kernel compiles for are declared in the bottom layer
# (values/inputs.py), where the CLI's workload parser checks them too.
from flashtune.values.inputs import SUPPORTED_HEAD_DIMS as SUPPORTED_HEAD_DIMS

#: Every kernel's space, by the value of the ``kernel`` knob: each knob's values by name,
#: in the order the grid enumerates them (read-only; declared in kernels/knobs.py, with
#: why each knob exists).
KERNEL_TUNABLES: Mapping[str, Mapping[str, tuple[Value, ...]]] = MappingProxyType(
    {kernel: space_of(knobs) for kernel, knobs in KERNEL_KNOBS.items()}
)

#: The prefill kernel's space (one program per block of queries).
TUNABLES: Mapping[str, tuple[Value, ...]] = KERNEL_TUNABLES["prefill"]

#: The decode kernel's space (kernels/_flash_decode.py: few query rows against a long KV
#: cache, the keys split across programs).
DECODE_TUNABLES: Mapping[str, tuple[Value, ...]] = KERNEL_TUNABLES["decode"]

#: Longest query the decode kernel serves (and the default picks it for). 16 covers
#: speculative decoding's draft lengths (1-8) and small chunks against a cache; at the
#: usual GQA group of 4-8 its packed rows (kv_group x q_len) reach 64-128, the prefill
#: kernel's own tile heights, so past 16 the prefill kernel's query tiles are as full and
#: it has no split overhead.
DECODE_MAX_Q_LEN = 16

#: Most packed rows one decode program holds. A bigger group x q_len is spread over
#: several row blocks (a third grid axis) that read the same K/V tile from L2; 64 rows of
#: a 128-wide fp32 accumulator are 64 registers a thread at 4 warps.
DECODE_MAX_BLOCK_H = 64
#: Fewest rows of a decode tile: tl.dot needs 16 on every GPU Triton targets.
DECODE_MIN_BLOCK_H = 16

#: Knobs a config may omit, with the value that omission means (each knob's ``implied``
#: in kernels/knobs.py). Knobs added to the space after configs were recorded (tables,
#: stores, priors) declare one, so old configs keep meaning the kernel they were measured on.
IMPLIED: Mapping[str, Value] = implied_of(KERNEL_KNOBS)

def _loads_served_by(*variants: str) -> tuple[str, ...]:
    """The ``loads`` values whose declared launch (kernels/knobs.py) picks one of ``variants``."""
    return tuple(str(value) for knob in KERNEL_KNOBS["prefill"] if knob.name == "loads"
                 for value, chosen in knob.launch.by_value.items() if chosen.variant in variants)


#: ``loads`` values served by the Gluon kernel (kernels/gluon.py).
GLUON_LOADS: tuple[str, ...] = _loads_served_by("gluon")
#: ``loads`` values launched with descriptors made on the host, through a launcher of their
#: own (no per-sequence key ranges, no prepared call): the lean descriptor kernel's
#: (variants ``lean`` and ``oneloop``) and the Gluon kernel's.
LEAN_LOADS: tuple[str, ...] = _loads_served_by("lean", "oneloop", "gluon")

#: The warp-specialized loop at 4 warps runs 12 warps of 168 registers (compiled for sm90,
#: objectives/aot.py): the whole register file, one program an SM. At BLOCK_M 64 that
#: leaves 64 query rows an SM where the unspecialized kernel runs 4 programs (124
#: registers, 4 warps: 256 rows), which is why the specialized 64-row tiles ran at about
#: half the lean kernel's speed (BENCHMARKS.md); tiles below this many rows run unspecialized.
#: (kernels/_flash_fwd_oneloop.py's ``specializes``; the resource model's rules read it too).
SPECIALIZED_MIN_BLOCK_M = 128

#: A config that compiles and fits every GPU flashtune knows at every head dim
#: (about 50 KB of shared memory at head_dim 256); slow but safe.
SAFE_DEFAULT = Config(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2, loads="pointer", use_fp8=False,
                      grid="tiles", tile_order="head_major", kernel="prefill")


def setting(config: Mapping[str, Value], name: str) -> Value:
    """A knob's value in ``config``, or the value its omission means (``IMPLIED``): how the
    resource and feasibility models read a config that may predate a knob.

    Raises:
        KeyError: ``config`` omits ``name`` and no omission of it is declared.
    """
    return config[name] if name in config else IMPLIED[name]


def kernel_of(config: Mapping[str, Value]) -> str:
    """The kernel a config runs (``prefill`` when it does not say)."""
    return str(setting(config, "kernel"))


def uses_decode_kernel(q_len: int) -> bool:
    """Whether a query of ``q_len`` rows is served by the decode kernel."""
    return q_len <= DECODE_MAX_Q_LEN


def tunables_for(workload) -> Mapping[str, tuple[Value, ...]]:
    """The space a workload is tuned in: decode for q_len <= DECODE_MAX_Q_LEN, else prefill."""
    return DECODE_TUNABLES if uses_decode_kernel(int(workload.q_len)) else TUNABLES


def decode_block_h(kv_group: int, q_len: int) -> int:
    """Rows of the decode kernel's query tile for ``kv_group`` heads x ``q_len`` queries:
    their count rounded up to a power of two, at least 16 (tl.dot) and at most
    ``DECODE_MAX_BLOCK_H`` (more rows take more row blocks)."""
    rows = max(1, kv_group * q_len)
    return min(max(DECODE_MIN_BLOCK_H, 1 << (rows - 1).bit_length()), DECODE_MAX_BLOCK_H)


def validate_config(config: Mapping[str, Value]) -> Config:
    """Return ``config`` as a complete :class:`Config` (implied knobs filled in), or raise
    naming what is wrong. The config is checked against the space of its ``kernel``.

    Raises:
        ValueError: the kernel is unknown, a key is unknown or missing, or a value is not
            among the allowed ones.
    """
    kernel = config.get("kernel", IMPLIED["kernel"])
    if kernel not in KERNEL_TUNABLES:
        raise ValueError(f"config: kernel={kernel!r} is not one of {list(KERNEL_TUNABLES)}")
    tunables = KERNEL_TUNABLES[kernel]
    unknown = sorted(set(config) - set(tunables))
    if unknown:
        raise ValueError(f"config: unknown key(s) {unknown} for kernel={kernel!r}; "
                         f"known keys are {list(tunables)}")
    config = {**{k: v for k, v in IMPLIED.items() if k in tunables}, **config}
    missing = sorted(set(tunables) - set(config))
    if missing:
        raise ValueError(f"config: missing key(s) {missing} for kernel={kernel!r}")
    for name, allowed in tunables.items():
        value = config[name]
        if type(value) is not type(allowed[0]) or value not in allowed:
            raise ValueError(f"config: {name}={value!r} is not one of {list(allowed)}")
    return Config(config)


def all_configs(tunables: Mapping[str, tuple[Value, ...]] = TUNABLES) -> Iterator[Config]:
    """Every config of a declared space (the prefill kernel's by default), in a deterministic order."""
    names = list(tunables)
    for values in itertools.product(*(tunables[n] for n in names)):
        yield Config(dict(zip(names, values)))


#: The knobs the varlen kernel (kernels/varlen.py) tunes, with the prefill kernel's values:
#: its tile is the prefill kernel's pointer-load tile.
VARLEN_TUNABLES: Mapping[str, tuple[Value, ...]] = MappingProxyType(
    {name: TUNABLES[name] for name in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")})
#: The prefill knobs a config may also carry, at the one value this kernel implements, so
#: that a prefill config of pointer loads (``SAFE_DEFAULT``, a tuned one) runs here unchanged.
VARLEN_FIXED: Mapping[str, Value] = MappingProxyType({"loads": "pointer", "use_fp8": False, "grid": "tiles",
                                                      "tile_order": "head_major", "kernel": "prefill"})
#: The name a varlen config may give its kernel (a table's row says ``kernel="varlen"``).
VARLEN_KERNEL = "varlen"
#: The prefill kernel's safe default tile: it compiles and fits every GPU flashtune knows.
VARLEN_DEFAULT = Config({name: SAFE_DEFAULT[name] for name in VARLEN_TUNABLES})


def config_in_space(config: Mapping[str, Value], tunables: Mapping[str, tuple[Value, ...]], kernel: str) -> Config:
    """``config``'s values of ``tunables`` as a :class:`Config`, or raise ValueError naming a
    knob that is missing or not one of its values (the varlen and paged kernels' spaces)."""
    missing = [name for name in tunables if name not in config]
    if missing:
        raise ValueError(f"config: missing key(s) {missing} for the {kernel} kernel")
    for name, allowed in tunables.items():
        if type(config[name]) is not type(allowed[0]) or config[name] not in allowed:
            raise ValueError(f"config: {name}={config[name]!r} is not one of {list(allowed)}")
    return Config({name: config[name] for name in tunables})


def validate_varlen_config(config: Mapping[str, Value]) -> Config:
    """``config``'s tile as a :class:`Config` of ``VARLEN_TUNABLES``, or raise naming the knob.
    ``kernel`` may be given as "varlen" (or "prefill", with the other ``VARLEN_FIXED`` knobs).

    Raises:
        ValueError: a knob is unknown, missing, not among its values, or (one of the
            prefill kernel's other knobs) at a value this kernel does not implement.
    """
    for name, value in config.items():
        if name == "kernel" and value == VARLEN_KERNEL:
            continue
        if name in VARLEN_FIXED and value != VARLEN_FIXED[name]:
            raise ValueError(f"config: {name}={value!r} is not implemented by the varlen kernel "
                             f"(it runs {name}={VARLEN_FIXED[name]!r})")
        if name not in VARLEN_FIXED and name not in VARLEN_TUNABLES:
            raise ValueError(f"config: unknown key {name!r} for the varlen kernel; it tunes {list(VARLEN_TUNABLES)}")
    return config_in_space(config, VARLEN_TUNABLES, VARLEN_KERNEL)


#: The paged kernel's knobs (kernels/_flash_decode_paged.py), declared as the dense decode
#: kernel's are (kernels/knobs.py), in enumeration order. BLOCK_N may be below the page size
#: (a tile inside one page: one block-table load a tile) or above it (a tile over several
#: pages, each key its own lookup), so one space serves every page size. ``num_splits`` is a
#: runtime argument: trying another costs no compile. No TMA: a tile's rows are not one box
#: of the cache.
PAGED_KNOBS: tuple[Knob, ...] = (
    Knob("BLOCK_N", (16, 32, 64, 128), launch=Constexpr("BLOCK_N")),
    Knob("num_splits", (1, 2, 4, 8, 16, 32, 64, 128), launch=HostArg("num_splits")),
    Knob("num_warps", (1, 2, 4, 8), launch=CompileOption("num_warps")),
    Knob("num_stages", (1, 2, 3, 4), launch=CompileOption("num_stages")),
)
#: The paged kernel's space: each knob's values by name (read-only).
PAGED_TUNABLES: Mapping[str, tuple[Value, ...]] = space_of(PAGED_KNOBS)
#: The name a config may give its kernel (the op also takes configs that omit it).
PAGED_KERNEL = "paged"
#: The key of a paged table row's config that names the cache's page size (a workload has
#: no field for it; the store keeps it in the bucket, runtime/storage/export.py).
PAGE_SIZE_KEY = "page_size"
#: Page sizes must be whole multiples of this, the space's smallest tile (tl.dot takes 16
#: keys at least), so that some tile always fits a page whole and the one-lookup-a-tile path
#: is open at every page size (vLLM and transformers use 16 to 256). Here, not in
#: kernels/paged.py, so that the sweep's parent process checks --page-size without torch.
PAGE_SIZE_MULTIPLE = 16


def validate_paged_config(config: Mapping[str, Value]) -> Config:
    """``config`` as a :class:`Config` of ``PAGED_TUNABLES``, or raise ValueError naming the
    knob (unknown, missing, or not one of its values). ``kernel`` may be given as "paged"."""
    extra = sorted(set(config) - set(PAGED_TUNABLES) - {"kernel"})
    if extra:
        raise ValueError(f"config: unknown key(s) {extra} for the paged kernel; it tunes {list(PAGED_TUNABLES)}")
    if config.get("kernel", PAGED_KERNEL) != PAGED_KERNEL:
        raise ValueError(f"config: kernel={config['kernel']!r} is not the paged kernel ({PAGED_KERNEL!r})")
    return config_in_space(config, PAGED_TUNABLES, PAGED_KERNEL)
