"""SASL on a client listener, terminated by the proxy (sans-IO).

Before authentication a connection may send only ApiVersions, SaslHandshake and
SaslAuthenticate (Kafka closes on anything else); ApiVersions is answered by the proxy from
the upstream ranges it cached, so no upstream connection exists for an unauthenticated client.
The legacy flow is supported: after a SaslHandshake v0 the SASL tokens travel as bare
length-prefixed frames without a Kafka header. Frames are capped at 512 KiB until
authenticated (Kafka's sasl.server.max.receive.size).

A failed authentication is answered with SASL_AUTHENTICATION_FAILED (58) and Kafka's message,
then the connection is closed after a short delay (connection.failed.authentication.delay.ms).
With a session lifetime (connections.max.reauth.ms, or an OAUTHBEARER token's expiry), the
client re-authenticates mid-stream (KIP-368) with the same principal and mechanism; a request
after expiry closes the connection, as Kafka does.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i64Timedelta

from protocol.apiversions import local_api_versions_response
from protocol.codec import decode_request, encode_response
from protocol.enforce.build import build
from protocol.framing import DEFAULT_MAX_PRE_AUTH_FRAME, Frame
from protocol.header import RequestHeader
from protocol.sasl import (
    SaslException,
    SaslServer,
    reauthentication_mechanism_error,
    reauthentication_principal_error,
    session_lifetime_ms,
)
from protocol.session import ProxySession
from protocol.versions import response_class

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
#: what the listener itself serves, whatever the broker announces
SASL_VERSIONS: dict[int, tuple[int, int]] = {SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 2)}
_SIZE = struct.Struct(">i")


@dataclass
class SaslListenerConfig:
    mechanisms: tuple[str, ...]
    #: a fresh SaslServer for one exchange with the named mechanism
    new_server: Callable[[str], SaslServer]
    #: epoch milliseconds (exp/nbf checks, session expiry)
    clock_ms: Callable[[], int]
    #: Kafka's connections.max.reauth.ms (0 = sessions never expire)
    max_reauth_ms: int = 0
    #: mechanisms whose evaluate() is slow (PLAIN's scrypt): run off the event loop
    slow_mechanisms: frozenset[str] = frozenset({"PLAIN"})
    #: (function, done(result_or_exception)) -> None: run function in a worker thread
    run_blocking: Callable[[Callable[[], Any], Callable[[Any], None]], None] | None = None
    #: api_key -> (min, max) to announce before authentication
    pre_auth_versions: Callable[[], Mapping[int, tuple[int, int]]] = dict
    #: called once with the principal when the first authentication succeeds
    on_authenticated: Callable[[ProxySession, str], None] = lambda session, principal: None
    #: the handlers and versions to install once authenticated
    handlers_after: Mapping[int, Any] = field(default_factory=dict)
    versions_after: Mapping[int, tuple[int, int]] = field(default_factory=dict)


class SaslState:
    """One connection's SASL progress."""

    def __init__(self, config: SaslListenerConfig):
        self.config = config
        self.server: SaslServer | None = None
        self.mechanism: str | None = None
        self.principal: str | None = None  # authenticated authorization id
        self.expires_at_ms: int | None = None
        self.handshake_version = 1

    @property
    def authenticated(self) -> bool:
        return self.principal is not None


def install(session: ProxySession, config: SaslListenerConfig) -> SaslState:
    """Put a fresh connection into the pre-authentication state."""
    state = SaslState(config)
    session.set_handlers(
        {API_VERSIONS: _api_versions, SASL_HANDSHAKE: _handshake, SASL_AUTHENTICATE: _authenticate},
        {API_VERSIONS: (0, 4), **SASL_VERSIONS},
    )
    session.set_max_frame(DEFAULT_MAX_PRE_AUTH_FRAME)
    session.gate = lambda header: _gate(state, header)
    session.sasl = state
    return state


