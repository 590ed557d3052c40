"""Every repeated log line of a real `aclgate serve` is rate-limited (issue 23 item 5).

One flood per kind a client can repeat, each against its own `aclgate serve` process (the
console logging and the real event loop, as an operator runs it): connections to a proxy
whose cluster is down, garbage frames, connections over --max-connections, TLS handshakes
that fail, SASL logins with a wrong password. The floods run at once for a few seconds,
within one 10 s interval of the limit; then the proxies stop (which writes the pending
summaries). Each kind may write its line and its summary, nothing more, and the metric
aclgate_log_lines_suppressed_total{kind} counts what was held back.

tests/listeners/test_log_flood.py pins the same limit in process, and the limiter itself.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from aclgate.proxy.demo.embedded_broker import free_port
from tests.authz.cli import run as aclgate
from tests.fixtures.proxyprocess import ProxyProcess
from tests.fixtures.rawclient import RawClient, request_entity
from tests.listeners.util import metadata_request, sasl_login

pytestmark = pytest.mark.slow

FLOOD_SECONDS = 4.0
#: the line of a kind and its summary; a third would mean a line outside the limit
MAX_LINES_PER_KIND = 2
SUPPRESSED = "aclgate_log_lines_suppressed_total"
MALFORMED = struct.pack(">i", 14) + b"\x00\x03\x00\x0c\x00\x00\x00\x01\x00\x02ab\x07\x01"


def _closed(client: RawClient) -> None:
    assert client.is_closed_by_peer(), "the proxy kept the connection"


def _unreachable(address: str) -> None:
    """A client retrying against a cluster that is down: each request finds no upstream."""
    with RawClient(address) as client:
        client.send(metadata_request())
        _closed(client)


def _garbage(address: str) -> None:
    with RawClient(address) as client:
        client.send_raw(MALFORMED)
        _closed(client)


def _refused(address: str) -> None:
    with RawClient(address) as client:
        _closed(client)


def _tls(address: str) -> None:
    """Plain Kafka bytes to a TLS listener: the handshake fails."""
    with RawClient(address) as client:
        client.send(request_entity(18, 0))
        _closed(client)


def _bad_password(address: str) -> None:
    with RawClient(address) as client:
        answer = sasl_login(client, "PLAIN", "alice", "wrong")
        assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
        _closed(client)


def _flood(action: Callable[[str], None], address: str, counts: dict[str, int], key: str):
    deadline = time.monotonic() + FLOOD_SECONDS
    while time.monotonic() < deadline:
        try:
            action(address)
        except OSError:  # a connection reset by the proxy's close: still one attempt
            pass
        counts[key] += 1


def _log_lines(proc: ProxyProcess, *needles: str) -> list[str]:
    """The proxy's log lines at INFO and above naming any of `needles`."""
    return [
        line for line in proc.lines if any(n in line for n in needles) and " DEBUG " not in line
    ]


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    out = tmp_path / "pki"
    out.mkdir()
    for step in (
        ["certs", "init", "--out", str(out)],
        ["certs", "server", "--out", str(out), "--dns", "localhost", "--ip", "127.0.0.1"],
    ):
        result = aclgate(*step)
        assert result.returncode == 0, result.stderr
    return out


@pytest.fixture
def users(tmp_path: Path) -> Path:
    path = tmp_path / "users.json"
    result = aclgate("users", "add", "alice", "--users-file", str(path), "--mechanism", "PLAIN",
                     "--password-stdin", stdin="right\n")  # fmt: skip
    assert result.returncode == 0, result.stderr
    return path


def test_a_flood_of_each_kind_writes_a_line_and_a_summary(
    tmp_path: Path, tansu: Any, pki: Path, users: Path
) -> None:
    common = ["--listen", "127.0.0.1:0", "--allow-everyone-if-no-acl-found",
              "--metrics-listen", "127.0.0.1:0"]  # fmt: skip
    down = f"127.0.0.1:{free_port()}"
    argv = {
        "upstream_unreachable": ["--upstream", down, *common],
        "malformed_request": ["--upstream", tansu.bootstrap, *common],
        "connection_limit": ["--upstream", tansu.bootstrap, "--max-connections", "1", *common],
        "tls_handshake": [
            "--upstream", tansu.bootstrap, "--listener-security-protocol", "SSL",
            "--ssl-certfile", str(pki / "server.crt"), "--ssl-keyfile", str(pki / "server.key"),
            *common,
        ],
        "authentication_failed": [
            "--upstream", tansu.bootstrap, "--listener-security-protocol", "SASL_PLAINTEXT",
            "--sasl-mechanisms", "PLAIN", "--users-file", str(users),
            "--connection-failed-authentication-delay-ms", "0", *common,
        ],
    }  # fmt: skip
    # started at once: each takes seconds to listen on a loaded 2-core machine
    with ThreadPoolExecutor(len(argv)) as pool:
        starting = {k: pool.submit(ProxyProcess, a, tmp_path / f"{k}.log") for k, a in argv.items()}
    proxies = {k: f.result() for k, f in starting.items() if f.exception() is None}
    try:
        for future in starting.values():
            future.result()  # a proxy that did not start fails the test (the others stop)
        _flood_and_check(proxies)
    finally:
        for proc in proxies.values():
            proc.stop()


def _flood_and_check(proxies: dict[str, ProxyProcess]) -> None:
    actions = {
        "upstream_unreachable": _unreachable,
        "malformed_request": _garbage,
        "connection_limit": _refused,
        "tls_handshake": _tls,
        "authentication_failed": _bad_password,
    }
    # what each kind's line says (the close, refusal or handshake line)
    needles = {
        "upstream_unreachable": ("cannot reach a bootstrap server",),
        "malformed_request": ("closing connection from",),
        "connection_limit": ("refused connection from", "closing connection from"),
        "tls_handshake": ("TLS handshake with",),
        "authentication_failed": ("closing connection from",),
    }
    holder = socket.create_connection(("127.0.0.1", proxies["connection_limit"].bootstrap_port))
    counts = dict.fromkeys(proxies, 0)
    threads = [
        threading.Thread(target=_flood, args=(actions[k], p.bootstrap, counts, k))
        for k, p in proxies.items()
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(FLOOD_SECONDS + 30)
        suppressed = {k: p.metric(SUPPRESSED, {"kind": k}) for k, p in proxies.items()}
    finally:
        holder.close()
    for proc in proxies.values():
        proc.stop()  # writes the summaries still pending (stopping twice is harmless)
    report = {
        kind: (counts[kind], len(_log_lines(proxies[kind], *needles[kind])), suppressed[kind])
        for kind in proxies
    }
    print(f"(attempts, lines logged, lines held back) per kind in {FLOOD_SECONDS} s: {report}")
    for kind, (attempts, lines, held) in report.items():
        logged = _log_lines(proxies[kind], *needles[kind])
        assert attempts >= 10, report  # the flood did flood (a SASL login hashes: ~30 in 4 s)
        assert 1 <= lines <= MAX_LINES_PER_KIND, (kind, logged)
        assert held >= attempts - MAX_LINES_PER_KIND - 1, report
        if lines == 2:
            assert "held back" in logged[1], logged
    # and nothing else repeated: each proxy's whole log stays short
    for kind, proc in proxies.items():
        assert len(proc.lines) <= 20, (kind, proc.lines)
