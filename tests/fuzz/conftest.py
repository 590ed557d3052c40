"""Fixtures of the TCP fuzzer: a recording upstream, the clients' event loop, TLS and SASL
files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aclgate.certs import pki
from aclgate.proxy.security.usersfile import add_user

from .harness import Runner, Settings
from .recorder import RecordingUpstream

HOST = "127.0.0.1"
MECHANISM, USER, PASSWORD = "SCRAM-SHA-256", "alice", "alice-secret"


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings.from_env()


@pytest.fixture
def upstream() -> Iterator[RecordingUpstream]:
    with RecordingUpstream() as up:
        yield up


@pytest.fixture
def runner() -> Iterator[Runner]:
    r = Runner()
    yield r
    r.close()


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("fuzz-pki")
    pki.create_ca(d)
    pki.issue_server(d, dns=["localhost"], ips=[HOST])
    return {"ca": d / "ca.crt", "cert": d / "server.crt", "key": d / "server.key"}


@pytest.fixture(scope="session")
def users_file(tmp_path_factory) -> Path:
    """alice with SCRAM-SHA-256 (the fewest iterations SCRAM allows) and PLAIN."""
    path = tmp_path_factory.mktemp("fuzz-users") / "users.json"
    add_user(path, USER, PASSWORD, [MECHANISM, "PLAIN"], iterations=4096)
    return path
