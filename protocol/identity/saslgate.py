"""SASL on a client listener, terminated by the proxy (sans-IO).

Before authentication a connection may send only ApiVersions, SaslHandshake and
SaslAuthenticate (Kafka closes on anything else); ApiVersions is answered by the proxy from
the upstream ranges it cached, so no upstream connection exists for an unauthenticated client.
The legacy flow is supported: after a SaslHandshake v0 the SASL tokens travel as bare
length-prefixed frames without a Kafka header. Frames are capped at 512 KiB until
authenticated (Kafka's sasl.server.max.receive.size).

A refused exchange is answered as Kafka answers it (SASL_AUTHENTICATION_FAILED (58) with
Kafka's message for bad credentials), and, as in Kafka, the answer is held for
connection.failed.authentication.delay.ms and the connection closed right after it; nothing
more is read meanwhile. That caps password guessing at one guess per delay per connection,
for every mechanism and for the v0 flow (where the failure is a closed connection).
Before a SaslHandshake, requests other than ApiVersions and SaslHandshake close the connection
at once, without an answer (Kafka's "Unexpected Kafka request of type ... during SASL
handshake"). Between a SaslHandshake v1 and the end of its exchange, any request but
SaslAuthenticate (ApiVersions and SaslHandshake too) is answered with its own error response,
ILLEGAL_SASL_STATE, after the failure delay, and the connection closed, as Kafka does. Once
authenticated, a SaslAuthenticate without a new handshake, and a SaslHandshake when the session
has no lifetime (no re-authentication), are answered ILLEGAL_SASL_STATE and the connection
stays open, as Kafka's request handler answers them (tests/listeners/test_sasl_edges_kafka.py
compares every such sequence with a real Kafka).
With a session lifetime (connections.max.reauth.ms, or an OAUTHBEARER token's expiry; v0 flow
sessions too, though their client cannot be told), the client re-authenticates mid-stream
(KIP-368) with the same principal and mechanism, with a SaslHandshake v1 or v0, at most once a
second as in Kafka; a request after expiry closes the connection, as Kafka does.
"""

from __future__ import annotations

import enum
import functools
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i64Timedelta

from aclgate.protocol.apiversions import local_api_versions_response
from aclgate.protocol.bounds import bounded
from aclgate.protocol.codec import decode_request, encode_response
from aclgate.protocol.effects import (
    BUSY,
    Authenticated,
    AuthenticationResult,
    AwaitKeySet,
    RunBlocking,
    Sleep,
)
from aclgate.protocol.enforce.build import build
from aclgate.protocol.framing import DEFAULT_MAX_PRE_AUTH_FRAME, Frame
from aclgate.protocol.header import RequestHeader
from aclgate.protocol.identity import directory
from aclgate.protocol.identity.groups import TooManyGroupsError, group_principals
from aclgate.protocol.identity.principal import sasl_principal
from aclgate.protocol.identity.sasl import (
    SaslAuthenticationError,
    SaslException,
    SaslServer,
    reauthentication_mechanism_error,
    reauthentication_principal_error,
    session_lifetime_ms,
)
from aclgate.protocol.identity.sasl.pending import SaslPending
from aclgate.protocol.session import ProxySession
from aclgate.protocol.versions import api_name, response_class

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
#: what the listener itself serves, whatever the broker announces
SASL_VERSIONS: dict[int, tuple[int, int]] = {SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 2)}
_SIZE = struct.Struct(">i")
#: characters of a client's mechanism name quoted in a close reason (RFC 4422 names have at
#: most 20; a client can send 32 KB)
MECHANISM_TEXT = 100
#: the largest request (bytes after the size) sent out of turn during a SASL exchange that is
#: answered with its error response, as Kafka answers it; a larger one is closed on unanswered
#: (docs/design.md, "SASL state errors"). Real clients send none.
UNEXPECTED_ANSWERED_BYTES = 4096
#: Kafka re-authenticates a connection at most once a second
MIN_REAUTH_INTERVAL_MS = 1000
#: characters of a failed exchange's message, in the close reason and in the answer's
#: error_message (it may quote what the client sent, e.g. a malformed SCRAM message)
MESSAGE_TEXT = 500


