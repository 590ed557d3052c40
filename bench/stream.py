"""Streaming benchmark: `aclgate stream` at 50,000 audit events/s, and `report` from its Parquet.

    python -m bench.stream                                  # the recorded run
    python -m bench.stream --rate 20000 --seconds 30 --report-events 1000000   # quick

On one Apache Kafka 4.3.1 node (tests/kafka), a 2-partition topic:

1. Live: `aclgate stream --master local[2]` runs; Kafka's ProducerPerformance sends --rate
   records/s for --seconds, each record one line of the proxy's audit format (a payload file
   of lines made by `aclgate audit-sample`, picked at random). Measured: the rate the producer
   achieved, the stream's sustained rate (records committed to events/ over the time from the
   producer's start to the last commit) and how long after the producer's end the stream was
   done (its lag); the end-to-end delay per record, from the record's Kafka timestamp (taken
   by the producer when it sends: where the proxy's decision becomes an audit record) to the
   commit of the Parquet file holding it (the mtime of the sink log entry that commits the
   batch), p50 / p99 / max over all records.
2. Report: --report-events records are sent as fast as the producer goes into a second topic,
   `aclgate stream --available-now` writes them to Parquet, and `aclgate report --audit
   OUT/events --acl-file ... --master local[2]` runs on that (wall time, peak RSS of its
   process tree), as bench/pipeline.py measures the report from JSON Lines.

The 2 cores are shared with the broker, the producer and anything else running: the load
average is recorded. Writes bench/results/<stem>.json and .md (--stem, default stream).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from bench.pipeline import ROOT, Sampler, aclgate, measure

RESULTS = Path(__file__).parent / "results"


def _payload(data: Path, lines: int) -> tuple[Path, Path]:
    subprocess.run(
        aclgate(
            "audit-sample", "--events", str(lines), "--out", str(data / "payload.jsonl"),
            "--hours", "1", "--start", "2026-11-21T12:00:00Z", "--acls-out", str(data / "acls.json"),
        ),
        cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip
    return data / "payload.jsonl", data / "acls.json"


def _produce(bootstrap: str, topic: str, payload: Path, records: int, rate: int) -> dict:
    from tests.kafka.tools import run_tool

    started = time.time()
    result = run_tool(
        "kafka-producer-perf-test",
        "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
        "--throughput", str(rate), "--payload-file", str(payload),
        "--command-property", "linger.ms=5", "--command-property", "batch.size=262144",
        "--command-property", "compression.type=lz4",
        timeout=records / max(rate, 20000) + 600,
    ).check()  # fmt: skip
    ended = time.time()
    summary = result.stdout.strip().splitlines()[-1]
    achieved = float(re.search(r"([\d.]+) records/sec", summary).group(1))  # type: ignore[union-attr]
    return {
        "started": started,
        "ended": ended,
        "records_per_s": round(achieved),
        "summary": summary,
    }


def _stream(bootstrap: str, topic: str, out: Path, log: Path, *extra: str) -> subprocess.Popen:
    cmd = aclgate(
        "stream", "--kafka-bootstrap", bootstrap, "--topic", topic, "--out", str(out),
        "--master", "local[2]", "--alert-threshold", "1000", *extra,
    )  # fmt: skip
    return subprocess.Popen(
        cmd, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )


def _committed_records(log: Path) -> int:
    return sum(
        int(m.group(1).replace(",", ""))
        for m in re.finditer(r"events batch \d+: ([\d,]+) records", log.read_text())
    )


def _delays(out: Path) -> dict:
    """Per record: commit time of its batch minus its Kafka timestamp (seconds)."""
    from pyspark.sql import functions as F

    from aclgate.pipeline.sinklog import commit_time, committed_batches
    from aclgate.pipeline.spark import build_session

    sink = out / "events"
    rows = [
        (f, commit_time(sink, batch))
        for batch, files in committed_batches(sink)
        for f in files
        if not (sink / "_spark_metadata" / f"{batch}.compact").exists()
    ]
    spark = build_session("bench stream delays", "local[2]")
    try:
        commits = spark.createDataFrame(rows, "file string, committed double")
        events = spark.read.parquet(*[f for f, _ in rows]).select(
            F.regexp_replace(F.col("_metadata.file_path"), "^file:", "").alias("file"),
            (F.unix_micros("kafka_timestamp") / 1e6).alias("sent"),
        )
        delay = F.col("committed") - F.col("sent")
        r = (
            events.join(F.broadcast(commits), "file")
            .agg(
                F.count(F.lit(1)).alias("records"),
                F.percentile_approx(delay, [0.5, 0.99], 10000).alias("p"),
                F.max(delay).alias("max"),
                F.min(F.col("committed")).alias("first_commit"),
                F.max(F.col("committed")).alias("last_commit"),
            )
            .first()
        )
    finally:
        spark.stop()
    assert r is not None
    return {
        "records": r["records"],
        "p50_s": round(r["p"][0], 2),
        "p99_s": round(r["p"][1], 2),
        "max_s": round(r["max"], 2),
        "first_commit": r["first_commit"],
        "last_commit": r["last_commit"],
        "batches_without_compaction": len({b for b, _ in committed_batches(sink)}),
    }


def live(bootstrap: str, payload: Path, work: Path, rate: int, seconds: int, trigger: str) -> dict:
    from tests.kafka.cluster import KafkaCluster  # noqa: F401  (the caller started it)

    records = rate * seconds
    out, log = work / "live", work / "live.log"
    proc = _stream(bootstrap, "audit-live", out, log, "--trigger", trigger)
    sampler = Sampler(proc.pid)
    sampler.start()
    try:
        deadline = time.monotonic() + 180
        while not (out / "events" / "_spark_metadata").is_dir():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"aclgate stream did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        time.sleep(3)  # the window queries start after the events sink exists
        load_before = os.getloadavg()[0]
        produced = _produce(bootstrap, "audit-live", payload, records, rate)
        deadline = time.monotonic() + 600
        while _committed_records(log) < records:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"stream stopped short:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
    finally:
        sampler.done.set()
        os.kill(proc.pid, signal.SIGTERM)  # the driver stops its queries, then exits
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    delays = _delays(out)
    busy = delays["last_commit"] - produced["started"]
    return {
        "target_rate": rate,
        "seconds": seconds,
        "records": records,
        "trigger_s": float(trigger),
        "producer": produced,
        "sustained_records_per_s": round(records / busy),
        "done_after_producer_s": round(delays["last_commit"] - produced["ended"], 2),
        "delay": {k: delays[k] for k in ("p50_s", "p99_s", "max_s", "records")},
        "peak_rss_mib": round(sampler.peak_mib),
        "cpu_s": round(sampler.cpu_s, 1),
        "load_before": round(load_before, 2),
        "load_peak": round(sampler.peak_load, 2),
    }


def report(bootstrap: str, payload: Path, acls: Path, work: Path, events: int) -> dict:
    produced = _produce(bootstrap, "audit-bulk", payload, events, -1)
    out = work / "bulk"
    started = time.monotonic()
    ingest = measure(
        "stream --available-now",
        aclgate(
            "stream", "--kafka-bootstrap", bootstrap, "--topic", "audit-bulk", "--out", str(out),
            "--master", "local[2]", "--available-now", "--max-offsets-per-trigger", "2000000",
        ),
        events,
    )  # fmt: skip
    ingest_wall = time.monotonic() - started
    parquet_bytes = sum(f.stat().st_size for f in (out / "events").rglob("*.parquet"))
    result = measure(
        "report from the stream's Parquet",
        aclgate(
            "report", "--audit", str(out / "events"), "--out", str(work / "report"),
            "--acl-file", str(acls), "--master", "local[2]",
        ),
        events,
    )  # fmt: skip
    return {
        "events": events,
        "producer": produced,
        "stream_available_now": {**ingest, "records_per_s": round(events / ingest_wall)},
        "parquet_mib": round(parquet_bytes / 2**20),
        "report": result,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=50_000)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--trigger", default="1")
    parser.add_argument("--report-events", type=int, default=10_000_000)
    parser.add_argument("--payload-lines", type=int, default=200_000)
    parser.add_argument("--skip-live", action="store_true")
    parser.add_argument("--work", default=None, help="work directory (default: a temp dir)")
    parser.add_argument(
        "--stem", default="stream", help="results file names in bench/results/ (default stream)"
    )
    args = parser.parse_args()

    from tests.kafka.cluster import KafkaCluster

    work = Path(args.work or tempfile.mkdtemp(prefix="aclgate-bench-stream-"))
    work.mkdir(parents=True, exist_ok=True)
    payload, acls = _payload(work, args.payload_lines)
    cluster = KafkaCluster(workdir=work / "kafka")
    cluster.start()
    results: dict = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "payload_lines": args.payload_lines,
        "payload_bytes_per_line": round(payload.stat().st_size / args.payload_lines),
    }
    try:
        for topic in ("audit-live", "audit-bulk"):
            cluster.create_topic(topic, partitions=2)
        if not args.skip_live:
            results["live"] = live(
                cluster.bootstrap, payload, work, args.rate, args.seconds, args.trigger
            )
            print(json.dumps(results["live"], indent=1))
        if args.report_events:
            results["report"] = report(cluster.bootstrap, payload, acls, work, args.report_events)
    finally:
        cluster.stop()
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.stem}.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / f"{args.stem}.md").write_text(render(results))
    print(render(results))


def render(r: dict) -> str:
    out = ["# aclgate stream benchmark (`python -m bench.stream`)", ""]
    out.append(
        f"Commit {r['commit']}, {r['machine']['cpus']} CPUs shared, {r['machine']['platform']}."
    )
    out.append(
        f"Audit lines of {r['payload_bytes_per_line']} bytes on average ({r['payload_lines']:,} distinct)."
    )
    if "live" in r:
        lv = r["live"]
        d = lv["delay"]
        out += [
            "",
            f"## Live: {lv['target_rate']:,} records/s for {lv['seconds']} s, trigger {lv['trigger_s']} s, local[2]",
            "",
            "| figure | value |",
            "|---|---|",
            f"| producer achieved | {lv['producer']['records_per_s']:,} records/s |",
            f"| stream sustained (records / producer start -> last commit) | {lv['sustained_records_per_s']:,} records/s |",
            f"| stream done after the producer's end | {lv['done_after_producer_s']} s |",
            f"| end-to-end delay p50 / p99 / max (Kafka timestamp -> Parquet commit) | {d['p50_s']} / {d['p99_s']} / {d['max_s']} s over {d['records']:,} records |",
            f"| stream process tree: peak RSS, CPU | {lv['peak_rss_mib']} MiB, {lv['cpu_s']} s |",
            f"| load average before / peak | {lv['load_before']} / {lv['load_peak']} |",
        ]  # fmt: skip
    if "report" in r:
        rp = r["report"]
        s, rep = rp["stream_available_now"], rp["report"]
        out += [
            "",
            f"## `aclgate report` over {rp['events']:,} events from the stream's Parquet (local[2])",
            "",
            "| step | wall | records/s | peak RSS | load before / peak |",
            "|---|---|---|---|---|",
            f"| producer (max rate) | | {rp['producer']['records_per_s']:,} | | |",
            f"| `aclgate stream --available-now` (Kafka -> Parquet, {rp['parquet_mib']} MiB) | {s['wall_s']} s | {s['records_per_s']:,} | {s['peak_rss_mib']} MiB | {s['load_before']} / {s['load_peak']} |",
            f"| `aclgate report --audit OUT/events --acl-file` | {rep['wall_s']} s | {rep['lines_per_s']:,} | {rep['peak_rss_mib']} MiB | {rep['load_before']} / {rep['load_peak']} |",
            "",
            "Report stages: " + "; ".join(rep["stages"]),
        ]  # fmt: skip
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
