"""Issue 25 item 5: the opt-in DeleteAcls guard. A request that would remove every ACL, or more
than --delete-acls-max-share of them, is refused whole with POLICY_VIOLATION and a failed
`acl_change` audit event; narrower deletes go through; off by default (Kafka has no guard:
tests/acladmin/test_audit_metrics.py deletes with ANY)."""

from __future__ import annotations

import json

import pytest
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


def _read(topic: str, principal: str = "User:alice") -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*",
                      AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip


ANY = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                       AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
BY_ALICE = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None,
                            AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
ONE = AclBindingFilter(ResourceType.TOPIC, "t0", ResourcePatternType.LITERAL, None, None,
                       AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip


U0 = AclBindingFilter(ResourceType.TOPIC, "u0", ResourcePatternType.LITERAL, None, None,
                      AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip


def _refused(admin: AdminClient, *filters: AclBindingFilter) -> str:
    """The message of a request refused whole: every filter's result is POLICY_VIOLATION."""
    messages = []
    for future in admin.delete_acls(list(filters)).values():
        with pytest.raises(KafkaException) as caught:
            future.result(10)
        error = caught.value.args[0]
        assert error.code() == 44, error  # POLICY_VIOLATION
        messages.append(error.str())
    assert len(set(messages)) == 1
    return messages[0]


def test_a_delete_of_every_acl_or_past_the_share_is_refused_and_audited(
    tansu, proxy_factory, tmp_path
):
    acl_file, audit = tmp_path / "acls.json", tmp_path / "audit.jsonl"
    acl_file.write_text('{"version": 1, "acls": []}')
    proxy = proxy_factory(
        tansu.bootstrap,
        acl_file=acl_file,
        audit_file=audit,
        super_user=["User:ANONYMOUS"],
        delete_acls_max_share=0.5,
    )
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap, "log_level": 3})
    created = [_read(f"t{i}") for i in range(3)] + [_read(f"u{i}", "User:bob") for i in range(3)]
    for future in admin.create_acls(created).values():
        future.result(10)

    assert "would remove every ACL (6)" in _refused(admin, ANY)
    # the union of a request's filters counts: 4 of 6 is past half
    assert "would remove 4 of 6 ACLs" in _refused(admin, BY_ALICE, U0)
    assert proxy.server.authorizer.acl_count() == 6
    assert len(admin.delete_acls([BY_ALICE])[BY_ALICE].result(10)) == 3  # half: allowed
    assert len(admin.delete_acls([U0])[U0].result(10)) == 1
    assert proxy.server.authorizer.acl_count() == 2

    proxy.stop()
    changes = [
        e for e in map(json.loads, audit.read_text().splitlines()) if e.get("event") == "acl_change"
    ]
    deletes = [(e["result"], len(e["removed"])) for e in changes if e["api"] == "DeleteAcls"]
    assert deletes == [("FAILED", 6), ("FAILED", 4), ("COMMITTED", 3), ("COMMITTED", 1)]
    assert all("--delete-acls-max-share" in e["error"] for e in changes if e["error"])
