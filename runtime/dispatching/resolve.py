"""The fallback chain: which config serves a bucket on a GPU, and why.

exact bucket in the store -> nearest bucket in the store -> the architecture's baseline
(-> the kernel's safe default without a GPU spec). Decode buckets (q_len <=
``DECODE_MAX_Q_LEN``) only ever get decode configs: the store never shares across classes
and the baseline is the decode default, so q_len 1 never runs a prefill tile. Every step re-checks feasibility on
the live GPU's spec, so a store written on another card of the same fingerprint family,
or edited by hand, can never launch a config that does not fit.

Pure Python: no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from flashtune.kernels.config import Config
from flashtune.kernels.space import SAFE_DEFAULT
from flashtune.objectives.feasibility import check
from flashtune.objectives.hardware import HardwareSpec
from flashtune.runtime.dispatching.baselines import arch_of, decode_default, fallback_config
from flashtune.runtime.storage.buckets import DECODE_MAX_Q_LEN, Bucket, distance
from flashtune.runtime.storage.store import Key, Snapshot, warn_once


@dataclass(frozen=True)
class Resolution:
    """A config and where it came from.

    Attributes:
        config: the config to launch.
        origin: ``exact``, ``nearest``, ``baseline`` or ``default`` (no GPU spec).
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
        key: (fingerprint, kernel hash, Triton version) of the live GPU and software.
        accept: a store config is served only if this returns True (the dispatcher
            refuses fp8 configs unless the user opted in); None accepts all.

    Returns:
        The resolution; never raises for any bucket.
    """
    workload = bucket.representative()
    where = f"bucket {bucket.name} ({_class_reason(bucket)})"
    if hardware is None:
        if bucket.kind == "decode":
            config, why = decode_default(None, workload)
            return Resolution(config, "default", f"{where}: no GPU spec (CPU or interpreter): decode default, {why}", bucket)
        return Resolution(SAFE_DEFAULT, "default", f"{where}: no GPU spec (CPU or interpreter): the kernel's safe default", bucket)
    skipped = []
    if snapshot is not None and key is not None:
        entry = snapshot.exact(key, bucket)
        if entry is not None:
            verdict = check(entry.config, workload, hardware)
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
            if check(entry.config, workload, hardware).feasible:
                d = distance(bucket, entry.bucket)
                return Resolution(entry.config, "nearest",
                                  f"{where}: nearest store bucket {entry.bucket.name} at distance {d:g}", bucket)
        stale = snapshot.stale_count(key)
        if stale:
            warn_once(
                snapshot.path, snapshot.state,
                f"{stale} entr{'y' if stale == 1 else 'ies'} for this GPU were tuned with another kernel source "
                "or Triton version and are ignored (re-tune and re-export)",
            )
    arch = arch_of(hardware)
    if bucket.kind == "decode":
        config, why = decode_default(hardware, workload)
        note = f"{arch} decode default, {why}"
    else:
        config = fallback_config(hardware, workload)
        note = f"{arch} baseline"
    return Resolution(config, "baseline", "; ".join([f"{where}: no store entry: {note}", *skipped]), bucket)


def _class_reason(bucket: Bucket) -> str:
    if bucket.kind == "decode":
        return f"decode: q_len {bucket.q_len} <= {DECODE_MAX_Q_LEN}"
    if bucket.q_len <= DECODE_MAX_Q_LEN:
        return f"prefill: recorded with the prefill kernel at q_len {bucket.q_len}"
    return f"prefill: q_len {bucket.q_len} > {DECODE_MAX_Q_LEN}"
