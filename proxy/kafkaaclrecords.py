"""The records of the `kafka` ACL store: one record per ACL, keyed by the ACL's UUID.

The value carries KIP-801's AccessControlEntryRecord fields (id, resourceType, resourceName,
patternType, principal, host, operation, permissionType; the enums as Kafka's wire codes) in a
versioned JSON object; a removal is a tombstone (no value) under the same key, so a compacted
topic still holds exactly the ACLs in force. Two headers tie the records of one change
together (`aclgate.change`: the change's UUID, `aclgate.count`: how many records it has), so a
reader applies a change whole (proxy/kafkaaclstate.py). A record without them (written by hand,
e.g. a tombstone produced with a console tool) is a change of its own.

Decoding is strict: anything but exactly this shape is a `RecordDecodeError`, and the store
stops there rather than skip it (a skipped record could be a DENY; docs/authz.md).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from aclgate.authz.model import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourceType,
)

#: the value format this build writes and the only one it reads
VERSION = 1
CHANGE_HEADER = "aclgate.change"
COUNT_HEADER = "aclgate.count"

# value field -> (AclBinding attribute, enum or None for a string)
_FIELDS: dict[str, tuple[str, type[IntEnum] | None]] = {
    "resourceType": ("resource_type", ResourceType),
    "resourceName": ("resource_name", None),
    "patternType": ("pattern_type", PatternType),
    "principal": ("principal", None),
    "host": ("host", None),
    "operation": ("operation", AclOperation),
    "permissionType": ("permission_type", AclPermissionType),
}
_KEYS = frozenset({"v", "id", *_FIELDS})
# code -> member, per enum: the only codes a stored ACL may carry
_CODES: dict[type[IntEnum], dict[int, IntEnum]] = {
    enum: {int(m): m for m in enum} for enum in (ResourceType, PatternType, AclOperation)
}
_CODES[AclPermissionType] = {int(m): m for m in AclPermissionType}


class RecordDecodeError(ValueError):
    """A record of the ACL topic is not one this build can apply."""


@dataclass(frozen=True, slots=True)
class AclRecord:
    """One decoded record: `binding` None is a tombstone (the ACL `acl_id` is removed)."""

    acl_id: uuid.UUID
    binding: AclBinding | None
    #: the change the record belongs to and how many records that change has (1 and a fresh
    #: id for a record without the headers)
    change_id: str
    count: int


Headers = list[tuple[str, bytes]]


def encode_value(acl_id: uuid.UUID, b: AclBinding) -> bytes:
    return json.dumps(
        {
            "v": VERSION,
            "id": str(acl_id),
            "resourceType": int(b.resource_type),
            "resourceName": b.resource_name,
            "patternType": int(b.pattern_type),
            "principal": b.principal,
            "host": b.host,
            "operation": int(b.operation),
            "permissionType": int(b.permission_type),
        },
        separators=(",", ":"),
    ).encode("utf-8")


def change_headers(change_id: str, count: int) -> Headers:
    return [(CHANGE_HEADER, change_id.encode("ascii")), (COUNT_HEADER, str(count).encode("ascii"))]


def encode_change(
    additions: Sequence[tuple[uuid.UUID, AclBinding]], removals: Sequence[uuid.UUID]
) -> tuple[str, list[tuple[bytes, bytes | None, Headers]]]:
    """(change id, [(key, value or None, headers)]): tombstones first, then additions."""
    change_id = str(uuid.uuid4())
    headers = change_headers(change_id, len(removals) + len(additions))
    records: list[tuple[bytes, bytes | None, Headers]] = [
        (str(u).encode("ascii"), None, headers) for u in removals
    ]
    records += [(str(u).encode("ascii"), encode_value(u, b), headers) for u, b in additions]
    return change_id, records


def _decode_key(key: bytes | None) -> uuid.UUID:
    if key is None:
        raise RecordDecodeError("the record has no key (expected an ACL's UUID)")
    try:
        text = key.decode("ascii")
        acl_id = uuid.UUID(text)
    except (UnicodeDecodeError, ValueError):
        raise RecordDecodeError(f"the key {key[:60]!r} is not a UUID") from None
    if str(acl_id) != text:
        raise RecordDecodeError(f"the key {text!r} is not a UUID in canonical form")
    return acl_id


def _decode_headers(headers: Headers | None, offset: int) -> tuple[str, int]:
    if not headers:
        return f"offset-{offset}", 1
    found = dict(headers)
    if len(found) != len(headers) or set(found) != {CHANGE_HEADER, COUNT_HEADER}:
        names = sorted(name for name, _ in headers)
        raise RecordDecodeError(
            f"headers {names} (expected exactly {CHANGE_HEADER} and {COUNT_HEADER}, or none)"
        )
    try:
        change_id = found[CHANGE_HEADER].decode("ascii")
        uuid.UUID(change_id)
        count = int(found[COUNT_HEADER].decode("ascii"))
    except (UnicodeDecodeError, ValueError, AttributeError):
        raise RecordDecodeError(f"malformed {CHANGE_HEADER}/{COUNT_HEADER} headers") from None
    if count < 1:
        raise RecordDecodeError(f"{COUNT_HEADER} {count} (expected 1 or more)")
    return change_id, count


def _decode_binding(acl_id: uuid.UUID, value: bytes) -> AclBinding:
    try:
        data = json.loads(value)
    except (UnicodeDecodeError, ValueError) as exc:
        raise RecordDecodeError(f"the value is not JSON: {exc}") from None
    if type(data) is not dict or data.keys() != _KEYS:
        shape = sorted(data) if type(data) is dict else type(data).__name__
        raise RecordDecodeError(f"the value has fields {shape} (expected {sorted(_KEYS)})")
    if data["v"] != VERSION or type(data["v"]) is not int:
        raise RecordDecodeError(f"value version {data['v']!r} (this build reads {VERSION})")
    if data["id"] != str(acl_id):
        raise RecordDecodeError(f"the value's id {data['id']!r} is not the key {acl_id}")
    values: dict[str, object] = {}
    for name, (attr, enum) in _FIELDS.items():
        raw = data[name]
        if enum is None:
            if type(raw) is not str:
                raise RecordDecodeError(f"{name} {raw!r} (expected a string)")
            values[attr] = raw
        else:
            member = _CODES[enum].get(raw) if type(raw) is int else None
            if member is None:
                raise RecordDecodeError(f"{name} {raw!r} (not a {enum.__name__} code)")
            values[attr] = member
    binding = AclBinding(**values)  # type: ignore[arg-type]
    try:
        binding.validate()
    except InvalidAclError as exc:
        raise RecordDecodeError(f"not a valid ACL: {exc.message}") from None
    return binding


def decode(
    key: bytes | None, value: bytes | None, headers: Headers | None, offset: int
) -> AclRecord:
    """The record at `offset`, or RecordDecodeError saying what is wrong with it."""
    acl_id = _decode_key(key)
    change_id, count = _decode_headers(headers, offset)
    binding = None if value is None else _decode_binding(acl_id, value)
    return AclRecord(acl_id, binding, change_id, count)
