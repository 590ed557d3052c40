"""Fixtures for the listener tests: a dev PKI, a users file, a JWKS, a scripted upstream."""

from __future__ import annotations

from pathlib import Path

import pytest

from aclgate.certs import pki
from aclgate.proxy.security.usersfile import add_user
from tests.fixtures.scripted_broker import ScriptedCluster
from tests.listeners.util import MECHANISMS, USERS, jwks_json, password


class Pki:
    """CA + server certificate (localhost, 127.0.0.1) + client certificates, as PEM paths."""

    def __init__(self, root: Path):
        self.dir = root / "ca"
        pki.create_ca(self.dir)
        pki.issue_server(self.dir, dns=["localhost"], ips=["127.0.0.1"])
        # the mapping rule lower-cases the CN: "Alice" -> User:alice
        pki.issue_client(self.dir, "alice", "CN=Alice,OU=eng,O=example")
        pki.issue_client(self.dir, "bob", "CN=bob,OU=eng,O=example")
        pki.issue_client(self.dir, "expired", "CN=alice,OU=eng,O=example", validity="expired")
        self.other = root / "other-ca"  # a CA the proxy does not trust
        pki.create_ca(self.other, common_name="some other CA")
        pki.issue_client(self.other, "alice", "CN=alice,OU=eng,O=example")

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def server_cert(self) -> Path:
        return self.dir / "server.crt"

    @property
    def server_key(self) -> Path:
        return self.dir / "server.key"

    def client(self, name: str, untrusted: bool = False) -> tuple[Path, Path]:
        d = self.other if untrusted else self.dir
        return d / f"{name}.crt", d / f"{name}.key"

    def listener(self, client_auth: str = "none", **extra) -> dict:
        """ProxyConfig fields for an SSL listener with these files."""
        return {
            "listener_security_protocol": "SSL",
            "ssl_certfile": self.server_cert,
            "ssl_keyfile": self.server_key,
            "ssl_cafile": self.ca,
            "ssl_client_auth": client_auth,
            **extra,
        }

    def confluent(
        self, bootstrap: str, client: str | None = None, untrusted=False, **extra
    ) -> dict:
        cfg = {
            "bootstrap.servers": bootstrap,
            "security.protocol": extra.pop("security_protocol", "SSL"),
            "ssl.ca.location": str(self.ca),
        }
        if client:
            cert, key = self.client(client, untrusted)
            cfg["ssl.certificate.location"] = str(cert)
            cfg["ssl.key.location"] = str(key)
        cfg.update(extra)
        return cfg


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("listeners-pki"))


@pytest.fixture(scope="session")
def users_file(tmp_path_factory) -> Path:
    """alice, bob and admin with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (password NAME-secret)."""
    path = tmp_path_factory.mktemp("listeners-users") / "users.json"
    for user in USERS:
        add_user(path, user, password(user), MECHANISMS)
    return path


@pytest.fixture(scope="session")
def jwks_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("listeners-jwks") / "jwks.json"
    path.write_text(jwks_json())
    return path


@pytest.fixture
def scripted():
    """A one-node scripted upstream (node id 1): `scripted.nodes[0].requests` sees everything."""
    with ScriptedCluster([1]) as cluster:
        yield cluster


def sasl_listener(
    users_file: Path, protocol: str = "SASL_PLAINTEXT", mechanisms: str = "PLAIN", **extra
) -> dict:
    return {
        "listener_security_protocol": protocol,
        "sasl_mechanisms": mechanisms,
        "users_file": users_file,
        **extra,
    }
