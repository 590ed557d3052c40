"""Rate limits for things a misbehaving client can make the proxy do many times a second.

`RateLimitedLog` keeps an abuse (a connection flood, a refusal storm) from turning into a log
flood: one line per key per interval, and the next line says how many were suppressed, so
nothing is lost silently. `TokenBuckets` is Kafka's per-address connection creation rate
(KIP-612) in its simplest exact form.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class RateLimitedLog:
    """At most one line per `interval` seconds for each key."""

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 10_000,
    ):
        self.logger = logger
        self.interval = interval
        self.clock = clock
        self.max_keys = max_keys
        #: key -> (when its last line was written, lines suppressed since)
        self._state: dict[str, tuple[float, int]] = {}

    def log(self, level: int, key: str, message: str, *args: object) -> bool:
        """Log `message % args` unless `key` logged within the interval; True if written."""
        now = self.clock()
        last, suppressed = self._state.get(key, (-1e18, 0))
        if now - last < self.interval:
            self._state[key] = (last, suppressed + 1)
            return False
        if len(self._state) >= self.max_keys:
            self._forget(now)
        self._state[key] = (now, 0)
        if suppressed:
            message += " (%d similar line(s) suppressed in the last %.0f s)"
            args = (*args, suppressed, now - last)
        self.logger.log(level, message, *args)
        return True

    def _forget(self, now: float) -> None:
        """Drop keys whose interval is over (a key with suppressed lines logs them next)."""
        self._state = {k: v for k, v in self._state.items() if now - v[0] < self.interval}


class TokenBuckets:
    """Per-key rate limit: `rate` events per second, bursts of up to `rate` (at least 1)."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic):
        self.rate = rate
        self.burst = max(1.0, rate)
        self.clock = clock
        #: key -> (tokens left, when they were counted)
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, key: str) -> bool:
        """Spend one token of `key`; False when the rate is exceeded."""
        now = self.clock()
        tokens, then = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            return False
        self._buckets[key] = (tokens - 1.0, now)
        return True

    def prune(self) -> None:
        """Forget keys whose bucket is full again (they behave as new keys)."""
        now = self.clock()
        self._buckets = {
            k: (tokens, then)
            for k, (tokens, then) in self._buckets.items()
            if tokens + (now - then) * self.rate < self.burst
        }

    def __len__(self) -> int:
        return len(self._buckets)
