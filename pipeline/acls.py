"""ACL files as the pipeline needs them: parsed by `authz/`, snapshotted as canonical text.

The text snapshot is what gets broadcast to executors, where each task rebuilds an
`authz.Authorizer` from it, so driver and executors decide with the very same ACLs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


class AclLoadError(ValueError):
    """The ACL file is missing or is not a valid aclgate ACL file."""


@dataclass(frozen=True)
class AclSnapshot:
    source: str
    text: str  # canonical ACL-file text (authz.aclfile.dump_acl_file)
    entries: tuple[dict[str, Any], ...]  # AclBinding.to_dict() of each binding


def load_acls(path: str, cidr_hosts: bool = False) -> AclSnapshot:
    """The ACL file at `path`; with `cidr_hosts` (`--acl-host-cidr`) a host with `/` must be
    a valid network, as the proxy started with it requires."""
    from aclgate.authz.aclfile import AclFileError, dump_acl_file, parse_acl_file

    file = Path(path).expanduser()
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise AclLoadError(f"cannot read ACL file {path}: {exc.strerror or exc}") from exc
    try:
        bindings = parse_acl_file(data, source=str(file), cidr_hosts=cidr_hosts)
    except AclFileError as exc:
        raise AclLoadError(str(exc)) from exc
    return AclSnapshot(
        source=str(file),
        text=dump_acl_file(bindings),
        entries=tuple(b.to_dict() for b in bindings),
    )
