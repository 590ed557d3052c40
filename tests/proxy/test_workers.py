"""`aclgate serve --workers 2`: two proxy processes on the same ports, one /metrics, /readyz,
ACL reloads in both, a killed worker restarted, SIGTERM draining all (proxy/process/workers.py)."""

from __future__ import annotations

import json
import os
import signal
import socket
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from aclgate.authz.aclfile import dump_acl_file
from aclgate.authz.model import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from aclgate.proxy.config import ConfigError, ProxyConfig, parse_workers
from aclgate.proxy.demo.embedded_broker import free_port
from aclgate.proxy.ops.metricsmerge import MetricsMerger
from aclgate.proxy.process.workers import restart_delay
from aclgate.proxy.upstream.directory import port_for_node
from tests.fixtures.ports import free_port_block
from tests.fixtures.wait import wait_until
from tests.scenarios import clients

TANSU_NODE = 111  # the embedded broker's node id


def acl(resource: ResourceType, name: str, permission=AclPermissionType.ALLOW, op=AclOperation.ALL):
    return AclBinding(resource, name, PatternType.LITERAL, "User:ANONYMOUS", "*", op, permission)


ALLOW_ALL = [acl(ResourceType.TOPIC, "*"), acl(ResourceType.GROUP, "*")]


def port_base(node_ids: tuple[int, ...]) -> int:
    """FIRST for --broker-ports such that FIRST + id is free for each node id."""
    return free_port_block(max(node_ids) + 1)


def start_workers(
    proxy_process,
    upstream: str,
    acl_file: Path,
    node_ids: tuple[int, ...] = (TANSU_NODE,),
    extra: tuple[str, ...] = (),
):
    """`aclgate serve --workers 2`; returns it and {node id: its proxy port}."""
    first = port_base(node_ids)
    proxy = proxy_process(
        "--upstream",
        upstream,
        "--listen",
        f"127.0.0.1:{free_port()}",
        "--broker-ports",
        f"{first}-{first + 999}",
        "--metrics-listen",
        "127.0.0.1:0",
        "--acl-file",
        str(acl_file),
        "--workers",
        "2",
        *extra,
    )
    wait_until(lambda: proxy.readyz()[0] == 200, 30, what="every worker ready")
    return proxy, {n: port_for_node(n, (first, first + 999)) for n in node_ids}


def workers(proxy) -> list[dict]:
    return proxy.readyz()[1]["workers"]


def get(address: str, path: str) -> str:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as answer:
        return answer.read().decode()


def samples(text: str, name: str, labels: dict[str, str] | None = None) -> float:
    """The sum of the samples `name` (with these labels) in an exposition."""
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in (labels or {}).items())
    )


def per_worker(proxy, name: str, labels: dict[str, str] | None = None) -> list[float]:
    """`name` as each worker's own /metrics says it (the loopback port /readyz names)."""
    return [samples(get(w["health"], "/metrics"), name, labels) for w in workers(proxy)]


def connect_until_both_workers(proxy, bootstrap: str) -> set[tuple[str, int]]:
    """Open fresh client connections until each worker has accepted some (the kernel spreads
    them by a hash of the client's address and port, so a few suffice); returns every broker
    address the clients were given."""
    from confluent_kafka.admin import AdminClient

    given: set[tuple[str, int]] = set()
    for attempt in range(40):
        if attempt >= 4 and all(per_worker(proxy, "aclgate_connections_total")):
            return given
        found = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
        given |= {(b.host, b.port) for b in found.brokers.values()}
    raise AssertionError(f"connections did not reach both workers: {workers(proxy)}")


def topic_error(bootstrap: str, topic: str) -> str | None:
    """What a new client (new connections) is told about `topic`: None, or the error name."""
    from confluent_kafka.admin import AdminClient

    found = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    error = found.topics[topic].error
    return None if error is None else error.name()


