"""Two `aclgate serve` processes on one `kafka` ACL store in front of a real 3-node Apache Kafka,
driven through the proxy with Kafka's kafka-acls, confluent-kafka's AdminClient (CreateAcls/
DeleteAcls) and clients: a change through one is enforced by the other, an acknowledged change survives a kill -9, and
the store's topic is invisible and untouchable through the proxy. An instance restarted after a
kill -9 in the middle of a change releases every reader at once; two instances configured with
one transactional id fence each other's changes, loudly but without falling over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tests.aclstore.midchange import HELD_TRANSACTION_MS
from tests.fixtures.wait import wait_until
from tests.kafka import tools
from tests.kafka.cluster import free_ports

pytestmark = pytest.mark.kafka


@pytest.fixture
def fleet(kafka_cluster3, kafka_topic_name, proxy_process):
    """`fleet()` -> a started `aclgate serve` on the shared ACL topic (everyone allowed where no
    ACL applies, so the first CreateAcls is allowed; User:admin is a super user)."""
    acl_topic = f"acls-{kafka_topic_name}"

    def start(*extra: str):
        proc = proxy_process(
            "--upstream",
            kafka_cluster3.bootstrap,
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--acl-store",
            "kafka",
            "--acl-topic",
            acl_topic,
            "--allow-everyone-if-no-acl-found",
            *extra,
        )
        wait_until(lambda: proc.readyz()[0] == 200, timeout=60, what="the ACL topic replayed")
        return proc

    start.acl_topic = acl_topic  # type: ignore[attr-defined]
    return start


_admins: list[AdminClient] = []


@pytest.fixture(autouse=True)
def _drop_admins() -> Iterator[None]:
    """The AdminClients a test made go with it: kept, each would go on reconnecting to its
    stopped proxy's port, and reach whatever a later test listens on there."""
    yield
    _admins.clear()


def admin(proc) -> AdminClient:
    """An AdminClient through `proc`, kept alive until the test ends (a collected client
    cancels its futures)."""
    client = AdminClient({"bootstrap.servers": proc.bootstrap})
    _admins.append(client)
    return client


def deny_write(topic: str) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "User:ANONYMOUS",
        "*",
        AclOperation.WRITE,
        AclPermissionType.DENY,
    )


def describe(proc) -> list[AclBinding]:
    """Every ACL `proc` holds, through its Admin API."""
    everything = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    return admin(proc).describe_acls(everything).result(20)


def produce_error(proc, topic: str) -> KafkaError | None:
    """The error of producing one record to `topic` through `proc` (None: written)."""
    producer = Producer({"bootstrap.servers": proc.bootstrap, "message.timeout.ms": 10_000})
    errors: list[KafkaError | None] = []
    producer.produce(topic, b"x", on_delivery=lambda err, _: errors.append(err))
    producer.flush(15)
    assert errors, "no delivery report"
    return errors[0]


def store(proc) -> dict:
    return proc.readyz()[1]["acl_store"]


