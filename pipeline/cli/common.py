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
        required=True,
        metavar="PATH",
        help="audit log files or directories: JSON Lines (plain or .gz) or Parquet; "
        "URIs such as hdfs://... are passed to Spark",
    )
    if window:
        parser.add_argument(
            "--since", type=_time, metavar="TS", help="only events with ts >= TS (ISO-8601, UTC)"
        )
        parser.add_argument(
            "--until", type=_time, metavar="TS", help="only events with ts < TS (ISO-8601, UTC)"
        )


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
    from aclgate.pipeline.spark import Progress, SparkUnavailable, build_session, parse_conf

    progress = Progress(job, stages)
    try:
        conf = parse_conf(args.conf)
    except ValueError as exc:
        print(f"aclgate {job}: {exc}", file=sys.stderr)
        return EXIT_USAGE
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
    finally:
        if existing is None:
            spark.stop()
