"""A bounded decision cache that costs one dict probe on a hit.

Two generations instead of an LRU list: inserts go to the young dict; when it is full it
becomes the old one and the previous old generation is dropped. A hit in the old generation is
promoted. Races between threads can at worst lose an insert, never return a wrong decision,
because a cache belongs to exactly one immutable ACL snapshot.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class GenerationalCache(Generic[V]):
    __slots__ = ("_limit", "_old", "young")

    def __init__(self, size: int) -> None:
        self._limit = size // 2 if size > 1 else size
        self.young: dict[Hashable, V] = {}
        self._old: dict[Hashable, V] = {}

    def get(self, key: Hashable) -> V | None:
        value = self.young.get(key)
        if value is None:
            value = self._old.get(key)
            if value is not None:
                self.put(key, value)
        return value

    def put(self, key: Hashable, value: V) -> None:
        if self._limit <= 0:
            return
        young = self.young
        if len(young) >= self._limit:
            self._old = young
            self.young = young = {}
        young[key] = value

    def __len__(self) -> int:
        return len(self.young) + len(self._old)
