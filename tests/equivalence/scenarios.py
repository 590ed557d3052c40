"""Scenarios for the equivalence harness (tests/equivalence/harness.py).

Each scenario is a script of steps, written once with logical names, run against Apache Kafka
and against aclgate, and compared step by step. Three families:

    OPEN    no authorization at all: Kafka reached directly vs. aclgate (no ACL file,
            allow-everyone) in front of the same Kafka. Issue 3: the diff must be empty.
    ANON    principal User:ANONYMOUS (PLAINTEXT) with ACLs: Kafka with StandardAuthorizer
            (tests/equivalence/cluster.py) vs. aclgate holding the same ACLs in front of a
            Kafka without an authorizer.
    SASL    principals User:alice/bob/charlie over SASL/PLAIN on both sides (when the proxy
            serves SASL listeners).

Preloaded records and topics are made by the observer (a super user straight to Kafka) and
are not compared; `r.observe(...)` steps read ground truth and are compared.
"""

from __future__ import annotations

import uuid
from typing import Any

from tests.equivalence.harness import CLUSTER, Client, Run, Scenario, allow, deny

ANON = "User:ANONYMOUS"
ALICE, BOB, CHARLIE = "User:alice", "User:bob", "User:charlie"
EVERYONE = "User:*"


# =========================================================================== OPEN


def open_produce_consume(r: Run) -> None:
    r.observer.create_topic("orders", partitions=2)
    r.step("produce 3 records to p0", ANON, lambda c: c.produce("orders", ["a", "b", "c"]))
    r.step("produce 1 record to p1", ANON, lambda c: c.produce("orders", ["d"], partition=1))
    r.step("consume in group g, commit", ANON, lambda c: c.consume("orders", "g", 4))
    r.step("committed offsets of g", ANON, lambda c: c.group_offsets("g"))
    r.step("describe group g", ANON, lambda c: c.describe_groups(["g"]))
    r.step("list groups", ANON, lambda c: c.list_groups())
    r.step("list offsets (latest)", ANON, lambda c: c.list_offsets(["orders"]))
    r.step("list offsets (earliest)", ANON, lambda c: c.list_offsets(["orders"], "earliest"))
    r.step("metadata, all topics", ANON, lambda c: c.raw_metadata())
    r.step("metadata, named", ANON, lambda c: c.raw_metadata(["orders", "missing"]))
    r.step("AdminClient.list_topics", ANON, lambda c: c.list_topics())
    r.step("describe cluster", ANON, lambda c: c.describe_cluster())
    r.observe("records in orders p0", lambda o: o.records("orders"))


def open_consumer_protocol(r: Run) -> None:
    r.observer.create_topic("events", records=["e0", "e1"])
    r.step(
        "consume, KIP-848 consumer protocol",
        ANON,
        lambda c: c.consume("events", "g848", 2, **{"group.protocol": "consumer"}),
    )
    r.step("committed offsets of g848", ANON, lambda c: c.group_offsets("g848"))
    r.step("raw fetch from offset 0", ANON, lambda c: c.raw_fetch(["events"]))


def open_admin(r: Run) -> None:
    r.step("create topics a, b", ANON, lambda c: c.create_topics(["new-a", "new-b"], 2))
    r.step("create a again", ANON, lambda c: c.create_topics(["new-a"]))
    r.step("metadata a, b", ANON, lambda c: c.raw_metadata(["new-a", "new-b"]))
    r.step("delete b and a missing topic", ANON, lambda c: c.delete_topics(["new-b", "never"]))
    r.step("commit offsets for group old", ANON, lambda c: c.commit_offsets("old", {"new-a": 5}))
    r.step("committed offsets of old", ANON, lambda c: c.group_offsets("old"))
    r.step("describe group old", ANON, lambda c: c.describe_groups(["old"]))
    r.step("list groups", ANON, lambda c: c.list_groups())
    r.step("delete groups old, never", ANON, lambda c: c.delete_groups(["old", "never-g"]))
    r.step("list groups after delete", ANON, lambda c: c.list_groups())


def open_idempotent_transactions(r: Run) -> None:
    r.observer.create_topic("tx-topic")
    r.step("idempotent InitProducerId", ANON, lambda c: c.raw_init_producer_id())
    r.step(
        "idempotent produce", ANON, lambda c: c.produce("tx-topic", ["i0", "i1"], idempotent=True)
    )
    r.step("transaction, commit", ANON, lambda c: c.transaction("tx", "tx-topic", ["c0", "c1"]))
    r.step(
        "transaction, abort",
        ANON,
        lambda c: c.transaction("tx", "tx-topic", ["a0"], commit=False),
    )
    r.step(
        "transaction with offsets of group g",
        ANON,
        lambda c: c.transaction("tx", "tx-topic", ["c2"], offsets_group="g"),
    )
    r.step(
        "consume read_committed",
        ANON,
        lambda c: c.consume("tx-topic", "reader", 5, **{"isolation.level": "read_committed"}),
    )
    r.step("committed offsets of g", ANON, lambda c: c.group_offsets("g"))
    r.observe("records in tx-topic", lambda o: o.records("tx-topic"))


def open_raw_requests(r: Run) -> None:
    r.observer.create_topic("one")
    r.observer.create_topic("two")
    r.step(
        "produce to one and two, one request",
        ANON,
        lambda c: c.raw_produce({"one": ["x0", "x1"], "two": ["y0"]}),
    )
    r.step("fetch one and two, one request", ANON, lambda c: c.raw_fetch(["one", "two"]))
    r.step("list offsets one and two", ANON, lambda c: c.list_offsets(["one", "two"]))


def open_describe_configs(r: Run) -> None:
    r.observer.create_topic("cfg")
    r.step("describe configs of cfg", ANON, lambda c: c.describe_configs("cfg"))


