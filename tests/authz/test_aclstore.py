"""aclgate.proxy.aclstore.filewatch: the ACL file store (atomic, locked writes) and the hot-reloading watcher."""

from __future__ import annotations

import asyncio
import json
import logging
import os

import pytest

from aclgate.authz.aclfile import AclFileError, dump_acl_file
from aclgate.authz.authorizer import Authorizer
from aclgate.proxy.aclstore.filewatch import AclFileStore, AclFileWatcher
from tests.authz.cli import aclgate
from tests.authz.helpers import ALLOW, DENY, LIT, Op, T, acl

READ = acl(T, "orders", LIT, "User:alice", "*", Op.READ, ALLOW)
WRITE = acl(T, "orders", LIT, "User:alice", "*", Op.WRITE, ALLOW)
DENY_READ = acl(T, "orders", LIT, "User:alice", "*", Op.READ, DENY)


def allowed(authz: Authorizer, op=Op.READ) -> bool:
    return authz.authorize("User:alice", "10.0.0.1", op, T, "orders").allowed


# --------------------------------------------------------------------------- store


def test_load_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(AclFileError, match=r"acls\.json: ACL file does not exist$"):
        AclFileStore(tmp_path / "acls.json").load()


def test_modify_creates_only_when_asked(tmp_path):
    store = AclFileStore(tmp_path / "acls.json")
    with pytest.raises(AclFileError, match="does not exist"):
        store.modify(lambda acls: [*acls, READ])
    assert store.modify(lambda acls: [*acls, READ, READ], create=True) == [READ]
    assert store.load() == [READ]
    assert store.path.read_text() == dump_acl_file([READ])
    assert oct(store.path.stat().st_mode & 0o777) == oct(0o644)


def test_modify_keeps_mode_and_skips_unchanged_writes(tmp_path):
    store = AclFileStore(tmp_path / "acls.json")
    store.modify(lambda acls: [READ], create=True)
    os.chmod(store.path, 0o640)
    hand_written = json.dumps({"version": 1, "acls": [READ.to_dict()]})
    store.path.write_text(hand_written)
    store.modify(lambda acls: acls)  # nothing changes: the hand-written file stays as it is
    assert store.path.read_text() == hand_written
    store.modify(lambda acls: [*acls, WRITE])
    assert set(store.load()) == {READ, WRITE}
    assert store.path.stat().st_mode & 0o777 == 0o640


def test_modify_refuses_to_overwrite_a_corrupt_file(tmp_path):
    store = AclFileStore(tmp_path / "acls.json")
    store.path.write_text("{ nope")
    with pytest.raises(AclFileError, match="invalid JSON"):
        store.modify(lambda acls: [*acls, READ], create=True)
    assert store.path.read_text() == "{ nope"


def test_failed_write_leaves_the_old_file(tmp_path):
    store = AclFileStore(tmp_path / "acls.json")
    store.modify(lambda acls: [READ], create=True)

    def boom(acls):
        raise RuntimeError("fn failed")

    with pytest.raises(RuntimeError):
        store.modify(boom)
    assert store.load() == [READ]
    assert {p.name for p in tmp_path.iterdir()} == {"acls.json", "acls.json.lock"}


# --------------------------------------------------------------------------- watcher


@pytest.fixture
def setup(tmp_path):
    store = AclFileStore(tmp_path / "acls.json")
    store.modify(lambda _: [READ], create=True)
    authz = Authorizer()
    watcher = AclFileWatcher(store.path, authz, interval=0.02)
    return store, authz, watcher


def test_reload_once_loads_and_then_follows_changes(setup):
    store, authz, watcher = setup
    assert watcher.reload_once() is True
    assert allowed(authz) and authz.ready
    assert (watcher.reloads, watcher.failures, watcher.last_error) == (1, 0, None)
    assert watcher.last_loaded_at is not None
    assert watcher.reload_once() is False  # unchanged
    store.modify(lambda acls: [DENY_READ, WRITE])
    assert watcher.reload_once() is True
    assert not allowed(authz) and allowed(authz, Op.WRITE)


def test_same_content_rewritten_is_not_a_reload(setup):
    store, authz, watcher = setup
    watcher.reload_once()
    version = authz.version
    store.path.write_text(store.path.read_text())  # new mtime, same bytes
    assert watcher.reload_once() is False
    assert authz.version == version


