"""Prometheus metrics.

Counters touched on every request (requests, bytes, responses, decisions) are plain integers
in dicts, exported by a custom collector at scrape time: prometheus_client's Counter.inc takes
a lock and costs about 1 µs, four times per request on the hot path. Everything else uses
ordinary prometheus_client metrics.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from protocol.header import RequestHeader
from protocol.versions import api_name

# indexes into the per-API count lists
REQUESTS, REQUEST_BYTES, UPSTREAM_RESPONSES, LOCAL_RESPONSES = range(4)


class HotCounters(Collector):
    """Per-API request/response counts and per-decision counts, exported at scrape time."""

    def __init__(self) -> None:
        self.by_api: dict[int, list[int]] = {}
        #: (api_key, operation, resource_type, decision, enforced) -> count
        self.decisions: dict[tuple, int] = {}

    def api(self, api_key: int) -> list[int]:
        counts = self.by_api.get(api_key)
        if counts is None:
            counts = self.by_api[api_key] = [0, 0, 0, 0]
        return counts

    def collect(self) -> Iterator[CounterMetricFamily]:
        requests = CounterMetricFamily(
            "aclgate_requests", "Requests received from clients", labels=["api"]
        )
        request_bytes = CounterMetricFamily(
            "aclgate_request_bytes", "Request bytes received from clients", labels=["api"]
        )
        responses = CounterMetricFamily(
            "aclgate_responses",
            "Responses sent to clients, from the broker or the proxy",
            labels=["api", "source"],
        )
        for key, counts in sorted(self.by_api.items()):
            name = api_name(key)
            requests.add_metric([name], counts[REQUESTS])
            request_bytes.add_metric([name], counts[REQUEST_BYTES])
            responses.add_metric([name, "upstream"], counts[UPSTREAM_RESPONSES])
            responses.add_metric([name, "proxy"], counts[LOCAL_RESPONSES])
        decisions = CounterMetricFamily(
            "aclgate_decisions",
            "Authorization decisions by API, operation, resource type and outcome",
            labels=["api", "operation", "resource_type", "decision", "enforced"],
        )
        for (api_key, operation, resource_type, allowed, enforced), count in sorted(
            self.decisions.items(),
            key=lambda kv: (kv[0][0], int(kv[0][1]), int(kv[0][2]), kv[0][3], kv[0][4]),
        ):
            decisions.add_metric(
                [
                    api_name(api_key),
                    operation.name,
                    resource_type.name,
                    "ALLOWED" if allowed else "DENIED",
                    "true" if enforced else "false",
                ],
                count,
            )
        yield requests
        yield request_bytes
        yield responses
        yield decisions


class ProxyMetrics:
    """All metrics of one proxy instance, in their own registry (tests run several proxies)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.hot = HotCounters()
        r.register(self.hot)
        self.connections_active = Gauge(
            "aclgate_connections_active", "Client connections open now", ["listener"], registry=r
        )
        self.connections = Counter(
            "aclgate_connections", "Client connections accepted", ["listener"], registry=r
        )
        self.errors = Counter(
            "aclgate_errors",
            "Connections closed because of a problem, by kind",
            ["kind"],
            registry=r,
        )
        self.unknown_api_keys = Counter(
            "aclgate_unsupported_api_keys",
            "API keys dropped from upstream ApiVersions answers or refused from clients",
            ["api_key"],
            registry=r,
        )
        self.broker_listeners = Gauge(
            "aclgate_broker_listeners", "Per-broker listeners open", registry=r
        )
        self.upstream_connect_failures = Counter(
            "aclgate_upstream_connect_failures",
            "Failed connections to upstream brokers",
            registry=r,
        )

        self.upstream_reauthentications = Counter(
            "aclgate_upstream_reauthentications",
            "KIP-368 renewals of the proxy's own SASL login on upstream connections",
            ["result"],
            registry=r,
        )

    # SessionObserver
    def request(self, header: RequestHeader, size: int) -> None:
        counts = self.hot.by_api.get(header.api_key) or self.hot.api(header.api_key)
        counts[REQUESTS] += 1
        counts[REQUEST_BYTES] += size

    def response(self, api_key: int, size: int, local: bool) -> None:
        counts = self.hot.by_api.get(api_key) or self.hot.api(api_key)
        counts[LOCAL_RESPONSES if local else UPSTREAM_RESPONSES] += 1

    def refused(self, api_key: int) -> None:
        self.unknown_api_keys.labels(str(api_key)).inc()
