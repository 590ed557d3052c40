"""THE API table: every API key the proxy serves, with the checks Kafka's broker makes for it.

This is data. `handlers()` gives the session its dispatch table, `advertised_versions()` what
ApiVersions may announce (an API without a row here is never advertised and is closed on if
sent), and `docs/apis.md` is generated from it (`python -m aclgate.protocol.enforce.table`; a test
keeps the file in step). Rows follow Kafka's KafkaApis/ControllerApis (docs/authz.md, "Which
checks a request gets").
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypedDict, Unpack

from aclgate.authz.model import AclOperation, ResourceType
from aclgate.protocol.apikeys import ApiKey
from aclgate.protocol.enforce.acls import (
    CreateAclsHandler,
    DeleteAclsHandler,
    DescribeAclsHandler,
    acl_admin_authorized,
    denied_creation,
    denied_filter,
)
from aclgate.protocol.enforce.admin import (
    CreateTopicsHandler,
    DeleteTopicsHandler,
    DescribeClusterHandler,
)
from aclgate.protocol.enforce.base import (
    ApiHandler,
    Check,
    DecidedOnHeader,
    HeaderCheck,
    HeaderDecided,
    KioBody,
    PerEntry,
    Unchecked,
    Whole,
)
from aclgate.protocol.enforce.build import Aliases
from aclgate.protocol.enforce.configs import AlterConfigsHandler, DescribeConfigsHandler
from aclgate.protocol.enforce.data import FetchHandler, ProduceHandler
from aclgate.protocol.enforce.denied_bytes import Mirror, MirroredCheck
from aclgate.protocol.enforce.entrybytes import EntriesAsBytes
from aclgate.protocol.enforce.groupfirst import GroupFirst
from aclgate.protocol.enforce.groups import (
    ConsumerGroupHeartbeatHandler,
    FindCoordinatorHandler,
    GroupDescriptions,
    OffsetFetchHandler,
    consumer_group_describe_answer,
    describe_groups_answer,
    group_entries,
    modern_group_entries,
)
from aclgate.protocol.enforce.listing import FilteredAnswer
from aclgate.protocol.enforce.metadata import MetadataHandler
from aclgate.protocol.enforce.offsets import ListOffsetsHandler
from aclgate.protocol.enforce.partitions import (
    CreatePartitionsHandler,
    DescribeTopicPartitionsHandler,
)
from aclgate.protocol.enforce.sharegroups import (
    DescribeShareGroupOffsetsHandler,
    ShareAcknowledgeHandler,
    ShareFetchHandler,
    ShareGroupHeartbeatHandler,
    StreamsGroupHeartbeatHandler,
    share_or_streams_answer,
)
from aclgate.protocol.enforce.txn import AddPartitionsToTxnHandler, InitProducerIdHandler
from aclgate.protocol.enforce.txnadmin import DescribeTransactionsHandler
from aclgate.protocol.routing import BLOCKED, allowed_versions
from aclgate.protocol.shapes.requests import (
    AddOffsetsToTxnRequest,
    AlterShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequest,
    EndTxnRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)
from aclgate.protocol.versions import API_NAMES

Op, Res = AclOperation, ResourceType


#: the requests of the rows below whose `group` check names the request's `group_id`
GroupRequest = (
    OffsetCommitRequest
    | JoinGroupRequest
    | HeartbeatRequest
    | LeaveGroupRequest
    | SyncGroupRequest
    | AddOffsetsToTxnRequest
    | TxnOffsetCommitRequest
    | OffsetDeleteRequest
    | AlterShareGroupOffsetsRequest
    | DeleteShareGroupOffsetsRequest
)
#: the requests of the rows below whose `txn` check names the request's `transactional_id`
TxnRequest = AddOffsetsToTxnRequest | EndTxnRequest | TxnOffsetCommitRequest


def _group(r: GroupRequest) -> str:
    return r.group_id


def _txn(r: TxnRequest) -> str:
    return r.transactional_id


def cluster(op: AclOperation, log_if_denied: bool = True) -> Check:
    return Check(op, Res.CLUSTER, log_if_denied=log_if_denied)


def group(op: AclOperation) -> Check:
    return Check(op, Res.GROUP, _group, doc_name="group_id")


def txn(op: AclOperation) -> Check:
    return Check(op, Res.TRANSACTIONAL_ID, _txn, doc_name="transactional_id")


@dataclass(frozen=True)
class Row:
    """One API: the request versions it is served at, and how it is authorized.

    `versions` are the versions whose checks this row was written and tested for; a newer
    version (say, after a kio upgrade) is not served until someone adds it here, since a new
    version can carry new resources (fail closed). The range is also clipped to what kio
    parses and to operator caps (`advertised_versions`)."""

    versions: tuple[int, int]
    handler: ApiHandler
    note: str = ""
    #: answered by the proxy itself, never forwarded: advertised whether or not the cluster
    #: serves the API (`local_versions`)
    local: bool = False
    #: Kafka's check of the request as a whole, made before any entry is read: decided on
    #: the header, and a denied request answered without decoding its body
    header_check: HeaderDecided | None = None


def cluster_only(
    versions: tuple[int, int], op: AclOperation, mirror: Mirror | None = None, note: str = ""
) -> Row:
    """An API Kafka checks on the cluster as a whole, before any entry: decided on the
    header, the denied answer rendered from the request's bytes as `mirror` says
    (protocol/enforce/denied_bytes.py); the `Whole` names the check in docs/apis.md."""
    return Row(
        versions,
        Whole((cluster(op),)),
        note=note,
        header_check=MirroredCheck(op, mirror or Mirror()),
    )


class PerEntryOptions(TypedDict, total=False):
    """The optional fields of `PerEntry` a row may set."""

    name: Callable[[KioBody], str | None]
    pre: tuple[Check, ...]
    aliases: Aliases | None
    entry_overrides: dict[str, object]
    shortcut: Check | None
    log_if_denied: bool
    granularity: str
    doc_name: str
    entry_key: str | None
    pre_overrides: dict[str, object]
    forward_empty: bool


def per_topic(
    op: AclOperation,
    array: str = "topics",
    response_array: str = "topics",
    **kw: Unpack[PerEntryOptions],
) -> PerEntry:
    return EntriesAsBytes(
        array=array, response_array=response_array, operation=op, resource_type=Res.TOPIC, **kw
    )


TABLE: dict[ApiKey, Row] = {
    ApiKey.PRODUCE: Row((3, 13), ProduceHandler()),
    ApiKey.FETCH: Row((4, 18), FetchHandler()),
    ApiKey.LIST_OFFSETS: Row(
        (1, 11),
        ListOffsetsHandler("topics", "topics", Op.DESCRIBE, Res.TOPIC),
        note="offset, timestamp and leader epoch -1 on denied partitions",
    ),
    ApiKey.METADATA: Row((0, 13), MetadataHandler()),
    ApiKey.OFFSET_COMMIT: Row(
        (2, 10),
        per_topic(Op.READ, pre=(group(Op.READ),)),
        note="group denied: every partition 30; topic denied: its partitions 29",
    ),
    ApiKey.OFFSET_FETCH: Row((1, 10), OffsetFetchHandler()),
    ApiKey.FIND_COORDINATOR: Row((0, 6), FindCoordinatorHandler()),
    ApiKey.JOIN_GROUP: Row((0, 9), GroupFirst((group(Op.READ),))),
    ApiKey.HEARTBEAT: Row((0, 4), GroupFirst((group(Op.READ),))),
    ApiKey.LEAVE_GROUP: Row(
        (0, 5),
        GroupFirst((group(Op.READ),), overrides={"members": ()}),
        note="denied: top-level 30, no member results (v3+), as LeaveGroupRequest.getErrorResponse",
    ),
    ApiKey.SYNC_GROUP: Row((0, 5), GroupFirst((group(Op.READ),))),
    ApiKey.DESCRIBE_GROUPS: Row(
        (0, 6),
        GroupDescriptions(
            group_entries("groups"),
            describe_groups_answer,
            "v3+ authorized operations computed for the client",
            ops_on_request=True,
        ),
    ),
    ApiKey.LIST_GROUPS: Row(
        (0, 5),
        FilteredAnswer(
            "groups",
            "group_id",
            Check(Op.DESCRIBE, Res.GROUP, log_if_denied=False, doc_name="group_id"),
            shortcut=cluster(Op.DESCRIBE, log_if_denied=False),
        ),
    ),
    ApiKey.API_VERSIONS: Row(
        (0, 4),
        Unchecked(why="before authentication; the answer is trimmed to what the proxy serves"),
    ),
    ApiKey.CREATE_TOPICS: Row((2, 7), CreateTopicsHandler()),
    ApiKey.DELETE_TOPICS: Row((1, 6), DeleteTopicsHandler()),
    ApiKey.DELETE_RECORDS: Row(
        (0, 2), per_topic(Op.DELETE), note="low watermark -1 on denied partitions"
    ),
    ApiKey.INIT_PRODUCER_ID: Row((0, 6), InitProducerIdHandler()),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Row(
        (2, 4),
        per_topic(
            Op.DESCRIBE,
            name=lambda t: t.topic,
            shortcut=cluster(Op.CLUSTER_ACTION, log_if_denied=False),
            doc_name="topic",
        ),
    ),
    ApiKey.ADD_PARTITIONS_TO_TXN: Row((0, 5), AddPartitionsToTxnHandler()),
    ApiKey.ADD_OFFSETS_TO_TXN: Row((0, 4), Whole((txn(Op.WRITE), group(Op.READ)))),
    ApiKey.END_TXN: Row((0, 5), Whole((txn(Op.WRITE),))),
    ApiKey.TXN_OFFSET_COMMIT: Row(
        (0, 5),
        per_topic(Op.READ, pre=(txn(Op.WRITE), group(Op.READ))),
        note="transactional id or group denied: every partition 53 or 30",
    ),
    ApiKey.DESCRIBE_ACLS: Row(
        (1, 3),
        DescribeAclsHandler(),
        note="served by aclgate from its own ACLs, never forwarded (forwarded, it would act "
        "with the proxy's identity); the cluster check is enforced in dry-run mode too",
        local=True,
    ),
    ApiKey.CREATE_ACLS: Row(
        (1, 3),
        CreateAclsHandler(),
        note='changes aclgate\'s ACL store (docs/authz.md, "Managing ACLs"), never forwarded',
        local=True,
        header_check=HeaderCheck(Op.ALTER, "results", denied_creation, decide=acl_admin_authorized),
    ),
    ApiKey.DELETE_ACLS: Row(
        (1, 3),
        DeleteAclsHandler(),
        note="changes aclgate's ACL store, never forwarded; matched ACLs in Kafka's listing order",
        local=True,
        header_check=HeaderCheck(
            Op.ALTER, "filter_results", denied_filter, decide=acl_admin_authorized
        ),
    ),
    ApiKey.DESCRIBE_CONFIGS: Row(
        (1, 4),
        DescribeConfigsHandler(),
        note="BROKER config values holding addresses (`listeners`, `advertised.listeners`, "
        "`*.listeners` and `listener.name.*` with a host:port, `controller.quorum.voters`, "
        "`controller.quorum.bootstrap.servers`, any value naming a real broker's host:port) come "
        "back as Kafka shows sensitive configs: value null, is_sensitive true, synonyms' values null",
    ),
    ApiKey.ALTER_CONFIGS: Row(
        (0, 2),
        AlterConfigsHandler(incremental=False),
        note="The broker's stateful pre-validation (BROKER resource name = this node, broker "
        "config values) cannot run in the proxy: a denied BROKER resource that Kafka would call "
        "invalid (42/40) gets 31",
    ),
    ApiKey.ALTER_REPLICA_LOG_DIRS: cluster_only(
        (1, 2),
        Op.ALTER,
        Mirror(aliases={"topic_name": "name"}, sources={"results": (("dirs", "topics"),)}),
        note="denied: every partition of every (dir, topic) 31",
    ),
    ApiKey.DESCRIBE_LOG_DIRS: cluster_only((1, 5), Op.DESCRIBE, Mirror(overrides={"results": ()})),
    ApiKey.CREATE_PARTITIONS: Row((0, 3), CreatePartitionsHandler()),
    ApiKey.DELETE_GROUPS: Row(
        (0, 2),
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
    ApiKey.ELECT_LEADERS: cluster_only(
        (0, 2),
        Op.ALTER,
        Mirror(
            aliases={
                "replica_election_results": "topic_partitions",
                "partition_result": "partitions",
            }
        ),
        note="denied: top-level 31 (v1+) and every listed partition 31; null list (all "
        "partitions): no results",
    ),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Row(
        (0, 1),
        AlterConfigsHandler(incremental=True),
        note="As AlterConfigs. BROKER_LOGGER is checked as a broker checks it; a controller "
        "(CLUSTER_ACTION) is never the proxy's upstream",
    ),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: cluster_only(
        (0, 1),
        Op.ALTER,
        Mirror(aliases={"responses": "topics"}),
        note="denied: top-level 31 and every listed partition 31",
    ),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: cluster_only((0, 0), Op.DESCRIBE),
    ApiKey.OFFSET_DELETE: Row(
        (0, 0),
        per_topic(
            Op.READ, pre=(group(Op.DELETE),), pre_overrides={"topics": ()}, forward_empty=True
        ),
        note="group denied: top-level 30, no topics; every topic denied: still forwarded (empty) "
        "for the group's own errors, as Kafka asks the coordinator",
    ),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: cluster_only((0, 1), Op.DESCRIBE_CONFIGS),
    ApiKey.ALTER_CLIENT_QUOTAS: cluster_only((0, 1), Op.ALTER_CONFIGS),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: cluster_only(
        (0, 0),
        Op.DESCRIBE,
        Mirror(aliases={"results": "users"}),
        note="denied: top-level 31 and one result per requested user, its name empty as in "
        "Kafka; a null user list (all users): no results (Kafka fails building its answer)",
    ),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: cluster_only(
        (0, 0),
        Op.ALTER,
        Mirror(
            aliases={"user": "name"},
            sources={"results": (("deletions",), ("upsertions",))},
            unique=frozenset({"results"}),
        ),
        note="denied: one result per distinct user (deletions and upsertions), sorted, 31",
    ),
    ApiKey.UPDATE_FEATURES: cluster_only((0, 2), Op.ALTER),
    ApiKey.DESCRIBE_CLUSTER: Row((0, 2), DescribeClusterHandler()),
    ApiKey.DESCRIBE_PRODUCERS: Row(
        (0, 0),
        per_topic(Op.READ),
        note="an invalid topic name that is denied gets 29; Kafka checks the name first "
        "(INVALID_TOPIC_EXCEPTION, 17)",
    ),
    ApiKey.UNREGISTER_BROKER: cluster_only((0, 0), Op.ALTER),
    ApiKey.DESCRIBE_TRANSACTIONS: Row((0, 0), DescribeTransactionsHandler()),
    ApiKey.LIST_TRANSACTIONS: Row(
        (0, 2),
        FilteredAnswer(
            "transaction_states",
            "transactional_id",
            Check(Op.DESCRIBE, Res.TRANSACTIONAL_ID, doc_name="transactional_id"),
        ),
    ),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: Row((0, 1), ConsumerGroupHeartbeatHandler()),
    ApiKey.CONSUMER_GROUP_DESCRIBE: Row(
        (0, 1),
        GroupDescriptions(
            modern_group_entries(),
            consumer_group_describe_answer,
            "a group naming a topic the principal may not DESCRIBE becomes error 29 (Kafka "
            "4.0+); authorized operations computed for the client",
            ops_on_request=False,
        ),
    ),
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: Row(
        (0, 0), Unchecked(why="client telemetry, not authorized by Kafka")
    ),
    ApiKey.PUSH_TELEMETRY: Row((0, 0), Unchecked(why="client telemetry, not authorized by Kafka")),
    ApiKey.LIST_CONFIG_RESOURCES: cluster_only(
        (0, 0),
        Op.DESCRIBE_CONFIGS,
        note="v1 (ListConfigResources, KIP-1142) can list topic and group names; its checks are "
        "not in aclgate's API table yet (fail closed)",
    ),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: Row(
        (0, 0),
        DescribeTopicPartitionsHandler(),
        note="all-topics: Kafka's pages, from at most 1 + 4 broker pages per request; past "
        "that a page can be short (or empty with a next cursor), and a next cursor naming a "
        "hidden topic is sealed into an opaque token valid for this proxy process",
    ),
    # share groups (KIP-932) and streams groups (KIP-1071): protocol/enforce/sharegroups.py
    ApiKey.SHARE_GROUP_HEARTBEAT: Row((1, 1), ShareGroupHeartbeatHandler()),
    ApiKey.SHARE_GROUP_DESCRIBE: Row(
        (1, 1),
        GroupDescriptions(
            modern_group_entries(),
            share_or_streams_answer,
            "a group whose members' assignments name a topic the principal may not `DESCRIBE` "
            "becomes error 29 with no members; authorized operations computed for the client",
            ops_on_request=False,
        ),
    ),
    ApiKey.SHARE_FETCH: Row(
        (1, 2),
        ShareFetchHandler(),
        note="share sessions are kept per connection: a session this connection did not open "
        "is answered 122 (SHARE_SESSION_NOT_FOUND) so the client opens one here",
    ),
    ApiKey.SHARE_ACKNOWLEDGE: Row((1, 2), ShareAcknowledgeHandler()),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: Row(
        (0, 1),
        DescribeShareGroupOffsetsHandler(),
    ),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: Row(
        (0, 0),
        per_topic(
            Op.READ,
            response_array="responses",
            name=lambda t: t.topic_name,
            pre=(group(Op.READ),),
            pre_overrides={"responses": (), "error_message": "Group authorization failed."},
            entry_overrides={"topic_id": uuid.UUID(int=0)},
            forward_empty=True,
            doc_name="topic_name",
        ),
        note="denied topics' partitions 29 with a zero topic id (Kafka fills in the id)",
    ),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: Row(
        (0, 0),
        per_topic(
            Op.READ,
            response_array="responses",
            name=lambda t: t.topic_name,
            pre=(group(Op.DELETE),),
            pre_overrides={"responses": (), "error_message": "Group authorization failed."},
            entry_overrides={"error_message": "Topic authorization failed."},
            forward_empty=True,
            doc_name="topic_name",
        ),
    ),
    ApiKey.STREAMS_GROUP_HEARTBEAT: Row(
        (0, 0),
        StreamsGroupHeartbeatHandler(),
        note="Kafka creates missing internal topics after the coordinator asks, checking CREATE "
        "then; the proxy asks CREATE on them up front, even if they exist, since the broker would "
        "create them as the proxy (denied: 29 with Kafka's message, not a status)",
    ),
    ApiKey.STREAMS_GROUP_DESCRIBE: Row(
        (0, 0),
        GroupDescriptions(
            modern_group_entries(),
            share_or_streams_answer,
            "a group whose topology names a topic the principal may not `DESCRIBE` becomes "
            "error 29 with no members; authorized operations computed for the client",
            ops_on_request=False,
        ),
    ),
}


MiB = 1 << 20
#: ACLs, group coordination, configs, admin, and the requests that list partitions (offsets,
#: reassignments, leader elections): 1 MiB holds some 50,000 partitions or topic names, more
#: than one client asks one broker about at once
SMALL = 1 * MiB
#: JoinGroup, whose bulk is a few opaque fields (each protocol's subscription, with the
#: partitions a member owns): large groups send MiBs, cheap to decode per byte
LARGE = 8 * MiB
#: APIs whose legitimate requests carry records or a whole group's assignments: they keep
#: `--max-frame-bytes` (100 MiB) alone
FRAME_LIMIT_ONLY = frozenset({ApiKey.PRODUCE, ApiKey.SYNC_GROUP})
#: the APIs whose limit is not SMALL: JoinGroup; the quota, SCRAM and feature APIs and
#: DeleteTopics, DeleteGroups, DescribeConfigs (below);
#: Metadata and ListOffsets, which any client
#: may send and whose every named topic is checked and recorded in the request's own loop
#: turn: 256 KiB holds some 9,000 topic names, or some 15,000 partitions of one broker in a
#: ListOffsets, and an all-denied one at that size holds the loop 20-80 ms even when sent
#: again and again (bench/results/loop_stall.md; at 512 KiB 45-240 ms, at 1 MiB 104-230 ms)
OTHER_LIMITS: dict[ApiKey, int] = {
    ApiKey.JOIN_GROUP: LARGE,
    ApiKey.METADATA: SMALL // 4,
    # the admin client's describeTopics names every topic at once, as Metadata does; 1 MiB
    # (87,000 names) held the loop 82 ms in its first turn (decode, sort) in process
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: SMALL // 4,
    ApiKey.LIST_OFFSETS: SMALL // 4,
    # cluster-only APIs naming a few quota entities, users or features, not partitions: their
    # denied answer mirrors every entry (protocol/enforce/denied_bytes.py), 45-50 ms of CPU
    # for 50,000-80,000 of them at 1 MiB, 102-125 ms stalls on a busy machine
    **dict.fromkeys(
        (
            ApiKey.DESCRIBE_CLIENT_QUOTAS,
            ApiKey.ALTER_CLIENT_QUOTAS,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
            ApiKey.UPDATE_FEATURES,
            ApiKey.UNREGISTER_BROKER,
            ApiKey.LIST_CONFIG_RESOURCES,
        ),
        SMALL // 4,
    ),
    # admin requests naming topics, groups or config resources one by one, each denied one
    # authorized (DeleteTopics twice) and answered: 260-460 ms of CPU for 37,000-95,000 at
    # 1 MiB with the answers rendered as bytes, most of it decoding and one authorization
    # per name; 256 KiB holds some 9,000 topic names, more than a tool deletes or describes
    # at once (Metadata's limit, which the same tools send first)
    **dict.fromkeys(
        (ApiKey.DELETE_TOPICS, ApiKey.DELETE_GROUPS, ApiKey.DESCRIBE_CONFIGS), SMALL // 4
    ),
    # admin requests whose denied entries are still built one by one (issue 20's sweep of
    # every API at its limit, worst loop turn in process at 1 MiB: AlterConfigs 520 ms,
    # IncrementalAlterConfigs 488, DescribeTransactions 882, DescribeShareGroupOffsets 360,
    # CreatePartitions 340, CreateTopics 148, StreamsGroupHeartbeat 114, AlterReplicaLogDirs
    # 88, AddPartitionsToTxn 72): limits that hold each within some 35 ms and the hundreds to
    # thousands of entries a tool sends at once (docs/design.md, "Per-API request size limits")
    **dict.fromkeys(
        (
            ApiKey.ALTER_CONFIGS,
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            ApiKey.CREATE_PARTITIONS,
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
        ),
        SMALL // 16,
    ),
    ApiKey.DESCRIBE_TRANSACTIONS: SMALL // 32,
    # consumers' requests name partitions, not records: 512 KiB holds some 15,000 partitions
    # of one broker in a full fetch; a request the peek does not follow (a tagged field) is
    # decoded whole, 115 ms at 1 MiB, 58 at 512 KiB (issue 20's sweep)
    **dict.fromkeys((ApiKey.FETCH, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE), SMALL // 2),
    **dict.fromkeys(
        (
            ApiKey.CREATE_TOPICS,
            ApiKey.STREAMS_GROUP_HEARTBEAT,
            ApiKey.ALTER_REPLICA_LOG_DIRS,
            ApiKey.ADD_PARTITIONS_TO_TXN,
        ),
        SMALL // 4,
    ),
}

#: The largest request of each API the proxy reads: SMALL for every API of the table (one
#: added later too) but OTHER_LIMITS and FRAME_LIMIT_ONLY; `--max-request-bytes
#: API=BYTES` changes one. Kafka has one limit for every API (socket.request.max.bytes); these
#: keep one client's request from holding the event loop every client of the worker shares,
#: since a request is decoded and checked entry by entry in one go (denied entries answered
#: one by one cost some 10-25 µs each: docs/design.md, "Per-API request size limits"). A
#: larger request is refused from its first 6 bytes, before it is read, and the connection
#: closed, as Kafka closes on a frame over its limit.
MAX_REQUEST_BYTES: dict[ApiKey, int] = {
    key: OTHER_LIMITS.get(key, SMALL) for key in TABLE if key not in FRAME_LIMIT_ONLY
}


def _size(limit: int) -> str:
    return f"{limit // MiB} MiB" if limit % MiB == 0 else f"{limit // 1024} KiB"


def request_limits(overrides: Mapping[int, int] | None = None) -> dict[int, int]:
    """api_key -> the largest request the proxy reads: `MAX_REQUEST_BYTES`, then the
    operator's `--max-request-bytes` overrides."""
    return {int(key): size for key, size in MAX_REQUEST_BYTES.items()} | dict(overrides or {})


