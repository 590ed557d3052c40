"""`python -m bench.idle_connections` runs end to end and writes well-formed results.

A smoke test with 200 connections, so the harness cannot rot: it checks that the processes
start, the connections are held and counted and the report is complete, never how much memory
a connection costs (that figure lives in bench/results/, recorded by `make bench-idle`). The
one behaviour asserted is the one the benchmark exists to show: silent clients open no
upstream connection.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_small_run_writes_json_and_markdown(tmp_path):
    out = tmp_path / "results"
    run = subprocess.run(
        [
            *(sys.executable, "-m", "bench.idle_connections", "--connections", "200"),
            *("--variants", "silent,apiversions", "--settle", "0.5", "--out", str(out)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr

    data = json.loads((out / "idle_connections.json").read_text())
    assert data["connections"] == 200
    assert data["command"].startswith("python -m bench.idle_connections")
    by_variant = {v["variant"]: v for v in data["variants"]}
    assert set(by_variant) == {"silent", "apiversions"}
    for v in by_variant.values():
        assert v["client"]["opened"] == 200, v["client"]
        assert v["held"] == v["held_per_metric"] == 200
        assert v["refused"] == 0
        assert 0 < v["rss_before_bytes"] <= v["rss_held_bytes"]
        assert v["per_connection_bytes"] == round(v["delta_bytes"] / 200)
    assert by_variant["silent"]["upstream_connections_opened"] == 0
    assert data["environment"]["python"]

    md = (out / "idle_connections.md").read_text()
    assert md.startswith("# Memory per idle client connection")
    assert "| silent: " in md and "| apiversions: " in md
