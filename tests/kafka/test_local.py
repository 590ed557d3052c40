"""`python -m tests.kafka.local up/status/down`: a detached cluster that outlives its command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.fixtures.kafka import require_kafka
from tests.kafka.cluster import _pid_alive, api_versions_ok

pytestmark = pytest.mark.kafka


def local(state_dir, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tests.kafka.local", "--state-dir", str(state_dir), *args],
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_up_status_down(tmp_path):
    require_kafka()
    state_dir = tmp_path / "kafka-local"
    up = local(state_dir, "up", "--nodes", "1", "--listeners", "PLAINTEXT,SASL_PLAINTEXT")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads((state_dir / "state.json").read_text())
        pid = state["nodes"][0]["pid"]
        port = state["listeners"]["PLAINTEXT"]["addresses"][0][2]
        assert f"aclgate serve --upstream 127.0.0.1:{port} " in up.stdout
        assert "users admin/admin-secret" in up.stdout
        assert _pid_alive(pid) and api_versions_ok("127.0.0.1", port)  # outlived `up`

        status = local(state_dir, "status")
        assert status.returncode == 0 and "node 1: pid" in status.stdout, status.stdout
        again = local(state_dir, "up")
        assert again.returncode == 0 and "already running" in again.stdout
    finally:
        down = local(state_dir, "down")
    assert down.returncode == 0, down.stderr
    assert not _pid_alive(pid)
    assert not state_dir.exists()
    assert local(state_dir, "status").returncode == 1
