"""`python -m bench.soak` runs end to end against tansu and writes well-formed results.

A smoke test (about 20 s of traffic instead of 30 minutes), so the soak harness cannot rot
between the runs of `make soak`: the processes start, traffic flows through the SSL listener,
ACL changes and a certificate reload take effect, everything is read back and nothing is lost
or duplicated, and the report is complete. It asserts nothing about memory: a trend over 20 s
means nothing (the recorded runs live in bench/results/).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_short_soak_against_tansu(tmp_path):
    out = tmp_path / "results"
    run = subprocess.run(
        [
            *(sys.executable, "-m", "bench.soak", "--broker", "tansu", "--minutes", "0.33"),
            *("--rate", "100", "--acl-interval", "3", "--cert-interval", "8"),
            *("--admin-interval", "2", "--sample-interval", "1", "--progress-interval", "5"),
            *("--out", str(out)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "[  0.1/0.33 min] RSS" in run.stdout  # progress lines while it runs

    data = json.loads((out / "soak.json").read_text())
    result = data["result"]
    messages = result["messages"]
    assert messages["acknowledged"] >= 1000, messages
    assert messages["lost"] == 0 and messages["duplicated"] == 0, messages
    # (the live consumer group is not asserted on: tansu takes ~20 s to assign its partitions)
    assert sum(result["admin_ok"].values()) > 0
    assert len(result["acl_changes"]) >= 4
    assert result["acl_changes_in_effect"] == len(result["acl_changes"])
    assert {c["action"] for c in result["acl_changes"]} == {"add", "remove"}
    assert result["cert_reloads_served"] == len(result["cert_reloads"]) >= 1
    assert len(data["samples"]) >= 15
    assert result["rss"]["trend_all"]["slope_per_hour"] is not None
    assert result["rss"]["verdict"] in ("no growth trend", "growth trend", "shrinking trend")
    assert data["proxy_args"][:2] == ["--upstream", data["proxy_args"][1]]

    md = (out / "soak.md").read_text()
    assert md.startswith("# Soak: a 0.33-minute run through aclgate")
    assert "**Lost / duplicated** (read back through aclgate) | **0 / 0**" in md

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return  # the plot needs the bench extra; `make test` does not install it
    assert (out / "soak.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
