"""A JSON file nested too deeply (or otherwise beyond what the decoder takes) is an ordinary
invalid ACL or users file: flagged, logged once, a clean error exit for the commands.

Issue 15: a 200,000-deep ACL file kept the old policy but was not flagged (acl_file_invalid
0, /readyz acl_file_error null), logged a RecursionError traceback every second, and `aclgate
serve` and `aclgate acls --list` crashed on it with a traceback.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aclgate.authz.aclfile import AclFileError, parse_acl_file
from aclgate.authz.authorizer import Authorizer
from aclgate.proxy.aclstore import filewatch as aclstore
from aclgate.proxy.aclstore.filewatch import AclFileStore, AclFileWatcher
from aclgate.proxy.security.usersfile import UsersFileError, parse_users
from tests.authz.cli import aclgate, run
from tests.authz.helpers import ALLOW, LIT, Op, T, acl

READ = acl(T, "orders", LIT, "User:alice", "*", Op.READ, ALLOW)
DEEP = "[" * 200_000 + "]" * 200_000
#: (file text, what the error says)
UNDECODABLE = {
    "nested 200,000 deep": (DEEP, "invalid JSON: nested too deeply"),
    "a value nested too deeply": (
        '{"version": 1, "acls": [{"resource_type": ' + "[" * 5000 + "]" * 5000 + "}]}",
        "invalid JSON: nested too deeply",
    ),
    "an integer of 5,000 digits": (
        '{"version": 1' + "0" * 5000 + ', "acls": []}',
        "invalid JSON: Exceeds the limit (4300 digits)",
    ),
}


@pytest.mark.parametrize("case", list(UNDECODABLE))
def test_parse_acl_file_reports_undecodable_json_as_an_invalid_file(case):
    text, message = UNDECODABLE[case]
    with pytest.raises(AclFileError) as raised:
        parse_acl_file(text, "acls.json")
    assert str(raised.value).startswith(f"acls.json: {message}")


@pytest.mark.parametrize("case", list(UNDECODABLE))
def test_watcher_flags_it_keeps_the_policy_and_logs_one_error(case, tmp_path, caplog):
    text, message = UNDECODABLE[case]
    store = AclFileStore(tmp_path / "acls.json")
    store.modify(lambda _: [READ], create=True)
    authz = Authorizer()
    watcher = AclFileWatcher(store.path, authz)
    assert watcher.reload_once() is True
    caplog.set_level(logging.INFO, logger="aclgate.acls")
    store.path.write_text(text)
    for _ in range(3):  # also re-read: the same bytes written again (a new mtime)
        assert watcher.reload_once() is False
        store.path.write_text(text)
    assert watcher.last_error is not None and message in watcher.last_error
    assert str(store.path) in watcher.last_error
    assert watcher.failures == 1
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is None  # one clear line, no traceback
    assert authz.authorize("User:alice", "10.0.0.1", Op.READ, T, "orders").allowed


def test_an_unexpected_failure_is_still_only_an_invalid_file(tmp_path, caplog, monkeypatch):
    """A parse failure nobody foresaw (a bug of ours on some input) is flagged like a bad
    file, with its traceback logged once, instead of a traceback every poll."""
    store = AclFileStore(tmp_path / "acls.json")
    store.modify(lambda _: [READ], create=True)
    watcher = AclFileWatcher(store.path, Authorizer())
    watcher.reload_once()

    def broken(data, source, cidr_hosts=False):
        raise KeyError("surprise")

    monkeypatch.setattr(aclstore, "parse_acl_file", broken)
    caplog.set_level(logging.INFO, logger="aclgate.acls")
    for i in range(3):
        store.path.write_text(f'{{"version": 1, "acls": []{" " * i}}}')
        assert watcher.reload_once() is False
    assert watcher.last_error == f"{store.path}: cannot load ACL file: KeyError: 'surprise'"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None
    with pytest.raises(AclFileError, match="cannot load ACL file: KeyError"):
        AclFileWatcher(store.path, Authorizer()).reload_once(strict=True)


def test_acls_list_on_a_deep_file_is_a_clean_error(tmp_path):
    path = tmp_path / "acls.json"
    path.write_text(DEEP)
    result = aclgate("--acl-file", str(path), "--list")
    assert result.returncode == 1
    assert result.stderr == (
        f"Error while executing ACL command: {path}: invalid JSON: nested too deeply\n"
    )


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return run("serve", "--upstream", "127.0.0.1:1", "--listen", "127.0.0.1:0", *args)


def test_serve_with_a_deep_acl_file_exits_with_a_clear_error(tmp_path):
    path = tmp_path / "acls.json"
    path.write_text(DEEP)
    result = serve("--acl-file", str(path))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"cannot start: {path}: invalid JSON: nested too deeply" in result.stderr


def test_users_file_nested_too_deeply(tmp_path):
    with pytest.raises(UsersFileError, match="corrupt users file \\(not JSON: nested too deeply"):
        parse_users(DEEP)
    deep_value = (
        '{"version": 1, "users": {"a": {"PLAIN": {"alg": ' + "[" * 5000 + "]" * 5000 + "}}}}"
    )
    with pytest.raises(UsersFileError, match="nested too deeply"):
        parse_users(deep_value)
    path = tmp_path / "users.json"
    path.write_text(DEEP)
    os.chmod(path, 0o600)
    listed = subprocess.run(
        [sys.executable, "-m", "aclgate", "users", "list", "--users-file", str(path)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],
        timeout=60,
    )
    assert listed.returncode == 1 and "Traceback" not in listed.stderr
    assert "nested too deeply" in listed.stderr
    result = serve(
        "--listener-security-protocol",
        "SASL_PLAINTEXT",
        "--sasl-mechanisms",
        "PLAIN",
        "--users-file",
        str(path),
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{path}: corrupt users file (not JSON: nested too deeply)" in result.stderr


def test_running_proxy_flags_a_deep_acl_file(tansu, proxy_factory, tmp_path, caplog):
    """While serving: acl_file_invalid 1, /readyz names the problem, one ERROR line."""
    path = tmp_path / "acls.json"
    AclFileStore(path).modify(lambda _: [READ], create=True)
    proxy = proxy_factory(tansu.bootstrap, acl_file=path)
    caplog.set_level(logging.INFO, logger="aclgate.acls")
    version = proxy.metric("aclgate_acl_policy_version")
    for i in range(3):
        # replaced whole, as an editor saves: the watcher's own polls may run meanwhile, and a
        # half-written file is a second, different load error (a loaded machine saw 2)
        staged = tmp_path / f"acls.json.{i}"
        staged.write_text(DEEP)
        os.replace(staged, path)
        proxy.run(proxy.server.watcher.reload_once)
    assert proxy.metric("aclgate_acl_file_invalid") == 1
    assert proxy.metric("aclgate_acl_file_load_errors_total") == 1
    assert proxy.metric("aclgate_acl_policy_version") == version  # the old policy stays
    _ready, details = proxy.run(proxy.server.readiness)
    assert details["acl_file_error"] == f"{path}: invalid JSON: nested too deeply"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is None
