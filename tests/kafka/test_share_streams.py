"""Share groups (KIP-932) and streams groups (KIP-1071) through aclgate in front of Apache
Kafka: the Java KafkaShareConsumer and a Kafka Streams app on `group.protocol=streams`
(tests/kafka/java/GroupsClient.java, compiled here against tests/kafka/lib), with and without
the ACLs they need; denied, they fail with Kafka's own exceptions (docs/apis.md, keys 76-92).
Then a share session byte by byte (a revoked topic leaves the broker's session), and the
kafka-share-groups / kafka-streams-groups tools over the admin APIs of both group types."""

from __future__ import annotations

import dataclasses
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i32Timedelta

from aclgate.authz.aclfile import dump_acl_file
from aclgate.authz.model import AclBinding, AclOperation
from tests.fixtures.kafka import since_kafka
from tests.fixtures.rawclient import RawClient, module, request_entity
from tests.kafka import javaclient, tools
from tests.kafka.javaclient import compile_clients

pytestmark = [
    pytest.mark.kafka,
    since_kafka("4.1", "Share groups (KIP-932) and streams groups (KIP-1071)"),
]


def acl(resource_type: str, name: str, operation: str) -> AclBinding:
    return AclBinding.from_dict(
        {
            "resource_type": resource_type,
            "resource_name": name,
            "pattern_type": "LITERAL",
            "principal": "User:ANONYMOUS",
            "host": "*",
            "operation": operation,
            "permission_type": "ALLOW",
        }
    )


@pytest.fixture(scope="module")
def client_classes(tmp_path_factory) -> Path:
    """GroupsClient.class, compiled once per module (javac ~3 s)."""
    return compile_clients(tmp_path_factory, "GroupsClient")


def run_client(classes: Path, *args: str, timeout: float = 90) -> str:
    """GroupsClient's one result line."""
    return javaclient.run_client(classes, "GroupsClient", *args, timeout=timeout)


@pytest.fixture
def gate(kafka_single, proxy_factory, tmp_path):
    """(kafka, proxy, set_acls): aclgate in front of Kafka with an ACL file, no ACL = denied."""
    path = tmp_path / "acls.json"
    path.write_text(dump_acl_file([]))
    proxy = proxy_factory(
        kafka_single.bootstrap, acl_file=path, allow_everyone_if_no_acl_found=False
    )

    def set_acls(*bindings: AclBinding) -> None:
        path.write_text(dump_acl_file(list(bindings)))
        proxy.run(proxy.server.watcher.reload_once)

    return kafka_single, proxy, set_acls


def _topic_with_records(kafka, name: str, n: int) -> None:
    kafka.create_topic(name)
    tools.console_produce(kafka.bootstrap, name, [f"v{i}" for i in range(n)]).check()


def _earliest(kafka, group: str) -> None:
    """Share groups start at the latest offset: have this one start at the earliest."""
    tools.run_tool(
        "kafka-configs",
        "--bootstrap-server",
        kafka.bootstrap,
        "--alter",
        "--entity-type",
        "groups",
        "--entity-name",
        group,
        "--add-config",
        "share.auto.offset.reset=earliest",
    ).check()


def test_share_consumer_through_aclgate(gate, client_classes, kafka_topic_name):
    kafka, proxy, set_acls = gate
    topic, group = f"{kafka_topic_name}-q", f"{kafka_topic_name}-share"
    _topic_with_records(kafka, topic, 3)
    _earliest(kafka, group)

    set_acls(acl("TOPIC", topic, "READ"))  # no READ on the group
    out = run_client(client_classes, "share", proxy.bootstrap, topic, group, "3", "15000")
    assert out.startswith("ERROR GroupAuthorizationException"), out

    set_acls(acl("GROUP", group, "READ"))  # no DESCRIBE/READ on the topic
    out = run_client(client_classes, "share", proxy.bootstrap, topic, group, "3", "15000")
    assert out.startswith("ERROR TopicAuthorizationException"), out

    # DESCRIBE only: the member joins and is assigned the topic, every ShareFetch of it is 29
    set_acls(acl("TOPIC", topic, "DESCRIBE"), acl("GROUP", group, "READ"))
    out = run_client(client_classes, "share", proxy.bootstrap, topic, group, "3", "15000")
    assert out.startswith("ERROR TopicAuthorizationException"), out

    set_acls(acl("TOPIC", topic, "READ"), acl("GROUP", group, "READ"))
    out = run_client(client_classes, "share", proxy.bootstrap, topic, group, "3", "30000")
    assert out == "RECORDS 3"


