"""Audit lines for the streaming tests, and a real producer to put them in a topic."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from aclgate.pipeline.sample import SampleSpec, write_sample
from aclgate.pipeline.timeutil import parse_user_time, to_micros
from tests.pipeline.helpers import event

START = "2026-11-21T12:00:00Z"
# An allowed super-user decision two hours after the sample: it moves the watermark past every
# window of the sample and adds nothing to denials or ACL usage.
CLOSER = event(
    "User:admin",
    "DESCRIBE",
    "CLUSTER",
    "kafka-cluster",
    "ALLOWED",
    "SUPER_USER",
    ts="2026-11-21T15:00:00.000000Z",
)
# A principal hammering a topic it may not read: 50 denials in the minute 12:05 (an alert).
BURST = [
    json.dumps(
        event(
            "User:mallory",
            "READ",
            "TOPIC",
            "payments.cards",
            "DENIED",
            "DEFAULT_DENY",
            host="10.6.6.6",
            ts=f"2026-11-21T12:05:{i:02d}.500000Z",
        )
    )
    for i in range(50)
]
BAD = ["{oops", json.dumps({"schema_version": 1, "ts": "2026-11-21T12:00:00Z", "count": 1})]
ACL_CHANGE = json.dumps(
    {"schema_version": 1, "event": "acl_change", "ts": "2026-11-21T12:00:00Z", "op": "add"}
)


def sample_lines(
    tmp: Path, events: int, seed: int = 7, minutes: float = 20, start: str = START
) -> list[str]:
    """`events` lines of the synthetic fleet (aclgate audit-sample) over `minutes`."""
    spec = SampleSpec(events, to_micros(parse_user_time(start)), minutes / 60, seed)
    (path,) = write_sample(spec, str(tmp / f"sample-{seed}-{events}.jsonl"), jobs=1)
    return Path(path).read_text(encoding="utf-8").splitlines()


def produce(bootstrap: str, topic: str, lines: list[str]) -> None:
    """Each line one record, keyed by its principal as the proxy's audit sink keys them."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for line in lines:
        try:
            key = json.loads(line).get("principal")
        except ValueError:
            key = None
        producer.produce(topic, line.encode(), key=key.encode() if key else None)
        producer.poll(0)
    assert producer.flush(30) == 0


def expected_denials(lines: list[str]) -> Counter:
    """Denied decisions (sum of count) per principal and resource, computed in Python."""
    out: Counter = Counter()
    for line in lines:
        try:
            e: dict[str, Any] = json.loads(line)
        except ValueError:
            continue
        if e.get("decision") == "DENIED":
            out[(e["principal"], e["resource_type"], e["resource_name"])] += e["count"]
    return out


def valid_count(lines: list[str]) -> tuple[int, int]:
    """(valid decision lines, decisions they stand for)."""
    n = total = 0
    for line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("decision") in ("ALLOWED", "DENIED") and e.get("principal"):
            n += 1
            total += e["count"]
    return n, total
