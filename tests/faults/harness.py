"""One fault scenario: an idempotent producer (acks=all) writes numbered messages while a fault
hits the cluster or the proxy; then every message is read back and counted.

    result = run_scenario(cluster, "leader_killed", side="aclgate", workdir=tmp_path)
    result.lost, result.duplicated        # both 0 when nothing acknowledged was lost or doubled

A run: create a topic (replication factor 3, min.insync.replicas=2, PARTITIONS partitions),
start aclgate as a real child process on fixed ports (side "aclgate") or talk to Kafka
directly (side "direct", the control), start the producer at RATE messages/s, wait until
WARM_ACKS messages are acknowledged, apply the fault, wait until WARM_ACKS more are
acknowledged after it (the producer recovered), stop producing (at least MIN_MESSAGES), wait
for every delivery report (bounded by the producer's own timeout), then read the topic back
from the beginning up to the high watermarks and count each sequence number.

    lost        acknowledged sequence numbers never read back
    duplicated  extra copies read back (a number read k times counts k-1)

Message values carry the sequence number (librdkafka: 8 ASCII digits; Java
VerifiableProducer: its own counter, as a decimal string). Every wait is bounded: a producer
that does not hand back all delivery reports within its own timeout (plus a margin) fails
the run as a hang.

Faults (FAULTS):
    leader_killed          SIGKILL the leader of a partition (a broker-only node, so the
                           controller stays up and moves leadership), wait until another
                           replica leads it, start the node again, wait until it is back
                           in every ISR of the topic.
    aclgate_restarted      SIGTERM aclgate, wait for it to exit, start it again on the same
                           ports (--listen, --node-port, --metrics-listen). The direct
                           control run has nothing to restart: the fault is a no-op there.
    all_brokers_restarted  SIGTERM every node (brokers first), keep them down HOLD_SECONDS
                           while sampling aclgate's /readyz, start them all again.
    aclgate_killed         SIGKILL aclgate (no drain: answers in flight are lost, the client
                           retries what the cluster may already have written) and start it
                           again on the same ports; a no-op on the direct side.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.fixtures.wait import wait_until
from tests.kafka.cluster import (
    TOOL_JVM_OPTS,
    TOOLS_LOG4J,
    KafkaCluster,
    free_ports,
    java_command,
    write_properties,
)

FAULTS = ("leader_killed", "aclgate_restarted", "all_brokers_restarted", "aclgate_killed")
PARTITIONS = 4
RATE = 2000  # messages per second offered by the producer
MIN_MESSAGES = 20_000  # a run produces at least this many (10 s at RATE)
WARM_ACKS = 2_000  # acknowledged before the fault, and again after it
HOLD_SECONDS = 10.0  # all_brokers_restarted: how long the whole cluster stays down
DELIVERY_TIMEOUT_MS = 120_000  # message.timeout.ms / delivery.timeout.ms: longer than any fault
RECONNECT_BACKOFF_MAX_MS = 1_000  # both sides alike: recovery in seconds, not librdkafka's 10 s
VERIFIABLE_PRODUCER = "org.apache.kafka.tools.VerifiableProducer"


# --------------------------------------------------------------------------- results


@dataclass
class RunResult:
    """What one run (one fault, one side, one producer) counted; written to the results file."""

    fault: str
    side: str  # "direct" (control) or "aclgate"
    producer: str  # "librdkafka" or "java"
    topic: str
    produced: int = 0
    acked: int = 0
    failed: int = 0  # delivery reports with an error (the producer's own timeout, say)
    unreported: int = 0  # produced but no delivery report when the bounded wait ended
    read: int = 0  # records read back
    lost: int = 0  # acknowledged, never read back
    duplicated: int = 0  # extra copies read back
    unacked_read: int = 0  # not acknowledged (failed) yet written: neither lost nor doubled
    errors: dict[str, int] = field(default_factory=dict)  # client-visible errors by name
    fatal: list[str] = field(default_factory=list)  # fatal (non-retriable) producer errors
    delivery_errors: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0  # the whole run: topic, produce, fault, drain, read back
    produce_seconds: float = 0.0
    fault_seconds: float = 0.0
    close_seconds: float = 0.0  # stop producing -> last delivery report
    fault_details: dict[str, Any] = field(default_factory=dict)
    proxy_log: dict[str, int] = field(default_factory=dict)  # aclgate log line counts

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- aclgate


def aclgate_command() -> list[str]:
    """`aclgate` from the venv the tests run in (a real process that can be signalled)."""
    exe = Path(sys.executable).with_name("aclgate")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "aclgate"]


class AclgateProcess:
    """`aclgate serve` in front of `cluster` on fixed ports, so a restart keeps its addresses."""

    def __init__(self, cluster: KafkaCluster, log_path: Path, *extra: str) -> None:
        self.cluster = cluster
        self.log_path = log_path
        listen, metrics, *node_ports = free_ports(2 + len(cluster.node_ids))
        self.port = listen
        self.metrics_port = metrics
        self.node_ports = dict(zip(cluster.node_ids, node_ports, strict=True))
        lst = cluster.client_listener
        self.args = [
            "serve",
            *(a for node in cluster.node_ids for a in ("--upstream", lst.address(node))),
            "--listen",
            f"127.0.0.1:{listen}",
            *(a for n, p in self.node_ports.items() for a in ("--node-port", f"{n}={p}")),
            "--metrics-listen",
            f"127.0.0.1:{metrics}",
            "--allow-everyone-if-no-acl-found",
            *extra,
        ]
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> float:
        """Start the process and wait until /healthz answers and the listener accepts."""
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            log.write(f"----- start {self.starts + 1}: {' '.join(self.args)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [*aclgate_command(), *self.args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.starts += 1

        def up() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"aclgate exited {self.proc.returncode}:\n{self.log_tail()}")
            return self.http("/healthz")[0] == 200 and _accepts(self.port)

        wait_until(up, timeout=timeout, interval=0.05, what="aclgate to start")
        return time.monotonic() - t0

    def terminate(self, timeout: float = 20.0) -> float:
        """SIGTERM and wait for the exit; AssertionError (after a SIGKILL) past `timeout`."""
        assert self.proc is not None
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"aclgate did not exit {timeout} s after SIGTERM") from None
        if rc != 0:
            raise AssertionError(f"aclgate exited {rc} on SIGTERM:\n{self.log_tail()}")
        return time.monotonic() - t0

    def close(self) -> None:
        """Stop the process if it still runs (test teardown)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def http(self, path: str, timeout: float = 2.0) -> tuple[int | None, str]:
        """(status, body) of GET path on the metrics listener; (None, error) when unreachable."""
        url = f"http://127.0.0.1:{self.metrics_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except (OSError, urllib.error.URLError) as exc:
            return None, repr(exc)

    def readyz(self) -> tuple[int | None, bool | None]:
        """(HTTP status, the body's upstream_reachable) of /readyz."""
        status, body = self.http("/readyz")
        with contextlib.suppress(ValueError, AttributeError):
            return status, json.loads(body).get("upstream_reachable")
        return status, None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def log_counts(self) -> dict[str, int]:
        text = self.log_text()
        return {
            "lines": text.count("\n"),
            "warning": text.count(" WARNING "),
            "error": text.count(" ERROR "),
            "traceback": text.count("Traceback"),
            "internal_error": text.count("internal_error"),
        }


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


