"""A session's group principals: the names its identity sources give (a token claim, a
certificate field, the users file, the directory), as the `Group:NAME` principals ACLs name
(docs/identity.md, "Groups").

Every source hands group *names* to `group_principals`, the one place they are bounded: a
token or a directory may claim thousands of groups, and each is kept per session and in every
decision's cache key and audit line.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

#: the principal type of a group (`Group:payments`)
GROUP_TYPE: Final = "Group"
#: groups kept per session at most; past it the session is refused (docs/identity.md)
MAX_GROUPS: Final = 256
#: the longest group name kept (an LDAP DN's first RDN, a claim value)
MAX_GROUP_NAME: Final = 255

NO_GROUPS: Final[frozenset[str]] = frozenset()


class TooManyGroupsError(ValueError):
    """A source gave more groups, or a longer name, than a session may hold."""


def group_principals(names: Iterable[str]) -> frozenset[str]:
    """`Group:NAME` for each distinct, non-empty name; TooManyGroupsError past the bounds
    (fail closed: a session is never given some of its groups and not others)."""
    principals = set()
    for name in names:
        if not name:
            continue
        if len(name) > MAX_GROUP_NAME:
            raise TooManyGroupsError(
                f"a group name of {len(name)} characters (at most {MAX_GROUP_NAME})"
            )
        principals.add(f"{GROUP_TYPE}:{name}")
        if len(principals) > MAX_GROUPS:
            raise TooManyGroupsError(f"more than {MAX_GROUPS} groups")
    return frozenset(principals) if principals else NO_GROUPS
