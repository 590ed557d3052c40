"""The `aclgate` command line, configuration, metrics/health endpoints and the demo."""

from __future__ import annotations

import json
import re
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aclgate.authz.aclfile import dump_acl_file
from aclgate.authz.model import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from aclgate.proxy.config import ConfigError, ProxyConfig, add_arguments, from_args
from aclgate.proxy.demo.embedded_broker import TansuBroker, api_versions_probe, free_port
from tests.fixtures.wait import wait_until
from tests.scenarios import clients

ACLGATE = [sys.executable, "-m", "aclgate"]


def run_cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*ACLGATE, *args], capture_output=True, text=True, timeout=60, **kw)


def democlient(bootstrap: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`python -m aclgate.proxy.demo.client --bootstrap BOOTSTRAP ARGS...`, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "aclgate.proxy.demo.client", "--bootstrap", bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_version_and_help():
    out = run_cli("--version")
    assert out.returncode == 0 and out.stdout.startswith("aclgate ")
    top = run_cli("--help")
    assert "serve" in top.stdout and "acls" in top.stdout and "quick start" in top.stdout
    serve = run_cli("serve", "--help")
    for flag in (
        "--upstream",
        "--listen",
        "--advertised-host",
        "--node-port",
        "--broker-ports",
        "--metrics-listen",
        "--config",
        "--log-level",
    ):
        assert flag in serve.stdout
    assert run_cli("frobnicate").returncode == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "at least one --upstream"),
        (["--upstream", "nohost"], "is not HOST:PORT"),
        (["--upstream", "k:99999"], "out of range"),
        (["--upstream", "k:9092", "--broker-ports", "20-10"], "FIRST <= LAST"),
        (["--upstream", "k:9092", "--node-port", "1=x"], "NODE_ID=PORT"),
        (["--upstream", "k:9092", "--config", "/nonexistent.toml"], "does not exist"),
    ],
)
def test_serve_rejects_bad_configuration_with_a_clear_message(args, message):
    out = run_cli("serve", *args)
    assert out.returncode == 2
    assert message in out.stderr


def parse(argv: list[str]) -> ProxyConfig:
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return from_args(parser.parse_args(argv))


