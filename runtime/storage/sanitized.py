"""Sanitizer verdicts, cached so that a config is checked once per kernel, GPU and Triton.

A verdict (``flashtune.objectives.sanitize.Verdict``) is keyed by the kernel's source hash,
the config (completed with the knobs it implies), the head dim and dtype it ran at, the
GPU's fingerprint (which names the driver, CUDA, torch and Triton too), Triton's version
and the tools run: a cache keyed on the config alone would vouch for code that no longer
exists. One small JSON file (``$FLASHTUNE_SANITIZED``, else ``sanitized.json`` in the
user's cache folder beside the default store), written as the store is: under an
``flock`` on a side file, atomically. Only clean and finding verdicts are kept: a timeout
or a crash may be the machine's and is checked again next time. An unreadable file is an
empty cache (rewritten whole at the next write).

Pure Python: no torch, no triton.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flashtune.kernels.source_hash import kernel_source_hash
from flashtune.kernels.space import validate_config
from flashtune.objectives.hardware import HardwareSpec
from flashtune.objectives.sanitize import (
    CLASSIFIER_VERSION,
    CLEAN,
    DEFAULT_TIMEOUT_S,
    FINDING,
    TOOLS,
    WAIVED,
    Verdict,
    find_sanitizer,
    probe_gpu,
    sanitize,
)
from flashtune.runtime.storage.buckets import DENSE_KINDS
from flashtune.runtime.storage.file_lock import exclusive_lock
from flashtune.runtime.storage.store import StoreEntry, _atomic_write, triton_version

#: The environment variable naming the cache file.
ENV_CACHE = "FLASHTUNE_SANITIZED"
FORMAT = "flashtune-sanitized"
VERSION = 1
#: A cache file larger than this is read as empty (and rewritten).
MAX_BYTES = 16 * 2**20


def default_cache_path() -> Path:
    """``$FLASHTUNE_SANITIZED``, else ``sanitized.json`` beside the default store
    (``~/.cache/flashtune/``) even where ``FLASHTUNE_STORE`` moves the store."""
    env = os.environ.get(ENV_CACHE)
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(cache, "flashtune", "sanitized.json").expanduser()


def verdict_key(config: Mapping[str, Any], *, head_dim: int, dtype: str, gpu: str,
                tools: Sequence[str] = TOOLS, kernel_hash: str | None = None, triton: str | None = None) -> str:
    """The cache key: a hash of everything a verdict depends on."""
    payload = {"kernel": kernel_hash or kernel_source_hash(), "triton": triton or triton_version(), "gpu": gpu,
               "config": validate_config(config).to_dict(), "head_dim": int(head_dim), "dtype": dtype,
               "tools": sorted(tools), "classifier": CLASSIFIER_VERSION}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


class SanitizedCache:
    """The verdict cache file."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path).expanduser() if path is not None else default_cache_path()

    def __repr__(self) -> str:
        return f"SanitizedCache({str(self.path)!r})"

    def _read(self) -> dict[str, Any]:
        try:
            if self.path.stat().st_size > MAX_BYTES:
                return {}
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
            return {}
        verdicts = data.get("verdicts")
        return verdicts if isinstance(verdicts, dict) else {}

    def get(self, key: str) -> Verdict | None:
        """The cached verdict of ``key``, or None (absent or unreadable)."""
        raw = self._read().get(key)
        if not isinstance(raw, dict):
            return None
        try:
            return Verdict.from_dict(raw, cached=True)
        except (KeyError, TypeError, ValueError):
            return None

    def put(self, key: str, verdict: Verdict) -> bool:
        """Keep ``verdict`` under ``key`` unless a tool timed out or crashed; whether it was kept."""
        if not verdict.results or any(r.outcome not in (CLEAN, WAIVED, FINDING) for r in verdict.results):
            return False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with exclusive_lock(self.path.with_name(self.path.name + ".lock")):
            verdicts = self._read()
            verdicts[key] = verdict.to_dict()
            text = json.dumps({"format": FORMAT, "version": VERSION, "verdicts": verdicts}, indent=1, sort_keys=True)
            _atomic_write(self.path, text + "\n")
        return True

    def __len__(self) -> int:
        return len(self._read())


