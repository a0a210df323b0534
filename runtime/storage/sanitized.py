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

:func:`checked_many` is :func:`checked` for many configs at once: the cached ones are served,
the others checked a batch at a time (``objectives.sanitize.sanitize_many``); the export's
screening uses it, one round of candidates at a time.

Pure Python: no torch, no triton.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from flashtune.kernels.space import PAGED_KERNEL
from flashtune.objectives.hardware import HardwareSpec
from flashtune.objectives.packed import packed_kernel, packed_row, validate_row
from flashtune.objectives.sanitize import (
    CLASSIFIER_VERSION,
    CLEAN,
    DEFAULT_BATCH_SIZE,
    DEFAULT_TIMEOUT_S,
    FINDING,
    TOOLS,
    WAIVED,
    Check,
    Verdict,
    edge_cases,
    find_sanitizer,
    probe_gpu,
    sanitize,
    sanitize_many,
)
from flashtune.runtime.storage.buckets import DENSE_KINDS
from flashtune.runtime.storage.file_lock import exclusive_lock
from flashtune.runtime.storage.store import StoreEntry, _atomic_write, source_hash_of, triton_version

#: The environment variable naming the cache file.
ENV_CACHE = "FLASHTUNE_SANITIZED"
FORMAT = "flashtune-sanitized"
VERSION = 1
#: A cache file larger than this is read as empty (and rewritten).
MAX_BYTES = 16 * 2**20

T = TypeVar("T")


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
    """The cache key: a hash of everything a verdict depends on (the kernel's source hash: the
    dense kernels' or, for a packed row's config, its kernel's own)."""
    row = validate_row(config)
    packed = packed_kernel(row)
    kernel_hash = kernel_hash or source_hash_of(packed or DENSE_KINDS[0])
    payload = {"kernel": kernel_hash, "triton": triton or triton_version(), "gpu": gpu,
               "config": row.to_dict(), "head_dim": int(head_dim), "dtype": dtype,
               "tools": sorted(tools), "classifier": CLASSIFIER_VERSION}
    if packed:
        # The packed kernels' cases are young: what the sanitizer ran is part of their verdict,
        # so a case added later checks them again. (The dense keys stay as they were.)
        payload["cases"] = edge_cases(row)
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


