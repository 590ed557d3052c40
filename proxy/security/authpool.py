"""Password hashing for SASL logins: a fixed number of workers, fed fairly by source address.

A PLAIN login checks the password against a scrypt hash: tens of milliseconds of one core, on
purpose (a stolen users file must not be cheap to brute force). On the event loop that would
stall every connection; in an unbounded pool, 32 guessing connections kept both cores busy
and a legitimate login waited behind all their guesses (55 ms became 750 ms). So:

* a fixed number of worker threads, leaving a core to the event loop;
* waiting jobs queue per source address and the workers take them round robin: a guessing
  host delays another host's login by about one hash per worker, however many connections
  it opens;
* the queues are bounded, per address and in total: past a bound `submit` refuses, and the
  caller closes the connection (the client sees a dropped connection and retries later).

Everything but the hashing itself runs on the event loop thread: no locks.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

__all__ = ["FairHashPool", "default_workers"]

#: a job and what to call with its result (or the exception it raised) on the event loop
_Job = tuple[Callable[[], Any], Callable[[Any], None]]


def default_workers() -> int:
    """One worker per usable core but one, at least one and at most four: the event loop keeps
    a core of its own however many logins are hashing."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 2
    return max(1, min(4, cores - 1))


class FairHashPool:
    """`submit(source, fn, done)` runs `fn` in a worker and calls `done(result)` back on the
    event loop (an exception `fn` raised is passed as the result); False when the queues are
    full. Jobs of one source run in order; sources take turns."""

    def __init__(self, workers: int | None = None, per_source: int = 16, total: int = 256):
        self.workers = workers or default_workers()
        self.per_source = per_source
        self.total = total
        self.executor = ThreadPoolExecutor(
            max_workers=self.workers, thread_name_prefix="aclgate-sasl"
        )
        self._queues: OrderedDict[str | None, deque[_Job]] = OrderedDict()
        self.waiting = 0
        self.running = 0
        #: jobs refused because a queue was full (for tests and logs)
        self.refused = 0

    def submit(
        self, source: str | None, fn: Callable[[], Any], done: Callable[[Any], None]
    ) -> bool:
        queue = self._queues.get(source)
        if self.waiting >= self.total or (queue is not None and len(queue) >= self.per_source):
            self.refused += 1
            return False
        if queue is None:
            queue = self._queues[source] = deque()
        queue.append((fn, done))
        self.waiting += 1
        self._dispatch()
        return True

    def _dispatch(self) -> None:
        queues = self._queues
        loop = asyncio.get_running_loop()
        while self.running < self.workers and queues:
            source, queue = next(iter(queues.items()))
            fn, done = queue.popleft()
            self.waiting -= 1
            if queue:
                queues.move_to_end(source)  # its next job waits for every other source's turn
            else:
                del queues[source]
            self.running += 1
            future = self.executor.submit(fn)
            future.add_done_callback(functools.partial(self._back, loop, done))

    def _back(
        self, loop: asyncio.AbstractEventLoop, done: Callable[[Any], None], f: Future
    ) -> None:
        """In the worker thread: hand the result to the event loop."""
        try:
            loop.call_soon_threadsafe(self._finished, done, f)
        except RuntimeError:  # the loop is closed: shutting down, nobody waits for it
            pass

    def _finished(self, done: Callable[[Any], None], future: Future) -> None:
        self.running -= 1
        try:
            if future.cancelled():
                return
            exc = future.exception()
            done(exc if exc is not None else future.result())
        finally:
            self._dispatch()

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
