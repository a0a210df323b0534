"""The tuned-config store: a versioned JSON file of the best config per GPU, kernel and bucket.

Keyed by hardware fingerprint, kernel source hash, Triton version and workload bucket
(docs/reference.md: a config cache keyed only on the config is a bug). Reading never raises
and never runs code: the file is JSON (never pickle), bounded in size, validated by a
schema; a missing file is an empty store (silently: the state before any export), a
corrupt, truncated, stale or hostile one is an empty store plus one :class:`StoreWarning`
per file state, and a file with some unusable entries (a bad number, an unknown knob)
serves the others, with one warning naming the first. Writing is atomic
(temporary file, fsync, ``os.replace``) and serialised between processes by an
``fcntl`` lock on a side file, with entries merged, so concurrent writers lose nothing
and readers (who take no lock) always see a whole file.

Pure Python: no torch, no triton import.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import gc
import hashlib
import json
import math
import operator
import os
import stat
import tempfile
import threading
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jsonschema

from flashtune.kernels.config import Config
from flashtune.kernels.source_hash import kernel_source_hash, packed_source_hash
from flashtune.kernels.space import validate_config, validate_paged_config, validate_varlen_config
from flashtune.runtime.storage.buckets import ANY_BATCH_HEADS, NO_PAGES, PACKED_KINDS, Bucket, distance
from flashtune.runtime.storage.file_lock import exclusive_lock
from flashtune.runtime.storage.store_schema import (
    ENTRY_SCHEMA,
    FILE_SCHEMA,
    FORMAT,
    MAX_ENTRIES,
    READABLE_VERSIONS,
    version_for,
)

#: A store file larger than this is refused unread (a hostile file must not exhaust memory).
MAX_STORE_BYTES = 32 * 2**20

_FILE_VALIDATOR = jsonschema.Draft202012Validator(FILE_SCHEMA)
_ENTRY_VALIDATOR = jsonschema.Draft202012Validator(ENTRY_SCHEMA)

Key = tuple[str, str, str]  # (fingerprint, kernel_hash, triton)

#: The environment variable naming the store file the runtime serves.
ENV_STORE = "FLASHTUNE_STORE"


def default_store_path() -> Path:
    """The store file the runtime serves: ``$FLASHTUNE_STORE``, else the user's cache
    directory (``~/.cache/flashtune/configs.json``). Torch-free: the CLI names it too."""
    env = os.environ.get(ENV_STORE)
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(cache, "flashtune", "configs.json").expanduser()


class StoreWarning(UserWarning):
    """A store file could not be used (corrupt, truncated, stale, hostile); the runtime falls back."""


def triton_version() -> str:
    """The installed Triton's version, read from its metadata (no import of triton)."""
    from importlib import metadata

    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return "none"


