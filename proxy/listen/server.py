"""The proxy: a bootstrap listener, one listener per upstream broker, health and metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import ResourceType
from aclgate.native import describe as hot_path
from aclgate.protocol.apiversions import unsupported_version_response
from aclgate.protocol.bounds import bounded
from aclgate.protocol.effects import AclChangeRefused, AclStoreFailure, StoreAclChange, TopicNames
from aclgate.protocol.enforce.context import AuthContext, Policy
from aclgate.protocol.enforce.cursor import KEY_SIZE, CursorSeal
from aclgate.protocol.enforce.table import (
    advertised_versions,
    handlers,
    local_versions,
    request_limits,
)
from aclgate.protocol.identity.saslgate import SaslListenerConfig
from aclgate.protocol.session import RequestHandler, SessionConfig
from aclgate.protocol.versions import KIO_RANGES, api_name, request_class, response_class
from aclgate.proxy.aclstore.backend import AclBackend, AclStoreError, unready_reason
from aclgate.proxy.aclstore.backends import open_acl_backend, protected_topics
from aclgate.proxy.aclstore.filewatch import AclFileError, AclFileWatcher
from aclgate.proxy.audit.decisions import DecisionRecorder
from aclgate.proxy.audit.dryrunfile import DryRunSettings
from aclgate.proxy.audit.kafka import KafkaAuditSink, topic_settings
from aclgate.proxy.audit.log import AuditLog
from aclgate.proxy.config import ConfigError, ProxyConfig
from aclgate.proxy.listen import splice
from aclgate.proxy.listen.connection import REASON_LIMIT, ClientConnection
from aclgate.proxy.listen.fdlimit import connection_budget, open_fd_count, raise_open_files_limit
from aclgate.proxy.ops.http import HealthServer
from aclgate.proxy.ops.logs import log_safe
from aclgate.proxy.ops.metrics import ProxyMetrics, StateCollector
from aclgate.proxy.ops.ratelimit import RateLimitedLog, TokenBuckets
from aclgate.proxy.security.jwks import start_jwks
from aclgate.proxy.security.ldapgroups import LdapGroups, LdapSettings
from aclgate.proxy.security.listener import build_listener_security, build_upstream_security
from aclgate.proxy.upstream.connector import ControlClient, UpstreamConnector, UpstreamUnavailable
from aclgate.proxy.upstream.directory import NodeDirectory

log = logging.getLogger("aclgate")

BOOTSTRAP = "bootstrap"
# how long close() waits for cancelled background tasks to end
TASK_STOP_TIMEOUT = 5.0


def listening_socket(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """A bound, listening, non-blocking socket; `reuse_port`: shared with the other workers
    (SO_REUSEPORT, proxy/process/workers.py), the kernel spreading connections over them."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def prewarm_kio() -> float:
    """Compile kio's native readers up front: about 2 ms per class on first use otherwise,
    which would land on the first client requests. Returns the seconds it took."""
    started = time.perf_counter()
    for key, (lo, hi) in KIO_RANGES.items():
        for version in range(lo, hi + 1):
            entity_reader(request_class(key, version))
            entity_reader(response_class(key, version))
    return time.perf_counter() - started


