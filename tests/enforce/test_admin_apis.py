"""Every row of the API table through the real proxy in front of a scripted broker.

For each API key: a request from a principal with no ACL at all gets exactly the answer Kafka's
broker would give (decoded client-side with RawClient), and nothing of it reaches the broker;
the same request from an allowed principal is forwarded. Then the partial cases of the config,
cluster-admin, transaction-admin and DescribeTopicPartitions rows: mixed decisions, the
broker's pre-validation order, address redaction, cursor paging.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from aclgate.authz.aclfile import dump_acl_file
from aclgate.authz.model import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from aclgate.protocol.apikeys import ApiKey
from aclgate.protocol.codec import encode_response
from aclgate.protocol.enforce.build import build
from aclgate.protocol.enforce.table import TABLE, render_docs
from aclgate.protocol.versions import request_class, response_class, response_module
from aclgate.proxy.listen.server import ProxyServer
from tests.fixtures.proxy import RunningProxy, make_config
from tests.fixtures.rawclient import RawClient, module
from tests.fixtures.scripted_broker import ScriptedCluster, _defaults

ANON = "User:ANONYMOUS"
E = ErrorCode
TOPIC_MSG, GROUP_MSG, CLUSTER_MSG = (
    "Topic authorization failed.",
    "Group authorization failed.",
    "Cluster authorization failed.",
)
REPO = Path(__file__).resolve().parents[2]


def allow(rtype: ResourceType, name: str, op: AclOperation = AclOperation.ALL) -> AclBinding:
    return AclBinding(rtype, name, PatternType.LITERAL, ANON, "*", op, AclPermissionType.ALLOW)


#: ACL profiles. None: no ACL file and allow.everyone.if.no.acl.found (everything allowed).
PROFILES: dict[str, list[AclBinding] | None] = {
    "open": None,
    # an ACL for somebody else only: every check of ANONYMOUS is denied
    "none": [
        AclBinding(
            ResourceType.TOPIC,
            "x",
            PatternType.LITERAL,
            "User:other",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
    ],
    "partial": [
        allow(ResourceType.TOPIC, "ok"),
        allow(ResourceType.TOPIC, "zz"),
        allow(ResourceType.GROUP, "g-ok"),
        allow(ResourceType.TRANSACTIONAL_ID, "tx-ok"),
    ],
    "cluster": [allow(ResourceType.CLUSTER, "kafka-cluster")],
}
#: profiles that run in another mode, with the ACLs of the profile named second
MODES = {"dry": ("dry-run", "none")}


# ------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def cluster():
    with ScriptedCluster([1, 2]) as c:
        yield c


@pytest.fixture(scope="module")
def proxies(cluster, tmp_path_factory):
    started: dict[str, RunningProxy] = {}

    def get(profile: str) -> RunningProxy:
        if profile not in started:
            mode, acl_profile = MODES.get(profile, ("enforce", profile))
            acls = PROFILES[acl_profile]
            overrides: dict[str, Any] = {"mode": mode}
            if acls is not None:
                path = tmp_path_factory.mktemp("acls") / f"{profile}.json"
                path.write_text(dump_acl_file(acls))
                overrides.update(acl_file=path, allow_everyone_if_no_acl_found=False)
            config = make_config(cluster.bootstrap, **overrides)
            started[profile] = RunningProxy(ProxyServer(config))
        return started[profile]

    yield get
    for p in started.values():
        p.stop()


@dataclass
class Env:
    cluster: ScriptedCluster
    proxies: Callable[[str], RunningProxy]

    def call(self, profile: str, body: Any) -> Any:
        with RawClient(self.proxies(profile).bootstrap) as client:
            return client.request(body)

    def reached(self, api_key: int) -> list[Any]:
        return [r for n in self.cluster.nodes for h, r in list(n.requests) if h.api_key == api_key]

    def script(self, api_key: int, fn) -> None:
        for node in self.cluster.nodes:
            node.script[api_key] = fn


@pytest.fixture
def env(cluster, proxies) -> Env:
    for node in cluster.nodes:
        node.requests.clear()
        node.script.clear()
    return Env(cluster, proxies)


# ------------------------------------------------------------------------------- helpers


def req(key: int, version: int, **fields: Any) -> Any:
    return _defaults(request_class(key, version), **fields)


def sub(api_key: int, version: int, cls: str, **fields: Any) -> Any:
    return _defaults(getattr(module(api_key, version), cls), **fields)


def answer_with(build_body: Callable[[Any, Any], Any]):
    """A broker script answering `build_body(header, request)`."""

    def script(node, header, request):
        return encode_response(header.correlation_id, build_body(header, request))

    return script


def echo(node, header, request):
    """The broker's success answer, mirroring the request (every error code 0)."""
    cls = response_class(header.api_key, header.api_version)
    if header.api_key == 15:  # groups named by plain strings
        mod = response_module(15, header.api_version)
        groups = tuple(_defaults(mod.DescribedGroup, group_id=g) for g in request.groups)
        return encode_response(header.correlation_id, _defaults(cls, groups=groups))
    aliases = ECHO_ALIASES.get(header.api_key)
    return encode_response(header.correlation_id, build(cls, E.none, request, aliases))


#: response array <- request array, where a broker's answer mirrors one named differently
ECHO_ALIASES = {
    33: {"responses": "resources"},
    44: {"responses": "resources"},
    37: {"results": "topics"},
}


def plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    return value


def like(actual: Any, expected: Any, path: str = "") -> None:
    """`actual` has every field of `expected` with that value; lists match element-wise."""
    actual = plain(actual)
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: {actual!r}"
        for key, value in expected.items():
            assert key in actual, f"{path}.{key} missing in {actual!r}"
            like(actual[key], value, f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), (
            f"{path}: {actual!r} != {expected!r}"
        )
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            like(a, e, f"{path}[{i}]")
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def td(ms: int = 0):
    return i32Timedelta.parse(timedelta(milliseconds=ms))


# ------------------------------------------------------------ one request per API key


@dataclass
class Case:
    """A request, and what the client must get back when ANONYMOUS has no ACL at all."""

    request: Callable[[], Any]
    expected: dict
    #: False: nothing of this API key may reach the broker. True: forwarded (never-error
    #: APIs), then `script` answers and `expected` describes the filtered answer.
    forwarded: bool = False
    script: Any = None
    #: for forwarded denials: what the broker must not have been asked
    leak: Callable[[Any], bool] | None = None


def _produce():
    return req(
        0,
        12,
        acks=i16(-1),
        timeout=td(1000),
        topic_data=(
            sub(
                0,
                12,
                "TopicProduceData",
                name="t",
                partition_data=(sub(0, 12, "PartitionProduceData", index=i32(0), records=None),),
            ),
        ),
    )


def _fetch():
    return req(
        1,
        12,
        replica_id=i32(-1),
        max_wait=td(0),
        session_epoch=i32(-1),
        max_bytes=i32(1 << 20),
        topics=(
            sub(
                1,
                12,
                "FetchTopic",
                topic="t",
                partitions=(
                    sub(
                        1,
                        12,
                        "FetchPartition",
                        partition=i32(0),
                        current_leader_epoch=i32(-1),
                        last_fetched_epoch=i32(-1),
                        log_start_offset=i64(7),
                        partition_max_bytes=i32(1 << 20),
                    ),
                ),
            ),
        ),
    )


def _topic_partitions(key, v, topic_cls, part_cls, name="t", name_field="name", **part):
    return (
        sub(
            key,
            v,
            topic_cls,
            **{name_field: name},
            partitions=(sub(key, v, part_cls, **part),),
        ),
    )


