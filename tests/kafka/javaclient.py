"""Compile and run the small Java test clients of tests/kafka/java/ against tests/kafka/lib.

javac runs once per test session and source set (a few seconds); each run is one JVM whose
last stdout line is the client's result ("OK ...", "ERROR ...", etc.).
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from tests.kafka.cluster import KAFKA_DIR, TOOL_JVM_OPTS, TOOLS_LOG4J, classpath

SOURCES = KAFKA_DIR / "java"


def compile_clients(out_root: pytest.TempPathFactory, *names: str) -> Path:
    """The classes of tests/kafka/java/<name>.java for each name, in a fresh directory."""
    sources = [SOURCES / f"{n}.java" for n in names]
    digest = hashlib.sha256(b"".join(s.read_bytes() for s in sources)).hexdigest()[:12]
    out = out_root.mktemp(f"javaclients-{digest}")
    subprocess.run(
        ["javac", "-nowarn", "-cp", classpath(), "-d", str(out), *map(str, sources)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


def client_command(classes: Path, main: str, *args: str) -> list[str]:
    """The `java` command line running `main` of the compiled `classes` with `args`."""
    return [
        "java",
        *TOOL_JVM_OPTS,
        f"-Dlog4j2.configurationFile={TOOLS_LOG4J}",
        "-cp",
        f"{classes}:{classpath()}",
        main,
        *args,
    ]


def run_client(classes: Path, main: str, *args: str, timeout: float = 120) -> str:
    """The client's last stdout line (its result); fails with its stderr when there is none."""
    proc = subprocess.run(
        client_command(classes, main, *args),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = proc.stdout.strip().splitlines()
    assert lines, f"no result (exit {proc.returncode})\n{proc.stderr[-3000:]}"
    return lines[-1]
