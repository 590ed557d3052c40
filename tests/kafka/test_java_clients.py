"""Apache Kafka's Java clients through aclgate in front of Apache Kafka 4.3.1 (issue 13 item 2).

One JVM per listener runs tests/kafka/java/JavaClients.java: AdminClient (create, describe,
list, offsets, delete), an idempotent and a transactional producer, a classic and a KIP-848
(`group.protocol=consumer`) consumer reading committed records. Over PLAINTEXT, SASL_SSL with
SCRAM-SHA-512 and mTLS (the certificate subject mapped by `ssl.principal.mapping.rules`), each
principal holding prefixed ACLs on its own names only; then the same without the group ACL
(Kafka's GroupAuthorizationException), Kafka's console producer, console consumer and
kafka-consumer-groups, and the clients against the 3-node cluster.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aclgate.authz.aclfile import dump_acl_file
from aclgate.authz.model import AclBinding
from aclgate.proxy.security.usersfile import add_user
from tests.kafka import tools
from tests.kafka.cluster import write_properties
from tests.kafka.javaclient import compile_clients, run_client
from tests.listeners.conftest import Pki
from tests.listeners.util import MAPPING_RULES, password

pytestmark = pytest.mark.kafka
LISTENERS = ["PLAINTEXT", "SASL_SSL", "mTLS"]


def prefixed(principal: str, resource_type: str, prefix: str) -> AclBinding:
    return AclBinding.from_dict(
        {
            "resource_type": resource_type,
            "resource_name": prefix,
            "pattern_type": "PREFIXED",
            "principal": principal,
            "host": "*",
            "operation": "ALL",
            "permission_type": "ALLOW",
        }
    )


@pytest.fixture(scope="module")
def classes(tmp_path_factory) -> Path:
    return compile_clients(tmp_path_factory, "JavaClients")


@pytest.fixture(scope="module")
def security(tmp_path_factory):
    """(Pki, users file, PEM keystore of alice's certificate and key)."""
    root = tmp_path_factory.mktemp("java-clients-security")
    certs = Pki(root)
    users = root / "users.json"
    add_user(users, "alice", password("alice"), ("SCRAM-SHA-512",))
    cert, key = certs.client("alice")
    keystore = root / "alice.pem"
    keystore.write_text(key.read_text() + cert.read_text())
    return certs, users, keystore


#: listener -> (principal, proxy settings, Java client properties), from `security`
def listener(name: str, security) -> tuple[str, dict, dict]:
    certs, users, keystore = security
    trust = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca)}
    if name == "PLAINTEXT":
        return "User:ANONYMOUS", {}, {}
    tls = {"ssl_certfile": certs.server_cert, "ssl_keyfile": certs.server_key}
    if name == "SASL_SSL":
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="alice" password="{password("alice")}";'
        )
        return (
            "User:alice",
            {
                "listener_security_protocol": "SASL_SSL",
                "sasl_mechanisms": "SCRAM-SHA-512",
                "users_file": users,
                **tls,
            },
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": jaas,
                **trust,
            },
        )
    return (  # mTLS
        "User:alice",
        {
            "listener_security_protocol": "SSL",
            "ssl_cafile": certs.ca,
            "ssl_client_auth": "required",
            "ssl_principal_mapping_rules": MAPPING_RULES,
            **tls,
        },
        {
            "security.protocol": "SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            **trust,
        },
    )


def start(proxy_factory, upstream: str, tmp_path: Path, proxy_cfg: dict, acls) -> object:
    path = tmp_path / "acls.json"
    path.write_text(dump_acl_file(list(acls)))
    return proxy_factory(upstream, acl_file=path, allow_everyone_if_no_acl_found=False, **proxy_cfg)


def grants(principal: str, prefix: str, group: bool = True) -> list[AclBinding]:
    kinds = ["TOPIC", "TRANSACTIONAL_ID"] + (["GROUP"] if group else [])
    return [prefixed(principal, kind, prefix) for kind in kinds]


@pytest.mark.parametrize("name", LISTENERS)
def test_java_clients_through_aclgate(
    name, kafka_single, proxy_factory, classes, security, kafka_topic_name, tmp_path
):
    principal, proxy_cfg, client = listener(name, security)
    prefix = kafka_topic_name
    proxy = start(
        proxy_factory, kafka_single.bootstrap, tmp_path, proxy_cfg, grants(principal, prefix)
    )
    props = write_properties(tmp_path / "client.properties", client)
    out = run_client(classes, "JavaClients", proxy.bootstrap, str(props), prefix)
    assert out.startswith("OK nodes=1 partitions=2 classic=10 consumer=10 committed="), out


def test_java_clients_without_the_group_acl(
    kafka_single, proxy_factory, classes, kafka_topic_name, tmp_path
):
    prefix = kafka_topic_name
    acls = grants("User:ANONYMOUS", prefix, group=False)
    proxy = start(proxy_factory, kafka_single.bootstrap, tmp_path, {}, acls)
    props = write_properties(tmp_path / "client.properties", {})
    out = run_client(classes, "JavaClients", proxy.bootstrap, str(props), prefix)
    assert out.startswith("FAIL classic consumer GroupAuthorizationException"), out


@pytest.mark.parametrize("name", LISTENERS)
def test_console_tools_through_aclgate(
    name, kafka_single, proxy_factory, security, kafka_topic_name, tmp_path
):
    principal, proxy_cfg, client = listener(name, security)
    topic, group = f"{kafka_topic_name}-c", f"{kafka_topic_name}-g"
    kafka_single.create_topic(topic)
    proxy = start(
        proxy_factory,
        kafka_single.bootstrap,
        tmp_path,
        proxy_cfg,
        grants(principal, kafka_topic_name),
    )
    kw = {"config": client} if client else {}
    tools.console_produce(proxy.bootstrap, topic, ["a", "b", "c"], **kw).check()
    read = tools.console_consume(proxy.bootstrap, topic, max_messages=3, group=group, **kw).check()
    assert read.stdout.split() == ["a", "b", "c"]
    described = tools.run_tool(
        "kafka-consumer-groups",
        "--bootstrap-server",
        proxy.bootstrap,
        "--describe",
        "--group",
        group,
        **kw,
    ).check()
    assert f"{group} {topic} 0 3 3 0" in " ".join(described.stdout.split()), described.stdout
    # another group: not this principal's, so Kafka's error
    denied = tools.console_consume(
        proxy.bootstrap, topic, max_messages=1, group="other-group", timeout_ms=5000, **kw
    )
    assert "GroupAuthorizationException" in denied.stdout + denied.stderr


@pytest.mark.parametrize("name", LISTENERS)
def test_java_clients_on_three_nodes(
    name, kafka_cluster3, proxy_factory, classes, security, kafka_topic_name, tmp_path
):
    principal, proxy_cfg, client = listener(name, security)
    prefix = kafka_topic_name
    proxy = start(
        proxy_factory, kafka_cluster3.bootstrap, tmp_path, proxy_cfg, grants(principal, prefix)
    )
    props = write_properties(tmp_path / "client.properties", client)
    out = run_client(classes, "JavaClients", proxy.bootstrap, str(props), prefix)
    assert out.startswith("OK nodes=3 partitions=2 classic=10 consumer=10 committed="), out
