"""Fixtures for the fault tests: their own 3-node Kafka (faults stop its nodes, so it is never
shared with other tests) and the results table.

Set FAULTS_RESULTS=<file>.md to write every run's counts there (and the raw figures to
path.json); `make test-faults` writes bench/results/faults.md.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.harness import RunResult
from tests.fixtures.kafka import _cluster
from tests.kafka.cluster import KafkaCluster

RESULTS: list[RunResult] = []
DURATIONS: dict[str, float] = {}  # test id -> seconds of its call (both runs of a fault)


@pytest.fixture(scope="module")
def fault_cluster(tmp_path_factory) -> Iterator[KafkaCluster]:
    """3 nodes (node 1 the only controller), PLAINTEXT, for this module alone."""
    yield from _cluster("kafka_faults", tmp_path_factory, nodes=3)


@pytest.fixture
def cluster(fault_cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    """fault_cluster with every node up before the test and brought back after it."""
    fault_cluster.start_nodes()  # no-op when all run; waits until every node is ready
    yield fault_cluster
    fault_cluster.start_nodes()


@pytest.fixture
def record_run():
    """`record_run(result)` keeps a run for the summary and the results file."""
    return RESULTS.append


def _table(results: list[RunResult]) -> list[str]:
    rows = [
        "| fault | side | producer | produced | acked | lost | duplicated | failed "
        "| unacked read | fault s | run s | client errors |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        errors = ", ".join(f"{k} {v}" for k, v in sorted(r.errors.items())) or "none"
        rows.append(
            f"| {r.fault} | {r.side} | {r.producer} | {r.produced} | {r.acked} | {r.lost} "
            f"| {r.duplicated} | {r.failed} | {r.unacked_read} | {r.fault_seconds} "
            f"| {r.seconds} | {errors} |"
        )
    return rows


def pytest_terminal_summary(terminalreporter) -> None:
    if not RESULTS:
        return
    terminalreporter.section("fault runs (lost/duplicated per fault and side)")
    for line in _table(RESULTS):
        terminalreporter.write_line(line)


def pytest_runtest_logreport(report) -> None:
    if report.when == "call" and "tests/faults/test_faults.py" in report.nodeid:
        DURATIONS[report.nodeid.split("::", 1)[1]] = report.duration


def _code_version() -> str:
    """The commit the proxy ran from, and whether its code had uncommitted changes."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "proxy", "protocol", "authz"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "an unknown commit (no git)"
    return f"commit {head}" + (" with uncommitted changes in proxy/protocol/authz" if dirty else "")


def pytest_sessionfinish(session) -> None:
    target = os.environ.get("FAULTS_RESULTS")
    if not target or not RESULTS:
        return
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    code = _code_version()
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        "# Fault runs: idempotent producers through aclgate vs directly against Kafka",
        "",
        f"Written by `{' '.join(['pytest', *sys.argv[1:]])}` (FAULTS_RESULTS={target}) on {now}",
        f"against {code};",
        f"{os.cpu_count()} cores, load average {load} at the end, Python "
        f"{platform.python_version()}. Scenario and columns: tests/faults/harness.py and "
        'docs/kafka.md ("Fault tests").',
        "",
        *_table(RESULTS),
        "",
        "Fault details (seconds; readyz_* only on the aclgate side):",
        "",
    ]
    for r in RESULTS:
        details = ", ".join(f"{k}={v}" for k, v in r.fault_details.items())
        log = ", ".join(f"{k}={v}" for k, v in r.proxy_log.items())
        lines.append(
            f"- {r.fault} / {r.side} / {r.producer}: {details}; close {r.close_seconds} s"
            + (f"; aclgate log: {log}" if log else "")
        )
    from tests.fixtures.kafka import _started

    lines += [
        "",
        "Test durations (control run + aclgate run, each from topic creation to read back):",
        "",
    ]
    lines += [f"- {name}: {seconds:.1f} s" for name, seconds in DURATIONS.items()]
    if "kafka_faults" in _started:
        lines.append(
            f"- the 3-node cluster started in {_started['kafka_faults'][0].start_seconds:.1f} s"
        )
    path.write_text("\n".join(lines) + "\n")
    path.with_suffix(".json").write_text(
        json.dumps([r.to_json() for r in RESULTS], indent=1, sort_keys=True) + "\n"
    )