@pytest.mark.slow
def test_two_workers_serve_the_same_ports_with_one_metrics_and_readiness(
    tansu, proxy_process, tmp_path
):
    acls = tmp_path / "acls.json"
    acls.write_text(dump_acl_file(ALLOW_ALL))
    proxy, ports = start_workers(proxy_process, tansu.bootstrap, acls)
    ready = proxy.readyz()[1]
    assert [w["worker"] for w in ready["workers"]] == [0, 1]
    assert len({w["pid"] for w in ready["workers"]}) == 2
    assert all(w["ready"] and w["upstream_reachable"] for w in ready["workers"])
    status, body = proxy.http("/healthz")
    assert status == 200 and json.loads(body)["healthy"] is True
    # a second aclgate with the same ports does not join the workers' SO_REUSEPORT group
    import subprocess
    import sys

    second = subprocess.run(
        [sys.executable, "-m", "aclgate", "serve", *proxy.args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 1
    assert (
        f"cannot start: --listen 127.0.0.1:{proxy.bootstrap_port}: address already in use"
    ) in second.stderr

    # a real client round trip through the shared bootstrap and broker ports
    clients.confluent_roundtrip(proxy.bootstrap, "w-round", "w-group", {ports[TANSU_NODE]})
    connect_until_both_workers(proxy, proxy.bootstrap)
    per = per_worker(proxy, "aclgate_connections_total")
    assert all(per), per
    assert all(per_worker(proxy, "aclgate_broker_listeners"))  # both serve the broker port

    # /metrics sums the workers (nothing runs between the scrapes)
    for name, labels in [
        ("aclgate_connections_total", None),
        ("aclgate_requests_total", {"api": "Metadata"}),
        ("aclgate_requests_total", {"api": "Produce"}),
        ("aclgate_request_bytes_total", {"api": "Fetch"}),
    ]:
        each = per_worker(proxy, name, labels)
        assert samples(proxy.http("/metrics")[1], name, labels) == sum(each), (name, each)
    assert samples(proxy.http("/metrics")[1], "aclgate_requests_total", {"api": "Produce"}) > 0
    assert proxy.metric("aclgate_workers") == 2
    assert proxy.metric("aclgate_acls_ready") == 1  # a state: not 2
    assert proxy.metric("aclgate_upstream_reachable") == 1  # a state too
    for index, count in enumerate(per_worker(proxy, "aclgate_connections_total")):
        assert proxy.metric("aclgate_worker_connections_total", {"worker": str(index)}) == count

    # an ACL file change reaches both workers: each reloads it, each enforces it
    versions = per_worker(proxy, "aclgate_acl_policy_version")
    denied = per_worker(
        proxy, "aclgate_decisions_total", {"decision": "DENIED", "resource_type": "TOPIC"}
    )
    assert topic_error(proxy.bootstrap, "w-round") is None
    acls.write_text(
        dump_acl_file([*ALLOW_ALL, acl(ResourceType.TOPIC, "w-round", AclPermissionType.DENY)])
    )
    wait_until(
        lambda: all(
            now > before
            for now, before in zip(
                per_worker(proxy, "aclgate_acl_policy_version"), versions, strict=True
            )
        ),
        20,
        what="both workers to load the new ACL file",
    )
    assert proxy.metric("aclgate_acl_file_reloads_total") == sum(
        per_worker(proxy, "aclgate_acl_file_reloads_total")
    )
    for _ in range(40):  # until each worker has refused on some connection
        assert topic_error(proxy.bootstrap, "w-round") == "TOPIC_AUTHORIZATION_FAILED"
        now = per_worker(
            proxy, "aclgate_decisions_total", {"decision": "DENIED", "resource_type": "TOPIC"}
        )
        if all(n > b for n, b in zip(now, denied, strict=True)):
            break
    else:
        raise AssertionError(f"a worker never refused the revoked topic: {denied} -> {now}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_a_killed_worker_is_restarted_and_clients_reconnect_then_sigterm_drains_all(
    tansu, proxy_process, tmp_path
):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    acls = tmp_path / "acls.json"
    acls.write_text(dump_acl_file(ALLOW_ALL))
    proxy, _ = start_workers(proxy_process, tansu.bootstrap, acls)
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    for future in admin.create_topics([NewTopic("w-kill", 1, 1)]).values():
        future.result(30)
    producers = []
    # producers until worker 0 holds some of their connections: killing it must cut clients
    for _ in range(20):
        producer = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 5})
        producer.produce("w-kill", b"before")
        assert producer.flush(30) == 0
        producers.append(producer)
        if per_worker(proxy, "aclgate_connections_active")[0] > 0:
            break
    assert per_worker(proxy, "aclgate_connections_active")[0] > 0
    produced_before = proxy.metric("aclgate_requests_total", {"api": "Produce"})
    victim = workers(proxy)[0]["pid"]
    os.kill(victim, signal.SIGKILL)

    wait_until(
        lambda: (w := workers(proxy)[0])["pid"] != victim and w["restarts"] == 1 and w["ready"],
        30,
        what="worker 0 restarted and ready",
    )
    assert f"worker 0 (pid {victim}) exited on signal SIGKILL" in proxy.log
    assert "worker 0 restarted" in proxy.log
    assert proxy.metric("aclgate_worker_restarts_total", {"worker": "0"}) == 1
    # the dead worker's counters stay in the sum: a counter never goes down
    assert proxy.metric("aclgate_requests_total", {"api": "Produce"}) >= produced_before
    for producer in producers:  # each reconnects where its connection was cut
        producer.produce("w-kill", b"after")
        assert producer.flush(30) == 0
    low, high = admin_offsets(proxy.bootstrap, "w-kill")
    assert high - low == 2 * len(producers)

    pids = [w["pid"] for w in workers(proxy)]
    assert proxy.stop(signal.SIGTERM, timeout=30) == 0
    assert not any(pid_alive(p) for p in pids)
    for index in (0, 1):
        assert f"worker-{index} aclgate.worker: shutting down" in proxy.log
    assert "shutting down: stopping 2 workers" in proxy.log


