"""One immutable version of the ACL set: its index, its decision cache, lazily derived views.

The Authorizer publishes a new Snapshot with one reference assignment, so a reader that took a
snapshot sees a whole batch or none of it (the KIP-801 ordering problem), and a cached decision
can never outlive the ACLs it was computed from: the cache lives and dies with its snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable

from authz import byresourcetype
from authz.cache import GenerationalCache
from authz.decision import Decision
from authz.index import PatternKey, TypeIndex, group_by_type
from authz.model import AclBinding, ResourceType, listing_order


class Snapshot:
    __slots__ = ("_by_type_groups", "_sorted", "cache", "count", "types", "version")

    def __init__(self, types: dict[ResourceType, TypeIndex], version: int, cache_size: int) -> None:
        self.types = types
        self.version = version
        self.count = sum(t.count for t in types.values())
        self.cache: GenerationalCache[Decision] = GenerationalCache(cache_size)
        self._sorted: list[AclBinding] | None = None
        self._by_type_groups: dict[ResourceType, byresourcetype.TypeGroups] = {}

    @classmethod
    def build(cls, bindings: Iterable[AclBinding], version: int, cache_size: int) -> Snapshot:
        types = {
            rtype: TypeIndex.build({key: frozenset(v) for key, v in patterns.items()})
            for rtype, patterns in group_by_type(bindings).items()
        }
        return cls(types, version, cache_size)

    def apply(
        self,
        remove: Iterable[AclBinding],
        add: Iterable[AclBinding],
        version: int,
        cache_size: int,
    ) -> Snapshot | None:
        """The snapshot after removing then adding; None when nothing changes."""
        changed: dict[ResourceType, dict[PatternKey, set[AclBinding]]] = {}

        def current(b: AclBinding) -> set[AclBinding]:
            patterns = changed.setdefault(b.resource_type, {})
            key = (b.resource_name, b.pattern_type)
            found = patterns.get(key)
            if found is None:
                index = self.types.get(b.resource_type)
                found = patterns[key] = set(index.members.get(key, ()) if index else ())
            return found

        for b in remove:
            current(b).discard(b)
        for b in add:
            current(b).add(b)

        types = dict(self.types)
        touched = False
        for rtype, patterns in changed.items():
            index = self.types.get(rtype)
            before = index.members if index else {}
            delta = {
                key: frozenset(v)
                for key, v in patterns.items()
                if before.get(key, frozenset()) != v
            }
            if not delta:
                continue
            touched = True
            index = (
                index.apply(delta)
                if index
                else TypeIndex.build({k: v for k, v in delta.items() if v})
            )
            if index.count:
                types[rtype] = index
            else:
                types.pop(rtype, None)
        return Snapshot(types, version, cache_size) if touched else None

    def binding_set(self) -> set[AclBinding]:
        return {b for index in self.types.values() for v in index.members.values() for b in v}

    def bindings(self) -> list[AclBinding]:
        """Every ACL in Kafka's listing order (computed once per snapshot)."""
        if self._sorted is None:
            self._sorted = listing_order(self.binding_set())
        return self._sorted

    def type_groups(self, rtype: ResourceType) -> byresourcetype.TypeGroups:
        """The per-(principal, host, operation) view for authorizeByResourceType, built once."""
        groups = self._by_type_groups.get(rtype)
        if groups is None:
            index = self.types.get(rtype)
            members = index.members.values() if index else ()
            groups = byresourcetype.build(b for v in members for b in v)
            self._by_type_groups[rtype] = groups
        return groups
