"""The users file while serving (issue 20): SCRAM iterations outside Kafka's 4096-16384 range are
refused at start and on reload, a refused reload keeps the previous users in force, and a bad
file costs one ERROR line and one count, not a parse and a line for every client that logs in.

Before: iterations 1 or 10^9 loaded silently (alice then could not log in at all), and a file
that did not load was re-read and logged again at every SASL exchange.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from kio.schema.errors import ErrorCode

from aclgate.proxy.security.usersfile import add_user
from tests.fixtures.rawclient import RawClient
from tests.listeners.conftest import sasl_listener
from tests.listeners.util import password, sasl_login

MECHANISM = "SCRAM-SHA-512"
ROOT = Path(__file__).parents[2]


def out_of_range(path: Path, user: str, iterations: int) -> str:
    """Set `user`'s stored iteration count by hand; the error the proxy must report for it."""
    doc = json.loads(path.read_text())
    doc["users"][user][MECHANISM]["iterations"] = iterations
    path.write_text(json.dumps(doc))
    os.chmod(path, 0o600)
    return (
        f"{path}: {MECHANISM} credential for user {user!r}: iterations must be between 4096 "
        f"and 16384 (Kafka's range), got {iterations}"
    )


def test_serve_refuses_to_start_on_iterations_outside_kafkas_range(tmp_path):
    users = tmp_path / "users.json"
    add_user(users, "alice", password("alice"), [MECHANISM])
    expected = out_of_range(users, "alice", 10**9)
    serve = ("serve", "--upstream", "127.0.0.1:1", "--listen", "127.0.0.1:0")
    listener = ("--listener-security-protocol", "SASL_PLAINTEXT", "--sasl-mechanisms", MECHANISM)
    result = subprocess.run(
        [sys.executable, "-m", "aclgate", *serve, *listener, "--users-file", str(users)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,  # before: it started serving
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"cannot start: listener security: {expected}" in result.stderr


def test_a_reload_outside_kafkas_range_keeps_the_previous_users(
    scripted, proxy_factory, tmp_path, caplog
):
    users = tmp_path / "users.json"
    add_user(users, "alice", password("alice"), [MECHANISM])
    proxy = proxy_factory(scripted.bootstrap, **sasl_listener(users, mechanisms=MECHANISM))
    caplog.set_level(logging.INFO, logger="aclgate.security")

    def login(user: str) -> ErrorCode:
        with RawClient(proxy.bootstrap) as raw:
            return sasl_login(raw, MECHANISM, user, password(user)).error_code

    assert login("alice") == ErrorCode.none
    add_user(users, "bob", password("bob"), [MECHANISM])  # a change that does load
    assert login("bob") == ErrorCode.none
    assert proxy.metric("aclgate_users_file_reloads_total") == 1

    add_user(users, "carol", password("carol"), [MECHANISM])
    expected = out_of_range(users, "alice", 1)  # carol is in the same, refused, version
    for _ in range(20):  # every login after the change asks for the users file
        assert login("alice") == ErrorCode.none  # the previous users are in force
        assert login("carol") == ErrorCode.sasl_authentication_failed
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [f"users file {users} not reloaded, keeping the previous users: {expected}"]
    assert proxy.metric("aclgate_users_file_load_errors_total") == 1

    add_user(users, "alice", password("alice"), [MECHANISM])  # repaired: carol is in force
    assert login("carol") == ErrorCode.none and login("alice") == ErrorCode.none
    assert proxy.metric("aclgate_users_file_reloads_total") == 2
    assert proxy.metric("aclgate_users_file_load_errors_total") == 1


def test_a_broken_users_file_is_read_and_reported_once_not_at_every_login(
    scripted, proxy_factory, tmp_path, caplog
):
    """Before: each SASL exchange re-read the broken file and logged another ERROR (20 logins,
    20 parses, 20 lines); now once per version of the file on disk."""
    users = tmp_path / "users.json"
    add_user(users, "alice", password("alice"), [MECHANISM])
    proxy = proxy_factory(scripted.bootstrap, **sasl_listener(users, mechanisms=MECHANISM))
    caplog.set_level(logging.INFO, logger="aclgate.security")
    users.write_text('{"version": 1, "users": {"alice": ')
    for _ in range(20):
        with RawClient(proxy.bootstrap) as raw:
            assert sasl_login(raw, MECHANISM, "alice", password("alice")).error_code == 0
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "corrupt users file" in errors[0], errors
    assert proxy.metric("aclgate_users_file_load_errors_total") == 1
    users.unlink()  # gone is another version: reported once more
    with RawClient(proxy.bootstrap) as raw:
        assert sasl_login(raw, MECHANISM, "alice", password("alice")).error_code == 0
    assert proxy.metric("aclgate_users_file_load_errors_total") == 2
