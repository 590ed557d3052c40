"""The ACL file format (version 1), parsed and written without touching the filesystem.

    {"version": 1, "acls": [{"resource_type": "TOPIC", "resource_name": "orders",
      "pattern_type": "LITERAL", "principal": "User:alice", "host": "*",
      "operation": "READ", "permission_type": "ALLOW"}]}

Enum values are Kafka's names, accepted case-insensitively. Every entry is validated as Kafka
validates a CreateAcls request; an error names the file, the entry index and the field, because
a policy file that half-loads is worse than one that does not load.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from aclgate.authz.model import (
    FIELDS,
    AclBinding,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourceType,
)

FORMAT_VERSION = 1
FIELD_NAMES = frozenset(FIELDS)


class AclFileError(ValueError):
    """The ACL file cannot be used; the message says where and why."""


def parse_acl_file(
    data: str | bytes, source: str = "<acl file>", cidr_hosts: bool = False
) -> list[AclBinding]:
    """All bindings of a version-1 ACL file, duplicates removed, in file order. `cidr_hosts`
    (KIP-1276, opt-in): a host with `/` must be a network (AclBinding.validate)."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise AclFileError(f"{source}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    strings: dict[str, str] = {}  # one object per distinct name/principal/host: memory
    try:
        document = json.loads(data, object_hook=_entry_hook(strings, cidr_hosts))
    except json.JSONDecodeError as exc:
        raise AclFileError(
            f"{source}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:  # e.g. 200,000 nested arrays: the decoder gives up, not a crash
        raise AclFileError(f"{source}: invalid JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise AclFileError(f"{source}: invalid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise AclFileError(f'{source}: expected a JSON object with "version" and "acls"')
    unknown = sorted(set(document) - {"version", "acls"})
    if unknown:
        raise AclFileError(f"{source}: unknown top-level field {unknown[0]!r}")
    version = document.get("version")
    if type(version) is not int or version != FORMAT_VERSION:
        raise AclFileError(f"{source}: unsupported version {version!r} (expected {FORMAT_VERSION})")
    entries = document.get("acls")
    if not isinstance(entries, list):
        raise AclFileError(f'{source}: "acls" must be a list')

    seen: dict[AclBinding, None] = {}
    for i, entry in enumerate(entries):
        if type(entry) is not AclBinding:
            try:
                # raises: the hook could not convert it
                entry = AclBinding.from_dict(entry, cidr_hosts=cidr_hosts)
            except InvalidAclError as exc:
                where = f"acls[{i}].{exc.field}" if exc.field else f"acls[{i}]"
                raise AclFileError(f"{source}: {where}: {exc.message}") from None
            except RecursionError:  # the error message quotes a value nested too deeply
                raise AclFileError(f"{source}: acls[{i}]: nested too deeply") from None
        seen[entry] = None
    return list(seen)


def _entry_hook(strings: dict[str, str], cidr_hosts: bool) -> Callable[[dict[str, Any]], Any]:
    """Turn each ACL entry into a binding while the JSON is decoded, so that a large file never
    holds all its entry dicts at once (they dominated peak memory). Entries that are not valid
    stay dicts and are reported, with their index, after decoding."""

    def hook(obj: dict[str, Any]) -> Any:
        if obj.keys() == FIELD_NAMES:
            try:
                return AclBinding.from_dict(obj, strings, cidr_hosts)
            except InvalidAclError:
                pass
        return obj

    return hook


def _sort_key(
    b: AclBinding,
) -> tuple[ResourceType, str, PatternType, str, str, AclOperation, AclPermissionType]:
    return (
        b.resource_type,
        b.resource_name,
        b.pattern_type,
        b.principal,
        b.host,
        b.operation,
        b.permission_type,
    )


def dump_acl_file(bindings: Iterable[AclBinding]) -> str:
    """The canonical file text: de-duplicated, sorted by resource then entry, one ACL per line
    (diff-friendly), trailing newline. `parse_acl_file(dump_acl_file(x))` gives back set(x)."""
    lines = [
        json.dumps(b.to_dict(), ensure_ascii=False) for b in sorted(set(bindings), key=_sort_key)
    ]
    if not lines:
        return '{\n  "version": 1,\n  "acls": []\n}\n'
    body = ",\n".join("    " + line for line in lines)
    return '{\n  "version": 1,\n  "acls": [\n' + body + "\n  ]\n}\n"
