"""The Admin API of confluent-kafka and kafka-python through aclgate returns what it returns
from Apache Kafka holding the same ACLs; and a change through aclgate is in force on the very
next request (read-your-writes)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
)
from confluent_kafka.admin import ResourcePatternType as Pattern
from confluent_kafka.admin import ResourceType as Res

from tests.acladmin.conftest import Side
from tests.equivalence.harness import Profile, _raw_client
from tests.fixtures.rawclient import module, request_entity

pytestmark = pytest.mark.kafka

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
ANY_OP, ANY_PERM = AclOperation.ANY, AclPermissionType.ANY

BINDINGS = [
    AclBinding(Res.TOPIC, "orders", Pattern.LITERAL, "User:alice", "*", AclOperation.READ, ALLOW),
    AclBinding(Res.TOPIC, "ord", Pattern.PREFIXED, "User:bob", "*", AclOperation.WRITE, ALLOW),
    AclBinding(Res.TOPIC, "*", Pattern.LITERAL, "User:bob", "*", AclOperation.DESCRIBE, DENY),
    AclBinding(Res.GROUP, "g", Pattern.LITERAL, "User:alice", "10.0.0.1", AclOperation.READ, ALLOW),
    AclBinding(Res.BROKER, "kafka-cluster", Pattern.LITERAL, "User:alice", "*",
               AclOperation.ALTER, ALLOW),
    # refused one by one, as Kafka refuses them: a CLUSTER not named kafka-cluster, an empty name
    AclBinding(Res.BROKER, "other", Pattern.LITERAL, "User:alice", "*", AclOperation.ALTER, ALLOW),
    AclBinding(Res.TOPIC, "", Pattern.LITERAL, "User:alice", "*", AclOperation.READ, ALLOW),
    # already present: created again without a fuss
    AclBinding(Res.TOPIC, "orders", Pattern.LITERAL, "User:alice", "*", AclOperation.READ, ALLOW),
]  # fmt: skip


def _filter(rtype=Res.ANY, name=None, pattern=Pattern.ANY, principal=None, host=None,
            op=ANY_OP, perm=ANY_PERM) -> AclBindingFilter:  # fmt: skip
    return AclBindingFilter(rtype, name, pattern, principal, host, op, perm)


FILTERS = [
    _filter(),
    _filter(Res.TOPIC, "orders", Pattern.MATCH),
    _filter(Res.TOPIC, "orders", Pattern.ANY),
    _filter(Res.TOPIC, "ord", Pattern.PREFIXED),
    _filter(Res.TOPIC, "*", Pattern.LITERAL),
    _filter(principal="User:alice"),
    _filter(host="10.0.0.1"),
    _filter(op=AclOperation.WRITE),
    _filter(perm=DENY),
    _filter(Res.GROUP, "g", Pattern.MATCH),
    _filter(Res.BROKER),
]
DELETIONS = [
    _filter(Res.TOPIC, "orders", Pattern.MATCH, perm=ALLOW),  # two ACLs, one also matched below
    _filter(Res.TOPIC, "ord", Pattern.PREFIXED),
    _filter(principal="User:alice", op=AclOperation.READ),
    _filter(principal="User:nobody"),
]


def _text(b: Any) -> str:
    return str(b)


def _outcome(future) -> Any:
    try:
        result = future.result(timeout=20)
    except KafkaException as exc:
        return f"error {exc.args[0].name()}"
    if isinstance(result, list):
        return sorted(_text(b) for b in result)
    return result


def confluent_session(side: Side) -> list[Any]:
    admin = AdminClient(side.confluent())
    out: list[Any] = []
    # one call per binding: confluent-kafka reports per binding, keyed by the binding, so
    # duplicates in one call would collapse
    for binding in BINDINGS:
        out.append(("create", _text(binding), _outcome(admin.create_acls([binding])[binding])))
    for flt in FILTERS:
        out.append(("describe", _text(flt), _outcome(admin.describe_acls(flt))))
    deleted = admin.delete_acls(DELETIONS, request_timeout=20)
    out += [("delete", _text(f), _outcome(deleted[f])) for f in DELETIONS]
    out.append(("describe", "all", _outcome(admin.describe_acls(_filter()))))
    return out


def test_confluent_kafka_admin_acl_calls_equal_kafkas(reference: Side, candidate: Side):
    expected, got = confluent_session(reference), confluent_session(candidate)
    assert [e for e in expected if e[2] == "error CLUSTER_AUTHORIZATION_FAILED"] == []
    assert any(e[0] == "create" and str(e[2]).startswith("error") for e in expected)
    assert got == expected


def kafka_python_session(side: Side) -> list[Any]:
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )

    admin = KafkaAdminClient(**side.kafka_python(), request_timeout_ms=20000)
    try:
        acls = [
            ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                ResourcePattern(ResourceType.TOPIC, "kp", ACLResourcePatternType.LITERAL)),
            ACL("User:bob", "*", ACLOperation.WRITE, ACLPermissionType.DENY,
                ResourcePattern(ResourceType.TOPIC, "kp-", ACLResourcePatternType.PREFIXED)),
        ]  # fmt: skip
        created = admin.create_acls(acls)
        out: list[Any] = [
            sorted(str(a) for a in created["succeeded"]),
            sorted(str(r) for r in created["failed"]),
        ]
        for pattern in (ACLResourcePatternType.MATCH, ACLResourcePatternType.ANY):
            flt = ACLFilter(
                None, "*", ACLOperation.ANY, ACLPermissionType.ANY,
                ResourcePatternFilter(ResourceType.TOPIC, "kp-x" if pattern == ACLResourcePatternType.MATCH else "kp", pattern),
            )  # fmt: skip
            found, error = admin.describe_acls(flt)
            out.append((sorted(str(a) for a in found), error.__name__))
        everything = ACLFilter(
            None, None, ACLOperation.ANY, ACLPermissionType.ANY,
            ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
        )  # fmt: skip
        deleted = admin.delete_acls([everything])
        out.append(sorted(str(a) for _, matched, _ in deleted for a in matched))
        return out
    finally:
        admin.close()


def test_kafka_python_admin_acl_calls_equal_kafkas(reference: Side, candidate: Side):
    expected = kafka_python_session(reference)
    assert expected[0], "Kafka created nothing: the session proves nothing"
    assert kafka_python_session(candidate) == expected


def test_a_change_through_aclgate_is_in_force_on_the_very_next_request(
    candidate: Side, kafka_single, kafka_topic_name
):
    """CreateAcls answered, then alice's next Metadata sees the topic; DeleteAcls answered,
    then her next Metadata is refused. No waiting in between, twenty times."""
    kafka_single.create_topic(kafka_topic_name)
    admin = AdminClient(candidate.confluent())
    alice = _raw_client(
        Profile("User:alice", candidate.bootstrap, sasl=("PLAIN", "alice", candidate.passwords["alice"]))
    )  # fmt: skip
    acl = AclBinding(
        Res.TOPIC,
        kafka_topic_name,
        Pattern.LITERAL,
        "User:alice",
        "*",
        AclOperation.DESCRIBE,
        ALLOW,
    )
    as_filter = _filter(
        Res.TOPIC,
        kafka_topic_name,
        Pattern.LITERAL,
        "User:alice",
        "*",
        AclOperation.DESCRIBE,
        ALLOW,
    )

    def error_code() -> int:
        body = request_entity(
            3,
            12,
            topics=(module(3, 12).MetadataRequestTopic(topic_id=None, name=kafka_topic_name),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        return int(alice.request(body).topics[0].error_code)

    try:
        assert error_code() == 29
        for _ in range(20):
            admin.create_acls([acl])[acl].result(timeout=20)
            assert error_code() == 0
            deleted = admin.delete_acls([as_filter])
            for future in deleted.values():
                assert len(future.result(timeout=20)) == 1
            assert error_code() == 29
    finally:
        alice.close()


def test_a_request_pipelined_behind_a_create_acls_is_decided_with_the_change(
    candidate: Side, kafka_single, kafka_topic_name
):
    """alice (ALTER on the cluster) sends CreateAcls for her own DESCRIBE on a topic and,
    without waiting for its answer, a Metadata request for the topic on the same connection:
    as on a broker, the second is decided once the first is answered."""
    from kio.static.primitive import i8

    from aclgate.protocol.codec import decode_response
    from tests.fixtures.rawclient import _SIZE

    kafka_single.create_topic(kafka_topic_name)
    admin = AdminClient(candidate.confluent())
    alter = AclBinding(Res.BROKER, "kafka-cluster", Pattern.LITERAL, "User:alice", "*",
                       AclOperation.ALTER, ALLOW)  # fmt: skip
    admin.create_acls([alter])[alter].result(timeout=20)
    alice = _raw_client(
        Profile("User:alice", candidate.bootstrap, sasl=("PLAIN", "alice", candidate.passwords["alice"]))
    )  # fmt: skip
    try:
        create = request_entity(
            30,
            3,
            creations=(
                module(30, 3).AclCreation(
                    resource_type=i8(2),
                    resource_name=kafka_topic_name,
                    resource_pattern_type=i8(3),
                    principal="User:alice",
                    host="*",
                    operation=i8(8),
                    permission_type=i8(3),
                ),
            ),
        )
        metadata = request_entity(
            3,
            12,
            topics=(module(3, 12).MetadataRequestTopic(topic_id=None, name=kafka_topic_name),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        first, second = alice.send(create), alice.send(metadata)
        answers = {}
        for _ in range(2):
            frame = alice.recv_frame()
            assert frame is not None
            answers[_SIZE.unpack_from(frame, 4)[0]] = frame
        created = decode_response(answers[first], 30, 3)
        assert [int(r.error_code) for r in created.results] == [0]
        described = decode_response(answers[second], 3, 12)
        assert int(described.topics[0].error_code) == 0
    finally:
        alice.close()
