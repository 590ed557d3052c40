"""One /metrics for several worker processes: their expositions, merged sample by sample.

Each worker keeps its own counters (proxy/ops/metrics.py exports the hot ones from plain integers
at scrape time, which prometheus_client's file-backed multiprocess mode cannot see), so the
supervisor scrapes every worker and merges what they say: counters, histograms and summaries
are summed; a gauge is summed unless GAUGE_MERGE names another rule for it (a state such as
"ACLs loaded" is only true when it is true of every worker). The counters of a worker that
exited are kept (`retire`) and added to every later merge, so a sum never goes down when a
worker is replaced, as Prometheus expects of a counter.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from aclgate.proxy.ops.http import render

#: how the workers' values of one gauge become the value exported; unnamed gauges are summed
GAUGE_MERGE: dict[str, Callable[[Iterable[float]], float]] = {
    "aclgate_acls_ready": min,  # 1 only once every worker has its ACLs
    "aclgate_acl_policy_version": min,  # the version every worker has reached
    "aclgate_acls": min,
    "aclgate_acl_file_invalid": max,  # any worker that sees a broken file
    "aclgate_acl_file_last_load_timestamp_seconds": min,  # the stalest worker
    "aclgate_jwks_keys": min,
    "aclgate_jwks_last_success_timestamp_seconds": min,
    "aclgate_upstream_reachable": min,  # 1 only while every worker reaches the cluster
    "aclgate_ldap_up": min,  # 1 only while every worker's directory lookups succeed
    "aclgate_ldap_stale_seconds": max,  # the stalest worker (each has its own cache)
}
#: sample kinds whose values add up across processes
SUMMED_TYPES = frozenset({"counter", "histogram", "summary", "gaugehistogram"})

#: (sample name, sorted label pairs)
SampleKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass
class _Family:
    name: str
    documentation: str
    type: str
    values: dict[SampleKey, list[float]] = field(default_factory=dict)

    def rule(self, sample_name: str) -> Callable[[Iterable[float]], float]:
        if sample_name.endswith("_created"):
            return min  # when the oldest worker's series began
        if self.type in SUMMED_TYPES:
            return sum
        return GAUGE_MERGE.get(self.name, sum) if self.type == "gauge" else _first

    def metric(self) -> Metric:
        out = Metric(self.name, self.documentation, self.type)
        for (sample_name, labels), values in self.values.items():
            out.add_sample(sample_name, dict(labels), self.rule(sample_name)(values))
        return out


def _first(values: Iterable[float]) -> float:
    return next(iter(values))


def parse(text: str) -> dict[str, _Family]:
    """A worker's exposition, by family name."""
    families: dict[str, _Family] = {}
    for parsed in text_string_to_metric_families(text):
        family = families.setdefault(
            parsed.name, _Family(parsed.name, parsed.documentation, parsed.type)
        )
        for sample in parsed.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            family.values.setdefault(key, []).append(sample.value)
    return families


class MetricsMerger:
    """Merges worker expositions; remembers the counters of workers that are gone.

    Pure text processing, so the supervisor runs it in a thread (its /healthz must not wait
    for a merge): `retire` replaces the retired set rather than changing it, under a lock, so
    a merge running in another thread reads one consistent set."""

    def __init__(self) -> None:
        self._retired: dict[str, _Family] = {}
        self._retiring = threading.Lock()

    def retire(self, text: str) -> None:
        """`text` is the last exposition of a worker that exited: keep its summed samples."""
        parsed = parse(text)
        with self._retiring:
            retired = {
                name: _Family(name, family.documentation, family.type, dict(family.values))
                for name, family in self._retired.items()
            }
            for name, family in parsed.items():
                kept = retired.setdefault(name, _Family(name, family.documentation, family.type))
                for key, values in family.values.items():
                    if family.type in SUMMED_TYPES and not key[0].endswith("_created"):
                        # one sum per series, however many workers were retired
                        kept.values[key] = [sum(kept.values.get(key, ())) + sum(values)]
            self._retired = retired

    def families(
        self, parsed: Iterable[dict[str, _Family]], extra: Iterable[Metric] = ()
    ) -> Iterator[Metric]:
        """The merge of parsed expositions (`parse`) and the retired counters."""
        merged: dict[str, _Family] = {}
        for source in [*parsed, self._retired]:
            for name, family in source.items():
                into = merged.setdefault(name, _Family(name, family.documentation, family.type))
                for key, values in family.values.items():
                    into.values.setdefault(key, []).extend(values)
        for family in merged.values():
            if family.values:
                yield family.metric()
        yield from extra

    def exposition(
        self, texts: Iterable[str | dict[str, _Family]], extra: Iterable[Metric] = ()
    ) -> bytes:
        """The merged Prometheus text exposition of `texts` (or their `parse`; plus `extra`
        families)."""
        parsed = [parse(t) if isinstance(t, str) else t for t in texts]
        return render(self.families(parsed, extra))
