"""Groups from a directory (LDAP, Active Directory), added to a session's own (sans-IO).

Where a session's principal becomes known (a SASL authentication or re-authentication, an
mTLS handshake), `look_up` makes it wait for the directory's groups of its user: the
`LookUpGroups` effect holds the requests behind it, so none is authorized before the groups
are known. They are *added* to the groups the session already has from its other sources
(a token claim, the certificate, the users file), which are kept apart so that the IO layer
can later replace the directory's part alone (`update`): a membership the directory drops,
or one older than --ldap-max-stale while the directory is unreachable, leaves the session
without it (docs/identity.md, "Groups from LDAP").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from aclgate.protocol.bounds import bounded
from aclgate.protocol.effects import LookUpGroups
from aclgate.protocol.identity.groups import NO_GROUPS, TooManyGroupsError, group_principals
from aclgate.protocol.session import ProxySession

#: characters of a user name quoted in a close reason
USER_TEXT = 200


@dataclass(slots=True)
class DirectoryGroups:
    """One session's groups from the directory (`session.own`), apart from its others."""

    user: str
    #: the session's groups from its other sources when the lookup began
    others: frozenset[str]
    #: the directory's groups in force, as `Group:NAME`
    directory: frozenset[str] = NO_GROUPS
    #: the lookup has not been answered yet: the session waits, and updates wait for it
    pending: bool = True


def look_up(session: ProxySession, user: str) -> None:
    """Hold the session's next requests until the directory's groups of `user` are known,
    then add them to the session's groups (on a re-authentication too: the groups the new
    authentication gave are the others from then on)."""
    state = DirectoryGroups(user, session.context.groups)
    session.own(state)
    session.wait(LookUpGroups(user), lambda names: _answered(session, state, names))


def _answered(session: ProxySession, state: DirectoryGroups, names: frozenset[str]) -> None:
    if session.state(DirectoryGroups) is not state:
        return  # a later lookup (a re-authentication) took its place
    state.pending = False
    update(session, names)


def update(session: ProxySession, names: Iterable[str]) -> None:
    """The directory's groups of the session's user are now `names` (the IO layer calls this
    when its answer changes, or when it went stale): the session's groups become its others
    plus these. More groups than a session may hold close it, as any source's would
    (protocol/identity/groups.py); nothing changes while the first answer is awaited."""
    state = session.state(DirectoryGroups)
    if state is None or state.pending or session.closed:
        return
    try:
        found = group_principals(names)
    except TooManyGroupsError as exc:
        session.fail(
            f"groups of user {bounded(state.user, USER_TEXT)!r} from the directory: {exc}",
            "authentication_failed",
        )
        return
    state.directory = found
    session.context.groups = state.others | found if found else state.others