def _metadata():
    return req(
        3,
        12,
        topics=(sub(3, 12, "MetadataRequestTopic", name="t", topic_id=None),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def _config_resources(key, v, cls, configs_cls=None, **config):
    resources = []
    for rtype, name in ((2, "t"), (4, "1"), (32, "g")):
        fields: dict[str, Any] = {"resource_type": i8(rtype), "resource_name": name}
        if configs_cls is not None:
            fields["configs"] = (sub(key, v, configs_cls, **config),)
        else:
            fields["configuration_keys"] = None
        resources.append(sub(key, v, cls, **fields))
    return tuple(resources)


def _denied_config_results(with_configs: bool) -> list[dict]:
    out = []
    for rtype, name, code, msg in (
        (2, "t", 29, TOPIC_MSG),
        (4, "1", 31, CLUSTER_MSG),
        (32, "g", 30, GROUP_MSG),
    ):
        entry = {
            "error_code": code,
            "error_message": msg,
            "resource_type": rtype,
            "resource_name": name,
        }
        if with_configs:
            entry["configs"] = []
        out.append(entry)
    return out


def _list_groups_answer(header, request):
    mod = response_module(16, header.api_version)
    groups = tuple(
        _defaults(mod.ListedGroup, group_id=g, protocol_type="consumer") for g in ("g", "g-ok")
    )
    return _defaults(response_class(16, header.api_version), groups=groups)


def _list_transactions_answer(header, request):
    mod = response_module(66, header.api_version)
    states = tuple(
        _defaults(
            mod.TransactionState,
            transactional_id=t,
            producer_id=i64(7),
            transaction_state="Ongoing",
        )
        for t in ("tx", "tx-ok")
    )
    return _defaults(response_class(66, header.api_version), transaction_states=states)


CASES: dict[int, Case] = {
    0: Case(
        _produce,
        {
            "responses": [
                {
                    "name": "t",
                    "partition_responses": [
                        {"index": 0, "error_code": 29, "base_offset": -1, "log_start_offset": -1}
                    ],
                }
            ]
        },
    ),
    1: Case(
        _fetch,
        {
            "error_code": 0,
            "responses": [
                {
                    "topic": "t",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "error_code": 29,
                            "high_watermark": -1,
                            "log_start_offset": -1,
                        }
                    ],
                }
            ],
        },
    ),
    2: Case(
        lambda: req(
            2,
            11,
            replica_id=i32(-1),
            timeout=td(1000),
            topics=_topic_partitions(
                2,
                11,
                "ListOffsetsTopic",
                "ListOffsetsPartition",
                partition_index=i32(0),
                current_leader_epoch=i32(3),
                timestamp=i64(1234),
            ),
        ),
        {
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "error_code": 29,
                            "timestamp": -1,
                            "offset": -1,
                            "leader_epoch": -1,
                        }
                    ],
                }
            ]
        },
    ),
    3: Case(
        _metadata,
        {"topics": [{"error_code": 29, "name": "t", "is_internal": False, "partitions": []}]},
        forwarded=None,  # an empty Metadata may go upstream for the brokers list
        leak=lambda r: any(t.name == "t" for t in (r.topics or ())),
    ),
    8: Case(
        lambda: req(
            8,
            9,
            group_id="g",
            generation_id_or_member_epoch=i32(-1),
            topics=_topic_partitions(
                8,
                9,
                "OffsetCommitRequestTopic",
                "OffsetCommitRequestPartition",
                partition_index=i32(0),
                committed_offset=i64(5),
                committed_leader_epoch=i32(-1),
            ),
        ),
        {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 30}]}]},
    ),
    9: Case(
        lambda: req(
            9,
            7,
            group_id="g",
            topics=(sub(9, 7, "OffsetFetchRequestTopic", name="t", partition_indexes=(i32(0),)),),
        ),
        {"error_code": 30, "topics": []},
    ),
    10: Case(
        lambda: req(10, 4, key_type=i8(0), coordinator_keys=("g",)),
        {"coordinators": [{"key": "g", "node_id": -1, "host": "", "port": -1, "error_code": 30}]},
    ),
    11: Case(
        lambda: req(
            11,
            9,
            group_id="g",
            member_id="m",
            session_timeout=td(10000),
            rebalance_timeout=td(10000),
            protocol_type="consumer",
            group_instance_id=None,
            reason=None,
        ),
        {
            "error_code": 30,
            "generation_id": -1,
            "protocol_name": None,
            "leader": "",
            "member_id": "",
            "members": [],
        },
    ),
    12: Case(
        lambda: req(
            12, 4, group_id="g", generation_id=i32(1), member_id="m", group_instance_id=None
        ),
        {"error_code": 30},
    ),
    13: Case(
        lambda: req(
            13,
            5,
            group_id="g",
            members=(
                sub(13, 5, "MemberIdentity", member_id="m", group_instance_id=None, reason=None),
            ),
        ),
        {"error_code": 30, "members": []},
    ),
    14: Case(
        lambda: req(
            14,
            5,
            group_id="g",
            generation_id=i32(1),
            member_id="m",
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
        ),
        {"error_code": 30, "assignment": b"", "protocol_type": None, "protocol_name": None},
    ),
    15: Case(
        lambda: req(15, 5, groups=("g",), include_authorized_operations=True),
        {
            "groups": [
                {
                    "error_code": 30,
                    "group_id": "g",
                    "group_state": "",
                    "members": [],
                    "authorized_operations": -2147483648,
                }
            ]
        },
    ),
    16: Case(
        lambda: req(16, 4, states_filter=()),
        {"error_code": 0, "groups": []},
        forwarded=True,
        script=answer_with(_list_groups_answer),
    ),
    18: Case(
        lambda: req(18, 3, client_software_name="t", client_software_version="1"),
        {"error_code": 0},
        forwarded=True,
    ),
    19: Case(
        lambda: req(
            19,
            7,
            timeout=td(1000),
            topics=(
                sub(
                    19,
                    7,
                    "CreatableTopic",
                    name="t",
                    num_partitions=i32(1),
                    replication_factor=i16(1),
                ),
            ),
        ),
        {
            "topics": [
                {
                    "name": "t",
                    "error_code": 29,
                    "error_message": "Authorization failed.",
                    "num_partitions": -1,
                    "replication_factor": -1,
                }
            ]
        },
    ),
    20: Case(
        lambda: req(
            20,
            6,
            timeout=td(1000),
            topics=(sub(20, 6, "DeleteTopicState", name="t", topic_id=None),),
        ),
        {"responses": [{"name": "t", "topic_id": None, "error_code": 29}]},
    ),
    21: Case(
        lambda: req(
            21,
            2,
            timeout=td(1000),
            topics=_topic_partitions(
                21,
                2,
                "DeleteRecordsTopic",
                "DeleteRecordsPartition",
                partition_index=i32(0),
                offset=i64(3),
            ),
        ),
        {
            "topics": [
                {
                    "name": "t",
                    "partitions": [{"partition_index": 0, "low_watermark": -1, "error_code": 29}],
                }
            ]
        },
    ),
    22: Case(
        lambda: req(
            22,
            5,
            transactional_id="tx",
            transaction_timeout=td(1000),
            producer_id=i64(5),
            producer_epoch=i16(3),
        ),
        {"error_code": 53, "producer_id": -1, "producer_epoch": -1},
    ),
    23: Case(
        lambda: req(
            23,
            4,
            replica_id=i32(-2),
            topics=_topic_partitions(
                23,
                4,
                "OffsetForLeaderTopic",
                "OffsetForLeaderPartition",
                name_field="topic",
                partition=i32(0),
                current_leader_epoch=i32(-1),
                leader_epoch=i32(1),
            ),
        ),
        {
            "topics": [
                {
                    "topic": "t",
                    "partitions": [
                        {"partition": 0, "error_code": 29, "leader_epoch": -1, "end_offset": -1}
                    ],
                }
            ]
        },
    ),
    24: Case(
        lambda: req(
            24,
            3,
            v3_and_below_transactional_id="tx",
            v3_and_below_producer_id=i64(1),
            v3_and_below_producer_epoch=i16(0),
            v3_and_below_topics=(
                sub(24, 3, "AddPartitionsToTxnTopic", name="t", partitions=(i32(0),)),
            ),
        ),
        {
            "results_by_topic_v3_and_below": [
                {
                    "name": "t",
                    "results_by_partition": [{"partition_index": 0, "partition_error_code": 53}],
                }
            ]
        },
    ),
    25: Case(
        lambda: req(
            25, 4, transactional_id="tx", producer_id=i64(1), producer_epoch=i16(0), group_id="g"
        ),
        {"error_code": 53},
    ),
    26: Case(
        lambda: req(
            26, 4, transactional_id="tx", producer_id=i64(1), producer_epoch=i16(0), committed=True
        ),
        {"error_code": 53},
    ),
    28: Case(
        lambda: req(
            28,
            3,
            transactional_id="tx",
            group_id="g",
            producer_id=i64(1),
            producer_epoch=i16(0),
            generation_id=i32(-1),
            group_instance_id=None,
            topics=_topic_partitions(
                28,
                3,
                "TxnOffsetCommitRequestTopic",
                "TxnOffsetCommitRequestPartition",
                partition_index=i32(0),
                committed_offset=i64(1),
                committed_leader_epoch=i32(-1),
            ),
        ),
        {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 53}]}]},
    ),
    # the ACL Admin API is answered by aclgate itself (tests/acladmin/ has the rest)
    29: Case(
        lambda: req(
            29,
            3,
            resource_type_filter=i8(1),
            resource_name_filter=None,
            pattern_type_filter=i8(1),
            principal_filter=None,
            host_filter=None,
            operation=i8(1),
            permission_type=i8(1),
        ),
        {"error_code": 31, "resources": []},
    ),
    30: Case(
        lambda: req(
            30,
            3,
            creations=(
                sub(
                    30,
                    3,
                    "AclCreation",
                    resource_type=i8(2),
                    resource_name="t",
                    resource_pattern_type=i8(3),
                    principal="User:x",
                    host="*",
                    operation=i8(3),
                    permission_type=i8(3),
                ),
            ),
        ),
        {"results": [{"error_code": 31}]},
    ),
    31: Case(
        lambda: req(
            31,
            3,
            filters=(
                sub(
                    31,
                    3,
                    "DeleteAclsFilter",
                    resource_type_filter=i8(1),
                    resource_name_filter=None,
                    pattern_type_filter=i8(1),
                    principal_filter=None,
                    host_filter=None,
                    operation=i8(1),
                    permission_type=i8(1),
                ),
            ),
        ),
        {"filter_results": [{"error_code": 31, "matching_acls": []}]},
    ),
    32: Case(
        lambda: req(32, 4, resources=_config_resources(32, 4, "DescribeConfigsResource")),
        {"results": _denied_config_results(True)},
    ),
    33: Case(
        lambda: req(
            33,
            2,
            resources=_config_resources(
                33, 2, "AlterConfigsResource", "AlterableConfig", name="k", value="v"
            ),
        ),
        {"responses": _denied_config_results(False)},
    ),
    34: Case(
        lambda: req(
            34,
            2,
            dirs=(
                sub(
                    34,
                    2,
                    "AlterReplicaLogDir",
                    path="/d1",
                    topics=(
                        sub(
                            34, 2, "AlterReplicaLogDirTopic", name="t", partitions=(i32(0), i32(1))
                        ),
                    ),
                ),
                sub(
                    34,
                    2,
                    "AlterReplicaLogDir",
                    path="/d2",
                    topics=(sub(34, 2, "AlterReplicaLogDirTopic", name="t", partitions=(i32(2),)),),
                ),
            ),
        ),
        {
            "results": [
                {
                    "topic_name": "t",
                    "partitions": [
                        {"partition_index": 0, "error_code": 31},
                        {"partition_index": 1, "error_code": 31},
                    ],
                },
                {"topic_name": "t", "partitions": [{"partition_index": 2, "error_code": 31}]},
            ]
        },
    ),
    35: Case(
        lambda: req(35, 4, topics=None),
        {"error_code": 31, "results": []},
    ),
    37: Case(
        lambda: req(
            37,
            3,
            timeout=td(1000),
            topics=(sub(37, 3, "CreatePartitionsTopic", name="t", count=i32(3), assignments=None),),
        ),
        # Kafka's message is null here; the proxy's (protocol/enforce/messages.py) may fill it
        {"results": [{"name": "t", "error_code": 29}]},
    ),
    42: Case(
        lambda: req(42, 2, groups_names=("g",)),
        {"results": [{"group_id": "g", "error_code": 30}]},
    ),
    43: Case(
        lambda: req(
            43,
            2,
            election_type=i8(0),
            timeout=td(1000),
            topic_partitions=(
                sub(43, 2, "TopicPartitions", topic="t", partitions=(i32(0), i32(1))),
            ),
        ),
        {
            "error_code": 31,
            "replica_election_results": [
                {
                    "topic": "t",
                    "partition_result": [
                        {"partition_id": 0, "error_code": 31},
                        {"partition_id": 1, "error_code": 31},
                    ],
                }
            ],
        },
    ),
    44: Case(
        lambda: req(
            44,
            1,
            resources=_config_resources(
                44,
                1,
                "AlterConfigsResource",
                "AlterableConfig",
                name="k",
                config_operation=i8(0),
                value="v",
            ),
        ),
        {"responses": _denied_config_results(False)},
    ),
    45: Case(
        lambda: req(
            45,
            0,
            timeout=td(1000),
            topics=(
                sub(
                    45,
                    0,
                    "ReassignableTopic",
                    name="t",
                    partitions=(
                        sub(
                            45,
                            0,
                            "ReassignablePartition",
                            partition_index=i32(0),
                            replicas=(i32(1), i32(2)),
                        ),
                    ),
                ),
            ),
        ),
        {
            "error_code": 31,
            "responses": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 31}]}],
        },
    ),
    46: Case(
        lambda: req(
            46,
            0,
            timeout=td(1000),
            topics=(
                sub(
                    46, 0, "ListPartitionReassignmentsTopics", name="t", partition_indexes=(i32(0),)
                ),
            ),
        ),
        {
            "error_code": 31,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "replicas": [],
                            "adding_replicas": [],
                            "removing_replicas": [],
                        }
                    ],
                }
            ],
        },
    ),
    47: Case(
        lambda: req(
            47,
            0,
            group_id="g",
            topics=(
                sub(
                    47,
                    0,
                    "OffsetDeleteRequestTopic",
                    name="t",
                    partitions=(
                        sub(47, 0, "OffsetDeleteRequestPartition", partition_index=i32(0)),
                    ),
                ),
            ),
        ),
        {"error_code": 30, "topics": []},
    ),
    48: Case(
        lambda: req(
            48,
            1,
            components=(
                sub(48, 1, "ComponentData", entity_type="user", match_type=i8(0), match="u"),
            ),
            strict=False,
        ),
        {"error_code": 31, "entries": None},
    ),
    49: Case(
        lambda: req(
            49,
            1,
            validate_only=False,
            entries=(
                sub(
                    49,
                    1,
                    "EntryData",
                    entity=(sub(49, 1, "EntityData", entity_type="user", entity_name="u"),),
                    ops=(sub(49, 1, "OpData", key="producer_byte_rate", value=1.0, remove=False),),
                ),
            ),
        ),
        {"entries": [{"error_code": 31, "entity": [{"entity_type": "user", "entity_name": "u"}]}]},
    ),
    50: Case(
        lambda: req(50, 0, users=(sub(50, 0, "UserName", name="alice"),)),
        {"error_code": 31, "results": [{"user": "", "error_code": 31, "credential_infos": []}]},
    ),
    51: Case(
        lambda: req(
            51,
            0,
            deletions=(sub(51, 0, "ScramCredentialDeletion", name="bob", mechanism=i8(1)),),
            upsertions=(
                sub(
                    51,
                    0,
                    "ScramCredentialUpsertion",
                    name="carol",
                    mechanism=i8(1),
                    iterations=i32(4096),
                    salt=b"s",
                    salted_password=b"p",
                ),
                sub(
                    51,
                    0,
                    "ScramCredentialUpsertion",
                    name="bob",
                    mechanism=i8(2),
                    iterations=i32(4096),
                    salt=b"s",
                    salted_password=b"p",
                ),
            ),
        ),
        {"results": [{"user": "bob", "error_code": 31}, {"user": "carol", "error_code": 31}]},
    ),
    57: Case(
        lambda: req(
            57,
            1,
            timeout=td(1000),
            validate_only=False,
            feature_updates=(
                sub(
                    57,
                    1,
                    "FeatureUpdateKey",
                    feature="metadata.version",
                    max_version_level=i16(20),
                    upgrade_type=i8(1),
                ),
            ),
        ),
        {"error_code": 31, "results": []},
    ),
    60: Case(
        lambda: req(60, 1, include_cluster_authorized_operations=True, endpoint_type=i8(1)),
        {"error_code": 0, "cluster_authorized_operations": 0},
        forwarded=True,
    ),
    61: Case(
        lambda: req(
            61,
            0,
            topics=(sub(61, 0, "TopicRequest", name="t", partition_indexes=(i32(0), i32(1))),),
        ),
        {
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {"partition_index": 0, "error_code": 29, "active_producers": []},
                        {"partition_index": 1, "error_code": 29, "active_producers": []},
                    ],
                }
            ]
        },
    ),
    64: Case(lambda: req(64, 0, broker_id=i32(2)), {"error_code": 31}),
    65: Case(
        lambda: req(65, 0, transactional_ids=("tx", "tx2")),
        {
            "transaction_states": [
                {
                    "error_code": 53,
                    "transactional_id": "tx",
                    "transaction_state": "",
                    "producer_id": 0,
                    "producer_epoch": 0,
                    "topics": [],
                },
                {"error_code": 53, "transactional_id": "tx2", "topics": []},
            ]
        },
    ),
    66: Case(
        lambda: req(66, 1, state_filters=(), producer_id_filters=(), duration_filter=i64(-1)),
        {"error_code": 0, "transaction_states": []},
        forwarded=True,
        script=answer_with(_list_transactions_answer),
    ),
    68: Case(
        lambda: req(
            68,
            0,
            group_id="g",
            member_id="m",
            member_epoch=i32(0),
            instance_id=None,
            rack_id=None,
            rebalance_timeout=td(10000),
            subscribed_topic_names=("t",),
            server_assignor=None,
            topic_partitions=(),
        ),
        {"error_code": 30},
    ),
    69: Case(
        lambda: req(69, 0, group_ids=("g",), include_authorized_operations=False),
        {"groups": [{"error_code": 30, "group_id": "g", "members": []}]},
    ),
    71: Case(
        lambda: req(71, 0, client_instance_id=None),
        {"error_code": 0},
        forwarded=True,
    ),
    72: Case(
        lambda: req(
            72,
            0,
            client_instance_id=None,
            subscription_id=i32(1),
            terminating=False,
            compression_type=i8(0),
            metrics=b"",
        ),
        {"error_code": 0},
        forwarded=True,
    ),
    74: Case(lambda: req(74, 0), {"error_code": 31, "config_resources": []}),
    75: Case(
        lambda: req(
            75,
            0,
            topics=(sub(75, 0, "TopicRequest", name="t"),),
            response_partition_limit=i32(100),
            cursor=None,
        ),
        {
            "topics": [
                {
                    "error_code": 29,
                    "name": "t",
                    "topic_id": None,
                    "is_internal": False,
                    "partitions": [],
                }
            ],
            "next_cursor": None,
        },
    ),
    # share groups (KIP-932) and streams groups (KIP-1071)
    76: Case(
        lambda: req(76, 1, group_id="g", member_id="m", subscribed_topic_names=("t",)),
        {"error_code": 30, "assignment": None},
    ),
    77: Case(
        lambda: req(77, 1, group_ids=("g",), include_authorized_operations=False),
        {"groups": [{"error_code": 30, "group_id": "g", "members": []}]},
    ),
    78: Case(
        lambda: req(78, 1, group_id="g", member_id="m", topics=(), forgotten_topics_data=()),
        {"error_code": 30, "responses": [], "node_endpoints": []},
    ),
    79: Case(
        lambda: req(79, 1, group_id="g", member_id="m", share_session_epoch=i32(0), topics=()),
        {"error_code": 30, "responses": [], "node_endpoints": []},
    ),
    88: Case(lambda: req(88, 0, group_id="g", member_id="m"), {"error_code": 30}),
    89: Case(
        lambda: req(89, 0, group_ids=("g",), include_authorized_operations=False),
        {"groups": [{"error_code": 30, "group_id": "g", "members": [], "topology": None}]},
    ),
    90: Case(
        lambda: req(
            90,
            1,
            groups=(
                sub(
                    90,
                    1,
                    "DescribeShareGroupOffsetsRequestGroup",
                    group_id="g",
                    topics=(
                        sub(
                            90,
                            1,
                            "DescribeShareGroupOffsetsRequestTopic",
                            topic_name="t",
                            partitions=(i32(0),),
                        ),
                    ),
                ),
            ),
        ),
        {"groups": [{"group_id": "g", "error_code": 30, "topics": []}]},
    ),
    91: Case(
        lambda: req(
            91,
            0,
            group_id="g",
            topics=(
                sub(
                    91,
                    0,
                    "AlterShareGroupOffsetsRequestTopic",
                    topic_name="t",
                    partitions=(
                        sub(
                            91,
                            0,
                            "AlterShareGroupOffsetsRequestPartition",
                            partition_index=i32(0),
                            start_offset=i64(0),
                        ),
                    ),
                ),
            ),
        ),
        {"error_code": 30, "error_message": "Group authorization failed.", "responses": []},
    ),
    92: Case(
        lambda: req(
            92,
            0,
            group_id="g",
            topics=(sub(92, 0, "DeleteShareGroupOffsetsRequestTopic", topic_name="t"),),
        ),
        {"error_code": 30, "error_message": "Group authorization failed.", "responses": []},
    ),
}


