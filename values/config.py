"""Config: one point of a kernel's tunable space, as immutable, hashable, JSON-ready data.

Pure Python on purpose: search strategies read configs without importing torch or triton.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

#: Tunable values: ints, flags and choices for our kernels; floats for other people's spaces
#: (a Kernel Tuner cache records float parameters such as a work-per-thread fraction).
Value = int | bool | float | str


class Config(Mapping[str, Value]):
    """A frozen mapping of tunable name to value.

    Equality and hashing follow the items, so a config measured on one path (a strategy's
    ``ask``) and read back on another (a JSON file, a prior) is the same key.
    """

    # The hash and key are kept once computed: a warm start hashes and sorts tens of
    # thousands of prior configs, and both are pure functions of the frozen items.
    __slots__ = ("_hash", "_items", "_key")

    def __init__(self, values: Mapping[str, Value] | None = None, /, **kwargs: Value) -> None:
        merged = dict(values or {}, **kwargs)
        for name, value in merged.items():
            if not isinstance(name, str):
                raise TypeError(f"config key {name!r} must be a str")
            if not isinstance(value, (int, bool, float, str)):
                raise TypeError(
                    f"config value for {name!r} must be int, bool, float or str, got {type(value).__name__}"
                )
            if isinstance(value, float) and not math.isfinite(value):
                # JSON cannot carry it back, and nan != nan would break the config as a key.
                raise ValueError(f"config value for {name!r} must be finite, got {value!r}")
        self._items: tuple[tuple[str, Value], ...] = tuple(sorted(merged.items()))
        self._hash: int | None = None
        self._key: str | None = None

    def __getitem__(self, key: str) -> Value:
        for name, value in self._items:
            if name == key:
                return value
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self._items)
        return self._hash

    def __reduce__(self) -> tuple[type[Config], tuple[dict[str, Value]]]:
        # Rebuilt from the items: a cached str hash is only valid in the process that made it.
        return (Config, (dict(self._items),))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Config):
            return self._items == other._items
        if isinstance(other, Mapping):
            return dict(self._items) == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._items)
        return f"Config({inner})"

    def replace(self, **changes: Value) -> Config:
        """A copy with some values changed."""
        return Config(dict(self._items), **changes)

    def to_dict(self) -> dict[str, Value]:
        return dict(self._items)

    def key(self) -> str:
        """A stable string key (sorted JSON), for dictionaries and storage."""
        if self._key is None:
            self._key = json.dumps(dict(self._items), sort_keys=True, separators=(",", ":"))
        return self._key

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Config:
        return cls(dict(data))