def test_toml_config_and_flags_override(tmp_path: Path):
    path = tmp_path / "aclgate.toml"
    path.write_text(
        'upstream = ["k1:9092", "k2:9093"]\nlisten = "0.0.0.0:9000"\nbroker-ports = "19000-19010"\n'
        'node_port = { 7 = 19100 }\nmax_frame_bytes = "1MiB"\nlog_level = "debug"\n'
    )
    cfg = parse(["--config", str(path)])
    assert cfg.upstream == [("k1", 9092), ("k2", 9093)]
    assert cfg.listen == ("0.0.0.0", 9000) and cfg.client_host == "127.0.0.1"
    assert cfg.broker_ports == (19000, 19010) and cfg.node_port == {7: 19100}
    assert cfg.max_frame_bytes == 1 << 20 and cfg.log_level == "DEBUG"
    cfg = parse(
        ["--config", str(path), "--listen", "127.0.0.2:9001", "--advertised-host", "proxy.example"]
    )
    assert cfg.listen == ("127.0.0.2", 9001) and cfg.client_host == "proxy.example"
    path.write_text('upstream = ["k:1"]\nunknown_key = 1\n')
    with pytest.raises(ConfigError, match="unknown setting 'unknown_key'"):
        parse(["--config", str(path)])
    path.write_text("upstream = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        parse(["--config", str(path)])
    path.write_text('upstream = ["k:1"]\nshutdown_grace = 5\n')
    assert parse(["--config", str(path)]).shutdown_grace == 5.0
    for flag, value, message in (
        ("--shutdown-grace", "-1", "^--shutdown-grace -1: must be 0 or more"),
        ("--connect-timeout", "0", "^--connect-timeout 0: must be positive"),
    ):
        with pytest.raises(ConfigError, match=message):
            parse(["--config", str(path), flag, value])


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_metrics_health_and_readiness(tansu, proxy_factory):
    proxy = proxy_factory(tansu.bootstrap, metrics_listen=("127.0.0.1", 0))
    base = "http://{}:{}".format(*proxy.server.metrics_address)
    clients.confluent_idempotent_and_transactions(
        proxy.bootstrap, "metrics-topic", "metrics-txn", hides_aborted=False
    )
    status, body = http_get(base + "/metrics")
    assert status == 200
    assert 'aclgate_requests_total{api="Produce"}' in body
    assert 'aclgate_request_bytes_total{api="Produce"}' in body
    assert "aclgate_connections_active" in body
    assert proxy.metric("aclgate_requests_total", {"api": "Produce"}) > 0
    assert http_get(base + "/healthz")[0] == 200
    status, body = http_get(base + "/readyz")
    assert status == 200 and json.loads(body)["ready"] is True
    assert http_get(base + "/nope")[0] == 404


def test_readyz_is_503_until_upstream_reachable(proxy_factory):
    proxy = proxy_factory(f"127.0.0.1:{free_port()}", metrics_listen=("127.0.0.1", 0))
    status, body = http_get("http://{}:{}/readyz".format(*proxy.server.metrics_address))
    assert status == 503 and json.loads(body)["upstream_reachable"] is False


def _reachable_metric(proxy: Any) -> float:
    """aclgate_upstream_reachable as /metrics serves it."""
    status, body = http_get("http://{}:{}/metrics".format(*proxy.server.metrics_address))
    assert status == 200
    values = re.findall(r"^aclgate_upstream_reachable (\S+)$", body, re.M)
    assert len(values) == 1, body
    return float(values[0])


def test_upstream_reachable_metric_follows_real_connections(
    proxy_factory: Callable[..., Any], tmp_path: Path
) -> None:
    """aclgate_upstream_reachable is 0 while nothing answers at the upstream address (the
    broker check, and a client's connection that finds no bootstrap server), 1 once a broker
    there answers the proxy's connection, and 0 again when it stops."""
    port = free_port()
    proxy = proxy_factory(
        f"127.0.0.1:{port}", metrics_listen=("127.0.0.1", 0), upstream_check_interval=0.2
    )
    assert _reachable_metric(proxy) == 0
    client = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    client.sendall(struct.pack(">ihhih", 10, 18, 0, 7, -1))  # ApiVersions v0
    try:  # closed: no bootstrap server upstream
        assert client.recv(4) == b""
    except ConnectionResetError:
        pass
    finally:
        client.close()
    assert proxy.metric("aclgate_upstream_connect_failures_total") >= 1
    assert proxy.metric("aclgate_errors_total", {"kind": "upstream_unreachable"}) == 1
    assert _reachable_metric(proxy) == 0
    broker = TansuBroker(port=port, log_path=tmp_path / "tansu.log").start()
    try:
        wait_until(lambda: _reachable_metric(proxy) == 1, timeout=10, what="reachable: 1")
        broker.stop()
        wait_until(lambda: _reachable_metric(proxy) == 0, timeout=10, what="reachable: 0")
    finally:
        broker.stop()


def test_serve_subprocess_end_to_end(tansu, tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [*ACLGATE, "serve", "--upstream", tansu.bootstrap, "--listen", f"127.0.0.1:{port}"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not api_versions_probe("127.0.0.1", port) and time.monotonic() < deadline:
            time.sleep(0.05)
        from confluent_kafka.admin import AdminClient

        md = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=10)
        assert all(b.host == "127.0.0.1" and b.port != tansu.port for b in md.brokers.values())
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert f"listening on 127.0.0.1:{port}" in err and "shutting down" in err


def test_demo_runs_prints_bootstrap_and_stops_on_ctrl_c():
    port = free_port()
    proc = subprocess.Popen(
        [
            *ACLGATE,
            "demo",
            "--listen",
            f"127.0.0.1:{port}",
            "--metrics-listen",
            f"127.0.0.1:{free_port()}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not api_versions_probe("127.0.0.1", port) and time.monotonic() < deadline:
            time.sleep(0.05)
        produce = democlient(f"127.0.0.1:{port}", "produce", "demo", "a", "b")
        assert produce.returncode == 0 and "sent 2 message(s)" in produce.stdout
        # the idle clock starts at the assignment: the group join alone takes about 3 s (the
        # broker's initial rebalance delay), so this reads nothing if the client counted
        # idleness from subscribe
        consume = democlient(f"127.0.0.1:{port}", "consume", "demo", "--idle", "2", timeout=90)
        assert consume.stdout.count("demo[") == 2, consume.stdout + consume.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"bootstrap servers   127.0.0.1:{port}" in out
    assert "stopping the broker" in err
    # the hidden broker is gone too, and clients never saw its port
    hidden = int(re.search(r"embedded broker \(tansu\) on hidden port (\d+)", err).group(1))
    assert not api_versions_probe("127.0.0.1", hidden)
    assert str(hidden) not in out


def test_democlient_gives_up_when_no_group_assigns_partitions():
    """Nothing listens on the port: the consumer never joins, and says so instead of
    printing "read 0 message(s)" as if the topic were empty."""
    consume = democlient(f"127.0.0.1:{free_port()}", "consume", "demo", "--join-timeout", "2")
    assert consume.returncode == 1, consume.stderr
    assert "no partitions of demo assigned within 2 s" in consume.stderr
    assert "read 0" not in consume.stderr


def test_every_metric_is_documented_and_policy_state_is_exported(tansu, proxy_factory, tmp_path):
    """docs/operations.md lists every metric family the proxy exports (and nothing else), and
    the policy gauges follow a hot reload, including a broken file that keeps the old one."""
    acls = tmp_path / "acls.json"
    acls.write_text('{"version": 1, "acls": []}')
    proxy = proxy_factory(
        tansu.bootstrap,
        metrics_listen=("127.0.0.1", 0),
        acl_file=acls,
        audit_file=tmp_path / "audit.jsonl",
    )
    clients.confluent_idempotent_and_transactions(
        proxy.bootstrap, "ops-topic", "ops-txn", hides_aborted=False
    )
    proxy.metric("aclgate_requests_total")  # nothing to wait for: the registry is read live
    families = {m.name for m in proxy.server.metrics.registry.collect()}
    doc = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    documented = set(re.findall(r"^\| `(aclgate_[a-z_]+)` \|", doc, re.M))
    # the audit topic's families exist only with --audit-topic (tests/proxy/test_audit_topic.py)
    with_audit_topic = set(
        re.findall(r"^\| `(aclgate_[a-z_]+)` \|[^\n]*\| `--audit-topic`:", doc, re.M)
    )
    assert with_audit_topic, "the audit topic's metrics are no longer marked `--audit-topic`:"
    # and the LDAP directory's only with --ldap-url (tests/ldap/)
    with_ldap = set(re.findall(r"^\| `(aclgate_[a-z_]+)` \|[^\n]*\| `--ldap-url`:", doc, re.M))
    assert len(with_ldap) == 5, with_ldap
    exported = {f"{n}_total" if f"{n}_total" in documented else n for n in families}
    assert exported == documented - with_audit_topic - with_ldap
    assert proxy.metric("aclgate_acls_ready") == 1
    assert proxy.metric("aclgate_acl_file_invalid") == 0
    version = proxy.metric("aclgate_acl_policy_version")
    acls.write_text("{not json")
    wait_until(lambda: proxy.metric("aclgate_acl_file_invalid") == 1, 10)
    assert proxy.metric("aclgate_acl_file_load_errors_total") == 1
    assert proxy.metric("aclgate_acl_policy_version") == version  # the old policy stays
    one = AclBinding(
        ResourceType.TOPIC,
        "t",
        PatternType.LITERAL,
        "User:x",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    acls.write_text(dump_acl_file([one]))
    wait_until(lambda: proxy.metric("aclgate_acl_file_invalid") == 0, 10)
    assert proxy.metric("aclgate_acls") == 1
    assert proxy.metric("aclgate_acl_policy_version") == version + 1
    assert proxy.metric("aclgate_acl_file_last_load_timestamp_seconds") > time.time() - 60
    proxy.run(proxy.server.audit.flush_aggregates)  # the window's allowed decisions
    assert proxy.metric("aclgate_audit_lines_total") > 0