class ProxyServer:
    def __init__(self, config: ProxyConfig, metrics: ProxyMetrics | None = None):
        self.config = config
        self.metrics = metrics or ProxyMetrics()
        self.security = build_listener_security(config, self.metrics)
        self.connector = UpstreamConnector(config.connect_timeout, build_upstream_security(config))
        #: the proxy's own requests: the cluster check, topic-id lookups and partition
        #: counts, which the data path of every client waits for
        self.control = ControlClient(
            config.upstream, self.connector, timeout=config.connect_timeout
        )
        #: requests clients cause in bulk (all-topics listings for regex subscriptions,
        #: DescribeTopicPartitions pages and other AskCluster requests, auto-creation): on a
        #: connection of their own, so a client asking many of them queues behind its own
        #: kind, never in front of another client's topic-id lookup or the cluster check
        #: (one request at a time per connection, as a broker serves one per connection)
        self.bulk = ControlClient(
            config.upstream, self.connector, "aclgate-bulk", timeout=config.connect_timeout
        )
        self.connections: set[ClientConnection] = set()
        #: client address -> open connections (only with max_connections_per_ip)
        self._per_address: dict[str, int] = {}
        self.servers: list[asyncio.AbstractServer] = []
        self.health: HealthServer | None = None
        self.metrics_address: tuple[str, int] | None = None
        self.bootstrap_address: tuple[str, int] | None = None
        #: the last word on the cluster: a broker list from the periodic check, or a failure
        #: (of that check, or of every bootstrap server for a client connection)
        self.upstream_reachable = False
        self.upstream_error: str | None = "not contacted yet"
        self.metrics.upstream_reachable.set_function(lambda: self.upstream_reachable)
        self._upstream_check_now = asyncio.Event()
        #: client connections that fit in the open-files limit (0: unknown, not applied)
        self.fd_budget = 0
        self._creation_rate = (
            TokenBuckets(config.max_connection_creation_rate)
            if config.max_connection_creation_rate
            else None
        )
        #: the one rate limit of every repeated log line (closes, refusals, TLS failures)
        self.log_limiter = RateLimitedLog(
            on_held=lambda key: self.metrics.log_lines_suppressed.labels(key).inc()
        )
        self.security.log_limiter = self.log_limiter
        #: answers' opaque bytes go through the kernel past this size (proxy/listen/splice.py)
        self.splice_min_bytes = config.splice_min_bytes if splice.AVAILABLE else 0
        self._dropped_logged: set[int] = set()
        self._pending_listeners: list[asyncio.Task] = []
        self._tasks: list[asyncio.Task] = []
        #: the cluster's topics for regex subscriptions (list_topic_names), when listed,
        #: and the callers waiting for a listing under way
        self._topic_names: TopicNames | None = None
        self._topic_names_at = 0.0
        self._topic_names_waiting: list[Callable[[TopicNames | None], None]] | None = None
        self._raw_sockets: list[socket.socket] = []
        self.authorizer = Authorizer(
            config.super_user,
            config.allow_everyone_if_no_acl_found,
            # InitProducerId without a transactional id asks WRITE on any topic (KIP-679)
            prebuild_by_resource_type=(ResourceType.TOPIC,),
            # KIP-1276, opt-in: ACL hosts with / are networks (docs/authz.md)
            cidr_hosts=config.acl_host_cidr,
        )
        #: where the ACLs live (proxy/aclstore/backend.py); None: no ACL store, an empty policy
        self.acl_backend: AclBackend | None = open_acl_backend(config, self.authorizer)
        self.audit: AuditLog | None = None
        #: the audit topic's sink (proxy/audit/kafka.py), with --audit-topic
        self.audit_sink: KafkaAuditSink | None = None
        self.recorder = DecisionRecorder(self.metrics.hot.decisions, None)
        self.metrics.registry.register(
            StateCollector(
                self.authorizer,
                lambda: self.watcher,
                lambda: self.audit,
                lambda: self.acl_backend.status() if self.acl_backend is not None else None,
                lambda: self.audit_sink,
            )
        )
        self.policy = Policy(
            authorizer=self.authorizer,
            mode=config.mode,
            sink=self.recorder,
            # one key per process: a sealed cursor opens on every listener, not after a restart
            cursors=CursorSeal(os.urandom(KEY_SIZE)),
            acl_admin=self.acl_backend is not None,
            protected_topics=protected_topics(config),
            delete_acls_max_share=config.delete_acls_max_share,
        )
        self.dry_run = DryRunSettings(config, self.policy)  # proxy/audit/dryrunfile.py
        allowed = advertised_versions(config.api_version_cap)
        #: what the proxy answers itself (the ACL Admin API): advertised whatever the cluster serves
        local = local_versions(config.api_version_cap)
        #: what the proxy itself can serve; `allowed` is narrowed to the cluster's ranges
        self._own_versions = dict(allowed)
        #: the version maps the sessions read, narrowed in place, each with what the proxy
        #: adds to the cluster's ranges
        self._narrowed_maps: list[
            tuple[dict[int, tuple[int, int]], Mapping[int, tuple[int, int]]]
        ] = [(allowed, local)]
        self.directory = NodeDirectory(
            bind_host=config.listen[0],
            client_host=config.client_host,
            fixed_ports=config.node_port,
            port_range=config.broker_ports,
            open_listener=self._open_broker_listener,
            reserved={config.listen[1]},
            reuse_port=config.workers > 1,
        )
        self.session_config = SessionConfig(
            handlers=handlers(),
            allowed_versions=allowed,
            directory=self.directory,
            max_frame=config.max_frame_bytes,
            max_request_bytes=request_limits(config.max_request_bytes),
            max_in_flight=config.max_in_flight,
            own_api_versions=local,
            unsupported_api_versions=lambda corr: unsupported_version_response(
                corr, allowed[18][1]
            ),
        )
        ldap = LdapSettings.from_config(config)
        #: users' groups from the LDAP directory (--ldap-url; proxy/security/ldapgroups.py)
        self.ldap_groups: LdapGroups | None = None
        if ldap is not None:
            try:
                self.ldap_groups = LdapGroups(ldap, self.metrics.registry)
            except ValueError as exc:  # the bind password file is empty or unreadable
                raise ConfigError(f"ldap_bind_password_file: {exc}") from None
        self.sasl_config: SaslListenerConfig | None = None
        if self.security.sasl:
            self._configure_sasl(allowed, local)

    @property
    def watcher(self) -> AclFileWatcher | None:
        """The ACL file watcher of the `file` store (None with another store or none)."""
        return getattr(self.acl_backend, "watcher", None)

    def _configure_sasl(
        self, allowed: dict[int, tuple[int, int]], local: dict[int, tuple[int, int]]
    ) -> None:
        """SASL listeners: the pre-authentication gate, then the full table plus re-auth."""
        from aclgate.protocol.identity import saslgate

        after: dict[int, RequestHandler] = dict(handlers())
        after[saslgate.SASL_HANDSHAKE] = saslgate._handshake
        after[saslgate.SASL_AUTHENTICATE] = saslgate._authenticate
        own = {**local, **saslgate.SASL_VERSIONS}
        self.session_config.own_api_versions = own
        versions_after = {**allowed, **own}
        self._narrowed_maps.append((versions_after, own))
        self.sasl_config = saslgate.SaslListenerConfig(
            mechanisms=self.security.sasl_mechanisms,
            new_server=self.security.new_sasl_server,
            clock_ms=lambda: int(time.time() * 1000),
            max_reauth_ms=self.security.max_reauth_ms,
            **self.security.sasl_settings(),  # failed-authentication delay, per-principal limit
            pre_auth_versions=lambda: self._pre_auth_versions(allowed),
            handlers_after=after,
            versions_after=versions_after,
            directory_groups=self.directory_groups,
        )

    def _narrow_to_cluster(self) -> None:
        """Accept only the API versions the cluster serves too (as learnt on the control
        connection): a request the cluster never advertised is closed on, as Kafka closes,
        instead of being forwarded. Narrowed in place: every session reads these maps."""
        upstream = self.control.api_ranges
        if not upstream:
            return
        narrowed = {}
        for key, (lo, hi) in self._own_versions.items():
            if key not in upstream:
                continue
            up_lo, up_hi = upstream[key]
            lo, hi = max(lo, up_lo), min(hi, up_hi)
            if lo <= hi:
                narrowed[key] = (lo, hi)
        if narrowed == self.session_config.allowed_versions:
            return
        for versions, own in self._narrowed_maps:
            versions.clear()
            versions.update(narrowed)
            versions.update(own)

    def _pre_auth_versions(self, allowed: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
        """What ApiVersions announces before SASL: the proxy's ranges within the cluster's."""
        upstream = self.control.api_ranges
        out = {}
        for key, (lo, hi) in allowed.items():
            if upstream and key not in (self.session_config.own_api_versions or {}):
                if key not in upstream:
                    continue
                up_lo, up_hi = upstream[key]
                lo, hi = (up_lo if key == 0 else max(lo, up_lo)), min(hi, up_hi)
                if hi < lo:
                    continue
            out[key] = (lo, hi)
        return out

    # lifecycle ---------------------------------------------------------------------

    async def _load_policy(self) -> None:
        """ACLs are in force before the first client is accepted (Kafka's early-start rule)."""
        backend = self.acl_backend
        if backend is not None:
            watcher = self.watcher
            if watcher is not None and not watcher.path.exists():
                log.warning(
                    "ACL file %s does not exist yet: starting with an empty policy",
                    self.config.acl_file,
                )
            try:
                await backend.start()
            except AclStoreError as exc:
                if isinstance(exc.__cause__, AclFileError):
                    raise exc.__cause__ from None  # as before the backends: the file's error
                raise
        else:
            self.authorizer.load(())
            if not self.config.allow_everyone_if_no_acl_found:
                log.warning(
                    "no --acl-file: every request of a principal that is not a super user (%s) will be "
                    "denied; give --acl-file, or --allow-everyone-if-no-acl-found",
                    ", ".join(self.config.super_user) or "none configured",
                )
        if self.config.mode != "enforce":
            log.warning(
                "DRY-RUN mode: decisions are audited but NOT enforced; everything is forwarded"
            )

    async def start(self) -> None:
        if self.config.metrics_listen:
            # before the policy: a long ACL-topic replay answers /healthz 200 (alive) and
            # /readyz 503 with its progress, rather than refusing the probes
            self.health = HealthServer(self.metrics.registry, self.readiness)
            self.metrics_address = await self.health.start(*self.config.metrics_listen)
            log.info("metrics and health on http://%s:%d/metrics", *self.metrics_address)
        try:
            if self.config.early_start:
                # Kafka's early.start.listeners: served before the policy, super users only
                # (the authorizer answers everyone else not-ready until its first load)
                await self._start_serving()
                await self._load_policy()
            else:
                await self._load_policy()
                await self._start_serving()
        except BaseException:  # nothing of a proxy that did not start keeps listening
            for server in self.servers:
                server.close()
            for sock in self._raw_sockets:
                sock.close()
            if self.health is not None:
                await self.health.close()
                self.health = None
            raise

    async def _start_serving(self) -> None:
        """Everything after the policy: the client listeners, the audit trail, the tasks."""
        # OAUTHBEARER keys from a JWKS URL: fetched before the first client, then kept fresh
        self._tasks.extend(await start_jwks(self.security.oauth))  # proxy/security/jwks.py
        if self.ldap_groups is not None:  # probed (a failure is logged), then kept fresh
            self._tasks.append(await self.ldap_groups.start())
        log.info("pre-compiled kio readers in %.2fs", prewarm_kio())
        loop = asyncio.get_running_loop()
        self._start_fd_budget()
        host, port = self.config.listen
        if self._proxy_before_tls:
            sock = listening_socket(host, port, self.directory.reuse_port)
            self._accept_with_proxy_header(sock, BOOTSTRAP, None)
            self.bootstrap_address = sock.getsockname()[:2]
        elif self.security.tls is not None:
            sock = listening_socket(host, port, self.directory.reuse_port)
            self._accept_tls(sock, BOOTSTRAP, None)
            self.bootstrap_address = sock.getsockname()[:2]
        else:
            server = await loop.create_server(
                lambda: ClientConnection(self, BOOTSTRAP, None),
                host,
                port,
                reuse_address=True,
                reuse_port=self.directory.reuse_port,
                backlog=1024,
                ssl=self.security.ssl_context,
            )
            self.servers.append(server)
            self.bootstrap_address = server.sockets[0].getsockname()[:2]
        if self.config.audit_topic is not None:
            spool = self.config.audit_spool_dir
            assert spool is not None  # validated: --audit-spool or --audit-file
            self.audit_sink = KafkaAuditSink(topic_settings(self.config, spool))
        if self.config.audit_file is not None or self.audit_sink is not None:
            self.audit = AuditLog(
                self.config.audit_file,
                self.config.proxy_name or "{}:{}".format(*self.bootstrap_address),
                max_bytes=self.config.audit_max_bytes,
                keep=self.config.audit_keep,
                window=self.config.audit_window,
                sinks=[self.audit_sink] if self.audit_sink is not None else [],
                format=self.config.audit_format,
            )
            self.recorder.audit = self.audit
            self._tasks.append(loop.create_task(self._audit_ticker(self.audit)))
        # Reserve the actual bootstrap port (it may have been 0 = ephemeral).
        self.directory.reserved.add(self.bootstrap_address[1])
        self.directory.open_fixed()
        log.info(
            "listening on %s:%d for clients (%s%s), upstream %s (%s)",
            *self.bootstrap_address,
            self.security.protocol,
            f" {','.join(self.security.sasl_mechanisms)}" if self.security.sasl else "",
            ", ".join(f"{h}:{p}" for h, p in self.config.upstream),
            self.config.upstream_security_protocol,
        )
        log.info("running the %s", hot_path())
        await self.refresh_brokers(raise_errors=False)
        self._tasks.append(loop.create_task(self._upstream_checker()))
        self._tasks.append(loop.create_task(self._timeout_sweeper()))
        self._tasks.extend(self.dry_run.start())

    def _start_fd_budget(self) -> None:
        """Raise the open-files soft limit to the hard limit, then size the connection
        budget from it and the descriptors already in use (proxy.listen.fdlimit)."""
        before, limit = raise_open_files_limit()
        in_use = open_fd_count()
        self.fd_budget = connection_budget(limit, in_use)
        if self.fd_budget:
            log.info(
                "open-files limit %d%s (%d in use): room for about %d client connections",
                limit,
                f" (raised from {before})" if limit > before else "",
                in_use,
                self.fd_budget,
            )

    async def _upstream_checker(self) -> None:
        """Ask the cluster for its brokers every upstream_check_interval (sooner after a
        client found no broker reachable): keeps /readyz true to the cluster's state and
        learns brokers that joined."""
        interval = self.config.upstream_check_interval
        while True:
            # asyncio.timeout, never wait_for: on Python 3.11 wait_for loses a cancel that
            # arrives as the event is set (tests/proxy/test_shutdown_race.py)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._upstream_check_now.wait()
            self._upstream_check_now.clear()
            try:
                async with asyncio.timeout(self.config.connect_timeout * 2):
                    await self.refresh_brokers(raise_errors=False)
            except TimeoutError:
                self._upstream_failed("the broker check timed out")

    def _upstream_failed(self, why: str) -> None:
        if self.upstream_reachable:
            log.warning("upstream cluster unreachable: %s", why)
        self.upstream_reachable = False
        self.upstream_error = why

    def upstream_unreachable(self, why: str) -> None:
        """A client connection found no bootstrap server reachable: not ready until a check
        reaches the cluster again (started at once)."""
        self._upstream_failed(why)
        self._upstream_check_now.set()

    async def _timeout_sweeper(self) -> None:
        """Close connections that are idle, stuck before authentication, or stuck in the
        middle of a request (Kafka's connections.max.idle.ms and shorter limits)."""
        config = self.config
        limits = (
            config.connections_max_idle_ms / 1000,
            config.authentication_timeout_ms / 1000,
            config.partial_request_timeout_ms / 1000,
        )
        tick = min(1.0, max(0.02, min(limits) / 4))
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(tick)
            self._sweep(loop.time(), limits)
            self.recorder.follow_log_level()  # a log level changed at run time
            if self._creation_rate is not None and len(self._creation_rate) > 10_000:
                self._creation_rate.prune()

    def _sweep(self, now: float, limits: tuple[float, float, float]) -> None:
        """One pass of the sweeper, in its own frame: a loop variable in the sweeper's would
        keep the last connection swept (and its transport) alive after it closed, until a
        later pass found another one."""
        for conn in list(self.connections):
            conn.check_timeouts(now, *limits)

    async def _audit_ticker(self, audit: AuditLog) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.config.audit_window))
            audit.tick()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            # a task that swallows its cancel must not turn a SIGTERM into a hang: name it
            # and go on closing
            done, stuck = await asyncio.wait(self._tasks, timeout=TASK_STOP_TIMEOUT)
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    log.debug("background task %s had ended: %r", task.get_name(), task.exception())
            for task in stuck:
                log.error(
                    "shutdown: background task %s ignored its cancellation after %.0f s: %r",
                    task.get_name(),
                    TASK_STOP_TIMEOUT,
                    task.get_coro(),
                )
        for sock in self._raw_sockets:
            sock.close()
        if self.acl_backend is not None:
            await self.acl_backend.stop()
        for server in self.servers:
            server.close()
        await self._drain(self.config.shutdown_grace)
        for conn in list(self.connections):
            conn.close("proxy shutting down", None)
        for task in self._pending_listeners:
            task.cancel()
        for server in self.servers:
            await server.wait_closed()
        if self.health:
            await self.health.close()
        await self.control.close()
        await self.bulk.close()
        self.recorder.denial_log.flush()  # the last second's summary line
        self.log_limiter.flush()  # and the held-back lines' summaries
        if self.audit is not None:
            self.recorder.flush_audit()  # records still waiting for a turn (proxy/audit/decisions.py)
            self.audit.close()
        if self.security.executor is not None:
            self.security.executor.shutdown(wait=False)
        if self.ldap_groups is not None:
            self.ldap_groups.close()

    async def _drain(self, grace: float) -> None:
        """Let responses in flight reach their clients (up to `grace` seconds), closing each
        connection as soon as it owes nothing: a restart loses no answer the cluster gave."""
        connections = list(self.connections)
        for conn in connections:
            conn.stop_accepting()
        busy = sum(not c.idle for c in connections)
        if busy:
            log.info(
                "shutting down: waiting up to %.1f s for the answers owed on %d connection(s)",
                grace,
                busy,
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while connections:
            for conn in connections:
                if conn.idle:
                    conn.close("proxy shutting down", None)
            connections = [c for c in connections if not c.closed]
            if not connections:
                return
            if loop.time() >= deadline:
                log.warning(
                    "shutdown: %d connection(s) still waiting for the cluster after %.1f s; "
                    "closing them",
                    len(connections),
                    grace,
                )
                return
            await asyncio.sleep(0.02)

    async def serve_forever(self) -> None:
        await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.close()

    # upstream ----------------------------------------------------------------------

    async def refresh_brokers(self, raise_errors: bool = True) -> None:
        """Learn the cluster's brokers over the control connection (and bind their ports)."""
        try:
            metadata = await self.control.metadata(())
        except UpstreamUnavailable as exc:
            if self.upstream_reachable or self.upstream_error == "not contacted yet":
                log.warning("upstream cluster not reachable: %s", exc)
            self.upstream_reachable = False
            self.upstream_error = str(exc)
            if raise_errors:
                raise
            return
        for broker in metadata.brokers:
            self.directory.learn(broker.node_id, broker.host, broker.port)
            self.directory.advertise(broker.node_id)
        self._narrow_to_cluster()
        if not self.upstream_reachable and self.upstream_error != "not contacted yet":
            log.info("upstream cluster reachable again (%d brokers)", len(metadata.brokers))
        self.upstream_reachable = True
        self.upstream_error = None

    async def upstream_candidates(self, node_id: int | None) -> list[tuple[str, int]]:
        """Where a client connection to this listener may go, in the order to try.

        The bootstrap listener spreads connections over the bootstrap servers (rotating the
        start); a broker listener goes to that broker only.
        """
        if node_id is None:
            servers = self.config.upstream
            self._bootstrap_cursor = (self._bootstrap_cursor + 1) % len(servers)
            return servers[self._bootstrap_cursor :] + servers[: self._bootstrap_cursor]
        address = self.directory.upstream_address(node_id)
        if address is None:
            await self.refresh_brokers()
            address = self.directory.upstream_address(node_id)
        if address is None:
            raise UpstreamUnavailable(f"broker {node_id} is not in the upstream cluster's metadata")
        return [address]

    _bootstrap_cursor = -1

    # listeners and connections ------------------------------------------------------

    @property
    def _proxy_before_tls(self) -> bool:
        """TLS listeners behind a PROXY-protocol load balancer read the header before TLS."""
        return bool(self.security.tls and self.security.trusted_proxies)

    def _accept_with_proxy_header(
        self, sock: socket.socket, listener: str, node_id: int | None
    ) -> None:
        from aclgate.proxy.listen.accept import serve_with_proxy_header

        def refused(peer: str, why: str) -> None:
            self.metrics.errors.labels("proxy_protocol").inc()
            self.log_refusal("proxy_protocol", f"refused connection from {peer}: {why}")

        ssl_context = self.security.ssl_context
        assert ssl_context is not None  # headers before TLS: only on TLS listeners
        task = asyncio.get_running_loop().create_task(
            serve_with_proxy_header(
                sock,
                lambda source: ClientConnection(self, listener, node_id, source, pre_accepted=True),
                ssl_context,
                self.security.trusted_proxies,
                refused,
            )
        )
        self._tasks.append(task)
        self._raw_sockets.append(sock)

    def _open_broker_listener(self, node_id: int, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        listener = f"broker-{node_id}"
        if self._proxy_before_tls:
            self._accept_with_proxy_header(sock, listener, node_id)
            self.metrics.broker_listeners.inc()
            return
        if self.security.tls is not None:
            self._accept_tls(sock, listener, node_id)
            self.metrics.broker_listeners.inc()
            return

        async def serve() -> None:
            server = await loop.create_server(
                lambda: ClientConnection(self, listener, node_id),
                sock=sock,
                ssl=self.security.ssl_context,
            )
            self.servers.append(server)
            self.metrics.broker_listeners.inc()

        self._pending_listeners.append(loop.create_task(serve()))

    def _accept_tls(self, sock: socket.socket, listener: str, node_id: int | None) -> None:
        """TLS listeners accept their sockets themselves (proxy.security.tls.serve_tls): a failed or
        stalled handshake is then counted and logged, where uvloop's TLS server drops it
        without a word."""
        from aclgate.proxy.security.tls import serve_tls

        def accept_failed(exc: OSError) -> None:
            self.metrics.errors.labels("fd_limit").inc()
            self.log_refusal("fd_limit", f"cannot accept a connection on {listener}: {exc!r}")

        ssl_context = self.security.ssl_context
        assert ssl_context is not None  # called for TLS listeners only
        task = asyncio.get_running_loop().create_task(
            serve_tls(
                sock,
                lambda: ClientConnection(self, listener, node_id),
                ssl_context,
                handshake_timeout=lambda: self.security.tls_handshake_timeout,
                on_failed=self.security.tls_handshake_failed,
                on_accept_error=accept_failed,
            )
        )
        self._tasks.append(task)
        self._raw_sockets.append(sock)

    def log_refusal(
        self,
        key: str,
        message: str,
        level: int = logging.WARNING,
        logger: str = "aclgate.connection",
    ) -> None:
        """A line a client can cause again and again: through the rate limit, cut to a bound
        and escaped."""
        self.log_limiter.log(
            logging.getLogger(logger), level, key, "%s", log_safe(bounded(message, REASON_LIMIT))
        )

    def connection_opened(
        self, conn: ClientConnection, address: str | None
    ) -> tuple[str, str] | None:
        """Count a new connection from `address` (its client IP; None: not limited per
        address); returns (error kind, why) if a connection limit refuses it."""
        self.connections.add(conn)
        self.metrics.connections.labels(conn.listener_label).inc()
        self.metrics.connections_active.labels(conn.listener_label).inc()
        if self.fd_budget and len(self.connections) > self.fd_budget:
            return "fd_limit", (
                f"out of file descriptors: {self.fd_budget} connections fit in the open-files "
                "limit (raise `ulimit -n`)"
            )
        limit = self.config.max_connections
        if limit and len(self.connections) > limit:
            return "connection_limit", f"max_connections ({limit}) reached"
        rate = self._creation_rate
        if rate is not None and address is not None and not rate.take(address):
            return "connection_rate", (
                f"{address} opens connections faster than max_connection_creation_rate "
                f"({self.config.max_connection_creation_rate:g}/s)"
            )
        per_ip = self.config.max_connections_per_ip
        if per_ip and address is not None:
            conn.counted_address = address
            count = self._per_address[address] = self._per_address.get(address, 0) + 1
            if count > per_ip:
                return "connection_limit", (
                    f"{address} already has max_connections_per_ip ({per_ip}) connections"
                )
        return None

    def connection_closed(self, conn: ClientConnection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            self.metrics.connections_active.labels(conn.listener_label).dec()
            address = conn.counted_address
            if address is not None:
                left = self._per_address[address] - 1
                if left:
                    self._per_address[address] = left
                else:
                    del self._per_address[address]

    def log_dropped_keys(self, keys: frozenset[int]) -> None:
        new = keys - self._dropped_logged
        if new:
            self._dropped_logged |= new
            log.info(
                "not advertising upstream API keys the proxy does not serve: %s",
                ", ".join(f"{k} ({api_name(k)})" for k in sorted(new)),
            )
            for key in new:
                self.metrics.refused(key)

    # health ------------------------------------------------------------------------

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        details: dict[str, Any] = {
            "upstream_reachable": self.upstream_reachable,
            "upstream_error": self.upstream_error,
            "brokers": sorted(self.directory.proxy_ports),
            "connections": len(self.connections),
            "acls_loaded": self.authorizer.ready,
            "acl_count": self.authorizer.acl_count(),
            "policy_version": self.authorizer.version,
            "mode": self.config.mode,
            "dry_run": self.dry_run.describe(),
        }
        if self.watcher is not None:
            details["acl_file_error"] = self.watcher.last_error
        if self.audit_sink is not None:  # informs, never fails readiness (docs/audit.md)
            details["audit_sink"] = self.audit_sink.status()
        ldap_ready = True
        if self.ldap_groups is not None:  # unready once past --ldap-max-stale
            details["ldap"] = self.ldap_groups.status()
            ldap_ready = details["ldap"]["not_ready"] is None
        if self.acl_backend is not None:
            status = self.acl_backend.status()
            details["acl_store"] = {
                "backend": status.backend,
                "loaded": status.loaded,
                "applied_offset": status.applied_offset,
                "fingerprint": status.fingerprint,
                "error": status.error,
                "seconds_stale": status.seconds_stale,
                # why the store makes the proxy unready (loading, degraded, stale), or null
                "not_ready": unready_reason(status, self.config.acl_store_max_staleness_seconds),
            }
            if not status.loaded:
                details["acl_store"]["records_replayed"] = status.records_replayed
            if details["acl_store"]["not_ready"] is not None:
                return False, details
        return self.upstream_reachable and self.authorizer.ready and ldap_ready, details

    # ACL store ---------------------------------------------------------------------

    def change_acls(
        self,
        change: StoreAclChange,
        ctx: AuthContext,
        done: Callable[[AclStoreFailure | None], None],
    ) -> None:
        """Commit a StoreAclChange (CreateAcls, DeleteAcls) of the client `ctx` to the ACL
        store; audit and count it, then call `done(None)`, or `done(AclStoreFailure)` when it
        was not committed (nothing of it applied)."""

        async def commit() -> None:
            backend = self.acl_backend
            error: str | None = None
            try:
                if backend is None:
                    raise AclStoreError("no ACL store is configured")
                await backend.change(change.additions, change.removals)
            except AclStoreError as exc:
                error = str(exc)
                log.error("ACL change by %s not committed: %s", log_safe(ctx.principal), error)
            except Exception as exc:  # a bug of ours: the change failed, say so, fail closed
                error = f"{type(exc).__name__}: {exc}"
                log.exception("ACL change by %s failed", log_safe(ctx.principal))
            self._acl_changed(change, ctx, backend, error)
            done(None if error is None else AclStoreFailure(error))

        self._spawn(commit())

    def acl_change_refused(self, refused: AclChangeRefused, ctx: AuthContext) -> None:
        """The DeleteAcls guard refused a change: counted, logged and audited as a failed
        `acl_change` (nothing reached the store)."""
        log.warning(
            "ACL change by %s from %s refused: %s",
            log_safe(ctx.principal),
            ctx.host,
            refused.reason,
        )
        self._acl_changed(
            StoreAclChange(removals=refused.removals), ctx, self.acl_backend, refused.reason
        )

    def _acl_changed(
        self,
        change: StoreAclChange,
        ctx: AuthContext,
        backend: AclBackend | None,
        error: str | None,
    ) -> None:
        """Count, log and audit one change of the ACL Admin API."""
        self.metrics.acl_changes.labels("committed" if error is None else "failed").inc()
        if error is None:
            self.metrics.acl_changed.labels("added").inc(len(change.additions))
            self.metrics.acl_changed.labels("removed").inc(len(change.removals))
            log.info(
                "ACL change by %s from %s: %d added, %d removed",
                log_safe(ctx.principal),
                ctx.host,
                len(change.additions),
                len(change.removals),
            )
        if self.audit is not None:
            api_key = 30 if change.additions else 31
            self.audit.record_acl_change(
                ctx.listener,
                ctx.principal,
                ctx.host,
                ctx.client_id,
                api_name(api_key),
                api_key,
                getattr(backend, "name", None) or self.config.acl_store,
                change.additions,
                change.removals,
                error,
            )

    # groups from LDAP ----------------------------------------------------------------

    @property
    def directory_groups(self) -> bool:
        """Sessions wait for their user's groups from the directory (--ldap-url)."""
        return self.ldap_groups is not None

    def look_up_groups(
        self, user: str, done: Callable[[frozenset[str]], None], subscriber: ClientConnection
    ) -> None:
        """The LookUpGroups effect: `done(names)` later; `subscriber` follows the answers."""
        groups = self.ldap_groups
        if groups is None:  # asked only with --ldap-url; without it there are none
            asyncio.get_running_loop().call_soon(done, frozenset())
            return
        groups.look_up(user, done, subscriber)

    def forget_groups(self, user: str, subscriber: ClientConnection) -> None:
        if self.ldap_groups is not None:
            self.ldap_groups.forget(user, subscriber)

    def next_turn(self, then: Callable[[], None]) -> None:
        """The NextTurn effect: `then()` in a later turn, once the audit records already
        queued have been made (proxy/audit/decisions.py `when_caught_up`)."""
        self.recorder.when_caught_up(then)

    # topic ids ---------------------------------------------------------------------

    def lookup_topic_ids(self, ids, done: Callable[[dict[uuid.UUID, str]], None]) -> None:
        """Ask upstream which topics these ids are, feed the cache, then call `done` with
        {id: name} for those the cluster knows (none if it cannot be asked)."""

        async def lookup() -> None:
            found: dict[uuid.UUID, str] = {}
            try:
                version = self.control.version_for(3) if self.control.api_ranges else 0
                if version >= 12:
                    metadata = await self._metadata_by_ids(ids, version)
                else:
                    metadata = await self.control.metadata(None)
                for topic in metadata.topics:
                    topic_id = getattr(topic, "topic_id", None)
                    self.policy.topic_ids.learn(topic_id, topic.name)
                    if topic_id is not None and topic_id in ids and topic.name:
                        found[topic_id] = topic.name
            except Exception as exc:
                self.log_refusal(
                    "topic_id_lookup", f"topic id lookup failed: {exc!r}", logger=log.name
                )
            finally:
                done(found)

        self._spawn(lookup())

    def list_topic_names(self, max_age: float, done: Callable[[TopicNames | None], None]) -> None:
        """Every topic of the cluster (for regex subscriptions), listed at most `max_age`
        seconds ago: one list for all connections, one Metadata request at a time. On a
        failure the last list is kept (None before the first)."""
        loop = asyncio.get_running_loop()
        known = self._topic_names
        if known is not None and loop.time() - self._topic_names_at <= max_age:
            loop.call_soon(done, known)  # resumed later, as every wait is
            return
        if self._topic_names_waiting is not None:
            self._topic_names_waiting.append(done)
            return
        self._topic_names_waiting = [done]

        async def listing() -> None:
            try:
                metadata = await self.bulk.metadata(None)
                names = frozenset(t.name for t in metadata.topics if t.error_code == 0 and t.name)
                for topic in metadata.topics:
                    self.policy.topic_ids.learn(getattr(topic, "topic_id", None), topic.name)
                current = self._topic_names
                if current is None or current.names != names:
                    version = current.version + 1 if current is not None else 1
                    self._topic_names = TopicNames(version, names)
                self._topic_names_at = loop.time()
            except Exception as exc:
                self.log_refusal(
                    "topic_listing",
                    f"listing the cluster's topics failed: {exc!r}",
                    logger=log.name,
                )
            finally:
                waiting, self._topic_names_waiting = self._topic_names_waiting or [], None
                for resume in waiting:
                    resume(self._topic_names)

        self._spawn(listing())

    def ask_cluster(self, request: Any, expected: type, done: Callable[[Any], None]) -> None:
        """Send one request as the proxy itself on the bulk control connection (AskCluster):
        `done` gets the answer, or None when it failed or is not an `expected`."""

        async def ask() -> None:
            answer = None
            try:
                answer = await self.bulk.request(request)
            except Exception as exc:
                self.log_refusal(
                    "ask_cluster",
                    f"api_key={request.__api_key__} on the bulk control connection failed: {exc!r}",
                    logger=log.name,
                )
            done(answer if isinstance(answer, expected) else None)

        self._spawn(ask())

    def _spawn(self, coro) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(coro))
        self._tasks = [t for t in self._tasks if not t.done()]

    def lookup_partition_counts(self, names, done) -> None:
        """Ask upstream which of these topics exist and with how many partitions."""

        async def lookup() -> None:
            counts: dict[str, int] | None = None
            try:
                metadata = await self.control.metadata(sorted(names))
                counts = {t.name: len(t.partitions) for t in metadata.topics if t.error_code == 0}
            except Exception as exc:
                self.log_refusal(
                    "partition_lookup", f"partition lookup failed: {exc!r}", logger=log.name
                )
            done(counts)

        self._spawn(lookup())

    def auto_create_topics(self, names) -> None:
        """Have the cluster auto-create `names` (the principal may CREATE them; see
        protocol.enforce.metadata): the client learns of them on its next Metadata."""

        async def create() -> None:
            try:
                answer = await self.bulk.metadata(sorted(names), auto_create=True)
            except Exception as exc:
                self.log_refusal(
                    "auto_create_failed",
                    f"auto-creation of {', '.join(sorted(names))} failed: {exc!r}",
                    logger=log.name,
                )
                return
            # a KRaft broker answers 3 (being created) or 5; anything else is a refusal, e.g.
            # 29 when the cluster does not let the proxy's own identity create topics
            refused = {
                t.name: ErrorCode(t.error_code).name
                for t in answer.topics
                if t.error_code not in (0, 3, 5)
            }
            # one line per kind every 10 s: a client asking for many new names cannot flood
            if refused:
                self.log_refusal(
                    "auto_create_refused",
                    f"the cluster refused to auto-create: {refused}",
                    logger=log.name,
                )
            else:
                self.log_refusal(
                    "auto_create",
                    f"asked the cluster to auto-create {', '.join(sorted(names))}",
                    logging.INFO,
                    log.name,
                )

        self._spawn(create())

    async def _metadata_by_ids(self, ids, version: int):
        from aclgate.protocol.versions import request_class, request_module

        cls = request_class(3, version)
        mod = request_module(3, version)
        topics = tuple(mod.MetadataRequestTopic(topic_id=i, name=None) for i in ids)
        return await self.control.request(
            cls(
                topics=topics,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