def admin_offsets(bootstrap: str, topic: str) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "w-offsets"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()


@pytest.mark.slow
def test_a_worker_that_cannot_start_stops_the_supervisor(tmp_path):
    """A broken ACL file (read by each worker before it listens): exit status 1, clear lines."""
    import subprocess
    import sys

    acls = tmp_path / "acls.json"
    acls.write_text("{not json")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "aclgate",
            "serve",
            "--upstream",
            "127.0.0.1:1",
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--broker-ports",
            "40000-40099",
            "--acl-file",
            str(acls),
            "--workers",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1, out.stderr
    assert "cannot start: worker" in out.stderr and "before it listened" in out.stderr
    assert f"{acls}" in out.stderr  # the worker's own line names the file


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"listen": ("127.0.0.1", 0), "broker_ports": (40000, 40099)}, "fixed --listen port"),
        ({"listen": ("127.0.0.1", 9092)}, "--broker-ports or --node-port"),
    ],
)
def test_more_than_one_worker_needs_ports_every_worker_computes_alike(settings, message):
    config = ProxyConfig(upstream=[("k", 9092)], workers=2, **settings)
    with pytest.raises(ConfigError, match=message):
        config.validate()
    ProxyConfig(upstream=[("k", 9092)], workers=1, **settings).validate()


def test_worker_count_parsing():
    assert parse_workers("3") == 3
    assert parse_workers("auto") == len(os.sched_getaffinity(0))
    for bad in ("0", "-1", "many"):
        with pytest.raises(ConfigError):
            parse_workers(bad)


def test_restart_backoff_doubles_for_workers_that_keep_dying_up_to_a_cap():
    assert [restart_delay(n) for n in range(8)] == [0.5, 0.5, 1, 2, 4, 8, 16, 30]
    assert restart_delay(100) == 30


