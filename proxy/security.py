"""Listener and upstream security built from the configuration: TLS contexts, the SASL
listener settings, the mTLS principal mapper, PROXY protocol trust, and the proxy's own
login to the cluster."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.principal import SslPrincipalMapper
from protocol.proxyproto import parse_trusted_cidrs
from protocol.sasl import Jwks, JwtValidator, create_server
from protocol.sasl.client import SaslClient, create_client
from proxy.config import ConfigError, ProxyConfig
from proxy.tls import ReloadingTlsContext, TlsConfigError, build_client_context
from proxy.usersfile import Users, UsersFileError, load_users

log = logging.getLogger("aclgate.security")


class ReloadingUsers:
    """The users file, re-read when it changes (checked at each new SASL exchange)."""

    def __init__(self, path: Path):
        self.path = path
        self._stamp: tuple | None = None
        self._users: Users = self._load()

    def _load(self) -> Users:
        st = os.stat(self.path)
        users = load_users(self.path)
        self._stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        return users

    def current(self) -> Users:
        try:
            st = os.stat(self.path)
            if (st.st_ino, st.st_size, st.st_mtime_ns) != self._stamp:
                self._users = self._load()
                log.info("reloaded users file %s (%d users)", self.path, len(self._users.names()))
        except (OSError, UsersFileError) as exc:
            log.error("users file %s not reloaded, keeping the previous users: %s", self.path, exc)
        return self._users

    def credentials_for(self, user: str, mechanism: str):
        return self.current().credentials_for(user, mechanism)


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
    executor: ThreadPoolExecutor | None

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

    def run_blocking(self, fn, done) -> None:
        """Run fn in the worker pool; call done(result) back on the event loop."""
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self.executor, fn)
        future.add_done_callback(lambda f: done(f.result()))


def build_listener_security(config: ProxyConfig) -> ListenerSecurity:
    protocol = config.listener_security_protocol
    try:
        tls = None
        if protocol in ("SSL", "SASL_SSL"):
            tls = ReloadingTlsContext(
                config.ssl_certfile, config.ssl_keyfile, config.ssl_cafile, config.ssl_client_auth
            )
        mapper = (
            SslPrincipalMapper.from_rules(config.ssl_principal_mapping_rules)
            if protocol == "SSL"
            else None
        )
        users = (
            ReloadingUsers(config.users_file)
            if config.users_file and protocol.startswith("SASL")
            else None
        )
        oauth = None
        if protocol.startswith("SASL") and "OAUTHBEARER" in config.sasl_mechanism_list:
            oauth = JwtValidator(
                Jwks.from_json(Path(config.sasl_oauthbearer_jwks_file).read_text()),
                expected_audiences=config.sasl_oauthbearer_expected_audience or None,
                expected_issuer=config.sasl_oauthbearer_expected_issuer,
                clock_skew_seconds=config.sasl_oauthbearer_clock_skew_seconds,
                principal_claim=config.sasl_oauthbearer_sub_claim_name,
            )
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
        executor=ThreadPoolExecutor(max_workers=2, thread_name_prefix="aclgate-sasl")
        if users
        else None,
    )


@dataclass
class UpstreamSecurity:
    protocol: str
    ssl_context: ssl.SSLContext | None
    mechanism: str | None
    username: str | None
    password: str | None

    def sasl_client(self) -> SaslClient | None:
        if not self.protocol.startswith("SASL"):
            return None
        return create_client(self.mechanism, self.username, self.password)


def build_upstream_security(config: ProxyConfig) -> UpstreamSecurity:
    protocol = config.upstream_security_protocol
    try:
        ctx = None
        if protocol in ("SSL", "SASL_SSL"):
            ctx = build_client_context(
                config.upstream_ssl_cafile,
                config.upstream_ssl_certfile,
                config.upstream_ssl_keyfile,
                check_hostname=config.upstream_ssl_check_hostname,
            )
        password = None
        if protocol.startswith("SASL"):
            password = Path(config.upstream_sasl_password_file).read_text().splitlines()[0]
    except (TlsConfigError, OSError, IndexError) as exc:
        raise ConfigError(f"upstream security: {exc}") from exc
    return UpstreamSecurity(
        protocol, ctx, config.upstream_sasl_mechanism, config.upstream_sasl_username, password
    )