def test_streams_app_through_aclgate(gate, client_classes, kafka_topic_name):
    kafka, proxy, set_acls = gate
    source, sink, app = (
        f"{kafka_topic_name}-in",
        f"{kafka_topic_name}-out",
        f"{kafka_topic_name}-app",
    )
    _topic_with_records(kafka, source, 3)
    kafka.create_topic(sink)
    needed = [
        acl("TOPIC", source, "READ"),
        acl("TOPIC", sink, "WRITE"),
        acl("TOPIC", sink, "DESCRIBE"),
    ]
    set_acls(*needed)  # no READ on the group (the application id)
    out = run_client(client_classes, "streams", proxy.bootstrap, app, source, sink, "3", "30000")
    assert out.startswith("ERROR GroupAuthorizationException"), out

    set_acls(*needed, acl("GROUP", app, "READ"))
    out = run_client(client_classes, "streams", proxy.bootstrap, app, source, sink, "3", "60000")
    assert out == "PROCESSED 3"

    def describe() -> tools.ToolResult:
        return tools.run_tool(
            STREAMS_GROUPS, "--bootstrap-server", proxy.bootstrap, "--describe", "--group", app
        )

    set_acls(
        acl("GROUP", app, "DESCRIBE"),
        acl("TOPIC", source, "DESCRIBE"),
        acl("TOPIC", sink, "DESCRIBE"),
    )
    assert "Exception" not in describe().check().stdout
    # the source topic hidden: the group is answered 29 with Kafka's message, no topology
    set_acls(acl("GROUP", app, "DESCRIBE"), acl("TOPIC", sink, "DESCRIBE"))
    out = describe()
    assert "TopicAuthorizationException: The described group uses topics" in out.stdout, out
    assert source not in out.stdout + out.stderr


# ------------------------------------------------------------ share sessions, byte by byte