# --------------------------------------------------------------------------- producers


class RdkafkaProducer:
    """confluent-kafka (librdkafka) with enable.idempotence=true, acks=all, in its own thread.

    Delivery reports and error callbacks run in that thread (they are served by poll/flush);
    the test thread only reads counters.
    """

    kind = "librdkafka"

    def __init__(self, bootstrap: str, topic: str, partitions: int, workdir: Path) -> None:
        self.topic = topic
        self.partitions = partitions
        self.config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "message.timeout.ms": DELIVERY_TIMEOUT_MS,
            "linger.ms": 5,
            "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS,
            "error_cb": self._on_error,
        }
        self.produced = 0
        self.acked: set[int] = set()
        self.failed: dict[int, str] = {}
        self.errors: Counter[str] = Counter()
        self.fatal: list[str] = []
        self.unreported = 0
        self.close_seconds = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def acked_count(self) -> int:
        return len(self.acked)

    def _on_error(self, err) -> None:
        self.errors[err.name()] += 1
        if err.fatal():
            self.fatal.append(str(err))

    def _on_delivery(self, err, msg) -> None:
        seq = int(msg.value())
        if err is None:
            self.acked.add(seq)
        else:
            self.failed[seq] = err.name()

    def _run(self) -> None:
        from confluent_kafka import KafkaException, Producer

        producer = Producer(self.config)
        t0 = time.monotonic()
        seq = 0
        try:
            while not (self._stop.is_set() and seq >= MIN_MESSAGES):
                due = int((time.monotonic() - t0) * RATE)
                while seq < due:
                    try:
                        producer.produce(
                            self.topic,
                            value=b"%08d" % seq,
                            partition=seq % self.partitions,
                            on_delivery=self._on_delivery,
                        )
                    except BufferError:  # local queue full: serve callbacks, then go on
                        break
                    seq += 1
                producer.poll(0.01)
                if self.fatal:
                    break
        except KafkaException as exc:  # an idempotent producer in a fatal state refuses
            self.fatal.append(str(exc))
        self.produced = seq
        t1 = time.monotonic()
        self.unreported = producer.flush(DELIVERY_TIMEOUT_MS / 1000 + 15)
        self.close_seconds = time.monotonic() - t1

    def stop(self) -> None:
        """Stop producing (once MIN_MESSAGES are out) and wait for every delivery report."""
        self._stop.set()
        self._thread.join(DELIVERY_TIMEOUT_MS / 1000 + 60)
        if self._thread.is_alive():
            raise AssertionError("the librdkafka producer hung past its own message.timeout.ms")


