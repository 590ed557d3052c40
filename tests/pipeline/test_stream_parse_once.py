"""The stream's events query parses each Kafka record's JSON once, and keeps every row it must.

Spark pushes a filter below the projection that computes the filter's columns; from a plain
projection of from_json that made every record be parsed three times (bench/stream_ingest.py).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from aclgate.pipeline.stream import checked_records, event_records
from tests.pipeline.helpers import event

pytestmark = pytest.mark.spark

GOOD = event("User:a", "READ", "TOPIC", "t", "ALLOWED", "NO_ACL_DEFAULT", count=4)
CHANGE = {"schema_version": 1, "event": "acl_change", "ts": GOOD["ts"], "principal": "User:x"}


def kafka_records(spark, values: list[str | None]):
    """Rows shaped like Spark's Kafka source gives them."""
    now = datetime.now(UTC)
    rows = [
        ("audit", 0, offset, now, None if v is None else v.encode())
        for offset, v in enumerate(values)
    ]
    return spark.createDataFrame(
        rows, "topic string, partition int, offset long, timestamp timestamp, value binary"
    )


def test_each_record_is_parsed_once(spark):
    events = event_records(checked_records(kafka_records(spark, [json.dumps(GOOD)])))
    plan = events._jdf.queryExecution().optimizedPlan().toString()
    # one parse of each record: with the event's schema for a line aclgate wrote in its own
    # format, else with the schema of every --audit-format (pipeline/formats.py, parse_line),
    # the two the branches of one CASE, which evaluates one of them
    assert plan.count("from_json(") == 2 and plan.count("CASE WHEN StartsWith(") == 1, plan


def test_rows_kept_and_dropped_as_before(spark):
    values = [
        json.dumps(GOOD),
        "",  # blank: dropped
        json.dumps(CHANGE),  # another event kind: dropped
        "not json",  # malformed: kept, with the reason
        None,  # a record without a value: malformed, kept
        json.dumps({**GOOD, "count": 0}),
        json.dumps(GOOD),
    ]
    rows = event_records(checked_records(kafka_records(spark, values))).collect()
    by_offset = {r["kafka_offset"]: r for r in rows}
    assert sorted(by_offset) == [0, 3, 4, 5, 6]
    assert len(rows) == 5  # none doubled
    assert by_offset[0]["malformed"] is None and by_offset[0]["principal"] == "User:a"
    assert by_offset[0]["date"] is not None
    assert by_offset[3]["malformed"] and by_offset[4]["malformed"]
    assert by_offset[5]["malformed"] == "count < 1: 0"