def open_acl_admin(r: Run) -> None:
    """No authorizer on Kafka, no ACL store on aclgate: SECURITY_DISABLED for all three."""
    acl = ("TOPIC", "orders", "LITERAL", ALICE, "*", "READ", "ALLOW")
    any_acl = ("ANY", None, "ANY", None, None, "ANY", "ANY")
    r.step("DescribeAcls", ANON, lambda c: c.raw_describe_acls(any_acl))
    r.step("CreateAcls", ANON, lambda c: c.raw_create_acls([acl, acl]))
    r.step("DeleteAcls", ANON, lambda c: c.raw_delete_acls([any_acl]))


#: aclgate computes authorized operations from Kafka 4's operations per resource type;
#: Kafka 3.9 has no group configs (KIP-848), so it lists no DESCRIBE_CONFIGS / ALTER_CONFIGS
GROUP_OPS_BEFORE_4 = (
    "4.0",
    "a group's authorized operations: aclgate adds DESCRIBE_CONFIGS and ALTER_CONFIGS (group "
    "configs, Kafka 4.0+), Kafka 3.9 lists READ, DESCRIBE, DELETE only",
)
KIP848_GA = ("4.0", "ConsumerGroupHeartbeat v1 (KIP-848 GA), which librdkafka 2.16 requires")

OPEN: list[Scenario] = [
    Scenario(
        "open-produce-consume",
        "produce, consume in a group, offsets, metadata, groups",
        open_produce_consume,
        xfail_before=GROUP_OPS_BEFORE_4,
    ),
    Scenario(
        "open-consumer-protocol",
        "KIP-848 consumer group, sessionless fetch",
        open_consumer_protocol,
        since=KIP848_GA,
    ),
    Scenario(
        "open-admin",
        "create/delete topics, commit/describe/list/delete groups",
        open_admin,
        xfail_before=GROUP_OPS_BEFORE_4,
    ),
    Scenario(
        "open-idempotent-transactions",
        "idempotent and transactional producers",
        open_idempotent_transactions,
    ),
    Scenario(
        "open-raw-requests", "one Produce and one Fetch request for two topics", open_raw_requests
    ),
    Scenario("open-describe-configs", "DescribeConfigs of a topic", open_describe_configs),
    Scenario("open-acl-admin", "Describe/Create/DeleteAcls without an authorizer", open_acl_admin),
]


# =========================================================================== ANON


def topic_read_write(r: Run) -> None:
    for t in ("rw", "ro", "wo", "none"):
        r.observer.create_topic(t, records=[f"{t}-0"])
    for t in ("rw", "ro", "wo", "none"):
        r.step(f"produce to {t}", ANON, lambda c, t=t: c.produce(t, [f"{t}-1"]))
    for t in ("rw", "ro", "wo", "none"):
        r.step(f"consume {t} in group g-{t}", ANON, lambda c, t=t: c.consume(t, f"g-{t}", 1))
    r.step("committed offsets of g-rw", ANON, lambda c: c.group_offsets("g-rw"))
    r.step("list offsets of all four", ANON, lambda c: c.list_offsets(["rw", "ro", "wo", "none"]))
    for t in ("rw", "ro", "wo", "none"):
        r.observe(f"records in {t}", lambda o, t=t: o.records(t))


def _consumer_heartbeat(
    c: Client, group: str, member: str, epoch: int, topics: list[str] | None
) -> Any:
    """One KIP-848 ConsumerGroupHeartbeat v1: joining (epoch 0) with `topics` subscribed by
    name, or leaving (epoch -1)."""
    from tests.equivalence.scenarios_groups import group_heartbeat

    joining = epoch == 0
    return group_heartbeat(
        c,
        group,
        member,
        epoch,
        topics,
        api_key=68,
        instance_id=None,
        rebalance_timeout=30000 if joining else -1,
        subscribed_topic_regex=None,
        server_assignor=None,
        topic_partitions=[] if joining else None,
    )


def group_denied(r: Run) -> None:
    r.observer.create_topic("data", records=["d0", "d1"])
    r.observer.create_topic("hidden")
    r.step("consume in g-none (no ACL)", ANON, lambda c: c.consume("data", "g-none", 2))
    r.step("consume in g-desc (DESCRIBE only)", ANON, lambda c: c.consume("data", "g-desc", 2))
    r.step("consume in g-read (READ)", ANON, lambda c: c.consume("data", "g-read", 2))
    r.step(
        "consume in g-none, KIP-848",
        ANON,
        lambda c: c.consume("data", "g-none", 2, **{"group.protocol": "consumer"}),
    )
    r.step(
        "consume in g-read848, KIP-848",
        ANON,
        lambda c: c.consume("data", "g-read848", 2, **{"group.protocol": "consumer"}),
    )
    member = str(uuid.uuid4())
    for subscribed in (["hidden"], ["data", "hidden"], ["data"]):
        r.step(
            f"ConsumerGroupHeartbeat v1 g-read848, joining with {', '.join(subscribed)}",
            ANON,
            lambda c, topics=subscribed: _consumer_heartbeat(c, "g-read848", member, 0, topics),
        )
    r.step(
        "ConsumerGroupHeartbeat v1 g-read848, leaving",
        ANON,
        lambda c: _consumer_heartbeat(c, "g-read848", member, -1, None),
    )
    r.step("fetch without a group", ANON, lambda c: c.raw_fetch(["data"]))
    r.step("commit offsets in g-none", ANON, lambda c: c.raw_commit_offsets("g-none", {"data": 1}))
    r.step("commit offsets in g-desc", ANON, lambda c: c.raw_commit_offsets("g-desc", {"data": 1}))
    r.step(
        "commit offsets in g-read for data and hidden",
        ANON,
        lambda c: c.raw_commit_offsets("g-read", {"data": 1, "hidden": 0}),
    )
    r.step("committed offsets of g-none", ANON, lambda c: c.group_offsets("g-none"))
    r.step("committed offsets of g-read", ANON, lambda c: c.group_offsets("g-read"))


