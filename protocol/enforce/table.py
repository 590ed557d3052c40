"""THE API table: every API key the proxy serves, with the checks Kafka's broker makes for it.

This is data. `handlers()` gives the session its dispatch table, `advertised_versions()` what
ApiVersions may announce (an API without a row here is never advertised and is closed on if
sent), and `docs/apis.md` is generated from it (`python -m protocol.enforce.table`; a test
keeps the file in step). Rows follow Kafka's KafkaApis/ControllerApis (docs/authz.md, "Which
checks a request gets").
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass

from authz.model import AclOperation, ResourceType
from protocol.enforce.admin import CreateTopicsHandler, DeleteTopicsHandler, DescribeClusterHandler
from protocol.enforce.base import ApiHandler, Check, PerEntry, Unchecked, Whole
from protocol.enforce.configs import (
    AlterConfigsHandler,
    CreatePartitionsHandler,
    DescribeConfigsHandler,
    DescribeTopicPartitionsHandler,
    WholeBuilt,
    alter_replica_log_dirs_error,
    alter_user_scram_credentials_error,
)
from protocol.enforce.data import FetchHandler, ProduceHandler
from protocol.enforce.groups import (
    ConsumerGroupDescribeHandler,
    ConsumerGroupHeartbeatHandler,
    DescribeGroupsHandler,
    FindCoordinatorHandler,
    ListGroupsHandler,
    OffsetFetchHandler,
)
from protocol.enforce.metadata import MetadataHandler
from protocol.enforce.txn import AddPartitionsToTxnHandler, InitProducerIdHandler
from protocol.enforce.txnadmin import DescribeTransactionsHandler, ListTransactionsHandler
from protocol.routing import BLOCKED, allowed_versions
from protocol.versions import API_NAMES

Op, Res = AclOperation, ResourceType


def _group(r):
    return r.group_id


def _txn(r):
    return r.transactional_id


def cluster(op: AclOperation, log_if_denied: bool = True) -> Check:
    return Check(op, Res.CLUSTER, log_if_denied=log_if_denied)


def group(op: AclOperation) -> Check:
    return Check(op, Res.GROUP, _group, doc_name="group_id")


def txn(op: AclOperation) -> Check:
    return Check(op, Res.TRANSACTIONAL_ID, _txn, doc_name="transactional_id")


@dataclass(frozen=True)
class Row:
    handler: ApiHandler
    #: highest version served, when lower than what kio parses (with the reason in `note`)
    max_version: int | None = None
    note: str = ""


def per_topic(
    op: AclOperation, array: str = "topics", response_array: str = "topics", **kw
) -> PerEntry:
    return PerEntry(
        array=array, response_array=response_array, operation=op, resource_type=Res.TOPIC, **kw
    )


TABLE: dict[int, Row] = {
    0: Row(ProduceHandler()),
    1: Row(FetchHandler()),
    2: Row(
        per_topic(Op.DESCRIBE), note="offset, timestamp and leader epoch -1 on denied partitions"
    ),
    3: Row(MetadataHandler()),
    8: Row(
        per_topic(Op.READ, pre=(group(Op.READ),)),
        note="group denied: every partition 30; topic denied: its partitions 29",
    ),
    9: Row(OffsetFetchHandler()),
    10: Row(FindCoordinatorHandler()),
    11: Row(Whole((group(Op.READ),))),
    12: Row(Whole((group(Op.READ),))),
    13: Row(
        Whole((group(Op.READ),), overrides={"members": ()}),
        note="denied: top-level 30, no member results (v3+), as LeaveGroupRequest.getErrorResponse",
    ),
    14: Row(Whole((group(Op.READ),))),
    15: Row(DescribeGroupsHandler()),
    16: Row(ListGroupsHandler()),
    18: Row(Unchecked(why="before authentication; the answer is trimmed to what the proxy serves")),
    19: Row(CreateTopicsHandler()),
    20: Row(DeleteTopicsHandler()),
    21: Row(per_topic(Op.DELETE), note="low watermark -1 on denied partitions"),
    22: Row(InitProducerIdHandler()),
    23: Row(
        per_topic(
            Op.DESCRIBE,
            name=lambda t: t.topic,
            shortcut=cluster(Op.CLUSTER_ACTION, log_if_denied=False),
            doc_name="topic",
        )
    ),
    24: Row(AddPartitionsToTxnHandler()),
    25: Row(Whole((txn(Op.WRITE), group(Op.READ)))),
    26: Row(Whole((txn(Op.WRITE),))),
    28: Row(
        per_topic(Op.READ, pre=(txn(Op.WRITE), group(Op.READ))),
        note="transactional id or group denied: every partition 53 or 30",
    ),
    32: Row(
        DescribeConfigsHandler(),
        note="BROKER config values holding addresses (`listeners`, `advertised.listeners`, "
        "`*.listeners` and `listener.name.*` with a host:port, `controller.quorum.voters`, "
        "`controller.quorum.bootstrap.servers`, any value naming a real broker's host:port) come "
        "back as Kafka shows sensitive configs: value null, is_sensitive true, synonyms' values null",
    ),
    33: Row(
        AlterConfigsHandler(incremental=False),
        note="The broker's stateful pre-validation (BROKER resource name = this node, broker "
        "config values) cannot run in the proxy: a denied BROKER resource that Kafka would call "
        "invalid (42/40) gets 31",
    ),
    34: Row(
        WholeBuilt((cluster(Op.ALTER),), builder=alter_replica_log_dirs_error),
        note="denied: every partition of every (dir, topic) 31",
    ),
    35: Row(Whole((cluster(Op.DESCRIBE),), overrides={"results": ()})),
    37: Row(CreatePartitionsHandler()),
    42: Row(
        PerEntry(
            array="groups_names",
            response_array="results",
            operation=Op.DELETE,
            resource_type=Res.GROUP,
            name=lambda g: g,
            entry_key="group_id",
            doc_name="group_id",
        ),
        note="a denied group named twice gets two results (Kafka de-duplicates first)",
    ),
    43: Row(
        Whole(
            (cluster(Op.ALTER),),
            aliases={
                "replica_election_results": "topic_partitions",
                "partition_result": "partitions",
            },
        ),
        note="denied: top-level 31 (v1+) and every listed partition 31; null list (all "
        "partitions): no results",
    ),
    44: Row(
        AlterConfigsHandler(incremental=True),
        note="As AlterConfigs. BROKER_LOGGER is checked as a broker checks it; a controller "
        "(CLUSTER_ACTION) is never the proxy's upstream",
    ),
    45: Row(
        Whole((cluster(Op.ALTER),), aliases={"responses": "topics"}),
        note="denied: top-level 31 and every listed partition 31",
    ),
    46: Row(Whole((cluster(Op.DESCRIBE),))),
    47: Row(
        per_topic(
            Op.READ, pre=(group(Op.DELETE),), pre_overrides={"topics": ()}, forward_empty=True
        ),
        note="group denied: top-level 30, no topics; every topic denied: still forwarded (empty) "
        "for the group's own errors, as Kafka asks the coordinator",
    ),
    48: Row(Whole((cluster(Op.DESCRIBE_CONFIGS),))),
    49: Row(Whole((cluster(Op.ALTER_CONFIGS),))),
    50: Row(
        Whole((cluster(Op.DESCRIBE),), aliases={"results": "users"}),
        note="denied: top-level 31 and one result per requested user, its name empty as in "
        "Kafka; a null user list (all users): no results (Kafka fails building its answer)",
    ),
    51: Row(
        WholeBuilt((cluster(Op.ALTER),), builder=alter_user_scram_credentials_error),
        note="denied: one result per distinct user (deletions and upsertions), sorted, 31",
    ),
    57: Row(Whole((cluster(Op.ALTER),))),
    60: Row(DescribeClusterHandler()),
    61: Row(
        per_topic(Op.READ),
        note="an invalid topic name that is denied gets 29; Kafka checks the name first "
        "(INVALID_TOPIC_EXCEPTION, 17)",
    ),
    64: Row(Whole((cluster(Op.ALTER),))),
    65: Row(DescribeTransactionsHandler()),
    66: Row(ListTransactionsHandler()),
    68: Row(ConsumerGroupHeartbeatHandler()),
    69: Row(ConsumerGroupDescribeHandler()),
    71: Row(Unchecked(why="client telemetry, not authorized by Kafka")),
    72: Row(Unchecked(why="client telemetry, not authorized by Kafka")),
    74: Row(
        Whole((cluster(Op.DESCRIBE_CONFIGS),)),
        max_version=0,
        note="v1 (ListConfigResources, KIP-1142) is newer than the baseline and can list topic "
        "and group names; its checks are not in the spec table yet (fail closed)",
    ),
    75: Row(
        DescribeTopicPartitionsHandler(),
        note="all-topics: hidden topics still count towards the broker's page size, so pages "
        "can be short (or empty with a next cursor); a next cursor naming a hidden topic is "
        "sealed into an opaque token valid for this proxy process",
    ),
}


def advertised_versions(caps: Mapping[int, int] | None = None) -> dict[int, tuple[int, int]]:
    """What the proxy accepts and advertises: kio's range, only for keys with a row."""
    out = {}
    merged = dict(caps or {})
    for key, row in TABLE.items():
        if row.max_version is not None:
            merged[key] = min(merged.get(key, row.max_version), row.max_version)
    for key, span in allowed_versions(merged).items():
        if key in TABLE:
            out[key] = span
    return out


