"""The JSON schema of the tuned-config store file (format version 3; reads 1, 2 and 3).

Strict on structure and types, bounded in size (a hostile file must not make validation
slow), loose on the config's keys: a config is checked against the kernel's declared
space only for entries of the current kernel, so that a file written for another kernel
version reads as stale, not as corrupt.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flashtune.objectives.types import DTYPES
from flashtune.runtime.storage.buckets import KINDS, PACKED_KINDS

FORMAT = "flashtune.configs"
#: The newest version. Version 2 added the bucket's ``kind`` (``prefill``/``decode``) and
#: ``batch_kv_heads`` (batch x KV heads, a power of two); version 3 the kinds ``varlen`` and
#: ``paged`` and the bucket's ``page_size`` (paged buckets only).
VERSION = 3
#: Versions read. Compatibility rule: a bucket without ``kind`` is a prefill bucket, and
#: one without ``batch_kv_heads`` serves any batch x heads (an exact hit for its bucket
#: when no entry of the very batch x heads exists); one without ``page_size`` has no pages.
#: Every version-1 entry is therefore still served, to prefill calls only, and every
#: version-2 entry as it was.
READABLE_VERSIONS = (1, 2, 3)


def version_for(kinds: Iterable[str]) -> int:
    """The version a file of buckets of ``kinds`` is written in: the oldest that holds them
    (2 while it holds only prefill and decode buckets, so that a flashtune of format 2 still
    reads it; 3 once it holds a varlen or paged one)."""
    return VERSION if any(kind in PACKED_KINDS for kind in kinds) else 2

#: Entries one file may hold; a store of every bucket of a few GPUs holds thousands.
MAX_ENTRIES = 100_000

_HEX = {"type": "string", "pattern": "^[0-9a-f]{8,64}$"}
_TEXT = {"type": "string", "maxLength": 256}
_POSITIVE_INT = {"type": "integer", "minimum": 1, "maximum": 2**31}
_TIME = {"type": ["number", "null"], "minimum": 0}
#: A served time: 0 ms would stay the best forever (a 0 in a table became one).
_MEDIAN = {"type": ["number", "null"], "exclusiveMinimum": 0}

BUCKET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["dtype", "causal", "head_dim", "gqa", "q_len", "kv_len"],
    "properties": {
        "dtype": {"enum": list(DTYPES)},
        "causal": {"type": "boolean"},
        "head_dim": _POSITIVE_INT,
        "gqa": _POSITIVE_INT,
        "q_len": _POSITIVE_INT,
        "kv_len": _POSITIVE_INT,
        "kind": {"enum": list(KINDS)},
        "batch_kv_heads": _POSITIVE_INT,
        "page_size": _POSITIVE_INT,
    },
}

ENTRY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["fingerprint", "kernel_hash", "triton", "bucket", "config"],
    "properties": {
        "fingerprint": _HEX,
        "hardware": _TEXT,
        "kernel_hash": _HEX,
        "triton": {"type": "string", "minLength": 1, "maxLength": 64},
        "bucket": BUCKET_SCHEMA,
        "config": {
            "type": "object",
            "maxProperties": 32,
            # Each keyword applies to its own type only: int within 32 bits, short str, bool.
            "additionalProperties": {
                "type": ["integer", "boolean", "string"],
                "minimum": -(2**31),
                "maximum": 2**31,
                "maxLength": 64,
            },
        },
        "median_ms": _MEDIAN,
        "tflops": _TIME,
        "source": _TEXT,
        "updated": _TEXT,
    },
}

#: The whole file, entries included: the format's definition.
STORE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["format", "version", "entries"],
    "properties": {
        "format": {"const": FORMAT},
        "version": {"type": "integer"},
        "entries": {"type": "array", "maxItems": MAX_ENTRIES, "items": ENTRY_SCHEMA},
    },
}

#: The file's structure only. A reader checks this for the whole file, then each entry
#: against ENTRY_SCHEMA when its bucket is first looked up (runtime.storage.store.Snapshot): a
#: process serves one GPU and a few buckets, and jsonschema costs about 0.5 ms an entry.
FILE_SCHEMA: dict[str, Any] = {
    **STORE_SCHEMA,
    "properties": {
        **STORE_SCHEMA["properties"],
        "entries": {"type": "array", "maxItems": MAX_ENTRIES, "items": {"type": "object"}},
    },
}
