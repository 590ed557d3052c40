"""The records of the `kafka` ACL store: one record per ACL, keyed by the ACL's UUID.

The value carries KIP-801's AccessControlEntryRecord fields (id, resourceType, resourceName,
patternType, principal, host, operation, permissionType; the enums as Kafka's wire codes) in a
versioned JSON object; a removal is a tombstone (no value) under the same key, so a compacted
topic still holds exactly the ACLs in force. Two headers tie the records of one change
together (`aclgate.change`: the change's UUID, `aclgate.count`: how many records it has), so a
reader applies a change whole (authz/acllog.py). A record without them (written by hand,
e.g. a tombstone produced with a console tool) is a change of its own.

Decoding is strict: anything but exactly this shape is a `RecordDecodeError`, and the store
stops there rather than skip it (a skipped record could be a DENY; docs/authz.md).
"""

from __future__ import annotations

import json
import re
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
#: the value's fields in AclBinding's order
_FIELD_ORDER = tuple((name, enum) for name, (_, enum) in _FIELDS.items())
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

    acl_id: str  # the key: a UUID in canonical form
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
    additions: Sequence[tuple[uuid.UUID, AclBinding]], removals: Sequence[uuid.UUID | str]
) -> tuple[str, list[tuple[bytes, bytes | None, Headers]]]:
    """(change id, [(key, value or None, headers)]): tombstones first, then additions."""
    change_id = str(uuid.uuid4())
    headers = change_headers(change_id, len(removals) + len(additions))
    records: list[tuple[bytes, bytes | None, Headers]] = [
        (str(u).encode("ascii"), None, headers) for u in removals
    ]
    records += [(str(u).encode("ascii"), encode_value(u, b), headers) for u, b in additions]
    return change_id, records


#: a UUID in canonical form (str(uuid.uuid4())): lower-case hex, hyphens; a regular expression
#: instead of uuid.UUID because a replay decodes every record (500,000 of them in seconds)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _decode_key(key: bytes | None) -> str:
    if key is None:
        raise RecordDecodeError("the record has no key (expected an ACL's UUID)")
    try:
        text = key.decode("ascii")
    except UnicodeDecodeError:
        raise RecordDecodeError(f"the key {key[:60]!r} is not a UUID") from None
    if _UUID.fullmatch(text) is None:
        raise RecordDecodeError(f"the key {text[:60]!r} is not a UUID in canonical form")
    return text


def _decode_headers(headers: Headers | None, offset: int) -> tuple[str, int]:
    if not headers:
        return f"offset-{offset}", 1
    if len(headers) != 2 or headers[0][0] != CHANGE_HEADER or headers[1][0] != COUNT_HEADER:
        names = [name for name, _ in headers]
        raise RecordDecodeError(
            f"headers {names} (expected {CHANGE_HEADER} and {COUNT_HEADER} in this order, or none)"
        )
    try:
        change_id = headers[0][1].decode("ascii")
        count = int(headers[1][1].decode("ascii"))
    except (UnicodeDecodeError, ValueError, AttributeError):
        raise RecordDecodeError(f"malformed {CHANGE_HEADER}/{COUNT_HEADER} headers") from None
    if _UUID.fullmatch(change_id) is None:
        raise RecordDecodeError(f"malformed {CHANGE_HEADER} header {change_id[:60]!r}")
    if count < 1:
        raise RecordDecodeError(f"{COUNT_HEADER} {count} (expected 1 or more)")
    return change_id, count


_json = json.JSONDecoder()
_RT, _PT, _OP, _PERM = (
    _CODES[e] for e in (ResourceType, PatternType, AclOperation, AclPermissionType)
)


def _decode_binding(
    acl_id: str, value: bytes, strings: dict[str, str], cidr_hosts: bool = False
) -> AclBinding:
    try:
        data = _json.decode(value.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise RecordDecodeError(f"the value is not JSON: {exc}") from None
    if type(data) is not dict or data.keys() != _KEYS:
        shape = sorted(data) if type(data) is dict else type(data).__name__
        raise RecordDecodeError(f"the value has fields {shape} (expected {sorted(_KEYS)})")
    version = data["v"]
    if type(version) is not int or version != VERSION:
        raise RecordDecodeError(f"value version {version!r} (this build reads {VERSION})")
    if data["id"] != acl_id:
        raise RecordDecodeError(f"the value's id {data['id']!r} is not the key {acl_id}")
    rt, pt, op, perm = (
        data["resourceType"],
        data["patternType"],
        data["operation"],
        data["permissionType"],
    )
    name, principal, host = data["resourceName"], data["principal"], data["host"]
    if (
        type(rt) is int
        and type(pt) is int
        and type(op) is int
        and type(perm) is int
        and type(name) is str
        and type(principal) is str
        and type(host) is str
        and rt in _RT
        and pt in _PT
        and op in _OP
        and perm in _PERM
    ):
        binding = AclBinding(
            _RT[rt],  # type: ignore[arg-type]
            strings.setdefault(name, name),
            _PT[pt],  # type: ignore[arg-type]
            strings.setdefault(principal, principal),
            strings.setdefault(host, host),
            _OP[op],  # type: ignore[arg-type]
            _PERM[perm],  # type: ignore[arg-type]
        )
    else:
        raise RecordDecodeError(_field_problem(data))
    try:
        binding.validate(cidr_hosts)
    except InvalidAclError as exc:
        raise RecordDecodeError(f"not a valid ACL: {exc.message}") from None
    return binding


def _field_problem(data: dict[str, object]) -> str:
    """What is wrong with a value's fields (the slow path: only for a bad record)."""
    for name, enum in _FIELD_ORDER:
        raw = data[name]
        if enum is None:
            if type(raw) is not str:
                return f"{name} {raw!r} (expected a string)"
        elif type(raw) is not int or raw not in _CODES[enum]:
            return f"{name} {raw!r} (not a {enum.__name__} code)"
    return "bad fields"  # not reached: the fast path accepted every field


def decode(
    key: bytes | None,
    value: bytes | None,
    headers: Headers | None,
    offset: int,
    strings: dict[str, str] | None = None,
    cidr_hosts: bool = False,
) -> AclRecord:
    """The record at `offset`, or RecordDecodeError saying what is wrong with it. `strings`
    makes equal names, principals and hosts of many records share one object; `cidr_hosts`
    (KIP-1276, opt-in): a host with `/` must be a network."""
    acl_id = _decode_key(key)
    change_id, count = _decode_headers(headers, offset)
    binding = (
        None
        if value is None
        else _decode_binding(acl_id, value, {} if strings is None else strings, cidr_hosts)
    )
    return AclRecord(acl_id, binding, change_id, count)