def test_metrics_merge_sums_counters_keeps_states_and_retired_counters():
    one = (
        "# TYPE aclgate_requests_total counter\n"
        'aclgate_requests_total{api="Produce"} 3\n'
        "# TYPE aclgate_connections_active gauge\n"
        'aclgate_connections_active{listener="bootstrap"} 2\n'
        "# TYPE aclgate_acls_ready gauge\naclgate_acls_ready 1\n"
        "# TYPE aclgate_acl_policy_version gauge\naclgate_acl_policy_version 4\n"
        "# TYPE aclgate_upstream_reachable gauge\naclgate_upstream_reachable 1\n"
    )
    two = (
        "# TYPE aclgate_requests_total counter\n"
        'aclgate_requests_total{api="Produce"} 5\n'
        'aclgate_requests_total{api="Fetch"} 7\n'
        "# TYPE aclgate_connections_active gauge\n"
        'aclgate_connections_active{listener="bootstrap"} 1\n'
        "# TYPE aclgate_acls_ready gauge\naclgate_acls_ready 0\n"
        "# TYPE aclgate_acl_policy_version gauge\naclgate_acl_policy_version 3\n"
        "# TYPE aclgate_upstream_reachable gauge\naclgate_upstream_reachable 0\n"
    )
    merger = MetricsMerger()
    merged = merger.exposition([one, two]).decode()
    assert samples(merged, "aclgate_requests_total", {"api": "Produce"}) == 8
    assert samples(merged, "aclgate_requests_total", {"api": "Fetch"}) == 7
    assert samples(merged, "aclgate_connections_active") == 3
    assert samples(merged, "aclgate_acls_ready") == 0  # not ready until every worker is
    assert samples(merged, "aclgate_acl_policy_version") == 3  # the version all have
    assert samples(merged, "aclgate_upstream_reachable") == 0  # one worker cannot reach it
    merger.retire(two)  # worker two died; its replacement starts from zero
    fresh = '# TYPE aclgate_requests_total counter\naclgate_requests_total{api="Produce"} 1\n'
    merged = merger.exposition([one, fresh]).decode()
    assert samples(merged, "aclgate_requests_total", {"api": "Produce"}) == 9
    assert samples(merged, "aclgate_requests_total", {"api": "Fetch"}) == 7
    assert samples(merged, "aclgate_connections_active") == 2  # a dead worker's gauge is gone


@pytest.mark.slow
def test_two_workers_in_front_of_a_three_node_kafka_cluster(
    kafka_cluster3, kafka_topic_name, proxy_process, tmp_path
):
    """Every worker serves every broker on FIRST + node id, and a client round trip spread
    over the three brokers goes through both workers."""
    acls = tmp_path / "acls.json"
    acls.write_text(dump_acl_file(ALLOW_ALL))
    upstream = kafka_cluster3.listener("PLAINTEXT").bootstrap
    proxy, ports = start_workers(proxy_process, upstream, acls, node_ids=(1, 2, 3))
    for worker in workers(proxy):
        assert worker["brokers"] == [1, 2, 3]
    assert per_worker(proxy, "aclgate_broker_listeners") == [3, 3]
    clients.confluent_roundtrip(
        proxy.bootstrap, kafka_topic_name, "g-" + kafka_topic_name, set(ports.values())
    )
    # whichever worker answers, broker N is FIRST + N
    given = connect_until_both_workers(proxy, proxy.bootstrap)
    assert given == {("127.0.0.1", port) for port in ports.values()}
    assert samples(proxy.http("/metrics")[1], "aclgate_requests_total", {"api": "Fetch"}) > 0


def served_serial(port: int, cafile: Path) -> int:
    """The serial number of the certificate a fresh TLS connection is given."""
    import ssl

    from cryptography import x509

    context = ssl.create_default_context(cafile=str(cafile))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


@pytest.mark.slow
def test_a_certificate_change_reaches_both_workers(tansu, proxy_process, tmp_path):
    from cryptography import x509

    from aclgate.certs import pki

    ca = tmp_path / "ca"
    pki.create_ca(ca)
    pki.issue_server(ca, dns=["localhost"], ips=["127.0.0.1"])
    acls = tmp_path / "acls.json"
    acls.write_text(dump_acl_file(ALLOW_ALL))
    tls = ("--listener-security-protocol", "SSL")
    files = ("--ssl-certfile", str(ca / "server.crt"), "--ssl-keyfile", str(ca / "server.key"))
    proxy, _ = start_workers(proxy_process, tansu.bootstrap, acls, extra=(*tls, *files))
    first = x509.load_pem_x509_certificate((ca / "server.crt").read_bytes()).serial_number
    assert served_serial(proxy.bootstrap_port, ca / "ca.crt") == first

    pki.issue_server(ca, dns=["localhost"], ips=["127.0.0.1"], force=True)
    new = x509.load_pem_x509_certificate((ca / "server.crt").read_bytes()).serial_number
    assert new != first

    def both_reloaded() -> bool:
        served_serial(proxy.bootstrap_port, ca / "ca.crt")  # a connection checks the files
        return all(f"worker-{k} aclgate.tls: TLS certificate reloaded" in proxy.log for k in (0, 1))

    wait_until(both_reloaded, 20, what="both workers to reload the certificate")
    # from now on every connection, whichever worker takes it, gets the new certificate
    assert {served_serial(proxy.bootstrap_port, ca / "ca.crt") for _ in range(10)} == {new}