@pytest.mark.parametrize("key", sorted(TABLE))
def test_every_row_has_a_case(key):
    assert key in CASES, f"API key {key} has a row in TABLE but no test case here"


@pytest.mark.parametrize("key", sorted(CASES))
def test_no_acl_gets_kafkas_answer(env, key):
    """ANONYMOUS has no ACL: Kafka's error answer, and nothing reaches the broker."""
    case = CASES[key]
    if case.script is not None:
        env.script(key, case.script)
    elif case.forwarded and key not in DEFAULT_SCRIPTED:
        env.script(key, echo)
    body = case.request()
    got = env.call("none", body)
    like(got, case.expected)
    reached = env.reached(key)
    if case.forwarded:
        assert reached, "a never-denied API must be forwarded"
    elif case.leak is not None:
        assert not any(case.leak(r) for r in reached), reached
    else:
        assert reached == [], f"denied request reached the broker: {reached}"


#: API keys the scripted broker answers by itself
DEFAULT_SCRIPTED = frozenset({3, 10, 18, 60})


@pytest.mark.parametrize("profile", ["open", "dry"])
@pytest.mark.parametrize("key", sorted(k for k in CASES if not TABLE[ApiKey(k)].local))
def test_allowed_or_dry_run_is_forwarded(env, key, profile):
    """Everything allowed, or nothing allowed in dry-run mode: the request reaches the broker
    as the client sent it, and the broker's answer comes back."""
    if key not in DEFAULT_SCRIPTED:
        env.script(key, CASES[key].script or echo)
    body = CASES[key].request()
    got = env.call(profile, body)
    assert type(got) is response_class(key, body.__version__)
    assert env.reached(key) == [body]