class JavaVerifiableProducer:
    """Kafka's VerifiableProducer (Java client; idempotent, acks=all) as a child process.

    It prints one JSON line per delivery report (producer_send_success / producer_send_error,
    the value is its counter); SIGTERM makes it stop sending, close the producer (which waits
    for the outstanding sends, up to delivery.timeout.ms) and print its totals.
    """

    kind = "java"

    def __init__(self, bootstrap: str, topic: str, partitions: int, workdir: Path) -> None:
        del partitions  # VerifiableProducer sends without keys: the default partitioner spreads
        self.topic = topic
        self.workdir = workdir
        self.out_path = workdir / f"verifiable-producer-{topic}.jsonl"
        self.err_path = workdir / f"verifiable-producer-{topic}.log"
        props = {
            "enable.idempotence": "true",
            "acks": "all",
            # VerifiableProducer sets retries=0, which an idempotent producer refuses
            "retries": "2147483647",
            "delivery.timeout.ms": str(DELIVERY_TIMEOUT_MS),
            "linger.ms": "5",
            "reconnect.backoff.max.ms": str(RECONNECT_BACKOFF_MAX_MS),
        }
        config = write_properties(workdir / f"verifiable-producer-{topic}.properties", props)
        self.cmd = java_command(
            VERIFIABLE_PRODUCER,
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--throughput",
            str(RATE),
            "--max-messages",
            "-1",
            "--command-config",
            str(config),
            jvm_opts=(*TOOL_JVM_OPTS, f"-Dlog4j2.configurationFile={TOOLS_LOG4J}"),
        )
        self.proc: subprocess.Popen | None = None
        self.stopping = False
        self.produced = 0
        self.acked: set[int] = set()
        self.failed: dict[int, str] = {}
        self.errors: Counter[str] = Counter()
        self.fatal: list[str] = []
        self.unreported = 0
        self.close_seconds = 0.0

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("KAFKA_OPTS", "JAVA_TOOL_OPTIONS")}
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                self.cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env
            )

    def acked_count(self) -> int:
        """Acknowledgements so far; AssertionError if the tool died while it should run."""
        assert self.proc is not None
        if self.proc.poll() is not None and not self.stopping:
            raise AssertionError(
                f"VerifiableProducer exited {self.proc.returncode}:\n"
                + self.err_path.read_text(errors="replace")[-3000:]
            )
        with open(self.out_path, "rb") as f:
            return f.read().count(b'"producer_send_success"')

    def stop(self) -> None:
        """Let it reach MIN_MESSAGES, SIGTERM it, wait (bounded) for its final report."""
        assert self.proc is not None
        wait_until(
            lambda: self.acked_count() >= MIN_MESSAGES,
            timeout=MIN_MESSAGES / RATE + DELIVERY_TIMEOUT_MS / 1000,
            interval=0.2,
            what="VerifiableProducer to reach MIN_MESSAGES acknowledgements",
        )
        t1 = time.monotonic()
        self.stopping = True
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(DELIVERY_TIMEOUT_MS / 1000 + 30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(
                "VerifiableProducer hung past its own delivery.timeout.ms"
            ) from None
        self.close_seconds = time.monotonic() - t1
        self._parse()

    def _parse(self) -> None:
        sent = None
        refused_after_close = 0
        for line in self.out_path.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            name = event.get("name")
            if name == "producer_send_success":
                self.acked.add(int(event["value"]))
            elif name == "producer_send_error":
                if "IllegalStateException" in event.get("exception", "") and "closed" in str(
                    event.get("message")
                ):
                    refused_after_close += 1  # send() raced the SIGTERM: never sent
                    continue
                self.failed[int(event["value"])] = event.get("exception", "?")
            elif name == "tool_data":
                sent = int(event["sent"])
        if sent is None:
            self.fatal.append(f"no tool_data line: {self.out_path}")
            sent = len(self.acked) + len(self.failed)
        self.produced = sent = sent - refused_after_close
        self.unreported = sent - len(self.acked) - len(self.failed)
        for line in self.err_path.read_text(errors="replace").splitlines():
            if " ERROR " in line or " WARN " in line:
                level = "ERROR" if " ERROR " in line else "WARN"
                self.errors[f"{level} {_java_error_kind(line)}"] += 1
            if "FATAL" in line or "ProducerFencedException" in line or "OutOfOrderSequence" in line:
                self.fatal.append(line.strip())


def _java_error_kind(line: str) -> str:
    """A short, stable name for a Java client log line (its error code or exception)."""
    for token in (
        "NOT_LEADER_OR_FOLLOWER",
        "NOT_ENOUGH_REPLICAS",
        "Disconnected",
        "Connection to node",
        "UNKNOWN_TOPIC_OR_PARTITION",
        "TimeoutException",
        "Node may not be available",
        "Bootstrap broker",
    ):
        if token in line:
            return token
    return "other"


PRODUCERS: dict[str, Callable[..., Any]] = {
    "librdkafka": RdkafkaProducer,
    "java": JavaVerifiableProducer,
}


# --------------------------------------------------------------------------- read back


def read_back(bootstrap: str, topic: str, partitions: int, timeout: float = 90.0) -> Counter[int]:
    """Every record of `topic` from offset 0 to the high watermark, counted by sequence number."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"faults-read-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1]
            for p in range(partitions)
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        seen: Counter[int] = Counter()
        position = dict.fromkeys(range(partitions), 0)
        pending = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise AssertionError(f"read back of {topic} timed out at {position} of {ends}")
            for msg in consumer.consume(1000, 1.0):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"read back of {topic}: {err}")
                seen[int(msg.value().decode().rsplit(".", 1)[-1])] += 1
                position[msg.partition()] = msg.offset() + 1
                if position[msg.partition()] >= ends[msg.partition()]:
                    pending.discard(msg.partition())
        return seen
    finally:
        consumer.close()


def tally(acked: set[int], seen: Counter[int]) -> tuple[int, int, int]:
    """(lost, duplicated, unacked_read) of a run from the acknowledged and the read numbers.

    lost: acknowledged, never read; duplicated: extra copies (k reads count k-1);
    unacked_read: read although its delivery failed or was never reported (allowed: a
    producer that gave up may still have written it).
    """
    lost = len(acked - seen.keys())
    duplicated = sum(n - 1 for n in seen.values() if n > 1)
    return lost, duplicated, len(seen.keys() - acked)


# --------------------------------------------------------------------------- cluster views


def cluster_admin(cluster: KafkaCluster):
    """An AdminClient on the INTERNAL listener that reconnects fast and stays quiet while
    nodes are down (the faults below stop them on purpose)."""
    return cluster.admin(**{"reconnect.backoff.max.ms": 500, "error_cb": lambda _err: None})


def partition_state(admin, topic: str) -> dict[int, tuple[int, tuple[int, ...]]]:
    """{partition: (leader, isr)} as the cluster reports it; {} while it cannot say."""
    with contextlib.suppress(Exception):
        md = admin.list_topics(topic=topic, timeout=5)
        t = md.topics.get(topic)
        if t is not None and t.error is None:
            return {p.id: (p.leader, tuple(sorted(p.isrs))) for p in t.partitions.values()}
    return {}


def wait_in_sync(cluster: KafkaCluster, admin, topic: str, timeout: float = 90.0) -> float:
    """Wait until every partition has a leader and all replicas in its ISR; seconds waited."""
    t0 = time.monotonic()
    everyone = tuple(cluster.node_ids)

    def in_sync() -> bool:
        state = partition_state(admin, topic)
        return bool(state) and all(
            leader >= 0 and isr == everyone for leader, isr in state.values()
        )

    wait_until(in_sync, timeout=timeout, interval=0.2, what=f"{topic}: every replica in sync")
    return time.monotonic() - t0


# --------------------------------------------------------------------------- faults


@dataclass
class FaultContext:
    cluster: KafkaCluster
    topic: str
    proxy: AclgateProcess | None
    admin: Any
    details: dict[str, Any] = field(default_factory=dict)


def fault_leader_killed(ctx: FaultContext) -> None:
    cluster = ctx.cluster
    controllers = {n.node_id for n in cluster.nodes if n.is_controller}
    state = partition_state(ctx.admin, ctx.topic)
    partition, (victim, _isr) = next(
        (p, s) for p, s in sorted(state.items()) if s[0] not in controllers
    )
    t0 = time.monotonic()
    cluster.kill_node(victim, signal.SIGKILL)
    ctx.details.update(partition=partition, killed_node=victim, signal="SIGKILL")

    def moved() -> int:
        leader = partition_state(ctx.admin, ctx.topic).get(partition, (-1, ()))[0]
        return leader if leader not in (-1, victim) else 0

    new_leader = wait_until(moved, timeout=60, interval=0.1, what="a new partition leader")
    ctx.details.update(new_leader=new_leader, leader_moved_s=round(time.monotonic() - t0, 2))
    t1 = time.monotonic()
    cluster.start_nodes([victim])
    ctx.details["node_restart_s"] = round(time.monotonic() - t1, 2)
    ctx.details["back_in_isr_s"] = round(wait_in_sync(cluster, ctx.admin, ctx.topic), 2)


def fault_aclgate_restarted(ctx: FaultContext) -> None:
    if ctx.proxy is None:
        ctx.details["noop"] = "direct control run: no proxy to restart"
        return
    ctx.details["sigterm_to_exit_s"] = round(ctx.proxy.terminate(), 2)
    ctx.details["start_s"] = round(ctx.proxy.start(), 2)


def fault_aclgate_killed(ctx: FaultContext) -> None:
    if ctx.proxy is None:
        ctx.details["noop"] = "direct control run: no proxy to kill"
        return
    assert ctx.proxy.proc is not None
    ctx.proxy.proc.send_signal(signal.SIGKILL)
    ctx.proxy.proc.wait(10)
    ctx.details["start_s"] = round(ctx.proxy.start(), 2)


def fault_all_brokers_restarted(ctx: FaultContext) -> None:
    cluster = ctx.cluster
    t0 = time.monotonic()
    cluster.stop_nodes()
    down = time.monotonic()
    ctx.details["stop_s"] = round(down - t0, 2)
    samples: list[tuple[float, int | None, bool | None]] = []
    while time.monotonic() - down < HOLD_SECONDS:
        if ctx.proxy is not None:
            samples.append((round(time.monotonic() - down, 2), *ctx.proxy.readyz()))
        time.sleep(0.25)  # the outage itself: the cluster stays down HOLD_SECONDS
    t1 = time.monotonic()
    cluster.start_nodes()
    up = time.monotonic()
    ctx.details.update(down_s=round(t1 - down, 2), start_s=round(up - t1, 2))
    if ctx.proxy is not None:
        unready = [s for s in samples if s[1] != 200]
        ctx.details["readyz_while_down"] = dict(Counter(str(s[1]) for s in samples))
        ctx.details["readyz_first_unready_s"] = unready[0][0] if unready else None

        def ready() -> bool:
            return ctx.proxy.readyz()[0] == 200

        try:
            wait_until(ready, timeout=60, interval=0.1)
            ctx.details["readyz_ready_after_return_s"] = round(time.monotonic() - up, 2)
        except AssertionError:
            ctx.details["readyz_ready_after_return_s"] = None
    ctx.details["back_in_isr_s"] = round(wait_in_sync(cluster, ctx.admin, ctx.topic), 2)


FAULT_FNS: dict[str, Callable[[FaultContext], None]] = {
    "leader_killed": fault_leader_killed,
    "aclgate_restarted": fault_aclgate_restarted,
    "all_brokers_restarted": fault_all_brokers_restarted,
    "aclgate_killed": fault_aclgate_killed,
}


# --------------------------------------------------------------------------- a run


def run_scenario(
    cluster: KafkaCluster, fault: str, side: str, workdir: Path, producer: str = "librdkafka"
) -> RunResult:
    """One run of `fault` on `side` ("direct" or "aclgate"); see the module docstring."""
    t0 = time.monotonic()
    topic = f"faults-{fault}-{side}-{producer}-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(
        topic, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"}
    )
    result = RunResult(fault=fault, side=side, producer=producer, topic=topic)
    proxy = None
    if side == "aclgate":
        proxy = AclgateProcess(cluster, workdir / f"aclgate-{topic}.log")
        proxy.start()
    try:
        bootstrap = proxy.bootstrap if proxy is not None else cluster.bootstrap
        prod = PRODUCERS[producer](bootstrap, topic, PARTITIONS, workdir)
        started = time.monotonic()
        prod.start()
        wait_until(
            lambda: prod.acked_count() >= WARM_ACKS,
            timeout=60,
            interval=0.1,
            what="acknowledgements before the fault",
        )
        ctx = FaultContext(cluster, topic, proxy, cluster_admin(cluster))
        f0 = time.monotonic()
        FAULT_FNS[fault](ctx)
        result.fault_seconds = round(time.monotonic() - f0, 2)
        result.fault_details = ctx.details
        after = prod.acked_count() + WARM_ACKS
        wait_until(
            lambda: prod.acked_count() >= after,
            timeout=DELIVERY_TIMEOUT_MS / 1000,
            interval=0.1,
            what="acknowledgements after the fault (the producer recovered)",
        )
        prod.stop()
        result.produce_seconds = round(time.monotonic() - started, 2)
        result.close_seconds = round(prod.close_seconds, 2)
        result.produced = prod.produced
        result.acked = len(prod.acked)
        result.failed = len(prod.failed)
        result.unreported = prod.unreported
        result.errors = dict(prod.errors)
        result.fatal = list(prod.fatal)
        result.delivery_errors = dict(Counter(prod.failed.values()))
        seen = read_back(bootstrap, topic, PARTITIONS)
        if proxy is not None:
            # the same records straight from Kafka: the proxy neither hid nor added any
            direct = read_back(cluster.bootstrap, topic, PARTITIONS)
            if direct != seen:
                missing = sorted((direct - seen).elements())[:10]
                extra = sorted((seen - direct).elements())[:10]
                raise AssertionError(
                    f"read back through aclgate differs from Kafka: missing {missing}, extra {extra}"
                )
        result.read = sum(seen.values())
        result.lost, result.duplicated, result.unacked_read = tally(prod.acked, seen)
    finally:
        if proxy is not None:
            proxy.close()
            result.proxy_log = proxy.log_counts()
    result.seconds = round(time.monotonic() - t0, 2)
    return result