def _gate(state: SaslState, header: RequestHeader) -> str | None:
    if not state.authenticated and header.api_key not in (
        API_VERSIONS,
        SASL_HANDSHAKE,
        SASL_AUTHENTICATE,
    ):
        return (
            f"api_key={header.api_key} before SASL authentication completed (ILLEGAL_SASL_STATE); "
            "closing as Kafka does"
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
    state: SaslState = session.sasl
    ranges = dict(state.config.pre_auth_versions())
    ranges.update(SASL_VERSIONS)
    session.respond(
        header, local_api_versions_response(header.correlation_id, header.api_version, ranges)
    )


def _answer(session: ProxySession, header: RequestHeader, code: ErrorCode, **fields: Any) -> None:
    body = build(response_class(header.api_key, header.api_version), code, None, None, fields)
    session.respond(header, encode_response(header.correlation_id, body))


def _handshake(session: ProxySession, header: RequestHeader, frame: Frame) -> None:
    state: SaslState = session.sasl
    request = decode_request(frame, header)
    mechanisms = tuple(state.config.mechanisms)
    if state.server is not None and not state.server.complete:
        _answer(session, header, ErrorCode.illegal_sasl_state, mechanisms=mechanisms)
        session.close_after_flush("SaslHandshake during an unfinished SASL exchange")
        return
    if state.authenticated and header.api_version == 0:
        _answer(session, header, ErrorCode.illegal_sasl_state, mechanisms=mechanisms)
        session.close_after_flush("re-authentication needs SaslHandshake v1 or later")
        return
    if request.mechanism not in mechanisms:
        _answer(session, header, ErrorCode.unsupported_sasl_mechanism, mechanisms=mechanisms)
        session.close_after_flush(
            f"client asked for SASL mechanism {request.mechanism!r}, enabled: {', '.join(mechanisms)}"
        )
        return
    if state.authenticated and request.mechanism != state.mechanism:
        _answer(session, header, ErrorCode.illegal_sasl_state, mechanisms=mechanisms)
        session.close_after_flush(
            reauthentication_mechanism_error(state.mechanism, request.mechanism).message
        )
        return
    state.server = state.config.new_server(request.mechanism)
    state.mechanism = request.mechanism
    state.handshake_version = header.api_version
    _answer(session, header, ErrorCode.none, mechanisms=mechanisms)
    if header.api_version == 0:
        session.raw_handler = _raw_token  # legacy flow: bare tokens follow


def _authenticate(session: ProxySession, header: RequestHeader, frame: Frame) -> None:
    state: SaslState = session.sasl
    if state.server is None or state.server.complete:
        _answer(
            session,
            header,
            ErrorCode.illegal_sasl_state,
            error_message="SaslAuthenticate without a SaslHandshake",
        )
        session.close_after_flush("SaslAuthenticate out of order (ILLEGAL_SASL_STATE)")
        return
    request = decode_request(frame, header)
    _evaluate(
        session,
        state,
        bytes(request.auth_bytes),
        lambda result: _authenticate_done(session, header, state, result),
    )


def _raw_token(session: ProxySession, frame: Frame) -> None:
    """SaslHandshake v0 flow: a bare token in, a bare token (or a closed connection) out."""
    state: SaslState = session.sasl
    token = bytes(frame[4:])

    def done(result: Any) -> None:
        if isinstance(result, SaslException):
            _fail(session, state, str(result))
            return
        session.respond_raw(_SIZE.pack(len(result)) + result)
        if state.server.complete:
            session.raw_handler = None
            _succeeded(session, state)

    _evaluate(session, state, token, done)


def _evaluate(
    session: ProxySession, state: SaslState, token: bytes, done: Callable[[Any], None]
) -> None:
    """Run the mechanism; slow ones in a worker thread with the connection parked meanwhile."""
    server = state.server

    def run() -> Any:
        try:
            return server.evaluate(token)
        except SaslException as exc:
            return exc

    runner = state.config.run_blocking
    if runner is None or state.mechanism not in state.config.slow_mechanisms:
        done(run())
        return
    session.stall()

    def finished(result: Any) -> None:
        done(result)
        session.resume()

    runner(run, finished)


def _authenticate_done(
    session: ProxySession, header: RequestHeader, state: SaslState, result: Any
) -> None:
    if isinstance(result, SaslException):
        _refuse(session, header, state, result.error_message(state.mechanism, state.authenticated))
        return
    if not state.server.complete:
        _answer(session, header, ErrorCode.none, auth_bytes=result, session_lifetime=_ms(0))
        return
    previous, new = state.principal, state.server.authorization_id
    if previous is not None and new != previous:
        _refuse(
            session,
            header,
            state,
            reauthentication_principal_error(f"User:{previous}", f"User:{new}").message,
        )
        return
    lifetime = _lifetime(state)
    _answer(session, header, ErrorCode.none, auth_bytes=result, session_lifetime=_ms(lifetime))
    _succeeded(session, state, lifetime)


def _refuse(session: ProxySession, header: RequestHeader, state: SaslState, message: str) -> None:
    """SASL_AUTHENTICATION_FAILED with Kafka's message, then the delayed close."""
    _answer(
        session, header, ErrorCode.sasl_authentication_failed, error_message=message, auth_bytes=b""
    )
    _fail(session, state, message)


def _ms(milliseconds: int) -> i64Timedelta:
    """SaslAuthenticate v1+ `session_lifetime_ms` (kio's field `session_lifetime`)."""
    return i64Timedelta.parse(timedelta(milliseconds=milliseconds))


def _lifetime(state: SaslState) -> int:
    if state.handshake_version == 0:
        return 0  # the v0 flow has no way to tell the client about a lifetime
    expiry = state.server.credential_expiration_ms()
    return session_lifetime_ms(expiry, state.config.max_reauth_ms or None, state.config.clock_ms())


def _succeeded(session: ProxySession, state: SaslState, lifetime: int = 0) -> None:
    first = state.principal is None
    state.principal = state.server.authorization_id
    state.expires_at_ms = state.config.clock_ms() + lifetime if lifetime else None
    if first:
        session.set_max_frame(session.config.max_frame)
        session.set_handlers(state.config.handlers_after, state.config.versions_after)
        state.config.on_authenticated(session, state.principal)


def _fail(session: ProxySession, state: SaslState, message: str) -> None:
    session.auth_failed = True  # before the close, which may happen at once: it picks the delay
    session.close_after_flush(f"SASL authentication failed ({state.mechanism}): {message}")
