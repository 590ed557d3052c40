"""A synthetic Kafka fleet for `aclgate audit-sample`: teams, their services, their policy.

Several teams own prefixed topic families (`payments.*`, `orders.*`, ...) written by a
producer service and read by consumers with their own groups; analytics reads everything
but the card data; one team runs transactional producers; an admin is a super user; a
legacy batch job, anonymous clients and a new search indexer without ACLs are denied; some
ACLs are never used. Decisions come from the real `authz.Authorizer`, so the sample is what
the proxy would have written for this policy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from aclgate.pipeline.schema import acl_entry as _acl

SUPER_USERS = ("User:admin",)

TEAMS: dict[str, tuple[str, ...]] = {
    "payments": ("authorizations", "captures", "refunds", "settlements", "cards-raw"),
    "orders": ("created", "updated", "cancelled", "fulfilled"),
    "inventory": ("stock-levels", "reservations", "adjustments"),
    "shipping": ("labels", "tracking", "returns"),
}
NEW_TEAM = ("search", ("documents", "queries"))
PCI_TOPIC = "payments.cards-raw"

# (api, api_key, api_version) per kind of request.
APIS: dict[str, tuple[str, int, int]] = {
    "produce": ("Produce", 0, 9),
    "fetch": ("Fetch", 1, 13),
    "list_offsets": ("ListOffsets", 2, 7),
    "metadata": ("Metadata", 3, 12),
    "offset_commit": ("OffsetCommit", 8, 8),
    "offset_fetch": ("OffsetFetch", 9, 8),
    "find_coordinator": ("FindCoordinator", 10, 4),
    "join_group": ("JoinGroup", 11, 9),
    "heartbeat": ("Heartbeat", 12, 4),
    "create_topics": ("CreateTopics", 19, 7),
    "init_producer_id": ("InitProducerId", 22, 4),
    "add_partitions_to_txn": ("AddPartitionsToTxn", 24, 3),
    "end_txn": ("EndTxn", 26, 3),
    "describe_acls": ("DescribeAcls", 29, 3),
    "describe_configs": ("DescribeConfigs", 32, 4),
    "incremental_alter_configs": ("IncrementalAlterConfigs", 44, 1),
}


@dataclass(frozen=True)
class Activity:
    """One kind of request a client keeps sending, and how often relative to the others."""

    principal: str
    host: str
    client_id: str
    api: str
    operation: str
    resource_type: str
    resource_name: str
    weight: float
    listener: str = "SASL_SSL"


def _hosts(subnet: int, n: int) -> list[str]:
    return [f"10.{subnet}.{1 + i // 4}.{10 + i}" for i in range(n)]


def _per_topic(a: Activity, topics: list[str], also: tuple[tuple[str, str, float], ...]) -> list:
    """`a` on every topic, plus each (api, operation, weight divisor) request that goes with it."""
    out = []
    for topic in topics:
        out.append(replace(a, resource_name=topic))
        for api, op, divisor in also:
            out.append(
                replace(a, api=api, operation=op, resource_name=topic, weight=a.weight / divisor)
            )
    return out


CONSUMER_TOPIC_REQUESTS = (
    ("list_offsets", "DESCRIBE", 40),
    ("metadata", "DESCRIBE", 20),
    ("offset_commit", "READ", 10),
)
CONSUMER_GROUP_REQUESTS = (
    ("heartbeat", "READ", 5),
    ("offset_commit", "READ", 10),
    ("join_group", "READ", 200),
    ("offset_fetch", "DESCRIBE", 200),
    ("find_coordinator", "DESCRIBE", 100),
)


def _consumer(
    principal: str, hosts: list[str], client: str, topics: list[str], group: str, weight: float
) -> list[Activity]:
    out = []
    for host in hosts:
        a = Activity(principal, host, client, "fetch", "READ", "TOPIC", "", weight)
        out += _per_topic(a, topics, CONSUMER_TOPIC_REQUESTS)
        g = replace(a, resource_type="GROUP", resource_name=group)
        out += [
            replace(g, api=api, operation=op, weight=weight / divisor)
            for api, op, divisor in CONSUMER_GROUP_REQUESTS
        ]
    return out


def _producer(
    principal: str, hosts: list[str], client: str, topics: list[str], weight: float
) -> list[Activity]:
    out = []
    for host in hosts:
        a = Activity(principal, host, client, "produce", "WRITE", "TOPIC", "", weight)
        out += _per_topic(a, topics, (("metadata", "DESCRIBE", 20),))
    return out


def build_world() -> tuple[list[dict[str, str]], list[Activity]]:
    """The policy in force (ACL-file entries) and every activity of the fleet."""
    acls: list[dict[str, str]] = []
    acts: list[Activity] = []
    all_topics = []
    for i, (team, names) in enumerate(TEAMS.items()):
        topics = [f"{team}.{n}" for n in names]
        all_topics += topics
        svc, reader = f"User:{team}-svc", f"User:{team}-reader"
        acls += [
            _acl("TOPIC", f"{team}.", svc, "WRITE", "PREFIXED"),
            _acl("TOPIC", f"{team}.", reader, "READ", "PREFIXED"),
            _acl("GROUP", f"{team}-reader", reader, "READ"),
        ]
        readable = [t for t in topics if t != PCI_TOPIC]
        acts += _producer(svc, _hosts(10 + i, 3), f"{team}-svc-producer", topics, 6.0)
        acts += _consumer(
            reader, _hosts(20 + i, 2), f"{team}-reader", readable, f"{team}-reader", 8.0
        )
    # Cross-team consumers with literal ACLs per topic.
    fraud = "User:fraud-detector"
    fraud_topics = ["payments.authorizations", "payments.captures", "orders.created"]
    acls += [_acl("TOPIC", t, fraud, "READ") for t in fraud_topics]
    acls += [_acl("GROUP", "fraud-detector", fraud, "READ")]
    acts += _consumer(fraud, _hosts(40, 2), "fraud-detector", fraud_topics, "fraud-detector", 5.0)
    # Analytics reads every topic through a LITERAL * ACL, except card data (DENY wins).
    analytics = "User:analytics"
    acls += [
        _acl("TOPIC", "*", analytics, "READ"),
        _acl("GROUP", "analytics-", analytics, "READ", "PREFIXED"),
        _acl("TOPIC", PCI_TOPIC, "User:*", "READ", permission_type="DENY"),
    ]
    acts += _consumer(
        analytics, _hosts(50, 2), "spark-analytics", all_topics, "analytics-hourly", 1.5
    )
    # Transactional producer of the orders team.
    tx = "User:orders-svc"
    acls += [_acl("TRANSACTIONAL_ID", "orders-tx-", tx, "WRITE", "PREFIXED")]
    for n in range(3):
        base = Activity(
            tx,
            _hosts(11, 3)[n],
            "orders-svc-producer",
            "init_producer_id",
            "WRITE",
            "TRANSACTIONAL_ID",
            f"orders-tx-{n}",
            0.05,
        )
        acts += [
            base,
            replace(base, api="add_partitions_to_txn", weight=1.0),
            replace(base, api="end_txn", weight=1.0),
        ]
    # The admin (a super user) manages the cluster.
    admin = Activity(
        "User:admin",
        "10.0.0.5",
        "adminclient-1",
        "describe_acls",
        "DESCRIBE",
        "CLUSTER",
        "kafka-cluster",
        0.05,
    )
    acts += [
        admin,
        replace(admin, api="create_topics", operation="CREATE", weight=0.01),
        replace(
            admin,
            api="incremental_alter_configs",
            operation="ALTER_CONFIGS",
            resource_type="TOPIC",
            resource_name="orders.created",
            weight=0.01,
        ),
    ]
    # Denied traffic: a legacy job, anonymous probes, a new team whose ACLs are missing.
    legacy = Activity(
        "User:legacy-batch",
        "10.99.0.7",
        "legacy-batch",
        "fetch",
        "READ",
        "TOPIC",
        "payments.settlements",
        4.0,
    )
    acts += [legacy, replace(legacy, api="metadata", operation="DESCRIBE", weight=1.0)]
    anon = Activity(
        "User:ANONYMOUS",
        "192.168.7.21",
        "kcat",
        "metadata",
        "DESCRIBE",
        "TOPIC",
        "orders.created",
        1.5,
        listener="PLAINTEXT",
    )
    acts += [anon, replace(anon, host="192.168.7.22", resource_name="payments.refunds")]
    team, names = NEW_TEAM
    acts += _consumer(
        "User:search-indexer",
        _hosts(60, 2),
        "search-indexer",
        [f"{team}.{n}" for n in names],
        "search-indexer",
        1.5,
    )
    # Never used: a retired reporting service and a DELETE right nobody exercises.
    acls += [
        _acl("TOPIC", "reports.", "User:old-reporting", "READ", "PREFIXED"),
        _acl("GROUP", "old-reporting", "User:old-reporting", "READ"),
        _acl("TOPIC", "inventory.", "User:inventory-svc", "DELETE", "PREFIXED"),
    ]
    acts = [replace(a, api=APIS[a.api][0]) for a in acts]
    return acls, acts


def candidate_policy(acls: list[dict[str, str]]) -> list[dict[str, str]]:
    """A tightened policy for what-if demos: analytics loses the `*` READ in favour of three
    team prefixes (shipping consumers break), the search indexer gets its ACLs (newly allowed),
    and the unused ACLs are removed."""

    def keep(a: dict[str, str]) -> bool:
        if a["principal"] == "User:old-reporting":
            return False
        if a["principal"] == "User:inventory-svc" and a["operation"] == "DELETE":
            return False
        return not (a["principal"] == "User:analytics" and a["resource_name"] == "*")

    out = [a for a in acls if keep(a)]
    for team in ("payments", "orders", "inventory"):
        out.append(_acl("TOPIC", f"{team}.", "User:analytics", "READ", "PREFIXED"))
    out += [
        _acl("TOPIC", "search.", "User:search-indexer", "READ", "PREFIXED"),
        _acl("GROUP", "search-indexer", "User:search-indexer", "READ"),
    ]
    return out


def api_fields(api: str) -> tuple[int, int]:
    for name, key, version in APIS.values():
        if name == api:
            return key, version
    raise KeyError(api)


def decide_all(acls: list[dict[str, str]], acts: list[Activity]) -> list[tuple[str, str, Any]]:
    """(decision, rule, acl dict | None) of each activity under the policy, by authz."""
    from aclgate.authz.authorizer import Authorizer
    from aclgate.authz.model import AclBinding, AclOperation, ResourceType

    authorizer = Authorizer(super_users=SUPER_USERS)
    authorizer.load([AclBinding.from_dict(a) for a in acls])
    out = []
    for a in acts:
        d = authorizer.authorize(
            a.principal,
            a.host,
            AclOperation[a.operation],
            ResourceType[a.resource_type],
            a.resource_name,
        )
        out.append(
            ("ALLOWED" if d.allowed else "DENIED", d.rule, d.acl.to_dict() if d.acl else None)
        )
    return out
