"""Glue between asyncio transports and the sans-IO ProxySession of one client connection."""

from __future__ import annotations

import asyncio
import functools
import logging
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any, Protocol, assert_never

from aclgate.protocol.bounds import bounded
from aclgate.protocol.effects import (
    BUSY,
    AclChangeRefused,
    AskCluster,
    Authenticated,
    AuthenticationResult,
    AutoCreateTopics,
    AwaitKeySet,
    DroppedApiKeys,
    Effect,
    ListTopicNames,
    LookUpGroups,
    LookUpPartitionCounts,
    LookUpTopicIds,
    NextTurn,
    RunBlocking,
    Sleep,
    StoreAclChange,
)
from aclgate.protocol.enforce.context import AuthContext
from aclgate.protocol.identity import directory, saslgate
from aclgate.protocol.identity.certgroups import CertificateGroupsError
from aclgate.protocol.identity.groups import NO_GROUPS, TooManyGroupsError
from aclgate.protocol.identity.hosts import java_host_string
from aclgate.protocol.identity.principal import (
    ANONYMOUS,
    groups_for_connection,
    principal_for_connection,
)
from aclgate.protocol.identity.proxyproto import (
    NeedMore,
    ProxyProtocolError,
    has_proxy_signature,
    is_trusted,
    parse_proxy_header,
)
from aclgate.protocol.identity.sslmapping import NoMatchingRule
from aclgate.protocol.session import ProxySession
from aclgate.proxy.listen.splice import Splicer
from aclgate.proxy.ops.logs import log_safe
from aclgate.proxy.upstream.connector import set_nodelay
from aclgate.proxy.upstream.reauth import UpstreamReauthenticator

if TYPE_CHECKING:
    import uuid
    from collections.abc import Callable

    from aclgate.protocol.effects import AclStoreFailure, StoreAclChange, TopicNames
    from aclgate.protocol.enforce.context import Policy
    from aclgate.protocol.identity.saslgate import SaslListenerConfig
    from aclgate.protocol.session import SessionConfig
    from aclgate.proxy.ops.metrics import ProxyMetrics
    from aclgate.proxy.ops.ratelimit import RateLimitedLog
    from aclgate.proxy.security.listener import ListenerSecurity
    from aclgate.proxy.upstream.connector import UpstreamConnector


class ConnectionHost(Protocol):
    """What a client connection uses of the server that accepted it (proxy/listen/server.py
    `ProxyServer`): the listener's shared state, and the IO the session's effects need."""

    security: ListenerSecurity
    metrics: ProxyMetrics
    policy: Policy
    session_config: SessionConfig
    sasl_config: SaslListenerConfig | None
    connector: UpstreamConnector
    log_limiter: RateLimitedLog
    #: the least opaque bytes of an answer relayed with splice(2) (0: never; proxy/listen/splice.py)
    splice_min_bytes: int

    def log_refusal(self, key: str, message: str, level: int = ..., logger: str = ...) -> None: ...
    def connection_opened(
        self, conn: ClientConnection, address: str | None
    ) -> tuple[str, str] | None: ...
    def connection_closed(self, conn: ClientConnection) -> None: ...
    async def upstream_candidates(self, node_id: int | None) -> list[tuple[str, int]]: ...
    def upstream_unreachable(self, why: str) -> None: ...
    def lookup_topic_ids(
        self, ids: frozenset[uuid.UUID], done: Callable[[dict[uuid.UUID, str]], None]
    ) -> None: ...
    def lookup_partition_counts(
        self, names: frozenset[str], done: Callable[[dict[str, int] | None], None]
    ) -> None: ...
    def list_topic_names(
        self, max_age: float, done: Callable[[TopicNames | None], None]
    ) -> None: ...
    def ask_cluster(self, request: Any, expected: type, done: Callable[[Any], None]) -> None: ...
    def change_acls(
        self,
        change: StoreAclChange,
        ctx: AuthContext,
        done: Callable[[AclStoreFailure | None], None],
    ) -> None: ...
    def acl_change_refused(self, refused: AclChangeRefused, ctx: AuthContext) -> None: ...
    def auto_create_topics(self, names: frozenset[str]) -> None: ...
    def look_up_groups(
        self, user: str, done: Callable[[frozenset[str]], None], subscriber: ClientConnection
    ) -> None: ...
    def forget_groups(self, user: str, subscriber: ClientConnection) -> None: ...
    @property
    def directory_groups(self) -> bool: ...  # --ldap-url: sessions wait for LDAP groups
    def next_turn(self, then: Callable[[], None]) -> None: ...
    def log_dropped_keys(self, keys: frozenset[int]) -> None: ...