def partial_authorization(r: Run) -> None:
    r.observer.create_topic("ok")
    r.observer.create_topic("no", records=["secret"])
    r.observer.create_topic("ro", records=["r0"])
    r.step(
        "produce ok+no in one request",
        ANON,
        lambda c: c.raw_produce({"ok": ["k0", "k1"], "no": ["n0"]}),
    )
    r.step(
        "produce ok+ro in one request", ANON, lambda c: c.raw_produce({"ok": ["k2"], "ro": ["r1"]})
    )
    r.step("produce no alone", ANON, lambda c: c.raw_produce({"no": ["n1"]}))
    r.step("fetch ok+no+ro in one request", ANON, lambda c: c.raw_fetch(["ok", "no", "ro"]))
    r.step("fetch no alone", ANON, lambda c: c.raw_fetch(["no"]))
    r.step("list offsets ok+no+ro", ANON, lambda c: c.list_offsets(["ok", "no", "ro"]))
    r.step(
        "produce acks=0 ok+no", ANON, lambda c: c.raw_produce({"ok": ["z0"], "no": ["z1"]}, acks=0)
    )
    r.step("produce acks=0 ok", ANON, lambda c: c.raw_produce({"ok": ["z2"]}, acks=0))
    for t in ("ok", "no", "ro"):
        r.observe(f"records in {t}", lambda o, t=t: o.records(t))


def metadata_visibility(r: Run) -> None:
    for t in ("desc", "read", "hidden"):
        r.observer.create_topic(t)
    r.step("metadata, all topics", ANON, lambda c: c.raw_metadata())
    r.step("metadata, named", ANON, lambda c: c.raw_metadata(["desc", "read", "hidden", "never"]))
    r.step("AdminClient.list_topics", ANON, lambda c: c.list_topics())
    r.step(
        "metadata, auto-create without CREATE",
        ANON,
        lambda c: c.raw_metadata(["auto-no"], auto_create=True),
    )
    r.step(
        "metadata, auto-create without DESCRIBE",
        ANON,
        lambda c: c.raw_metadata(["auto-hidden"], auto_create=True),
    )
    r.observe("auto-no was created", lambda o: o.topic_exists("auto-no", wait=2))
    r.observe("auto-hidden was created", lambda o: o.topic_exists("auto-hidden"))


def metadata_missing_topics(r: Run) -> None:
    r.step("metadata, named, missing", ANON, lambda c: c.raw_metadata(["absent-desc"]))
    r.step(
        "metadata, auto-create with CREATE",
        ANON,
        lambda c: c.raw_metadata(["auto-ok"], auto_create=True),
    )
    r.observe("auto-ok was created", lambda o: o.topic_exists("auto-ok", wait=10))
    r.step(
        "metadata, auto-create mixed: mix-ok (CREATE), mix-no (DESCRIBE only)",
        ANON,
        lambda c: c.raw_metadata(["mix-ok", "mix-no"], auto_create=True),
    )
    r.observe("mix-ok was created", lambda o: o.topic_exists("mix-ok", wait=10))
    r.observe("mix-no was created", lambda o: o.topic_exists("mix-no", wait=2))


def produce_acks0_first_request(r: Run) -> None:
    r.observer.create_topic("ok")
    r.observer.create_topic("no")
    # five fresh connections, each closed by the broker (or proxy) right after the request:
    # every allowed part must be appended, as Kafka does (aclgate once lost it in a race with
    # its upstream connect)
    for i in range(5):
        r.step(
            f"acks=0 produce ok+no as a connection's first request (#{i})",
            ANON,
            lambda c, i=i: c.raw_produce({"ok": [f"first-{i}"], "no": ["x"]}, acks=0, first=True),
        )
    # Normalization "unordered": five connections are five independent streams; nothing orders
    # them against each other (on Kafka either), so the values are compared as a sorted list.
    r.observe(
        "records in ok (values, any order)",
        lambda o: sorted(v.split("=", 1)[1] for v in o.records("ok")),
    )


def idempotent(r: Run) -> None:
    r.observer.create_topic("t")
    r.step("InitProducerId without transactional id", ANON, lambda c: c.raw_init_producer_id())
    r.step("idempotent produce to t", ANON, lambda c: c.produce("t", ["i0"], idempotent=True))
    r.observe("records in t", lambda o: o.records("t"))


def transactions(r: Run) -> None:
    r.observer.create_topic("t")
    r.observer.create_topic("locked")
    r.step("InitProducerId tx-ok", ANON, lambda c: c.raw_init_producer_id("tx-ok"))
    r.step("InitProducerId tx-desc", ANON, lambda c: c.raw_init_producer_id("tx-desc"))
    r.step("InitProducerId tx-none", ANON, lambda c: c.raw_init_producer_id("tx-none"))
    r.step("transaction tx-ok to t, commit", ANON, lambda c: c.transaction("tx-ok", "t", ["c0"]))
    r.step("transaction tx-desc", ANON, lambda c: c.transaction("tx-desc", "t", ["x"]))
    r.step("transaction tx-none", ANON, lambda c: c.transaction("tx-none", "t", ["x"]))
    r.step(
        "transaction tx-ok, offsets of group g",
        ANON,
        lambda c: c.transaction("tx-ok", "t", ["c1"], offsets_group="g"),
    )
    r.step(
        "transaction tx-ok, offsets of group g-denied",
        ANON,
        lambda c: c.transaction("tx-ok", "t", ["c2"], offsets_group="g-denied"),
    )
    r.step("committed offsets of g", ANON, lambda c: c.group_offsets("g"))
    r.observe("records in t", lambda o: o.records("t"))
    # last: the second leaves a transaction open (it times out; nothing reads t after it)
    r.step(
        "AddPartitionsToTxn tx-ok: t (p0, p5), absent, locked",
        ANON,
        lambda c: c.raw_add_partitions_to_txn("tx-ok", {"t": [0, 5], "absent": [0], "locked": [0]}),
    )
    r.step(
        "AddPartitionsToTxn tx-ok: t p0 only",
        ANON,
        lambda c: c.raw_add_partitions_to_txn("tx-ok", {"t": [0]}),
    )


