"""While the `kafka` ACL store is still loading, the health endpoints answer: /healthz 200 (the
process is alive: a liveness probe must not kill it in a long replay) and /readyz 503 saying the
store is not loaded, and no client listener is open yet (nothing is decided on a partial
policy). The store's cluster here is a closed port, so the load never completes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request

from aclgate.proxy.embedded_broker import free_port
from tests.fixtures.wait import wait_until


def _get(port: int, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    except OSError:
        return 0, {}


def test_health_answers_while_the_store_loads_and_clients_wait(tmp_path):
    listen, metrics, nowhere = free_port(), free_port(), free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            *("-m", "aclgate", "serve", "--upstream", f"127.0.0.1:{nowhere}"),
            *("--listen", f"127.0.0.1:{listen}", "--metrics-listen", f"127.0.0.1:{metrics}"),
            *("--acl-store", "kafka", "--acl-bootstrap", f"127.0.0.1:{nowhere}"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "serve.log").open("wb"),
    )
    try:
        wait_until(lambda: _get(metrics, "/healthz")[0] == 200, timeout=30, what="/healthz")
        status, body = _get(metrics, "/readyz")
        assert status == 503, body
        assert body["ready"] is False
        assert body["acl_store"]["backend"] == "kafka"
        assert body["acl_store"]["loaded"] is False
        assert body["acl_store"]["records_replayed"] == 0
        assert body["acls_loaded"] is False
        # the client listener opens only once the policy is loaded
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", listen)) != 0
        assert proc.poll() is None, (tmp_path / "serve.log").read_text()
    finally:
        proc.kill()
        proc.wait(10)
