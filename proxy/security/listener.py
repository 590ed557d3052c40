"""Listener and upstream security built from the configuration: TLS contexts, the SASL
listener settings, the mTLS principal mapper, PROXY protocol trust, and the proxy's own
login to the cluster. Also the defences around authentication: the password-hashing pool,
the per-principal connection limit, authentication metrics, and the accounting of failed TLS
handshakes."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import Counter

from aclgate.files import file_signature
from aclgate.protocol.identity.certgroups import CertificateGroupMapper
from aclgate.protocol.identity.proxyproto import parse_trusted_cidrs
from aclgate.protocol.identity.sasl import JwtValidator, create_server
from aclgate.protocol.identity.sslmapping import SslPrincipalMapper
from aclgate.proxy.config import ConfigError, ProxyConfig
from aclgate.proxy.ops.ratelimit import RateLimitedLog
from aclgate.proxy.security.authpool import FairHashPool
from aclgate.proxy.security.jwks import build_oauth_validator
from aclgate.proxy.security.tls import (
    HANDSHAKE_TIMEOUT,
    ReloadingTlsContext,
    TlsConfigError,
    describe_handshake_error,
)
from aclgate.proxy.security.upstreamlogin import UpstreamSecurity, build_upstream_security
from aclgate.proxy.security.usersfile import Users, UsersFileError, load_users

# UpstreamSecurity and build_upstream_security live in proxy/security/upstreamlogin.py (they reload
# their files); imported here for the callers that know them from this module
__all__ = [
    "ListenerSecurity",
    "UpstreamSecurity",
    "build_listener_security",
    "build_upstream_security",
]

log = logging.getLogger("aclgate.security")


def _signature_or_none(path: Path) -> tuple[int, ...] | None:
    try:
        return file_signature(path)
    except OSError:
        return None


class ReloadingUsers:
    """The users file, re-read when it changes (checked at each new SASL exchange).

    A file that cannot be loaded (unreadable, corrupt, a SCRAM credential outside Kafka's
    iteration range) keeps the previous users in force and is logged and counted once per
    version on disk: retried at every exchange, each client connection would cost a parse of
    the whole file and an ERROR line."""

    def __init__(self, path: Path, metrics: AuthMetrics | None = None):
        self.path = path
        self._metrics = metrics or AuthMetrics()
        self._stamp: tuple[int, ...] | None = file_signature(path)
        self._users: Users = load_users(path)

    def current(self) -> Users:
        stamp = _signature_or_none(self.path)
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self._users = load_users(self.path)
            except UsersFileError as exc:
                self._metrics.users_file_load_errors.inc()
                log.error(
                    "users file %s not reloaded, keeping the previous users: %s", self.path, exc
                )
            else:
                self._metrics.users_file_reloads.inc()
                log.info("reloaded users file %s (%d users)", self.path, len(self._users))
        return self._users

    def credentials_for(self, user: str, mechanism: str):
        return self.current().credentials_for(user, mechanism)

    def groups_for(self, user: str) -> tuple[str, ...]:
        """The user's groups in the version `credentials_for` just checked (or a newer one:
        a reload applies to every authentication after it)."""
        return self._users.groups_for(user)


class AuthMetrics:
    """Authentication counters (Kafka has failed-/successful-authentication-total)."""

    def __init__(self, metrics: Any = None):
        registry = metrics.registry if metrics is not None else None
        #: aclgate_errors_total of the proxy (None: a listener built without metrics)
        self.errors = metrics.errors if metrics is not None else None
        self.failures = Counter(
            "aclgate_authentication_failures",
            "Failed SASL authentications and re-authentications (bad credentials)",
            ["listener", "mechanism"],
            registry=registry,
        )
        self.successes = Counter(
            "aclgate_authentication_successes",
            "Successful SASL authentications and re-authentications",
            ["listener", "mechanism"],
            registry=registry,
        )
        self.users_file_reloads = Counter(
            "aclgate_users_file_reloads",
            "Users file changes loaded while serving",
            registry=registry,
        )
        self.users_file_load_errors = Counter(
            "aclgate_users_file_load_errors",
            "Users file changes refused (unreadable, corrupt, SCRAM iterations outside Kafka's "
            "4096-16384); the previous users stayed in force",
            registry=registry,
        )

    def error(self, kind: str) -> None:
        if self.errors is not None:
            self.errors.labels(kind).inc()


class PrincipalLimit:
    """--max-connections-per-principal: connections of one SASL or mTLS principal at most."""

    def __init__(self, limit: int):
        self.limit = limit
        self._counts: dict[str, int] = {}
        self._holders: dict[Any, str] = {}  # connection -> the principal it counts against

    def admit(self, holder: Any, principal: str) -> str | None:
        """Count `holder` against `principal`; the reason to refuse it when over the limit."""
        if not self.limit or holder in self._holders:
            return None
        count = self._counts.get(principal, 0)
        if count >= self.limit:
            return (
                f"too many connections for principal {principal} "
                f"(max_connections_per_principal {self.limit})"
            )
        self._counts[principal] = count + 1
        self._holders[holder] = principal
        return None

    def release(self, holder: Any) -> None:
        principal = self._holders.pop(holder, None)
        if principal is not None:
            left = self._counts[principal] - 1
            if left:
                self._counts[principal] = left
            else:
                del self._counts[principal]

    def count(self, principal: str) -> int:
        return self._counts.get(principal, 0)


@dataclass
class ListenerSecurity:
    protocol: str
    tls: ReloadingTlsContext | None
    mapper: SslPrincipalMapper | None
    sasl_mechanisms: tuple[str, ...]
    users: ReloadingUsers | None
    oauth: JwtValidator | None
    trusted_proxies: tuple[Any, ...]
    failed_auth_delay: float
    max_reauth_ms: int
    #: PLAIN password hashing, bounded and fair by source address (proxy/security/authpool.py)
    pool: FairHashPool | None = None
    metrics: AuthMetrics = field(default_factory=AuthMetrics)
    principals: PrincipalLimit = field(default_factory=lambda: PrincipalLimit(0))
    #: seconds a TLS handshake may take before the socket is closed
    tls_handshake_timeout: float = HANDSHAKE_TIMEOUT
    #: the proxy's rate limit of repeated log lines (ProxyServer shares its own)
    log_limiter: RateLimitedLog = field(default_factory=RateLimitedLog)
    #: an SSL listener's certificate groups (--ssl-group-from, --ssl-group-mapping-rules)
    group_mapper: CertificateGroupMapper | None = None

    @property
    def executor(self) -> ThreadPoolExecutor | None:
        return self.pool.executor if self.pool is not None else None

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL")

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        return self.tls.front_context() if self.tls is not None else None

    def new_sasl_server(self, mechanism: str):
        return create_server(
            mechanism,
            credentials=self.users,
            oauth_validator=self.oauth,
            clock_ms=lambda: int(time.time() * 1000),
        )

    def when_keys_fetched(self, callback: Callable[[], None]) -> None:
        """`callback` once the OAUTHBEARER key set fetch under way has ended (at once if
        there is none, or no key source that fetches)."""
        source = self.oauth.source if self.oauth is not None else None
        if source is None:
            asyncio.get_running_loop().call_soon(callback)
        else:
            source.when_fetched(callback)

    def run_blocking(
        self, fn: Callable[[], Any], done: Callable[[Any], None], source: str | None = None
    ) -> bool:
        """Run fn in the hashing pool, fairly by source address; done(result) is called back
        on the event loop. False: the pool's queues are full. Without a pool (no users file),
        in a thread of the loop's default executor: a job sent off the loop (a DescribeAcls
        answer of 200,000 ACLs) must not run on it."""
        if self.pool is None:
            future = asyncio.get_running_loop().run_in_executor(None, fn)
            future.add_done_callback(lambda f: done(f.exception() or f.result()))
            return True
        return self.pool.submit(source, fn, done)

    def sasl_settings(self) -> dict[str, Any]:
        """The SaslListenerConfig fields for the authentication defences."""
        return {
            "failure_delay_ms": round(self.failed_auth_delay * 1000),
            "admit": lambda session, principal: self.admit_principal(session.io, principal),
        }

    def count_authentication(self, listener: str, mechanism: str, ok: bool) -> None:
        (self.metrics.successes if ok else self.metrics.failures).labels(listener, mechanism).inc()

    def admit_principal(self, connection: Any, principal: str) -> str | None:
        """Count a SASL or mTLS connection against its principal (release it with
        `release_principal`); the reason to refuse it, if it is over the limit."""
        return self.principals.admit(connection, principal)

    def release_principal(self, connection: Any) -> None:
        self.principals.release(connection)

    def tls_handshake_failed(self, peer: str, exc: BaseException) -> None:
        """A client's TLS handshake failed or timed out: logged (rate limited), then counted,
        so whoever sees the count can find the line (the tests read both from another thread)."""
        self.log_limiter.log(
            logging.getLogger("aclgate.tls"),
            logging.WARNING,
            "tls_handshake",
            "TLS handshake with %s failed, connection closed: %s",
            peer,
            describe_handshake_error(exc),
        )
        self.metrics.error("tls_handshake")


def build_listener_security(config: ProxyConfig, metrics: Any = None) -> ListenerSecurity:
    """`metrics`: the proxy's ProxyMetrics, where the authentication counters register."""
    protocol = config.listener_security_protocol
    auth_metrics = AuthMetrics(metrics)
    try:
        tls = None
        if protocol in ("SSL", "SASL_SSL"):
            certfile, keyfile = config.ssl_certfile, config.ssl_keyfile
            assert certfile is not None and keyfile is not None  # ProxyConfig.validate
            tls = ReloadingTlsContext(certfile, keyfile, config.ssl_cafile, config.ssl_client_auth)
        mapper = (
            SslPrincipalMapper.from_rules(config.ssl_principal_mapping_rules)
            if protocol == "SSL"
            else None
        )
        group_mapper = (
            CertificateGroupMapper.from_settings(
                config.ssl_group_mapping_rules, config.ssl_group_from
            )
            if protocol == "SSL"
            else None
        )
        users = (
            ReloadingUsers(config.users_file, auth_metrics)
            if config.users_file and protocol.startswith("SASL")
            else None
        )
        oauth = None
        if protocol.startswith("SASL") and "OAUTHBEARER" in config.sasl_mechanism_list:
            # a JWKS file, or a JWKS / OIDC discovery URL fetched at start (proxy/security/jwks.py)
            oauth = build_oauth_validator(config, metrics)
        trusted = (
            parse_trusted_cidrs(config.proxy_protocol_trusted) if config.proxy_protocol else ()
        )
    except (TlsConfigError, UsersFileError, ValueError, OSError) as exc:
        raise ConfigError(f"listener security: {exc}") from exc
    return ListenerSecurity(
        protocol=protocol,
        tls=tls,
        mapper=mapper,
        sasl_mechanisms=config.sasl_mechanism_list if protocol.startswith("SASL") else (),
        users=users,
        oauth=oauth,
        trusted_proxies=trusted,
        failed_auth_delay=config.connection_failed_authentication_delay_ms / 1000,
        max_reauth_ms=config.connections_max_reauth_ms,
        pool=FairHashPool() if users else None,
        metrics=auth_metrics,
        principals=PrincipalLimit(config.max_connections_per_principal),
        group_mapper=group_mapper,
    )
