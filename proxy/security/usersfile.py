"""The SASL users file: salted SCRAM credentials and PLAIN password hashes, never passwords.

Format (JSON, mode 0600):

    {"version": 1,
     "users": {"alice": {"SCRAM-SHA-512": {"salt": b64, "stored_key": b64, "server_key": b64,
                                           "iterations": 8192},
                         "PLAIN": {"alg": "scrypt", "n": 16384, "r": 8, "p": 1,
                                   "salt": b64, "hash": b64},
                         "groups": ["payments"]}}}

`groups` (optional, lowercase so that it can never be a mechanism's name) lists the user's
group names: the session gets `Group:NAME` principals for them (docs/identity.md, "Groups").
Files without it are read as before; it is written only for a user that has groups.

Every change is a read-modify-write under an exclusive `flock` on a sidecar `<file>.lock`
(the data file itself is replaced by rename, so it cannot carry the lock), written to a temp
file, fsynced, renamed over the old one, and the directory fsynced: concurrent
`aclgate users add` runs lose nothing and a crash leaves either the old or the new file.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from aclgate.files import exclusive_lock, write_atomically
from aclgate.protocol.identity.groups import TooManyGroupsError, group_principals
from aclgate.protocol.identity.sasl.credentials import (
    PLAIN,
    SCRAM_DEFAULT_ITERATIONS,
    SCRAM_MECHANISMS,
    PlainCredential,
    ScramCredential,
    hash_plain_password,
    scram_credential,
    scram_iterations_problem,
)

__all__ = [
    "MECHANISMS",
    "Users",
    "UsersFileError",
    "add_user",
    "checked_groups",
    "load_users",
    "parse_users",
    "remove_user",
    "set_groups",
]

log = logging.getLogger("aclgate.users")

VERSION = 1
MECHANISMS = (*SCRAM_MECHANISMS, PLAIN)
#: the key of a user's group names in its entry (beside the mechanisms)
GROUPS = "groups"
Credential = ScramCredential | PlainCredential
_NO_GROUPS: Mapping[str, tuple[str, ...]] = MappingProxyType({})


class UsersFileError(Exception):
    """The users file is missing, unreadable, corrupt or of an unknown version."""


@dataclass(frozen=True)
class Users:
    """An immutable snapshot of the users file; implements `CredentialLookup`."""

    entries: Mapping[str, Mapping[str, Credential]]
    #: user -> its group names (users without groups are not in it)
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: _NO_GROUPS)

    def credentials_for(self, user: str, mechanism: str) -> Credential | None:
        return self.entries.get(user, {}).get(mechanism)

    def groups_for(self, user: str) -> tuple[str, ...]:
        return self.groups.get(user, ())

    def names(self) -> list[str]:
        return sorted(self.entries)

    def mechanisms(self, user: str) -> list[str]:
        return sorted(self.entries.get(user, {}))

    def __len__(self) -> int:
        return len(self.entries)


def _parse_credential(mechanism: str, obj: Any) -> Credential:
    if not isinstance(obj, dict):
        raise ValueError("credential must be an object")
    if mechanism == PLAIN:
        return PlainCredential.from_json(obj)
    if mechanism in SCRAM_MECHANISMS:
        return ScramCredential.from_json(mechanism, obj)
    raise ValueError(f"unknown mechanism {mechanism!r}")


def checked_groups(groups: Iterable[str]) -> tuple[str, ...]:
    """Distinct group names, sorted; UsersFileError for a name that is not a string, empty,
    holds a control character, or past the bounds of protocol/identity/groups.py (255
    characters, 256 groups)."""
    names = []
    for name in groups:
        if not isinstance(name, str):
            raise UsersFileError(f"a group name must be a string, not {type(name).__name__}")
        if not name:
            raise UsersFileError("a group name must not be empty")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
            raise UsersFileError(f"group name {name!r} holds a control character")
        names.append(name)
    try:
        group_principals(names)
    except TooManyGroupsError as exc:
        raise UsersFileError(str(exc)) from None
    return tuple(sorted(set(names)))


def _outside_kafka_limits(credential: Credential) -> str | None:
    """Why Kafka would refuse to create this credential (SCRAM iterations out of range)."""
    if isinstance(credential, ScramCredential):
        return scram_iterations_problem(credential.iterations)
    return None


def parse_users(
    text: str | bytes, source: str = "users file", *, kafka_limits: bool = True
) -> Users:
    """Parse and validate the JSON document; raises UsersFileError naming the problem.

    `kafka_limits=False` lets through a credential Kafka would not create (SCRAM iterations
    outside 4096-16384): `aclgate users` must still be able to replace or remove that user."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise UsersFileError(f"{source}: corrupt users file (not JSON: {e})") from None
    except RecursionError:  # e.g. 200,000 nested arrays: the decoder gives up, not a crash
        raise UsersFileError(
            f"{source}: corrupt users file (not JSON: nested too deeply)"
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("users"), dict):
        raise UsersFileError(
            f'{source}: corrupt users file (expected {{"version": 1, "users": {{...}}}})'
        )
    if doc.get("version") != VERSION:
        raise UsersFileError(
            f"{source}: unsupported users file version {doc.get('version')!r} (expected {VERSION})"
        )
    entries: dict[str, Mapping[str, Credential]] = {}
    groups: dict[str, tuple[str, ...]] = {}
    for name, mechs in doc["users"].items():
        if not isinstance(mechs, dict):
            raise UsersFileError(f"{source}: corrupt entry for user {name!r}")
        parsed = {}
        for mechanism, obj in mechs.items():
            if mechanism == GROUPS:
                if not isinstance(obj, list):
                    raise UsersFileError(
                        f"{source}: corrupt groups for user {name!r}: not an array of names"
                    )
                try:
                    if user_groups := checked_groups(obj):
                        groups[name] = user_groups
                except UsersFileError as e:
                    raise UsersFileError(
                        f"{source}: corrupt groups for user {name!r}: {e}"
                    ) from None
                continue
            try:
                parsed[mechanism] = _parse_credential(mechanism, obj)
            except RecursionError:  # the error message quotes a value nested too deeply
                raise UsersFileError(
                    f"{source}: corrupt {mechanism} credential for user {name!r}: nested too deeply"
                ) from None
            except (ValueError, KeyError, TypeError) as e:
                raise UsersFileError(
                    f"{source}: corrupt {mechanism} credential for user {name!r}: {e}"
                ) from None
            problem = _outside_kafka_limits(parsed[mechanism]) if kafka_limits else None
            if problem is not None:
                raise UsersFileError(
                    f"{source}: {mechanism} credential for user {name!r}: {problem}"
                )
        entries[name] = MappingProxyType(parsed)
    return Users(MappingProxyType(entries), MappingProxyType(groups))