def advertised_versions(caps: Mapping[int, int] | None = None) -> dict[int, tuple[int, int]]:
    """What the proxy accepts and advertises: each row's versions, within kio's range and
    the operator's caps."""
    parsed = allowed_versions(caps)
    out = {}
    for key, row in TABLE.items():
        if key not in parsed:
            continue
        lo, hi = max(row.versions[0], parsed[key][0]), min(row.versions[1], parsed[key][1])
        if lo <= hi:
            out[int(key)] = (lo, hi)
    return out


def local_versions(caps: Mapping[int, int] | None = None) -> dict[int, tuple[int, int]]:
    """The part of `advertised_versions` the proxy answers itself (the ACL Admin API)."""
    advertised = advertised_versions(caps)
    return {int(k): advertised[int(k)] for k, row in TABLE.items() if row.local and k in advertised}


def handlers() -> dict[int, ApiHandler | DecidedOnHeader]:
    """The session's dispatch table: each row's handler, behind its header check if any."""
    return {
        int(key): row.handler
        if row.header_check is None
        else DecidedOnHeader(row.header_check, row.handler)
        for key, row in TABLE.items()
    }


def render_docs() -> str:
    """docs/apis.md: the table as users read it."""
    lines = [
        "# Kafka APIs and how aclgate authorizes them",
        "",
        "Generated from `protocol/enforce/table.py` by `python -m aclgate.protocol.enforce.table > docs/apis.md`;",
        "a test fails when this file and the table disagree. Checks follow Apache Kafka's broker",
        "(KafkaApis / ControllerApis, KRaft); the cluster resource is `kafka-cluster`. Error codes:",
        "29 TOPIC_AUTHORIZATION_FAILED, 30 GROUP_AUTHORIZATION_FAILED, 31 CLUSTER_AUTHORIZATION_FAILED,",
        "53 TRANSACTIONAL_ID_AUTHORIZATION_FAILED. The share and streams group rows (keys 76-79,",
        "88-92) follow `handleShareGroupHeartbeat`, `handleShareFetchRequest` and their neighbours in",
        "KafkaApis.scala of Apache Kafka 4.3.1 (public source: github.com/apache/kafka, tag 4.3.1).",
        "Max request: the largest request of the API the proxy reads (`--max-request-bytes",
        "API=BYTES` changes it; larger ones close the connection, as Kafka closes on a frame over",
        "socket.request.max.bytes); Kafka has one limit for all APIs (docs/design.md).",
        "",
        "| Key | API | Versions | Checks, in order | Granularity | Max request | Notes |",
        "|---:|---|---|---|---|---|---|",
    ]
    for key in sorted(TABLE):
        row = TABLE[key]
        lo, hi = row.versions
        checks = row.handler.describe()
        if row.header_check is not None:
            checks += "; the cluster check is decided from the request header, before any entry"
        limit = MAX_REQUEST_BYTES.get(key)
        size = _size(limit) if limit else "`--max-frame-bytes`"
        lines.append(
            f"| {int(key)} | {API_NAMES[key]} | {lo}-{hi} | {checks} "
            f"| {row.handler.granularity} | {size} | {row.note} |"
        )
    lines += [
        "",
        "## Not advertised, and closed on if sent",
        "",
        "| Key | API | Why |",
        "|---:|---|---|",
    ]
    for missing in sorted(set(API_NAMES) - set(TABLE)):
        why = BLOCKED.get(missing, "not yet authorized by aclgate (fail closed)")
        lines.append(f"| {missing} | {API_NAMES[missing]} | {why} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_docs())