@dataclass
class SaslListenerConfig:
    mechanisms: tuple[str, ...]
    #: a fresh SaslServer for one exchange with the named mechanism
    new_server: Callable[[str], SaslServer]
    #: epoch milliseconds (exp/nbf checks, session expiry)
    clock_ms: Callable[[], int]
    #: Kafka's connections.max.reauth.ms (0 = sessions never expire)
    max_reauth_ms: int = 0
    #: mechanisms whose evaluate() is slow (PLAIN's scrypt): run off the event loop (the
    #: RunBlocking effect)
    slow_mechanisms: frozenset[str] = frozenset({"PLAIN"})
    #: Kafka's connection.failed.authentication.delay.ms: a refused exchange's answer (and
    #: the close) wait this long (the Sleep effect)
    failure_delay_ms: int = 0
    #: (session, "User:name") -> why the connection is refused (a per-principal connection
    #: limit) or None; a query, asked once before the first success is answered
    admit: Callable[[ProxySession, str], str | None] = lambda session, principal: None
    #: api_key -> (min, max) to announce before authentication
    pre_auth_versions: Callable[[], Mapping[int, tuple[int, int]]] = dict
    #: the handlers and versions to install once authenticated
    handlers_after: Mapping[int, Any] = field(default_factory=dict)
    versions_after: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    #: the directory (LDAP) gives groups too: after every successful (re-)authentication
    #: the session waits for them (protocol/identity/directory.py, the LookUpGroups effect)
    directory_groups: bool = False

    @functools.cached_property
    def exchange_handlers(self) -> dict[int, Any]:
        """The dispatch table between a SaslHandshake v1 and the end of its exchange: every
        API the listener parses is read (`versions_after`, narrowed in place), and all but
        SaslAuthenticate refused as Kafka refuses them (`_unexpected`)."""
        return {**dict.fromkeys(self.versions_after, _unexpected), SASL_AUTHENTICATE: _authenticate}


class Phase(enum.Enum):
    """Where a connection is in its SASL life (Kafka's SaslServerAuthenticator states,
    folded to what a proxy must tell apart)."""

    AWAITING_HANDSHAKE = "awaiting SaslHandshake"
    TOKENS_V0 = "bare tokens after SaslHandshake v0"
    AUTHENTICATING = "SaslAuthenticate exchange"
    AUTHENTICATED = "authenticated"
    REAUTHENTICATING = "re-authenticating (KIP-368)"
    CLOSING = "refused, closing"


class Event(enum.Enum):
    HANDSHAKE_V0 = "SaslHandshake v0 accepted"
    HANDSHAKE = "SaslHandshake v1+ accepted"
    COMPLETED = "exchange completed"
    REFUSED = "exchange refused"


#: The SASL state machine: the only moves a connection makes. A move not in this table is a
#: bug (AssertionError), never a silent state change.
TRANSITIONS: Mapping[tuple[Phase, Event], Phase] = {
    (Phase.AWAITING_HANDSHAKE, Event.HANDSHAKE_V0): Phase.TOKENS_V0,
    (Phase.AWAITING_HANDSHAKE, Event.HANDSHAKE): Phase.AUTHENTICATING,
    (Phase.TOKENS_V0, Event.COMPLETED): Phase.AUTHENTICATED,
    (Phase.AUTHENTICATING, Event.COMPLETED): Phase.AUTHENTICATED,
    (Phase.AUTHENTICATED, Event.HANDSHAKE): Phase.REAUTHENTICATING,
    # Kafka re-authenticates with bare tokens after a SaslHandshake v0 too
    (Phase.AUTHENTICATED, Event.HANDSHAKE_V0): Phase.TOKENS_V0,
    (Phase.REAUTHENTICATING, Event.COMPLETED): Phase.AUTHENTICATED,
    **{(phase, Event.REFUSED): Phase.CLOSING for phase in Phase},
}

#: Requests each phase reads (None: any). Anything else closes the connection unanswered, as
#: Kafka does before a handshake; TOKENS_V0 frames have no header (`_raw_token` reads them).
#: AUTHENTICATING and REAUTHENTICATING read every request they can parse: all but
#: SaslAuthenticate are answered with their error response (`_unexpected`, the dispatch table
#: `exchange_handlers`), as Kafka answers them, then closed.
REQUESTS: Mapping[Phase, frozenset[int] | None] = {
    Phase.AWAITING_HANDSHAKE: frozenset({API_VERSIONS, SASL_HANDSHAKE}),
    Phase.TOKENS_V0: frozenset(),
    Phase.AUTHENTICATING: None,
    Phase.AUTHENTICATED: None,
    Phase.REAUTHENTICATING: None,
    Phase.CLOSING: frozenset(),
}