@pytest.mark.parametrize(
    ("profile", "code"),
    [("open", 54), ("dry", 31)],  # no ACL store here: SECURITY_DISABLED; dry-run still checks
)
@pytest.mark.parametrize("key", sorted(k for k in CASES if TABLE[ApiKey(k)].local))
def test_the_acl_admin_api_is_never_forwarded(env, key, profile, code):
    """Allowed or in dry-run mode, the ACL Admin API is still answered by aclgate alone."""
    got = env.call(profile, CASES[key].request())
    entries = {29: None, 30: "results", 31: "filter_results"}[key]
    codes = [got.error_code] if entries is None else [e.error_code for e in getattr(got, entries)]
    assert codes == [code]
    assert env.reached(key) == []


# ------------------------------------------------------------------------- DescribeConfigs


def _config(mod, name: str, value: str | None, synonyms: tuple = ()) -> Any:
    return _defaults(
        mod.DescribeConfigsResourceResult,
        name=name,
        value=value,
        config_source=i8(2),
        synonyms=tuple(
            _defaults(mod.DescribeConfigsSynonym, name=name, value=v, source=i8(4))
            for v in synonyms
        ),
        documentation=None,
    )


def _configs_script(broker_configs: Callable[[Any], tuple]):
    def body(header, request):
        mod = response_module(32, header.api_version)
        results = []
        for r in request.resources:
            configs = (
                broker_configs(mod)
                if r.resource_type == 4
                else (_config(mod, "retention.ms", "1000"),)
            )
            results.append(
                _defaults(
                    mod.DescribeConfigsResult,
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                    error_message=None,
                    configs=configs,
                )
            )
        return _defaults(response_class(32, header.api_version), results=tuple(results))

    return answer_with(body)


