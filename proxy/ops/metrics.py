"""Prometheus metrics.

Counters touched on every request (requests, bytes, responses, decisions) are plain integers
in dicts, exported by a custom collector at scrape time: prometheus_client's Counter.inc takes
a lock and costs about 1 µs, four times per request on the hot path. The latency histograms
are kept the same way: one preallocated list of bucket counts per API and phase, bumped in
place (Histogram.observe would take a lock and search its buckets in Python). Everything else
uses ordinary prometheus_client metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from aclgate.protocol.apikeys import ApiKey
from aclgate.protocol.versions import api_name
from aclgate.proxy.ops.hotcounts import (
    LATENCY_BOUNDS_NS,
    LATENCY_SUM,
    LOCAL_RESPONSES,
    REQUEST_BYTES,
    REQUESTS,
    UPSTREAM_RESPONSES,
    RequestCounts,
)

LATENCY_METRIC = "aclgate_proxy_latency_seconds"
#: the phases of aclgate_proxy_latency_seconds (docs/operations.md)
PHASES = ("request", "response")


class LatencyHistograms:
    """Per API key and phase: where the time a request or an answer spends inside aclgate
    falls, in lists allocated on an API's first use and bumped in place (ProxyMetrics
    requests_done / responses_done)."""

    def __init__(self, tables: dict[str, dict[int, list[int]]] | None = None) -> None:
        #: phase -> api_key -> [count per bucket..., sum_ns] (RequestCounts' tables)
        self.tables: dict[str, dict[int, list[int]]] = tables or {phase: {} for phase in PHASES}

    def collect(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(
            LATENCY_METRIC,
            "Time a request (phase=request: read from the client until forwarded to the "
            "broker or answered) or a broker's answer (phase=response: read from the broker "
            "until written to the client) spends inside aclgate, by API",
            labels=["api", "phase"],
        )
        bounds = [f"{ns / 1e9:g}" for ns in LATENCY_BOUNDS_NS] + ["+Inf"]
        for phase, table in self.tables.items():
            for key, counts in sorted(table.items()):
                cumulative, buckets = 0, []
                for bound, count in zip(bounds, counts[:LATENCY_SUM], strict=True):
                    cumulative += count
                    buckets.append((bound, cumulative))
                family.add_metric([api_name(key), phase], buckets, counts[LATENCY_SUM] / 1e9)
        return family


class DecisionCounts(dict):
    """(api_key, operation, resource_type, decision, enforced) -> count, filled by the
    proxy's DecisionRecorder, which also registers its denial-log rate limit here so that the
    lines it held back are exported with the decisions."""

    __slots__ = ("denial_log",)

    def __init__(self) -> None:
        super().__init__()
        #: a proxy.audit.decisions.DenialLogLimiter (its `suppressed` count), once one is registered
        self.denial_log: Any = None


class HotCounters(Collector):
    """Per-API request/response counts and per-decision counts, exported at scrape time."""

    def __init__(self, counts: RequestCounts | None = None) -> None:
        counts = counts or RequestCounts()
        #: api_key -> [requests, request bytes, upstream answers, proxy answers]
        self.by_api = counts.by_api
        #: (api_key, operation, resource_type, decision, enforced) -> count
        self.decisions = DecisionCounts()
        self.latency = LatencyHistograms(
            {"request": counts.request_latency, "response": counts.response_latency}
        )

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
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
        denial_log = self.decisions.denial_log
        yield requests
        yield request_bytes
        yield responses
        yield decisions
        yield CounterMetricFamily(
            "aclgate_denial_log_suppressed",
            "Denial lines of the authorizer log held back by its rate limit (summarised instead)",
            denial_log.suppressed if denial_log is not None else 0,
        )
        yield self.latency.collect()


class StateCollector(Collector):
    """Policy and audit state, read at scrape time from the objects that own it (nothing to
    keep in step): is a policy in force, which version, did the last ACL file load fail."""

    def __init__(
        self,
        authorizer: Any,
        watcher: Callable[[], Any],
        audit: Callable[[], Any],
        acl_store: Callable[[], Any] = lambda: None,
        audit_sink: Callable[[], Any] = lambda: None,
    ):
        self.authorizer = authorizer
        self.watcher = watcher
        self.audit = audit
        #: the ACL store's AclStoreStatus (proxy/aclstore/backend.py), or None without a store
        self.acl_store = acl_store
        #: the audit topic's KafkaAuditSink (proxy/audit/kafka.py), or None without one
        self.audit_sink = audit_sink

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        a = self.authorizer
        yield GaugeMetricFamily(
            "aclgate_acls_ready", "1 once ACLs are loaded (before: only super users)", a.ready
        )
        yield GaugeMetricFamily(
            "aclgate_acl_policy_version", "Version of the ACL set in force", a.version
        )
        yield GaugeMetricFamily("aclgate_acls", "ACLs in force", a.acl_count())
        watcher = self.watcher()
        if watcher is not None:
            yield CounterMetricFamily(
                "aclgate_acl_file_reloads",
                "ACL file loads that changed the policy",
                watcher.reloads,
            )
            yield CounterMetricFamily(
                "aclgate_acl_file_load_errors",
                "ACL file loads refused (bad file; the previous policy stayed in force)",
                watcher.failures,
            )
            yield GaugeMetricFamily(
                "aclgate_acl_file_invalid",
                "1 while the ACL file on disk cannot be loaded (the previous policy is in force)",
                watcher.last_error is not None,
            )
            yield GaugeMetricFamily(
                "aclgate_acl_file_last_load_timestamp_seconds",
                "Unix time of the last successful ACL file load",
                watcher.last_loaded_at or 0,
            )
        status = self.acl_store()
        if status is not None:
            yield from _acl_store_metrics(status)
        audit = self.audit()
        if audit is not None:
            yield CounterMetricFamily(
                "aclgate_audit_lines", "Lines written to the audit log", audit.lines_written
            )
            yield CounterMetricFamily(
                "aclgate_audit_denied_aggregated",
                "Denials over the per-second limit, written as aggregated lines instead",
                audit.denied_aggregated,
            )
            yield CounterMetricFamily(
                "aclgate_audit_aggregation_overflow",
                "Audit aggregations written before their time because they reached their bound",
                audit.aggregation_overflows,
            )
        sink = self.audit_sink()
        if sink is not None:
            yield from _audit_sink_metrics(sink)


def _audit_sink_metrics(sink: Any) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """The audit topic's sink (proxy/audit/kafka.py): sent, spooled, lost, the spool's size."""
    yield CounterMetricFamily(
        "aclgate_audit_sink_sent",
        "Audit lines the audit topic confirmed (acks=all), sent at once or from the spool",
        sink.sent,
    )
    yield CounterMetricFamily(
        "aclgate_audit_sink_spooled",
        "Audit lines written to the spool because the audit topic could not take them yet",
        sink.spooled,
    )
    dropped = CounterMetricFamily(
        "aclgate_audit_sink_dropped",
        "Audit lines lost to the topic: spool_full (the spool at its limit), rejected (refused "
        "for good by the topic, e.g. too large), corrupt (a spooled line cut short or damaged), "
        "sink_failed (the sink's thread died of a bug)",
        labels=["reason"],
    )
    for reason, count in sink.dropped.items():
        dropped.add_metric([reason], count)
    yield dropped
    yield GaugeMetricFamily(
        "aclgate_audit_sink_spool_bytes",
        "Bytes of the audit spool's files on disk (bounded by --audit-spool-max-bytes)",
        sink.spool_bytes,
    )
    yield GaugeMetricFamily(
        "aclgate_audit_sink_spool_pending_bytes",
        "Bytes of spooled audit lines the topic has not confirmed yet (0: all delivered)",
        sink.spool_pending_bytes,
    )
    yield GaugeMetricFamily(
        "aclgate_audit_sink_spool_limit_bytes",
        "The audit spool's size limit (--audit-spool-max-bytes): past it lines are lost",
        sink.settings.spool_max_bytes,
    )


def _acl_store_metrics(status: Any) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """The ACL store's state (AclStoreStatus), for /metrics."""
    info = GaugeMetricFamily(
        "aclgate_acl_store_info",
        "The ACL store in force: its backend and the fingerprint of the policy it holds "
        "(equal on two instances holding the same policy)",
        labels=["backend", "fingerprint"],
    )
    info.add_metric([status.backend, status.fingerprint], 1)
    yield info
    yield GaugeMetricFamily(
        "aclgate_acl_store_loaded",
        "1 once the store's policy is loaded (kafka: replayed to the high-water mark seen at start)",
        status.loaded,
    )
    yield GaugeMetricFamily(
        "aclgate_acl_store_degraded",
        "1 while the store cannot be read or applied (the last good policy stays in force)",
        status.error is not None,
    )
    yield GaugeMetricFamily(
        "aclgate_acl_store_applied_offset",
        "Offset of the last ACL record applied (kafka store; -1 with the file store or before "
        "the first record)",
        -1 if status.applied_offset is None else status.applied_offset,
    )
    yield GaugeMetricFamily(
        "aclgate_acl_store_stale_seconds",
        "Seconds since the store was last known to be in step with its source (0: in step)",
        status.seconds_stale or 0,
    )
    yield CounterMetricFamily(
        "aclgate_acl_store_writer_fenced",
        "ACL changes that failed because another producer took this instance's writer "
        "transactional id (kafka store: two live instances configured with one id)",
        status.writer_fenced,
    )


