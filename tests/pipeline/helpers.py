"""Small audit logs with known answers, and the ways to run the CLI on them."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from aclgate.pipeline.schema import acl_entry

# The policy in force when the small log was written.
ALICE_READ_ORDERS = acl_entry("TOPIC", "orders", "User:alice", "READ")
ALICE_READ_GROUP = acl_entry("GROUP", "alice-group", "User:alice", "READ")
BOB_WRITE_ORDERS = acl_entry("TOPIC", "orders", "User:bob", "WRITE")  # never used
DENY_SECRET = acl_entry("TOPIC", "secret", "User:*", "READ", permission_type="DENY")
ALICE_READ_SECRET = acl_entry("TOPIC", "secret", "User:alice", "READ")  # DENY wins: unused
POLICY = [ALICE_READ_ORDERS, ALICE_READ_GROUP, BOB_WRITE_ORDERS, DENY_SECRET, ALICE_READ_SECRET]

# The candidate: alice loses READ orders, carol may write newtopic.
CAROL_WRITE_NEW = acl_entry("TOPIC", "newtopic", "User:carol", "WRITE")
CANDIDATE = [ALICE_READ_GROUP, BOB_WRITE_ORDERS, DENY_SECRET, ALICE_READ_SECRET, CAROL_WRITE_NEW]


def event(
    principal: str,
    operation: str,
    resource_type: str,
    resource_name: str,
    decision: str,
    rule: str,
    acl: dict | None = None,
    count: int = 1,
    enforced: bool = True,
    host: str = "10.0.0.1",
    ts: str = "2026-11-21T12:00:00.000000Z",
    ts_first: str | None = None,
    client_id: str = "client-1",
    api: str = "Fetch",
    groups: list[str] | None = None,
) -> dict[str, Any]:
    """One decision line; with `groups` (the session's, `Group:NAME`) it has the field, without
    it the line is one of before the field existed."""
    line = {
        "schema_version": 1,
        "ts": ts,
        "ts_first": ts_first,
        "count": count,
        "proxy": "aclgate-1",
        "listener": "SASL_SSL",
        "principal": principal,
        "host": host,
        "client_id": client_id,
        "api": api,
        "api_key": 1,
        "api_version": 13,
        "operation": operation,
        "resource_type": resource_type,
        "resource_name": resource_name,
        "decision": decision,
        "enforced": enforced,
        "rule": rule,
        "acl": acl,
    }
    if groups is not None:
        line["groups"] = groups
    return line


def small_log() -> list[dict[str, Any]]:
    """15 events on 9 lines: 11 allowed, 3 denied and enforced, 1 denied in dry-run."""
    return [
        event("User:alice", "READ", "TOPIC", "orders", "ALLOWED", "ACL", ALICE_READ_ORDERS,
              count=5, ts="2026-11-21T12:00:10.000000Z", ts_first="2026-11-21T12:00:00.000000Z"),
        event("User:alice", "READ", "TOPIC", "orders", "ALLOWED", "ACL", ALICE_READ_ORDERS,
              ts="2026-11-21T12:01:00.000000Z"),
        event("User:alice", "READ", "GROUP", "alice-group", "ALLOWED", "ACL", ALICE_READ_GROUP,
              count=3, api="Heartbeat", ts="2026-11-21T12:02:00.000000Z"),
        event("User:alice", "DESCRIBE", "TOPIC", "orders", "ALLOWED", "ACL", ALICE_READ_ORDERS,
              api="Metadata", ts="2026-11-21T12:03:00.000000Z"),
        event("User:alice", "READ", "TOPIC", "secret", "DENIED", "ACL", DENY_SECRET,
              ts="2026-11-21T12:04:00.000000Z"),
        event("User:mallory", "READ", "TOPIC", "orders", "DENIED", "DEFAULT_DENY",
              host="10.6.6.6", client_id="evil", ts="2026-11-21T12:05:00.000000Z"),
        event("User:mallory", "READ", "TOPIC", "orders", "DENIED", "DEFAULT_DENY",
              host="10.6.6.6", client_id="evil", ts="2026-11-21T12:06:00.000000Z"),
        event("User:carol", "WRITE", "TOPIC", "newtopic", "DENIED", "NO_ACL_DEFAULT",
              enforced=False, api="Produce", ts="2026-11-21T12:07:00.000000Z"),
        event("User:admin", "DESCRIBE", "CLUSTER", "kafka-cluster", "ALLOWED", "SUPER_USER",
              api="DescribeAcls", ts="2026-11-21T12:08:00.000000Z"),
    ]  # fmt: skip


def write_jsonl(path: Path, lines: list[dict[str, Any] | str]) -> Path:
    """Events as JSON Lines; str items are written verbatim (for malformed lines)."""
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def write_acl_file(path: Path, entries: list[dict[str, str]]) -> Path:
    path.write_text(json.dumps({"version": 1, "acls": entries}, indent=1))
    return path


def aclgate(
    *args: str, stdin: str | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """The real command line, in a subprocess (as a user or CI would run it)."""
    return subprocess.run(
        [sys.executable, "-c", "import sys; from proxy.cli import main; sys.exit(main())", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=Path(__file__).resolve().parents[2],
    )


def check_decisions(acl_file: Path, keys: list[tuple], *extra: str) -> dict[tuple, dict]:
    """`aclgate check` on (principal, host, operation, resource_type, resource_name) keys, or
    on decision keys with the session's groups (a sixth item, a tuple: the query's `groups`).
    The answers are keyed as the keys were given."""
    fields = ("principal", "host", "operation", "resource_type", "resource_name")

    def query(k: tuple) -> str:
        groups = list(k[5]) if len(k) > 5 else []
        return json.dumps({**dict(zip(fields, k[:5], strict=True)), "groups": groups}) + "\n"

    queries = "".join(query(k) for k in keys)
    result = aclgate("check", "--acl-file", str(acl_file), "--queries", "-", *extra, stdin=queries)
    assert result.returncode == 0, result.stderr
    out = {}
    for key, line in zip(keys, result.stdout.splitlines(), strict=True):
        row = json.loads(line)
        assert tuple(row[f] for f in fields) == tuple(key[:5])
        out[key] = row
    assert len(out) == len(set(keys))
    return out
