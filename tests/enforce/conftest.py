"""An authorizing proxy in front of tansu, with SASL PLAIN users and a live ACL file."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from aclgate.proxy.security.usersfile import add_user
from tests.fixtures.wait import wait_until  # noqa: F401 (the enforce tests import it from here)

USERS = ("alice", "bob", "charlie", "admin")


def password(user: str) -> str:
    return f"{user}-secret"


@pytest.fixture(scope="session")
def users_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("users") / "users.json"
    for user in USERS:
        add_user(path, user, password(user), ["PLAIN"])
    return path


class Enforced:
    """Handle on an authorizing proxy: ACL changes through `aclgate acls`, client configs."""

    def __init__(self, proxy, acl_file: Path, audit_file: Path):
        self.proxy = proxy
        self.acl_file = acl_file
        self.audit_file = audit_file

    @property
    def bootstrap(self) -> str:
        return self.proxy.bootstrap

    def acls(self, *args: str) -> str:
        """Run `aclgate acls --acl-file F ARGS` and make the proxy load the result now."""
        out = subprocess.run(
            [sys.executable, "-m", "aclgate", "acls", "--acl-file", str(self.acl_file), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        self.proxy.run(self.proxy.server.watcher.reload_once)
        return out.stdout

    def confluent(self, user: str, **extra) -> dict:
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": password(user),
            **extra,
        }

    def kafka_python(self, user: str) -> dict:
        return {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": user,
            "sasl_plain_password": password(user),
        }

    def audit(self) -> list[dict]:
        self.proxy.run(
            lambda: self.proxy.server.audit.flush_aggregates() or self.proxy.server.audit.tick()
        )
        return [
            json.loads(line) for line in self.audit_file.read_text().splitlines() if line.strip()
        ]


def start_enforced(
    tansu, proxy_factory, users_file, tmp_path, acl_file: Path, **extra: Any
) -> Enforced:
    """An authorizing proxy in front of tansu: SASL PLAIN, User:admin a super user, the ACLs
    of `acl_file`, its audit in tmp_path/audit.jsonl; `extra` are more proxy settings."""
    proxy = proxy_factory(
        tansu.bootstrap,
        listener_security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms="PLAIN",
        users_file=users_file,
        acl_file=acl_file,
        allow_everyone_if_no_acl_found=False,
        super_user=["User:admin"],
        audit_file=tmp_path / "audit.jsonl",
        **extra,
    )
    return Enforced(proxy, acl_file, tmp_path / "audit.jsonl")


@pytest.fixture
def enforced(tansu, proxy_factory, users_file, tmp_path) -> Enforced:
    acl_file = tmp_path / "acls.json"
    acl_file.write_text('{"version": 1, "acls": []}\n')
    return start_enforced(tansu, proxy_factory, users_file, tmp_path, acl_file)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"
