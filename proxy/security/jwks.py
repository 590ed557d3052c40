"""OAUTHBEARER verification keys from the identity provider's JWKS URL, as Kafka's
RefreshingHttpsJwksVerificationKeyResolver keeps them (sasl.oauthbearer.jwks.endpoint.*).

* Fetched at start, before the first client is accepted; a start that cannot fetch them
  (retried with backoff for up to `retry_backoff_max`) fails, as Kafka's broker does.
* Fetched again every `refresh` (sasl.oauthbearer.jwks.endpoint.refresh.ms, default 1 hour),
  and when a token names a key id the set lacks: the IdP rotated its keys. Such a refresh is
  started at most once per `retry_backoff_max` (10 s by default), so tokens with made-up key
  ids cannot make the proxy hammer the IdP; the login that named the key waits for the
  refresh (SaslPending, protocol/identity/saslgate.py parks it without blocking the event loop) and is
  decided with the keys it brought.
* A failed fetch (IdP down, an error status, not a JWKS, no usable key) keeps the last good
  key set in force: logged, counted in aclgate_jwks_refreshes_total{result="failure"}, and
  retried with backoff (retry_backoff doubling up to retry_backoff_max) until it succeeds.
* Optional OIDC discovery: the JWKS URL is the `jwks_uri` of the provider's
  .well-known/openid-configuration document (looked up again after a failed fetch).

Everything runs on the proxy's event loop (proxy/httpclient.py); the verifier in
protocol/identity/sasl/jwt.py sees only `current()` and `refresh_for(kid)`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aclgate.protocol.identity.sasl.jwt import Jwks, JwtValidator
from aclgate.protocol.identity.sasl.pending import SaslPending
from aclgate.proxy.httpclient import HttpError, check_https_url, https_context, request
from aclgate.proxy.ops.logs import log_safe
from aclgate.proxy.ops.metrics import JwksMetrics

__all__ = ["JwksCache", "JwksFetchError", "build_oauth_validator", "start_jwks"]

log = logging.getLogger("aclgate.jwks")


class JwksFetchError(ConnectionError):
    """The key set could not be fetched (at start: the proxy does not start)."""


class JwksCache:
    """The key set from a JWKS URL (or an OIDC discovery URL); a protocol.sasl.jwt.KeySource."""

    def __init__(
        self,
        url: str | None,
        *,
        discovery_url: str | None = None,
        ssl_context: Any = None,
        timeout: float = 10.0,
        refresh: float = 3600.0,
        retry_backoff: float = 0.1,
        retry_backoff_max: float = 10.0,
        metrics: JwksMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if url is None and discovery_url is None:
            raise ValueError("a JWKS URL or an OIDC discovery URL is needed")
        self.url = check_https_url(url, "the JWKS endpoint URL") if url else None
        self.discovery_url = (
            check_https_url(discovery_url, "the OIDC discovery URL") if discovery_url else None
        )
        self._jwks_url = self.url
        self._ssl = ssl_context if ssl_context is not None else https_context()
        self.timeout = timeout
        self.refresh_interval = refresh
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        self.metrics = metrics or JwksMetrics()
        self._clock = clock
        self._jwks = Jwks(())
        self._fetched_at: float | None = None
        self._failures = 0  # consecutive failed fetches
        self._inflight: asyncio.Task[bool] | None = None
        self._last_unknown_kid_refresh = -float("inf")

    # ---------------------------------------------------------------- KeySource

    def current(self) -> Jwks:
        return self._jwks

    def refresh_for(self, kid: str) -> SaslPending | None:
        """A token named `kid`, which the key set lacks: fetch again (unless one fetch for an
        unknown key id started less than retry_backoff_max ago) and let the login wait."""
        task = self._inflight
        if task is None:
            now = self._clock()
            if now - self._last_unknown_kid_refresh < self.retry_backoff_max:
                return None
            self._last_unknown_kid_refresh = now
            log.info(
                "a token names key id %r, which the JWKS lacks: fetching %s again",
                log_safe(kid[:100]),
                self._jwks_url or self.discovery_url,
            )
            task = self._start("unknown_kid")
        return SaslPending(f"fetching the JWKS again for key id {kid[:100]!r}")

    def when_fetched(self, callback: Callable[[], None]) -> None:
        task = self._inflight
        if task is None or task.done():
            asyncio.get_running_loop().call_soon(callback)
        else:
            task.add_done_callback(lambda _task: callback())

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """The first fetch, retried with backoff for up to retry_backoff_max; JwksFetchError
        if there is still no key set then (the proxy does not start without one)."""
        deadline = self._clock() + self.retry_backoff_max
        delay = self.retry_backoff
        while True:
            error = await self._fetch_and_apply("start")
            if error is None:
                return
            if self._clock() + delay > deadline:
                raise JwksFetchError(f"OAUTHBEARER keys unavailable: {error}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.retry_backoff_max)

    async def run(self) -> None:
        """Fetch every `refresh`; after a failure, again after a backoff until it works."""
        try:
            while True:
                if self._failures:
                    delay = min(
                        self.retry_backoff * 2 ** (self._failures - 1), self.retry_backoff_max
                    )
                    trigger = "retry"
                else:
                    delay, trigger = self.refresh_interval, "scheduled"
                await asyncio.sleep(delay)
                await self.refresh(trigger)
        finally:
            if self._inflight is not None:
                self._inflight.cancel()

    async def refresh(self, trigger: str = "scheduled") -> bool:
        """Fetch now (or join the fetch under way); True if a new key set is in force."""
        task = self._inflight or self._start(trigger)
        return await asyncio.shield(task)

    def _start(self, trigger: str) -> asyncio.Task[bool]:
        async def fetch() -> bool:
            try:
                return await self._fetch_and_apply(trigger) is None
            finally:
                self._inflight = None

        task = asyncio.get_running_loop().create_task(fetch())
        self._inflight = task
        return task

    # ---------------------------------------------------------------- fetching

    async def _fetch_and_apply(self, trigger: str) -> str | None:
        """One fetch; the reason it failed, or None when its keys are now in force."""
        try:
            jwks = await self._fetch()
        except (HttpError, ValueError) as exc:
            self._failures += 1
            self.metrics.refreshes.labels("failure", trigger).inc()
            if self.discovery_url and not self.url:
                self._jwks_url = None  # discover again: the provider may have moved it
            if self._fetched_at is not None:
                log.warning(
                    "JWKS fetch failed (%s), keeping the %d key(s) fetched %.0f s ago: %s",
                    trigger,
                    len(self._jwks.keys),
                    self._clock() - self._fetched_at,
                    exc,
                )
            else:
                log.warning("JWKS fetch failed (%s): %s", trigger, exc)
            return str(exc)
        before = self._jwks.kids()
        self._jwks, self._fetched_at, self._failures = jwks, self._clock(), 0
        self.metrics.refreshes.labels("success", trigger).inc()
        self.metrics.keys.set(len(jwks.keys))
        self.metrics.last_success.set(time.time())
        after = jwks.kids()
        if after != before or trigger == "start":
            log.info(
                "JWKS from %s: %d key(s) %s%s",
                self._jwks_url,
                len(jwks.keys),
                sorted(after),
                f" (added {sorted(after - before)}, removed {sorted(before - after)})"
                if trigger != "start"
                else "",
            )
        return None

    async def _fetch(self) -> Jwks:
        if self._jwks_url is None:
            self._jwks_url = await self._discover()
        answer = await request(self._jwks_url, ssl_context=self._ssl, timeout=self.timeout)
        if answer.status != 200:
            raise HttpError(f"GET {self._jwks_url}: HTTP {answer.status}")
        jwks = Jwks.from_json(answer.body)
        if not jwks.keys:
            raise ValueError(f"{self._jwks_url} holds no usable RSA or EC key")
        return jwks

    async def _discover(self) -> str:
        assert self.discovery_url is not None
        answer = await request(self.discovery_url, ssl_context=self._ssl, timeout=self.timeout)
        if answer.status != 200:
            raise HttpError(f"GET {self.discovery_url}: HTTP {answer.status}")
        doc = answer.json()
        uri = doc.get("jwks_uri") if isinstance(doc, dict) else None
        if not isinstance(uri, str):
            raise ValueError(f"{self.discovery_url} has no jwks_uri")
        return check_https_url(uri, f"jwks_uri of {self.discovery_url}")


def build_oauth_validator(config: Any, metrics: Any = None) -> JwtValidator:
    """The OAUTHBEARER validator for `config`'s sasl_oauthbearer_* settings: keys from the
    JWKS file, or a JwksCache (started by `start_jwks`) for a JWKS or OIDC discovery URL."""
    if config.sasl_oauthbearer_jwks_file is not None:
        source: Any = Jwks.from_json(Path(config.sasl_oauthbearer_jwks_file).read_text())
    else:
        source = JwksCache(
            config.sasl_oauthbearer_jwks_endpoint_url,
            discovery_url=config.sasl_oauthbearer_oidc_discovery_url,
            ssl_context=https_context(config.sasl_oauthbearer_ssl_cafile),
            timeout=config.connect_timeout,
            refresh=config.sasl_oauthbearer_jwks_endpoint_refresh_ms / 1000,
            retry_backoff=config.sasl_oauthbearer_jwks_endpoint_retry_backoff_ms / 1000,
            retry_backoff_max=config.sasl_oauthbearer_jwks_endpoint_retry_backoff_max_ms / 1000,
            metrics=metrics.jwks if metrics is not None else JwksMetrics(),
        )
    return JwtValidator(
        source,
        expected_audiences=config.sasl_oauthbearer_expected_audience or None,
        expected_issuer=config.sasl_oauthbearer_expected_issuer,
        clock_skew_seconds=config.sasl_oauthbearer_clock_skew_seconds,
        principal_claim=config.sasl_oauthbearer_sub_claim_name,
        groups_claim=config.sasl_oauthbearer_groups_claim_name,
    )


async def start_jwks(validator: JwtValidator | None) -> list[asyncio.Task]:
    """At the proxy's start: the first fetch of a JWKS URL's keys (JwksFetchError if there
    are none), and the task that refreshes them (cancel it to stop)."""
    source = validator.source if validator is not None else None
    if not isinstance(source, JwksCache):
        return []
    await source.start()
    return [asyncio.get_running_loop().create_task(source.run(), name="jwks-refresh")]
