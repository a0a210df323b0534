"""The fallback chain: which config serves a bucket on a GPU, and why.

exact bucket in the store -> nearest bucket in the store -> another GPU's entry of the same
architecture (its exact bucket, else its nearest) -> the architecture's baseline (-> the kernel's
safe default without a GPU spec). Decode buckets (q_len <=
``DECODE_MAX_Q_LEN``) only ever get decode configs: the store never shares across classes
and the baseline is the decode default, so q_len 1 never runs a prefill tile. The packed
variable-length (``varlen``) and paged (``paged``) classes walk the same chain among their
own class's entries, and end at their kernel's default. Every step re-checks feasibility on
the live GPU's spec (a varlen tile as the prefill kernel's pointer-load tile, a paged config
as the dense decode kernel's), so a store written on another card of the same fingerprint
family, or edited by hand, can never launch a config that does not fit.

Pure Python: no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from flashtune.kernels.config import Config
from flashtune.kernels.space import PAGED_TUNABLES, SAFE_DEFAULT, VARLEN_DEFAULT, VARLEN_FIXED
from flashtune.objectives.feasibility import Verdict, check
from flashtune.objectives.hardware import HardwareSpec, known_specs
from flashtune.objectives.types import Workload
from flashtune.runtime.dispatching.baselines import (
    VARLEN_ARCH_TILE_MAX_HEAD_DIM,
    VARLEN_ARCH_TILES,
    arch_of,
    decode_default,
    fallback_config,
)
from flashtune.runtime.storage.buckets import DECODE_MAX_Q_LEN, Bucket, distance, hash_kinds
from flashtune.runtime.storage.store import Key, Snapshot, StoreEntry, warn_once


@dataclass(frozen=True)
class Resolution:
    """A config and where it came from.

    Attributes:
        config: the config to launch.
        origin: ``exact``, ``nearest``, ``sibling`` (another GPU of the same architecture),
            ``baseline`` or ``default`` (no GPU spec; for the varlen and paged classes, their
            kernel's default, with a spec or without).
        detail: a sentence for people: the bucket and its class, and why this config
            (exact store hit, nearest bucket at distance d, arch default and its
            reasons, safe default), with what was skipped.
        bucket: the workload's bucket (None for a resolution built by hand).
    """

    config: Config
    origin: str
    detail: str = ""
    bucket: Bucket | None = None


def uses_fp8(config: Config) -> bool:
    """Whether a config computes in fp8 (a precision the caller has to opt in to)."""
    return bool(config.get("use_fp8", False))


def resolve(
    bucket: Bucket,
    snapshot: Snapshot | None,
    hardware: HardwareSpec | None,
    key: Key | None,
    accept: Callable[[Config], bool] | None = None,
) -> Resolution:
    """Pick the config for ``bucket`` on ``hardware``.

    Args:
        bucket: the workload's bucket.
        snapshot: the store's content, or None for no store.
        hardware: the live GPU's spec; None on a CPU (interpreter), which gets the
            kernel's safe default.
        key: (fingerprint, kernel hash, Triton version) of the live GPU and software (the
            hash of the bucket's class's kernel: ``store.source_hash_of``).
        accept: a store config is served only if this returns True (the dispatcher
            refuses fp8 configs unless the user opted in); None accepts all.

    Returns:
        The resolution; never raises for any bucket.
    """
    workload = bucket.representative()
    where = f"bucket {bucket.name} ({_class_reason(bucket)})"
    if hardware is None and bucket.kind in PACKED_DEFAULTS:
        config, why = PACKED_DEFAULTS[bucket.kind](None, workload)
        return Resolution(config, "default", f"{where}: no GPU spec (CPU or interpreter): {why}", bucket)
    if hardware is None:
        if bucket.kind == "decode":
            config, why = decode_default(None, workload)
            return Resolution(config, "default", f"{where}: no GPU spec (CPU or interpreter): decode default, {why}", bucket)
        return Resolution(SAFE_DEFAULT, "default", f"{where}: no GPU spec (CPU or interpreter): the kernel's safe default", bucket)
    skipped = []
    if snapshot is not None and key is not None:
        entry = snapshot.exact(key, bucket)
        if entry is not None:
            verdict = fits(bucket, entry.config, workload, hardware)
            if accept is not None and not accept(entry.config):
                skipped.append("exact entry not accepted (fp8 needs an opt-in)")
            elif verdict.feasible:
                recorded = "" if entry.bucket == bucket else " (recorded for any batch x heads)"
                return Resolution(entry.config, "exact", f"{where}: exact store hit{recorded}", bucket)
            else:
                skipped.append(f"exact entry infeasible here ({verdict.reason})")
        for entry in snapshot.nearest(key, bucket):
            if accept is not None and not accept(entry.config):
                continue
            if fits(bucket, entry.config, workload, hardware).feasible:
                d = distance(bucket, entry.bucket)
                return Resolution(entry.config, "nearest",
                                  f"{where}: nearest store bucket {entry.bucket.name} at distance {d:g}", bucket)
        stale = snapshot.stale_count(key, hash_kinds(bucket.kind))
        if stale:
            warn_once(
                snapshot.path, snapshot.state,
                f"{stale} entr{'y' if stale == 1 else 'ies'} for this GPU were tuned with another kernel source "
                "or Triton version and are ignored (re-tune and re-export)",
            )
        sibling = _sibling_entry(snapshot, key, bucket, hardware, accept)
        if sibling is not None:
            d = distance(bucket, sibling.bucket)
            at = "its exact bucket" if d == 0 else f"its nearest bucket {sibling.bucket.name} at distance {d:g}"
            detail = (f"{where}: no store entry for {hardware.name}: {sibling.hardware}'s entry, {at} (same "
                      f"architecture {hardware.arch}, kernel and Triton; {SIBLING_EVIDENCE}; tune this GPU for "
                      f"its own: flashtune study)")
            warn_once(snapshot.path, f"{snapshot.state}:sibling:{hardware.name}",
                      f"no entries for {hardware.name}: serving {sibling.hardware}'s ({SIBLING_EVIDENCE})")
            return Resolution(sibling.config, "sibling", "; ".join([detail, *skipped]), bucket)
    if bucket.kind in PACKED_DEFAULTS:
        config, why = PACKED_DEFAULTS[bucket.kind](hardware, workload)
        return Resolution(config, "default", "; ".join([f"{where}: no store entry: {why}", *skipped]), bucket)
    arch = arch_of(hardware)
    if bucket.kind == "decode":
        config, why = decode_default(hardware, workload)
        note = f"{arch} decode default, {why}"
    else:
        config = fallback_config(hardware, workload)
        note = f"{arch} baseline"
    return Resolution(config, "baseline", "; ".join([f"{where}: no store entry: {note}", *skipped]), bucket)


#: Why another GPU's entry beats the architecture's baseline, as measured: each GPU's tuned
#: configs timed on the other beside the baseline, in one run a GPU (BENCHMARKS.md, "Two GPU
#: models"). Shown by ``explain`` and in the one warning a store gives when it serves one.
SIBLING_EVIDENCE = ("on the suite, the H200's entries ran at 0.98x the H100's own on an H100 (geomean; "
                    "the baseline 0.96x), the H100's at 0.99x the H200's own on an H200 (the baseline 0.97x)")


def _sibling_entry(snapshot: Snapshot, key: Key, bucket: Bucket, hardware: HardwareSpec,
                   accept: Callable[[Config], bool] | None) -> StoreEntry | None:
    """The entry another GPU of ``hardware``'s architecture has for ``bucket`` (measured with
    the same kernel and Triton), nearest bucket first, then by GPU name; None if none fits.

    A GPU is recognised by the name its entries carry, among the shipped specs: an unknown
    GPU's architecture is unknown, and its entries are never served here.
    """
    others = snapshot.other_gpus(key)
    if not others:
        return None
    found: list[tuple[float, str, StoreEntry]] = []
    arch_by_name = {spec.name: spec.arch for spec in known_specs().values()}
    workload = bucket.representative()
    for other in others:
        exact = snapshot.exact(other, bucket)
        for entry in ([exact] if exact is not None else []) + list(snapshot.nearest(other, bucket)):
            if arch_by_name.get(entry.hardware) != hardware.arch:
                break  # one group is one GPU: none of its entries is of this architecture
            if (accept is None or accept(entry.config)) and fits(bucket, entry.config, workload, hardware).feasible:
                found.append((distance(bucket, entry.bucket) or 0.0, entry.hardware, entry))
                break
    return min(found, key=lambda item: item[:2])[2] if found else None


def fits(bucket: Bucket, config: Config, workload: Workload, hardware: HardwareSpec) -> Verdict:
    """Whether a store config of ``bucket``'s class fits ``hardware``: the dense kernels' by
    the feasibility model; a varlen tile as the prefill kernel's pointer-load tile (the
    varlen kernel's loop is that kernel's), a paged config as the dense decode kernel's
    (the same split kernel, reading its keys through the block table)."""
    if bucket.kind == "varlen":
        config = Config({**VARLEN_FIXED, **config})
    elif bucket.kind == "paged":
        config = Config({**config, "kernel": "decode"})
    return check(config, workload, hardware)


def _varlen_default(hardware: HardwareSpec | None, workload: Workload) -> tuple[Config, str]:
    """The architecture's varlen tile where one is measured and it fits, else the safe one."""
    if hardware is not None and workload.head_dim <= VARLEN_ARCH_TILE_MAX_HEAD_DIM:
        arch = arch_of(hardware)
        tile = VARLEN_ARCH_TILES.get(arch)
        if tile is not None and check(Config({**VARLEN_FIXED, **tile}), workload, hardware).feasible:
            return tile, f"the {arch} varlen tile (measured on the H100's packed prefill, checked on the H200's tables)"
    return VARLEN_DEFAULT, "the varlen kernel's default tile (the prefill kernel's safe default)"