def checked(config: Mapping[str, Any], *, head_dim: int, dtype: str = "bfloat16", gpu: str,
            cache: SanitizedCache | None, tools: Sequence[str] = TOOLS, **sanitize_options: Any) -> Verdict:
    """The verdict on ``config``: the cache's when it has one, else a sanitized check (then cached).

    ``sanitize_options`` go to ``objectives.sanitize.sanitize`` (``sanitizer``, ``timeout_s``, ``env``).

    Raises:
        FileNotFoundError: no compute-sanitizer, and the cache has no verdict.
    """
    key = verdict_key(config, head_dim=head_dim, dtype=dtype, gpu=gpu, tools=tools)
    if cache is not None:
        hit = cache.get(key)
        if hit is not None:
            return hit
    verdict = sanitize(config, head_dim=head_dim, dtype=dtype, gpu=gpu, tools=tools, **sanitize_options)
    if cache is not None:
        cache.put(key, verdict)
    return verdict



# --- export: nothing unsafe goes into a store -----------------------------------------------

#: Configs tried per bucket before it is left out: its fastest, then the next ones.
MAX_TRIES_PER_BUCKET = 3


@dataclass
class Screening:
    """What a sanitized export keeps.

    Attributes:
        kept: the entries to write (each bucket's fastest safe config).
        unsafe: entries left out, each with the verdict that found it unsafe.
        lines: what to tell the user, one line each (none when every entry was checked clean).
        checked: how many configs the sanitizer judged here (cache hits included).
    """

    kept: list[StoreEntry]
    unsafe: list[tuple[StoreEntry, Verdict]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    checked: int = 0


def not_sanitized_line(why: str, count: int) -> str:
    return f"configs were not sanitized ({why}): {count} entr{'y' if count == 1 else 'ies'} written unchecked"


def screen_entries(entries: Sequence[StoreEntry], *, alternatives: Mapping[Any, Sequence[StoreEntry]] | None = None,
                   gpu: Mapping[str, Any] | None = None, sanitizer: str | None = None,
                   cache: SanitizedCache | None = None, tools: Sequence[str] = TOOLS,
                   timeout_s: float = DEFAULT_TIMEOUT_S) -> Screening:
    """Sanitize ``entries`` of the GPU this runs on; leave out the unsafe ones.

    An unsafe entry's bucket gets the next fastest config of ``alternatives[(entry.key,
    entry.bucket)]`` (fastest first) that is safe, up to :data:`MAX_TRIES_PER_BUCKET`
    checks; entries of other GPUs (by name) are written unchecked and said so: a verdict
    holds for the GPU that ran it. Without compute-sanitizer or a GPU nothing is checked,
    and one line says so.

    Args:
        gpu: the GPU's ``HardwareSpec.to_dict()``; None: asked of a child process
            (``objectives.sanitize.probe_gpu``), only once compute-sanitizer is found.
    """
    sanitizer = sanitizer or find_sanitizer()
    if sanitizer is None:
        return Screening(list(entries), lines=[not_sanitized_line("no compute-sanitizer on PATH or in "
                                                                  "/usr/local/cuda/bin", len(entries))])
    spec = gpu if gpu is not None else probe_gpu()
    if spec is None:
        return Screening(list(entries), lines=[not_sanitized_line("no GPU", len(entries))])
    hardware = HardwareSpec.from_dict(dict(spec))
    screening = Screening([])
    others = 0
    packed = 0
    for entry in entries:
        if entry.hardware != hardware.name:
            screening.kept.append(entry)
            others += 1
            continue
        if entry.bucket.kind not in DENSE_KINDS:
            screening.kept.append(entry)
            packed += 1
            continue
        candidates = [entry, *(e for e in (alternatives or {}).get((entry.key, entry.bucket), ())
                               if e.config != entry.config)]
        for candidate in candidates[:MAX_TRIES_PER_BUCKET]:
            verdict = checked(candidate.config, head_dim=candidate.bucket.head_dim, dtype=candidate.bucket.dtype,
                              gpu=hardware.fingerprint, cache=cache, tools=tools, sanitizer=sanitizer,
                              timeout_s=timeout_s)
            screening.checked += 1
            if verdict.safe:
                screening.kept.append(candidate)
                break
            screening.unsafe.append((candidate, verdict))
            screening.lines.append(f"left out {candidate.bucket.name} {candidate.config.to_dict()}: unsafe: "
                                   f"{verdict.reason}")
        else:
            if candidates:
                screening.lines.append(f"{entry.bucket.name}: no safe config among its {len(candidates[:MAX_TRIES_PER_BUCKET])} "
                                       f"fastest: not exported (the runtime serves its fallback there)")
    if others:
        screening.lines.append(not_sanitized_line(f"measured on another GPU than this {hardware.name}", others))
    if packed:
        screening.lines.append(not_sanitized_line("varlen and paged configs: the sanitizer's shapes run the dense "
                                                  "kernels", packed))
    return screening