def _describe(*resources: tuple[int, str], version: int = 4) -> Any:
    return req(
        32,
        version,
        resources=tuple(
            sub(
                32,
                version,
                "DescribeConfigsResource",
                resource_type=i8(t),
                resource_name=n,
                configuration_keys=None,
            )
            for t, n in resources
        ),
        include_synonyms=True,
    )


def test_describe_configs_mixed(env):
    """Allowed resources are forwarded and described; denied ones come after, configs empty."""
    env.script(32, _configs_script(lambda mod: ()))
    got = env.call("partial", _describe((2, "secret"), (2, "ok"), (4, "1"), (8, "1"), (16, "m")))
    like(
        got,
        {
            "results": [
                {
                    "error_code": 0,
                    "resource_type": 2,
                    "resource_name": "ok",
                    "configs": [{"name": "retention.ms", "value": "1000"}],
                },
                {
                    "error_code": 29,
                    "error_message": TOPIC_MSG,
                    "resource_name": "secret",
                    "configs": [],
                },
                {"error_code": 31, "error_message": CLUSTER_MSG, "resource_type": 4, "configs": []},
                {"error_code": 31, "resource_type": 8, "configs": []},
                {"error_code": 31, "resource_type": 16, "configs": []},
            ]
        },
    )
    (forwarded,) = env.reached(32)
    assert [(r.resource_type, r.resource_name) for r in forwarded.resources] == [(2, "ok")]


def test_describe_configs_unknown_type_fails_every_resource(env):
    got = env.call("open", _describe((2, "t"), (99, "x")))
    like(
        got,
        {
            "results": [
                {"error_code": 42, "resource_type": 2, "resource_name": "t", "configs": []},
                {"error_code": 42, "resource_type": 99, "resource_name": "x", "configs": []},
            ]
        },
    )
    assert got.results[0].error_message.startswith("This most likely occurs")
    assert env.reached(32) == []


def test_describe_configs_redacts_broker_addresses(env):
    """The proxy's promise: no real broker address in a BROKER config value."""
    node = env.cluster.nodes[0]
    env.call("cluster", _metadata())  # the proxy learns the real addresses from Metadata
    real = f"127.0.0.1:{node.port}"

    def broker_configs(mod):
        return (
            _config(mod, "listeners", "PLAINTEXT://0.0.0.0:9092", ("PLAINTEXT://0.0.0.0:9092",)),
            _config(mod, "advertised.listeners", f"PLAINTEXT://{real}", (f"PLAINTEXT://{real}",)),
            _config(mod, "controller.quorum.voters", "1@ctl:9093"),
            _config(mod, "listener.name.internal.custom", "internal-host:19092"),
            _config(mod, "listener.name.internal.ssl.protocol", "TLSv1.3"),
            _config(mod, "early.start.listeners", "CONTROLLER://c:9093"),
            _config(mod, "some.plugin.endpoint", f"http://{real}/x"),
            _config(mod, "controller.listener.names", "CONTROLLER"),
            _config(mod, "listener.security.protocol.map", "PLAINTEXT:PLAINTEXT"),
            _config(mod, "num.partitions", "3"),
        )

    env.script(32, _configs_script(broker_configs))
    got = env.call("cluster", _describe((4, "1"), (4, "")))
    assert [r.error_code for r in got.results] == [0, 0]
    for result in got.results:
        configs = {c.name: c for c in result.configs}
        redacted = {n for n, c in configs.items() if c.value is None}
        assert redacted == {
            "listeners",
            "advertised.listeners",
            "controller.quorum.voters",
            "listener.name.internal.custom",
            "early.start.listeners",
            "some.plugin.endpoint",
        }
        for name in redacted:
            assert configs[name].is_sensitive
            assert all(syn.value is None for syn in configs[name].synonyms)
        assert configs["num.partitions"].value == "3"
        assert configs["listener.name.internal.ssl.protocol"].value == "TLSv1.3"
        assert configs["controller.listener.names"].value == "CONTROLLER"
        assert real not in repr(result)


# ----------------------------------------------------- AlterConfigs, IncrementalAlterConfigs


def _alter_resource(key, v, rtype, name, *configs):
    entries = []
    for c in configs:
        fields = {"name": c[0], "value": c[1]}
        if key == 44:
            fields["config_operation"] = i8(c[2] if len(c) > 2 else 0)
        entries.append(sub(key, v, "AlterableConfig", **fields))
    return sub(
        key,
        v,
        "AlterConfigsResource",
        resource_type=i8(rtype),
        resource_name=name,
        configs=tuple(entries),
    )


