"""`python -m bench.latency --quick` runs end to end and writes well-formed results.

A smoke test, not a performance test: it asserts the harness works (processes start, every
path answers, the report is complete), never how fast anything is. The figures live in
bench/results/, recorded by `make bench`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_quick_run_writes_json_markdown_and_plot(tmp_path):
    out = tmp_path / "results"
    run = subprocess.run(
        [
            *(sys.executable, "-m", "bench.latency", "--quick"),
            *("--requests", "50", "--rate", "2000", "--out", str(out)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "round 2/2" in run.stdout
    assert "| **Direct to tansu** |" in run.stdout

    data = json.loads((out / "latency.json").read_text())
    paths = data["config"]["paths"]
    assert paths[:3] == ["direct", "relay", "aclgate"]
    assert len(data["rounds"]) == 2
    for entry in data["rounds"]:
        assert sorted(entry["order"]) == sorted(paths)
        for path in paths:
            for kind in ("metadata", "produce"):
                cell = entry["results"][path][kind]
                assert cell["n"] == 50
                assert 0 < cell["p50"] <= cell["p99"] <= cell["p99.9"] <= cell["max"]
    for path in paths:
        for kind in ("metadata", "produce"):
            stats = data["summary"][path][kind]["p50"]
            assert stats["min"] <= stats["median"] <= stats["max"]
    assert set(data["added_vs_direct"]) == set(paths) - {"direct"}
    env = data["environment"]
    for key in ("cpu_model", "cores", "python", "uvloop", "kio", "loadavg_before", "loadavg_after"):
        assert env[key], key

    cpu = data["cpu"]["per_request"]
    for path in ("relay", "aclgate"):  # each proxy's own CPU per request, every request type
        for kind in ("metadata", "produce", "produce_v11", "fetch_v17"):
            assert cpu[path][kind]["median"] > 0, (path, kind)
    assert set(data["cpu"]["vs_relay"]) >= {"aclgate"}

    md = (out / "latency.md").read_text()
    assert md.startswith("# Latency")
    assert "| CPU µs per request |" in md
    for label in ("Direct to tansu", "Relay, protocol, uvloop (floor)", "aclgate"):
        assert f"| {label}" in md or f"| **{label}**" in md
    assert "How to read it" in md

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return  # the plot needs the bench extra; `make test` does not install it
    png = (out / "latency.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000


def test_before_runs_another_commit_in_the_same_rounds(tmp_path):
    """`--before REV`: aclgate at REV (a worktree, removed afterwards) is one more path of
    every round, and the report pairs it with today's aclgate."""
    out = tmp_path / "results"
    worktrees_before = _worktrees()
    run = subprocess.run(
        [
            *(sys.executable, "-m", "bench.latency", "--quick", "--no-acls", "--before", "HEAD"),
            *("--requests", "30", "--rate", "2000", "--out", str(out)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads((out / "latency.json").read_text())
    assert data["config"]["paths"] == ["direct", "relay", "aclgate", "aclgate@HEAD"]
    for entry in data["rounds"]:
        assert entry["results"]["aclgate@HEAD"]["produce"]["n"] == 30
    paired = data["added_vs_before"]["aclgate"]["fetch_v17"]["p50"]["paired"]
    assert paired["min"] <= paired["median"] <= paired["max"]
    assert "fetch_v17" in data["cpu"]["vs_before"]["aclgate"]
    assert "## Before and after (`--before`)" in (out / "latency.md").read_text()
    assert _worktrees() == worktrees_before  # the worktree is gone


def _worktrees() -> str:
    return subprocess.run(
        ["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
