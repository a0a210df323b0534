"""Config: one point of a kernel's tunable space, as immutable, hashable, JSON-ready data.

Pure Python on purpose: search strategies read configs without importing torch or triton.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

Value = int | bool | str


class Config(Mapping[str, Value]):
    """A frozen mapping of tunable name to value.

    Equality and hashing follow the items, so a config measured on one path (a strategy's
    ``ask``) and read back on another (a JSON file, a prior) is the same key.
    """

    __slots__ = ("_items",)

    def __init__(self, values: Mapping[str, Value] | None = None, /, **kwargs: Value) -> None:
        merged = dict(values or {}, **kwargs)
        for name, value in merged.items():
            if not isinstance(name, str):
                raise TypeError(f"config key {name!r} must be a str")
            if not isinstance(value, (int, bool, str)):
                raise TypeError(
                    f"config value for {name!r} must be int, bool or str, got {type(value).__name__}"
                )
        self._items: tuple[tuple[str, Value], ...] = tuple(sorted(merged.items()))

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
        return hash(self._items)

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
        return json.dumps(dict(self._items), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Config:
        return cls(dict(data))
