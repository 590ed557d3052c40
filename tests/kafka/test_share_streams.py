"""Share groups (KIP-932) and streams groups (KIP-1071) through aclgate in front of Apache
Kafka: the Java KafkaShareConsumer and a Kafka Streams app on `group.protocol=streams`
(tests/kafka/java/GroupsClient.java, compiled here against tests/kafka/lib), with and without
the ACLs they need; denied, they fail with Kafka's own exceptions (docs/apis.md, keys 76-92)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from aclgate.authz.aclfile import dump_acl_file
from aclgate.authz.model import AclBinding
from tests.kafka import tools
from tests.kafka.cluster import KAFKA_DIR, TOOL_JVM_OPTS, TOOLS_LOG4J, classpath

pytestmark = pytest.mark.kafka

SOURCE = KAFKA_DIR / "java" / "GroupsClient.java"


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
    """GroupsClient.class, compiled once per run (javac ~3 s)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    out = tmp_path_factory.mktemp(f"groupsclient-{digest}")
    subprocess.run(
        ["javac", "-nowarn", "-cp", classpath(), "-d", str(out), str(SOURCE)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


def run_client(classes: Path, *args: str, timeout: float = 90) -> str:
    """The client's one result line."""
    cp = f"{classes}:{classpath()}"
    proc = subprocess.run(
        [
            "java",
            *TOOL_JVM_OPTS,
            f"-Dlog4j2.configurationFile={TOOLS_LOG4J}",
            "-cp",
            cp,
            "GroupsClient",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = proc.stdout.strip().splitlines()
    assert lines, f"no result (exit {proc.returncode})\n{proc.stderr[-3000:]}"
    return lines[-1]


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


def test_share_consumer_through_aclgate(gate, client_classes, kafka_topic_name):
    kafka, proxy, set_acls = gate
    topic, group = f"{kafka_topic_name}-q", f"{kafka_topic_name}-share"
    _topic_with_records(kafka, topic, 3)
    # share groups start at the latest offset: have the group start at the earliest
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