def _topic_id(raw: RawClient, topic: str) -> uuid.UUID:
    m = module(3, 12)
    body = raw.request(
        request_entity(
            3,
            12,
            topics=(m.MetadataRequestTopic(topic_id=None, name=topic),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    return body.topics[0].topic_id


def _share_fetch(group: str, member: str, epoch: int, topic_ids=()) -> object:
    m = module(78, 1)
    topics = tuple(
        m.FetchTopic(
            topic_id=t,
            partitions=(m.FetchPartition(partition_index=i32(0), acknowledgement_batches=()),),
        )
        for t in topic_ids
    )
    return request_entity(
        78,
        1,
        group_id=group,
        member_id=member,
        share_session_epoch=i32(epoch),
        max_wait=i32Timedelta.parse(timedelta(milliseconds=300)),
        min_bytes=i32(1),
        max_bytes=i32(1 << 20),
        max_records=i32(100),
        batch_size=i32(100),
        topics=topics,
        forgotten_topics_data=(),
    )


def _fetched(body) -> list[tuple[int, int, bool]]:
    """(partition error, acknowledge error, records present) per partition of the answer."""
    return [
        (p.error_code, p.acknowledge_error_code, bool(p.records))
        for t in body.responses
        for p in t.partitions
    ]


def test_share_session_revoked_topic_is_taken_out(gate, kafka_topic_name):
    """A topic revoked while it sits in a share session is answered 29 on every ShareFetch
    (the broker is told to forget it), another connection cannot use the session (122), and
    allowed again the topic is fetched again without the client re-adding it."""
    kafka, proxy, set_acls = gate
    topic, group = f"{kafka_topic_name}-ss", f"{kafka_topic_name}-ssg"
    _topic_with_records(kafka, topic, 3)
    _earliest(kafka, group)
    allowed = (acl("TOPIC", topic, "READ"), acl("GROUP", group, "READ"))
    set_acls(*allowed)
    member = str(uuid.uuid4())
    with RawClient(proxy.bootstrap) as raw, RawClient(proxy.bootstrap) as other:
        tid = _topic_id(raw, topic)
        epoch, deadline = 0, time.monotonic() + 30
        while True:  # join and wait for the assignment
            hb = raw.request(
                request_entity(
                    76,
                    1,
                    group_id=group,
                    member_id=member,
                    member_epoch=i32(epoch),
                    rack_id=None,
                    subscribed_topic_names=(topic,) if epoch == 0 else None,
                )
            )
            assert time.monotonic() < deadline, "no assignment"
            if hb.error_code in (14, 15, 16):  # coordinator loading / not available / moved
                # FindCoordinator creates __consumer_offsets on a fresh cluster
                raw.request(request_entity(10, 4, key_type=i8(0), coordinator_keys=(group,)))
                time.sleep(0.2)
                continue
            assert hb.error_code == 0, hb
            epoch = hb.member_epoch
            if hb.assignment is not None and hb.assignment.topic_partitions:
                break
            time.sleep(0.2)
        got: list[tuple[int, int, bool]] = []
        session_epoch = 0
        while not any(r for _e, _a, r in got):
            body = raw.request(
                _share_fetch(group, member, session_epoch, [tid] if not session_epoch else [])
            )
            assert body.error_code == 0, body
            got = _fetched(body)
            assert all(e == 0 for e, _a, _r in got), got
            session_epoch += 1
            assert time.monotonic() < deadline, "no records"

        set_acls(acl("GROUP", group, "READ"))  # READ on the topic revoked
        # a new record: a broker still holding the partition in the session would send it
        tools.console_produce(kafka.bootstrap, topic, ["late"]).check()
        for _ in range(2):
            body = raw.request(_share_fetch(group, member, session_epoch))
            session_epoch += 1
            assert body.error_code == 0, body
            assert _fetched(body) == [(ErrorCode.topic_authorization_failed, 0, False)]

        stranger = other.request(_share_fetch(group, member, session_epoch))
        assert stranger.error_code == ErrorCode.share_session_not_found
        assert stranger.responses == ()

        set_acls(*allowed)  # allowed again: back in the broker's session, no error
        body = raw.request(_share_fetch(group, member, session_epoch))
        assert body.error_code == 0, body
        assert all(e == 0 for e, _a, _r in _fetched(body)), _fetched(body)


def test_stateful_streams_app_needs_create_on_its_internal_topics(
    gate, client_classes, kafka_topic_name
):
    """A count's changelog topic is created by the broker when the coordinator asks for it:
    through aclgate the application must hold CREATE on it up front (docs/design.md,
    "Streams groups"; Kafka itself would let the member join with a MISSING_INTERNAL_TOPICS
    status), then the app runs and the topic exists."""
    kafka, proxy, set_acls = gate
    source, sink, app = (
        f"{kafka_topic_name}-in",
        f"{kafka_topic_name}-out",
        f"{kafka_topic_name}-app",
    )
    _topic_with_records(kafka, source, 3)
    kafka.create_topic(sink)
    needed = [
        acl("TOPIC", source, "READ"),
        acl("TOPIC", sink, "WRITE"),
        acl("TOPIC", sink, "DESCRIBE"),
        acl("GROUP", app, "READ"),
    ]
    internal = AclBinding.from_dict(
        {
            "resource_type": "TOPIC",
            "resource_name": f"{app}-",
            "pattern_type": "PREFIXED",
            "principal": "User:ANONYMOUS",
            "host": "*",
            "operation": "ALL",
            "permission_type": "ALLOW",
        }
    )
    without_create = dataclasses.replace(internal, operation=AclOperation.DESCRIBE)
    set_acls(*needed, without_create)
    args = ("streams-count", proxy.bootstrap, app, source, sink, "3")
    out = run_client(client_classes, *args, "6000")
    # never assigned, so nothing processed; the Java client reports the 29 as a
    # TopicAuthorizationException (with its default message) after some heartbeats
    assert out == "TIMEOUT 0" or out.startswith("ERROR TopicAuthorizationException"), out
    denied_create = {
        "api": "StreamsGroupHeartbeat",
        "operation": "CREATE",
        "resource_type": "TOPIC",
        "decision": "DENIED",
        "enforced": "true",
    }
    assert proxy.metric("aclgate_decisions_total", denied_create) > 0

    set_acls(*needed, internal)
    assert run_client(client_classes, *args, "60000") == "PROCESSED 3"
    listed = tools.kafka_topics(kafka.bootstrap, "--list").check().stdout.split()
    assert any(t.startswith(f"{app}-") and t.endswith("-changelog") for t in listed), listed


# ----------------------------------------------------------- kafka-share-groups, kafka-streams-groups

STREAMS_GROUPS = "org.apache.kafka.tools.streams.StreamsGroupCommand"
SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"


def test_share_group_tools_through_aclgate(gate, client_classes, kafka_topic_name):
    """kafka-share-groups through aclgate: describe with offsets (ShareGroupDescribe,
    DescribeShareGroupOffsets), reset (AlterShareGroupOffsets) and delete offsets
    (DeleteShareGroupOffsets), with and without the ACLs each needs."""
    kafka, proxy, set_acls = gate
    topic, group = f"{kafka_topic_name}-tq", f"{kafka_topic_name}-tg"
    _topic_with_records(kafka, topic, 3)
    _earliest(kafka, group)
    # the group gets offsets by consuming directly from Kafka
    assert (
        run_client(client_classes, "share", kafka.bootstrap, topic, group, "3", "30000")
        == "RECORDS 3"
    )

    def tool(*args: str) -> tools.ToolResult:
        return tools.run_tool(
            SHARE_GROUPS, "--bootstrap-server", proxy.bootstrap, "--group", group, *args
        )

    set_acls(acl("GROUP", group, "DESCRIBE"), acl("TOPIC", topic, "DESCRIBE"))
    out = tool("--describe", "--offsets").check().stdout
    assert f"{group} {topic} 0" in " ".join(out.split()), out
    set_acls(acl("GROUP", group, "DESCRIBE"))  # the topic is hidden: left out of the answer
    out = tool("--describe", "--offsets").check().stdout
    assert "has no offset information" in out and topic not in out, out
    set_acls(acl("TOPIC", topic, "DESCRIBE"))
    assert "GroupAuthorizationException" in tool("--describe", "--offsets").stdout

    reset = ("--reset-offsets", "--to-earliest", "--execute", "--topic", topic)
    set_acls(acl("GROUP", group, "READ"), acl("TOPIC", topic, "DESCRIBE"))
    assert "TopicAuthorizationException" in tool(*reset).stderr
    set_acls(acl("GROUP", group, "READ"), acl("TOPIC", topic, "READ"))
    out = tool(*reset).check().stdout
    assert "NEW-OFFSET" in out and f"{group} {topic} 0 0" in " ".join(out.split()), out

    delete = ("--delete-offsets", "--topic", topic)
    assert "Error: Group authorization failed." in tool(*delete).stdout  # no DELETE on it
    set_acls(acl("GROUP", group, "DELETE"), acl("TOPIC", topic, "DESCRIBE"))
    out = tool(*delete).stdout
    assert f"{topic} Error: Topic authorization failed." in " ".join(out.split()), out
    set_acls(acl("GROUP", group, "DELETE"), acl("TOPIC", topic, "READ"))
    assert f"{topic} Successful" in " ".join(tool(*delete).stdout.split())
