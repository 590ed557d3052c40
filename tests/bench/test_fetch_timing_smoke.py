"""`python -m bench.fetch_timing --quick` runs end to end against Apache Kafka and writes
well-formed results; its pcap reader and frame walk read a capture right.

A smoke test, not a performance test: it asserts the harness works (Kafka, the relay and both
aclgates start, every fetch of every path is timed, tcpdump's capture is matched hop by hop,
the report is complete), never how fast anything is. The figures are recorded by
`python -m bench.fetch_timing` (bench/results/fetch_timing.md). tcpdump is installed when
missing (Debian's package, as tests/deploy/tools.py installs its tools); if it cannot be, the
test fails under CI=true and skips elsewhere.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bench.fetch_timing import (
    Capture,
    CaptureUnavailable,
    find_tcpdump,
    frames,
    next_offset,
    read_pcap,
)

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _tcpdump() -> str:
    """tcpdump's path, installed with apt-get when missing; the test fails (CI) or skips
    (elsewhere) when it cannot be had or cannot capture (no root, no CAP_NET_RAW)."""
    from tests.deploy import tools

    found = find_tcpdump()
    if found is None:
        fd = tools._locked()
        try:
            if find_tcpdump() is None:
                tools._apt_install("tcpdump")
        except (tools.Unavailable, subprocess.TimeoutExpired) as exc:
            tools.unavailable(f"tcpdump is not available: {exc}")
        finally:
            os.close(fd)
        found = find_tcpdump()
    if found is None:
        tools.unavailable("tcpdump installed but not found")
    assert found is not None
    return found


def test_capture_reads_kafka_frames_off_loopback(tmp_path):
    """Three framed 'answers' over a loopback connection, captured: each found by its
    correlation id, with its size, and its first segment no later than its last."""
    tcpdump = _tcpdump()
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    sizes = {7: 100, 8: 300_000, 9: 2_000_000}

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            for cid, size in sizes.items():
                conn.recv(64)  # the 'request'
                conn.sendall(struct.pack(">ii", size - 4, cid) + bytes(size - 8))

    capture = Capture(tcpdump, tmp_path / "lo.pcap", [port])
    try:
        capture.start()
    except CaptureUnavailable as exc:  # e.g. neither root nor CAP_NET_RAW
        from tests.deploy import tools

        tools.unavailable(str(exc))
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = socket.create_connection(("127.0.0.1", port))
    with client:
        for cid, size in sizes.items():
            client.sendall(struct.pack(">ihhi", 8, 1, 17, cid))
            got = 0
            while got < size:
                got += len(client.recv(1 << 20))
    thread.join(10)
    server.close()
    counts = capture.stop()
    assert counts.get("captured", 0) > 0 and counts.get("dropped", 0) == 0

    streams = read_pcap(tmp_path / "lo.pcap")
    (key,) = [k for k, s in streams.items() if s.client]
    requests = frames(streams[key], request=True)
    answers = frames(streams[(key[1], key[0])], request=False)
    assert set(requests) == set(answers) == set(sizes)
    for cid, size in sizes.items():
        assert answers[cid].size == size
        assert answers[cid].first <= answers[cid].last
        assert requests[cid].last <= answers[cid].first
    assert answers[9].segments > 1  # 2 MB cannot go in one loopback segment


def test_next_offset_walks_whole_batches_only():
    def batch(base: int, last_delta: int, body: int) -> bytes:
        # base offset, length, leader epoch, magic, crc, attributes, last offset delta, ...
        rest = struct.pack(">ibIhi", 0, 2, 0, 0, last_delta) + bytes(body)
        return struct.pack(">qi", base, len(rest)) + rest

    records = batch(100, 14, 50) + batch(115, 14, 50)
    assert next_offset(records, 100) == 130
    assert next_offset(records + batch(130, 14, 50)[:-10], 100) == 130  # partial batch: again
    assert next_offset(b"", 42) == 42 and next_offset(None, 42) == 42


@pytest.mark.kafka
def test_quick_run_writes_json_and_markdown(tmp_path):
    _tcpdump()
    out = tmp_path / "results"
    run = subprocess.run(
        [sys.executable, "-m", "bench.fetch_timing", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    data = json.loads((out / "fetch_timing.json").read_text())
    paths = ["direct", "relay", "aclgate", "aclgate-nosplice"]
    assert data["config"]["paths"] == paths and data["config"]["capture"] is True
    fetches = data["config"]["fetches"]
    (entry,) = data["rounds"]
    assert sorted(entry["order"]) == sorted(paths)
    for path in paths:
        rtt = entry["rtt"][path]
        assert rtt["rtt"]["n"] == fetches and 0 < rtt["rtt"]["p50"] <= rtt["rtt"]["p99"]
        assert rtt["answer_bytes"] > 100_000 and rtt["errors"] == 0
        processes = {"client", "broker"} | ({"proxy"} if path != "direct" else set())
        assert set(rtt["cpu_us_per_fetch"]) == set(rtt["cpu_wait_us_per_fetch"]) == processes
        assert all(v > 0 for v in rtt["cpu_us_per_fetch"].values()) and rtt["cycle_us"] > 0
        hops = entry["hops"][path]
        assert hops["matched"] == hops["measured"] == fetches, path
        metrics = ["wire_rtt", "broker", "upstream_transfer"]
        if path != "direct":
            metrics += ["request_in_out", "first_byte_in_out", "last_byte_in_out"]
            assert rtt["proxy_cpu_us_per_fetch"] > 0
        for metric in metrics:
            assert hops[metric]["n"] == fetches and hops[metric]["p50"] <= hops[metric]["p99"]
    assert entry["rtt"]["aclgate"]["spliced_share"] > 0  # the zero-copy path was taken
    assert entry["rtt"]["aclgate-nosplice"]["spliced_share"] == 0
    summary = data["summary"]
    for path in paths[1:]:
        assert summary[path]["added_p50"]["min"] <= summary[path]["added_p50"]["max"]
        assert set(summary[path]["added_wire_p50_parts"]) >= {"wire_rtt", "last_byte_in_out"}
    env = data["environment"]
    for key in ("cpu_model", "cores", "python", "loadavg_before", "loadavg_after"):
        assert env[key], key

    md = (out / "fetch_timing.md").read_text()
    assert md.startswith("# Fetch timing")
    for heading in (
        "## Round trip (client-measured, capture off)",
        "## Who used the CPUs (capture off)",
        "## Hop by hop",
    ):
        assert heading in md
    for label in ("Direct to Kafka", "Bare relay (bench/relay.py)", "aclgate (zero-copy on)"):
        assert f"| {label} |" in md
    assert "| aclgate --splice-min-bytes 0 |" in md and "proxy: answer first byte in -> out" in md
