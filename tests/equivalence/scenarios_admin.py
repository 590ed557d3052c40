"""Equivalence scenarios for the admin APIs (issue 13 item 3): configs, partitions, records,
offsets, log dirs, leader elections, reassignments, quotas, SCRAM credentials, transactions,
producers, consumer-group and topic-partition descriptions, features.

User:ANONYMOUS on both sides (the ANON family of tests/equivalence/scenarios.py). Steps go
through confluent-kafka's AdminClient where it has the API and through one raw request
otherwise (`Client.raw`: the request as plain data, the whole answer compared). Clusters are
shared: nothing here changes a broker's configuration or features for real (broker-wide
changes are `validate_only`), and every name a step writes (topics, groups, quota and SCRAM
users, transactional ids) is in the run's namespace.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import time
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Consumer, Producer

from tests.equivalence.harness import CLUSTER, STEP_TIMEOUT, Client, Observer, Run, Scenario, allow
from tests.equivalence.scenarios import KIP848_GA

ANON = "User:ANONYMOUS"
TOPIC, GROUP, BROKER, BROKER_LOGGER = 2, 3, 4, 8  # config resource types
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations
FIND_GROUP, FIND_TXN = 0, 1  # FindCoordinator key types
#: the broker id behind every single-node target (kafka_single, kafka_anon_authz)
NODE = "1"


def _resource(rtype: int, name: str, **configs: str | None) -> dict[str, Any]:
    return {"resource_type": rtype, "resource_name": name, "configs": [
        {"name": k.replace("_", "."), "value": v} for k, v in configs.items()
    ]}  # fmt: skip


def _incremental(rtype: int, name: str, op: int = SET, **configs: str | None) -> dict[str, Any]:
    res = _resource(rtype, name, **configs)
    for c in res["configs"]:
        c["config_operation"] = op
    return res


def _partitions(topics: dict[str, list[int]], c: Client, key: str = "name",
                parts: str = "partitions") -> list[dict[str, Any]]:  # fmt: skip
    return [{key: c.t(t), parts: ps} for t, ps in topics.items()]


def _offsets(topics: dict[str, list[int]], c: Client) -> list[dict[str, Any]]:
    return [{"name": c.t(t), "partitions": [{"partition_index": p} for p in ps]}
            for t, ps in topics.items()]  # fmt: skip


def _scram(user: str, password: str, mechanism: int = 2) -> dict[str, Any]:
    """A SCRAM-SHA-512 (mechanism 2) upsertion as a client computes it (RFC 5802)."""
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 4096)
    return {"name": user, "mechanism": mechanism, "iterations": 4096, "salt": salt,
            "salted_password": salted}  # fmt: skip


# =========================================================================== configs


def configs(r: Run) -> None:
    r.observer.create_topic("cfg-ok")
    r.observer.create_topic("cfg-no")
    r.step(
        "AdminClient.incremental_alter_configs cfg-ok, cfg-no",
        ANON,
        lambda c: c.incremental_alter_configs(
            {"cfg-ok": {"retention.ms": "3600000"}, "cfg-no": {"retention.ms": "3600000"}}
        ),
    )
    r.step(
        "IncrementalAlterConfigs v1: topics, a group, the broker, a broker logger",
        ANON,
        lambda c: c.raw(
            44,
            1,
            resources=[
                _incremental(TOPIC, c.t("cfg-ok"), segment_ms="7200000"),
                _incremental(TOPIC, c.t("cfg-ok2"), segment_ms="7200000"),
                _incremental(TOPIC, c.t("cfg-no"), SET, segment_ms="7200000"),
                _incremental(GROUP, c.t("grp"), SET, consumer_session_timeout_ms="45000"),
                _incremental(BROKER, NODE, SET, log_cleaner_threads="1"),
                _incremental(BROKER_LOGGER, NODE, SET, kafka_server="INFO"),
            ],
            validate_only=False,
        ),
    )
    r.step(
        "IncrementalAlterConfigs v1: a resource twice, a duplicated key (rejected whole)",
        ANON,
        lambda c: c.raw(
            44,
            1,
            resources=[
                _incremental(TOPIC, c.t("cfg-ok"), retention_bytes="1000000"),
                _incremental(TOPIC, c.t("cfg-ok"), retention_bytes="2000000"),
                {**_incremental(TOPIC, c.t("cfg-no")), "configs": [
                    {"name": "retention.ms", "config_operation": SET, "value": "1"},
                    {"name": "retention.ms", "config_operation": SET, "value": "2"},
                ]},
                _incremental(TOPIC, c.t("cfg-no"), DELETE, retention_ms=None),
            ],
            validate_only=True,
        ),
    )  # fmt: skip
    r.step(
        "AlterConfigs v2: topics, the broker (validate only)",
        ANON,
        lambda c: c.raw(
            33,
            2,
            resources=[
                _resource(TOPIC, c.t("cfg-ok"), cleanup_policy="compact"),
                _resource(TOPIC, c.t("cfg-no"), cleanup_policy="compact"),
                _resource(BROKER, NODE, log_cleaner_threads="1"),
                _resource(BROKER_LOGGER, NODE, kafka_server="INFO"),
            ],
            validate_only=True,
        ),
    )
    r.step(
        "AdminClient.alter_configs cfg-ok (legacy, replaces the topic's configs)",
        ANON,
        lambda c: c.alter_configs({"cfg-ok": {"retention.ms": "7200000"}}),
    )
    # the legacy AlterConfigs replaced cfg-ok's configs (segment.ms back to its default): read
    # once the broker shows it (normalization "eventual"); a side where it did not happen
    # still shows its values once the step's time is up
    replaced = {
        "cfg-ok": lambda out: isinstance(out, dict) and out.get("retention.ms") == "7200000",
        "cfg-no": None,
    }
    for t in ("cfg-ok", "cfg-no"):
        r.observe(
            f"configs of {t}",
            lambda o, t=t: o.describe_configs(
                t, ("retention.ms", "segment.ms", "cleanup.policy"), until=replaced[t]
            ),
        )


def cluster_configs(r: Run) -> None:
    """Broker-wide configuration with ALTER_CONFIGS / DESCRIBE_CONFIGS on the cluster; every
    broker change validate-only (the clusters are shared)."""
    r.step(
        "IncrementalAlterConfigs v1: the broker, a broker logger (validate only)",
        ANON,
        lambda c: c.raw(
            44,
            1,
            resources=[
                _incremental(BROKER, NODE, SET, log_cleaner_threads="1"),
                _incremental(BROKER, "", SET, log_cleaner_threads="1"),
                _incremental(BROKER_LOGGER, NODE, SET, kafka_server="INFO"),
            ],
            validate_only=True,
        ),
    )
    r.step(
        "AlterConfigs v2: the broker (validate only)",
        ANON,
        lambda c: c.raw(
            33, 2, resources=[_resource(BROKER, NODE, log_cleaner_threads="1")], validate_only=True
        ),
    )
    quota_user = {"entity_type": "user", "entity_name": None}

    def quota_entry(c: Client, value: float, remove: bool = False) -> dict[str, Any]:
        entity = [{**quota_user, "entity_name": c.t("quota-user")}]
        return {"entity": entity, "ops": [
            {"key": "producer_byte_rate", "value": value, "remove": remove}
        ]}  # fmt: skip

    r.step(
        "AlterClientQuotas v1: a user's producer_byte_rate",
        ANON,
        lambda c: c.raw(49, 1, entries=[quota_entry(c, 1048576.0)], validate_only=False),
    )
    describe_user = {"entity_type": "user", "match_type": 0}
    r.step(
        "DescribeClientQuotas v1: that user (once the quota is in force)",
        ANON,
        lambda c: c.raw(
            48,
            1,
            components=[{**describe_user, "match": c.t("quota-user")}],
            strict=False,
            until=lambda out: out["error_code"] != "NONE" or bool(out["entries"]),
        ),
    )
    r.step(
        "AlterClientQuotas v1: remove it",
        ANON,
        lambda c: c.raw(49, 1, entries=[quota_entry(c, 0.0, remove=True)], validate_only=False),
    )
    r.step(
        "DescribeClientQuotas v1: that user again (once the removal is in force)",
        ANON,
        lambda c: c.raw(
            48,
            1,
            components=[{**describe_user, "match": c.t("quota-user")}],
            strict=False,
            until=lambda out: out["error_code"] != "NONE" or not out["entries"],
        ),
    )
    r.step("ListConfigResources v0 (client metrics resources)", ANON, lambda c: c.raw(74, 0))
    r.step(
        "ApiVersions: the telemetry APIs advertised",
        ANON,
        lambda c: sorted(
            k["api_key"]
            for k in c.raw(18, 3, client_software_name="eq", client_software_version="1")[
                "api_keys"
            ]
            if k["api_key"] in (71, 72)
        ),
    )
    r.step(
        "UpdateFeatures v1: an unknown feature (validate only)",
        ANON,
        lambda c: c.raw(
            57,
            1,
            timeout=int(STEP_TIMEOUT * 1000),
            feature_updates=[{"feature": "eq.unknown", "max_version_level": 1, "upgrade_type": 1}],
            validate_only=True,
        ),
    )


# =========================================================================== topics


def partitions_records(r: Run) -> None:
    for t in ("grow", "fixed", "trim", "kept"):
        r.observer.create_topic(t, records=[f"{t}-{i}" for i in range(4)])
    r.step(
        "AdminClient.create_partitions grow, fixed",
        ANON,
        lambda c: c.create_partitions({"grow": 2, "fixed": 2}),
    )
    r.step(
        "CreatePartitions v3: grow again, fixed, a duplicated name, a missing one",
        ANON,
        lambda c: c.raw(
            37,
            3,
            topics=[
                {"name": c.t("grow"), "count": 3, "assignments": None},
                {"name": c.t("fixed"), "count": 3, "assignments": None},
                {"name": c.t("twice"), "count": 3, "assignments": None},
                {"name": c.t("twice"), "count": 4, "assignments": None},
                {"name": c.t("grow-missing"), "count": 3, "assignments": None},
            ],
            timeout=10000,
            validate_only=False,
            unordered=["results"],
        ),
    )
    r.step(
        "AdminClient.delete_records trim@2, kept@2",
        ANON,
        lambda c: c.delete_records({"trim": 2, "kept": 2}),
    )
    r.step(
        "DeleteRecords v2: trim@3 and p7, kept@3, a missing topic",
        ANON,
        lambda c: c.raw(
            21,
            2,
            topics=[
                {"name": c.t("trim"), "partitions": [
                    {"partition_index": 0, "offset": 3}, {"partition_index": 7, "offset": 1}]},
                {"name": c.t("kept"), "partitions": [{"partition_index": 0, "offset": 3}]},
                {"name": c.t("trim-missing"), "partitions": [{"partition_index": 0, "offset": 1}]},
            ],
            timeout=10000,
            unordered=["topics", "partitions"],
        ),
    )  # fmt: skip
    r.step(
        "OffsetForLeaderEpoch v4: trim (DESCRIBE), kept (none), missing",
        ANON,
        lambda c: c.raw(
            23,
            4,
            replica_id=-1,
            topics=[
                {"topic": c.t(t), "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}
                for t in ("trim", "kept", "trim-missing")
            ],
        ),
    )  # fmt: skip
    r.step(
        "DescribeProducers v0: trim (READ), kept, missing",
        ANON,
        lambda c: c.raw(
            61,
            0,
            topics=[
                {"name": c.t(t), "partition_indexes": [0]} for t in ("trim", "kept", "missing")
            ],
        ),
    )
    r.step(
        "AdminClient.describe_topics grow, trim, kept",
        ANON,
        lambda c: c.describe_topics(["grow", "trim", "kept"]),
    )
    r.step(
        "DescribeTopicPartitions v0: named, with a cursor",
        ANON,
        lambda c: c.raw(
            75,
            0,
            topics=[{"name": c.t(t)} for t in ("grow", "trim", "kept", "missing")],
            response_partition_limit=2,
            cursor={"topic_name": c.t("grow"), "partition_index": 1},
            unordered=["topics"],
        ),
    )
    r.step(
        "DescribeTopicPartitions v0: all topics",
        ANON,
        lambda c: c.raw(75, 0, topics=[], response_partition_limit=2000, cursor=None),
    )
    for t in ("grow", "fixed"):
        r.observe(f"partitions of {t}", lambda o, t=t: o.partition_count(t))
    for t in ("trim", "kept"):
        r.observe(f"low watermark of {t}", lambda o, t=t: o.list_offsets([t], "earliest"))


# =========================================================================== cluster-wide


def _u1_known(out: Any) -> bool:
    return any(x["user"] and x["error_code"] == "NONE" for x in out.get("results") or [])


def _cluster_steps(r: Run, alter: bool, describe: bool) -> None:
    """DescribeLogDirs, AlterReplicaLogDirs, ElectLeaders, reassignments, SCRAM credentials:
    the same requests with and without the cluster rights (`alter`, `describe`: whether the
    principal has them)."""
    r.observer.create_topic("t", records=["t0"])
    r.step("DescribeLogDirs v4: all topics", ANON, lambda c: c.raw(35, 4, topics=None))
    r.step(
        "DescribeLogDirs v4: t and a missing topic",
        ANON,
        lambda c: c.raw(35, 4, topics=_partitions({"t": [0], "gone": [0]}, c, "topic")),
    )
    r.step(
        "AlterReplicaLogDirs v2: t to a directory the broker does not have",
        ANON,
        lambda c: c.raw(
            34, 2, dirs=[{"path": "/nonexistent", "topics": _partitions({"t": [0]}, c)}]
        ),
    )
    for kind, code in (("PREFERRED", 0), ("UNCLEAN", 1)):
        r.step(
            f"ElectLeaders v2: t p0 and p9, {kind}",
            ANON,
            lambda c, code=code: c.raw(
                43, 2, election_type=code, topic_partitions=_partitions({"t": [0, 9]}, c, "topic"),
                timeout=10000, unordered=["replica_election_results"],
            ),
        )  # fmt: skip
    r.step("ElectLeaders v2: every partition (null list), PREFERRED", ANON,
           lambda c: c.raw(43, 2, election_type=0, topic_partitions=None, timeout=10000))  # fmt: skip
    r.step(
        "AlterPartitionReassignments v0: cancel one that is not running",
        ANON,
        lambda c: c.raw(
            45,
            0,
            timeout=10000,
            topics=[{"name": c.t("t"), "partitions": [{"partition_index": 0, "replicas": None}]}],
        ),
    )
    r.step(
        "ListPartitionReassignments v0: t",
        ANON,
        lambda c: c.raw(46, 0, timeout=10000, topics=_partitions({"t": [0]}, c, "name",
                                                                 "partition_indexes")),
    )  # fmt: skip
    r.step("ListPartitionReassignments v0: all", ANON,
           lambda c: c.raw(46, 0, timeout=10000, topics=None))  # fmt: skip
    r.step(
        "AlterUserScramCredentials v0: upsert u1, delete u2",
        ANON,
        lambda c: c.raw(
            51,
            0,
            deletions=[{"name": c.t("u2"), "mechanism": 2}],
            upsertions=[_scram(c.t("u1"), "secret")],
        ),
    )
    r.step(
        "DescribeUserScramCredentials v0: u1, u2",
        ANON,
        lambda c: c.raw(
            50,
            0,
            users=[{"name": c.t("u1")}, {"name": c.t("u2")}],
            unordered=["results"],
            # a credential is in force once the broker has the metadata record
            until=_u1_known if alter else None,
        ),
    )
    if describe:  # librdkafka 2.16 aborts the process on the denied answer
        r.step(
            "AdminClient.describe_user_scram_credentials u1",
            ANON,
            lambda c: c.describe_user_scram_credentials(["u1"]),
        )
    r.step(
        "AlterUserScramCredentials v0: delete u1",
        ANON,
        lambda c: c.raw(51, 0, deletions=[{"name": c.t("u1"), "mechanism": 2}], upsertions=[]),
    )


# =========================================================================== groups, txns


@contextlib.contextmanager
def _live_member(o: Observer, group: str, topics: list[str]) -> Iterator[None]:
    """A KIP-848 consumer of the observer, subscribed and assigned, for the steps inside."""
    c = Consumer(
        o.profile.client_config(
            **{
                "group.id": o.t(group),
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
            }
        )
    )
    try:
        c.subscribe([o.t(t) for t in topics])
        deadline = time.monotonic() + STEP_TIMEOUT
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.2)
        if not c.assignment():
            raise TimeoutError(f"{group}: no assignment")
        yield
    finally:
        c.close()


def consumer_groups(r: Run) -> None:
    r.observer.create_topic("seen", records=["s0", "s1"])
    r.observer.create_topic("secret", records=["x0"])
    r.observer.commit_offsets("old", {"seen": 1})
    # live-future subscribes by name to `future`, which does not exist: in no assignment, so
    # Kafka describes the group to a caller that may not DESCRIBE `future` (G3)
    with (
        _live_member(r.observer, "live", ["seen", "secret"]),
        _live_member(r.observer, "live-ok", ["seen"]),
        _live_member(r.observer, "live-future", ["seen", "future"]),
    ):
        r.step(
            "ConsumerGroupDescribe v1: live (a hidden topic), live-ok, live-future, old, hidden",
            ANON,
            lambda c: c.raw(
                69,
                1,
                group_ids=[c.t(g) for g in ("live", "live-ok", "live-future", "old", "hidden")],
                include_authorized_operations=True,
                coordinator=(FIND_GROUP, "live-ok"),
                # Kafka keeps a member's subscribed names in a hash set
                unordered=["groups", "subscribed_topic_names"],
                # no message for a denied group; its own for one naming a hidden topic
                keep=["error_message"],
            ),
        )
        r.step(
            "AdminClient.describe_consumer_groups live-ok, live, live-future",
            ANON,
            lambda c: c.describe_groups(["live-ok", "live", "live-future"]),
        )
        r.step(
            "OffsetDelete v0: live-ok (subscribed)",
            ANON,
            lambda c: c.raw(
                47,
                0,
                group_id=c.t("live-ok"),
                topics=_offsets({"seen": [0]}, c),
                coordinator=(FIND_GROUP, "live-ok"),
                unordered=["topics"],
            ),
        )


def offsets_txns(r: Run) -> None:
    r.observer.create_topic("seen", records=["s0", "s1"])
    r.observer.create_topic("secret", records=["x0"])
    r.observer.commit_offsets("old", {"seen": 1, "secret": 1})
    r.observer.commit_offsets("old-nodelete", {"seen": 1})
    r.step(
        "OffsetDelete v0: old seen (READ), secret (none)",
        ANON,
        lambda c: c.raw(
            47,
            0,
            group_id=c.t("old"),
            topics=_offsets({"seen": [0], "secret": [0]}, c),
            coordinator=(FIND_GROUP, "old"),
            unordered=["topics"],
        ),
    )
    r.step(
        "OffsetDelete v0: old-nodelete (DESCRIBE only)",
        ANON,
        lambda c: c.raw(
            47,
            0,
            group_id=c.t("old-nodelete"),
            topics=_offsets({"seen": [0]}, c),
            coordinator=(FIND_GROUP, "old-nodelete"),
        ),
    )
    for g in ("old", "old-nodelete"):
        r.observe(f"committed offsets of {g}", lambda o, g=g: o.group_offsets(g))
    with _open_transaction(r.observer, "tx-seen", {"seen": "a", "secret": "b"}), \
            _open_transaction(r.observer, "tx-hidden", {"seen": "c"}):  # fmt: skip
        r.step(
            "ListTransactions v1",
            ANON,
            lambda c: c.raw(66, 1, state_filters=[], producer_id_filters=[], duration_filter=-1),
        )
        r.step(
            "DescribeTransactions v0: tx-seen, tx-hidden, tx-missing",
            ANON,
            lambda c: c.raw(
                65,
                0,
                transactional_ids=[c.t(x) for x in ("tx-seen", "tx-hidden", "tx-missing")],
                coordinator=(FIND_TXN, "tx-seen"),
            ),
        )
        r.step(
            "DescribeProducers v0: seen, secret (open transactions)",
            ANON,
            lambda c: c.raw(
                61,
                0,
                topics=[{"name": c.t(t), "partition_indexes": [0]} for t in ("seen", "secret")],
            ),
        )


@contextlib.contextmanager
def _open_transaction(o: Observer, txn: str, records: dict[str, str]) -> Iterator[None]:
    """A transaction of the observer left open (records produced) for the steps inside."""
    p = Producer(o.profile.client_config(**{"transactional.id": o.t(txn)}))
    p.init_transactions(STEP_TIMEOUT)
    p.begin_transaction()
    for topic, value in records.items():
        p.produce(o.t(topic), value.encode(), partition=0)
    p.flush(STEP_TIMEOUT)
    try:
        yield
    finally:
        p.abort_transaction(STEP_TIMEOUT)


# =========================================================================== the list


def _cluster_variant(name: str, doc: str, *acls, alter: bool, describe: bool) -> Scenario:
    script = functools.partial(_cluster_steps, alter=alter, describe=describe)
    return Scenario(f"admin-cluster-{name}", doc, script, acls=acls)


GROUP_TXN_ACLS = (
    allow(ANON, "DESCRIBE", "GROUP", "live"),
    allow(ANON, "DESCRIBE", "GROUP", "live-ok"),
    allow(ANON, "DELETE", "GROUP", "live-ok"),
    allow(ANON, "DESCRIBE", "GROUP", "live-future"),
    allow(ANON, "DESCRIBE", "GROUP", "old", pattern="PREFIXED"),
    allow(ANON, "DELETE", "GROUP", "old"),
    allow(ANON, "DESCRIBE", "TOPIC", "seen"),
    allow(ANON, "READ", "TOPIC", "seen"),
    allow(ANON, "DESCRIBE", "TRANSACTIONAL_ID", "tx-seen"),
    allow(ANON, "DESCRIBE", "TRANSACTIONAL_ID", "tx-missing"),
)

ADMIN_SCENARIOS: list[Scenario] = [
    Scenario(
        "admin-configs",
        "Incremental/AlterConfigs of allowed and denied topics, a group, the broker, a logger",
        configs,
        acls=(
            allow(ANON, "ALTER_CONFIGS", "TOPIC", "cfg-ok", pattern="PREFIXED"),
            allow(ANON, "DESCRIBE_CONFIGS", "TOPIC", "cfg-ok"),
            allow(ANON, "DESCRIBE", "TOPIC", "cfg-no"),
        ),
    ),
    Scenario(
        "admin-cluster-configs",
        "broker configs (validate only), client quotas, features with cluster rights",
        cluster_configs,
        acls=(
            allow(ANON, "ALTER_CONFIGS", "CLUSTER", CLUSTER),
            allow(ANON, "DESCRIBE_CONFIGS", "CLUSTER", CLUSTER),
        ),
    ),
    Scenario(
        "admin-cluster-configs-denied",
        "the same without ALTER_CONFIGS / DESCRIBE_CONFIGS on the cluster (ALTER only)",
        cluster_configs,
        acls=(allow(ANON, "ALTER", "CLUSTER", CLUSTER),),
    ),
    Scenario(
        "admin-partitions-records",
        "CreatePartitions, DeleteRecords, OffsetForLeaderEpoch, DescribeProducers, "
        "DescribeTopicPartitions per topic",
        partitions_records,
        acls=(
            allow(ANON, "ALTER", "TOPIC", "grow"),
            allow(ANON, "ALTER", "TOPIC", "twice"),
            allow(ANON, "DESCRIBE", "TOPIC", "fixed"),
            allow(ANON, "DELETE", "TOPIC", "trim", pattern="PREFIXED"),
            allow(ANON, "READ", "TOPIC", "trim"),
            allow(ANON, "DESCRIBE", "TOPIC", "grow-missing"),
        ),
    ),
    _cluster_variant(
        "allowed",
        "log dirs, elections, reassignments, SCRAM credentials with ALTER and DESCRIBE on the "
        "cluster",
        allow(ANON, "ALTER", "CLUSTER", CLUSTER),
        allow(ANON, "DESCRIBE", "CLUSTER", CLUSTER),
        allow(ANON, "DESCRIBE", "TOPIC", "t"),
        alter=True,
        describe=True,
    ),
    _cluster_variant(
        "describe-only",
        "the same with DESCRIBE on the cluster only",
        allow(ANON, "DESCRIBE", "CLUSTER", CLUSTER),
        allow(ANON, "ALL", "TOPIC", "t"),
        alter=False,
        describe=True,
    ),
    _cluster_variant(
        "alter-only",
        "the same with ALTER on the cluster only (ALTER implies DESCRIBE)",
        allow(ANON, "ALTER", "CLUSTER", CLUSTER),
        alter=True,
        describe=True,
    ),
    _cluster_variant(
        "denied",
        "the same without ALTER or DESCRIBE on the cluster (IDEMPOTENT_WRITE, ALL on t)",
        allow(ANON, "IDEMPOTENT_WRITE", "CLUSTER", CLUSTER),
        allow(ANON, "ALL", "TOPIC", "t"),
        alter=False,
        describe=False,
    ),
    Scenario(
        "admin-consumer-groups",
        "ConsumerGroupDescribe with live KIP-848 members (one subscribed to a hidden topic), "
        "OffsetDelete of a subscribed topic",
        consumer_groups,
        since=KIP848_GA,
        acls=GROUP_TXN_ACLS,
    ),
    Scenario(
        "admin-offsets-transactions",
        "OffsetDelete, ListTransactions, DescribeTransactions and DescribeProducers with open "
        "transactions",
        offsets_txns,
        acls=GROUP_TXN_ACLS,
    ),
]
