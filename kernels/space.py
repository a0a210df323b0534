"""The tunable space the FlashAttention kernel declares, as data, and its validation.

The search space, the feasibility model, the sweep and the op all read this one table.

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

#: The head dims the kernel compiles for (``tl.arange`` over the head dim needs a power of
#: two). Here, in the torch-free module, so that the CLI's workload parser checks them too.
#: kernels/attention.py keeps an equal tuple (a test holds them equal) rather than importing
#: this one, because its bytes are part of the kernel source hash that keys every store.
SUPPORTED_HEAD_DIMS = (32, 64, 128, 256)

#: Every tunable and its allowed values, in the order the grid enumerates them.
TUNABLES: Mapping[str, tuple[Value, ...]] = MappingProxyType(
    {
        "BLOCK_M": (32, 64, 128, 256),
        "BLOCK_N": (32, 64, 128),
        "num_warps": (4, 8),
        "num_stages": (1, 2, 3, 4, 5),
        # How K/V tiles are loaded: pointer loads, or tensor descriptors (TMA), optionally
        # with the main loop warp-specialized (load warps apart from math warps).
        "loads": ("pointer", "tma", "tma_ws"),
        # e4m3 Q, K, V with per-tensor scales (Hopper, Ada); checked against its own budget.
        "use_fp8": (False, True),
        # How programs map to tiles: one program per (query block, batch, head) tile, or a
        # persistent grid of one program per SM, each looping over tiles (BENCHMARKS.md,
        # "The knee": many short tiles pay a fixed cost per program that nothing overlaps).
        "grid": ("tiles", "persistent"),
    }
)

#: Knobs a config may omit, with the value that omission means. Knobs added to the space
#: after configs were recorded (tables, stores, priors) go here, so old configs keep
#: meaning the kernel they were measured on.
IMPLIED: Mapping[str, Value] = MappingProxyType({"loads": "pointer", "use_fp8": False, "grid": "tiles"})

#: A config that compiles and fits every GPU flashtune knows at every head dim
#: (about 50 KB of shared memory at head_dim 256); slow but safe.
SAFE_DEFAULT = Config(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2, loads="pointer", use_fp8=False,
                      grid="tiles")


def validate_config(config: Mapping[str, Value]) -> Config:
    """Return ``config`` as a complete :class:`Config` (implied knobs filled in), or raise
    naming what is wrong.

    Raises:
        ValueError: a key is unknown or missing, or a value is not among the allowed ones.
    """
    unknown = sorted(set(config) - set(TUNABLES))
    if unknown:
        raise ValueError(f"config: unknown key(s) {unknown}; known keys are {list(TUNABLES)}")
    config = {**IMPLIED, **config}
    missing = sorted(set(TUNABLES) - set(config))
    if missing:
        raise ValueError(f"config: missing key(s) {missing}")
    for name, allowed in TUNABLES.items():
        value = config[name]
        if type(value) is not type(allowed[0]) or value not in allowed:
            raise ValueError(f"config: {name}={value!r} is not one of {list(allowed)}")
    return Config(config)


def all_configs() -> Iterator[Config]:
    """Every config of the declared space, in a deterministic order."""
    names = list(TUNABLES)
    for values in itertools.product(*(TUNABLES[n] for n in names)):
        yield Config(dict(zip(names, values)))