def _create_topics(c: Client, names: list[str]) -> Any:
    """ONE CreateTopics v7, the whole answer compared: configs, partition count and
    replication factor come back only with DESCRIBE_CONFIGS on the topic."""
    return c.raw(
        19,
        7,
        topics=[
            {"name": c.t(n), "num_partitions": 1, "replication_factor": 1, "assignments": [],
             "configs": []}
            for n in names
        ],
        timeout=10_000,
        validate_only=False,
        unordered=["topics"],
    )  # fmt: skip


def admin(r: Run) -> None:
    for t in ("locked", "gone", "data", "made-id", "hid-id"):
        r.observer.create_topic(t)
    ids = {t: r.observer.topic_id(t) for t in ("made-id", "locked", "hid-id")}
    for g in ("grp-seen", "grp-desc", "grp-hidden"):
        r.observer.commit_offsets(g, {"data": 1})
    r.step("create made-1 and other", ANON, lambda c: c.create_topics(["made-1", "other"]))
    r.step("create made-1 again", ANON, lambda c: c.create_topics(["made-1"]))
    r.step(
        "CreateTopics v7: made-cfg (DESCRIBE_CONFIGS), made-nocfg (CREATE only), other (none)",
        ANON,
        lambda c: _create_topics(c, ["made-cfg", "made-nocfg", "other"]),
    )
    r.step("metadata made-1", ANON, lambda c: c.raw_metadata(["made-1"]))
    r.step(
        "delete made-1, locked, gone, never",
        ANON,
        lambda c: c.delete_topics(["made-1", "locked", "gone", "never"]),
    )
    r.step(
        "DeleteTopics v6: both name and id, duplicates, neither, unknown id, allowed name",
        ANON,
        lambda c: c.raw_delete_topics(
            [
                ("locked", "both"),
                ("locked", None),
                ("locked", None),
                (None, None),
                (None, "twice"),
                (None, "twice"),
                (None, "unknown"),
                ("other", None),
                ("made-2", None),
            ]
        ),
    )
    r.step(
        "DeleteTopics v5: a duplicated name, a denied one, an allowed absent one",
        ANON,
        lambda c: c.raw_delete_topics(
            [("locked", None), ("locked", None), ("other", None), ("made-3", None)], version=5
        ),
    )
    r.step(
        "DeleteTopics v6 by id: made-id (DELETE), locked (DESCRIBE only), hid-id (none)",
        ANON,
        lambda c: c.raw(
            20,
            6,
            topics=[{"name": None, "topic_id": i} for i in ids.values()],
            timeout=10_000,
            unordered=["responses"],
        ),
    )
    r.step("describe cluster", ANON, lambda c: c.describe_cluster())
    r.step("list groups", ANON, lambda c: c.list_groups())
    r.step(
        "describe groups",
        ANON,
        lambda c: c.describe_groups(["grp-seen", "grp-desc", "grp-hidden"]),
    )
    r.step("committed offsets of grp-seen", ANON, lambda c: c.group_offsets("grp-seen"))
    r.step("committed offsets of grp-hidden", ANON, lambda c: c.group_offsets("grp-hidden"))
    r.step(
        "OffsetFetch v9: grp-seen for data (hidden) and locked, grp-hidden",
        ANON,
        lambda c: c.raw(
            9,
            9,
            groups=[
                {"group_id": c.t(g), "member_id": None, "member_epoch": -1, "topics": [
                    {"name": c.t(t), "partition_indexes": [0]} for t in ("data", "locked")]}
                for g in ("grp-seen", "grp-hidden")
            ],
            require_stable=False,
            coordinator=(0, "grp-seen"),
            unordered=["topics"],
        ),
    )  # fmt: skip
    r.step(
        "delete groups",
        ANON,
        lambda c: c.delete_groups(["grp-seen", "grp-desc", "grp-hidden"]),
    )
    r.step("list groups after delete", ANON, lambda c: c.list_groups())
    for t in ("made-1", "other", "locked", "gone", "made-cfg", "made-nocfg", "made-id", "hid-id"):
        r.observe(f"{t} exists", lambda o, t=t: o.topic_exists(t))


def admin_cluster_create(r: Run) -> None:
    r.step("create any-1 (CREATE on cluster)", ANON, lambda c: c.create_topics(["any-1"]))
    r.step("metadata any-1 (no DESCRIBE)", ANON, lambda c: c.raw_metadata(["any-1"]))
    r.step("delete any-1 (no DELETE)", ANON, lambda c: c.delete_topics(["any-1"]))
    r.observe("any-1 exists", lambda o: o.topic_exists("any-1"))


def describe_configs(r: Run) -> None:
    r.observer.create_topic("cfg")
    r.observer.create_topic("nocfg")
    r.step("describe configs of cfg", ANON, lambda c: c.describe_configs("cfg"))
    r.step("describe configs of nocfg", ANON, lambda c: c.describe_configs("nocfg"))


def prefixed(r: Run) -> None:
    for t in ("orders-us", "orders-secret", "orders", "invoices"):
        r.observer.create_topic(t, records=[f"{t}-0"])
    r.step("produce orders-us", ANON, lambda c: c.produce("orders-us", ["u1"]))
    r.step("produce orders (prefix does not match)", ANON, lambda c: c.produce("orders", ["o1"]))
    r.step("consume orders-us in app-1", ANON, lambda c: c.consume("orders-us", "app-1", 2))
    r.step("consume orders-us in web-1", ANON, lambda c: c.consume("orders-us", "web-1", 2))
    r.step(
        "consume orders-secret in app-2 (READ denied)",
        ANON,
        lambda c: c.consume("orders-secret", "app-2", 1),
    )
    r.step("metadata, all topics", ANON, lambda c: c.raw_metadata())
    r.step("list groups", ANON, lambda c: c.list_groups())