class SaslState:
    """One connection's SASL progress."""

    def __init__(self, config: SaslListenerConfig):
        self.config = config
        self.phase = Phase.AWAITING_HANDSHAKE
        self.server: SaslServer | None = None
        self.mechanism: str | None = None
        self.principal: str | None = None  # authenticated authorization id
        self.expires_at_ms: int | None = None
        #: when the latest re-authentication's SaslHandshake was accepted (epoch ms)
        self.reauth_began_ms: int | None = None

    @property
    def authenticated(self) -> bool:
        """Has authenticated once (also while re-authenticating)."""
        return self.principal is not None

    def advance(self, event: Event) -> None:
        following = TRANSITIONS.get((self.phase, event))
        assert following is not None, f"SASL: no move on {event.value} in {self.phase.value}"
        self.phase = following


def _state(session: ProxySession) -> SaslState:
    state = session.state(SaslState)
    assert state is not None  # installed (`install`) before any SASL handler can run
    return state


def _server(state: SaslState) -> SaslServer:
    assert state.server is not None  # the SaslHandshake chose the mechanism first
    return state.server


def _message(error: SaslAuthenticationError | None) -> str:
    assert error is not None  # asked only when the principal or mechanism did change
    return error.message


def install(session: ProxySession, config: SaslListenerConfig) -> SaslState:
    """Put a fresh connection into the pre-authentication state."""
    state = SaslState(config)
    session.set_handlers(
        {API_VERSIONS: _api_versions, SASL_HANDSHAKE: _handshake, SASL_AUTHENTICATE: _authenticate},
        {API_VERSIONS: (0, 4), **SASL_VERSIONS},
    )
    session.set_max_frame(DEFAULT_MAX_PRE_AUTH_FRAME)
    session.set_gate(lambda header: _gate(state, header))
    session.own(state)
    return state


def _gate(state: SaslState, header: RequestHeader) -> str | None:
    allowed = REQUESTS[state.phase]
    if allowed is not None and header.api_key not in allowed:
        return (
            f"Unexpected Kafka request of type {api_name(header.api_key)} (api_key="
            f"{header.api_key}) during SASL handshake, before authentication; closing as Kafka "
            "does"
        )
    if (
        state.expires_at_ms is not None
        and header.api_key
        not in (
            SASL_HANDSHAKE,
            SASL_AUTHENTICATE,
        )
        and state.config.clock_ms() >= state.expires_at_ms
    ):
        return "SASL session expired without re-authentication (KIP-368); closing as Kafka does"
    return None


# ----------------------------------------------------------------------------- handlers


def _api_versions(session: ProxySession, header: RequestHeader, frame: Frame) -> None:
    """Before authentication: answered locally from the cached upstream ranges."""
    state = _state(session)
    ranges = dict(state.config.pre_auth_versions())
    ranges.update(SASL_VERSIONS)
    session.respond(
        header, local_api_versions_response(header.correlation_id, header.api_version, ranges)
    )


def _encoded(header: RequestHeader, code: ErrorCode, source: Any = None, **fields: Any) -> bytes:
    """The answer to `header`'s request with `code`; given the decoded request (`source`), it
    is that request's error response, as Kafka's getErrorResponse builds it."""
    body = build(response_class(header.api_key, header.api_version), code, source, None, fields)
    return encode_response(header.correlation_id, body)


def _answer(session: ProxySession, header: RequestHeader, code: ErrorCode, **fields: Any) -> None:
    session.respond(header, _encoded(header, code, **fields))


def _later(session: ProxySession, state: SaslState, action: Callable[[], None]) -> None:
    """Run `action` after connection.failed.authentication.delay.ms, reading no more requests
    meanwhile: Kafka holds a refused exchange's answer that long (it slows guessing down)."""
    state.advance(Event.REFUSED)
    session.stop_accepting()
    delay = state.config.failure_delay_ms
    if delay > 0:
        session.wait(Sleep(delay / 1000), lambda _: action())  # not resumed once closed
    else:
        action()


