"""One small registry type for headprune's extension points (export formats, scorers, architecture adapters,
built-in tasks, objectives): a name registered twice is an error at import, never a silent replacement, and an
unknown name's error lists what is available."""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Registry(Generic[K, V]):
    """Names (``K``) to the things registered under them (``V``), in registration order.

    Args:
        what: what a name names, for messages ("export format", "model type").
    """

    def __init__(self, what: str, entries: dict[K, V] | None = None) -> None:
        self.what = what
        self._entries: dict[K, V] = {}
        for key, value in (entries or {}).items():
            self.add(key, value)

    def add(self, key: K, value: V) -> V:
        """Register ``value`` as ``key``; returns ``value``.

        Raises:
            ValueError: ``key`` is registered already (two extensions claiming one name).
        """
        if key in self._entries:
            raise ValueError(f"{self.what} {key!r} is registered twice: {self._entries[key]!r} and {value!r}")
        self._entries[key] = value
        return value

    def get(self, key: K, default: V | None = None) -> V | None:
        return self._entries.get(key, default)

    def __getitem__(self, key: K) -> V:
        if key not in self._entries:
            raise KeyError(f"unknown {self.what} {key!r}; available: {', '.join(map(str, self._entries))}")
        return self._entries[key]

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[K]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def values(self) -> list[V]:
        return list(self._entries.values())

    def items(self) -> list[tuple[K, V]]:
        return list(self._entries.items())

    def __repr__(self) -> str:
        return f"Registry({self.what!r}: {', '.join(map(str, self._entries))})"


__all__ = ["Registry"]
