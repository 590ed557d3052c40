"""Rate limits for things a misbehaving client can make the proxy do many times a second.

`RateLimitedLog` keeps an abuse (a connection flood, garbage frames, a client retrying against
a dead cluster) from turning into a log flood: one limit for every repeated line of the proxy,
and a summary line with the count of what it held back, so nothing is lost silently.
`TokenBuckets` is Kafka's per-address connection creation rate (KIP-612) in its simplest exact
form.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

#: the LogRecord attribute of a held-back line still written at DEBUG: the level it had
LIMITED_LEVEL = "rate_limited_level"


@dataclass(slots=True)
class _Window:
    """One key's current interval."""

    logger: logging.Logger
    started: float
    written: int = 0
    held: int = 0
    #: (level, message, args) of the last line held back: the summary repeats it
    last: tuple[int, str, tuple[object, ...]] | None = None


class RateLimitedLog:
    """At most `burst` lines per key every `interval` seconds; the proxy has one for all its
    repeated lines (connection closes and refusals, TLS handshake failures, an unreachable
    cluster).

    A line over the limit is counted (`held`, and `on_held(key)` for the
    aclgate_log_lines_suppressed_total metric) and, when its key's interval ends, one summary
    line gives the count and repeats the last line held back. Keys are chosen by the code
    (the kind of close, never a peer address or anything a client sends), so the key set is
    small; `max_keys` bounds it anyway. A logger enabled for DEBUG still gets every held-back
    line, at DEBUG (with its own level in the record's `rate_limited_level`).
    """

    def __init__(
        self,
        interval: float = 10.0,
        burst: int = 1,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 1000,
        on_held: Callable[[str], None] | None = None,
    ):
        self.interval = interval
        self.burst = burst
        self.clock = clock
        self.max_keys = max_keys
        self.on_held = on_held
        #: lines held back since the start
        self.held = 0
        self._windows: dict[tuple[str, str], _Window] = {}
        self._timer: asyncio.TimerHandle | None = None

    def log(
        self, logger: logging.Logger, level: int, key: str, message: str, *args: object
    ) -> bool:
        """`logger.log(level, message, *args)` unless `key` is over its limit; True if
        written."""
        if not logger.isEnabledFor(level):
            return False
        now = self.clock()
        slot = (logger.name, key)
        window = self._windows.get(slot)
        if window is None or now - window.started >= self.interval:
            if window is not None:
                self._summarise(key, window, now)
            elif len(self._windows) >= self.max_keys:
                self._end_windows(now, all_of_them=True)
            window = self._windows[slot] = _Window(logger, now)
        if window.written < self.burst:
            window.written += 1
            logger.log(level, message, *args, stacklevel=2)  # the caller's file and line
            return True
        window.held += 1
        window.last = (level, message, args)
        self.held += 1
        if self.on_held is not None:
            self.on_held(key)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(message, *args, extra={LIMITED_LEVEL: level}, stacklevel=2)
        self._schedule(window.started + self.interval - now)
        return False

    def flush(self) -> None:
        """Write every pending summary line now (when the proxy stops)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._end_windows(self.clock(), all_of_them=True)

    def _summarise(self, key: str, window: _Window, now: float) -> None:
        if not window.held or window.last is None:
            return
        level, message, args = window.last
        window.logger.log(
            level,
            "%d more line(s) like this held back in the last %.1f s (%s; at most %d every "
            "%g s), the last: " + message,
            window.held,
            now - window.started,
            key,
            self.burst,
            self.interval,
            *args,
        )
        window.held = 0
        window.last = None

    def _end_windows(self, now: float, all_of_them: bool = False) -> None:
        """Summarise and forget the windows whose interval is over (or all of them)."""
        ended = [
            slot
            for slot, window in self._windows.items()
            if all_of_them or now - window.started >= self.interval
        ]
        for slot in ended:
            self._summarise(slot[1], self._windows.pop(slot), now)

    def _schedule(self, delay: float) -> None:
        """The summary must come even when no further line of the key ends its interval."""
        if self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a unit test): the next line or flush() writes it
            return
        self._timer = loop.call_later(max(0.0, delay), self._tick)

    def _tick(self) -> None:
        self._timer = None
        now = self.clock()
        self._end_windows(now)
        pending = [w.started + self.interval - now for w in self._windows.values() if w.held]
        if pending:
            self._schedule(min(pending))


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
