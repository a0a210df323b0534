"""The packed kernels' table rows: which configs a sweep of the varlen or paged kernel
measures, how a row's config is checked, and which launcher the worker runs it with.

A row of a packed kernel is a config of its space (``VARLEN_TUNABLES`` / ``PAGED_TUNABLES``,
kernels/space.py) that names its kernel (``kernel="varlen"`` / ``kernel="paged"``) and, for
paged rows, the cache's page size (``PAGE_SIZE_KEY``): the row convention ``flashtune
export`` reads (runtime/storage/export.py). The worker measures a row through the dense
path (objectives/bench.py ``measure``) with a launcher of the dense signature that lays the
dense inputs out as the packed kernel reads them (objectives/packed_launchers.py), so the
float32 reference and the relative-error budget apply unchanged.

Torch-free: the parent process (the objective, the sweep) reads it without loading torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from flashtune.kernels.config import Config, Value
from flashtune.kernels.space import (
    PAGE_SIZE_KEY,
    PAGED_KERNEL,
    PAGED_TUNABLES,
    VARLEN_KERNEL,
    VARLEN_TUNABLES,
    validate_config,
    validate_paged_config,
    validate_varlen_config,
)

#: Each packed kernel's space, by the name its rows give it.
PACKED_TUNABLES: Mapping[str, Mapping[str, tuple[Value, ...]]] = {
    VARLEN_KERNEL: VARLEN_TUNABLES, PAGED_KERNEL: PAGED_TUNABLES}
#: The worker's launcher (``module:function``, objectives/bench.py ``load_launcher``) of each
#: packed kernel's rows.
PACKED_LAUNCHERS: Mapping[str, str] = {
    VARLEN_KERNEL: "flashtune.objectives.packed_launchers:launch_varlen_dense",
    PAGED_KERNEL: "flashtune.objectives.packed_launchers:launch_paged_dense",
}


def packed_kernel(config: Mapping[str, Value]) -> str | None:
    """The packed kernel a row's config names, or None for a dense (prefill or decode) config."""
    kernel = config.get("kernel")
    return kernel if kernel in PACKED_TUNABLES else None


def launcher_for(config: Mapping[str, Value]) -> str | None:
    """The worker's launcher of a row (None: the dense op's, the worker's default)."""
    kernel = packed_kernel(config)
    return None if kernel is None else PACKED_LAUNCHERS[kernel]


def packed_row(tile: Config, kernel: str, *, page_size: int | None = None) -> Config:
    """A tile of a packed kernel's space as its table row: with its kernel's name (and a
    paged row with ``page_size``)."""
    extra: dict[str, Value] = {"kernel": kernel}
    if kernel == PAGED_KERNEL:
        extra[PAGE_SIZE_KEY] = check_page_size(page_size)
    return Config({**tile, **extra})


def check_page_size(page_size: object) -> int:
    """``page_size`` if it is a positive int, else raise ValueError naming it. (Whether the
    paged kernel reads pages of that size is the kernel's check, kernels/paged.py: a row of
    another size is its launch's recorded failure.)"""
    if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
        raise ValueError(f"a paged row's config must give the cache's {PAGE_SIZE_KEY} (a positive int), "
                         f"got {page_size!r}")
    return page_size


def validate_row(config: Mapping[str, Value]) -> Config:
    """A table row's config as a complete :class:`Config`, checked against the space of the
    kernel it names: a packed row keeps its ``kernel`` (and ``page_size``); any other is
    a dense config (``validate_config``: implied knobs filled in).

    Raises:
        ValueError: a knob is unknown, missing or not among its values, or a paged row's
            page size is not a positive int.
    """
    kernel = packed_kernel(config)
    if kernel == VARLEN_KERNEL:
        return Config({**validate_varlen_config(config), "kernel": kernel})
    if kernel == PAGED_KERNEL:
        page_size = check_page_size(config.get(PAGE_SIZE_KEY))
        tile = validate_paged_config({k: v for k, v in config.items() if k != PAGE_SIZE_KEY})
        return Config({**tile, "kernel": kernel, PAGE_SIZE_KEY: page_size})
    return validate_config(config)



def table_suffix(kernel: str, page_size: int | None = None) -> str:
    """What a packed kernel's table adds to its workload's name (``<workload>.<suffix>.jsonl``),
    so that a dense, a varlen and a paged table of one workload (at any page size) never
    share a file, and a folder's dense tables stay ``<workload>.jsonl``."""
    return kernel if kernel == VARLEN_KERNEL else f"{kernel}-p{check_page_size(page_size)}"


def packed_kind(path: str | Path) -> str:
    """The :func:`table_suffix` a table file's name carries (``varlen``, ``paged-p256``), or
    "" for a dense table (a workload's name has no dot)."""
    stem = Path(path).name.removesuffix(".jsonl")
    return stem.partition(".")[2]


def is_packed_table(path: str | Path) -> bool:
    """Whether a table file is a packed kernel's: such tables are not the dense op's
    recordings of a workload."""
    return bool(packed_kind(path))