class JwksMetrics:
    """OAUTHBEARER key fetches (proxy/security/jwks.py); exported whether or not a JWKS URL is set."""

    def __init__(self, registry: Any = None):
        self.refreshes = Counter(
            "aclgate_jwks_refreshes",
            "Fetches of the OAUTHBEARER JWKS by result (success, failure) and trigger (start, "
            "scheduled, unknown_kid, retry)",
            ["result", "trigger"],
            registry=registry,
        )
        self.keys = Gauge(
            "aclgate_jwks_keys", "Verification keys in the JWKS in force", registry=registry
        )
        self.last_success = Gauge(
            "aclgate_jwks_last_success_timestamp_seconds",
            "When the JWKS in force was fetched (Unix time)",
            registry=registry,
        )


class ProxyMetrics(RequestCounts):
    """All metrics of one proxy instance, in their own registry (tests run several proxies).
    The counts of every request (the SessionObserver's request and response, and the
    latency steps) are RequestCounts' (proxy/ops/hotcounts.py), compiled with the hot path."""

    def __init__(self, registry: CollectorRegistry | None = None):
        super().__init__()
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.hot = HotCounters(self)
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
            "API keys dropped from upstream ApiVersions answers or refused from clients (keys "
            'Kafka does not define are counted together as api_key="other")',
            ["api_key"],
            registry=r,
        )
        self.broker_listeners = Gauge(
            "aclgate_broker_listeners", "Per-broker listeners open", registry=r
        )
        self.jwks = JwksMetrics(r)
        self.connection_timeouts = Counter(
            "aclgate_connection_timeouts",
            "Client connections closed by a timeout: idle (connections_max_idle_ms), "
            "authentication (authentication_timeout_ms), partial_request "
            "(partial_request_timeout_ms)",
            ["kind"],
            registry=r,
        )
        self.spliced_bytes = Counter(
            "aclgate_spliced_bytes",
            "Answer bytes relayed from the broker to the client in the kernel (splice(2)), "
            "never read into the proxy (--splice-min-bytes)",
            registry=r,
        )
        self.upstream_connect_failures = Counter(
            "aclgate_upstream_connect_failures",
            "Failed connections to upstream brokers",
            registry=r,
        )
        #: read at scrape time from ProxyServer.upstream_reachable (set_function there)
        self.upstream_reachable = Gauge(
            "aclgate_upstream_reachable",
            "1 while the upstream cluster is reachable: the last broker check reached it, and "
            "no client connection has found every bootstrap server unreachable since (/readyz)",
            registry=r,
        )
        self.log_lines_suppressed = Counter(
            "aclgate_log_lines_suppressed",
            "Repeated log lines a client can cause (closes, refusals, TLS failures, "
            "auto-creation) held back by the log rate limit, by kind; each is counted in a "
            "summary line instead",
            ["kind"],
            registry=r,
        )

        self.acl_changes = Counter(
            "aclgate_acl_store_changes",
            "ACL changes asked through the ACL Admin API (CreateAcls, DeleteAcls), by result "
            "(committed, failed)",
            ["result"],
            registry=r,
        )
        self.acl_changed = Counter(
            "aclgate_acl_store_acls_changed",
            "ACLs in committed changes of the ACL Admin API, by kind (added, removed); an added "
            "ACL that was already present counts too",
            ["kind"],
            registry=r,
        )
        self.upstream_reauthentications = Counter(
            "aclgate_upstream_reauthentications",
            "KIP-368 renewals of the proxy's own SASL login on upstream connections",
            ["result"],
            registry=r,
        )

    # SessionObserver (request and response: RequestCounts)
    def refused(self, api_key: int) -> None:
        self.unknown_api_keys.labels(api_key_label(api_key)).inc()


#: the label values of aclgate_unsupported_api_keys: Kafka's API keys, then OTHER_API_KEY
KAFKA_API_KEY_LABELS: dict[int, str] = {int(key): str(int(key)) for key in ApiKey}
OTHER_API_KEY = "other"


def api_key_label(api_key: int) -> str:
    """The api_key label of a refused or dropped key: its number for an API Kafka defines,
    OTHER_API_KEY for anything else. Any of 65,536 keys can come from a client; one label
    each would grow /metrics (and the cost of every scrape) without bound."""
    return KAFKA_API_KEY_LABELS.get(api_key, OTHER_API_KEY)
