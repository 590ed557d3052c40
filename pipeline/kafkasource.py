"""The audit topic as a Spark DataFrame, through Spark's Kafka connector.

The connector is not part of PySpark: its jars are fetched from Maven Central at build time
(`make spark-jars`, into pipeline/jars/lib) and handed to the session as local files
(`spark.jars`), never downloaded when a job runs. A job that needs them and cannot find them
fails with a message naming the make target instead of Spark's "Failed to find data source".
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

JARS_ENV = "ACLGATE_SPARK_JARS"
DEFAULT_JARS_DIR = Path(__file__).resolve().parent / "jars" / "lib"
CONNECTOR = "spark-sql-kafka-0-10_"
MAKE_HINT = "run `make spark-jars` (fetches them from Maven Central) or pass --spark-jars DIR"


class KafkaJarsMissing(RuntimeError):
    """Spark's Kafka connector is not available to the session."""


@dataclass(frozen=True)
class KafkaInput:
    """A topic (or comma-separated topics) on a cluster, plus client settings for the source."""

    bootstrap: str
    topic: str
    # Kafka client settings (security.protocol, sasl.*, ssl.*), given to the source as kafka.*
    client: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def options(self) -> dict[str, str]:
        opts = {"kafka.bootstrap.servers": self.bootstrap, "subscribe": self.topic}
        opts.update({f"kafka.{key}": value for key, value in self.client})
        return opts

    def describe(self) -> dict[str, str]:
        return {"bootstrap": self.bootstrap, "topic": self.topic}


def jars_dir(explicit: str | None = None) -> Path:
    """--spark-jars, else $ACLGATE_SPARK_JARS, else pipeline/jars/lib of this checkout."""
    return Path(explicit or os.environ.get(JARS_ENV) or DEFAULT_JARS_DIR).expanduser()


def connector_jars(directory: Path) -> list[str]:
    """Every jar in the directory; fails unless the connector itself is among them."""
    jars = sorted(str(p.resolve()) for p in directory.glob("*.jar")) if directory.is_dir() else []
    if not any(Path(j).name.startswith(CONNECTOR) for j in jars):
        raise KafkaJarsMissing(
            f"Spark's Kafka connector ({CONNECTOR}*.jar) is not in {directory}: {MAKE_HINT}"
        )
    return jars


def jar_conf(directory: Path) -> list[tuple[str, str]]:
    """The session setting that puts the connector on the driver's and executors' classpath."""
    return [("spark.jars", ",".join(connector_jars(directory)))]


def require_connector(spark: SparkSession) -> None:
    """A session started without the jars (e.g. by spark-submit without --jars) cannot read
    Kafka; say so before Spark fails with a class-loading error."""
    jars = spark.sparkContext.getConf().get("spark.jars", "") or ""
    if CONNECTOR not in jars:
        raise KafkaJarsMissing(
            "this Spark session was started without Spark's Kafka connector: "
            f"{MAKE_HINT}; under spark-submit pass --jars with the jars of {DEFAULT_JARS_DIR}"
        )


def read_topic(spark: SparkSession, source: KafkaInput) -> DataFrame:
    """A bounded read: every record from the earliest to the latest offsets at start."""
    require_connector(spark)
    reader = spark.read.format("kafka").options(**source.options())
    return reader.option("startingOffsets", "earliest").option("endingOffsets", "latest").load()


def stream_topic(
    spark: SparkSession, source: KafkaInput, max_offsets_per_trigger: int | None = None
) -> DataFrame:
    """An unbounded read; a new checkpoint starts at the earliest offsets, a restart where its
    checkpoint left off. Missing data (retention deleted offsets not yet read) fails the query
    rather than being skipped silently."""
    require_connector(spark)
    reader = spark.readStream.format("kafka").options(**source.options())
    reader = reader.option("startingOffsets", "earliest").option("failOnDataLoss", "true")
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return reader.load()


def parse_client_conf(pairs: Iterable[str] | None) -> tuple[tuple[str, str], ...]:
    """`--kafka-conf key=value` strings (client settings, without the `kafka.` prefix)."""
    out = []
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--kafka-conf expects key=value, got {pair!r}")
        out.append((key.strip().removeprefix("kafka."), value))
    return tuple(out)


def kafka_input(
    bootstrap: str | None, topic: str | None, conf: Sequence[str] | None = None
) -> KafkaInput | None:
    """The Kafka input of a job's options, or None; both or neither must be given."""
    if not bootstrap and not topic:
        return None
    if not bootstrap or not topic:
        raise ValueError("--kafka-bootstrap and --topic go together")
    return KafkaInput(bootstrap, topic, parse_client_conf(conf))
