"""What must hold after a batch of fuzz cases, as lists of problems (empty: all good).

* Upstream: every frame the recording upstream got parses (header and body, kio) as a request
  of an API key and version the proxy advertises, is a frame some client sent (or the proxy's
  own re-encoding of it, same header), never comes from an unauthenticated SASL connection nor
  after a frame the proxy must have closed on, names no topic, group or transactional id the
  ACLs deny, and no upstream connection holds half a frame.
* Client side: every answer is a whole frame whose correlation id is that of a request the
  client sent, in request order; a clean (unmutated) case gets its sentinel answered.
* Accounting: every connection's end is counted once, under a kind documented in
  docs/operations.md (`aclgate_errors_total{kind}`, `aclgate_connection_timeouts_total{kind}`)
  or as a normal close (the proxy's `aclgate.connection` log: a client that disconnected, or a
  deliberate close such as Kafka's acks=0 denial); `internal_error` stays 0.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aclgate.protocol.codec import decode_request
from aclgate.protocol.enforce.base import HeaderCheck
from aclgate.protocol.enforce.groupfirst import GroupFirst
from aclgate.protocol.enforce.peek import peek_first_string
from aclgate.protocol.enforce.table import TABLE
from aclgate.protocol.header import parse_request_header
from aclgate.proxy.ops.ratelimit import LIMITED_LEVEL

from .client import Outcome
from .corpus import API_VERSIONS, SASL_HANDSHAKE, SIZE, Parsed, parse, split_frames

REPO = Path(__file__).resolve().parents[2]
#: client ids of the proxy's own upstream connections (proxy/upstream/connector.py)
CONTROL_CLIENT_IDS = ("aclgate", "aclgate-control", "aclgate-bulk")
#: targets whose cases are never authenticated: nothing of theirs may reach the cluster
UNAUTHENTICATED = ("sasl-pre",)
#: the closes without a `kind` that are not a problem (the proxy's INFO close line): Kafka's
#: deliberate close of a denied acks=0 Produce, and a broker that closed an idle connection
DELIBERATE = (r"acks=0", r"^upstream broker closed the connection$")


def sent_frames(outcome: Outcome) -> list[bytes]:
    """The whole frames of what the client managed to write, cut as the proxy cuts them."""
    return split_frames(outcome.case.data[: outcome.sent])[0]


#: APIs whose cluster check is decided on the header and whose denied answer counts one
#: array's entries (`HeaderCheck`): a denied one is answered without its body being read,
#: parsable or not (docs/design.md, "Per-API request size limits"). The others decided on the
#: header (`MirroredCheck`) walk the body for their answer and close on one kio cannot parse.
DECIDED_ON_HEADER = frozenset(
    int(k) for k, row in TABLE.items() if isinstance(row.header_check, HeaderCheck)
)


#: APIs decided on their group id, read in place (`GroupFirst`): a denied one is answered
#: without the rest of its body being read, parsable or not (docs/design.md)
GROUP_FIRST = frozenset(int(k) for k, row in TABLE.items() if isinstance(row.handler, GroupFirst))


def answered_unread(frame: bytes, p: Parsed, allowed: set[str] | None) -> bool:
    """A GroupFirst request whose body kio refuses but whose group id reads and is denied
    to a target with ACLs (`allowed`): answered 30, the connection going on."""
    if allowed is None or p.api_key not in GROUP_FIRST or not (p.error or "").startswith("body:"):
        return False
    group = peek_first_string(frame, parse_request_header(frame))
    return group is not None and group not in allowed


def stop_index(
    parsed: Sequence[Parsed],
    advertised: Mapping[int, tuple[int, int]],
    cluster_denied: bool = False,
    unread: Sequence[bool] = (),
) -> int:
    """Index of the first frame the proxy must close the connection on; frames from there on
    can never be forwarded. An ApiVersions newer than the proxy parses is answered
    UNSUPPORTED_VERSION and the connection goes on (KIP-511); with `cluster_denied` (the
    target's principal has no right on the cluster), so is a DECIDED_ON_HEADER request
    whose body does not parse, answered CLUSTER_AUTHORIZATION_FAILED unread; so is a frame
    `unread[i]` marks (`answered_unread`)."""
    for i, p in enumerate(parsed):
        if p.error is None:
            low, high = advertised.get(p.api_key, (1, 0))
            if low <= p.api_version <= high:
                continue
        elif p.api_key == API_VERSIONS and p.error.startswith("unsupported api_key=18"):
            continue
        elif (
            cluster_denied and p.api_key in DECIDED_ON_HEADER and p.error.startswith("body:")
        ) or (i < len(unread) and unread[i]):
            low, high = advertised.get(p.api_key, (1, 0))
            if low <= (p.api_version or 0) <= high:
                continue
        return i
    return len(parsed)


#: fields that name a topic, group or transactional id (str), and lists of such names
NAME_FIELDS = {"topic", "topic_name", "group_id", "transactional_id"}
NAME_LISTS = {"groups", "group_ids", "transactional_ids", "topic_names"}
#: resource types whose `resource_name` is a topic or a group (DescribeConfigs and friends)
NAMED_RESOURCE_TYPES = {2, 32}


def transactional_produce(body: Any) -> bool:
    """Kafka's RequestUtils.hasTransactionalRecords: the first batch of some partition is
    transactional (magic 2, attributes bit 4). Only then does Kafka check the Produce's
    transactional id (written out here, not imported: the check must not share a bug)."""
    for topic in body.topic_data or ():
        for partition in topic.partition_data or ():
            records = partition.records
            if records and len(records) >= 23 and records[16] == 2 and records[22] & 0x10:
                return True
    return False


def resource_names(body: Any, parent: str = "") -> Iterator[str]:
    """Every topic, group and transactional id a decoded request names (not topic ids), as
    far as Kafka's authorization looks at it."""
    if dataclasses.is_dataclass(body):
        produce = type(body).__name__ == "ProduceRequest"
        for f in dataclasses.fields(body):
            value = getattr(body, f.name)
            if isinstance(value, str):
                named = f.name in NAME_FIELDS or (f.name == "name" and "topic" in parent)
                if produce and f.name == "transactional_id":
                    named = transactional_produce(body)
                if f.name == "resource_name":
                    named = getattr(body, "resource_type", None) in NAMED_RESOURCE_TYPES
                if f.name == "key" and type(body).__name__ == "FindCoordinatorRequest":
                    named = True
                if named:
                    yield value
            elif isinstance(value, tuple):
                if f.name in NAME_LISTS or f.name == "coordinator_keys":
                    yield from (v for v in value if isinstance(v, str))
                else:
                    for item in value:
                        yield from resource_names(item, f.name)
            elif dataclasses.is_dataclass(value):
                yield from resource_names(value, f.name)


@dataclass
class Sent:
    outcome: Outcome
    index: int
    frame: bytes
    stop: int


@dataclass
class UpstreamReport:
    problems: list[str] = field(default_factory=list)
    forwarded: int = 0
    reencoded: int = 0
    control: int = 0
    by_api: Counter = field(default_factory=Counter)


def check_upstream(
    frames: Iterable[tuple[int, bytes]],
    partial: Mapping[int, bytes],
    outcomes: Sequence[Outcome],
    forwardable: Mapping[int, tuple[int, int]],
    advertised: Mapping[str, Mapping[int, tuple[int, int]]],
    allowed_names: Mapping[str, set[str]] | None = None,
) -> UpstreamReport:
    """`forwardable`: what may reach the cluster (the PLAINTEXT listener's ApiVersions);
    `advertised`: per target, what the proxy serves there (SASL APIs included);
    `allowed_names`: per target with ACLs, the only topic, group and transactional id names
    its principal may use (a forwarded request naming another is an authorization bypass)."""
    report = UpstreamReport()
    registry: dict[tuple, list[Sent]] = defaultdict(list)
    for outcome in outcomes:
        raw = sent_frames(outcome)
        parsed = [parse(f) for f in raw]
        target = outcome.case.target
        # the targets with ACLs grant nothing on the cluster (tests/fuzz/test_tcp_fuzz.py)
        allowed = (allowed_names or {}).get(target)
        unread = [answered_unread(f, p, allowed) for f, p in zip(raw, parsed, strict=True)]
        stop = stop_index(parsed, advertised[target], target in (allowed_names or {}), unread)
        for i, (frame, p) in enumerate(zip(raw, parsed, strict=True)):
            if p.api_key is not None:
                registry[p.ids].append(Sent(outcome, i, frame, stop))
    for conn, frame in frames:
        p = parse(frame)
        where = f"upstream connection {conn}, frame {frame[:96].hex()}{'...' if len(frame) > 96 else ''}"
        if p.error is not None:
            report.problems.append(f"forwarded a frame that does not parse ({p.error}); {where}")
            continue
        low, high = forwardable.get(p.api_key, (1, 0))
        if not low <= p.api_version <= high:
            report.problems.append(
                f"forwarded api_key={p.api_key} v{p.api_version}, not advertised; {where}"
            )
        candidates = registry.get(p.ids)
        if not candidates:
            if p.client_id in CONTROL_CLIENT_IDS:
                report.control += 1
            else:
                report.problems.append(f"forwarded a frame no client sent; {where}")
            continue
        report.forwarded += 1
        report.by_api[p.api_key] += 1
        ok = [
            c
            for c in candidates
            if c.outcome.case.target not in UNAUTHENTICATED and c.index < c.stop
        ]
        if not ok:
            c = candidates[0]
            why = (
                "from a SASL connection that never authenticated"
                if c.outcome.case.target in UNAUTHENTICATED
                else f"frame #{c.index} of its case, after frame #{c.stop} the proxy must close on"
            )
            report.problems.append(
                f"forwarded a frame it must have refused ({why}); {where}; "
                f"{c.outcome.case.describe()}"
            )
        else:
            if all(c.frame != frame for c in ok):
                report.reencoded += 1
            allowed = (allowed_names or {}).get(ok[0].outcome.case.target)
            if allowed is not None:
                header = parse_request_header(frame)
                denied = sorted(set(resource_names(decode_request(frame, header))) - allowed)
                if denied:
                    report.problems.append(
                        f"forwarded a request naming {denied}, which the ACLs deny; {where}; "
                        f"{ok[0].outcome.case.describe()}"
                    )
    for conn, rest in partial.items():
        report.problems.append(
            f"upstream connection {conn} holds part of a frame ({len(rest)} bytes): {rest[:64].hex()}"
        )
    return report


def check_responses(outcome: Outcome, expect_served: bool = True) -> list[str]:
    """Answers to one case: whole frames, correlation ids of its requests, in order; with
    `expect_served`, an unmutated case is answered to the end."""
    case = outcome.case
    problems = []
    if outcome.error is not None:
        problems.append(f"{outcome.error}; {case.describe()}")
    if outcome.login_error is not None:
        problems.append(f"SASL login failed: {outcome.login_error}; {case.describe()}")
    if expect_served and case.clean and not outcome.sentinel_answered:
        state = "closed it" if outcome.proxy_closed else "did not answer in time"
        problems.append(
            f"an unmutated request was not served (the proxy {state}); {case.describe()}"
        )
    parsed = [parse(f) for f in sent_frames(outcome)]
    if case.no_tls or any(p.api_key == SASL_HANDSHAKE and p.api_version == 0 for p in parsed):
        return problems  # not TLS / bare SASL tokens: answers without a Kafka header
    expected = [p.correlation_id for p in parsed if p.correlation_id is not None]
    answers, rest = split_frames(outcome.received)
    if rest and outcome.proxy_closed:
        problems.append(f"half an answer before the close: {rest[:64].hex()}; {case.describe()}")
    cursor = 0
    for answer in answers:
        if len(answer) < 8:
            problems.append(f"an answer of {len(answer) - 4} bytes; {case.describe()}")
            break
        (correlation_id,) = SIZE.unpack_from(answer, 4)
        try:
            cursor = expected.index(correlation_id, cursor) + 1
        except ValueError:
            problems.append(
                f"an answer with correlation id {correlation_id}, not that of a request sent "
                f"after the previous answer's ({expected}); {case.describe()}"
            )
            break
    return problems


# ------------------------------------------------------------------------------ accounting


class CloseLog(logging.Handler):
    """Counts the proxy's normal-close lines and keeps a few problem lines (thread-safe).

    Installed on `aclgate.connection` and `aclgate.tls` at DEBUG with propagation off for the
    run, so thousands of close lines do not pile up in pytest's log capture."""

    LOGGERS = ("aclgate.connection", "aclgate.tls")

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.counts: Counter = Counter()
        #: closes for a problem without a `kind` (reason, digits as N -> count), since `take`
        self.uncounted: Counter = Counter()
        self.samples: list[str] = []
        self.internal: list[str] = []
        self._saved: list[tuple[logging.Logger, int, bool]] = []
        self._mutex = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.msg
        # a line held back by the log rate limit still comes, at DEBUG, with its own level
        level = getattr(record, LIMITED_LEVEL, record.levelno)
        with self._mutex:
            if msg == "client %s disconnected":
                self.counts["disconnected"] += 1
            elif level == logging.INFO and str(msg).startswith("closing connection"):
                reason = str(record.args[-1]) if record.args else ""
                if any(re.search(p, reason) for p in DELIBERATE):
                    self.counts["closed_normally"] += 1
                else:  # a close for a problem, but without a kind: counted nowhere
                    self.counts["closed_uncounted"] += 1
                    self.uncounted[re.sub(r"\d+", "N", reason)[:100]] += 1
            elif str(msg).startswith("TLS handshake with %s ended"):
                self.counts["tls_abandoned"] += 1
            if level >= logging.WARNING:
                text = record.getMessage()
                if "internal error" in text:
                    self.internal.append(text)
                elif len(self.samples) < 20:
                    self.samples.append(text)

    def __enter__(self) -> CloseLog:
        for name in self.LOGGERS:
            logger = logging.getLogger(name)
            self._saved.append((logger, logger.level, logger.propagate))
            logger.setLevel(logging.DEBUG)
            logger.propagate = False
            logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        for logger, level, propagate in self._saved:
            logger.removeHandler(self)
            logger.setLevel(level)
            logger.propagate = propagate
        self._saved.clear()

    def peek(self) -> Counter:
        with self._mutex:
            return Counter(self.counts)

    def take(self) -> tuple[Counter, Counter]:
        """The counts and the uncounted closes' reasons since the last call."""
        with self._mutex:
            counts, self.counts = self.counts, Counter()
            uncounted, self.uncounted = self.uncounted, Counter()
        return counts, uncounted


@dataclass
class Snapshot:
    connections: float = 0.0
    errors: Counter = field(default_factory=Counter)
    timeouts: Counter = field(default_factory=Counter)
    active: float = 0.0

    def __sub__(self, other: Snapshot) -> Snapshot:
        return Snapshot(
            self.connections - other.connections,
            Counter(
                {k: v - other.errors[k] for k, v in self.errors.items() if v - other.errors[k]}
            ),
            Counter(
                {
                    k: v - other.timeouts[k]
                    for k, v in self.timeouts.items()
                    if v - other.timeouts[k]
                }
            ),
            self.active,
        )


def snapshot(proxies: Iterable[Any]) -> Snapshot:
    """The connection and close counters of these RunningProxy objects, summed."""
    snap = Snapshot()
    for proxy in proxies:
        for metric in proxy.server.metrics.registry.collect():
            for s in metric.samples:
                if s.name == "aclgate_connections_total":
                    snap.connections += s.value
                elif s.name == "aclgate_connections_active":
                    snap.active += s.value
                elif s.name == "aclgate_errors_total":
                    snap.errors[s.labels["kind"]] += s.value
                elif s.name == "aclgate_connection_timeouts_total":
                    snap.timeouts[s.labels["kind"]] += s.value
    return snap


def documented_kinds(metric: str) -> set[str]:
    """The `kind` values docs/operations.md lists for `metric` (its table row)."""
    for line in (REPO / "docs" / "operations.md").read_text().splitlines():
        if line.startswith(f"| `{metric}`"):
            return set(re.findall(r"`([a-z_]+)`", line)) - {metric, "kind"}
    raise AssertionError(f"{metric} is not in docs/operations.md")


def _ends(delta: Snapshot, closes: Counter) -> tuple[float, float]:
    """(connection ends accounted for, TLS handshakes that never became a connection)."""
    handshakes = delta.errors.get("tls_handshake", 0)
    ended = (
        sum(delta.errors.values())
        - handshakes
        + sum(delta.timeouts.values())
        + closes["disconnected"]
        + closes["closed_normally"]
        + closes["closed_uncounted"]
    )
    return ended, handshakes + closes["tls_abandoned"]


def balanced(delta: Snapshot, closes: Counter, tcp_connections: int) -> bool:
    """Every connection has ended and been accounted for (a failed TLS handshake is counted
    a moment after the client has gone: worth waiting for)."""
    ended, not_accepted = _ends(delta, closes)
    return ended == delta.connections and delta.connections + not_accepted == tcp_connections


def check_accounting(
    delta: Snapshot, closes: Counter, uncounted: Counter, tcp_connections: int
) -> list[str]:
    problems = []
    errors, timeouts = delta.errors, delta.timeouts
    handshakes = errors.get("tls_handshake", 0)
    ended, _ = _ends(delta, closes)
    if uncounted:
        problems.append(
            f"{sum(uncounted.values())} connection(s) closed for a problem without an "
            f"aclgate_errors_total kind (only an INFO line): {dict(uncounted.most_common(8))}"
        )
    if ended != delta.connections:
        problems.append(
            f"{delta.connections:.0f} connections accepted, {ended:.0f} ends accounted for: "
            f"errors {dict(errors)}, timeouts {dict(timeouts)}, normal closes {dict(closes)}"
        )
    reached = delta.connections + handshakes + closes["tls_abandoned"]
    if reached != tcp_connections:
        problems.append(
            f"the clients opened {tcp_connections} TCP connections, the proxy accounts for "
            f"{reached:.0f} ({delta.connections:.0f} accepted, {handshakes:.0f} failed TLS "
            f"handshakes, {closes['tls_abandoned']} abandoned ones)"
        )
    if errors.get("internal_error"):
        problems.append(f"internal_error closes: {errors['internal_error']:.0f}")
    for name, counted in (
        ("aclgate_errors_total", errors),
        ("aclgate_connection_timeouts_total", timeouts),
    ):
        undocumented = set(counted) - documented_kinds(name)
        if undocumented:
            problems.append(
                f"{name} counted kinds docs/operations.md does not list: {sorted(undocumented)}"
            )
    return problems
