"""The session side of groups from LDAP (protocol/identity/directory.py, sans-IO): a session
waits for its user's groups (the LookUpGroups effect) and no request of it goes anywhere before
they are known; they are added to the groups of its other sources; the IO layer's later
answers replace the directory's part alone; a SASL listener asks after every successful
(re-)authentication, and only when the directory is configured."""

from __future__ import annotations

import struct
from typing import Any

from aclgate.authz.authorizer import Authorizer
from aclgate.protocol import codec
from aclgate.protocol.effects import LookUpGroups
from aclgate.protocol.enforce.context import AuthContext, Policy
from aclgate.protocol.enforce.table import advertised_versions, handlers
from aclgate.protocol.identity import directory, saslgate
from aclgate.protocol.identity.directory import DirectoryGroups
from aclgate.protocol.identity.groups import MAX_GROUPS
from aclgate.protocol.identity.sasl.base import SaslServer
from aclgate.protocol.session import ProxySession, SessionConfig
from tests.fixtures.rawclient import request_entity
from tests.protocol.test_session import FakeIO, split_frames

ALLOWED = advertised_versions()
CONFIG = SessionConfig(handlers=handlers(), allowed_versions=ALLOWED)
#: ApiVersions v0, correlation id 99: forwarded to the cluster once authenticated
API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 99, -1)


def _session(groups: frozenset[str] = frozenset()) -> tuple[ProxySession, FakeIO]:
    authorizer = Authorizer(allow_everyone_if_no_acl_found=True)
    authorizer.load([])
    ctx = AuthContext(Policy(authorizer=authorizer), "User:alice", "127.0.0.1", "SSL", groups)
    io = FakeIO()
    return ProxySession(CONFIG, io, context=ctx), io


def _forwarded(io: FakeIO) -> list[int]:
    return [struct.unpack_from(">i", f, 8)[0] for f in split_frames(bytes(io.upstream))]


def _lookups(io: FakeIO) -> list[tuple[int, Any]]:
    return [(t, e) for t, e in io.effects if isinstance(e, LookUpGroups)]


def test_no_request_passes_before_the_groups_are_known_and_they_are_added():
    session, io = _session(frozenset({"Group:from-certificate"}))
    directory.look_up(session, "alice")
    ((token, effect),) = _lookups(io)
    assert effect == LookUpGroups("alice")
    session.client_data(API_VERSIONS_V0)
    assert not io.upstream, "a request went on before the session's groups were known"
    session.resume(token, frozenset({"payments", "ops"}))
    assert _forwarded(io) == [99]
    assert session.context.groups == {"Group:from-certificate", "Group:payments", "Group:ops"}


def test_later_answers_replace_the_directorys_part_alone():
    session, io = _session(frozenset({"Group:from-certificate"}))
    directory.update(session, {"early"})  # before the first answer: nothing changes
    assert session.context.groups == {"Group:from-certificate"}
    directory.look_up(session, "alice")
    ((token, _),) = _lookups(io)
    directory.update(session, {"early"})  # still pending: the answer decides
    session.resume(token, frozenset({"payments"}))
    assert session.context.groups == {"Group:from-certificate", "Group:payments"}
    directory.update(session, frozenset({"ops"}))  # dropped from payments, added to ops
    assert session.context.groups == {"Group:from-certificate", "Group:ops"}
    directory.update(session, frozenset())  # past --ldap-max-stale: none from the directory
    assert session.context.groups == {"Group:from-certificate"}
    state = session.state(DirectoryGroups)
    assert state is not None and state.directory == frozenset()


def test_more_groups_than_a_session_may_hold_close_it():
    session, io = _session()
    directory.look_up(session, "alice")
    ((token, _),) = _lookups(io)
    session.resume(token, frozenset(f"g{i}" for i in range(MAX_GROUPS + 1)))
    assert io.closed is not None
    reason, kind = io.closed
    assert "from the directory" in reason and kind == "authentication_failed"
    assert session.context.groups == frozenset()  # never some of them


# ------------------------------------------------------------------------- on a SASL listener


class FakeServer(SaslServer):
    """Completes on any token as `user`, with `groups` from the authentication itself."""

    mechanism = "SCRAM-SHA-512"

    def __init__(self, user: str, groups: tuple[str, ...]):
        self.user, self.groups = user, groups

    def evaluate(self, token: bytes) -> bytes:
        self._complete, self._authorization_id = True, self.user
        return b""

    def group_names(self) -> tuple[str, ...]:
        return self.groups


def _sasl_session(directory_groups: bool) -> tuple[ProxySession, FakeIO, list[tuple[str, ...]]]:
    token_groups: list[tuple[str, ...]] = [("from-token",)]
    after = dict(handlers())
    after[saslgate.SASL_HANDSHAKE] = saslgate._handshake
    after[saslgate.SASL_AUTHENTICATE] = saslgate._authenticate
    config = saslgate.SaslListenerConfig(
        mechanisms=("SCRAM-SHA-512",),
        new_server=lambda mechanism: FakeServer("alice", token_groups[0]),
        clock_ms=lambda: 10_000_000,
        max_reauth_ms=60_000,  # a lifetime: the client may re-authenticate
        handlers_after=after,
        versions_after={**ALLOWED, **saslgate.SASL_VERSIONS},
        directory_groups=directory_groups,
    )
    session, io = _session()
    session.context.principal = "User:ANONYMOUS"
    saslgate.install(session, config)
    return session, io, token_groups


def _login(session: ProxySession, corr: int) -> None:
    handshake = request_entity(17, 1, mechanism="SCRAM-SHA-512")
    authenticate = request_entity(36, 2, auth_bytes=b"token")
    session.client_data(codec.encode_request(corr, handshake, "c"))
    session.client_data(codec.encode_request(corr + 1, authenticate, "c"))


def test_a_sasl_session_asks_after_every_authentication():
    session, io, token_groups = _sasl_session(directory_groups=True)
    _login(session, 1)
    ((token, effect),) = _lookups(io)
    assert effect == LookUpGroups("alice")
    assert session.context.principal == "User:alice"
    assert session.context.groups == {"Group:from-token"}  # the directory's not yet
    session.client_data(API_VERSIONS_V0)
    assert not io.upstream
    session.resume(token, frozenset({"payments"}))
    assert _forwarded(io) == [99]
    assert session.context.groups == {"Group:from-token", "Group:payments"}

    token_groups[0] = ("other-token",)  # KIP-368: a new token with other groups
    _login(session, 10)
    (_, (again, effect)) = _lookups(io)
    assert effect == LookUpGroups("alice")
    assert session.context.groups == {"Group:other-token"}  # the directory's asked again
    session.resume(again, frozenset({"ops"}))
    assert session.context.groups == {"Group:other-token", "Group:ops"}


def test_without_a_directory_nothing_is_asked():
    session, io, _ = _sasl_session(directory_groups=False)
    _login(session, 1)
    session.client_data(API_VERSIONS_V0)
    assert _lookups(io) == []
    assert _forwarded(io) == [99]
    assert session.context.groups == {"Group:from-token"}
