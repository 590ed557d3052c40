"""Manage ACLs on an authorizing Apache Kafka cluster through the Admin API (confluent-kafka).

    acls = kafka_authz.acls                     # KafkaAcls on the INTERNAL (super user) listener
    acls.add("User:bob", "READ", "TOPIC", "orders")
    acls.add("bob", "READ", "GROUP", "g-", pattern="PREFIXED")
    acls.remove("User:bob", "READ", "TOPIC", "orders")
    acls.list()                                  # [AclBinding, ...]
    acls.clear()                                 # delete every ACL

`add`, `remove` and `clear` return once `DescribeAcls` on the broker shows the change: the
broker answers DescribeAcls from the same StandardAuthorizer that authorizes client requests,
so the change is then in force there. On multi-node clusters one Admin client per broker asks
in turn, but librdkafka may route DescribeAcls to any broker: allow for a short lag there.

Never point this at tansu: its CreateAcls answer aborts librdkafka (docs/tansu.md).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

if TYPE_CHECKING:
    from tests.kafka.cluster import KafkaCluster


def _enum(cls: type, value: Any):
    if value is None:
        return cls.ANY
    if isinstance(value, cls):
        return value
    return cls[str(value).upper().replace("-", "_")]


def principal(name: str) -> str:
    """'bob' -> 'User:bob'; 'User:bob' and '*'-style principals pass through."""
    return name if ":" in name else f"User:{name}"


class KafkaAcls:
    """Add, remove and list ACLs on one cluster, waiting until each change is in force."""

    def __init__(self, cluster: KafkaCluster, timeout: float = 30.0) -> None:
        self.cluster = cluster
        self.timeout = timeout
        self._admins = [
            AdminClient({"bootstrap.servers": cluster.internal.address(i)})
            for i in cluster.node_ids
        ]
        self.admin = self._admins[0]

    def close(self) -> None:
        """Drop the Admin clients (KafkaCluster.stop() calls this: they would keep
        reconnecting to a stopped cluster, and logging about it, for as long as a test
        report holds on to this object)."""
        self._admins = []
        self.admin = None  # type: ignore[assignment]

    # ----------------------------------------------------------------- queries

    @staticmethod
    def binding(
        principal_: str,
        operation: str | AclOperation,
        resource_type: str | ResourceType = "TOPIC",
        name: str = "*",
        *,
        pattern: str | ResourcePatternType = "LITERAL",
        permission: str | AclPermissionType = "ALLOW",
        host: str = "*",
    ) -> AclBinding:
        return AclBinding(
            _enum(ResourceType, resource_type),
            name,
            _enum(ResourcePatternType, pattern),
            principal(principal_),
            host,
            _enum(AclOperation, operation),
            _enum(AclPermissionType, permission),
        )

    @staticmethod
    def filter(
        principal_: str | None = None,
        operation: str | AclOperation | None = None,
        resource_type: str | ResourceType | None = None,
        name: str | None = None,
        *,
        pattern: str | ResourcePatternType | None = None,
        permission: str | AclPermissionType | None = None,
        host: str | None = None,
    ) -> AclBindingFilter:
        """A filter; None matches anything."""
        return AclBindingFilter(
            _enum(ResourceType, resource_type),
            name,
            _enum(ResourcePatternType, pattern),
            principal(principal_) if principal_ else None,
            host,
            _enum(AclOperation, operation),
            _enum(AclPermissionType, permission),
        )

    def list(self, flt: AclBindingFilter | None = None, admin: AdminClient | None = None):
        """Every ACL matching `flt` (default: all), as confluent-kafka AclBinding objects."""
        flt = flt or self.filter()
        return (admin or self.admin).describe_acls(flt, request_timeout=self.timeout).result()

    # ----------------------------------------------------------------- changes

    def add(
        self,
        principal_: str,
        operation: str | AclOperation,
        resource_type="TOPIC",
        name: str = "*",
        *,
        pattern="LITERAL",
        permission="ALLOW",
        host: str = "*",
        wait: bool = True,
    ) -> AclBinding:
        """Create one ACL (e.g. add("bob", "READ", "TOPIC", "orders")); returns the binding."""
        b = self.binding(
            principal_,
            operation,
            resource_type,
            name,
            pattern=pattern,
            permission=permission,
            host=host,
        )
        self.add_bindings([b], wait=wait)
        return b

    def add_bindings(self, bindings: list[AclBinding], wait: bool = True) -> None:
        if not bindings:
            return
        for fut in self.admin.create_acls(bindings, request_timeout=self.timeout).values():
            fut.result()
        if wait:
            self._wait(lambda have: all(b in have for b in bindings), f"ACLs {bindings} visible")

    def remove(
        self,
        principal_: str | None = None,
        operation=None,
        resource_type=None,
        name: str | None = None,
        *,
        pattern=None,
        permission=None,
        host=None,
        wait: bool = True,
    ) -> list[AclBinding]:
        """Delete every ACL matching the arguments (None matches anything); returns them."""
        flt = self.filter(
            principal_,
            operation,
            resource_type,
            name,
            pattern=pattern,
            permission=permission,
            host=host,
        )
        return self.remove_matching([flt], wait=wait)

    def remove_matching(self, filters: list[AclBindingFilter], wait: bool = True):
        deleted: list[AclBinding] = []
        for fut in self.admin.delete_acls(filters, request_timeout=self.timeout).values():
            deleted.extend(fut.result())
        if wait and deleted:
            self._wait(lambda have: not any(b in have for b in deleted), f"ACLs {deleted} gone")
        return deleted

    def clear(self) -> list[AclBinding]:
        """Delete all ACLs."""
        return self.remove_matching([self.filter()])

    def wait_for(self, bindings: list[AclBinding], present: bool = True) -> None:
        """Wait until `bindings` are all in force (present=True) or all gone (False), e.g.
        after changing ACLs with kafka-acls (tests/kafka/tools.py) instead of this helper."""
        if present:
            self._wait(lambda have: all(b in have for b in bindings), f"ACLs {bindings} visible")
        else:
            self._wait(lambda have: not any(b in have for b in bindings), f"ACLs {bindings} gone")

    def _wait(self, ok, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        for admin in self._admins:
            while not ok(set(self.list(admin=admin))):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"timed out waiting for {what}")
                time.sleep(0.02)
