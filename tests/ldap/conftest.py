"""Fixtures of the LDAP group tests: a real slapd (tests/fixtures/slapd.py) with the shared
directory, over ldap:// and ldaps:// (a certificate of the development PKI)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from aclgate.certs import pki
from tests.fixtures import slapd as slapd_fixture
from tests.fixtures.slapd import SlapdServer


@pytest.fixture(scope="session")
def slapd_root() -> Path:
    return slapd_fixture.require()


@pytest.fixture(scope="session")
def ldap_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA and a server certificate for 127.0.0.1 (ca.crt, server.crt, server.key)."""
    directory = tmp_path_factory.mktemp("ldap-pki")
    pki.create_ca(directory)
    pki.issue_server(directory, dns=["localhost"], ips=["127.0.0.1"])
    return directory


@pytest.fixture
def slapd_factory(
    slapd_root: Path, ldap_ca: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[], SlapdServer]]:
    """`slapd_factory()` -> a running slapd of its own (a test may stop it)."""
    started: list[SlapdServer] = []

    def start() -> SlapdServer:
        server = SlapdServer(
            slapd_root,
            tmp_path_factory.mktemp("slapd"),
            slapd_fixture.directory_ldif(),
            tls=(ldap_ca / "server.crt", ldap_ca / "server.key"),
        )
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def slapd(
    slapd_root: Path, ldap_ca: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SlapdServer]:
    """One slapd for a test module (its tests must not stop it)."""
    server = SlapdServer(
        slapd_root,
        tmp_path_factory.mktemp("slapd"),
        slapd_fixture.directory_ldif(),
        tls=(ldap_ca / "server.crt", ldap_ca / "server.key"),
    )
    yield server
    server.stop()