def deny_next_to_wildcard(r: Run) -> None:
    r.observer.create_topic("shared", records=["s0"])
    r.observer.create_topic("host-only", records=["h0"])
    r.step("produce shared (WRITE denied)", ANON, lambda c: c.produce("shared", ["s1"]))
    r.step("consume shared in g", ANON, lambda c: c.consume("shared", "g", 1))
    r.step("consume shared in blocked", ANON, lambda c: c.consume("shared", "blocked", 1))
    r.step("metadata shared, host-only", ANON, lambda c: c.raw_metadata(["shared", "host-only"]))
    r.step("fetch host-only (ALLOW for another host)", ANON, lambda c: c.raw_fetch(["host-only"]))
    r.observe("records in shared", lambda o: o.records("shared"))


# ACLs as the raw ACL admin steps take them: (type, name, pattern, principal, host, op, perm)
def _acl(rtype, name, op, principal=ALICE, pattern="LITERAL", perm="ALLOW", host="*"):
    return (rtype, name, pattern, principal, host, op, perm)


def _filter(rtype="ANY", name=None, pattern="ANY", principal=None, host=None, op="ANY",
            perm="ANY"):  # fmt: skip
    return (rtype, name, pattern, principal, host, op, perm)


ALL_ACLS = _filter()


def acl_admin(r: Run) -> None:
    """Create, describe and delete ACLs through the Admin API (KIP-290 filters), as
    User:ANONYMOUS holding ALTER and DESCRIBE on the cluster."""
    r.step(
        "create: literal, prefixed, wildcard, DENY, host, group, cluster, transactional id",
        ANON,
        lambda c: c.raw_create_acls(
            [
                _acl("TOPIC", "orders", "READ"),
                _acl("TOPIC", "orders", "WRITE", principal=BOB),
                _acl("TOPIC", "ord", "WRITE", principal=BOB, pattern="PREFIXED"),
                _acl("TOPIC", "*", "DESCRIBE", principal=BOB, perm="DENY"),
                _acl("TOPIC", "orders", "READ", host="10.0.0.1", perm="DENY"),
                _acl("GROUP", "g", "READ", principal=EVERYONE),
                _acl("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE", principal=BOB),
                _acl("TRANSACTIONAL_ID", "tx", "WRITE"),
            ]
        ),
    )
    r.step(
        "create: the same again, and one new (v1)",
        ANON,
        lambda c: c.raw_create_acls(
            [_acl("TOPIC", "orders", "READ"), _acl("TOPIC", "audit", "READ")], version=1
        ),
    )
    r.step(
        "create: a filter-only value (MATCH, ANY) fails the whole request",
        ANON,
        lambda c: c.raw_create_acls(
            [
                _acl("TOPIC", "pay", "READ"),
                _acl("TOPIC", "pay", "READ", pattern="MATCH"),
                _acl("TOPIC", "pay", "READ", pattern="ANY"),
                _acl("ANY", "pay", "READ"),
                _acl("TOPIC", "pay", "ANY"),
                _acl("TOPIC", "pay", "READ", perm="ANY"),
            ]
        ),
    )
    r.step(
        "create: invalid entries next to a valid one",
        ANON,
        lambda c: c.raw_create_acls(
            [
                _acl("CLUSTER", "other", "ALTER"),
                _acl("TOPIC", "", "READ"),
                _acl(99, "pay", "READ"),
                _acl("TOPIC", "pay", "READ", pattern=99),
                _acl("TOPIC", "pay", 99),
                _acl("TOPIC", "pay", "READ", perm=99),
                _acl("TOPIC", "pay", "READ"),
            ]
        ),
    )
    r.step(
        "create: odd principals and hosts",
        ANON,
        lambda c: c.raw_create_acls(
            [
                _acl("TOPIC", "odd", "READ", principal="alice"),
                _acl("TOPIC", "odd", "READ", principal=""),
                _acl("TOPIC", "odd", "READ", host=""),
                _acl("TOPIC", "odd", "READ", principal="Group:ops"),
            ]
        ),
    )
    r.step("create with an UNKNOWN pattern type", ANON,
           lambda c: c.raw_create_acls([_acl("TOPIC", "x", "READ", pattern=0)]))  # fmt: skip
    for doc, flt in [
        ("all", ALL_ACLS),
        ("MATCH orders", _filter("TOPIC", "orders", "MATCH")),
        ("MATCH ord-x (prefixed and wildcard)", _filter("TOPIC", "ord-x", "MATCH")),
        ("ANY orders", _filter("TOPIC", "orders", "ANY")),
        ("LITERAL *", _filter("TOPIC", "*", "LITERAL")),
        ("PREFIXED ord", _filter("TOPIC", "ord", "PREFIXED")),
        ("principal bob", _filter(principal=BOB)),
        ("host 10.0.0.1", _filter(host="10.0.0.1")),
        ("operation WRITE, DENY", _filter(op="WRITE", perm="DENY")),
        ("MATCH group g", _filter("GROUP", "g", "MATCH")),
        ("cluster", _filter("CLUSTER")),
        ("unknown resource type code 99", _filter(99)),
    ]:
        r.step(f"describe {doc}", ANON, lambda c, flt=flt: c.raw_describe_acls(flt))
    r.step("describe (v1), all topics", ANON,
           lambda c: c.raw_describe_acls(_filter("TOPIC"), version=1))  # fmt: skip
    r.step("describe with an UNKNOWN operation", ANON,
           lambda c: c.raw_describe_acls(_filter(op=0)))  # fmt: skip
    r.step(
        "delete: overlapping filters, an invalid one, one matching nothing",
        ANON,
        lambda c: c.raw_delete_acls(
            [
                _filter("TOPIC", "orders", "MATCH", perm="ALLOW"),
                _filter("TOPIC", "ord", "PREFIXED"),
                _filter(principal=BOB, op="WRITE"),
                _filter("TOPIC", "x", 99),
                _filter(principal="User:nobody"),
            ]
        ),
    )
    r.step("describe all after the deletion", ANON, lambda c: c.raw_describe_acls(ALL_ACLS))
    r.step("delete everything but the cluster's", ANON,
           lambda c: c.raw_delete_acls([_filter("TOPIC"), _filter("GROUP"),
                                        _filter("TRANSACTIONAL_ID")]))  # fmt: skip
    r.step(
        "delete bob's cluster ACL",
        ANON,
        lambda c: c.raw_delete_acls([_filter("CLUSTER", op="IDEMPOTENT_WRITE")]),
    )
    r.step("delete everything, own rights included", ANON,
           lambda c: c.raw_delete_acls([ALL_ACLS]))  # fmt: skip
    r.step("describe: no longer allowed", ANON, lambda c: c.raw_describe_acls(ALL_ACLS))
    r.step("create: no longer allowed", ANON,
           lambda c: c.raw_create_acls([_acl("TOPIC", "t", "READ")] * 2))  # fmt: skip