@dataclass(frozen=True)
class StoreEntry:
    """The best known config for one (GPU, kernel, Triton, bucket).

    Attributes:
        fingerprint: ``HardwareSpec.fingerprint`` of the GPU it was measured on.
        kernel_hash: the source hash of the kernel it was measured with (:func:`source_hash_of`
            its bucket's class).
        triton: Triton version it was compiled with.
        bucket: the workload bucket.
        config: the tunables.
        hardware: the GPU's name, for people.
        median_ms: measured median time, None if unknown.
        tflops: measured throughput, None if unknown.
        source: where it came from (``measured``, ``replayed``, ``online``...).
        updated: ISO-8601 UTC time it was written.
    """

    fingerprint: str
    kernel_hash: str
    triton: str
    bucket: Bucket
    config: Config
    hardware: str = ""
    median_ms: float | None = None
    tflops: float | None = None
    source: str = "measured"
    updated: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    @property
    def key(self) -> Key:
        return (self.fingerprint, self.kernel_hash, self.triton)

    def to_dict(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint, "hardware": self.hardware, "kernel_hash": self.kernel_hash,
            "triton": self.triton, "bucket": self.bucket.to_dict(), "config": self.config.to_dict(),
            "median_ms": _finite_or_none(self.median_ms), "tflops": _finite_or_none(self.tflops),
            "source": self.source, "updated": self.updated,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StoreEntry:
        """Build from an entry that already passed the schema.

        Raises:
            ValueError: a bucket or config that the schema cannot express as invalid.
        """
        return cls(
            fingerprint=data["fingerprint"], kernel_hash=data["kernel_hash"], triton=data["triton"],
            bucket=Bucket.from_dict(dict(data["bucket"])), config=Config.from_dict(data["config"]),
            hardware=data.get("hardware", ""), median_ms=data.get("median_ms"), tflops=data.get("tflops"),
            source=data.get("source", "measured"), updated=data.get("updated", ""),
        )


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _ms(entry: StoreEntry) -> float:
    return entry.median_ms if entry.median_ms is not None else math.inf


def better(a: StoreEntry, b: StoreEntry) -> StoreEntry:
    """The faster of two entries for one key; the newer on a tie."""
    if _ms(a) != _ms(b):
        return a if _ms(a) < _ms(b) else b
    return a if a.updated >= b.updated else b


class Snapshot:
    """An indexed view of one state of a store file.

    Entries are grouped by (fingerprint, kernel hash, Triton) and, within a group, by their
    bucket as written, once the file's structure was checked; an entry is validated
    against the entry schema only when its bucket is looked up. Why: a process serves one
    GPU and a few buckets, and the schema costs about 0.5 ms an entry, so validating a
    store at the size limit (80,000 entries) whole made the op's first call take 29 s on
    the H200's host. Unusable entries are skipped, with one warning per file state.

    Attributes:
        path: the file it was read from.
        state: identifies the file's content (for once-per-state warnings).
    """

    def __init__(self, path: Path, state: str, raw_entries: Iterable[Any] = ()) -> None:
        self.path = path
        self.state = state
        self.raw = raw_entries if isinstance(raw_entries, list) else list(raw_entries)  # as written
        # Group (None: too broken to belong to any GPU) -> bucket as written (None: no
        # usable bucket) -> (position, raw entry). One pass with C-level lookups: at the
        # size limit this loop is a visible part of the op's first call.
        self._places: dict[Key | None, dict[_Place | None, list[tuple[int, Any]]]] = {}
        for item in enumerate(self.raw):
            raw = item[1]
            try:
                key = _KEY_FIELDS(raw)
                hash(key)  # a list or an object where a string goes: no group
            except (KeyError, TypeError):
                key = None
            try:
                bucket = raw["bucket"]
                # Format 1 wrote no kind and no batch x heads: a prefill bucket of any;
                # formats 1 and 2 no page size: no pages.
                place = (*_BUCKET_FIELDS(bucket), bucket.get("kind", "prefill"),
                         bucket.get("batch_kv_heads", ANY_BATCH_HEADS), bucket.get("page_size", NO_PAGES))
                hash(place)
                if None in place:  # a null field
                    place = None
            except (KeyError, TypeError, AttributeError):  # not an object, or a field missing
                place = None
            group = self._places.get(key)
            if group is None:
                group = self._places[key] = {}
            items = group.get(place)
            if items is None:
                group[place] = [item]
            else:
                items.append(item)
        # The best usable entry of each (group, place), once checked.
        self._checked: dict[tuple[Key | None, _Place | None], StoreEntry | None] = {}
        self._lock = threading.Lock()

    def _group(self, key: Key | None) -> dict[_Place | None, list[tuple[int, Any]]]:
        places = self._places.get(key, {})
        if None in places:
            # Entries without a usable bucket serve no lookup: report them on the group's
            # first one, as validating the whole group did.
            self._at(key, None)
        return places

    def _at(self, key: Key | None, place: _Place | None) -> StoreEntry | None:
        """The best usable entry written for ``place`` in group ``key`` (validated once)."""
        slot = (key, place)
        if slot in self._checked:
            return self._checked[slot]
        with self._lock:
            if slot not in self._checked:
                items = self._places.get(key, {}).get(place, [])
                # Unplaceable entries are unusable whatever else is wrong: the schema names
                # the first one's problem, the rest are counted (a hostile file of many
                # costs no more than one).
                entries, problems = _validate_entries(items[:1] if place is None else items)
                if place is None and len(items) > 1:
                    problems += [""] * (len(items) - 1)
                if problems:
                    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
                    warn_once(self.path, self.state, f"unusable entries skipped: {problems[0]}{more}")
                best = None
                for entry in entries:
                    best = entry if best is None else better(entry, best)
                self._checked[slot] = best
        return self._checked[slot]

    def __len__(self) -> int:
        """Usable entries (validates every group)."""
        return sum(1 for _ in self.entries())

    def entries(self) -> Iterator[StoreEntry]:
        """Every usable entry, the best one per bucket (validates every group)."""
        for key in list(self._places):
            for place in list(self._group(key)):
                entry = self._at(key, place) if place is not None else None
                if entry is not None:
                    yield entry

    def exact(self, key: Key, bucket: Bucket) -> StoreEntry | None:
        """The entry for exactly this GPU, kernel, Triton and bucket.

        An entry recorded for any batch x heads (store format 1) of the same bucket
        otherwise is an exact hit too, after one of this very batch x heads.
        """
        places = self._group(key)
        for candidate in (bucket, bucket.any_batch_heads()):
            place = _place_of(candidate)
            found = self._at(key, place) if place in places else None
            if found is not None:
                return found
        return None

    def nearest(self, key: Key, bucket: Bucket) -> Iterator[StoreEntry]:
        """Entries of this GPU, kernel and Triton that may serve ``bucket``, nearest first.

        Excludes ``bucket`` itself (and its any-batch-x-heads form, an exact hit) and
        buckets of another head dim, dtype size or class. Lazy: buckets are ranked as
        written, and each entry is validated when it is reached.
        """
        ranked = []
        own = (bucket, bucket.any_batch_heads())
        for place in list(self._group(key)):
            if place is None or place[2] != bucket.head_dim:  # distance() would say None
                continue
            try:
                other = Bucket(*place)
            except (TypeError, ValueError):
                self._at(key, place)  # unusable: reported by the schema, served never
                continue
            d = distance(bucket, other)
            if d is not None and other not in own:
                ranked.append((d, other, place))
        ranked.sort(key=lambda item: (item[0], item[1]))
        for _, _, place in ranked:
            entry = self._at(key, place)
            if entry is not None:
                yield entry

    def other_gpus(self, key: Key) -> list[Key]:
        """Keys of the other GPUs whose entries were measured with this kernel source and
        Triton version (another fingerprint: another GPU model, driver or torch)."""
        return sorted(k for k in self._places if k is not None and k[0] != key[0] and k[1:] == key[1:])

    def stale_count(self, key: Key, kinds: tuple[str, ...] | None = None) -> int:
        """Entries for this GPU measured with another kernel source or Triton version (of
        ``kinds``' classes only, when given: each packed class has a kernel hash of its own)."""
        return sum(len(items) for k, group in self._places.items() if k is not None and k[0] == key[0] and k != key
                   for place, items in group.items()
                   if kinds is None or (place[6] if place is not None else "prefill") in kinds)


#: An entry's bucket as written: its fields' raw values in :class:`Bucket`'s order.
_Place = tuple[Any, ...]
_BUCKET_FIELDS = operator.itemgetter("dtype", "causal", "head_dim", "gqa", "q_len", "kv_len")
_KEY_FIELDS = operator.itemgetter("fingerprint", "kernel_hash", "triton")


def _place_of(bucket: Bucket) -> _Place:
    return (bucket.dtype, bucket.causal, bucket.head_dim, bucket.gqa, bucket.q_len, bucket.kv_len,
            bucket.kind, bucket.batch_kv_heads, bucket.page_size)


# --- warnings, once per file state -------------------------------------------------------

_WARNED: set[tuple[str, str]] = set()
_WARNED_LOCK = threading.Lock()


def warn_once(path: Path | str, state: str, message: str) -> bool:
    """Issue ``message`` as a :class:`StoreWarning` unless this file state already warned.

    One warning per file state in all: whatever is wrong with a file (corrupt, stale,
    some bad entries) is reported once, the first problem met, until the file changes.

    Returns:
        Whether the warning was issued.
    """
    key = (str(path), state)
    with _WARNED_LOCK:
        if key in _WARNED:
            return False
        _WARNED.add(key)
    warnings.warn(f"flashtune store {path}: {message}; falling back", StoreWarning, stacklevel=3)
    return True


# --- reading -----------------------------------------------------------------------------


class _Invalid(Exception):
    """The file is not a usable store; the message says why."""


class _BadNumber:
    """A number of the file that no store value can be: ``NaN``, ``Infinity`` (not JSON),
    ``1e400`` (out of range), an integer of more digits than Python converts.

    Parsed as this marker rather than refusing the file, so that it fails the schema
    where it stands: in an entry, that entry alone is skipped and the others are served
    (one bad number used to make the whole store unreadable, and a write moved it all
    aside). The marker is hashable (entries are grouped by raw bucket fields) and equals
    nothing but itself, so no lookup ever matches it.
    """

    __slots__ = ("text", "problem")

    def __init__(self, text: str, problem: str) -> None:
        self.text = text  # as written: kept in the side file of dropped entries
        self.problem = problem

    def __repr__(self) -> str:  # jsonschema quotes the repr in its messages
        return self.problem

    def __str__(self) -> str:
        return self.text


def _reject_constant(name: str) -> _BadNumber:
    return _BadNumber(name, f"non-finite number {name} (not JSON)")


def _int_or_marker(text: str) -> int | _BadNumber:
    try:
        return int(text)
    except ValueError:  # over sys.get_int_max_str_digits()
        return _BadNumber(text, f"an integer of {len(text.lstrip('-'))} digits (too long)")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)  # in C: a loop here was a third of a large file's parse
    if len(result) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise _Invalid(f"duplicate key {name[:40]!r}")
            seen.add(name)
    return result


