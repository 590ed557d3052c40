"""Prometheus metrics. Children are bound once per API key so the hot path does one `inc()`."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from protocol.header import RequestHeader
from protocol.versions import api_name


class ProxyMetrics:
    """All metrics of one proxy instance, in their own registry (tests run several proxies)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.connections_active = Gauge(
            "aclgate_connections_active", "Client connections open now", ["listener"], registry=r
        )
        self.connections = Counter(
            "aclgate_connections", "Client connections accepted", ["listener"], registry=r
        )
        self.requests = Counter(
            "aclgate_requests", "Requests received from clients", ["api"], registry=r
        )
        self.request_bytes = Counter(
            "aclgate_request_bytes", "Request bytes received from clients", ["api"], registry=r
        )
        self.responses = Counter(
            "aclgate_responses", "Responses sent to clients", ["api", "source"], registry=r
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
        self._by_key: dict[int, tuple] = {}

    def _children(self, api_key: int) -> tuple:
        children = self._by_key.get(api_key)
        if children is None:
            name = api_name(api_key)
            children = self._by_key[api_key] = (
                self.requests.labels(name),
                self.request_bytes.labels(name),
                self.responses.labels(name, "upstream"),
                self.responses.labels(name, "proxy"),
            )
        return children

    # SessionObserver
    def request(self, header: RequestHeader, size: int) -> None:
        children = self._by_key.get(header.api_key) or self._children(header.api_key)
        children[0].inc()
        children[1].inc(size)

    def response(self, api_key: int, size: int, local: bool) -> None:
        children = self._by_key.get(api_key) or self._children(api_key)
        children[3 if local else 2].inc()

    def refused(self, api_key: int) -> None:
        self.unknown_api_keys.labels(str(api_key)).inc()