def _paged_default(hardware: HardwareSpec | None, workload: Workload) -> tuple[Config, str]:
    dense, _ = decode_default(hardware, workload)  # the op computes it again for the call's exact shape
    return (Config({name: dense[name] for name in PAGED_TUNABLES}),
            "the paged kernel's default for the call's shape (the dense decode default's tile and split "
            "rule at the block table's capacity)")


#: The varlen and paged classes' fallback when the store has nothing for them: their kernel's
#: own default (the op computes the paged one from the call's exact shape).
PACKED_DEFAULTS: dict[str, Callable[[HardwareSpec | None, Workload], tuple[Config, str]]] = {
    "varlen": _varlen_default, "paged": _paged_default}


def _class_reason(bucket: Bucket) -> str:
    if bucket.kind == "varlen":
        return "varlen: packed sequences, lengths the longest sequence's"
    if bucket.kind == "paged":
        return f"paged: a block table over pages of {bucket.page_size}, kv_len its capacity"
    if bucket.kind == "decode":
        return f"decode: q_len {bucket.q_len} <= {DECODE_MAX_Q_LEN}"
    if bucket.q_len <= DECODE_MAX_Q_LEN:
        return f"prefill: recorded with the prefill kernel at q_len {bucket.q_len}"
    return f"prefill: q_len {bucket.q_len} > {DECODE_MAX_Q_LEN}"
