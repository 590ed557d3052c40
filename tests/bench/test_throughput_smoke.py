"""`python -m bench.throughput` runs end to end against Apache Kafka and writes well-formed
results. A smoke test, not a performance test: it asserts the harness works (Kafka and aclgate
start, both perf tools run on every path, the CPU of the proxy is read, the report is
complete), never how fast anything is. The figures are recorded by `make bench-throughput`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.throughput import _stat, tree_cpu_seconds

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.kafka]


BUSY_THEN_SLEEP = """
import time
start = time.process_time()
while time.process_time() - start < 0.3:
    pass
time.sleep(30)
"""


def test_cpu_of_a_process_tree_counts_the_children():
    child = subprocess.Popen([sys.executable, "-c", BUSY_THEN_SLEEP])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and tree_cpu_seconds(child.pid) < 0.25:
            time.sleep(0.1)
        spent = tree_cpu_seconds(child.pid)
        assert spent >= 0.25
        own = _stat(os.getpid())
        assert own is not None
        assert tree_cpu_seconds(os.getpid()) >= own[1] + spent - 0.05  # the child is counted
    finally:
        child.kill()
        child.wait()


def test_a_small_run_writes_json_markdown_and_plot(tmp_path):
    out = tmp_path / "results"
    run = subprocess.run(
        [
            *(sys.executable, "-m", "bench.throughput", "--records", "3000", "--rounds", "1"),
            *("--unrelated-acls", "50", "--no-workers", "--out", str(out)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    data = json.loads((out / "throughput.json").read_text())
    paths = ["direct", "relay", "aclgate", "aclgate-nosplice"]
    assert data["config"]["paths"] == paths
    (entry,) = data["rounds"]
    for path in paths:
        for tool in ("producer", "consumer", "rdkafka"):
            cell = entry["results"][path][tool]
            assert cell["records"] == 3000 and cell["mb_per_s"] > 0 and cell["records_per_s"] > 0
    assert entry["results"]["aclgate"]["producer"]["proxy_cpu_s"] > 0
    assert data["summary"]["aclgate"]["consumer"]["ratio_to_direct"] > 0
    md = (out / "throughput.md").read_text()
    assert "| Direct to Kafka |" in md and "| aclgate |" in md and "--no-workers" in md
    assert "| aclgate --splice-min-bytes 0 |" in md and "librdkafka consumer ratio" in md
    assert "| Bare relay (bench/relay.py, the floor) |" in md and "over the bare relay" in md
    assert data["summary"]["aclgate"]["rdkafka"]["ratio_to_relay"] > 0
    assert (out / "throughput.png").stat().st_size > 0