def _refuse_later(
    session: ProxySession,
    header: RequestHeader,
    state: SaslState,
    code: ErrorCode,
    reason: str,
    *,
    failed: bool = False,
    source: Any = None,
    **fields: Any,
) -> None:
    """Answer `code` after the delay, then close. `failed`: bad credentials (the close is
    counted as authentication_failed)."""
    body = _encoded(header, code, source, **fields)

    def send() -> None:
        if failed:
            session.authentication_failed()  # before the close, which may happen at once
        # last in the response order: nothing after this request was read (stop_accepting)
        session.respond(header, body)
        # bad credentials are counted as authentication_failed (auth_failed); any other
        # refused exchange is a SASL-state error, as Kafka counts it a failed authentication
        session.close_after_flush(reason, None if failed else "sasl_state")

    _later(session, state, send)


def _handshake(session: ProxySession, header: RequestHeader, frame: Frame) -> None:
    state = _state(session)
    request = decode_request(frame, header)
    mechanisms = tuple(state.config.mechanisms)
    refusal: tuple[ErrorCode, str] | None = None
    if state.phase is Phase.AUTHENTICATED and not _may_reauthenticate(state):
        # Kafka's request handler answers ILLEGAL_SASL_STATE (no mechanisms); the connection
        # goes on
        _answer(session, header, ErrorCode.illegal_sasl_state)
        return
    if request.mechanism not in mechanisms:
        refusal = (
            ErrorCode.unsupported_sasl_mechanism,
            f"client asked for SASL mechanism {bounded(request.mechanism, MECHANISM_TEXT)!r}, "
            f"enabled: {', '.join(mechanisms)}",
        )
    elif state.authenticated and request.mechanism != state.mechanism:
        refusal = (
            ErrorCode.illegal_sasl_state,
            _message(
                reauthentication_mechanism_error(
                    str(state.mechanism), bounded(request.mechanism, MECHANISM_TEXT)
                )
            ),
        )
    if refusal is not None:
        code, reason = refusal
        _refuse_later(session, header, state, code, reason, mechanisms=mechanisms)
        return
    state.server = state.config.new_server(request.mechanism)
    state.mechanism = request.mechanism
    if state.authenticated:
        state.reauth_began_ms = state.config.clock_ms()
    state.advance(Event.HANDSHAKE_V0 if header.api_version == 0 else Event.HANDSHAKE)
    _answer(session, header, ErrorCode.none, mechanisms=mechanisms)
    if header.api_version == 0:
        session.set_raw_handler(_raw_token)  # legacy flow: bare tokens follow
    else:  # also a re-authentication: Kafka serves nothing else until it completes
        session.set_handlers(state.config.exchange_handlers, state.config.versions_after)


def _may_reauthenticate(state: SaslState) -> bool:
    """Kafka begins a re-authentication (KIP-368) only on a session with a lifetime, and at
    most once a second (KafkaChannel's MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS, counted from the
    latest re-authentication's start); another SaslHandshake goes to its request handler."""
    began = state.reauth_began_ms
    return state.expires_at_ms is not None and (
        began is None or state.config.clock_ms() - began >= MIN_REAUTH_INTERVAL_MS
    )


def _authenticate(session: ProxySession, header: RequestHeader, frame: Frame) -> None:
    state = _state(session)
    if state.phase is Phase.AUTHENTICATED:
        # no handshake began a re-authentication: Kafka's request handler answers this, in
        # its words, and the connection goes on; a body that does not parse closes it first,
        # as Kafka's network layer parses every request
        decode_request(frame, header)
        _answer(
            session,
            header,
            ErrorCode.illegal_sasl_state,
            error_message="SaslAuthenticate request received after successful authentication",
        )
        return
    if _too_large(session, state, frame):
        return
    request = decode_request(frame, header)
    _evaluate(
        session,
        state,
        bytes(request.auth_bytes),
        lambda result: _authenticate_done(session, header, state, result),
    )


