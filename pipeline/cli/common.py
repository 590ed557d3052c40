"""Options and plumbing the Spark sub-commands share.

PySpark is imported only inside `run_job`, so `aclgate report --help` stays instant.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from aclgate.pipeline.spark import Progress

EXIT_USAGE = 2
EXIT_NO_SPARK = 3


def _time(text: str) -> Any:
    from aclgate.pipeline.timeutil import parse_user_time

    try:
        return parse_user_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_audit_args(parser: argparse.ArgumentParser, window: bool = True) -> None:
    parser.add_argument(
        "--audit",
        nargs="+",
        action="extend",
        default=[],
        metavar="PATH",
        help="audit log files or directories: JSON Lines (plain or .gz) or Parquet (also the "
        "events/ table of `aclgate stream`); URIs such as hdfs://... are passed to Spark",
    )
    add_kafka_args(
        parser,
        "also (or only) read the audit topic, from its earliest to its latest offsets at start",
    )
    if window:
        parser.add_argument(
            "--since", type=_time, metavar="TS", help="only events with ts >= TS (ISO-8601, UTC)"
        )
        parser.add_argument(
            "--until", type=_time, metavar="TS", help="only events with ts < TS (ISO-8601, UTC)"
        )


def add_kafka_args(parser: argparse.ArgumentParser, what: str, required: bool = False) -> None:
    """The audit topic (the proxy's --audit-topic) and where Spark's Kafka connector is."""
    from aclgate.pipeline.kafkasource import DEFAULT_JARS_DIR, JARS_ENV

    group = parser.add_argument_group("Kafka", what)
    group.add_argument(
        "--kafka-bootstrap", required=required, metavar="HOST:PORT[,...]", help="the cluster"
    )
    group.add_argument(
        "--topic", required=required, metavar="TOPIC", help="the audit topic (or TOPIC,TOPIC)"
    )
    group.add_argument(
        "--kafka-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Kafka client setting (repeatable), e.g. security.protocol=SASL_SSL",
    )
    group.add_argument(
        "--spark-jars",
        metavar="DIR",
        help=f"Spark's Kafka connector jars (default ${JARS_ENV}, else {DEFAULT_JARS_DIR}; "
        "`make spark-jars` fetches them)",
    )


def kafka_from_args(args: argparse.Namespace) -> Any:
    """The job's KafkaInput (or None); a job needs --audit, the topic, or both."""
    from aclgate.pipeline.kafkasource import kafka_input

    kafka = kafka_input(args.kafka_bootstrap, args.topic, args.kafka_conf)
    if kafka is None and not args.audit:
        raise ValueError("give --audit PATH..., or --kafka-bootstrap and --topic, or both")
    return kafka


def usage_error(job: str, exc: Exception) -> int:
    print(f"aclgate {job}: {exc}", file=sys.stderr)
    return EXIT_USAGE


def add_super_user_arg(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument(
        "--super-user",
        dest="super_users",
        action="append",
        default=[],
        metavar="PRINCIPAL",
        help=help,
    )


def add_policy_args(parser: argparse.ArgumentParser) -> None:
    """The broker settings `aclgate check` takes, so what-if decides like it."""
    add_super_user_arg(parser, "a super user of the candidate policy (repeatable), e.g. User:admin")
    parser.add_argument(
        "--allow-everyone-if-no-acl-found",
        action="store_true",
        help="the candidate policy allows resources that have no ACL at all",
    )
    parser.add_argument(
        "--acl-host-cidr",
        action="store_true",
        help="KIP-1276 (as `aclgate serve --acl-host-cidr`): an ACL host with / is a network, "
        "e.g. 10.0.0.0/8 or 2001:db8::/32, and must be a valid one; recorded client hosts in it "
        "match. Default: a literal string, as in Kafka 4.3.1",
    )


def add_spark_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Spark")
    group.add_argument(
        "--master",
        metavar="URL",
        help="Spark master: local[*] (default), local[N], spark://host:7077, yarn, k8s://...",
    )
    group.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark configuration (repeatable), e.g. spark.executor.memory=4g",
    )
    group.add_argument(
        "--driver-memory",
        metavar="SIZE",
        help="driver JVM heap, e.g. 2g (local mode: the only JVM; default Spark's 1g)",
    )


def run_job(
    args: argparse.Namespace,
    job: str,
    stages: int,
    body: Callable[[SparkSession, Progress], int],
) -> int:
    """Build (or reuse) the session, run `body`, turn expected failures into messages."""
    from aclgate.pipeline.acls import AclLoadError
    from aclgate.pipeline.jobs import InputError
    from aclgate.pipeline.kafkasource import KafkaJarsMissing, jar_conf, jars_dir
    from aclgate.pipeline.spark import Progress, SparkUnavailable, build_session, parse_conf

    progress = Progress(job, stages)
    try:
        conf = parse_conf(args.conf)
    except ValueError as exc:
        print(f"aclgate {job}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if getattr(args, "kafka_bootstrap", None):
            conf = jar_conf(jars_dir(args.spark_jars)) + conf
    except KafkaJarsMissing as exc:
        print(f"aclgate {job}: {exc}", file=sys.stderr)
        return EXIT_NO_SPARK
    try:
        from pyspark.sql import SparkSession

        existing = SparkSession.getActiveSession()
    except ImportError:
        existing = None
    try:
        spark = existing or build_session(f"aclgate {job}", args.master, conf, args.driver_memory)
    except SparkUnavailable as exc:
        print(f"aclgate {job}: {exc}", file=sys.stderr)
        return EXIT_NO_SPARK
    try:
        return body(spark, progress)
    except (InputError, AclLoadError) as exc:
        print(f"aclgate {job}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KafkaJarsMissing as exc:
        print(f"aclgate {job}: {exc}", file=sys.stderr)
        return EXIT_NO_SPARK
    finally:
        if existing is None:
            spark.stop()
