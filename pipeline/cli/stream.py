"""Spark Structured Streaming over the proxy's audit topic.

Reads the topic with Spark's Kafka connector and keeps, under --out: events/ (every
decision record as Parquet partitioned by date, malformed ones with their reason: what
`aclgate report|advise|whatif --audit OUT/events` read), denials/ (denied decisions per
event-time window,
principal and resource; windows at or over --alert-threshold are alerts, printed on stderr
and appended to alerts.jsonl) and acl_usage/ (per window and ACL, the decisions it is named
for). Checkpoints (default OUT/_checkpoints) make a restart continue where the job stopped:
no batch lost, none written twice. --available-now drains what the topic holds and stops.
Needs Spark's Kafka connector jars: `make spark-jars`.
"""

from __future__ import annotations

import argparse

from aclgate.pipeline.cli.common import add_kafka_args, add_spark_args, run_job, usage_error


def configure(parser: argparse.ArgumentParser) -> None:
    add_kafka_args(parser, "the audit topic the proxy writes (--audit-topic)", required=True)
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    parser.add_argument(
        "--checkpoint", metavar="DIR", help="checkpoint directory (default OUT/_checkpoints)"
    )
    parser.add_argument(
        "--window", default="1 minute", metavar="DURATION", help="window length (1 minute)"
    )
    parser.add_argument(
        "--watermark",
        default="1 minute",
        metavar="DURATION",
        help="how late an event may arrive and still count in its window (1 minute)",
    )
    parser.add_argument(
        "--alert-threshold",
        type=int,
        default=100,
        metavar="N",
        help="alert when a principal is denied N or more times on one resource in a window",
    )
    parser.add_argument(
        "--trigger",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="start a micro-batch every SECONDS (0: as soon as the previous one ends)",
    )
    parser.add_argument(
        "--available-now",
        action="store_true",
        help="process what the topic holds now, write every window the watermark closed, stop",
    )
    parser.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        metavar="N",
        help="at most N records per micro-batch (default: all available)",
    )
    parser.add_argument(
        "--stop-after", type=float, metavar="SECONDS", help="stop after SECONDS (default: never)"
    )
    add_spark_args(parser)


def run(args: argparse.Namespace) -> int:
    from aclgate.pipeline.kafkasource import kafka_input
    from aclgate.pipeline.stream import StreamOptions, run_stream

    try:
        kafka = kafka_input(args.kafka_bootstrap, args.topic, args.kafka_conf)
    except ValueError as exc:
        return usage_error("stream", exc)
    assert kafka is not None  # both options are required
    if args.alert_threshold < 1:
        return usage_error("stream", ValueError("--alert-threshold must be at least 1"))
    opts = StreamOptions(
        kafka=kafka,
        out=args.out,
        checkpoint=args.checkpoint,
        window=args.window,
        watermark=args.watermark,
        alert_threshold=args.alert_threshold,
        trigger_seconds=args.trigger,
        available_now=args.available_now,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        stop_after=args.stop_after,
    )

    def body(spark, progress) -> int:
        result = run_stream(spark, opts, progress)
        print(
            f"{result['events_rows_read']:,} records read; tables in {result['out']}, "
            f"checkpoints in {result['checkpoint']}"
        )
        progress.done()
        return 0

    return run_job(args, "stream", 2, body)