def test_incremental_alter_configs_prevalidation_then_authorization(env):
    """The broker's pre-validation answers before any check, whoever asks; the rest is
    authorized per resource; answers keep the request's order; nothing is forwarded."""
    v = 1
    resources = (
        _alter_resource(44, v, 2, "a", ("k", "1")),
        _alter_resource(44, v, 2, "b", ("k", "1"), ("k", "2")),
        _alter_resource(44, v, 2, "c", ("k", None, 0), ("j", None, 2)),
        _alter_resource(44, v, 2, "d", ("k", None, 1)),
        _alter_resource(44, v, 99, "e", ("k", "1")),
        _alter_resource(44, v, 8, "1", ("kafka", "DEBUG")),
        _alter_resource(44, v, 2, "a", ("k", "2")),
        _alter_resource(44, v, 4, "", ("k", "1")),
        _alter_resource(44, v, 16, "m", ("k", "1")),
        _alter_resource(44, v, 32, "g", ("k", "1")),
    )
    got = env.call("none", req(44, v, resources=resources, validate_only=False))
    like(
        got,
        {
            "responses": [
                {
                    "resource_name": "a",
                    "error_code": 42,
                    "error_message": "Each resource must appear at most once.",
                },
                {
                    "resource_name": "b",
                    "error_code": 42,
                    "error_message": "Error due to duplicate config keys",
                },
                {
                    "resource_name": "c",
                    "error_code": 42,
                    "error_message": "Null value not supported for : k, j",
                },
                {"resource_name": "d", "error_code": 29, "error_message": TOPIC_MSG},
                {
                    "resource_name": "e",
                    "resource_type": 99,
                    "error_code": 42,
                    "error_message": "Unknown resource type 99",
                },
                {"resource_name": "1", "resource_type": 8, "error_code": 31, "error_message": None},
                {"resource_name": "a", "error_code": 42},
                {
                    "resource_name": "",
                    "resource_type": 4,
                    "error_code": 31,
                    "error_message": CLUSTER_MSG,
                },
                {"resource_name": "m", "resource_type": 16, "error_code": 31},
                {
                    "resource_name": "g",
                    "resource_type": 32,
                    "error_code": 30,
                    "error_message": GROUP_MSG,
                },
            ]
        },
    )
    assert env.reached(44) == []
    # dry-run: the same request goes to the broker untouched (it answers the same way)
    env.script(44, echo)
    body = req(44, v, resources=resources, validate_only=False)
    env.call("dry", body)
    assert env.reached(44) == [body]


def test_alter_configs_legacy_has_no_broker_logger(env):
    v = 2
    resources = (
        _alter_resource(33, v, 8, "1", ("kafka", "DEBUG")),
        _alter_resource(33, v, 2, "c", ("k", None)),
        _alter_resource(33, v, 2, "ok", ("k", "1")),
    )
    env.script(33, echo)
    got = env.call("partial", req(33, v, resources=resources, validate_only=True))
    like(
        got,
        {
            "responses": [
                {"resource_type": 8, "error_code": 42, "error_message": "Unknown resource type 8"},
                {
                    "resource_name": "c",
                    "error_code": 42,
                    "error_message": "Null value not supported for : k",
                },
                {"resource_name": "ok", "error_code": 0},
            ]
        },
    )
    (forwarded,) = env.reached(33)
    assert [r.resource_name for r in forwarded.resources] == ["ok"]
    assert forwarded.validate_only is True


def test_incremental_alter_configs_mixed_keeps_request_order(env):
    v = 1
    resources = (
        _alter_resource(44, v, 2, "secret", ("k", "1")),
        _alter_resource(44, v, 2, "ok", ("k", "1")),
        _alter_resource(44, v, 4, "1", ("k", "1")),
        _alter_resource(44, v, 2, "zz", ("k", None, 1)),
    )
    env.script(44, echo)
    got = env.call("partial", req(44, v, resources=resources, validate_only=False))
    like(
        got,
        {
            "responses": [
                {"resource_name": "secret", "error_code": 29},
                {"resource_name": "ok", "error_code": 0},
                {"resource_name": "1", "error_code": 31},
                {"resource_name": "zz", "error_code": 0},
            ]
        },
    )
    (forwarded,) = env.reached(44)
    assert [r.resource_name for r in forwarded.resources] == ["ok", "zz"]


def test_incremental_alter_configs_broker_logger_allowed_is_forwarded(env):
    v = 1
    env.script(44, echo)
    body = req(
        44, v, resources=(_alter_resource(44, v, 8, "1", ("kafka", "DEBUG")),), validate_only=False
    )
    got = env.call("cluster", body)
    like(got, {"responses": [{"resource_type": 8, "resource_name": "1", "error_code": 0}]})
    assert len(env.reached(44)) == 1


# ------------------------------------------------------------------ cluster administration


@pytest.mark.parametrize("version", [0, 1, 2])
def test_elect_leaders_versions(env, version):
    partitions = (sub(43, version, "TopicPartitions", topic="t", partitions=(i32(4),)),)
    for listed in (partitions, None):
        body = req(43, version, election_type=i8(0), timeout=td(1000), topic_partitions=listed)
        if version == 0:
            body = req(43, 0, timeout=td(1000), topic_partitions=listed)
        got = env.call("partial", body)
        results = [{"topic": "t", "partition_result": [{"partition_id": 4, "error_code": 31}]}]
        like(got, {"replica_election_results": results if listed else []})
        if version >= 1:
            assert got.error_code == 31
    assert env.reached(43) == []


def test_alter_user_scram_credentials_allowed(env):
    env.script(51, echo)
    got = env.call("cluster", CASES[51].request())
    assert got.results == () and len(env.reached(51)) == 1


def test_create_partitions_duplicates_before_authorization(env):
    def topic(name):
        return sub(37, 3, "CreatePartitionsTopic", name=name, count=i32(3), assignments=None)

    body = req(
        37, 3, timeout=td(1000), validate_only=False, topics=(topic("t"), topic("u"), topic("t"))
    )
    got = env.call("none", body)
    like(
        got,
        {
            "results": [
                {"name": "t", "error_code": 42, "error_message": "Duplicate topic name."},
                {"name": "u", "error_code": 29},
            ]
        },
    )
    assert env.reached(37) == []
    env.script(37, echo)
    body = req(
        37,
        3,
        timeout=td(1000),
        validate_only=False,
        topics=(topic("ok"), topic("secret"), topic("zz"), topic("zz")),
    )
    got = env.call("partial", body)
    like(
        got,
        {
            "results": [
                {"name": "ok", "error_code": 0},
                {"name": "zz", "error_code": 42},
                {"name": "secret", "error_code": 29},
            ]
        },
    )
    (forwarded,) = env.reached(37)
    assert [t.name for t in forwarded.topics] == ["ok"]


def test_offset_delete_every_topic_denied_still_asks_the_coordinator(env):
    def answer(header, request):
        return _defaults(response_class(47, 0), error_code=E.group_id_not_found, topics=())

    env.script(47, answer_with(answer))
    body = req(
        47,
        0,
        group_id="g-ok",
        topics=(
            sub(
                47,
                0,
                "OffsetDeleteRequestTopic",
                name="secret",
                partitions=(sub(47, 0, "OffsetDeleteRequestPartition", partition_index=i32(0)),),
            ),
        ),
    )
    got = env.call("partial", body)
    like(
        got,
        {
            "error_code": E.group_id_not_found,
            "topics": [
                {"name": "secret", "partitions": [{"partition_index": 0, "error_code": 29}]}
            ],
        },
    )
    (forwarded,) = env.reached(47)
    assert forwarded.topics == ()


