"""Where the stream's CPU goes: the ingest query's steps, timed without Kafka (docs/pipeline.md).

`python -m bench.stream` measures the live job against a broker and a producer sharing the same
2 cores, so it cannot say which step limits the rate. This runs the steps of the `events`
query (pipeline/stream.py) on records already in memory, shaped as Spark's Kafka source gives
them, each as its own batch job on local[2], and times them:

  parse       from_json of every record into the audit struct, every field kept (noop sink)
  validate    + the checks of pipeline/reader.py (`validated`) and the events/ columns (noop)
  parquet     + the Parquet write partitioned by date, as the stream's sink writes it

Each step runs once to warm the JVM, then --rounds times, interleaved; the median is recorded.
The rate of `parquet` is the most the ingest could take on these cores with nothing else
running: the live stream also shares them with the broker, the producer and its two window
queries.

  python -m bench.stream_ingest [--lines 200000] [--rounds 3] [--out bench/results]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.latency import environment
from bench.recording import measured_code, write_results

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
STEPS = ("parse", "validate", "parquet")


def kafka_shaped(spark: Any, payload: Path) -> DataFrame:
    """The payload's lines as the Kafka source's columns, cached in memory (read once)."""
    from pyspark.sql import functions as F

    records = spark.read.text(str(payload)).select(
        F.lit("audit").alias("topic"),
        F.lit(0).alias("partition"),
        F.monotonically_increasing_id().alias("offset"),
        F.current_timestamp().alias("timestamp"),
        F.col("value").cast("binary").alias("value"),
    )
    records = records.cache()
    records.count()
    return records


def step_jobs(records: DataFrame, out: Path) -> dict[str, Any]:
    """Each step as a function running one batch job over all records."""
    from pyspark.sql import functions as F

    from aclgate.pipeline.reader import parse_json
    from aclgate.pipeline.stream import checked_records, event_records

    def parse() -> None:
        parsed = records.select(parse_json(F.col("value").cast("string")).alias("j"))
        parsed.select("j.*").write.format("noop").mode("overwrite").save()

    def validate() -> None:
        event_records(checked_records(records)).write.format("noop").mode("overwrite").save()

    def parquet() -> None:
        shutil.rmtree(out, ignore_errors=True)
        event_records(checked_records(records)).write.partitionBy("date").parquet(str(out))

    return {"parse": parse, "validate": validate, "parquet": parquet}


def measure(lines: int, rounds: int, work: Path) -> dict[str, Any]:
    from aclgate.pipeline.spark import build_session

    payload = work / "payload.jsonl"
    subprocess.run(
        [sys.executable, "-m", "aclgate", "audit-sample", "--events", str(lines), "--out",
         str(payload), "--hours", "1", "--start", "2026-11-21T12:00:00Z"],
        cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip
    spark = build_session("bench-stream-ingest", master="local[2]")
    try:
        jobs = step_jobs(kafka_shaped(spark, payload), work / "events")
        seconds: dict[str, list[float]] = {name: [] for name in STEPS}
        load_before = os.getloadavg()[0]
        for round_ in range(rounds + 1):  # round 0 warms the JVM up, not recorded
            for name in STEPS:
                started = time.perf_counter()
                jobs[name]()
                took = time.perf_counter() - started
                if round_:
                    seconds[name].append(round(took, 3))
                print(f"round {round_} {name}: {took:.2f} s", file=sys.stderr, flush=True)
        load_after = os.getloadavg()[0]
    finally:
        spark.stop()
    steps = {}
    for name in STEPS:
        median = statistics.median(seconds[name])
        steps[name] = {
            "seconds": seconds[name],
            "median_s": round(median, 3),
            "records_per_s": round(lines / median),
            "us_per_record_both_cores": round(2 * median / lines * 1e6, 1),
        }
    return {
        "lines": lines,
        "bytes_per_line": round(payload.stat().st_size / lines),
        "rounds": rounds,
        "steps": steps,
        "load_before": round(load_before, 2),
        "load_after": round(load_after, 2),
    }


def markdown(data: dict[str, Any]) -> str:
    env = data["environment"]
    out = [
        "# The stream's ingest, step by step (`python -m bench.stream_ingest`)",
        "",
        f"Recorded {data['recorded']} {measured_code(env)}, {env['cores']} cores, "
        f"local[2]; {data['lines']:,} audit lines of {data['bytes_per_line']} bytes held in "
        f"memory as Kafka records; median of {data['rounds']} rounds after a warm-up; load "
        f"average {data['load_before']} before, {data['load_after']} after.",
        "",
        "| step (cumulative) | median | records/s | CPU µs per record (both cores busy) |",
        "|---|---|---|---|",
    ]
    for name in STEPS:
        s = data["steps"][name]
        out.append(
            f"| {name} | {s['median_s']} s | {s['records_per_s']:,} | "
            f"{s['us_per_record_both_cores']} |"
        )
    out += [
        "",
        "parse: from_json of every record (every field kept, noop sink). validate: plus the "
        "checks and the events/ columns of `aclgate stream` (noop sink). parquet: plus the "
        "Parquet write partitioned by date, i.e. the whole `events` query minus Kafka. The "
        "rate of the last row is what the ingest takes at most on these cores alone.",
        "",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--stem", default="stream_ingest")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="aclgate-bench-ingest-"))
    try:
        data = measure(args.lines, args.rounds, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    data["environment"] = environment()
    data["recorded"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    data["command"] = " ".join(["python -m bench.stream_ingest", *(argv or sys.argv[1:])])
    text = markdown(data)
    write_results(args.out, args.stem, data, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
