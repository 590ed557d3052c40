"""Per-API latency histograms in /metrics (issue 14 item 5): the documented names and buckets,
and one observation per request and per broker answer, through the proxy with a real client."""

from __future__ import annotations

import json
import re
import urllib.request
from bisect import bisect_left
from pathlib import Path

from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from aclgate.proxy.ops.hotcounts import LATENCY_SUM, observe
from aclgate.proxy.ops.metrics import LATENCY_BOUNDS_NS, LATENCY_METRIC, PHASES

DOCS = Path(__file__).resolve().parents[2] / "docs"
#: the le labels as docs/operations.md lists them (10 µs to 100 ms)
DOCUMENTED_LE = ["1e-05", "2.5e-05", "5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025",
                 "0.005", "0.01", "0.025", "0.05", "0.1", "+Inf"]  # fmt: skip


def scrape(proxy) -> dict[tuple[str, tuple], float]:
    url = "http://{}:{}/metrics".format(*proxy.server.metrics_address)
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_histograms_count_every_request_and_answer(tansu, proxy_factory):
    proxy = proxy_factory(tansu.bootstrap, metrics_listen=("127.0.0.1", 0))
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 0, "acks": 1})
    delivered = []
    for i in range(20):  # one Produce request each: flushed one at a time
        producer.produce("latency-topic", b"%d" % i, on_delivery=lambda e, m: delivered.append(e))
        producer.flush(20)
    assert delivered == [None] * 20
    samples = scrape(proxy)
    name = LATENCY_METRIC
    for api in ("Produce", "Metadata"):
        requests = value(samples, "aclgate_requests_total", api=api)
        answers = value(samples, "aclgate_responses_total", api=api, source="upstream")
        assert requests >= (20 if api == "Produce" else 1)
        # every request was read in one go and handled at once, every answer relayed at once
        assert value(samples, f"{name}_count", api=api, phase="request") == requests
        assert value(samples, f"{name}_count", api=api, phase="response") == answers
        for phase in PHASES:
            buckets = [value(samples, f"{name}_bucket", api=api, phase=phase, le=le)
                       for le in DOCUMENTED_LE]  # fmt: skip
            assert buckets == sorted(buckets)  # cumulative
            assert buckets[-1] == value(samples, f"{name}_count", api=api, phase=phase)
            assert value(samples, f"{name}_sum", api=api, phase=phase) > 0
    assert value(samples, f"{name}_count", api="Produce", phase="response") == 20


def test_documented_names_buckets_and_dashboard():
    ops = (DOCS / "operations.md").read_text()
    assert f"`{LATENCY_METRIC}`" in ops
    assert [f"{ns / 1e9:g}" for ns in LATENCY_BOUNDS_NS] + ["+Inf"] == DOCUMENTED_LE
    documented = set(re.findall(r"`(aclgate_[a-z_]+)`", ops))
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs
    used = {re.sub(r"_(bucket|sum|count)$", "", m)
            for e in exprs for m in re.findall(r"aclgate_[a-z_]+", e)}  # fmt: skip
    assert used <= documented, used - documented
    assert LATENCY_METRIC in used


def test_a_time_falls_in_the_bucket_prometheus_expects():
    """RequestCounts' own bucket search (a loop, compiled) agrees with bisect_left: a time
    equal to a bound counts under it (`le`), one a nanosecond over counts in the next."""
    times = [0, 1, 10**12] + [t + d for t in LATENCY_BOUNDS_NS for d in (-1, 0, 1)]
    for ns in times:
        table: dict[int, list[int]] = {}
        observe(table, [7, 7, 9], ns)
        assert table[7][bisect_left(LATENCY_BOUNDS_NS, ns)] == 2, ns
        assert sum(table[7][:LATENCY_SUM]) == 2 and table[7][LATENCY_SUM] == 2 * ns
        assert table[9][bisect_left(LATENCY_BOUNDS_NS, ns)] == 1
        assert len(table[9]) == len(LATENCY_BOUNDS_NS) + 2  # +Inf, then the sum
