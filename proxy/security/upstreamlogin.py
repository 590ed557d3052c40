"""The proxy's own side of its connections to the cluster: TLS, and the SASL login with
PLAIN, SCRAM or OAUTHBEARER. Everything here follows its files while the proxy runs, as the
listener's certificates do (proxy/security/tls.py): a changed CA, client certificate or key file, a
rotated password or OAuth client secret, is used by the next upstream connection; a broken
new file keeps the previous one in service, with an ERROR in the log. Connections already
open keep what they were opened with.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable
from pathlib import Path

from aclgate.protocol.identity.sasl.client import OAuthBearerSaslClient, SaslClient, create_client
from aclgate.proxy.config import ConfigError, ProxyConfig
from aclgate.proxy.httpclient import https_context
from aclgate.proxy.security.oauthtoken import ClientCredentialsToken, SecretFile
from aclgate.proxy.security.tls import FileFollowingContext, TlsConfigError, build_client_context

__all__ = ["ReloadingClientContext", "UpstreamSecurity", "build_upstream_security"]

log = logging.getLogger("aclgate.upstream")


class ReloadingClientContext(FileFollowingContext):
    """The upstream TLS client context, rebuilt when its CA, certificate or key file changes
    (checked at most every `check_interval` seconds, when a connection is opened)."""

    def __init__(
        self,
        cafile: Path | None,
        certfile: Path | None,
        keyfile: Path | None,
        *,
        check_hostname: bool = True,
        check_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        files = (cafile, certfile, keyfile)
        super().__init__(
            files,
            lambda: build_client_context(cafile, certfile, keyfile, check_hostname=check_hostname),
            failed="upstream TLS files not reloaded, keeping the previous ones",
            reloaded="upstream TLS files reloaded ("
            + ", ".join(str(f) for f in files if f is not None)
            + ")",
            check_interval=check_interval,
            clock=clock,
        )


class UpstreamSecurity:
    """What UpstreamConnector (proxy/upstream/connector.py) needs for each new upstream connection."""

    def __init__(
        self,
        protocol: str,
        tls: ReloadingClientContext | None = None,
        mechanism: str | None = None,
        username: str | None = None,
        password: SecretFile | None = None,
        token: ClientCredentialsToken | None = None,
    ) -> None:
        self.protocol = protocol
        self.tls = tls
        self.mechanism = mechanism
        self.username = username
        self.password = password
        self.token = token

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        return self.tls.current() if self.tls is not None else None

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL")

    async def new_sasl_client(self) -> SaslClient | None:
        """A client for one login with the current credentials (None: no SASL upstream).
        OAUTHBEARER may wait for a token; proxy.security.oauthtoken.TokenEndpointError (a
        ConnectionError, like an unreachable cluster) if there is none."""
        if not self.sasl:
            return None
        if self.mechanism == "OAUTHBEARER":
            assert self.token is not None
            return OAuthBearerSaslClient(await self.token.token())
        assert self.mechanism is not None  # ProxyConfig.validate: SASL needs a mechanism
        assert self.password is not None and self.username is not None
        return create_client(self.mechanism, self.username, self.password.current())


def build_upstream_security(config: ProxyConfig) -> UpstreamSecurity:
    protocol = config.upstream_security_protocol
    try:
        tls = None
        if protocol in ("SSL", "SASL_SSL"):
            tls = ReloadingClientContext(
                config.upstream_ssl_cafile,
                config.upstream_ssl_certfile,
                config.upstream_ssl_keyfile,
                check_hostname=config.upstream_ssl_check_hostname,
            )
        password = token = None
        if protocol.startswith("SASL") and config.upstream_sasl_mechanism == "OAUTHBEARER":
            url = config.upstream_sasl_oauthbearer_token_endpoint_url
            client_id = config.upstream_sasl_oauthbearer_client_id
            secret_file = config.upstream_sasl_oauthbearer_client_secret_file
            # ProxyConfig.validate requires all three for an OAUTHBEARER upstream
            assert url is not None and client_id is not None and secret_file is not None
            token = ClientCredentialsToken(
                url,
                client_id,
                SecretFile(secret_file, "client secret file"),
                scope=config.upstream_sasl_oauthbearer_scope,
                ssl_context=https_context(config.upstream_sasl_oauthbearer_ssl_cafile),
                timeout=config.connect_timeout,
                refresh_window_factor=config.upstream_sasl_login_refresh_window_factor,
            )
        elif protocol.startswith("SASL"):
            password_file = config.upstream_sasl_password_file
            assert password_file is not None  # ProxyConfig.validate requires it for SASL
            password = SecretFile(password_file, "password file")
    except (TlsConfigError, OSError, ValueError, ssl.SSLError) as exc:
        raise ConfigError(f"upstream security: {exc}") from exc
    return UpstreamSecurity(
        protocol,
        tls,
        config.upstream_sasl_mechanism,
        config.upstream_sasl_username,
        password,
        token,
    )