def checked_many(checks: Sequence[Check], *, gpu: str, cache: SanitizedCache | None, tools: Sequence[str] = TOOLS,
                 batch_size: int = DEFAULT_BATCH_SIZE, **sanitize_options: Any) -> list[Verdict]:
    """:func:`checked` on every check of ``checks``, one verdict each, in order: the cache's
    where it has one, the others checked ``batch_size`` to a run (``sanitize_many``) and cached.

    A check that recurs (the same config, head dim and dtype) is checked once; its repeats
    are served as cached, as :func:`checked` would serve them after the first.
    ``sanitize_options`` go to ``sanitize_many`` (``sanitizer``, ``timeout_s``, ``env``).

    Raises:
        FileNotFoundError: no compute-sanitizer, and the cache lacks a verdict.
    """
    keys = [verdict_key(c.config, head_dim=c.head_dim, dtype=c.dtype, gpu=gpu, tools=tools) for c in checks]
    found: dict[str, Verdict] = {}
    if cache is not None:
        found = {key: hit for key in set(keys) if (hit := cache.get(key)) is not None}
    todo: dict[str, Check] = {}
    for key, check in zip(keys, checks):
        if key not in found:
            todo.setdefault(key, check)  # the first of each, in order
    fresh: dict[str, Verdict] = {}
    if todo:  # all cached: no sanitizer needed, as with checked()
        verdicts = sanitize_many(list(todo.values()), gpu=gpu, tools=tools, batch_size=batch_size,
                                 **sanitize_options)
        fresh = dict(zip(todo, verdicts))
    if cache is not None:
        for key, verdict in fresh.items():
            cache.put(key, verdict)
    served: list[Verdict] = []
    for key in keys:
        if key in found:
            served.append(found[key])
        else:
            served.append(fresh[key])
            found[key] = replace(fresh[key], cached=True)  # its repeats are served as cache hits
    return served



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
                   timeout_s: float = DEFAULT_TIMEOUT_S, batch_size: int = DEFAULT_BATCH_SIZE) -> Screening:
    """Sanitize ``entries`` of the GPU this runs on; leave out the unsafe ones.

    An unsafe entry's bucket gets the next fastest config of ``alternatives[(entry.key,
    entry.bucket)]`` (fastest first) that is safe, up to :data:`MAX_TRIES_PER_BUCKET`
    checks; entries of other GPUs (by name) are written unchecked and said so: a verdict
    holds for the GPU that ran it. Without compute-sanitizer or a GPU nothing is checked,
    and one line says so. The checks run in rounds, ``batch_size`` configs to a sanitizer
    run (:func:`checked_many`): every bucket's fastest, then the next of each bucket whose
    configs so far were all unsafe.

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
    queues = {at: _candidates(entry, alternatives) for at, entry in enumerate(entries)
              if entry.hardware == hardware.name}

    def check(candidates: list[StoreEntry]) -> list[Verdict]:
        return checked_many([entry_check(c) for c in candidates],
                            gpu=hardware.fingerprint, cache=cache, tools=tools, sanitizer=sanitizer,
                            timeout_s=timeout_s, batch_size=batch_size)

    tried = try_in_rounds(queues, check)
    screening = Screening([])
    for at, entry in enumerate(entries):
        if at in queues:
            _screen_one(screening, entry, queues[at], tried[at])
        else:
            screening.kept.append(entry)
    others = sum(e.hardware != hardware.name for e in entries)
    if others:
        screening.lines.append(not_sanitized_line(f"measured on another GPU than this {hardware.name}", others))
    return screening


def entry_check(entry: StoreEntry) -> Check:
    """What sanitizing a store entry checks: its config at its bucket's head dim and dtype; a
    packed entry's as its kernel's table row (``kernel`` named, a paged one with its bucket's
    page size, which decides the kernel's page walk), so that the sanitizer runs that kernel."""
    kind, config = entry.bucket.kind, entry.config
    if kind not in DENSE_KINDS:
        config = packed_row(config, kind, page_size=entry.bucket.page_size if kind == PAGED_KERNEL else None)
    return Check(config, entry.bucket.head_dim, entry.bucket.dtype)


def _candidates(entry: StoreEntry, alternatives: Mapping[Any, Sequence[StoreEntry]] | None) -> list[StoreEntry]:
    """``entry``, then its bucket's other configs fastest first, up to :data:`MAX_TRIES_PER_BUCKET`."""
    others = (e for e in (alternatives or {}).get((entry.key, entry.bucket), ()) if e.config != entry.config)
    return [entry, *others][:MAX_TRIES_PER_BUCKET]


def try_in_rounds(queues: Mapping[Any, Sequence[T]], check: Callable[[list[T]], list[Verdict]]
                  ) -> dict[Any, list[tuple[T, Verdict]]]:
    """Each queue's candidates checked in order until one is safe, as one loop a queue would:
    round ``r`` checks, in one call of ``check``, the ``r``-th candidate of every queue whose
    candidates so far were all unsafe (so the calls can batch across queues).

    Returns:
        per queue, (candidate, verdict) for each one checked, in order.
    """
    tried: dict[Any, list[tuple[T, Verdict]]] = {name: [] for name in queues}
    for rank in range(max((len(q) for q in queues.values()), default=0)):
        due = [name for name, q in queues.items() if rank < len(q) and not any(v.safe for _, v in tried[name])]
        if not due:
            break
        for name, verdict in zip(due, check([queues[name][rank] for name in due])):
            tried[name].append((queues[name][rank], verdict))
    return tried


def _screen_one(screening: Screening, entry: StoreEntry, candidates: Sequence[StoreEntry],
                tried: Sequence[tuple[StoreEntry, Verdict]]) -> None:
    """Record one bucket's checks: its first safe candidate kept, each unsafe one said."""
    for candidate, verdict in tried:
        screening.checked += 1
        if verdict.safe:
            screening.kept.append(candidate)
            return
        screening.unsafe.append((candidate, verdict))
        screening.lines.append(f"left out {candidate.bucket.name} {candidate.config.to_dict()}: unsafe: "
                               f"{verdict.reason}")
    if candidates:
        screening.lines.append(f"{entry.bucket.name}: no safe config among its {len(candidates)} "
                               f"fastest: not exported (the runtime serves its fallback there)")
