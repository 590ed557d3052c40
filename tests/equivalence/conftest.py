"""Targets for the equivalence tests: Apache Kafka (the reference) and aclgate (the candidate).

open_targets   Kafka without an authorizer, directly  vs.  aclgate (transparent) in front
               of the same Kafka (`kafka_single`).
anon_targets   Kafka with StandardAuthorizer, PLAINTEXT clients = User:ANONYMOUS (not a
               super user; tests/equivalence/cluster.py)  vs.  aclgate with the same ACLs
               in front of `kafka_single` (no authorizer).
"""

from __future__ import annotations

import pytest

from tests.equivalence.cluster import AnonymousAuthzCluster
from tests.equivalence.harness import KafkaTarget, Profile, ProxyTarget
from tests.equivalence.scenarios import ANON
from tests.fixtures.kafka import require_kafka
from tests.kafka.cluster import KafkaStartError, kafka_version


@pytest.fixture(scope="session")
def kafka_anon_authz(tmp_path_factory):
    """Kafka with StandardAuthorizer whose PLAINTEXT clients are User:ANONYMOUS, not super."""
    require_kafka()
    cluster = AnonymousAuthzCluster(workdir=tmp_path_factory.mktemp("kafka_anon_authz"))
    try:
        cluster.start()
    except KafkaStartError as exc:
        pytest.fail(f"kafka_anon_authz: Apache Kafka did not start: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def equivalence_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("equivalence")


def _proxy_profiles(proxy):
    return {ANON: Profile(ANON, proxy.bootstrap)}


@pytest.fixture(scope="session")
def open_targets(kafka_single, equivalence_dir):
    observer = {"bootstrap.servers": kafka_single.bootstrap}
    reference = KafkaTarget(
        f"Apache Kafka {kafka_version()}, no authorizer, direct",
        {ANON: Profile(ANON, kafka_single.bootstrap)},
        observer,
    )
    candidate = ProxyTarget(
        "aclgate (no ACL file, allow-everyone) in front of the same Kafka",
        kafka_single.bootstrap,
        _proxy_profiles,
        observer,
        equivalence_dir,
        authorize=False,
    )
    return reference, candidate


@pytest.fixture(scope="session")
def anon_targets(kafka_anon_authz, kafka_single, equivalence_dir):
    reference = KafkaTarget(
        f"Apache Kafka {kafka_version()} + StandardAuthorizer, PLAINTEXT (User:ANONYMOUS)",
        {ANON: Profile(ANON, kafka_anon_authz.bootstrap)},
        kafka_anon_authz.admin_config(),
        kafka_acls=kafka_anon_authz.acls,
    )
    candidate = ProxyTarget(
        f"aclgate (same ACLs) in front of Apache Kafka {kafka_version()} without authorizer",
        kafka_single.bootstrap,
        _proxy_profiles,
        {"bootstrap.servers": kafka_single.bootstrap},
        equivalence_dir,
        super_user=["User:admin"],
    )
    return reference, candidate


# ---------------------------------------------------------------------- SASL principals

SASL_USERS = ("alice", "bob", "charlie")
# charlie's librdkafka clients log in with SCRAM-SHA-512, the others with PLAIN; raw requests
# always use PLAIN (tests/equivalence/harness.py speaks PLAIN only)
SASL_CLIENT_MECHANISM = {"alice": "PLAIN", "bob": "PLAIN", "charlie": "SCRAM-SHA-512"}


def _sasl_config(user: str, password: str) -> dict:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": SASL_CLIENT_MECHANISM[user],
        "sasl.username": user,
        "sasl.password": password,
    }


@pytest.fixture(scope="session")
def sasl_targets(kafka_authz, kafka_single, equivalence_dir):
    """alice/bob/charlie over SASL_PLAINTEXT: Kafka (StandardAuthorizer, `kafka_authz`) vs.
    aclgate terminating SASL with a users file, in front of `kafka_single`."""
    from aclgate.proxy.usersfile import add_user

    lst = kafka_authz.listener("SASL_PLAINTEXT")
    passwords = {u: lst.users[u] for u in SASL_USERS}
    reference = KafkaTarget(
        f"Apache Kafka {kafka_version()} + StandardAuthorizer, SASL_PLAINTEXT",
        {
            f"User:{u}": Profile(
                f"User:{u}", lst.bootstrap, _sasl_config(u, pw), sasl=("PLAIN", u, pw)
            )
            for u, pw in passwords.items()
        },
        kafka_authz.internal.confluent_config(),
        kafka_acls=kafka_authz.acls,
    )
    users_file = equivalence_dir / "users.json"
    if not users_file.exists():
        for u, pw in passwords.items():
            add_user(users_file, u, pw, ["PLAIN", "SCRAM-SHA-512"], iterations=4096)

    def profiles(proxy):
        return {
            f"User:{u}": Profile(
                f"User:{u}", proxy.bootstrap, _sasl_config(u, pw), sasl=("PLAIN", u, pw)
            )
            for u, pw in passwords.items()
        }

    candidate = ProxyTarget(
        f"aclgate (same ACLs, SASL_PLAINTEXT with a users file) in front of Apache Kafka "
        f"{kafka_version()} without authorizer",
        kafka_single.bootstrap,
        profiles,
        {"bootstrap.servers": kafka_single.bootstrap},
        equivalence_dir,
        super_user=["User:admin"],
        listener_security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms="PLAIN,SCRAM-SHA-512",
        users_file=users_file,
    )
    return reference, candidate
