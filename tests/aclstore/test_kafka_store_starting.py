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
from typing import Any

import pytest

from aclgate.proxy.demo.embedded_broker import free_port
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


def _metadata(topic: str) -> Any:
    from tests.fixtures.rawclient import module, request_entity

    return request_entity(
        3, 12, topics=(module(3, 12).MetadataRequestTopic(topic_id=None, name=topic),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False,
    )  # fmt: skip


def _refused_while_loading() -> list[Any]:
    """Requests of several handler families (topics, ACL admin, groups) that Kafka authorizes
    (DescribeCluster without authorized operations, for one, it does not: still served)."""
    from tests.fixtures.rawclient import request_entity

    describe_acls = dict(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
        principal_filter=None, host_filter=None, operation=1, permission_type=1,
    )  # fmt: skip
    return [
        _metadata("early"),
        request_entity(29, 3, **describe_acls),
        request_entity(10, 4, key_type=0, coordinator_keys=("g",)),
    ]


@pytest.mark.parametrize("super_user", [True, False], ids=["super user", "anyone else"])
def test_early_start_serves_super_users_while_the_store_loads(tmp_path, tansu, super_user):
    """--early-start (Kafka's early.start.listeners): the client listener opens while the
    store still loads; a super user is served, anyone else is refused as a listener that is
    not open yet refuses it (a close: the client connects again), and /readyz stays 503."""
    from kio.schema.errors import ErrorCode

    from tests.fixtures.rawclient import RawClient

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
        if super_user:
            with RawClient(f"127.0.0.1:{listen}", timeout=10) as client:
                topic = client.request(_metadata("early")).topics[0]
            assert topic.error_code == ErrorCode.unknown_topic_or_partition  # the broker's
        else:
            for request in _refused_while_loading():
                with RawClient(f"127.0.0.1:{listen}", timeout=10) as client:
                    client.send(request)
                    assert client.recv_frame() is None, request  # closed, no answer
            wait_until(
                lambda: "only super users are served" in log.read_text(),
                timeout=10,
                what="the close line",
            )
            assert "internal_error" not in log.read_text()
        status, body = _get(metrics, "/readyz")
        assert status == 503 and body["acl_store"]["loaded"] is False, body
        assert proc.poll() is None, log.read_text()
    finally:
        proc.kill()
        proc.wait(10)
