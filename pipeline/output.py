"""Writing a job's outputs: Spark tables as Parquet/CSV directories, small files as JSON.

Tables go through Spark (so a cluster's executors write them in parallel); the summary and
the HTML page are small and written by the driver, so `--out` must be a path the driver can
write (a local or shared filesystem).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'"


def prepare_out_dir(out: str) -> Path:
    path = Path(out).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_parquet(frame: DataFrame, path: Path) -> None:
    frame.write.mode("overwrite").parquet(str(path))


def write_csv(frame: DataFrame, path: Path) -> None:
    """One CSV file with a header (a directory with one part file, as Spark writes it).

    Array columns are joined with spaces, since CSV has no arrays.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType

    columns = [
        F.concat_ws(" ", F.col(f.name)).alias(f.name)
        if isinstance(f.dataType, ArrayType)
        else F.col(f.name)
        for f in frame.schema.fields
    ]
    (
        frame.select(*columns)
        .coalesce(1)
        .write.mode("overwrite")
        .option("header", True)
        .option("timestampFormat", TIMESTAMP_FORMAT)
        .csv(str(path))
    )


def write_json(data: Any, path: Path) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
