"""Reading: every line is a valid event, blank, or malformed with file and line number."""

from __future__ import annotations

import json

import pytest

from aclgate.pipeline.inputs import expand_inputs
from aclgate.pipeline.jobs import InputError, load_audit
from aclgate.pipeline.reader import read_audit
from tests.pipeline.helpers import event, small_log, write_jsonl

pytestmark = pytest.mark.spark

GOOD = event("User:a", "READ", "TOPIC", "t", "ALLOWED", "NO_ACL_DEFAULT", count=4)


def bad(**changes) -> str:
    """A line that parses as JSON but breaks the schema."""
    return json.dumps({**GOOD, **changes})


def missing(field: str) -> str:
    return json.dumps({k: v for k, v in GOOD.items() if k != field})


def test_malformed_lines_are_counted_with_file_and_line(spark, tmp_path, progress):
    plain = write_jsonl(
        tmp_path / "in" / "a.jsonl",
        [GOOD, "not json at all", "", GOOD, missing("principal"), bad(count=0), "   "],
    )
    gz = write_jsonl(
        tmp_path / "in" / "rotated" / "b.jsonl.gz",
        [bad(decision="MAYBE"), GOOD, bad(ts="yesterday"), '{"truncated": ', bad(count="many")],
    )
    loaded = load_audit(spark, [str(tmp_path / "in")], progress, malformed_out=tmp_path / "bad")
    try:
        s = loaded.summary
        assert (s["lines"], s["blank"], s["valid"]) == (12, 2, 3)
        assert s["malformed"]["count"] == 7
        got = [(r["file"], r["line"], r["reason"]) for r in s["malformed"]["sample"]]
        assert got == [
            (str(plain), 2, "not a JSON object of the audit schema"),
            (str(plain), 5, "missing principal"),
            (str(plain), 6, "count < 1: 0"),
            (str(gz), 1, "unknown decision 'MAYBE'"),
            (str(gz), 3, "bad ts 'yesterday'"),
            (str(gz), 4, "not a JSON object of the audit schema"),
            (str(gz), 5, "not a JSON object of the audit schema"),
        ]
        assert loaded.data.events.groupBy().sum("count").first()[0] == 12
        written = [
            json.loads(x)
            for p in (tmp_path / "bad").glob("part-*")
            for x in p.read_text().splitlines()
        ]
        assert len(written) == 7
        assert "warning: 7 malformed line(s)" in progress.stream.getvalue()
    finally:
        loaded.data.release()


def test_acl_change_events_are_counted_apart_not_malformed(spark, tmp_path, progress):
    """The proxy writes `acl_change` events (docs/audit.md) into the same file."""
    change = {
        "schema_version": 1,
        "event": "acl_change",
        "ts": GOOD["ts"],
        "principal": "User:admin",
        "api": "CreateAcls",
        "result": "COMMITTED",
        "added": [],
        "removed": [],
    }
    write_jsonl(tmp_path / "in" / "a.jsonl", [GOOD, json.dumps(change), GOOD])
    loaded = load_audit(spark, [str(tmp_path / "in")], progress)
    try:
        s = loaded.summary
        assert (s["lines"], s["other_events"], s["valid"], s["malformed"]["count"]) == (3, 1, 2, 0)
        assert loaded.data.events.count() == 2
    finally:
        loaded.data.release()


def test_line_numbers_survive_split_files(spark, tmp_path):
    """A plain file read in many splits still gets exact line numbers for its bad lines."""
    from aclgate.pipeline.malformed import malformed_lines, malformed_sample

    lines: list = [GOOD] * 3000
    for n in (1, 777, 1500, 2999, 3000):
        lines[n - 1] = f"broken line {n}"
    path = write_jsonl(tmp_path / "big.jsonl", lines)
    spark.conf.set("spark.sql.files.maxPartitionBytes", "65536")
    try:
        data = read_audit(spark, expand_inputs([str(path)]))
        assert data.lines.rdd.getNumPartitions() > 5
        sample = malformed_sample(malformed_lines(data), 10)
        assert [r["line"] for r in sample] == [1, 777, 1500, 2999, 3000]
        assert sample[1]["text"] == "broken line 777"
        data.release()
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")


def test_parquet_input_and_time_window(spark, tmp_path, progress):
    from aclgate.pipeline.schema import audit_schema

    rows = small_log()
    frame = spark.createDataFrame(
        [tuple(r.get(f.name) for f in audit_schema()) for r in rows], audit_schema()
    )
    frame.write.parquet(str(tmp_path / "pq"))
    write_jsonl(tmp_path / "jl" / "x.jsonl", rows)
    loaded = load_audit(
        spark,
        [str(tmp_path / "pq"), str(tmp_path / "jl")],
        progress,
        since=_ts("2026-11-21T12:01:00Z"),
        until=_ts("2026-11-21T12:06:00Z"),
    )
    try:
        assert loaded.summary["malformed"]["count"] == 0
        assert loaded.summary["valid"] == 18
        events = loaded.data.events
        # ts in [12:01, 12:06): lines 2..6 of each copy = 1 + 3 + 1 + 1 + 1 events.
        assert events.count() == 10
        assert events.groupBy().sum("count").first()[0] == 14
    finally:
        loaded.data.release()


def test_missing_path_is_an_error_not_an_empty_report(spark, tmp_path, progress):
    with pytest.raises(InputError, match="no such file"):
        load_audit(spark, [str(tmp_path / "nope")], progress)


def _ts(text: str):
    from aclgate.pipeline.timeutil import parse_user_time

    return parse_user_time(text)