def _unexpected(session: ProxySession, header: RequestHeader, frame: Frame) -> None:
    """Any request but SaslAuthenticate between a SaslHandshake v1 and the end of its
    exchange: Kafka answers it with its own error response, ILLEGAL_SASL_STATE, after the
    failure delay, and closes. One over UNEXPECTED_ANSWERED_BYTES is closed on unanswered
    after the delay: its error response mirrors every entry it names, and an unauthenticated
    client must not make the event loop decode and build that (0.7 s for 512 KiB)."""
    state = _state(session)
    reason = (
        f"Unexpected Kafka request of type {api_name(header.api_key)} (api_key="
        f"{header.api_key}) during SASL authentication; closing as Kafka does"
    )
    if len(frame) - 4 > UNEXPECTED_ANSWERED_BYTES:
        _later(session, state, lambda: session.fail(f"{reason}, unanswered", "sasl_state"))
        return
    source = decode_request(frame, header)
    _refuse_later(session, header, state, ErrorCode.illegal_sasl_state, reason, source=source)


def _too_large(session: ProxySession, state: SaslState, frame: Frame) -> bool:
    """A re-authentication token over sasl.server.max.receive.size (before authentication
    the frame cap refuses it before it is buffered): Kafka fails the authentication."""
    if len(frame) - 4 <= DEFAULT_MAX_PRE_AUTH_FRAME:
        return False
    _fail_later(session, state, "Failing SASL authentication due to invalid receive size")
    return True


def _principal_changed(state: SaslState) -> str | None:
    """Kafka's message when a completed re-authentication names another principal."""
    previous, new = state.principal, _server(state).authorization_id
    if previous is None or new == previous:
        return None
    return _message(reauthentication_principal_error(sasl_principal(previous), sasl_principal(new)))


def _raw_token(session: ProxySession, frame: Frame) -> None:
    """SaslHandshake v0 flow: a bare token in, a bare token (or a closed connection) out."""
    state = _state(session)
    if _too_large(session, state, frame):
        return
    token = bytes(frame[4:])

    def done(result: Any) -> None:
        changed = _principal_changed(state) if _server(state).complete else None
        if isinstance(result, SaslException) or changed is not None:
            _fail_later(session, state, changed or str(result))
            return
        if _server(state).complete and state.principal is None:
            refused = state.config.admit(session, sasl_principal(_server(state).authorization_id))
            if refused is not None:
                _later(session, state, lambda: session.fail(refused, "connection_limit"))
                return
        session.respond_raw(_SIZE.pack(len(result)) + result)
        if _server(state).complete:
            session.set_raw_handler(None)
            _succeeded(session, state, _lifetime(state))

    _evaluate(session, state, token, done)


def _evaluate(
    session: ProxySession, state: SaslState, token: bytes, done: Callable[[Any], None]
) -> None:
    """Run the mechanism; slow ones off the event loop (RunBlocking), and an OAUTHBEARER
    token whose key set is being fetched again once the fetch ends (AwaitKeySet). Further
    requests of the connection wait meanwhile."""
    server = _server(state)
    if state.mechanism not in state.config.slow_mechanisms:
        result = _evaluated(server, token)
        if isinstance(result, SaslPending):  # OAUTHBEARER: its key set is being fetched again
            session.wait(
                AwaitKeySet(result.reason), lambda _: _evaluate(session, state, token, done)
            )
            return
        done(result)
        return

    def finished(result: Any) -> None:
        if result is BUSY:
            # The workers' queues are full (proxy/security/authpool.py): drop the connection, after the
            # delay so that a flood does not turn into a reconnect loop; a client retries as
            # after any network error, and nothing about the credentials was checked or said.
            _later(
                session,
                state,
                lambda: session.fail(
                    f"SASL {state.mechanism} authentication not attempted: too many "
                    "authentications waiting for a password-hashing worker",
                    "sasl_busy",
                ),
            )
        elif isinstance(result, BaseException) and not isinstance(result, SaslException):
            session.internal_error(f"SASL {state.mechanism} exchange", result)
        else:
            done(result)

    host = getattr(session.context, "host", None)
    session.wait(RunBlocking(_evaluated, (server, token), host), finished)


def _evaluated(server: SaslServer, token: bytes) -> Any:
    """The mechanism's answer to `token`, or the SaslException (or SaslPending) it raised:
    a value either way, as it may be computed off the event loop."""
    try:
        return server.evaluate(token)
    except (SaslException, SaslPending) as exc:
        return exc


