"""While the `kafka` ACL store is still loading, the health endpoints answer: /healthz 200 (the
process is alive: a liveness probe must not kill it in a long replay) and /readyz 503 saying the
store is not loaded, and no client listener is open yet (nothing is decided on a partial
policy), unless --early-start opens it for super users. The store's cluster here is a closed
port, so the load never completes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

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


def _metadata_error(port: int, topic: str) -> int:
    """The error code a Metadata v12 request naming `topic` gets through the proxy."""
    from tests.fixtures.rawclient import RawClient, module, request_entity

    body = request_entity(
        3, 12, topics=(module(3, 12).MetadataRequestTopic(topic_id=None, name=topic),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False,
    )  # fmt: skip
    with RawClient(f"127.0.0.1:{port}", timeout=10) as client:
        return int(client.request(body).topics[0].error_code)


@pytest.mark.parametrize("super_user", [True, False], ids=["super user", "anyone else"])
def test_early_start_serves_super_users_while_the_store_loads(tmp_path, tansu, super_user):
    """--early-start (Kafka's early.start.listeners): the client listener opens while the
    store still loads; a super user is served, anyone else is answered UNKNOWN_SERVER_ERROR
    (Kafka's AuthorizerNotReadyException on the wire), and /readyz stays 503."""
    from kio.schema.errors import ErrorCode

    listen, metrics, nowhere = free_port(), free_port(), free_port()
    args = [
        sys.executable,
        *("-m", "aclgate", "serve", "--upstream", tansu.bootstrap, "--early-start"),
        *("--listen", f"127.0.0.1:{listen}", "--metrics-listen", f"127.0.0.1:{metrics}"),
        *("--acl-store", "kafka", "--acl-bootstrap", f"127.0.0.1:{nowhere}"),
    ]
    if super_user:
        args += ["--super-user", "User:ANONYMOUS"]
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    try:
        wait_until(lambda: "for clients" in log.read_text(), timeout=30, what="the listener")
        code = _metadata_error(listen, "early")
        if super_user:
            assert code == ErrorCode.unknown_topic_or_partition, code  # served by the broker
        else:
            assert code == ErrorCode.unknown_server_error, code
        status, body = _get(metrics, "/readyz")
        assert status == 503 and body["acl_store"]["loaded"] is False, body
        assert proc.poll() is None, log.read_text()
    finally:
        proc.kill()
        proc.wait(10)
