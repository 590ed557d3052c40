"""The fingerprint of an ACL set: sha256 of its canonical lines, equal on two instances that
hold the same policy whatever their backend (/readyz, /metrics, the kafka ACL log)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from json.encoder import encode_basestring_ascii as _quoted

from aclgate.authz.model import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

_OP, _PT, _PERM, _RT = (
    {int(m): m.name for m in e}
    for e in (AclOperation, PatternType, AclPermissionType, ResourceType)
)


def canonical_line(b: AclBinding) -> str:
    """One binding in the fingerprint's canonical form: `json.dumps(b.to_dict(),
    sort_keys=True, separators=(",", ":"))`, built directly (a replay computes 500,000)."""
    return (
        f'{{"host":{_quoted(b.host)},"operation":"{_OP[b.operation]}",'
        f'"pattern_type":"{_PT[b.pattern_type]}","permission_type":"{_PERM[b.permission_type]}",'
        f'"principal":{_quoted(b.principal)},"resource_name":{_quoted(b.resource_name)},'
        f'"resource_type":"{_RT[b.resource_type]}"}}'
    )


def fingerprint_of_lines(lines: Iterable[str]) -> str:
    """sha256 of distinct canonical lines, sorted and joined by newlines."""
    return hashlib.sha256("\n".join(sorted(set(lines))).encode("utf-8")).hexdigest()


def acl_fingerprint(bindings: Iterable[AclBinding]) -> str:
    """sha256 of the canonical form of an ACL set (`canonical_line` per binding). Independent
    of order, duplicates and of the backend, so two instances holding the same policy report
    the same fingerprint."""
    return fingerprint_of_lines(canonical_line(b) for b in bindings)