def acl_admin_denied(r: Run) -> None:
    """DESCRIBE on the cluster but not ALTER: listing works, changes are refused."""
    r.step("describe all", ANON, lambda c: c.raw_describe_acls(ALL_ACLS))
    r.step("create two", ANON,
           lambda c: c.raw_create_acls([_acl("TOPIC", "t", "READ"), _acl("GROUP", "g", "READ")]))  # fmt: skip
    r.step("delete two filters", ANON,
           lambda c: c.raw_delete_acls([ALL_ACLS, _filter("TOPIC")]))  # fmt: skip
    r.step("describe all again", ANON, lambda c: c.raw_describe_acls(ALL_ACLS))


def acl_admin_no_rights(r: Run) -> None:
    """Neither DESCRIBE nor ALTER on the cluster (ALTER on a topic is no help)."""
    r.step("describe all", ANON, lambda c: c.raw_describe_acls(ALL_ACLS))
    r.step("create", ANON, lambda c: c.raw_create_acls([_acl("TOPIC", "t", "READ")]))
    r.step("delete", ANON, lambda c: c.raw_delete_acls([ALL_ACLS]))


def _idempotent_variant(name: str, doc: str, *acls) -> Scenario:
    return Scenario(f"idempotent-{name}", doc, idempotent, acls=acls)