# ----------------------------------------------------------------- transaction administration


def _txn_state(mod, tid: str, topics: tuple[str, ...]) -> Any:
    from datetime import UTC, datetime

    from kio.static.primitive import TZAware

    return _defaults(
        mod.TransactionState,
        transactional_id=tid,
        transaction_state="Ongoing",
        transaction_timeout=td(60000),
        transaction_start_time=TZAware.parse(datetime.fromtimestamp(1, UTC)),
        producer_id=i64(9),
        producer_epoch=i16(1),
        topics=tuple(_defaults(mod.TopicData, topic=t, partitions=(i32(0),)) for t in topics),
    )


def test_describe_transactions_mixed_in_request_order(env):
    def answer(header, request):
        mod = response_module(65, 0)
        states = tuple(
            _txn_state(mod, t, ("ok", "secret", "zz")) for t in request.transactional_ids
        )
        return _defaults(response_class(65, 0), transaction_states=states)

    env.script(65, answer_with(answer))
    got = env.call("partial", req(65, 0, transactional_ids=("tx", "tx-ok", "tx3")))
    like(
        got,
        {
            "transaction_states": [
                {"transactional_id": "tx", "error_code": 53, "topics": []},
                {
                    "transactional_id": "tx-ok",
                    "error_code": 0,
                    "producer_id": 9,
                    "topics": [
                        {"topic": "ok", "partitions": [0]},
                        {"topic": "zz", "partitions": [0]},
                    ],
                },
                {"transactional_id": "tx3", "error_code": 53},
            ]
        },
    )
    (forwarded,) = env.reached(65)
    assert forwarded.transactional_ids == ("tx-ok",)


def test_list_transactions_filters_silently(env):
    env.script(66, answer_with(_list_transactions_answer))
    got = env.call("partial", CASES[66].request())
    like(got, {"error_code": 0, "transaction_states": [{"transactional_id": "tx-ok"}]})


# ------------------------------------------------------------------ DescribeTopicPartitions

TOPIC_IDS = {name: uuid.uuid5(uuid.NAMESPACE_DNS, name) for name in ("ok", "secret", "zz", "zzz")}
#: ALL on a topic: every operation a topic supports (docs/authz.md, "Operations per resource type")
ALL_TOPIC_OPS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))


def _dtp(names=(), cursor=None, limit=100):
    return req(
        75,
        0,
        topics=tuple(sub(75, 0, "TopicRequest", name=n) for n in names),
        response_partition_limit=i32(limit),
        cursor=None
        if cursor is None
        else sub(75, 0, "Cursor", topic_name=cursor[0], partition_index=i32(cursor[1])),
    )


def _dtp_broker(pages: dict[str | None, tuple[tuple[str, ...], tuple[str, int] | None]]):
    """Answers by the request's cursor topic: (topics returned, next cursor)."""

    def answer(header, request):
        mod = response_module(75, 0)
        if request.topics:
            names, nxt = tuple(sorted({t.name for t in request.topics})), None
        else:
            names, nxt = pages[request.cursor.topic_name if request.cursor else None]
        topics = tuple(
            _defaults(
                mod.DescribeTopicPartitionsResponseTopic,
                name=n,
                topic_id=TOPIC_IDS[n],
                partitions=(
                    _defaults(
                        mod.DescribeTopicPartitionsResponsePartition,
                        partition_index=i32(0),
                        eligible_leader_replicas=None,
                        last_known_elr=None,
                    ),
                ),
                topic_authorized_operations=i32(-1),
            )
            for n in names
        )
        cursor = (
            None
            if nxt is None
            else _defaults(mod.Cursor, topic_name=nxt[0], partition_index=i32(nxt[1]))
        )
        return _defaults(response_class(75, 0), topics=topics, next_cursor=cursor)

    return answer_with(answer)


def test_describe_topic_partitions_named_mixed(env, proxies):
    env.script(75, _dtp_broker({}))
    got = env.call("partial", _dtp(("secret", "ok", "ok")))
    like(
        got,
        {
            "topics": [
                {
                    "name": "ok",
                    "error_code": 0,
                    "topic_id": TOPIC_IDS["ok"],
                    "topic_authorized_operations": ALL_TOPIC_OPS,
                },
                {
                    "name": "secret",
                    "error_code": 29,
                    "topic_id": None,
                    "partitions": [],
                    "topic_authorized_operations": -2147483648,
                },
            ],
            "next_cursor": None,
        },
    )
    (forwarded,) = env.reached(75)
    assert [t.name for t in forwarded.topics] == ["ok", "ok"]
    proxy = proxies("partial")
    assert proxy.run(lambda: proxy.server.policy.topic_ids.name(TOPIC_IDS["ok"])) == "ok"


def test_describe_topic_partitions_named_with_cursor(env):
    env.script(75, _dtp_broker({}))
    # topics before the cursor are not described; a denied cursor topic is answered 29 and
    # the others start at partition 0
    got = env.call("partial", _dtp(("ok", "secret", "zz"), cursor=("secret", 1)))
    like(got, {"topics": [{"name": "zz", "error_code": 0}, {"name": "secret", "error_code": 29}]})
    (forwarded,) = env.reached(75)
    assert [t.name for t in forwarded.topics] == ["zz"] and forwarded.cursor is None
    # a cursor that is not among the named topics: every named topic 42, nothing forwarded
    got = env.call("partial", _dtp(("ok", "zz"), cursor=("secret", 0)))
    like(got, {"topics": [{"name": "ok", "error_code": 42}, {"name": "zz", "error_code": 42}]})
    assert len(env.reached(75)) == 1


def test_describe_topic_partitions_all_topics_paging_never_names_a_hidden_topic(env):
    pages = {
        None: (("ok", "secret"), ("secret", 3)),
        "secret": (("secret", "zz"), ("zzz", 0)),
        "zzz": (("zzz",), None),
    }
    env.script(75, _dtp_broker(pages))
    seen, cursor = [], None
    for _ in range(5):
        got = env.call("partial", _dtp(cursor=cursor))
        seen += [t.name for t in got.topics]
        assert "secret" not in repr(got)
        if got.next_cursor is None:
            break
        cursor = (got.next_cursor.topic_name, got.next_cursor.partition_index)
    assert seen == ["ok", "zz"]
    asked = [
        (r.cursor.topic_name, r.cursor.partition_index) if r.cursor else None
        for r in env.reached(75)
    ]
    assert asked == [None, ("secret", 3), ("zzz", 0)]


def test_docs_are_generated_from_the_table():
    assert (REPO / "docs" / "apis.md").read_text() == render_docs()


