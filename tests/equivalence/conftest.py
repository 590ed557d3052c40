"""Targets for the equivalence tests: Apache Kafka (the reference) and aclgate (the candidate).

open_targets   Kafka without an authorizer, directly  vs.  aclgate (transparent) in front
               of the same Kafka (`kafka_single`).
anon_targets   Kafka with StandardAuthorizer, PLAINTEXT clients = User:ANONYMOUS (not a
               super user; tests/equivalence/cluster.py)  vs.  aclgate with the same ACLs
               in front of `kafka_single` (no authorizer).
"""

from __future__ import annotations

import pytest

from tests.equivalence.cluster import AnonymousAuthzCluster, mtls_config
from tests.equivalence.harness import KafkaTarget, Profile, ProxyTarget
from tests.equivalence.scenarios import ANON
from tests.fixtures.kafka import require_kafka
from tests.kafka.cluster import KafkaStartError, kafka_version


@pytest.fixture(scope="session")
def mtls_pki(tmp_path_factory):
    """A CA with client certificates: Alice and bob (OU=eng, mapped to alice and bob by
    MAPPING_RULES) and carol (OU=ops: no rule matches, DEFAULT keeps the whole subject)."""
    from aclgate.certs import pki
    from tests.listeners.conftest import Pki

    certs = Pki(tmp_path_factory.mktemp("equivalence-pki"))
    pki.issue_client(certs.dir, "carol", "CN=carol,OU=ops,O=example")
    return certs


@pytest.fixture(scope="session")
def kafka_anon_authz(tmp_path_factory, mtls_pki):
    """Kafka with StandardAuthorizer whose PLAINTEXT clients are User:ANONYMOUS, not super,
    and an mTLS listener (SSL) mapping certificates as aclgate's mTLS listener does."""
    from tests.listeners.util import MAPPING_RULES

    require_kafka()
    cluster = AnonymousAuthzCluster(
        workdir=tmp_path_factory.mktemp("kafka_anon_authz"),
        listeners=("PLAINTEXT", "SSL"),
        broker_config=mtls_config(str(mtls_pki.ca), MAPPING_RULES),
    )
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


def _anonymous_reference(kafka_anon_authz) -> KafkaTarget:
    """Kafka's StandardAuthorizer on PLAINTEXT, where every client is User:ANONYMOUS."""
    return KafkaTarget(
        f"Apache Kafka {kafka_version()} + StandardAuthorizer, PLAINTEXT (User:ANONYMOUS)",
        {ANON: Profile(ANON, kafka_anon_authz.bootstrap)},
        kafka_anon_authz.admin_config(),
        kafka_acls=kafka_anon_authz.acls,
    )


@pytest.fixture(scope="session")
def anon_targets(kafka_anon_authz, kafka_single, equivalence_dir):
    reference = _anonymous_reference(kafka_anon_authz)
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
    from aclgate.proxy.security.usersfile import add_user

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


# ---------------------------------------------------------------------- mTLS principals

#: principal -> the certificate (tests/listeners Pki names) it logs in with
MTLS_CERTS = {
    "User:alice": "alice",  # CN=Alice,OU=eng: the rule maps and lower-cases it
    "User:bob": "bob",
    "User:CN=carol,OU=ops,O=example": "carol",  # no rule matches: DEFAULT
}


@pytest.fixture(scope="session")
def mtls_targets(kafka_anon_authz, kafka_single, mtls_pki, equivalence_dir):
    """Principals from client certificates, `ssl.principal.mapping.rules` on both sides:
    Kafka's SSL listener (StandardAuthorizer) vs. aclgate's mTLS listener with the same
    rules, in front of `kafka_single`."""
    from tests.listeners.util import MAPPING_RULES

    def profile(principal: str, bootstrap: str, server_ca: str) -> Profile:
        cert, key = mtls_pki.client(MTLS_CERTS[principal])
        config = {
            "security.protocol": "SSL",
            "ssl.ca.location": server_ca,
            "ssl.certificate.location": str(cert),
            "ssl.key.location": str(key),
        }
        return Profile(principal, bootstrap, config, tls=(server_ca, str(cert), str(key)))

    ssl = kafka_anon_authz.listener("SSL")
    reference = KafkaTarget(
        f"Apache Kafka {kafka_version()} + StandardAuthorizer, SSL with client certificates",
        {p: profile(p, ssl.bootstrap, str(ssl.ca_file)) for p in MTLS_CERTS},
        kafka_anon_authz.admin_config(),
        kafka_acls=kafka_anon_authz.acls,
    )
    candidate = ProxyTarget(
        f"aclgate (same ACLs, mTLS listener, same mapping rules) in front of Apache Kafka "
        f"{kafka_version()} without authorizer",
        kafka_single.bootstrap,
        lambda proxy: {p: profile(p, proxy.bootstrap, str(mtls_pki.ca)) for p in MTLS_CERTS},
        {"bootstrap.servers": kafka_single.bootstrap},
        equivalence_dir,
        super_user=["User:admin"],
        **mtls_pki.listener("required", ssl_principal_mapping_rules=MAPPING_RULES),
    )
    return reference, candidate


# ---------------------------------------------------------------------- 3 nodes


@pytest.fixture(scope="session")
def cluster3_targets(kafka_anon_authz, kafka_cluster3, equivalence_dir):
    """Kafka's StandardAuthorizer (single node) vs. aclgate with the same ACLs in front of
    the session's 3-node cluster (tests/equivalence/scenarios_cluster3.py)."""
    reference = _anonymous_reference(kafka_anon_authz)
    candidate = ProxyTarget(
        f"aclgate (same ACLs) in front of the 3-node Apache Kafka {kafka_version()}",
        kafka_cluster3.bootstrap,
        _proxy_profiles,
        {"bootstrap.servers": kafka_cluster3.bootstrap},
        equivalence_dir,
        super_user=["User:admin"],
    )
    return reference, candidate