def test_corrupt_file_keeps_the_previous_policy_and_logs_once(setup, caplog):
    store, authz, watcher = setup
    watcher.reload_once()
    caplog.set_level(logging.INFO, logger="aclgate.acls")
    good = store.path.read_text()
    store.path.write_text(good.replace('"READ"', '"REED"'))
    for _ in range(3):
        assert watcher.reload_once() is False
    assert allowed(authz)  # still the old policy: fail closed to the last good file
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "keeping the previous ACLs" in errors[0].getMessage()
    assert "acls[0].operation: unknown AclOperation 'REED'" in errors[0].getMessage()
    assert watcher.failures == 1
    assert "acls[0].operation" in watcher.last_error
    store.path.write_text(good.replace('"READ"', '"WRITE"'))
    assert watcher.reload_once() is True
    assert watcher.last_error is None
    assert allowed(authz, Op.WRITE) and not allowed(authz)


def test_cidr_hosts_without_the_option_are_warned_about_once_per_load(tmp_path, caplog):
    """A host with `/` while --acl-host-cidr is off is a literal that matches no client: each
    load (and reload) that holds such ACLs logs one WARNING with their number and the flag."""
    net = acl(T, "orders", LIT, "User:alice", "10.0.0.0/8", Op.READ, ALLOW)
    net6 = acl(T, "orders", LIT, "User:bob", "2001:db8::/32", Op.READ, ALLOW)
    store = AclFileStore(tmp_path / "acls.json")
    store.modify(lambda _: [READ, net, net6], create=True)
    caplog.set_level(logging.INFO, logger="aclgate.acls")

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    watcher = AclFileWatcher(store.path, Authorizer())
    assert watcher.reload_once() is True
    assert watcher.reload_once() is False  # no reload, no new warning
    (message,) = warnings()
    assert "2 ACL(s) have a host with '/'" in message and "--acl-host-cidr" in message
    assert str(store.path) in message
    store.modify(lambda acls: [READ, net])
    assert watcher.reload_once() is True
    assert "1 ACL(s) have a host with '/'" in warnings()[-1] and len(warnings()) == 2
    store.modify(lambda acls: [READ])
    assert watcher.reload_once() is True and len(warnings()) == 2
    caplog.clear()
    store.modify(lambda acls: [READ, net, net6])
    assert AclFileWatcher(store.path, Authorizer(cidr_hosts=True)).reload_once() is True
    assert warnings() == []


def test_invalid_acl_keeps_the_previous_policy(setup):
    store, authz, watcher = setup
    watcher.reload_once()
    doc = json.loads(store.path.read_text())
    doc["acls"].append({**WRITE.to_dict(), "resource_name": ""})
    store.path.write_text(json.dumps(doc))
    assert watcher.reload_once() is False
    assert watcher.last_error.endswith("acls[1].resource_name: Invalid empty resource name")
    assert allowed(authz) and not allowed(authz, Op.WRITE)


def test_deleted_file_keeps_the_previous_policy(setup):
    store, authz, watcher = setup
    watcher.reload_once()
    store.path.unlink()
    assert watcher.reload_once() is False
    assert watcher.last_error.endswith("ACL file does not exist")
    assert allowed(authz)
    store.modify(lambda _: [WRITE], create=True)
    assert watcher.reload_once() is True and watcher.last_error is None


def test_strict_reload_raises_for_startup(tmp_path):
    watcher = AclFileWatcher(tmp_path / "missing.json", Authorizer())
    with pytest.raises(AclFileError, match="does not exist"):
        watcher.reload_once(strict=True)
    assert not watcher.authorizer.ready
    assert watcher.reload_once() is False
    assert watcher.last_error.endswith("does not exist")


async def _until(predicate, timeout=10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


@pytest.mark.asyncio
async def test_watcher_task_hot_reloads_changes_made_by_the_cli(setup):
    store, authz, watcher = setup
    watcher.start()
    try:
        await _until(lambda: authz.ready)
        assert allowed(authz) and not allowed(authz, Op.WRITE)
        result = await asyncio.to_thread(
            aclgate, "--acl-file", str(store.path), "--add", "--allow-principal", "User:alice",
            "--operation", "Write", "--topic", "orders",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        await _until(lambda: allowed(authz, Op.WRITE))
        store.path.write_text("garbage")
        await _until(lambda: watcher.last_error is not None)
        assert allowed(authz, Op.WRITE)
    finally:
        await watcher.stop()
    assert watcher._task is None