ANON_SCENARIOS: list[Scenario] = [
    Scenario(
        "acl-admin",
        "CreateAcls, DescribeAcls (KIP-290 filters), DeleteAcls with ALTER/DESCRIBE on the cluster",
        acl_admin,
        acls=(
            allow(ANON, "ALTER", "CLUSTER", CLUSTER),
            allow(ANON, "DESCRIBE", "CLUSTER", CLUSTER),
            allow(ANON, "READ", "TOPIC", "pre", pattern="PREFIXED"),
        ),
    ),
    Scenario(
        "acl-admin-describe-only",
        "DESCRIBE on the cluster, not ALTER: ACL changes refused with 31",
        acl_admin_denied,
        acls=(
            allow(ANON, "DESCRIBE", "CLUSTER", CLUSTER),
            allow(ALICE, "READ", "TOPIC", "t"),
        ),
    ),
    Scenario(
        "acl-admin-no-rights",
        "no cluster rights: the ACL admin APIs refused with 31",
        acl_admin_no_rights,
        acls=(allow(ANON, "ALTER", "TOPIC", "t"), deny(ANON, "DESCRIBE", "CLUSTER", CLUSTER)),
    ),
    Scenario(
        "topic-read-write",
        "produce and consume with topic READ/WRITE allowed and denied",
        topic_read_write,
        acls=(
            allow(ANON, "WRITE", "TOPIC", "rw"),
            allow(ANON, "READ", "TOPIC", "rw"),
            allow(ANON, "READ", "TOPIC", "ro"),
            allow(ANON, "WRITE", "TOPIC", "wo"),
            *(allow(ANON, "READ", "GROUP", f"g-{t}") for t in ("rw", "ro", "wo", "none")),
        ),
    ),
    Scenario(
        "group-denied",
        "consumer groups with group READ denied (classic and KIP-848)",
        group_denied,
        acls=(
            allow(ANON, "READ", "TOPIC", "data"),
            allow(ANON, "DESCRIBE", "GROUP", "g-desc"),
            allow(ANON, "READ", "GROUP", "g-read"),
            allow(ANON, "READ", "GROUP", "g-read848"),
        ),
    ),
    Scenario(
        "partial-authorization",
        "one Produce / Fetch / ListOffsets request touching allowed and denied topics",
        partial_authorization,
        acls=(
            allow(ANON, "WRITE", "TOPIC", "ok"),
            allow(ANON, "READ", "TOPIC", "ok"),
            allow(ANON, "READ", "TOPIC", "ro"),
        ),
    ),
    Scenario(
        "produce-acks0-first-request",
        "Produce acks=0 with a denied topic as the first request on a connection",
        produce_acks0_first_request,
        acls=(allow(ANON, "WRITE", "TOPIC", "ok"),),
    ),
    Scenario(
        "metadata-visibility",
        "all-topics and named Metadata, authorized operations, auto-creation denied",
        metadata_visibility,
        acls=(
            allow(ANON, "DESCRIBE", "TOPIC", "desc"),
            allow(ANON, "READ", "TOPIC", "read"),
            allow(ANON, "ALTER", "TOPIC", "read"),
            allow(ANON, "DESCRIBE", "TOPIC", "auto-no"),
            allow(ANON, "CREATE", "TOPIC", "auto-hidden"),
        ),
    ),
    Scenario(
        "metadata-missing-topics",
        "named Metadata of missing DESCRIBE-able topics, auto-creation with CREATE, mixed",
        metadata_missing_topics,
        acls=(
            allow(ANON, "DESCRIBE", "TOPIC", "absent-desc"),
            allow(ANON, "CREATE", "TOPIC", "auto-ok"),
            allow(ANON, "DESCRIBE", "TOPIC", "auto-ok"),
            allow(ANON, "CREATE", "TOPIC", "mix-ok"),
            allow(ANON, "DESCRIBE", "TOPIC", "mix-ok"),
            allow(ANON, "DESCRIBE", "TOPIC", "mix-no"),
        ),
    ),
    _idempotent_variant(
        "with-idempotent-write",
        "IDEMPOTENT_WRITE on the cluster and WRITE on the topic",
        allow(ANON, "IDEMPOTENT_WRITE", "CLUSTER", CLUSTER),
        allow(ANON, "WRITE", "TOPIC", "t"),
    ),
    _idempotent_variant(
        "kip679-topic-write",
        "no IDEMPOTENT_WRITE; WRITE on the topic suffices (KIP-679)",
        allow(ANON, "WRITE", "TOPIC", "t"),
    ),
    _idempotent_variant(
        "write-elsewhere",
        "no IDEMPOTENT_WRITE; WRITE on another topic only: InitProducerId allowed, produce denied",
        allow(ANON, "WRITE", "TOPIC", "other"),
        allow(ANON, "DESCRIBE", "TOPIC", "t"),
    ),
    _idempotent_variant(
        "no-write",
        "no IDEMPOTENT_WRITE and no WRITE on any topic: InitProducerId denied",
        allow(ANON, "READ", "TOPIC", "t"),
    ),
    _idempotent_variant(
        "write-denied-by-wildcard",
        "WRITE allowed on a prefix but denied on every topic: by-resource-type check denies",
        allow(ANON, "WRITE", "TOPIC", "t", pattern="PREFIXED"),
        deny(ANON, "WRITE", "TOPIC", "*"),
    ),
    Scenario(
        "transactions",
        "transactional producer with and without WRITE on the transactional id",
        transactions,
        acls=(
            allow(ANON, "WRITE", "TRANSACTIONAL_ID", "tx-ok"),
            allow(ANON, "DESCRIBE", "TRANSACTIONAL_ID", "tx-desc"),
            allow(ANON, "WRITE", "TOPIC", "t"),
            allow(ANON, "WRITE", "TOPIC", "absent"),  # allowed, but the cluster has no such topic
            allow(ANON, "READ", "GROUP", "g"),
        ),
    ),
    Scenario(
        "admin",
        "create/delete topics, list/describe/delete groups, offsets, describe cluster",
        admin,
        acls=(
            allow(ANON, "CREATE", "TOPIC", "made-", pattern="PREFIXED"),
            allow(ANON, "DELETE", "TOPIC", "made-", pattern="PREFIXED"),
            allow(ANON, "DESCRIBE_CONFIGS", "TOPIC", "made-cfg"),
            allow(ANON, "DESCRIBE", "TOPIC", "locked"),
            allow(ANON, "DELETE", "TOPIC", "gone"),
            allow(ANON, "DESCRIBE", "GROUP", "grp-seen"),
            allow(ANON, "DELETE", "GROUP", "grp-seen"),
            allow(ANON, "DESCRIBE", "GROUP", "grp-desc"),
        ),
    ),
    Scenario(
        "admin-cluster-create",
        "CREATE on the cluster creates any topic",
        admin_cluster_create,
        acls=(allow(ANON, "CREATE", "CLUSTER", CLUSTER),),
    ),
    Scenario(
        "describe-configs",
        "DescribeConfigs with and without DESCRIBE_CONFIGS",
        describe_configs,
        acls=(allow(ANON, "DESCRIBE_CONFIGS", "TOPIC", "cfg"),),
    ),
    Scenario(
        "prefixed-acls",
        "PREFIXED topic and group ACLs, a literal DENY inside the prefix",
        prefixed,
        acls=(
            allow(ANON, "READ", "TOPIC", "orders-", pattern="PREFIXED"),
            allow(ANON, "WRITE", "TOPIC", "orders-", pattern="PREFIXED"),
            deny(ANON, "READ", "TOPIC", "orders-secret"),
            allow(ANON, "READ", "GROUP", "app-", pattern="PREFIXED"),
        ),
    ),
    Scenario(
        "deny-next-to-wildcard",
        "DENY for one principal next to an ALLOW for User:*, and a host-restricted ALLOW",
        deny_next_to_wildcard,
        acls=(
            allow(EVERYONE, "READ", "TOPIC", "shared"),
            allow(EVERYONE, "WRITE", "TOPIC", "shared"),
            deny(ANON, "WRITE", "TOPIC", "shared"),
            allow(EVERYONE, "READ", "GROUP", "*"),
            deny(ANON, "READ", "GROUP", "blocked"),
            allow(ANON, "READ", "TOPIC", "host-only", host="10.9.9.9"),
        ),
    ),
]


# =========================================================================== SASL

PRINCIPALS = (ALICE, BOB, CHARLIE)


def _who(p: str) -> str:
    return p.removeprefix("User:")


def sasl_roles(r: Run) -> None:
    r.observer.create_topic("orders", records=["o0"])
    for p in PRINCIPALS:
        r.step(f"produce orders as {_who(p)}", p, lambda c, p=p: c.produce("orders", [_who(p)]))
    r.step("consume orders in bob-g", BOB, lambda c: c.consume("orders", "bob-g", 2))
    r.step("consume orders in bob-g as alice", ALICE, lambda c: c.consume("orders", "bob-g", 2))
    for p in PRINCIPALS:
        r.step("fetch orders", p, lambda c: c.raw_fetch(["orders"]))
        r.step("metadata, all topics", p, lambda c: c.raw_metadata())
        r.step("committed offsets of bob-g", p, lambda c: c.group_offsets("bob-g"))
    r.observe("records in orders", lambda o: o.records("orders"))


