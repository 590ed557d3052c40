"""An equivalence scenario on the 3-node cluster (issue 13): leaders and coordinators away
from the bootstrap broker.

Reference: Kafka's StandardAuthorizer with the ACLs (the single-node `kafka_anon_authz`, the
ANON family's reference). Candidate: aclgate with the same ACLs in front of the session's
3-node cluster (`kafka_cluster3`), where the observer puts every partition's leader on a node
other than the bootstrap node and picks a group and a transactional id whose coordinators are
elsewhere too, so every produce, fetch, commit and transaction step goes through the proxy's
per-broker listeners, never the bootstrap's. What the client sees must not depend on where
the broker is: outcomes hold no node ids, and the picked names stay out of them.
"""

from __future__ import annotations

from tests.equivalence.harness import Run, Scenario, allow

ANON = "User:ANONYMOUS"
GROUPS = [f"grp-{i}" for i in range(1, 13)]
TXNS = [f"tx-{i}" for i in range(1, 13)]


def routed(r: Run) -> None:
    r.observer.create_topic("routed", partitions=2, records=["r0"], off_bootstrap=True)
    r.observer.create_topic("locked", records=["l0"], off_bootstrap=True)
    group = r.observer.off_bootstrap(0, GROUPS)
    group848 = r.observer.off_bootstrap(0, [f"{g}-848" for g in GROUPS])
    denied_group = r.observer.off_bootstrap(0, [f"no-{g}" for g in GROUPS])
    txn = r.observer.off_bootstrap(1, TXNS)
    r.step("produce routed p0", ANON, lambda c: c.produce("routed", ["a", "b"]))
    r.step("produce routed p1", ANON, lambda c: c.produce("routed", ["c"], partition=1))
    r.step("produce locked (denied)", ANON, lambda c: c.produce("locked", ["x"]))
    r.step("idempotent produce routed p1", ANON,
           lambda c: c.produce("routed", ["i"], partition=1, idempotent=True))  # fmt: skip
    r.step("consume routed in the group, commit", ANON, lambda c: c.consume("routed", group, 5))
    r.step("consume routed in the denied group", ANON,
           lambda c: c.consume("routed", denied_group, 1))  # fmt: skip
    r.step("consume routed, KIP-848, in another group", ANON,
           lambda c: c.consume("routed", group848, 5, **{"group.protocol": "consumer"}))  # fmt: skip
    r.step("consume locked in the group (denied)", ANON, lambda c: c.consume("locked", group, 1))
    r.step("committed offsets of the group", ANON, lambda c: c.group_offsets(group))
    r.step("list offsets routed, locked", ANON, lambda c: c.list_offsets(["routed", "locked"]))
    # (before the transaction: its commit marker reaches the partition asynchronously)
    r.step("transaction to routed with the group's offsets", ANON,
           lambda c: c.transaction(txn, "routed", ["t0"], offsets_group=group))  # fmt: skip
    r.step("delete records routed@1, locked@1", ANON,
           lambda c: c.delete_records({"routed": 1, "locked": 1}))  # fmt: skip
    r.step("describe topics", ANON, lambda c: c.describe_topics(["routed", "locked"]))
    for p in (0, 1):
        r.observe(f"records in routed p{p}", lambda o, p=p: o.records("routed", p))
    r.observe("records in locked", lambda o: o.records("locked"))


CLUSTER3_SCENARIOS: list[Scenario] = [
    Scenario(
        "cluster3-routed",
        "3 nodes: leaders, group and transaction coordinators away from the bootstrap broker",
        routed,
        acls=(
            allow(ANON, "WRITE", "TOPIC", "routed"),
            allow(ANON, "READ", "TOPIC", "routed"),
            allow(ANON, "DELETE", "TOPIC", "routed"),
            allow(ANON, "IDEMPOTENT_WRITE", "CLUSTER", "kafka-cluster"),
            allow(ANON, "DESCRIBE", "TOPIC", "locked"),
            allow(ANON, "READ", "GROUP", "grp-", pattern="PREFIXED"),
            allow(ANON, "WRITE", "TRANSACTIONAL_ID", "tx-", pattern="PREFIXED"),
        ),
    ),
]