def _parse(data: bytes) -> dict[str, Any]:
    """Bytes to a schema-valid document, or :class:`_Invalid` naming the first problem."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Invalid(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    hooks = {"parse_constant": _reject_constant, "parse_float": _finite_float, "object_pairs_hook": _no_duplicates}
    try:
        try:
            doc = json.loads(text, **hooks)
        except json.JSONDecodeError:
            raise
        except ValueError:
            # An integer of more digits than Python converts: read again with such
            # integers as markers. Only then: a hook for every integer would cost a
            # tenth of a second on a store at the size limit.
            doc = json.loads(text, parse_int=_int_or_marker, **hooks)
    except json.JSONDecodeError as exc:
        raise _Invalid(f"not valid JSON ({exc.msg} at byte {exc.pos}): corrupt or truncated") from None
    except RecursionError:
        raise _Invalid("JSON nested too deeply") from None
    except ValueError as exc:
        raise _Invalid(f"not valid JSON ({str(exc)[:120]})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _Invalid(f"not a flashtune store (expected an object with format {FORMAT!r})")
    version = doc.get("version")
    if isinstance(version, _BadNumber):  # not a version of another flashtune: corrupt
        raise _Invalid(f"format version is {version.problem}")
    if version not in READABLE_VERSIONS:
        raise _Invalid(f"stale format version {version!r} (this flashtune reads versions {list(READABLE_VERSIONS)})")
    entries = doc.get("entries")
    if isinstance(entries, list):
        # The schema checks the top level; the entries are counted and type-checked here,
        # because the validator costs about 7 us an item (0.6 s for a store at the limit).
        error = next(_FILE_VALIDATOR.iter_errors({**doc, "entries": []}), None)
        if error is None and len(entries) > MAX_ENTRIES:
            raise _Invalid(f"fails the schema at entries: {len(entries)} entries, over the limit of {MAX_ENTRIES}")
        if error is None:
            bad = next((n for n, raw in enumerate(entries) if type(raw) is not dict), None)
            if bad is not None:
                raise _Invalid(f"fails the schema at entries/{bad}: {str(entries[bad])[:60]!r} is not of type 'object'")
    else:
        error = next(_FILE_VALIDATOR.iter_errors(doc), None)
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top)"
        raise _Invalid(f"fails the schema at {where}: {error.message[:200]}")
    return doc


def _validate_entries(items: Iterable[tuple[int, Any]]) -> tuple[list[StoreEntry], list[str]]:
    """Usable entries among (position, raw entry) pairs, and the problems of the others."""
    entries, problems = [], []
    for number, raw in items:
        error = next(_ENTRY_VALIDATOR.iter_errors(raw), None)
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path)
            said = error.instance.problem if isinstance(error.instance, _BadNumber) else error.message[:200]
            problems.append(f"entries/{number}{'/' + where if where else ''}: {said}")
            continue
        try:
            entry = completed(StoreEntry.from_dict(raw))
        except (ValueError, TypeError) as exc:
            problems.append(f"entries/{number}: {str(exc)[:200]}")
            continue
        entries.append(entry)
    return entries, problems


#: How each bucket class's configs are checked against their kernel's declared space (and
#: completed with the knobs older configs imply).
VALIDATORS = {"prefill": validate_config, "decode": validate_config, "varlen": validate_varlen_config,
              "paged": validate_paged_config}


def source_hash_of(kind: str) -> str:
    """The kernel source hash the entries of bucket class ``kind`` are measured with here."""
    return packed_source_hash(kind) if kind in PACKED_KINDS else kernel_source_hash()


def completed(entry: StoreEntry, current_kernel: str | None = None) -> StoreEntry:
    """``entry`` as the store holds it: an entry of this kernel checked against its bucket
    class's declared space and completed with the knobs older configs imply, so that it
    equals the same config from elsewhere (another kernel version may declare other
    tunables: left as is).

    Raises:
        ValueError: a config of this kernel outside its space.
    """
    if entry.kernel_hash != (current_kernel or source_hash_of(entry.bucket.kind)):
        return entry
    return dataclasses.replace(entry, config=VALIDATORS[entry.bucket.kind](entry.config))


def _check_time(entry: StoreEntry, number: int) -> None:
    """A time a store may hold: none (or inf, written as none), or a finite positive number
    (0 ms would be the best forever)."""
    for name in ("median_ms", "tflops"):
        value = getattr(entry, name)
        if value is None:
            continue
        if value == math.inf:
            continue  # no time: written as null
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or (name == "median_ms" and value <= 0) or value < 0:
            raise ValueError(f"entries[{number}] ({entry.bucket.name}, {entry.config}): {name} must be a finite "
                             f"{'positive' if name == 'median_ms' else 'non-negative'} number or None, got {value!r}")


def _finite_float(text: str) -> float | _BadNumber:
    value = float(text)
    if not math.isfinite(value):  # 1e400: Python's JSON reads it as inf
        return _BadNumber(text, f"non-finite number {text[:40]} (out of range)")
    return value


def _read_bytes(path: Path) -> bytes | None:
    """The file's bytes (at most ``MAX_STORE_BYTES + 1``), None if it does not exist.

    Opened non-blocking and checked to be a regular file first, so that a FIFO or a
    device planted at the path cannot hang or flood the reader.

    Raises:
        _Invalid: not a regular file, too large, or unreadable.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _Invalid(f"cannot open ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _Invalid("not a regular file")
        if info.st_size > MAX_STORE_BYTES:
            raise _Invalid(f"{info.st_size} bytes, over the {MAX_STORE_BYTES} byte limit")
        chunks, size = [], 0
        while size <= MAX_STORE_BYTES:
            chunk = os.read(fd, min(1 << 20, MAX_STORE_BYTES + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_STORE_BYTES:
            raise _Invalid(f"over the {MAX_STORE_BYTES} byte limit")
        return b"".join(chunks)
    except OSError as exc:
        raise _Invalid(f"cannot read ({exc.strerror})") from None
    finally:
        os.close(fd)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block.

    Why: parsing a large store creates a few hundred thousand containers, and each
    collection they trigger walks all of them again; at the size limit that is about a
    third of the read. JSON has no cycles, so nothing collectable is made meanwhile.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_snapshot(path: str | os.PathLike[str]) -> Snapshot:
    """Read a store file. Never raises; warns once per file state when it cannot be used.

    The file's structure is checked here; entries when they are looked up
    (:class:`Snapshot`).

    Returns:
        The file's entries; an empty snapshot for a missing or unusable file.
    """
    path = Path(path)
    state = "unread"
    try:
        data = _read_bytes(path)
        if data is None:
            return Snapshot(path, "missing")
        state = hashlib.sha256(data).hexdigest()[:16]
        with _gc_paused():
            return Snapshot(path, state, _parse(data)["entries"])
    except _Invalid as exc:
        warn_once(path, state + str(exc) if state == "unread" else state, str(exc))
        return Snapshot(path, state)
    except Exception as exc:  # reading a store must never take the program down
        warn_once(path, state, f"unreadable ({type(exc).__name__}: {str(exc)[:200]})")
        return Snapshot(path, state)


# --- writing -----------------------------------------------------------------------------


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``fcntl`` lock on ``<store>.lock``.

    A side file, because ``os.replace`` swaps the store's inode: a lock on the store
    itself would be a lock on a file that is no longer the store. The kernel drops the
    lock when a writer dies, so a crash cannot wedge the store.
    """
    with exclusive_lock(path.with_name(path.name + ".lock")):
        yield


def _atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new one, whole."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with _suppress_oserror():
            os.unlink(tmp)
        raise
    # The rename itself must reach the disk too, or a crash may bring the old file back.
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextmanager
def _suppress_oserror() -> Iterator[None]:
    try:
        yield
    except OSError:
        pass


def dump(entries: Iterable[StoreEntry]) -> str:
    """The file text for ``entries``, sorted so that equal stores are equal bytes."""
    ordered = sorted(entries, key=lambda e: (e.key, e.bucket))
    version = version_for(e.bucket.kind for e in ordered)
    doc = {"format": FORMAT, "version": version, "entries": [e.to_dict() for e in ordered]}
    return json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n"


class Store:
    """One store file: cached reads, locked and merged atomic writes.

    Args:
        path: the JSON file; its directory is created on the first write.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        self.path = Path(path).expanduser()
        self._cached: tuple[tuple[int, int, int], Snapshot] | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    def snapshot(self) -> Snapshot:
        """The file's current content; re-read only when its size, time or inode changed."""
        try:
            info = os.stat(self.path)
            stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
        except OSError:
            stamp = (-1, -1, -1)
        with self._lock:
            if self._cached is not None and self._cached[0] == stamp:
                return self._cached[1]
        snap = read_snapshot(self.path)
        with self._lock:
            self._cached = (stamp, snap)
        return snap

    def merge(self, entries: Iterable[StoreEntry], *, policy: Literal["faster", "replace"] = "faster") -> int:
        """Add ``entries`` to the file under the lock, atomically.

        Args:
            entries: new entries.
            policy: for a key already in the file, ``faster`` keeps the faster entry (the
                newer on a tie); ``replace`` keeps the new one.

        Returns:
            The number of entries in the file afterwards.

        Raises:
            ValueError: bad ``policy``, or the file was written in another format version
                (refused rather than overwritten with an older format).
        """
        if policy not in ("faster", "replace"):
            raise ValueError(f"policy must be 'faster' or 'replace', got {policy!r}")
        new = list(entries)
        for number, entry in enumerate(new):
            if not isinstance(entry, StoreEntry):
                raise TypeError(f"entries[{number}] must be a StoreEntry, got {type(entry).__name__}")
            _check_time(entry, number)
        new = [completed(entry) for entry in new]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(self.path):
            merged: dict[tuple[Key, Bucket], StoreEntry] = {}
            for entry in self._usable_for_write():
                k = (entry.key, entry.bucket)
                merged[k] = entry if k not in merged else better(entry, merged[k])
            for entry in new:
                k = (entry.key, entry.bucket)
                old = merged.get(k)
                merged[k] = entry if old is None or policy == "replace" else better(entry, old)
            _atomic_write(self.path, dump(merged.values()))
        return len(merged)

    def _usable_for_write(self) -> list[StoreEntry]:
        """The file's usable entries, under the lock. Unusable ones (failing the schema, a
        config outside this kernel's space) cannot be written back: they are kept in a side
        file, and the warning says how many were dropped from the store and where they are."""
        snapshot = self._read_for_write()
        usable, dropped, problems = [], [], []
        for number, raw in enumerate(snapshot.raw):
            entries, found = _validate_entries([(number, raw)])
            usable += entries
            if found:
                dropped.append(raw)
                problems += found
        if dropped:
            aside = self.path.with_name(f"{self.path.name}.dropped.{time.time_ns()}")
            _atomic_write(aside, json.dumps(dropped, indent=1, sort_keys=True, default=str) + "\n")
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            warn_once(self.path, f"drop:{aside.name}", f"{len(dropped)} unusable entries dropped from the file by "
                      f"this write (kept in {aside.name}): {problems[0]}{more}")
        return usable

    def _read_for_write(self) -> Snapshot:
        """The current file under the lock; a corrupt file is moved aside, not lost."""
        try:
            data = _read_bytes(self.path)
            if data is None:
                return Snapshot(self.path, "missing")
            doc = _parse(data)
        except _Invalid as exc:
            if "stale format version" in str(exc):
                raise ValueError(f"store {self.path}: {exc}; refusing to overwrite it") from None
            aside = self.path.with_name(f"{self.path.name}.corrupt.{time.time_ns()}")
            with _suppress_oserror():
                os.replace(self.path, aside)
            warn_once(self.path, f"write:{aside.name}", f"{exc}; moved aside to {aside.name} and starting afresh")
            return Snapshot(self.path, "corrupt")
        return Snapshot(self.path, hashlib.sha256(data).hexdigest()[:16], doc["entries"])