def test_a_change_through_one_proxy_is_enforced_by_the_other(fleet, kafka_topic_name):
    a, b = fleet(), fleet()
    topic = kafka_topic_name
    assert produce_error(b, topic) is None
    # Kafka's own kafka-acls through A
    added = tools.kafka_acls(
        a.bootstrap,
        "--add",
        "--deny-principal",
        "User:ANONYMOUS",
        "--operation",
        "Write",
        "--topic",
        topic,
    )
    assert added.returncode == 0, added
    wait_until(lambda: store(b)["applied_offset"] == store(a)["applied_offset"], timeout=10)
    err = produce_error(b, topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert store(a)["fingerprint"] == store(b)["fingerprint"]
    # and removed through B, A lets it through again
    match = AclBindingFilter(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    deleted = admin(b).delete_acls([match])
    assert len(next(iter(deleted.values())).result(20)) == 1
    wait_until(lambda: store(a)["applied_offset"] == store(b)["applied_offset"], timeout=10)
    assert produce_error(a, topic) is None


def test_an_acknowledged_change_survives_kill_9_right_after(fleet, kafka_topic_name):
    a = fleet()
    binding = deny_write(kafka_topic_name)
    admin(a).create_acls([binding])[binding].result(20)
    a.stop(signal.SIGKILL)  # no drain, no flush: only what is in Kafka counts
    b = fleet()
    assert describe(b) == [binding]


def test_the_store_topic_is_invisible_and_untouchable_through_the_proxy(fleet, kafka_cluster3):
    a = fleet("--super-user", "User:admin")
    topic = fleet.acl_topic
    assert topic in kafka_cluster3.admin().list_topics(timeout=10).topics  # it exists upstream
    # even an ALLOW ALL on every topic does not open it
    allow_all = AclBinding(
        ResourceType.TOPIC,
        "*",
        ResourcePatternType.LITERAL,
        "User:ANONYMOUS",
        "*",
        AclOperation.ALL,
        AclPermissionType.ALLOW,
    )
    admin(a).create_acls([allow_all])[allow_all].result(20)
    assert topic not in admin(a).list_topics(timeout=10).topics
    err = produce_error(a, topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as denied:
        admin(a).delete_topics([topic])[topic].result(20)
    assert denied.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert store(a)["error"] is None
    assert topic in kafka_cluster3.admin().list_topics(timeout=10).topics


def test_a_corrupt_record_marks_the_proxy_degraded_in_readyz_and_metrics(fleet, kafka_cluster3):
    a = fleet()
    assert store(a)["error"] is None and a.metric("aclgate_acl_store_degraded") == 0
    producer = Producer({"bootstrap.servers": kafka_cluster3.bootstrap})
    producer.produce(fleet.acl_topic, key=b"not-a-uuid", value=b"{}", partition=0)
    assert producer.flush(20) == 0
    wait_until(lambda: store(a)["error"] is not None, timeout=15)
    assert "degraded" in store(a)["error"] and "not a UUID" in store(a)["error"]
    assert a.metric("aclgate_acl_store_degraded") == 1
    # issue 20: /readyz was 200 while degraded; now 503 with the reason
    status, body = a.readyz()
    assert status == 503 and body["acl_store"]["not_ready"] == body["acl_store"]["error"]
    # (the log is read from the child's stderr by a thread: it may trail /readyz a little)
    wait_until(lambda: "cannot be decoded" in a.log, timeout=10, what="the ERROR line")
    # changes are refused while degraded
    binding = deny_write("after-the-corruption")
    with pytest.raises(KafkaException):
        admin(a).create_acls([binding])[binding].result(20)


def test_a_restarted_instance_releases_the_readers_its_killed_change_held(
    fleet, kafka_cluster3, kafka_topic_name
):
    """Issue 20: an instance killed mid-change left its transaction open, and every reader
    (read_committed) waited at it until the coordinator timed it out (10-20 s). Restarted with
    the same configuration, the instance's writer has the same transactional id, and its first
    init_transactions aborts the open change at once."""
    reader = fleet()
    serve_args = ("--listen", f"127.0.0.1:{free_ports(1)[0]}")  # fixed: the instance's identity
    # the instance, stopped inside a change (its records written, the commit not sent): the
    # store built from the same serve arguments, with the real writer code (midchange.py)
    killed_topic, after_topic = f"{kafka_topic_name}-killed", f"{kafka_topic_name}-after"
    midchange = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.aclstore.midchange",
            "--upstream",
            kafka_cluster3.bootstrap,
            "--acl-store",
            "kafka",
            "--acl-topic",
            fleet.acl_topic,
            *serve_args,
        ],
        stdout=subprocess.PIPE,
        env={**os.environ, "MIDCHANGE_TOPIC": killed_topic},
        cwd=Path(__file__).parents[2],
        text=True,
    )
    try:
        assert midchange.stdout is not None and midchange.stdout.readline() == "open\n"
        opened = time.monotonic()
    finally:
        midchange.kill()  # kill -9 in the middle of the change
        midchange.wait(10)
    restarted = fleet(*serve_args)
    binding = deny_write(after_topic)
    admin(restarted).create_acls([binding])[binding].result(HELD_TRANSACTION_MS / 1000)
    # the reader has it long before the open transaction could have timed out (60 s): only
    # the restart's fencing can have released it
    bound = HELD_TRANSACTION_MS / 1000 / 2
    wait_until(
        lambda: describe(reader) == [binding],
        timeout=max(0.1, bound - (time.monotonic() - opened)),
        what="the reader to apply the change made after the restart",
    )
    released = time.monotonic() - opened
    print(f"\nkill -9 mid-change to the reader applying the next change: {released:.2f} s")
    assert released < bound
    # the interrupted change was aborted, not committed: nobody ever applies it
    assert describe(restarted) == [binding]


def test_two_live_instances_with_one_transactional_id_fence_each_other_loudly(
    fleet, kafka_topic_name
):
    """A misconfiguration the stable id makes possible: each instance's producer fences the
    other's. The fenced change fails with the reason, is counted, and the instance goes on:
    its next change starts a new producer (which fences the other in turn)."""
    tid = f"aclgate-acls-{kafka_topic_name}"
    a = fleet("--acl-transactional-id", tid)
    first, second, fenced, after = (deny_write(f"{kafka_topic_name}-{i}") for i in range(4))
    admin(a).create_acls([first])[first].result(20)  # A's producer holds the id
    b = fleet("--acl-transactional-id", tid)
    admin(b).create_acls([second])[second].result(20)  # B's producer has taken it: A is fenced
    with pytest.raises(KafkaException):
        admin(a).create_acls([fenced])[fenced].result(20)
    wait_until(lambda: f"another instance uses transactional id {tid}" in a.log, timeout=10)
    assert a.metric("aclgate_acl_store_writer_fenced_total") == 1
    assert b.metric("aclgate_acl_store_writer_fenced_total") == 0
    admin(a).create_acls([after])[after].result(20)  # not stuck: a new producer
    assert a.readyz()[0] == 200 and a.proc.poll() is None
