"""Every change through the ACL Admin API is audited (`acl_change` events) and counted, a
failed one too; /readyz and /metrics report the ACL store. tansu behind the proxy: the ACL
admin APIs never reach it."""

from __future__ import annotations

import json

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from aclgate.authz.fingerprint import acl_fingerprint

READ = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                  AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
ALL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                       AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip


def test_changes_are_audited_counted_and_reported(tansu, proxy_factory, tmp_path):
    acl_file, audit = tmp_path / "acls.json", tmp_path / "audit.jsonl"
    acl_file.write_text('{"version": 1, "acls": []}')
    proxy = proxy_factory(
        tansu.bootstrap,
        acl_file=acl_file,
        audit_file=audit,
        super_user=["User:ANONYMOUS"],
        allow_everyone_if_no_acl_found=False,
    )
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap, "log_level": 3})
    empty = proxy.server.readiness()[1]["acl_store"]
    admin.create_acls([READ])[READ].result(10)
    assert len(admin.delete_acls([ALL])[ALL].result(10)) == 1

    # the store breaks: the change is refused, nothing of it applied, and that is audited too
    acl_file.write_text("not json")
    try:
        admin.create_acls([READ])[READ].result(10)
        raise AssertionError("a change the store could not commit was acknowledged")
    except KafkaException as exc:
        assert exc.args[0].code() == -1  # UNKNOWN_SERVER_ERROR
        assert "did not commit" in exc.args[0].str() and "acls.json" not in exc.args[0].str()
    assert proxy.server.authorizer.acl_count() == 0

    proxy.stop()
    events = [json.loads(line) for line in audit.read_text().splitlines()]
    changes = [e for e in events if e.get("event") == "acl_change"]
    assert [(e["api"], e["result"], len(e["added"]), len(e["removed"])) for e in changes] == [
        ("CreateAcls", "COMMITTED", 1, 0),
        ("DeleteAcls", "COMMITTED", 0, 1),
        ("CreateAcls", "FAILED", 1, 0),
    ]
    first = changes[0]
    assert first["principal"] == "User:ANONYMOUS" and first["store"] == "file"
    assert first["added"] == [
        {"resource_type": "TOPIC", "resource_name": "orders", "pattern_type": "LITERAL",
         "principal": "User:alice", "host": "*", "operation": "READ", "permission_type": "ALLOW"}
    ]  # fmt: skip
    assert "invalid JSON" in changes[2]["error"]
    # the cluster check of each request is audited as any decision is
    decisions = [e for e in events if e.get("event") is None and e["resource_type"] == "CLUSTER"]
    assert {(e["api"], e["operation"]) for e in decisions} >= {
        ("CreateAcls", "ALTER"),
        ("DeleteAcls", "ALTER"),
    }

    assert proxy.metric("aclgate_acl_store_changes_total", {"result": "committed"}) == 2
    assert proxy.metric("aclgate_acl_store_changes_total", {"result": "failed"}) == 1
    assert proxy.metric("aclgate_acl_store_acls_changed_total", {"kind": "added"}) == 1
    assert proxy.metric("aclgate_acl_store_acls_changed_total", {"kind": "removed"}) == 1
    assert empty["backend"] == "file" and empty["loaded"] and empty["error"] is None
    assert empty["fingerprint"] == acl_fingerprint([])


def test_fingerprint_is_the_same_for_the_same_set_in_any_order():
    from aclgate.authz.model import AclBinding as B
    from aclgate.authz.model import AclOperation as O
    from aclgate.authz.model import AclPermissionType as P
    from aclgate.authz.model import PatternType as Pt
    from aclgate.authz.model import ResourceType as R

    a = B(R.TOPIC, "a", Pt.LITERAL, "User:x", "*", O.READ, P.ALLOW)
    b = B(R.GROUP, "g", Pt.PREFIXED, "User:y", "*", O.READ, P.DENY)
    assert acl_fingerprint([a, b]) == acl_fingerprint([b, a, a])
    assert acl_fingerprint([a]) != acl_fingerprint([b])
