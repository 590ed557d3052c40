"""Expanding `--audit` arguments into the files Spark should read, split by format.

The proxy rotates its log into a directory of plain and gzipped JSON Lines files; users may
also hand us Parquet (e.g. logs already compacted by another job). Local paths are listed
here so that one command can mix formats and so that a missing path is an error message,
not a Spark stack trace. URIs with a scheme (hdfs://, s3a://, ...) go to Spark unchanged.
A directory written by a streaming file sink (it has `_spark_metadata/`) contributes only the
files its log says are committed (sinklog.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from aclgate.pipeline.sinklog import committed_files, is_sink_dir

PARQUET_SUFFIXES = (".parquet", ".parq")


@dataclass
class InputFiles:
    jsonl: list[str] = field(default_factory=list)
    parquet: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.jsonl and not self.parquet


def _is_remote(path: str) -> bool:
    scheme, sep, _ = path.partition("://")
    return bool(sep) and scheme != "file" and scheme.isalnum()


def _hidden(name: str) -> bool:
    # Hadoop's convention (_SUCCESS, .crc files, editor droppings) and files still being
    # written (the proxy gzips a rotated file to NAME.jsonl.gz.tmp, then renames it): not data.
    return name.startswith((".", "_")) or name.endswith((".crc", ".tmp"))


def _is_parquet(name: str) -> bool:
    return name.lower().endswith(PARQUET_SUFFIXES)


def _add(files: InputFiles, path: str) -> None:
    (files.parquet if _is_parquet(path) else files.jsonl).append(path)


def expand_inputs(paths: Iterable[str]) -> InputFiles:
    """List every data file under the given files and directories, in a stable order."""
    files = InputFiles()
    for raw in paths:
        if _is_remote(raw):
            _add(files, raw)
            continue
        path = Path(raw.removeprefix("file://")).expanduser()
        if path.is_file():
            _add(files, str(path.resolve()))
        elif path.is_dir():
            for root, dirs, names in os.walk(path):
                if is_sink_dir(Path(root)):
                    # a streaming file sink's output (`aclgate stream`): committed files only
                    for name in committed_files(Path(root)):
                        _add(files, str(Path(name).resolve()))
                    dirs[:] = []
                    continue
                dirs[:] = sorted(d for d in dirs if not _hidden(d))
                for name in sorted(names):
                    if not _hidden(name):
                        _add(files, str(Path(root, name).resolve()))
        else:
            files.missing.append(raw)
    # While the proxy compresses a rotated file, NAME.jsonl and NAME.jsonl.gz both exist for a
    # moment: read the compressed one only, or its lines would count twice.
    gzipped = {p for p in files.jsonl if p.endswith(".gz")}
    files.jsonl = [p for p in files.jsonl if p + ".gz" not in gzipped]
    return files


def display_path(uri: str) -> str:
    """Spark reports `file:/abs/path`; users typed `/abs/path`."""
    for prefix in ("file://", "file:"):
        if uri.startswith(prefix):
            return uri[len(prefix) :]
    return uri
