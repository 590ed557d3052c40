"""Two sides holding the same ACLs, both managed through the Admin API over SASL as a super user:

    reference  Apache Kafka with StandardAuthorizer (`kafka_authz`), reached directly;
    candidate  aclgate with its `file` ACL store, terminating SASL with a users file holding
               the same users and passwords, in front of `kafka_single` (no authorizer).

A test runs the same commands (kafka-acls, confluent-kafka, kafka-python) against both and
compares what they print or return. Both start and end with no ACL.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.proxy import RunningProxy
from tests.kafka.cluster import KafkaCluster

USERS = ("admin", "alice", "bob", "charlie")


@dataclass
class Side:
    """One target: where it listens and how each user logs in to it."""

    name: str
    bootstrap: str
    passwords: dict[str, str]
    proxy: RunningProxy | None = None

    def java_properties(self, user: str = "admin") -> dict[str, str]:
        module = "org.apache.kafka.common.security.plain.PlainLoginModule"
        return {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": (
                f'{module} required username="{user}" password="{self.passwords[user]}";'
            ),
        }

    def confluent(self, user: str = "admin", **extra: Any) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": self.passwords[user],
            "log_level": 3,
            **extra,
        }

    def kafka_python(self, user: str = "admin") -> dict[str, Any]:
        return {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": user,
            "sasl_plain_password": self.passwords[user],
        }


@pytest.fixture
def reference(kafka_authz: KafkaCluster) -> Iterator[Side]:
    lst = kafka_authz.listener("SASL_PLAINTEXT")
    kafka_authz.acls.clear()
    yield Side("kafka", lst.bootstrap, {u: lst.users[u] for u in USERS})
    kafka_authz.acls.clear()


@pytest.fixture
def candidate(kafka_authz, kafka_single, proxy_factory, tmp_path: Path) -> Side:
    from aclgate.proxy.security.usersfile import add_user

    lst = kafka_authz.listener("SASL_PLAINTEXT")
    passwords = {u: lst.users[u] for u in USERS}
    users_file = tmp_path / "users.json"
    for user, password in passwords.items():
        add_user(users_file, user, password, ["PLAIN", "SCRAM-SHA-512"], iterations=4096)
    proxy = proxy_factory(
        kafka_single.bootstrap,
        listener_security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms="PLAIN,SCRAM-SHA-512",
        users_file=users_file,
        super_user=["User:admin"],
        allow_everyone_if_no_acl_found=False,
        acl_file=tmp_path / "acls.json",
        acl_file_missing_ok=True,
    )
    return Side("aclgate", proxy.bootstrap, passwords, proxy)