def handlers() -> dict[int, ApiHandler]:
    return {key: row.handler for key, row in TABLE.items()}


def render_docs() -> str:
    """docs/apis.md: the table as users read it."""
    lines = [
        "# Kafka APIs and how aclgate authorizes them",
        "",
        "Generated from `protocol/enforce/table.py` by `python -m protocol.enforce.table > docs/apis.md`;",
        "a test fails when this file and the table disagree. Checks follow Apache Kafka's broker",
        "(KafkaApis / ControllerApis, KRaft); the cluster resource is `kafka-cluster`. Error codes:",
        "29 TOPIC_AUTHORIZATION_FAILED, 30 GROUP_AUTHORIZATION_FAILED, 31 CLUSTER_AUTHORIZATION_FAILED,",
        "53 TRANSACTIONAL_ID_AUTHORIZATION_FAILED.",
        "",
        "| Key | API | Checks, in order | Granularity | Notes |",
        "|---:|---|---|---|---|",
    ]
    for key in sorted(TABLE):
        row = TABLE[key]
        note = row.note
        if row.max_version is not None:
            note = f"served up to v{row.max_version}. {note}".strip()
        lines.append(
            f"| {key} | {API_NAMES[key]} | {row.handler.describe()} | {row.handler.granularity} | {note} |"
        )
    lines += [
        "",
        "## Not advertised, and closed on if sent",
        "",
        "| Key | API | Why |",
        "|---:|---|---|",
    ]
    for key in sorted(set(API_NAMES) - set(TABLE)):
        why = BLOCKED.get(key, "not yet authorized by aclgate (fail closed)")
        lines.append(f"| {key} | {API_NAMES[key]} | {why} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_docs())
