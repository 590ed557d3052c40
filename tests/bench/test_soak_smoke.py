"""`python -m bench.soak` runs end to end against tansu and writes well-formed results.

A smoke test (about 15 s of traffic instead of 30 minutes), so the soak harness cannot rot
between the runs of `make soak`: the processes start, traffic flows through each listener
(SSL, mTLS, SASL_SSL with KIP-368 re-authentication) authenticated as the principal the
ACLs grant, ACL changes and a certificate reload take effect, everything is read back and
nothing is lost or duplicated, and the report is complete. It asserts nothing about memory:
a trend over 15 s means nothing (the recorded runs live in bench/results/).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


#: --listener -> (the result files' stem, the title's listener, the principal the ACLs grant)
LISTENERS = {
    "ssl": ("soak", "SSL", "User:ANONYMOUS"),
    "mtls": ("soak-mtls", "mTLS", "User:CN=soak"),
    "sasl_ssl": ("soak-sasl-ssl", "SASL_SSL (SCRAM-SHA-512)", "User:soak"),
}


@pytest.mark.parametrize("listener", LISTENERS)
def test_short_soak_against_tansu(tmp_path: Path, listener: str) -> None:
    stem, title, principal = LISTENERS[listener]
    out = tmp_path / "results"
    run = subprocess.run(
        [
            *(sys.executable, "-m", "bench.soak", "--broker", "tansu", "--minutes", "0.25"),
            *("--rate", "100", "--acl-interval", "3", "--cert-interval", "8"),
            *("--admin-interval", "2", "--sample-interval", "1", "--progress-interval", "5"),
            *("--out", str(out), "--listener", listener),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "[  0.1/0.25 min] RSS" in run.stdout  # progress lines while it runs

    data = json.loads((out / f"{stem}.json").read_text())
    assert (data["listener"], data["principal"]) == (title, principal)
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

    md = (out / f"{stem}.md").read_text()
    assert md.startswith(f"# Soak: a 0.25-minute run through aclgate ({title} listener)")
    assert f"listener as {principal}:" in md
    assert "**Lost / duplicated** (read back through aclgate) | **0 / 0**" in md

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return  # the plot needs the bench extra; `make test` does not install it
    assert (out / f"{stem}.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
