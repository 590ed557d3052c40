"""The proxy's own OAuth access token for clusters that only accept OAUTHBEARER: the client
credentials grant (RFC 6749 §4.4) against a token endpoint, as Kafka's client-side
ClientCredentialsJwtRetriever asks for it (HTTP Basic client id and secret, `grant_type` and an
optional `scope` in the form body).

The token is cached and fetched again once `refresh_window_factor` (Kafka's
sasl.login.refresh.window.factor, 0.8) of its lifetime has passed: the next upstream login
after that point waits for the new token; if the endpoint fails then, the current token is
used while it is still valid (logged), and the endpoint is not asked again before a backoff
(0.1 s doubling up to 10 s, Kafka's sasl.login.retry.backoff.ms defaults), so a dead IdP does
not slow every new connection down. Its lifetime is the JWT's `exp` (from `iat`, or from when
it was received), or `expires_in` for a token that is not a JWT. The client secret is read
from its file at every fetch: a rotated secret is used without a restart.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard
from urllib.parse import urlencode

from aclgate.files import file_signature
from aclgate.proxy.httpclient import HttpError, https_context, request

__all__ = ["ClientCredentialsToken", "SecretFile", "TokenEndpointError"]

log = logging.getLogger("aclgate.oauth")

RETRY_BACKOFF, RETRY_BACKOFF_MAX = 0.1, 10.0


class TokenEndpointError(ConnectionError):
    """No usable token: the upstream login cannot happen (like an unreachable cluster)."""


class SecretFile:
    """A password or client secret: the first line of a file, re-read when the file changes
    (a rotated credential is used by the next login); an unreadable file keeps the last."""

    def __init__(self, path: Path | str, what: str = "secret file"):
        self.path = Path(path)
        self.what = what
        self._stamp: tuple[int, ...] | None = None
        self._value = ""
        self.current()
        if not self._value:
            raise ValueError(f"{what} {self.path} is empty")

    def current(self) -> str:
        try:
            stamp = file_signature(self.path)
            if stamp != self._stamp:
                lines = self.path.read_text().splitlines()
                value = lines[0] if lines else ""
                if not value:
                    raise ValueError("its first line is empty")
                if self._stamp is not None:
                    log.info(
                        "%s %s changed: the next login uses the new value", self.what, self.path
                    )
                self._stamp, self._value = stamp, value
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            if self._stamp is None and not self._value:
                raise ValueError(f"{self.what} {self.path}: {exc}") from None
            log.error(
                "%s %s not re-read, keeping the previous value: %s", self.what, self.path, exc
            )
            self._stamp = None  # try again at the next login
        return self._value


@dataclass(frozen=True)
class AccessToken:
    value: str
    expires_at: float  # clock seconds
    refresh_at: float


class ClientCredentialsToken:
    """Tokens from a token endpoint; `await token()` is one that is valid now."""

    def __init__(
        self,
        url: str,
        client_id: str,
        secret: SecretFile,
        *,
        scope: str | None = None,
        ssl_context: Any = None,
        timeout: float = 10.0,
        refresh_window_factor: float = 0.8,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.client_id = client_id
        self.secret = secret
        self.scope = scope
        self._ssl = ssl_context if ssl_context is not None else https_context()
        self.timeout = timeout
        self.factor = refresh_window_factor
        self._clock = clock
        self._monotonic = monotonic
        self._token: AccessToken | None = None
        self._inflight: asyncio.Task[AccessToken] | None = None
        self._failures = 0
        self._retry_at = -math.inf  # monotonic: no fetch before this after a failure
        self._last_error: str | None = None
        self.fetches = 0  # successful ones

    async def token(self) -> str:
        """A token valid now: the cached one until its refresh point, then a new one (the
        cached one while the endpoint fails and it is still valid). TokenEndpointError if
        there is none."""
        cached, now = self._token, self._clock()
        if cached is not None and now < cached.refresh_at:
            return cached.value
        valid = cached if cached is not None and now < cached.expires_at else None
        if self._monotonic() < self._retry_at:  # the endpoint failed a moment ago
            if valid is not None:
                return valid.value
            raise TokenEndpointError(f"no OAuth token: {self._last_error}")
        if self._inflight is None:
            task = asyncio.get_running_loop().create_task(self._fetch_once())
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved
            self._inflight = task
        try:
            return (await asyncio.shield(self._inflight)).value
        except TokenEndpointError:
            if valid is not None and self._clock() < valid.expires_at:
                return valid.value
            raise

    async def _fetch_once(self) -> AccessToken:
        try:
            token = await self._fetch()
        except TokenEndpointError as exc:
            self._failures += 1
            delay = min(RETRY_BACKOFF * 2 ** (self._failures - 1), RETRY_BACKOFF_MAX)
            self._retry_at = self._monotonic() + delay
            self._last_error = str(exc)
            cached = self._token
            if cached is not None and self._clock() < cached.expires_at:
                log.warning(
                    "OAuth token refresh failed, using the current token for its last %.0f s: %s",
                    cached.expires_at - self._clock(),
                    exc,
                )
            else:
                log.error("no OAuth token for the upstream login: %s", exc)
            raise
        finally:
            self._inflight = None
        self._failures, self._token = 0, token
        self.fetches += 1
        log.info(
            "OAuth token from %s for client %s, valid for %.0f s (renewed after %.0f s)",
            self.url,
            self.client_id,
            token.expires_at - self._clock(),
            token.refresh_at - self._clock(),
        )
        return token

    async def _fetch(self) -> AccessToken:
        try:
            secret = self.secret.current()
        except ValueError as exc:
            raise TokenEndpointError(str(exc)) from None
        form = {"grant_type": "client_credentials"}
        if self.scope:
            form["scope"] = self.scope
        basic = base64.b64encode(f"{self.client_id}:{secret}".encode()).decode()
        received = self._clock()
        try:
            answer = await request(
                self.url,
                method="POST",
                body=urlencode(form).encode(),
                headers={
                    "Authorization": f"Basic {basic}",
                    "Content-Type": "application/x-www-form-urlencoded",
                    "Cache-Control": "no-cache",
                },
                ssl_context=self._ssl,
                timeout=self.timeout,
            )
            doc = answer.json()
        except HttpError as exc:
            raise TokenEndpointError(f"token endpoint {self.url}: {exc}") from None
        if answer.status != 200 or not isinstance(doc, dict):
            detail = ""
            if isinstance(doc, dict) and "error" in doc:
                detail = f": {doc.get('error')} {doc.get('error_description') or ''}".rstrip()
            raise TokenEndpointError(
                f"token endpoint {self.url} answered HTTP {answer.status}{detail}"
            )
        value = doc.get("access_token")
        if not isinstance(value, str) or not value or any(c.isspace() for c in value):
            raise TokenEndpointError(f"token endpoint {self.url}: no access_token in the answer")
        issued, expires = _lifetime(value, doc.get("expires_in"), received)
        if expires is None:
            raise TokenEndpointError(
                f"token endpoint {self.url}: the token has no lifetime (no exp claim, no "
                "expires_in)"
            )
        if expires <= received:
            raise TokenEndpointError(f"token endpoint {self.url}: the token is already expired")
        start = min(max(issued, received - 60), received)  # a skewed iat cannot move it ahead
        return AccessToken(value, expires, start + self.factor * (expires - start))


def _lifetime(token: str, expires_in: Any, received: float) -> tuple[float, float | None]:
    """(issued at, expires at) in clock seconds: the JWT's iat/exp, else expires_in."""
    parts = token.split(".")
    if len(parts) == 3:
        try:
            claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        except (ValueError, binascii.Error, RecursionError):
            claims = None
        if isinstance(claims, dict):
            exp, iat = claims.get("exp"), claims.get("iat")
            if _number(exp):
                return (float(iat) if _number(iat) else received), float(exp)
    if _number(expires_in) and expires_in > 0:
        return received, received + float(expires_in)
    return received, None


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