def _read_doc(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {"version": VERSION, "users": {}}
    except (OSError, UnicodeDecodeError) as e:
        raise UsersFileError(f"{path}: cannot read users file: {e}") from None
    parse_users(text, str(path), kafka_limits=False)  # validate before changing anything
    return json.loads(text)


def load_users(path: str | os.PathLike[str]) -> Users:
    """Load the users file for the SASL servers (a missing file is an error here)."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            text = f.read()
    except OSError as e:
        raise UsersFileError(f"{p}: cannot read users file: {e.strerror or e}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning(
            "users file %s is accessible by group or others (mode %o); chmod 600 it",
            p,
            mode & 0o777,
        )
    return parse_users(text, str(p))


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(path):
        yield


def _write_atomic(path: Path, doc: dict[str, Any]) -> None:
    write_atomically(path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode(), 0o600)


def _update(path: str | os.PathLike[str], change: Callable[[dict[str, Any]], bool]) -> bool:
    """Apply `change` to the document under the lock; write only if it returns True."""
    p = Path(path)
    with _locked(p):
        doc = _read_doc(p)
        changed = change(doc["users"])
        if changed:
            _write_atomic(p, doc)
        return changed


def validate_name(name: str) -> None:
    if not name or len(name) > 255:
        raise UsersFileError("a user name must be 1 to 255 characters")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise UsersFileError("a user name must not contain control characters")


def add_user(
    path: str | os.PathLike[str],
    name: str,
    password: str,
    mechanisms: Iterable[str],
    *,
    iterations: int = SCRAM_DEFAULT_ITERATIONS,
    groups: Iterable[str] | None = None,
) -> bool:
    """Create or replace a user with credentials for `mechanisms`; True if it existed.

    `groups`: the user's group names; None keeps those a replaced user had (a new password
    must not drop a group a DENY names)."""
    validate_name(name)
    new_groups = checked_groups(groups) if groups is not None else None
    mechs = sorted(set(mechanisms))
    if not mechs:
        raise UsersFileError("at least one mechanism is needed")
    unknown = [m for m in mechs if m not in MECHANISMS]
    if unknown:
        raise UsersFileError(f"unknown mechanism {unknown[0]!r}; use {', '.join(MECHANISMS)}")
    if not password:
        raise UsersFileError("the password must not be empty")
    entry: dict[str, Any] = {}
    for m in mechs:  # derive outside the lock: it is the slow part
        try:
            cred = (
                hash_plain_password(password)
                if m == PLAIN
                else scram_credential(m, password, iterations=iterations)
            )
        except ValueError as e:
            raise UsersFileError(str(e)) from None
        entry[m] = cred.to_json()
    existed = [False]

    def change(users: dict[str, Any]) -> bool:
        existed[0] = name in users
        kept = users[name].get(GROUPS) if existed[0] else None
        user_groups = new_groups if new_groups is not None else kept
        users[name] = {**entry, GROUPS: list(user_groups)} if user_groups else entry
        return True

    _update(path, change)
    return existed[0]


def set_groups(path: str | os.PathLike[str], name: str, groups: Iterable[str]) -> bool:
    """Make `groups` the user's group names (none: it has none); False if there is no such
    user."""
    user_groups = checked_groups(groups)

    def change(users: dict[str, Any]) -> bool:
        entry = users.get(name)
        if entry is None:
            return False
        entry.pop(GROUPS, None)
        if user_groups:
            entry[GROUPS] = list(user_groups)
        return True

    return _update(path, change)


def remove_user(path: str | os.PathLike[str], name: str) -> bool:
    """Remove a user; False if there was none."""

    def change(users: dict[str, Any]) -> bool:
        return users.pop(name, None) is not None

    return _update(path, change)