log = logging.getLogger("aclgate.connection")

#: the most characters of a close reason in the log (client input in it is cut shorter where
#: it enters, e.g. protocol/identity/saslgate.py): a backstop for every reason
REASON_LIMIT = 1000
#: kinds whose reason may be longer: an internal error's carries the traceback
REASON_LIMITS = {"internal_error": 16_000}


def peer_string(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    if not peer:
        return "?"
    return f"[{peer[0]}]:{peer[1]}" if ":" in peer[0] else f"{peer[0]}:{peer[1]}"


class UpstreamProtocol(asyncio.Protocol):
    """The broker side of one client connection."""

    def __init__(self, conn: ClientConnection):
        self.conn = conn
        #: renews the proxy's SASL login when the cluster limits its lifetime (KIP-368)
        self.reauth: UpstreamReauthenticator | None = None

    def data_received(self, data: bytes) -> None:
        self.conn.activity += 1
        reauth = self.reauth
        session = self.conn.session
        assert session is not None  # a connection without a session never opens upstream
        if reauth is not None and reauth.active:  # the broker's answers to our own login
            reauth.feed(data)
            return
        metrics = self.conn.server.metrics
        metrics.step_responses.clear()  # metrics.begin_step, inlined: once per read
        started = perf_counter_ns()
        session.upstream_data(data)
        metrics.responses_done(started)
        left = session.stream_left  # a large answer still coming: relay it in the kernel?
        if left and left >= self.conn.server.splice_min_bytes > 0:
            self.conn.splice_opaque()
        if reauth is not None and reauth.due:
            reauth.maybe_start()

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.upstream_lost(exc)

    def pause_writing(self) -> None:  # the broker is not keeping up: stop reading the client
        self.conn.pause_client("upstream-backpressure")

    def resume_writing(self) -> None:
        self.conn.resume_client("upstream-backpressure")


class ClientConnection(asyncio.Protocol):
    """One client connection: owns its upstream connection and its session."""

    def __init__(
        self,
        server: ConnectionHost,
        listener: str,
        node_id: int | None,
        proxied_source: tuple[str, int] | None = None,
        pre_accepted: bool = False,
    ):
        self.server = server
        #: the client address from a PROXY header read before TLS (proxy/listen/accept.py)
        self.proxied_source = proxied_source
        #: the PROXY protocol was already handled at accept time
        self.pre_accepted = pre_accepted
        self.listener = listener
        self.node_id = node_id
        self.transport: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.session: ProxySession | None = None
        self.peer = "?"
        self.closed = False
        self._pause_reasons: set[str] = set()
        self._connect_task: asyncio.Task | None = None
        #: requests the session forwarded before the upstream connection was up
        self._early: list[bytes] = []
        #: False after a protocol violation: then nothing more goes upstream
        self._deliver_early = True
        #: bytes of a PROXY protocol header still being collected (None: not expected)
        self._proxy_header: bytearray | None = None
        self._first_data = True
        self._reauth: UpstreamReauthenticator | None = None
        #: the address this connection counts against in max_connections_per_ip
        self.counted_address: str | None = None
        #: reads from either side so far; the server's timeout sweep compares it between
        #: passes (an increment is all the hot path pays for idle detection)
        self.activity = 0
        #: the sweep's bookkeeping: the activity it last saw, and since when it is unchanged
        self.seen_activity = -1
        self.quiet_since = 0.0
        self.opened_at = 0.0
        #: relays large answers' opaque bytes in the kernel (made on first use; plain TCP
        #: on both sides only)
        self._splicer: Splicer | None = None
        #: the user whose groups from the directory (LDAP) this connection's session has
        self._groups_user: str | None = None

    # asyncio.Protocol (client side) ------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        # SessionIO.write_client, from now on the transport's own method: every answer the
        # session writes reaches it without a Python frame of ours (write_client below)
        self.write_client = transport.write  # type: ignore[attr-defined,method-assign]
        self.opened_at = self.quiet_since = asyncio.get_running_loop().time()
        set_nodelay(transport)
        self.peer = peer_string(transport)
        security = self.server.security
        refused = self.server.connection_opened(self, self._limited_address(transport))
        if refused is not None:
            self.session = None
            self._refuse(*refused)
            return
        try:
            principal = self._tls_principal()
        except NoMatchingRule as exc:
            self.session = None
            self.close(
                f"no ssl.principal.mapping.rules rule matches the client certificate ({exc})",
                "tls_principal",
            )
            return
        try:
            groups = self._tls_groups()
        except (TooManyGroupsError, CertificateGroupsError) as exc:
            self.session = None  # fail closed: never a session without some of its groups
            self.close(f"the client certificate's groups: {exc}", "tls_principal")
            return
        if principal != ANONYMOUS:  # an mTLS principal: --max-connections-per-principal
            over = security.admit_principal(self, principal)
            if over is not None:
                self.session = None
                self._refuse("connection_limit", over)
                return
        self.session = ProxySession(
            self.server.session_config, self, self.server.metrics, self.context(principal, groups)
        )
        peer = transport.get_extra_info("peername")
        if self.pre_accepted:
            self._first_data = False
            if self.proxied_source is not None:
                self.session.set_client_host(java_host_string(self.proxied_source[0]))
                self.peer = f"{self.proxied_source[0]}:{self.proxied_source[1]} (via {self.peer})"
        elif security.trusted_proxies and peer and is_trusted(peer[0], security.trusted_proxies):
            self._proxy_header = bytearray()
        if principal != ANONYMOUS and self.server.directory_groups:  # mTLS: its LDAP groups
            directory.look_up(self.session, principal.removeprefix("User:"))
        if security.sasl:
            sasl_config = self.server.sasl_config
            assert sasl_config is not None  # the server builds it for SASL listeners
            saslgate.install(self.session, sasl_config)
        # No upstream connection yet: it opens when the first request must be forwarded
        # (write_upstream), so silent or unauthenticated clients never reach the cluster.

    def _refuse(self, kind: str, reason: str) -> None:
        """A connection over a limit: closed at once, counted, logged at most every 10 s per
        kind (a connection flood must not become a log flood)."""
        self.server.metrics.errors.labels(kind).inc()
        self.server.log_refusal(kind, f"refused connection from {self.peer}: {reason}")
        self._shut()

    def check_timeouts(self, now: float, idle: float, setup: float, partial: float) -> None:
        """Called by the server's sweep about every second (proxy.listen.server)."""
        if self.closed or self.session is None:
            return
        if self.activity != self.seen_activity:
            self.seen_activity = self.activity
            self.quiet_since = now
            return
        quiet = now - self.quiet_since
        session = self.session
        sasl = session.state(saslgate.SaslState)
        if (self._proxy_header is not None or (sasl is not None and not sasl.authenticated)) and (
            now - self.opened_at >= setup
        ):
            what = "send its PROXY header" if self._proxy_header is not None else "authenticate"
            self._expire("authentication", f"did not {what} within {setup * 1000:.0f} ms")
        elif session.partial_request and quiet >= partial:
            self._expire(
                "partial_request",
                f"sent part of a request, then nothing for {partial * 1000:.0f} ms",
            )
        elif quiet >= idle and not session.in_flight and self._connect_task_done():
            self._expire("idle", f"idle for {idle * 1000:.0f} ms (connections_max_idle_ms)")

    def _connect_task_done(self) -> bool:
        return self._connect_task is None or self._connect_task.done()

    def _expire(self, kind: str, reason: str) -> None:
        self.server.metrics.connection_timeouts.labels(kind).inc()
        level = logging.DEBUG if kind == "idle" else logging.INFO
        if log.isEnabledFor(level):
            self.server.log_refusal(
                f"timeout-{kind}", f"closing connection from {self.peer}: {reason}", level
            )
        self._shut()

    def _shut(self) -> None:
        """Close both sides now; the caller has logged and counted why."""
        self.closed = True
        if self.transport is not None:
            # (a failed authentication waited connection.failed.authentication.delay.ms
            # before its answer, in protocol/identity/saslgate.py: the close follows the answer)
            self.transport.close()
        self._teardown()  # marks the session closed too

    @property
    def listener_label(self) -> str:
        """The `listener` label of the connection metrics: "bootstrap" or "broker"."""
        return self.listener if self.node_id is None else "broker"

    def _limited_address(self, transport: asyncio.BaseTransport) -> str | None:
        """The client address for max_connections_per_ip: the PROXY header's source when it
        was read before TLS; None for a trusted PROXY sender whose header comes later (its
        own address is a load balancer's, shared by many clients)."""
        if self.pre_accepted:
            return self.proxied_source[0] if self.proxied_source is not None else None
        peer = transport.get_extra_info("peername")
        if not peer:
            return None
        trusted = self.server.security.trusted_proxies
        if trusted and is_trusted(peer[0], trusted):
            return None
        return peer[0]

    def _tls_principal(self) -> str:
        """`User:ANONYMOUS`, or on an SSL listener the mapped client certificate subject."""
        security = self.server.security
        if security.protocol != "SSL":
            return ANONYMOUS
        from aclgate.proxy.security.tls import peer_certificate

        assert self.transport is not None  # called from connection_made
        cert = peer_certificate(self.transport.get_extra_info("ssl_object"))
        return principal_for_connection(security.protocol, cert, security.mapper)

    def _tls_groups(self) -> frozenset[str]:
        """On an SSL listener with certificate group settings, the client certificate's groups
        (--ssl-group-from, --ssl-group-mapping-rules); raises past the bounds."""
        security = self.server.security
        if security.protocol != "SSL" or security.group_mapper is None:
            return NO_GROUPS
        from aclgate.proxy.security.tls import peer_certificate

        assert self.transport is not None  # called from connection_made
        cert = peer_certificate(self.transport.get_extra_info("ssl_object"))
        return groups_for_connection(security.protocol, cert, security.group_mapper)

    def context(self, principal: str, groups: frozenset[str] = NO_GROUPS) -> AuthContext:
        """Who this connection is: the principal (and its certificate groups) come from the
        connection, never a request."""
        peer = self.transport.get_extra_info("peername") if self.transport else None
        host = java_host_string(peer[0]) if peer else "unknown"
        return AuthContext(
            self.server.policy, principal, host, self.server.security.protocol, groups
        )

    def perform(self, token: int, effect: Effect) -> None:
        """SessionIO: carry out what the session asks for (protocol/effects.py) and resume it
        with the result; notifications (token 0) are acted on and not resumed."""
        session = self.session
        server = self.server
        if session is None:
            return
        match effect:
            case LookUpTopicIds(ids=ids):
                server.lookup_topic_ids(ids, functools.partial(session.resume, token))
            case LookUpPartitionCounts(names=names):
                server.lookup_partition_counts(names, lambda found: session.resume(token, found))
            case ListTopicNames(max_age=max_age):
                server.list_topic_names(max_age, functools.partial(session.resume, token))
            case AskCluster(request=request, answer=expected):
                server.ask_cluster(request, expected, functools.partial(session.resume, token))
            case RunBlocking(function=function, args=args, source=source):
                done = functools.partial(session.resume, token)
                job = functools.partial(function, *args)
                if not server.security.run_blocking(job, done, source):
                    session.resume(token, BUSY)
            case Sleep(seconds=seconds):
                asyncio.get_running_loop().call_later(seconds, session.resume, token, None)
            case NextTurn():
                server.next_turn(functools.partial(session.resume, token))
            case AwaitKeySet():
                server.security.when_keys_fetched(lambda: session.resume(token))
            case LookUpGroups(user=user):
                # kept in step with the directory afterwards (directory_groups_changed)
                self._groups_user = user
                server.look_up_groups(user, functools.partial(session.resume, token), self)
            case StoreAclChange():
                # durable in the ACL store and in force here before the client is answered
                server.change_acls(
                    effect, session.context, functools.partial(session.resume, token)
                )
            case AclChangeRefused():
                server.acl_change_refused(effect, session.context)
            case Authenticated(principal=principal):
                # the upstream connection opens with the first request that needs it
                log.debug("client %s authenticated as %s", self.peer, log_safe(principal))
            case AuthenticationResult(mechanism=mechanism, succeeded=succeeded):
                server.security.count_authentication(self.listener_label, mechanism, succeeded)
            case AutoCreateTopics(names=names):
                server.auto_create_topics(names)
            case DroppedApiKeys(keys=keys):
                server.log_dropped_keys(keys)
            case _:  # every effect is handled: a new one fails mypy here until it is
                assert_never(effect)

    def directory_groups_changed(self, names: frozenset[str]) -> None:
        """The directory's answer for this session's user changed, or went past
        --ldap-max-stale (none): the session's groups follow (proxy/security/ldapgroups.py)."""
        if self.session is not None and not self.closed:
            directory.update(self.session, names)

    def data_received(self, data: bytes) -> None:
        self.activity += 1
        if self._pause_reasons:  # data while paused: re-assert the pause (see _sync_reading)
            self._sync_reading()
        if self._first_data:
            self._first_data = False
            if self._proxy_header is None and has_proxy_signature(data):
                self.close(
                    "PROXY protocol header from a peer that is not trusted to send one",
                    "proxy_protocol",
                )
                return
        if self._proxy_header is not None:
            data = self._take_proxy_header(data)
            if not data:
                return
        session = self.session
        assert session is not None  # a refused connection is closed before it reads
        metrics = self.server.metrics
        metrics.step_requests.clear()  # metrics.begin_step, inlined: once per read
        started = perf_counter_ns()
        session.client_data(data)
        metrics.requests_done(started)

    def _take_proxy_header(self, data: bytes) -> bytes:
        """Collect and apply the PROXY header; returns the Kafka bytes that follow it."""
        collected = self._proxy_header
        assert collected is not None  # called only while a header is expected
        collected += data
        try:
            header = parse_proxy_header(collected)
        except ProxyProtocolError as exc:
            self.close(f"bad PROXY protocol header: {exc}", "proxy_protocol")
            return b""
        if isinstance(header, NeedMore):
            return b""
        rest = bytes(collected[header.consumed :])
        self._proxy_header = None
        assert self.transport is not None and self.session is not None  # as in data_received
        peer = self.transport.get_extra_info("peername")
        source = header.effective_source(peer)
        self.session.set_client_host(java_host_string(source[0]))
        self.peer = f"{source[0]}:{source[1]} (via {self.peer})"
        return rest

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.closed = True
            log.debug("client %s disconnected", self.peer)
            self._teardown()
        # The session (and an upstream re-authenticator) point back at this connection: a
        # reference cycle, freed only by the cyclic GC, which tune_gc() makes rare. Until
        # then a closed TLS connection keeps ~250 KB of C memory (uvloop's read buffer,
        # OpenSSL's state); hundreds of them pile up between collections and fragment the
        # heap for good (docs/bench.md, Connection churn). Broken here, everything of the
        # connection is freed the moment uvloop lets go of it.
        self.session = None
        self._reauth = None

    # zero-copy relay (proxy/listen/splice.py) -------------------------------------------

    def splice_opaque(self) -> None:
        """The session relays a large answer: move the part it need not see from the broker's
        socket to the client's in the kernel, when both are plain TCP and nothing is still
        queued for the client ahead of those bytes."""
        session, transport, upstream = self.session, self.transport, self.upstream
        if session is None or transport is None or upstream is None or self.closed:
            return
        splicer = self._splicer
        if splicer is None:
            splicer = self._splicer = self._new_splicer(transport, upstream, session)
        if (
            not splicer.usable
            or splicer.active
            or transport.get_write_buffer_size()
            or session.opaque_ahead() < self.server.splice_min_bytes
        ):
            return
        upstream.pause_reading()
        if not splicer.start():
            upstream.resume_reading()

    def _new_splicer(
        self, transport: asyncio.Transport, upstream: asyncio.Transport, session: ProxySession
    ) -> Splicer:
        sockets = [t.get_extra_info("socket") for t in (upstream, transport)]
        splicer = Splicer(
            asyncio.get_running_loop(),
            self,
            session,
            sockets[0].fileno() if sockets[0] is not None else -1,
            sockets[1].fileno() if sockets[1] is not None else -1,
        )
        plain = all(
            s is not None and t.get_extra_info("sslcontext") is None
            for s, t in zip(sockets, (upstream, transport), strict=True)
        )
        if not plain:  # TLS on a side: the bytes must go through user space
            splicer.usable = False
        return splicer

    def splice_done(self) -> None:
        upstream = self.upstream
        if (
            upstream is not None
            and not upstream.is_closing()
            and "client-backpressure" not in self._pause_reasons
        ):
            upstream.resume_reading()

    def splice_failed(self, reason: str, kind: str | None) -> None:
        self.close(reason, kind)

    def splice_progress(self, n: int) -> None:
        self.activity += 1
        self.server.metrics.spliced_bytes.inc(n)

    def pause_writing(self) -> None:
        """The client is not reading its answers: stop reading the broker's answers and the
        client's requests, so what is owed to it stays within the write buffer's high-water
        mark (answers the proxy makes itself included)."""
        if self.upstream is not None:
            self.upstream.pause_reading()
        self.pause_client("client-backpressure")
        if self.session is not None:
            self.session.client_writable(False)

    def resume_writing(self) -> None:
        splicing = self._splicer is not None and self._splicer.active
        if self.upstream is not None and not self.upstream.is_closing() and not splicing:
            self.upstream.resume_reading()
        if self.session is not None:
            self.session.client_writable(True)
        self.resume_client("client-backpressure")

    # upstream --------------------------------------------------------------------

    async def _connect_upstream(self) -> None:
        errors = []
        opened: tuple[asyncio.Transport, UpstreamProtocol, int] | None = None
        try:
            for host, port in await self.server.upstream_candidates(self.node_id):
                try:
                    opened = await self.server.connector.open(
                        host, port, lambda: UpstreamProtocol(self)
                    )
                    break
                except (OSError, TimeoutError) as exc:
                    self.server.metrics.upstream_connect_failures.inc()
                    errors.append(f"{host}:{port}: {exc!r}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            errors.append(repr(exc))
        if opened is None:
            what = "a bootstrap server" if self.node_id is None else f"broker {self.node_id}"
            why = f"cannot reach {what} upstream: {'; '.join(errors)}"
            if self.node_id is None:
                self.server.upstream_unreachable(why)
            self.close(why, "upstream_unreachable")
            return
        transport, protocol, lifetime_ms = opened
        if self.closed:
            # closed while connecting (e.g. an acks=0 denial): what the client sent before
            # the close still reaches the broker, as it would have on a direct connection
            if self._early:
                transport.write(b"".join(self._early))
                self._early.clear()
            transport.close()
            return
        self.upstream = transport
        self.write_upstream = transport.write  # type: ignore[method-assign]  # as write_client
        if lifetime_ms:
            self._reauth = protocol.reauth = UpstreamReauthenticator(self, transport)
            self._reauth.schedule(lifetime_ms)
        if self._early:
            transport.write(b"".join(self._early))
            self._early.clear()
        self.resume_client("connecting")

    def upstream_lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        pending = self.session.in_flight if self.session else 0
        if pending:
            self.close(
                f"upstream broker closed the connection with {pending} request(s) in flight"
                + (f" ({exc!r})" if exc else ""),
                "upstream_closed",
            )
        else:
            self.close("upstream broker closed the connection", None)

    # SessionIO ---------------------------------------------------------------------

    # Both are replaced, per connection, by the transport's own `write` once it exists
    # (connection_made, _connect_upstream): what is left here runs only before that.

    def write_client(self, data: bytes | memoryview) -> None:
        transport = self.transport
        assert transport is not None  # the session exists only after connection_made
        transport.write(data)

    def write_upstream(self, data: bytes | memoryview) -> None:
        if self.upstream is None:  # not connected yet: the first request opens the connection
            self._early.append(bytes(data))
            if self._connect_task is None and not self.closed:
                self.pause_client("connecting")
                self._connect_task = asyncio.ensure_future(self._connect_upstream())
        else:
            self.upstream.write(data)

    def close(self, reason: str, kind: str | None) -> None:
        if self.closed:
            return
        self.closed = True
        if self.session is not None and self.session.auth_failed:
            kind = "authentication_failed"
        if kind is not None:
            self._deliver_early = False
            self.server.metrics.errors.labels(kind).inc()
        # One line per kind every 10 s (a flood of bad connections must not become a log
        # flood); the reason may carry client input (names, SASL text): cut to a bound and
        # escaped, so it can neither fill the disk nor forge lines.
        self.server.log_limiter.log(
            log,
            logging.INFO if kind is None else logging.WARNING,
            kind or "closed",
            "closing connection from %s: %s",
            self.peer,
            log_safe(bounded(reason, REASON_LIMITS.get(kind or "", REASON_LIMIT))),
        )
        self._shut()

    def stop_accepting(self) -> None:
        """Graceful shutdown: no new requests; responses in flight still reach the client."""
        self.pause_client("shutdown")
        if self.session is not None:
            self.session.stop_accepting()

    @property
    def idle(self) -> bool:
        """Nothing owed to the client (or nothing more will be)."""
        return self.closed or self.session is None or not self.session.in_flight

    def pause_client_reading(self) -> None:
        self.pause_client("in-flight")

    def resume_client_reading(self) -> None:
        self.resume_client("in-flight")

    # helpers ---------------------------------------------------------------------

    def pause_client(self, reason: str) -> None:
        self._pause_reasons.add(reason)
        self._sync_reading()

    def resume_client(self, reason: str) -> None:
        self._pause_reasons.discard(reason)
        self._sync_reading()

    def _sync_reading(self) -> None:
        """Make the transport read exactly when no pause reason is left.

        Compared with the transport's own state rather than remembered: uvloop ignores
        pause_reading() until connection_made has returned (it starts reading after it), and
        a pause believed in but not applied lets a client pipeline without limit."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self._pause_reasons:
            if transport.is_reading():
                transport.pause_reading()
        elif not transport.is_reading():
            transport.resume_reading()

    def _teardown(self) -> None:
        connecting = self._connect_task
        if (
            connecting is not None
            and not connecting.done()
            and not (self._early and self._deliver_early)
        ):
            connecting.cancel()  # nothing the broker must still get: give up
        if self._reauth is not None:
            self._reauth.cancel()
        if self._splicer is not None:
            self._splicer.close()
        if self.upstream is not None:
            self.upstream.close()
        if self.session is not None:
            self.session.connection_lost()
        self.server.security.release_principal(self)  # SASL or mTLS, if it was counted
        if self._groups_user is not None:
            self.server.forget_groups(self._groups_user, self)
        self.server.connection_closed(self)