def test_add_partitions_to_txn_mixed_asks_which_partitions_exist(env):
    """Kafka fails the whole request when a topic is denied: 29 for it, 3 for partitions the
    cluster does not have (it reads its metadata cache; the proxy asks upstream), 55 for
    the rest. Nothing is added, nothing reaches the coordinator."""

    def metadata(header, request):  # "ok" has one partition, "zz" does not exist
        mod = response_module(3, header.api_version)
        node_id = i32(env.cluster.nodes[0].node_id)
        topics = tuple(
            _defaults(
                mod.MetadataResponseTopic, name=t.name, error_code=E.unknown_topic_or_partition
            )
            if t.name == "zz"
            else _defaults(
                mod.MetadataResponseTopic,
                name=t.name,
                partitions=(_defaults(mod.MetadataResponsePartition, leader_id=node_id),),
            )
            for t in request.topics or ()
        )
        return _defaults(
            response_class(3, header.api_version),
            brokers=env.cluster.nodes[0].brokers(mod.MetadataResponseBroker),
            cluster_id="scripted",
            controller_id=node_id,
            topics=topics,
        )

    env.script(3, answer_with(metadata))
    topic = lambda name, *parts: sub(  # noqa: E731
        24, 3, "AddPartitionsToTxnTopic", name=name, partitions=tuple(i32(p) for p in parts)
    )
    got = env.call(
        "partial",
        req(
            24,
            3,
            v3_and_below_transactional_id="tx-ok",
            v3_and_below_producer_id=i64(1),
            v3_and_below_producer_epoch=i16(0),
            v3_and_below_topics=(topic("ok", 0, 7), topic("zz", 0), topic("t", 0)),
        ),
    )
    codes = {
        (r.name, p.partition_index): int(p.partition_error_code)
        for r in got.results_by_topic_v3_and_below
        for p in r.results_by_partition
    }
    assert codes == {("ok", 0): 55, ("ok", 7): 3, ("zz", 0): 3, ("t", 0): 29}
    assert env.reached(24) == []
    assert [t.name for r in env.reached(3) for t in r.topics or ()] == ["ok", "zz"]


# ------------------------------------------------------------- DescribeShareGroupOffsets


def test_describe_share_group_offsets_partial(env):
    """A denied group gets 30 in its place in the request's order; in an allowed group a
    denied topic is taken out before the broker and answered 29 (start offset and lag -1)."""
    m = module(90, 1)
    rm = response_module(90, 1)

    def group(name: str, topics: tuple[str, ...] | None) -> Any:
        listed = (
            None
            if topics is None
            else tuple(
                m.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=(i32(0),))
                for t in topics
            )
        )
        return m.DescribeShareGroupOffsetsRequestGroup(group_id=name, topics=listed)

    def broker(_header, request):
        def answered(g):
            topics = tuple(
                _defaults(
                    rm.DescribeShareGroupOffsetsResponseTopic,
                    topic_name=t.topic_name,
                    topic_id=uuid.uuid4(),
                    partitions=(
                        _defaults(
                            rm.DescribeShareGroupOffsetsResponsePartition,
                            partition_index=i32(0),
                            start_offset=i64(5),
                            lag=i64(1),
                        ),
                    ),
                )
                for t in g.topics
            )
            return _defaults(
                rm.DescribeShareGroupOffsetsResponseGroup, group_id=g.group_id, topics=topics
            )

        return _defaults(
            rm.DescribeShareGroupOffsetsResponse, groups=tuple(answered(g) for g in request.groups)
        )

    env.script(90, answer_with(broker))
    body = req(90, 1, groups=(group("g-no", ("ok",)), group("g-ok", ("secret", "ok"))))
    got = env.call("partial", body)
    like(
        got,
        {
            "groups": [
                {"group_id": "g-no", "error_code": 30, "topics": []},
                {
                    "group_id": "g-ok",
                    "error_code": 0,
                    "topics": [
                        {"topic_name": "ok", "partitions": [{"start_offset": 5, "error_code": 0}]},
                        {
                            "topic_name": "secret",
                            "topic_id": None,  # the zero id, as kio reads it
                            "partitions": [
                                {
                                    "partition_index": 0,
                                    "start_offset": -1,
                                    "lag": -1,
                                    "error_code": 29,
                                    "error_message": TOPIC_MSG,
                                }
                            ],
                        },
                    ],
                },
            ]
        },
    )
    (sent,) = env.reached(90)
    assert [(g.group_id, [t.topic_name for t in g.topics]) for g in sent.groups] == [
        ("g-ok", ["ok"])
    ]


# -------------------------------------------------------------------------- ShareFetch


def test_share_fetch_partial_and_session(env):
    """A denied topic is kept out of the broker's share session and answered 29 on every
    fetch while the session holds it (its acknowledgements 29 too); the allowed one goes on.
    Another connection naming the session is answered 122 and reaches nothing."""
    ids = {"ok": uuid.uuid4(), "secret": uuid.uuid4()}

    by_id = {v: k for k, v in ids.items()}

    def metadata(node, header, request):
        """Names and ids; the proxy's own look-up names topics by id."""
        mod = response_module(3, header.api_version)
        topics = tuple(
            _defaults(
                mod.MetadataResponseTopic,
                name=t.name or by_id[t.topic_id],
                topic_id=ids[t.name or by_id[t.topic_id]],
                partitions=(_defaults(mod.MetadataResponsePartition, leader_id=i32(1)),),
            )
            for t in request.topics
        )
        body = _defaults(
            mod.MetadataResponse,
            brokers=node.brokers(mod.MetadataResponseBroker),
            cluster_id="scripted",
            controller_id=i32(1),
            topics=topics,
        )
        return encode_response(header.correlation_id, body)

    def fetched(_header, request):
        rm = response_module(78, 1)
        topics = tuple(
            _defaults(
                rm.ShareFetchableTopicResponse,
                topic_id=t.topic_id,
                partitions=tuple(
                    _defaults(rm.PartitionData, partition_index=p.partition_index, records=b"")
                    for p in t.partitions
                ),
            )
            for t in request.topics
        )
        return _defaults(rm.ShareFetchResponse, responses=topics)

    env.script(3, metadata)
    env.script(78, answer_with(fetched))
    m = module(78, 1)

    def share_fetch(epoch: int, *topics: tuple[str, bool], group: str = "g-ok") -> Any:
        return req(
            78,
            1,
            group_id=group,
            member_id="member-1",
            share_session_epoch=i32(epoch),
            topics=tuple(
                m.FetchTopic(
                    topic_id=ids[name],
                    partitions=(
                        m.FetchPartition(
                            partition_index=i32(0),
                            acknowledgement_batches=(
                                (
                                    m.AcknowledgementBatch(
                                        first_offset=i64(0),
                                        last_offset=i64(0),
                                        acknowledge_types=(i8(1),),
                                    ),
                                )
                                if acked
                                else ()
                            ),
                        ),
                    ),
                )
                for name, acked in topics
            ),
            forgotten_topics_data=(),
        )

    def answered(body: Any) -> dict[str, tuple[int, int]]:
        names = {v: k for k, v in ids.items()}
        return {
            names[t.topic_id]: (p.error_code, p.acknowledge_error_code)
            for t in body.responses
            for p in t.partitions
        }

    bootstrap = env.proxies("partial").bootstrap
    with RawClient(bootstrap) as raw, RawClient(bootstrap) as other:
        raw.request(
            req(
                3,
                12,
                topics=tuple(
                    sub(3, 12, "MetadataRequestTopic", name=n, topic_id=None) for n in ids
                ),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
        first = raw.request(share_fetch(0, ("ok", False), ("secret", True)))
        assert answered(first) == {"ok": (0, 0), "secret": (29, 29)}
        again = raw.request(share_fetch(1))
        assert answered(again) == {"secret": (29, 0)}
        sent = env.reached(78)
        assert [[t.topic_id for t in r.topics] for r in sent] == [[ids["ok"]], []]
        assert all(r.forgotten_topics_data == () for r in sent)

        stranger = other.request(share_fetch(2))
        assert stranger.error_code == ErrorCode.share_session_not_found
        denied = other.request(share_fetch(0, ("ok", False), group="g-no"))
        assert (denied.error_code, denied.responses) == (ErrorCode.group_authorization_failed, ())
        assert len(env.reached(78)) == 2
