"""The jobs on a real standalone Spark cluster: a master and a worker on loopback.

Both are started from the installed pyspark (`spark-class ...Master` / `...Worker`), small
memory, one core. The report runs in a separate `aclgate report --master spark://...`
process, the what-if through `spark-submit pipeline/submit.py`, as users run them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.pipeline.conftest import require_spark
from tests.pipeline.helpers import (
    CANDIDATE,
    POLICY,
    aclgate,
    small_log,
    write_acl_file,
    write_jsonl,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(log: Path, text: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    raise AssertionError(f"{text!r} not in {log} within {timeout} s:\n{log.read_text()[-3000:]}")


def spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """Start a daemon in its own process group, its output in `log` (our copy closed)."""
    with log.open("w") as out:
        return subprocess.Popen(
            args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the process group we started (the worker's executors are in it), then KILL."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    require_spark()
    import pyspark

    home = Path(pyspark.__file__).parent
    root = tmp_path_factory.mktemp("standalone")
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_LOCAL_DIRS": str(root),
        "SPARK_NO_DAEMONIZE": "1",
    }
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = str(home / "bin" / "spark-class")
    procs = []
    try:
        master_log = root / "master.log"
        master = spawn(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(free_port())],
            env, master_log,
        )  # fmt: skip
        procs.append(master)
        wait_for(master_log, "I have been elected leader", master)
        worker = spawn(
            [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
             "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()),
             "--work-dir", str(root / "work"), url],
            env, root / "worker.log",
        )  # fmt: skip
        procs.append(worker)
        wait_for(master_log, "Registering worker", master)
        yield url, root, env
    finally:
        for proc in reversed(procs):
            stop(proc)


def test_report_on_a_standalone_cluster(cluster):
    url, root, _ = cluster
    events = small_log()
    write_jsonl(root / "audit" / "a.jsonl", events[:5])
    write_jsonl(root / "audit" / "b.jsonl.gz", events[5:])
    out = root / "out"
    result = aclgate(
        "report", "--audit", str(root / "audit"), "--out", str(out),
        "--acl-file", str(write_acl_file(root / "acls.json", POLICY)),
        "--master", url,
        "--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=1",
        "--conf", "spark.sql.shuffle.partitions=2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["events"] == 15
    assert summary["decisions"] == {"ALLOWED": 11, "DENIED": 4}
    assert summary["acl_usage"]["unused"] == 2
    assert "[report] 5/5 writing summary.json and report.html" in result.stderr
    assert "[Stage" not in result.stderr  # Spark's progress bar stays off
    worker_log = (root / "worker.log").read_text()
    assert "Asked to launch executor" in worker_log  # the work ran on the worker, not locally


def test_whatif_through_spark_submit_on_the_standalone_cluster(cluster):
    """`spark-submit pipeline/submit.py`, as docs/pipeline.md shows it: spark-submit owns
    the master and the JVM, the job's options are aclgate's."""
    url, root, env = cluster
    audit = root / "submit-audit"
    write_jsonl(audit / "a.jsonl", small_log())
    out = root / "submit-whatif"
    candidate = write_acl_file(root / "candidate.json", CANDIDATE)
    repo = Path(__file__).resolve().parents[2]
    launched = (root / "worker.log").read_text().count("Asked to launch executor")
    result = subprocess.run(
        [str(Path(env["SPARK_HOME"]) / "bin" / "spark-submit"), "--master", url,
         "--driver-java-options",
         f"-Dlog4j2.configurationFile={repo / 'pipeline' / 'log4j2.properties'}",
         "--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=1",
         "--conf", "spark.sql.shuffle.partitions=2",
         str(repo / "pipeline" / "submit.py"), "whatif", "--audit", str(audit),
         "--candidate-acl-file", str(candidate), "--out", str(out),
         "--super-user", "User:admin", "--fail-on-break"],
        env={**env, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable},
        cwd=root, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-4000:]  # --fail-on-break: alice would break
    assert "7 events /       2 request shapes would flip to DENIED" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["to_denied"] == {"events": 7, "keys": 2}
    assert summary["to_allowed"] == {"events": 1, "keys": 1}
    # spark-submit runs Python with its stderr merged into stdout: the progress lines are there
    assert "[whatif] 4/4 writing report.html" in result.stdout
    assert " INFO " not in result.stderr and "[Stage" not in result.stdout + result.stderr
    worker_log = (root / "worker.log").read_text()
    assert worker_log.count("Asked to launch executor") > launched  # ran on the worker