def sasl_deny_one(r: Run) -> None:
    r.observer.create_topic("shared", records=["s0"])
    for p in PRINCIPALS:
        r.step("consume shared", p, lambda c, p=p: c.consume("shared", f"g-{_who(p)}", 1))
        r.step("produce shared", p, lambda c, p=p: c.produce("shared", [_who(p)]))
        r.step("metadata shared", p, lambda c: c.raw_metadata(["shared"]))
    r.observe("records in shared", lambda o: o.records("shared"))


def sasl_own_prefixes(r: Run) -> None:
    r.step("alice creates alice-t, bob-t", ALICE, lambda c: c.create_topics(["alice-t", "bob-t"]))
    r.step("bob creates bob-t", BOB, lambda c: c.create_topics(["bob-t"]))
    for p in PRINCIPALS:
        r.step("list_topics", p, lambda c: c.list_topics())
    r.step("bob produces to alice-t", BOB, lambda c: c.produce("alice-t", ["b"]))
    r.step("alice produces to alice-t", ALICE, lambda c: c.produce("alice-t", ["a"]))
    r.step("charlie consumes alice-t", CHARLIE, lambda c: c.consume("alice-t", "charlie-g", 1))
    r.step("list groups", CHARLIE, lambda c: c.list_groups())
    r.step("list groups", ALICE, lambda c: c.list_groups())
    r.step("bob deletes alice-t", BOB, lambda c: c.delete_topics(["alice-t"]))
    r.step("alice deletes alice-t", ALICE, lambda c: c.delete_topics(["alice-t"]))


def sasl_producers(r: Run) -> None:
    r.observer.create_topic("t")
    for p in PRINCIPALS:
        r.step("InitProducerId (idempotent)", p, lambda c: c.raw_init_producer_id())
        r.step("idempotent produce t", p, lambda c, p=p: c.produce("t", [_who(p)], idempotent=True))
    for p in PRINCIPALS:
        r.step(
            f"transaction {_who(p)}-tx",
            p,
            lambda c, p=p: c.transaction(f"{_who(p)}-tx", "t", [f"tx-{_who(p)}"]),
        )
    r.observe("records in t", lambda o: o.records("t"))


def sasl_cluster_ops(r: Run) -> None:
    for p in PRINCIPALS:
        r.step("describe cluster", p, lambda c: c.describe_cluster())
        for version in (8, 10):  # v8-10 carry the cluster's authorized operations
            r.step(
                f"Metadata v{version}: cluster authorized operations",
                p,
                lambda c, v=version: c.raw(
                    3,
                    v,
                    topics=[],
                    allow_auto_topic_creation=False,
                    include_cluster_authorized_operations=True,
                    include_topic_authorized_operations=True,
                ),
            )
        r.step("create topic", p, lambda c, p=p: c.create_topics([f"made-by-{_who(p)}"]))


SASL_SCENARIOS: list[Scenario] = [
    Scenario(
        "sasl-producer-consumer-roles",
        "alice writes, bob reads in his group, charlie has nothing",
        sasl_roles,
        principals=PRINCIPALS,
        acls=(
            allow(ALICE, "WRITE", "TOPIC", "orders"),
            allow(BOB, "READ", "TOPIC", "orders"),
            allow(BOB, "READ", "GROUP", "bob-g"),
        ),
    ),
    Scenario(
        "sasl-deny-one-principal",
        "ALLOW User:* on a topic and all groups, DENY bob READ",
        sasl_deny_one,
        principals=PRINCIPALS,
        acls=(
            allow(EVERYONE, "READ", "TOPIC", "shared"),
            allow(EVERYONE, "WRITE", "TOPIC", "shared"),
            allow(EVERYONE, "READ", "GROUP", "*"),
            deny(BOB, "READ", "TOPIC", "shared"),
            deny(CHARLIE, "WRITE", "TOPIC", "*"),
        ),
    ),
    Scenario(
        "sasl-own-prefixes",
        "each principal owns a PREFIXED namespace (ALL); charlie reads alice's with a group",
        sasl_own_prefixes,
        principals=PRINCIPALS,
        acls=(
            allow(ALICE, "ALL", "TOPIC", "alice-", pattern="PREFIXED"),
            allow(BOB, "ALL", "TOPIC", "bob-", pattern="PREFIXED"),
            allow(CHARLIE, "READ", "TOPIC", "alice-", pattern="PREFIXED"),
            allow(CHARLIE, "READ", "GROUP", "charlie-", pattern="PREFIXED"),
        ),
    ),
    Scenario(
        "sasl-producers",
        "idempotent (IDEMPOTENT_WRITE / KIP-679 / neither) and transactional per principal",
        sasl_producers,
        principals=PRINCIPALS,
        acls=(
            allow(ALICE, "IDEMPOTENT_WRITE", "CLUSTER", CLUSTER),
            allow(ALICE, "WRITE", "TOPIC", "t"),
            allow(ALICE, "WRITE", "TRANSACTIONAL_ID", "alice-", pattern="PREFIXED"),
            allow(BOB, "WRITE", "TOPIC", "t"),
            allow(BOB, "DESCRIBE", "TRANSACTIONAL_ID", "bob-tx"),
            allow(CHARLIE, "READ", "TOPIC", "t"),
            allow(CHARLIE, "WRITE", "TRANSACTIONAL_ID", "*"),
        ),
    ),
    Scenario(
        "sasl-cluster-operations",
        "cluster DESCRIBE / ALTER / CREATE per principal: describe cluster, create topics",
        sasl_cluster_ops,
        principals=PRINCIPALS,
        acls=(
            allow(ALICE, "DESCRIBE", "CLUSTER", CLUSTER),
            allow(BOB, "ALTER", "CLUSTER", CLUSTER),
            allow(BOB, "CREATE", "CLUSTER", CLUSTER),
            allow(CHARLIE, "CREATE", "TOPIC", "made-by-", pattern="PREFIXED"),
            deny(CHARLIE, "DESCRIBE", "CLUSTER", CLUSTER),
        ),
    ),
]
