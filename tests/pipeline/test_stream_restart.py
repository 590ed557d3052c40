"""A killed `aclgate stream` restarted with its checkpoint neither loses nor double-counts.

The job runs as users run it (`aclgate stream`, its own process group: the Python driver, the
JVM and the Python workers) with small micro-batches. Once it has committed a few batches of
the first half of the events, the second half is produced, and the whole group gets SIGKILL
while batches are being written. The same command restarted with the same checkpoint (and
--available-now, to drain the topic and stop) must leave every produced event in events/
exactly once and every denial in exactly one window, with each alert written once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from aclgate.pipeline.inputs import expand_inputs
from aclgate.pipeline.sinklog import committed_files, last_batch
from tests.pipeline.conftest import require_kafka_jars, require_spark
from tests.pipeline.stream_helpers import (
    CLOSER,
    expected_denials,
    produce,
    sample_lines,
    valid_count,
)

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
THRESHOLD = 2


def stream_command(bootstrap: str, topic: str, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "aclgate",
        "stream",
        "--kafka-bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--out",
        str(out),
        "--master",
        "local[2]",
        "--conf",
        "spark.sql.shuffle.partitions=2",
        "--alert-threshold",
        str(THRESHOLD),
        *extra,
    ]


def wait_for_batches(sink: Path, batches: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 120
    while last_batch(sink) < batches - 1:
        if proc.poll() is not None:
            pytest.fail(f"aclgate stream exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {batches} batches in {sink} after 120 s:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)


def test_killed_stream_neither_loses_nor_double_counts(spark, kafka_single, tmp_path):
    require_spark()
    require_kafka_jars()
    topic = "audit-stream-restart"
    kafka_single.create_topic(topic, partitions=2)
    first = sample_lines(tmp_path, 4000, seed=11)
    second = [
        *sample_lines(tmp_path, 2000, seed=12, start="2026-11-21T12:20:00Z"),
        json.dumps(CLOSER),
    ]
    produce(kafka_single.bootstrap, topic, first)
    out = tmp_path / "out"
    log = tmp_path / "stream.log"
    command = stream_command(kafka_single.bootstrap, topic, out)
    with log.open("w") as sink_log:
        proc = subprocess.Popen(
            [*command, "--trigger", "0.2", "--max-offsets-per-trigger", "250"],
            cwd=ROOT,
            stdout=sink_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_for_batches(out / "events", 3, proc, log)
            produce(kafka_single.bootstrap, topic, second)
            wait_for_batches(out / "events", 5, proc, log)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    lines = first + second
    n, total = valid_count(lines)
    before = spark.read.parquet(*committed_files(out / "events")).count()
    assert 0 < before < n, "the kill should come while events are still being read"

    restarted = subprocess.run(
        [*command, "--available-now"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert restarted.returncode == 0, restarted.stderr[-3000:]

    events = spark.read.parquet(str(out / "events")).filter("malformed IS NULL")
    assert events.count() == n
    # what report/advise/whatif read: the files the sink log lists, not all files on disk
    listed = expand_inputs([str(out / "events")]).parquet
    assert spark.read.parquet(*listed).count() == n
    assert events.select("kafka_partition", "kafka_offset").distinct().count() == n
    assert events.agg({"count": "sum"}).first()[0] == total

    denials = spark.read.parquet(str(out / "denials")).collect()
    per_key: Counter = Counter()
    for r in denials:
        per_key[(r.principal, r.resource_type, r.resource_name)] += r.denied
    assert per_key == expected_denials(lines)
    windows = [(r.window_start, r.principal, r.resource_type, r.resource_name) for r in denials]
    assert len(windows) == len(set(windows))

    alerts = [json.loads(x) for x in (out / "alerts.jsonl").read_text().splitlines()]
    keys = [(a["window_start"], a["principal"], a["resource_name"]) for a in alerts]
    assert len(keys) == len(set(keys)) == sum(1 for r in denials if r.denied >= THRESHOLD) > 0
