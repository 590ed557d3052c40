"""The one place that builds a SparkSession for aclgate's jobs.

Every job runs the same way on a laptop (`local[*]`), on a standalone or YARN cluster
(`--master URL`) and under `spark-submit`; the environment quirks (loopback binding, the
console progress bar, log noise, which Python the executors run) are handled here rather
than by the user.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
DEFAULT_MASTER = "local[*]"


class SparkUnavailable(RuntimeError):
    """PySpark or Java is missing: the jobs cannot run at all."""


def under_spark_submit() -> bool:
    """True when `spark-submit` started this Python process (it then owns master and JVM)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def is_local(master: str | None) -> bool:
    return master is None or master == "local" or master.startswith("local[")


def _loopback_master(master: str | None) -> bool:
    """A local master, or a cluster whose master listens on this machine's loopback."""
    if master is None or is_local(master):
        return True
    host = master.split("://", 1)[-1].split(":", 1)[0].split("/", 1)[0]
    return host in ("127.0.0.1", "localhost", "::1", "[::1]")


def _prepare_environment(master: str | None) -> None:
    """Bind to loopback when everything runs here (hostnames here resolve to 127.0.0.1 and
    Spark would warn and pick another interface); a remote cluster must reach the driver, so
    there Spark's own choice stands. Executors run this very interpreter unless told otherwise.
    """
    if _loopback_master(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def spark_settings(
    master: str | None, conf: Iterable[tuple[str, str]] = (), driver_memory: str | None = None
) -> dict[str, str]:
    """The configuration the jobs run with; explicit `conf` pairs win over these defaults."""
    local = is_local(master)
    settings = {
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4" if local else "64",
        "spark.sql.adaptive.enabled": "true",
        "spark.python.worker.reuse": "true",
        "spark.pyspark.python": os.environ.get("PYSPARK_PYTHON", sys.executable),
    }
    if not under_spark_submit():
        # Only a JVM we launch ourselves can take driver options.
        java_opts = f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}"
        settings["spark.driver.extraJavaOptions"] = java_opts
        ip = os.environ.get("SPARK_LOCAL_IP")
        if ip and _loopback_master(master):
            settings["spark.driver.host"] = ip
            settings["spark.driver.bindAddress"] = ip
        if driver_memory:
            settings["spark.driver.memory"] = driver_memory
    settings.update(dict(conf))
    return settings


def check_available() -> None:
    """Raise SparkUnavailable with a useful sentence when PySpark or Java cannot be found."""
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise SparkUnavailable(
            "PySpark is not installed: pip install 'aclgate[pipeline]' (or 'pyspark>=4.0,<5')"
        ) from exc
    import shutil

    java_home = os.environ.get("JAVA_HOME")
    if not shutil.which("java") and not (java_home and Path(java_home, "bin", "java").exists()):
        raise SparkUnavailable("Java (17 or newer) is not on PATH and JAVA_HOME is unset")


def build_session(
    app_name: str,
    master: str | None = None,
    conf: Iterable[tuple[str, str]] = (),
    driver_memory: str | None = None,
) -> SparkSession:
    """Start (or join, under spark-submit) the SparkSession a job runs in."""
    check_available()
    if not under_spark_submit():
        _prepare_environment(master)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if not under_spark_submit():
        builder = builder.master(master or DEFAULT_MASTER)
    for key, value in spark_settings(master, conf, driver_memory).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def parse_conf(pairs: Sequence[str] | None) -> list[tuple[str, str]]:
    """`--conf key=value` strings to pairs, rejecting anything without '='."""
    out = []
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--conf expects key=value, got {pair!r}")
        out.append((key.strip(), value))
    return out


class Progress:
    """One line per stage on stderr, e.g. `[report] 2/6 aggregating access … (4.1 s)`.

    Spark's own progress bar is off; this says what the job is doing in words a user knows.
    """

    def __init__(self, job: str, total: int, stream: TextIO | None = None) -> None:
        self.job = job
        self.total = total
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self.index = 0

    def step(self, what: str) -> None:
        self.index += 1
        elapsed = time.monotonic() - self.started
        print(
            f"[{self.job}] {self.index}/{self.total} {what} … ({elapsed:.1f} s)",
            file=self.stream,
            flush=True,
        )

    def done(self, what: str = "done") -> None:
        elapsed = time.monotonic() - self.started
        print(f"[{self.job}] {what} in {elapsed:.1f} s", file=self.stream, flush=True)

    def note(self, what: str) -> None:
        print(f"[{self.job}] {what}", file=self.stream, flush=True)


_SHIPPED: set[int] = set()


def ship_packages(
    spark: SparkSession, packages: Sequence[str] = ("aclgate.authz", "aclgate.pipeline")
) -> None:
    """Make our Python packages importable on executors that run Python code.

    A local executor uses this interpreter (and finds the packages through the install),
    but a cluster's executors may run another environment: zip the packages (under
    `aclgate/`, with its `__init__.py`) and add the zip to the job once per SparkContext.
    """
    import importlib
    import tempfile
    import zipfile

    sc = spark.sparkContext
    if id(sc) in _SHIPPED:
        return
    handle, name = tempfile.mkstemp(prefix="aclgate-pyfiles-", suffix=".zip")
    os.close(handle)
    with zipfile.ZipFile(name, "w", zipfile.ZIP_DEFLATED) as archive:
        parents = {p.rpartition(".")[0] for p in packages if "." in p}
        for parent in sorted(parents):
            init = importlib.import_module(parent).__file__
            assert init is not None
            archive.write(init, Path(*parent.split("."), "__init__.py"))
        for package in packages:
            init = importlib.import_module(package).__file__
            assert init is not None  # aclgate's packages are regular ones, with an __init__.py
            root = Path(init).parent
            for path in sorted(root.rglob("*")):
                # jars/: the Kafka connector's build files and jars, not Python code
                skip = {"__pycache__", "jars"}.intersection(path.relative_to(root).parts)
                if path.is_file() and not skip:
                    archive.write(path, Path(*package.split("."), path.relative_to(root)))
    sc.addPyFile(name)  # served from this path while the context lives
    atexit.register(_unlink_quietly, name)
    _SHIPPED.add(id(sc))


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
