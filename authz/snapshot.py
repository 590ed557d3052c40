"""One immutable version of the ACL set: its index, its decision cache, lazily derived views.

The Authorizer publishes a new Snapshot with one reference assignment, so a reader that took a
snapshot sees a whole batch or none of it (the KIP-801 ordering problem), and a cached decision
can never outlive the ACLs it was computed from: the cache lives and dies with its snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable

from aclgate.authz import byresourcetype
from aclgate.authz.cache import GenerationalCache
from aclgate.authz.decision import Decision
from aclgate.authz.index import PatternKey, TypeIndex, filter_candidates, group_by_type
from aclgate.authz.model import AclBinding, AclBindingFilter, ResourceType, listing_order, scan


class Snapshot:
    __slots__ = (
        "_by_type_groups",
        "_sorted",
        "cache",
        "cidr",
        "count",
        "group_principals",
        "types",
        "version",
    )

    def __init__(
        self,
        types: dict[ResourceType, TypeIndex],
        version: int,
        cache_size: int,
        cidr: bool = False,
    ) -> None:
        self.types = types
        #: a host with `/` is a network (KIP-1276, opt-in; authz/cidr.py), in every type index
        self.cidr = cidr
        self.version = version
        self.count = sum(t.count for t in types.values())
        #: the group principals (`Group:NAME`, any type but User) some ACL names: what a
        #: session's groups are matched against (a session in 50 groups, 2 of them with ACLs,
        #: looks up 2 more principals per pattern, not 50)
        self.group_principals: frozenset[str] = frozenset().union(
            *(t.group_counts for t in types.values())
        )
        self.cache: GenerationalCache[Decision] = GenerationalCache(cache_size)
        self._sorted: list[AclBinding] | None = None
        self._by_type_groups: dict[ResourceType, byresourcetype.TypeGroups] = {}

    @classmethod
    def build(
        cls, bindings: Iterable[AclBinding], version: int, cache_size: int, cidr: bool = False
    ) -> Snapshot:
        """From distinct bindings."""
        types = {
            rtype: TypeIndex.build(patterns, cidr)
            for rtype, patterns in group_by_type(bindings).items()
        }
        return cls(types, version, cache_size, cidr)

    def apply(
        self,
        remove: Iterable[AclBinding],
        add: Iterable[AclBinding],
        version: int,
        cache_size: int,
    ) -> Snapshot | None:
        """The snapshot after removing then adding; None when nothing changes. Only the
        resource patterns the batch touches are rebuilt."""
        before: dict[tuple[ResourceType, PatternKey], set[AclBinding]] = {}
        after: dict[tuple[ResourceType, PatternKey], set[AclBinding]] = {}

        def current(b: AclBinding) -> set[AclBinding]:
            key = (b.resource_type, (b.resource_name, b.pattern_type))
            found = after.get(key)
            if found is None:
                index = self.types.get(b.resource_type)
                found = index.pattern_bindings(key[1]) if index else set()
                before[key] = set(found)
                after[key] = found
            return found

        for b in remove:
            current(b).discard(b)
        for b in add:
            current(b).add(b)

        changed: dict[ResourceType, dict[PatternKey, set[AclBinding]]] = {}
        for (rtype, pattern), bindings in after.items():
            if bindings != before[(rtype, pattern)]:
                changed.setdefault(rtype, {})[pattern] = bindings
        if not changed:
            return None
        types = dict(self.types)
        for rtype, patterns in changed.items():
            index = self.types.get(rtype)
            index = index.apply(patterns) if index else TypeIndex.build(patterns, self.cidr)
            if index.count:
                types[rtype] = index
            else:
                types.pop(rtype, None)
        return Snapshot(types, version, cache_size, self.cidr)

    def cidr_hosts(self, rtype: ResourceType, host: str) -> tuple[str, ...]:
        """The CIDR hosts of the type's ACLs that contain the client address `host`."""
        index = self.types.get(rtype)
        return index.cidr_hosts(host) if index is not None else ()

    def binding_set(self) -> set[AclBinding]:
        return {b for index in self.types.values() for b in index.bindings()}

    def bindings(self) -> list[AclBinding]:
        """Every ACL in Kafka's listing order (computed once per snapshot)."""
        if self._sorted is None:
            self._sorted = listing_order(
                b for index in self.types.values() for b in index.bindings()
            )
        return self._sorted

    def matching(self, f: AclBindingFilter) -> list[AclBinding]:
        """What `scan(self.bindings())(f)` returns, the ACLs `f` matches in listing order, but
        by index lookups when `f` names a resource: the work is the candidates of the named
        pattern(s), not the ACL set (issue 20: 1,000 filters over 210,000 ACLs took 144 s of
        the event loop). A filter without a name is as wide as the set: scanned."""
        if f.resource_name is None:
            return list(self.bindings()) if f == AclBindingFilter.ANY else scan(self.bindings())(f)
        if f.resource_type == ResourceType.ANY:
            indexes = list(self.types.values())
        else:
            index = self.types.get(f.resource_type)
            indexes = [index] if index is not None else []
        return listing_order(
            b
            for index in indexes
            for group in index.filter_groups(f.resource_name, f.pattern_type)
            for b in filter_candidates(group, f.principal, f.host)
            if f.matches(b)
        )

    def type_groups(self, rtype: ResourceType) -> byresourcetype.TypeGroups:
        """The per-(principal, host, operation) view for authorizeByResourceType, built once."""
        groups = self._by_type_groups.get(rtype)
        if groups is None:
            index = self.types.get(rtype)
            groups = byresourcetype.build(index.bindings() if index else ())
            self._by_type_groups[rtype] = groups
        return groups
