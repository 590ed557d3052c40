"""The counters every request and every answer bumps: ProxyMetrics' hot half.

A module of its own, strictly typed and free of prometheus_client, so that the compiled hot
path (aclgate/native.py) includes it: the session calls these four to six times per request,
and as interpreted Python each call was a Python frame (~1,000 instructions). proxy/ops/
metrics.py exports the numbers at scrape time (HotCounters, LatencyHistograms).
"""

from __future__ import annotations

from time import perf_counter_ns
from typing import Final

from mypy_extensions import mypyc_attr

from aclgate.protocol.header import RequestHeader

# indexes into the per-API count lists
REQUESTS: Final = 0
REQUEST_BYTES: Final = 1
UPSTREAM_RESPONSES: Final = 2
LOCAL_RESPONSES: Final = 3

#: upper bounds (ns) of the latency buckets, 10 µs to 100 ms; a last bucket holds the rest (+Inf)
LATENCY_BOUNDS_NS: Final[tuple[int, ...]] = (
    10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000, 25_000_000, 50_000_000, 100_000_000,
)  # fmt: skip
#: a latency list: one count per bucket (the +Inf one last), then the sum in ns
LATENCY_SUM: Final = 14
assert len(LATENCY_BOUNDS_NS) + 1 == LATENCY_SUM


def new_latency_row(table: dict[int, list[int]], api_key: int) -> list[int]:
    """The bucket counts of an API's first request (allocated once per API and phase)."""
    row = table[api_key] = [0] * (LATENCY_SUM + 1)
    return row


@mypyc_attr(allow_interpreted_subclasses=True)
class RequestCounts:
    """Per API key: requests, request bytes and answers counted, and the latency rows, each
    a list allocated on the API's first use and bumped in place. At most one row per API key
    and table: the session refuses keys it does not serve before counting them."""

    def __init__(self) -> None:
        #: api_key -> [requests, request bytes, upstream answers, proxy answers]
        self.by_api: dict[int, list[int]] = {}
        #: api_key -> [count per latency bucket..., sum_ns], per phase
        self.request_latency: dict[int, list[int]] = {}
        self.response_latency: dict[int, list[int]] = {}
        #: the API keys of the requests / broker answers handled in the read being timed
        #: (proxy/listen/connection.py: begin_step, then requests_done / responses_done)
        self.step_requests: list[int] = []
        self.step_responses: list[int] = []

    def api(self, api_key: int) -> list[int]:
        counts = self.by_api.get(api_key)
        if counts is None:
            counts = self.by_api[api_key] = [0, 0, 0, 0]
        return counts

    # SessionObserver
    def request(self, header: RequestHeader, size: int) -> None:
        api_key = header.api_key
        counts = self.by_api.get(api_key) or self.api(api_key)
        counts[REQUESTS] += 1
        counts[REQUEST_BYTES] += size
        self.step_requests.append(api_key)

    def response(self, api_key: int, size: int, local: bool) -> None:
        counts = self.by_api.get(api_key) or self.api(api_key)
        if local:
            counts[LOCAL_RESPONSES] += 1
        else:
            counts[UPSTREAM_RESPONSES] += 1
            self.step_responses.append(api_key)

    # Latency: the IO layer times each read it hands to a session (proxy/listen/connection.py):
    #     started = metrics.begin_step(metrics.step_requests)
    #     session.client_data(data)
    #     metrics.requests_done(started)
    # Requests or answers handled outside a timed read (resumed after an effect) are cleared by
    # the next begin_step.
    def begin_step(self, keys: list[int]) -> int:
        """Start timing a read; `keys` is step_requests or step_responses."""
        keys.clear()
        return perf_counter_ns()

    def requests_done(self, started: int) -> None:
        observe(self.request_latency, self.step_requests, perf_counter_ns() - started)

    def responses_done(self, started: int) -> None:
        observe(self.response_latency, self.step_responses, perf_counter_ns() - started)


def observe(table: dict[int, list[int]], keys: list[int], ns: int) -> None:
    """One read's time, counted once per request or answer it handled."""
    if keys:
        bucket = 0  # bisect_left(LATENCY_BOUNDS_NS, ns), as a loop: no generic call compiled
        for bound in LATENCY_BOUNDS_NS:
            if ns <= bound:
                break
            bucket += 1
        for key in keys:
            counts = table.get(key) or new_latency_row(table, key)
            counts[bucket] += 1
            counts[LATENCY_SUM] += ns