def _authenticate_done(
    session: ProxySession, header: RequestHeader, state: SaslState, result: Any
) -> None:
    if isinstance(result, SaslException):
        message = result.error_message(str(state.mechanism), state.authenticated)
        _refuse(session, header, state, message)
        return
    if not _server(state).complete:
        _answer(
            session,
            header,
            ErrorCode.none,
            auth_bytes=result,
            session_lifetime=_ms(0),
            error_message="",
        )
        return
    changed = _principal_changed(state)
    if changed is not None:
        _refuse(session, header, state, changed)
        return
    if state.principal is None:
        refused = state.config.admit(session, sasl_principal(_server(state).authorization_id))
        if refused is not None:
            _refuse_connection(session, header, state, refused)
            return
    lifetime = _lifetime(state)
    _answer(
        session,
        header,
        ErrorCode.none,
        auth_bytes=result,
        session_lifetime=_ms(lifetime),
        error_message="",  # Kafka's default for the field, not null
    )
    _succeeded(session, state, lifetime)


def _refuse(session: ProxySession, header: RequestHeader, state: SaslState, message: str) -> None:
    """Bad credentials: SASL_AUTHENTICATION_FAILED with Kafka's message (bounded) after the
    delay, then the close."""
    session.notify(AuthenticationResult(state.mechanism or "", False))
    message = bounded(message, MESSAGE_TEXT)
    _refuse_later(
        session,
        header,
        state,
        ErrorCode.sasl_authentication_failed,
        f"SASL authentication failed ({state.mechanism}): {message}",
        failed=True,
        error_message=message,
        auth_bytes=b"",
    )


def _refuse_connection(
    session: ProxySession, header: RequestHeader, state: SaslState, reason: str
) -> None:
    """Good credentials, but the principal has its connections already: Kafka has no such
    limit, so the client is told in the words clients show for authentication errors."""
    body = _encoded(
        header,
        ErrorCode.sasl_authentication_failed,
        error_message=f"Authentication failed: {reason}",
        auth_bytes=b"",
    )

    def send() -> None:
        session.respond(header, body)  # nothing is owed before it: written at once
        session.flush()
        session.fail(reason, "connection_limit")

    _later(session, state, send)


def _ms(milliseconds: int) -> i64Timedelta:
    """SaslAuthenticate v1+ `session_lifetime_ms` (kio's field `session_lifetime`)."""
    return i64Timedelta.parse(timedelta(milliseconds=milliseconds))


def _lifetime(state: SaslState) -> int:
    """The session's lifetime; also for the v0 flow, which cannot tell the client: Kafka
    expires (and re-authenticates) those sessions too."""
    expiry = _server(state).credential_expiration_ms()
    return session_lifetime_ms(expiry, state.config.max_reauth_ms or None, state.config.clock_ms())


def _succeeded(session: ProxySession, state: SaslState, lifetime: int = 0) -> None:
    first = state.principal is None
    state.advance(Event.COMPLETED)
    state.principal = _server(state).authorization_id
    state.expires_at_ms = state.config.clock_ms() + lifetime if lifetime else None
    session.notify(AuthenticationResult(state.mechanism or "", True))
    session.set_handlers(state.config.handlers_after, state.config.versions_after)
    try:  # on a re-authentication too: a new token may carry other groups
        session.context.groups = group_principals(_server(state).group_names())
    except TooManyGroupsError as exc:
        session.fail(f"SASL authentication ({state.mechanism}): {exc}", "authentication_failed")
        return
    if first:
        session.set_max_frame(session.config.max_frame)
        # who the connection is from now on: every check after this uses it
        principal = sasl_principal(state.principal)
        session.context.principal = principal
        session.notify(Authenticated(principal))
    if state.config.directory_groups:  # --ldap-url: added to the groups set above
        directory.look_up(session, state.principal)


def _fail_later(session: ProxySession, state: SaslState, message: str) -> None:
    """Bad credentials without an answer to give (the v0 flow): close after the delay."""
    session.notify(AuthenticationResult(state.mechanism or "", False))

    def close() -> None:
        session.authentication_failed()
        session.close_after_flush(
            f"SASL authentication failed ({state.mechanism}): {bounded(message, MESSAGE_TEXT)}"
        )

    _later(session, state, close)
