"""One SparkSession for the whole pipeline suite (each start costs about 5 s).

Without Java or PySpark the Spark tests skip with the reason, except under CI=true, where
they fail: CI must run them.
"""

from __future__ import annotations

import io
import os

import pytest


def spark_missing_reason() -> str | None:
    from aclgate.pipeline.spark import SparkUnavailable, check_available

    try:
        check_available()
    except SparkUnavailable as exc:
        return str(exc)
    return None


def require_spark() -> None:
    reason = spark_missing_reason()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but the Spark tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def kafka_jars_problem() -> str | None:
    from aclgate.pipeline.kafkasource import KafkaJarsMissing, connector_jars, jars_dir

    try:
        connector_jars(jars_dir())
    except KafkaJarsMissing as exc:
        return str(exc)
    return None


def require_kafka_jars() -> None:
    """Spark's Kafka connector (make spark-jars): skip without it, fail under CI=true."""
    reason = kafka_jars_problem()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but the Spark Kafka tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def spark():
    require_spark()
    from aclgate.pipeline.kafkasource import jar_conf, jars_dir
    from aclgate.pipeline.spark import build_session

    # the Kafka connector when it is there (tests/pipeline/test_stream*.py need it)
    jars = [] if kafka_jars_problem() else jar_conf(jars_dir())
    session = build_session(
        "aclgate pipeline tests",
        "local[2]",
        conf=[
            ("spark.sql.shuffle.partitions", "2"),
            ("spark.default.parallelism", "2"),
            *jars,
        ],
    )
    yield session
    session.stop()


@pytest.fixture
def progress():
    from aclgate.pipeline.spark import Progress

    return Progress("test", 10, stream=io.StringIO())
