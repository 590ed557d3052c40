"""Real clients against the authorizing proxy: the errors they get, what still works, what
they can see, and what the audit log says (issue 5)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.enforce.conftest import unique, wait_until


def admin(enforced, user: str = "admin") -> AdminClient:
    return AdminClient(enforced.confluent(user))


def create_topics(enforced, *names: str, partitions: int = 1) -> None:
    client = admin(enforced)  # keep a reference: the futures die with the client
    for future in client.create_topics([NewTopic(n, partitions, 1) for n in names]).values():
        future.result(20)


def produce(enforced, user: str, records: list[tuple[str, bytes]], **conf) -> dict[str, list]:
    """topic -> list of delivery errors (None = delivered)."""
    out: dict[str, list] = {}
    fatal: list = []
    conf = {"message.timeout.ms": 8000, "linger.ms": 20, "error_cb": fatal.append, **conf}
    producer = Producer(enforced.confluent(user, **conf))
    for topic, value in records:
        producer.produce(
            topic, value, on_delivery=lambda err, msg, t=topic: out.setdefault(t, []).append(err)
        )
    producer.flush(20)
    for err in fatal:  # fatal errors (e.g. no producer id) come through error_cb
        if err.fatal():
            for topic, _ in records:
                out.setdefault(topic, []).append(err)
    return out


def consume(
    enforced,
    user: str,
    topics: list[str],
    group: str,
    want: int,
    seconds: float = 20,
    until_error=None,
    **conf,
):
    """(values, error codes) seen by a group consumer until `want` values (and, with
    `until_error`, that error code) were seen, or time is up."""
    consumer = Consumer(
        enforced.confluent(
            user,
            **{
                "group.id": group,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                **conf,
            },
        )
    )
    consumer.subscribe(topics)
    values, errors = [], []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and (
            len(values) < want or (until_error is not None and until_error not in errors)
        ):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                errors.append(msg.error().code())
                if msg.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                    break
            else:
                values.append((msg.topic(), msg.value()))
    finally:
        consumer.close()
    return values, errors


# ----------------------------------------------------------------------- real errors


def test_topic_authorization_failed_for_produce_and_consume(enforced):
    topic, group = unique("orders"), unique("g")
    create_topics(enforced, topic)
    enforced.acls("--add", "--allow-principal", "User:alice", "--producer", "--topic", topic)
    enforced.acls(
        "--add", "--allow-principal", "User:alice", "--consumer", "--topic", topic, "--group", group
    )
    enforced.acls("--add", "--allow-principal", "User:bob", "--operation", "Read", "--group", group)
    # bob may see the topic (so the group assigns it to him) but not read it: Fetch says 29
    enforced.acls(
        "--add", "--allow-principal", "User:bob", "--operation", "Describe", "--topic", topic
    )

    assert produce(enforced, "alice", [(topic, b"a")]) == {topic: [None]}
    (err,) = produce(enforced, "bob", [(topic, b"b")])[topic]
    assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    values, errors = consume(enforced, "alice", [topic], group, want=1)
    assert values == [(topic, b"a")]
    values, errors = consume(enforced, "bob", [topic], group, want=1, seconds=8)
    assert values == [] and KafkaError.TOPIC_AUTHORIZATION_FAILED in errors


def test_group_authorization_failed(enforced):
    topic = unique("t")
    create_topics(enforced, topic)
    enforced.acls("--add", "--allow-principal", "User:bob", "--operation", "Read", "--topic", topic)
    values, errors = consume(enforced, "bob", [topic], unique("nogroup"), want=1, seconds=10)
    assert values == [] and KafkaError.GROUP_AUTHORIZATION_FAILED in errors


def test_partial_produce_and_fetch_keep_the_allowed_topic_working(enforced):
    """One Produce and one Fetch request carry both topics; only the denied one fails."""
    ok, secret, group = unique("ok"), unique("secret"), unique("g")
    create_topics(enforced, ok, secret)
    enforced.acls(
        "--add",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Write",
        "--operation",
        "Read",
        "--topic",
        ok,
    )
    enforced.acls(
        "--add", "--allow-principal", "User:alice", "--operation", "Describe", "--topic", secret
    )
    enforced.acls(
        "--add", "--allow-principal", "User:alice", "--operation", "Read", "--group", group
    )
    enforced.acls(
        "--add", "--allow-principal", "User:admin", "--operation", "All", "--topic", secret
    )
    result = produce(enforced, "alice", [(ok, b"1"), (secret, b"2"), (ok, b"3")])
    assert result[ok] == [None, None]
    assert [e.code() for e in result[secret]] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert produce(enforced, "admin", [(secret, b"hidden")]) == {secret: [None]}

    values, errors = consume(
        enforced,
        "alice",
        [ok, secret],
        group,
        want=2,
        seconds=15,
        until_error=KafkaError.TOPIC_AUTHORIZATION_FAILED,
    )
    assert sorted(values) == [(ok, b"1"), (ok, b"3")]
    assert all(topic != secret for topic, _ in values)
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in errors
    produce_requests = [
        e for e in enforced.audit() if e["api"] == "Produce" and e["principal"] == "User:alice"
    ]
    assert {(e["resource_name"], e["decision"]) for e in produce_requests} == {
        (ok, "ALLOWED"),
        (secret, "DENIED"),
    }


def test_transactional_id_authorization_failed(enforced):
    topic = unique("t")
    create_topics(enforced, topic)
    enforced.acls(
        "--add", "--allow-principal", "User:bob", "--operation", "Write", "--topic", topic
    )
    producer = Producer(enforced.confluent("bob", **{"transactional.id": unique("txn")}))
    with pytest.raises(KafkaException) as exc:
        producer.init_transactions(15)
    assert exc.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_cluster_authorization_failed_for_admin_calls(enforced):
    # (confluent-kafka's describe_user_scram_credentials would be the obvious call, but
    # librdkafka 2.16 crashes on CLUSTER_AUTHORIZATION_FAILED there, against Kafka itself too)
    from kafka import KafkaAdminClient
    from kafka.errors import ClusterAuthorizationFailedError

    bob = KafkaAdminClient(**enforced.kafka_python("bob"))
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            bob.list_partition_reassignments()
        with pytest.raises(ClusterAuthorizationFailedError):
            bob.describe_user_scram_credentials()
    finally:
        bob.close()
    enforced.acls("--add", "--allow-principal", "User:bob", "--operation", "Describe", "--cluster")
    bob = KafkaAdminClient(**enforced.kafka_python("bob"))
    try:
        bob.list_partition_reassignments()  # allowed now: no exception
    finally:
        bob.close()
    # an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679)
    topic = unique("t")
    create_topics(enforced, topic)
    enforced.acls(
        "--add", "--allow-principal", "User:charlie", "--operation", "Describe", "--topic", topic
    )
    producer = Producer(
        enforced.confluent("charlie", **{"enable.idempotence": True, "message.timeout.ms": 6000})
    )
    producer.produce(topic, b"x")
    with pytest.raises(KafkaException) as exc:
        producer.flush(15)  # librdkafka raises the fatal InitProducerId error here
    assert exc.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


# ------------------------------------------------------------- the common cases (seed 001)


def test_create_produce_consume_with_the_convenience_acls(enforced):
    topic, group = unique("Test-topic"), unique("Group-1")
    # create a topic via Metadata auto-creation: CREATE and DESCRIBE on the topic
    enforced.acls("--add", "--allow-principal", "User:bob", "--producer", "--topic", topic)
    enforced.acls(
        "--add", "--allow-principal", "User:alice", "--consumer", "--topic", topic, "--group", group
    )
    assert produce(enforced, "bob", [(topic, b"hello")]) == {topic: [None]}
    values, _ = consume(enforced, "alice", [topic], group, want=1)
    assert values == [(topic, b"hello")]
    # alice may not write, bob may not read
    (err,) = produce(enforced, "alice", [(topic, b"no")])[topic]
    assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_idempotent_producer_needs_only_write_on_a_topic(enforced):
    topic = unique("idem")
    create_topics(enforced, topic)
    enforced.acls(
        "--add",
        "--allow-principal",
        "User:bob",
        "--operation",
        "Write",
        "--operation",
        "Describe",
        "--topic",
        topic,
    )
    assert produce(
        enforced, "bob", [(topic, b"1"), (topic, b"2")], **{"enable.idempotence": True}
    ) == {topic: [None, None]}


def test_transactional_producer_with_the_producer_acls(enforced):
    topic, txn = unique("tx"), unique("txid")
    create_topics(enforced, topic)
    enforced.acls(
        "--add",
        "--allow-principal",
        "User:bob",
        "--producer",
        "--topic",
        topic,
        "--transactional-id",
        txn,
    )
    producer = Producer(enforced.confluent("bob", **{"transactional.id": txn}))
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, b"in-txn")
    producer.commit_transaction(15)


def test_prefixed_acls(enforced):
    team = unique("team")
    a, b, other = f"{team}.a", f"{team}.b", unique("other")
    create_topics(enforced, a, b, other)
    enforced.acls(
        "--add",
        "--allow-principal",
        "User:bob",
        "--operation",
        "Write",
        "--topic",
        f"{team}.",
        "--resource-pattern-type",
        "prefixed",
    )
    result = produce(enforced, "bob", [(a, b"1"), (b, b"2"), (other, b"3")])
    assert result[a] == [None] and result[b] == [None]
    assert result[other][0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_deny_for_one_principal_next_to_allow_for_everyone(enforced):
    topic, group = unique("Test-topic"), unique("g")
    create_topics(enforced, topic)
    assert produce(enforced, "admin", [(topic, b"m")]) == {topic: [None]}
    enforced.acls(
        "--add",
        "--allow-principal",
        "User:*",
        "--operation",
        "Read",
        "--topic",
        topic,
        "--group",
        group,
    )
    enforced.acls("--add", "--deny-principal", "User:bob", "--operation", "Read", "--topic", topic)
    values, _ = consume(enforced, "alice", [topic], group, want=1)
    assert values == [(topic, b"m")]
    values, errors = consume(
        enforced, "bob", [topic], unique("g") if False else group, want=1, seconds=8
    )
    assert values == [] and KafkaError.TOPIC_AUTHORIZATION_FAILED in errors
    denied = [
        e for e in enforced.audit() if e["principal"] == "User:bob" and e["decision"] == "DENIED"
    ]
    assert any(e["rule"] == "ACL" and e["acl"]["permission_type"] == "DENY" for e in denied)


# ---------------------------------------------------------------------------- metadata


def test_metadata_never_lists_a_topic_the_principal_may_not_describe(enforced):
    visible, hidden = unique("visible"), unique("hidden")
    create_topics(enforced, visible, hidden)
    enforced.acls(
        "--add", "--allow-principal", "User:alice", "--operation", "Describe", "--topic", visible
    )
    md = admin(enforced, "alice").list_topics(timeout=10)
    assert visible in md.topics and hidden not in md.topics
    assert set(md.topics) == {visible}
    # asking for it by name: TOPIC_AUTHORIZATION_FAILED, not "unknown topic" (existence is not disclosed)
    md = admin(enforced, "alice").list_topics(hidden, timeout=10)
    assert md.topics[hidden].error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    from kafka import KafkaAdminClient

    kp = KafkaAdminClient(**enforced.kafka_python("alice"))
    try:
        assert set(kp.list_topics()) == {visible}
    finally:
        kp.close()


# ------------------------------------------------------------------------------ dry-run


def test_dry_run_forwards_everything_and_audits_would_be_denials(
    tansu, proxy_factory, users_file, tmp_path
):
    from tests.enforce.conftest import Enforced

    acl_file = tmp_path / "acls.json"
    acl_file.write_text('{"version": 1, "acls": []}\n')
    proxy = proxy_factory(
        tansu.bootstrap,
        listener_security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms="PLAIN",
        users_file=users_file,
        acl_file=acl_file,
        allow_everyone_if_no_acl_found=False,
        mode="dry-run",
        audit_file=tmp_path / "audit.jsonl",
    )
    dry = Enforced(proxy, acl_file, tmp_path / "audit.jsonl")
    topic, group = unique("dry"), unique("g")
    assert produce(dry, "bob", [(topic, b"through")]) == {topic: [None]}
    values, errors = consume(dry, "bob", [topic], group, want=1)
    assert values == [(topic, b"through")] and not errors
    events = dry.audit()
    denied = {
        (e["api"], e["operation"], e["resource_type"]) for e in events if e["decision"] == "DENIED"
    }
    assert ("Produce", "WRITE", "TOPIC") in denied and ("Fetch", "READ", "TOPIC") in denied
    assert ("JoinGroup", "READ", "GROUP") in denied
    assert all(e["enforced"] is False for e in events if e["decision"] == "DENIED")


# ----------------------------------------------------------------- fetch sessions (KIP-227)


def test_acl_revoked_mid_consumption_stops_the_data_at_once(enforced):
    """Fetch sessions are forced sessionless, so every fetch is re-authorized in full: after a
    revocation no new record is delivered, and the consumer gets TOPIC_AUTHORIZATION_FAILED."""
    topic, group = unique("live"), unique("g")
    create_topics(enforced, topic)
    enforced.acls(
        "--add", "--allow-principal", "User:alice", "--consumer", "--topic", topic, "--group", group
    )
    assert produce(enforced, "admin", [(topic, b"before")]) == {topic: [None]}
    consumer = Consumer(
        enforced.confluent(
            "alice",
            **{"group.id": group, "auto.offset.reset": "earliest", "session.timeout.ms": 6000},
        )
    )
    consumer.subscribe([topic])
    try:
        first = wait_until(lambda: (m := consumer.poll(0.5)) is not None and not m.error() and m)
        assert first.value() == b"before"
        enforced.acls(
            "--remove",
            "--force",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--topic",
            topic,
        )
        # A fetch authorized just before the revocation may still wait in the broker's
        # purgatory (fetch.wait.max.ms, 500 ms by default) and would carry the next record, on
        # Kafka itself too: authorization happens when a request arrives. Let it finish.
        time.sleep(1.5)
        assert produce(enforced, "admin", [(topic, b"after")]) == {topic: [None]}
        seen, errors = [], []
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            (errors if msg.error() else seen).append(
                msg.error().code() if msg.error() else msg.value()
            )
        assert b"after" not in seen
        assert KafkaError.TOPIC_AUTHORIZATION_FAILED in errors
    finally:
        consumer.close()


def test_kafka_python_consumer_reads_allowed_and_denied_topics_together(enforced):
    from kafka import KafkaConsumer
    from kafka.errors import TopicAuthorizationFailedError

    ok, denied, group = unique("ok"), unique("denied"), unique("g")
    create_topics(enforced, ok, denied)
    assert produce(enforced, "admin", [(ok, b"a"), (denied, b"secret")]) == {
        ok: [None],
        denied: [None],
    }
    enforced.acls(
        "--add", "--allow-principal", "User:alice", "--consumer", "--topic", ok, "--group", group
    )
    # alice sees `denied` (it is assigned to her) but may not read it: one Fetch carries both
    enforced.acls(
        "--add", "--allow-principal", "User:alice", "--operation", "Describe", "--topic", denied
    )
    # subscribed to both from the start: one join, no rebalance (a re-subscription's rebalance
    # did not always end within a minute on a loaded 2-core machine under make test's workers)
    consumer = KafkaConsumer(
        ok,
        denied,
        **enforced.kafka_python("alice"),
        group_id=group,
        auto_offset_reset="earliest",
        session_timeout_ms=10000,
        heartbeat_interval_ms=1000,
    )
    try:
        got: list[bytes] = []
        raised = 0

        def poll_until(done) -> None:
            nonlocal got, raised
            deadline = time.monotonic() + 60  # a group join on a loaded 2-core machine is slow
            while time.monotonic() < deadline and not done():
                try:
                    got += [r.value for recs in consumer.poll(500).values() for r in recs]
                except TopicAuthorizationFailedError:
                    raised += 1

        poll_until(lambda: b"a" in got and raised)
        assert b"a" in got
        assert produce(enforced, "admin", [(ok, b"b")]) == {ok: [None]}
        poll_until(lambda: b"b" in got)
        assert b"secret" not in got
        assert b"b" in got, "the allowed topic kept flowing next to the denied one"
        assert raised, "the denied partition reported TOPIC_AUTHORIZATION_FAILED"
    finally:
        consumer.close()
