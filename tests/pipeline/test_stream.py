"""`aclgate stream` against a real Apache Kafka topic, compared with batch `report`.

The audit lines (the synthetic fleet of `aclgate audit-sample`, with aggregated lines,
dry-run denials and ACL-decided events, plus a malformed line, an event without a principal
and an `acl_change` line) are produced with confluent-kafka into a 3-partition topic. The
stream drains the topic (availableNow); its windows are compared with `aclgate report` over a
JSON Lines file holding the same lines, and `report` then reads the stream's events/ Parquet
and the topic itself (--kafka-bootstrap/--topic) and must say the same.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import pytest

from aclgate.pipeline.kafkasource import KafkaInput
from aclgate.pipeline.report import ReportOptions, run_report
from aclgate.pipeline.sample import policy_files
from aclgate.pipeline.schema import ACL_FIELDS
from aclgate.pipeline.spark import Progress
from aclgate.pipeline.stream import StreamOptions, run_stream
from tests.pipeline.conftest import require_kafka_jars
from tests.pipeline.helpers import aclgate, write_acl_file
from tests.pipeline.stream_helpers import (
    ACL_CHANGE,
    BAD,
    BURST,
    CLOSER,
    expected_denials,
    produce,
    sample_lines,
    valid_count,
)

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

THRESHOLD = 40
# the figures of summary.json that must not depend on where the events came from
SAME = ("events", "lines", "decisions", "denied_enforced", "denied_dry_run", "rules", "distinct")


@pytest.fixture(scope="module")
def streamed(spark, kafka_single, tmp_path_factory):
    """One topic, one stream run over it, one report over the same lines from a file."""
    require_kafka_jars()
    root = tmp_path_factory.mktemp("stream")
    lines = [*sample_lines(root, 3000), *BURST, *BAD, ACL_CHANGE, json.dumps(CLOSER)]
    topic = "audit-stream-windows"
    kafka_single.create_topic(topic, partitions=3)
    produce(kafka_single.bootstrap, topic, lines)
    (root / "audit.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    acls = write_acl_file(root / "acls.json", policy_files()[0])

    source = KafkaInput(kafka_single.bootstrap, topic)
    opts = StreamOptions(
        kafka=source, out=str(root / "out"), available_now=True, alert_threshold=THRESHOLD
    )
    result = run_stream(spark, opts, Progress("stream", 2, io.StringIO()))

    def report(name: str, audit: list[str], kafka: KafkaInput | None = None) -> dict:
        o = ReportOptions(audit=audit, out=str(root / name), acl_file=str(acls), kafka=kafka)
        return run_report(spark, o, Progress("report", o.stages(), io.StringIO()))

    batch = report("from-file", [str(root / "audit.jsonl")])
    return {
        "lines": lines,
        "root": root,
        "out": root / "out",
        "result": result,
        "batch": batch,
        "report": report,
        "source": source,
    }


def test_events_table_holds_every_valid_event_once(spark, streamed):
    table = spark.read.parquet(str(streamed["out"] / "events"))
    events = table.filter("malformed IS NULL")
    n, total = valid_count(streamed["lines"])
    assert events.count() == n == streamed["batch"]["lines"]
    assert events.agg({"count": "sum"}).first()[0] == total == streamed["batch"]["events"]
    assert events.select("kafka_partition", "kafka_offset").distinct().count() == n
    assert {p.name for p in (streamed["out"] / "events").iterdir()} >= {
        "_spark_metadata",
        "date=2026-11-21",
    }
    bad = table.filter("malformed IS NOT NULL").collect()
    assert sorted((b.malformed, b._corrupt_record, b.event_time) for b in bad) == [
        ("missing principal", None, None),
        ("not a JSON object of the audit schema", "{oops", None),
    ]
    assert streamed["result"]["events_rows_read"] == len(streamed["lines"])


def test_denial_windows_match_the_batch_report(spark, streamed):
    denials = spark.read.parquet(str(streamed["out"] / "denials")).collect()
    per_key: Counter = Counter()
    for r in denials:
        per_key[(r.principal, r.resource_type, r.resource_name)] += r.denied
        assert (r.window_end - r.window_start).total_seconds() == 60
        assert r.denied == r.denied_enforced + r.denied_dry_run
    batch: Counter = Counter()
    for r in spark.read.parquet(
        str(streamed["root"] / "from-file" / "denied" / "parquet")
    ).collect():
        batch[(r.principal, r.resource_type, r.resource_name)] += r["count"]
    assert per_key == batch == expected_denials(streamed["lines"])
    assert len(per_key) >= 3 and sum(per_key.values()) == streamed["batch"]["decisions"]["DENIED"]
    assert sum(r.denied_dry_run for r in denials) == streamed["batch"]["denied_dry_run"] > 0


def test_alerts_are_the_windows_over_the_threshold(spark, streamed):
    denials = spark.read.parquet(str(streamed["out"] / "denials")).collect()
    over = sorted(
        (r.principal, r.resource_name, r.denied) for r in denials if r.denied >= THRESHOLD
    )
    assert ("User:mallory", "payments.cards", 50) in over
    assert sorted((r.principal, r.resource_name, r.denied) for r in denials if r.alert) == over
    alerts = [json.loads(x) for x in (streamed["out"] / "alerts.jsonl").read_text().splitlines()]
    assert sorted((a["principal"], a["resource_name"], a["denied"]) for a in alerts) == over
    assert all(a["window_start"].endswith(":00.000000Z") for a in alerts)


def test_acl_usage_windows_match_the_batch_report(spark, streamed):
    windows = spark.read.parquet(str(streamed["out"] / "acl_usage")).collect()
    stream: Counter = Counter()
    for r in windows:
        acl = tuple(r[name] for name in ACL_FIELDS)
        stream[(acl, "decisions")] += r.decisions
        stream[(acl, "allowed")] += r.allowed
        stream[(acl, "denied")] += r.denied
    batch: Counter = Counter()
    for r in spark.read.parquet(str(streamed["root"] / "from-file" / "acl_usage")).collect():
        if r.decisions:
            acl = tuple(r[name] for name in ACL_FIELDS)
            for column in ("decisions", "allowed", "denied"):
                batch[(acl, column)] += r[column]
    assert +stream == +batch
    assert len({acl for acl, _ in batch}) >= 10


def test_report_reads_the_streams_parquet(streamed):
    from_parquet = streamed["report"]("from-parquet", [str(streamed["out"] / "events")])
    for key in SAME:
        assert from_parquet[key] == streamed["batch"][key], key
    assert from_parquet["top"] == streamed["batch"]["top"]
    assert from_parquet["acl_usage"]["removable"] == streamed["batch"]["acl_usage"]["removable"]
    # the malformed records the stream kept are found again, with the same reasons
    bad = from_parquet["inputs"]["malformed"]
    assert bad["count"] == 2
    assert sorted((b["reason"], b["text"]) for b in bad["sample"])[1] == (
        "not a JSON object of the audit schema",
        "{oops",
    )
    assert len(from_parquet["inputs"]["files"]["parquet"]) >= 1


def test_report_reads_the_topic(streamed):
    from_topic = streamed["report"]("from-topic", [], streamed["source"])
    for key in SAME:
        assert from_topic[key] == streamed["batch"][key], key
    assert from_topic["acl_usage"]["removable"] == streamed["batch"]["acl_usage"]["removable"]
    inputs = from_topic["inputs"]
    assert inputs["kafka"] == {
        "bootstrap": streamed["source"].bootstrap,
        "topic": "audit-stream-windows",
    }
    assert (inputs["lines"], inputs["other_events"]) == (len(streamed["lines"]), 1)
    bad = inputs["malformed"]
    assert bad["count"] == 2
    assert {b["file"] for b in bad["sample"]} <= {
        f"kafka:audit-stream-windows/{p}" for p in range(3)
    }


def test_missing_jars_are_a_clear_error(tmp_path):
    empty = tmp_path / "no-jars"
    empty.mkdir()
    for args in (
        ["stream", "--out", str(tmp_path / "s")],
        ["report", "--out", str(tmp_path / "r")],
    ):
        done = aclgate(
            *args, "--kafka-bootstrap", "127.0.0.1:1", "--topic", "t", "--spark-jars", str(empty)
        )
        assert done.returncode == 3, done.stderr
        assert f"is not in {empty}: run `make spark-jars`" in done.stderr
        assert "Traceback" not in done.stderr


def test_kafka_options_go_together(tmp_path):
    done = aclgate("report", "--out", str(tmp_path / "r"), "--topic", "t")
    assert done.returncode == 2
    assert "--kafka-bootstrap and --topic go together" in done.stderr
    done = aclgate("report", "--out", str(tmp_path / "r"))
    assert done.returncode == 2
    assert "give --audit PATH..., or --kafka-bootstrap and --topic" in done.stderr


def test_sink_log_hides_uncommitted_files(tmp_path):
    """A file a killed batch left behind is not input; a compaction replaces older logs."""
    from aclgate.pipeline.inputs import expand_inputs

    sink = tmp_path / "events"
    log = sink / "_spark_metadata"
    (sink / "date=2026-11-21").mkdir(parents=True)
    log.mkdir()
    files = [sink / "date=2026-11-21" / f"part-{i}.parquet" for i in range(4)]
    for f in files:
        f.write_bytes(b"x")

    def entry(path: Path, action: str = "add") -> str:
        uri = "file://" + str(path).replace("=", "%3D")
        return json.dumps({"path": uri, "size": 1, "isDir": False, "action": action})

    (log / "9.compact").write_text("v1\n" + entry(files[0]) + "\n" + entry(files[1]) + "\n")
    (log / "8").write_text("v1\n" + entry(files[3]) + "\n")  # older than the compaction
    (log / "10").write_text("v1\n" + entry(files[2]) + "\n" + entry(files[1], "delete") + "\n")
    (log / ".11.tmp").write_text("v1\n" + entry(files[3]) + "\n")  # being written: not committed
    listed = expand_inputs([str(tmp_path)])
    assert listed.parquet == [str(files[0]), str(files[2])]
    assert listed.jsonl == []
