"""Clients that never read their answers cost bounded memory (issue 15, B1 and B2).

The proxy runs as a real `aclgate serve` process on uvloop, so its RSS is its own. Each test
pipelines many small requests on one connection without reading a byte back, for a fixed
time, and samples the proxy's RSS meanwhile: the proxy must stop reading the client (TCP
backpressure) instead of buffering requests or answers without limit.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from tests.fixtures.tansu import tansu  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow

#: an ApiVersions v0 request (header v1, null client id), correlation id 7
API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 7, -1)
MiB = 1024 * 1024


def _produce_acks1(topic: str) -> bytes:
    """A Produce v3 request with acks=1 for `topic` partition 0 and no records."""
    name = topic.encode()
    body = (
        struct.pack(">h", -1)  # transactional id: null
        + struct.pack(">hi", 1, 1000)  # acks=1, timeout
        + struct.pack(">i", 1)
        + struct.pack(">h", len(name))
        + name
        + struct.pack(">i", 1)
        + struct.pack(">ii", 0, -1)  # partition 0, null records
    )
    header = struct.pack(">hhih", 0, 3, 9, -1)
    return struct.pack(">i", len(header) + len(body)) + header + body


def _pipeline(address: str, frame: bytes, count: int, seconds: float) -> tuple[int, bool]:
    """Send `frame` up to `count` times without reading; returns (frames sent, blocked).

    `blocked` says the proxy stopped taking bytes: a send made no progress for a second."""
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # read nothing, hold little
    sock.settimeout(1.0)
    batch = frame * 500
    sent_frames = 0
    blocked = False
    deadline = time.monotonic() + seconds
    try:
        while sent_frames < count and time.monotonic() < deadline:
            try:
                sock.sendall(batch)
                sent_frames += 500
            except TimeoutError:
                blocked = True
                break
        # hold the connection open (still not reading) while the proxy's memory is sampled
        time.sleep(1.0)
    finally:
        sock.close()
    return sent_frames, blocked


def _flood_and_sample(proxy, frame: bytes, count: int = 2_000_000, seconds: float = 10.0):
    before = proxy.rss_bytes()
    peak = before
    result: dict[str, tuple[int, bool]] = {}
    worker = threading.Thread(
        target=lambda: result.setdefault("r", _pipeline(proxy.bootstrap, frame, count, seconds))
    )
    worker.start()
    while worker.is_alive():
        peak = max(peak, proxy.rss_bytes())
        time.sleep(0.05)
    worker.join()
    return before, peak, result["r"]


def test_pipelined_api_versions_without_reading_keep_rss_bounded(tansu, proxy_process):  # noqa: F811
    """B1: ApiVersions pipelined for 10 s (far more than 100,000; the kernel's socket
    buffers alone hold ~100,000 of them), answers never read: the proxy stops reading the
    client instead of queueing requests (uvloop ignores a pause in connection_made)."""
    proxy = proxy_process(
        "--upstream", tansu.bootstrap, "--listen", "127.0.0.1:0", "--allow-everyone-if-no-acl-found"
    )
    before, peak, (sent, blocked) = _flood_and_sample(proxy, API_VERSIONS_V0)
    growth = peak - before
    print(f"RSS {before / MiB:.0f} -> peak {peak / MiB:.0f} MiB; {sent} requests sent")  # -s
    assert growth < 40 * MiB, f"RSS grew {growth / MiB:.0f} MiB ({sent} requests sent)"
    assert blocked, f"the proxy read all {sent} requests of a client that reads nothing"
    assert proxy.proc.poll() is None


def test_pipelined_local_answers_keep_rss_bounded(proxy_process, tmp_path):
    """B2: on a SASL listener ApiVersions before authentication is answered by the proxy
    itself; a client that never reads those answers must be stopped, not buffered for."""
    users = tmp_path / "users.json"
    users.write_text('{"version": 1, "users": {}}')
    # no upstream is needed before authentication: a closed port is fine
    proxy = proxy_process(
        "--upstream",
        "127.0.0.1:9",
        "--listen",
        "127.0.0.1:0",
        "--listener-security-protocol",
        "SASL_PLAINTEXT",
        "--sasl-mechanisms",
        "PLAIN",
        "--users-file",
        str(users),
        "--metrics-listen",
        "127.0.0.1:0",
    )
    before, peak, (sent, blocked) = _flood_and_sample(proxy, API_VERSIONS_V0)
    growth = peak - before
    print(f"RSS {before / MiB:.0f} -> peak {peak / MiB:.0f} MiB; {sent} requests sent")  # -s
    assert growth < 40 * MiB, f"RSS grew {growth / MiB:.0f} MiB ({sent} requests sent)"
    assert blocked, f"the proxy read all {sent} requests of a client that reads nothing"
    # the answers the proxy made itself are counted as such
    assert proxy.metric("aclgate_responses_total", {"api": "ApiVersions", "source": "proxy"}) > 0


def test_pipelined_produce_without_reading_keeps_rss_bounded(tansu, proxy_process):  # noqa: F811
    """Issue 15 item 2: 20,000 pipelined Produce requests, answers never read."""
    proxy = proxy_process(
        "--upstream", tansu.bootstrap, "--listen", "127.0.0.1:0", "--allow-everyone-if-no-acl-found"
    )
    before, peak, (sent, _blocked) = _flood_and_sample(
        proxy, _produce_acks1("pipelined"), count=20_000
    )
    growth = peak - before
    print(f"RSS {before / MiB:.0f} -> peak {peak / MiB:.0f} MiB; {sent} requests sent")  # -s
    assert growth < 40 * MiB, f"RSS grew {growth / MiB:.0f} MiB ({sent} requests sent)"
    assert proxy.proc.poll() is None
