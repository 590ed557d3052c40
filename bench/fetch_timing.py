"""Fetch timing: a consumer's Fetch round trip direct, through the bare relay and through
aclgate, and inside each proxy the delay from a Fetch answer's first (last) byte arriving from
the broker to its first (last) byte sent to the client, read from loopback packet captures.

    python -m bench.fetch_timing                   # 7 rounds, about 2-3 minutes
    python -m bench.fetch_timing --quick           # smoke run, writes to a temporary directory
    python -m bench.fetch_timing --partitions 3 --fetches 400 --stem fetch_timing-3p

Method (issue 24 item 3). A 1-node Apache Kafka (tests/kafka/cluster.py) on loopback holds a
topic filled with --fill-mb MB of --record-size byte records (librdkafka, 16 KB batches like
the Java producer's). The paths: direct to Kafka's PLAINTEXT listener, the bare relay
(bench/relay.py) in front of it, aclgate (`python -m aclgate serve`, the ACLs of
bench.throughput) and aclgate `--splice-min-bytes 0` (zero-copy off). The client is a blocking
socket sending Fetch v17 requests one at a time, as a consumer with one fetch in flight per
broker does: max_bytes 50 MiB and 1 MiB per partition (the Java consumer's defaults), from the
offset after the last whole batch of the previous answer (back to 0 at the end of the log),
in a fetch session (KIP-227, as the Java consumer; `--no-fetch-session` for sessionless fetches,
as librdkafka). Each round measures every path twice, in a rotating order:

* round trip (capture off): --fetches timed fetches after --warmup untimed ones, from just
  before `send` to the last byte of the answer received (`time.perf_counter_ns`); per fetch,
  the time the client, the broker and the proxy spent on a CPU and runnable but waiting for
  one (/proc/PID/task/*/schedstat), the kernel's share of the proxy's CPU (/proc/PID/stat),
  and for aclgate the bytes it moved with splice(2) (`aclgate_spliced_bytes_total`);
* hop by hop (capture on): the same again with tcpdump capturing the TCP headers (and the
  first 30 bytes of payload) of every segment on the broker's and the proxies' ports. Each
  TCP stream is reassembled by sequence number into Kafka frames (size prefix, correlation
  id); a Fetch answer on the broker->proxy hop is matched with the same answer on the
  proxy->client hop by correlation id (aclgate forwards a request's correlation id unchanged
  and checks the broker's answer against it: protocol/session.py `_start_response`), and each
  path uses its own range of ids. A segment's capture time is its transmit time on `lo`,
  which on loopback is when it lands in the receiver's socket buffer.

Per fetch, from the capture: the proxy's request forwarding (client request's last byte in to
its first byte out to the broker), the broker's time (request's last byte to the answer's
first byte), the broker's transfer (answer's first to last byte on the broker hop), the
first-byte delay (answer's first byte from the broker to its first byte to the client) and the
last-byte delay (the last byte from the broker, i.e. the time the whole answer was in, to the
last byte to the client). They add up to the wire round trip (request's last byte from the
client to the answer's last byte to it); direct has only the broker's time and transfer.

Writes fetch_timing.json (per round, per path: percentiles of every figure) and
fetch_timing.md to bench/results/ or --out. Needs tcpdump (Debian: `apt-get install
tcpdump`) and root or CAP_NET_RAW for the capture; `--no-capture` measures the round trips
only.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import os
import shlex
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kio.schema.fetch.v17 import request as fetch_req
from kio.schema.fetch.v17 import response as fetch_resp
from kio.static.primitive import i32, i32Timedelta, i64

from bench.latency import (
    RESULTS,
    _cpu_pressure,
    _loadavg,
    _process_tree,
    aclgate_serve_help,
    decode_response,
    encode_request,
    environment,
    percentile,
    topic_id_of,
)
from bench.recording import commit_worktree, measured_code, write_results

LABELS = {
    "direct": "Direct to Kafka",
    "relay": "Bare relay (bench/relay.py)",
    "aclgate": "aclgate (zero-copy on)",
    "aclgate-nosplice": "aclgate --splice-min-bytes 0",
}
PROXIES = ("relay", "aclgate", "aclgate-nosplice")
#: the path of `--before REV`: aclgate (zero-copy on) at another commit, from a worktree
BEFORE = "aclgate-before"
#: each path's correlation ids: (index + 1) * ID_BLOCK + n, so a capture tells paths apart
ID_BLOCK = 10_000_000
#: the Java consumer's defaults: fetch.max.bytes, max.partition.fetch.bytes
FETCH_MAX_BYTES = 50 * 2**20
PARTITION_MAX_BYTES = 2**20
SNAPLEN = 96  # Ethernet 14 + IPv4 20 + TCP 32 (timestamps) + 30 bytes of payload
#: tcpdump (libpcap's TPACKET_V3) hands a ring block over after this long at most: the capture
#: is stopped only after it, or the last packets are lost
CAPTURE_FLUSH_S = 1.2
#: per-fetch figures from the capture, µs; proxied paths have them all, direct the first three
HOP_METRICS = (
    "wire_rtt",
    "broker",
    "upstream_transfer",
    "request_in_out",
    "first_byte_in_out",
    "last_byte_in_out",
    "client_transfer",
    "broker_head_gap",
    "broker_tail_gap",
)
HOP_LABELS = {
    "wire_rtt": "wire round trip",
    "broker": "broker: request in -> first answer byte",
    "upstream_transfer": "answer from the broker: first -> last byte",
    "request_in_out": "proxy: request in -> out",
    "first_byte_in_out": "proxy: answer first byte in -> out",
    "last_byte_in_out": "proxy: answer last byte in -> out",
    "client_transfer": "answer to the client: first -> last byte",
    "broker_head_gap": "broker: answer's first -> second segment",
    "broker_tail_gap": "broker: answer's last but one -> last segment",
}
#: the hop table's columns (the gaps have their own)
HOP_TABLE = HOP_METRICS[:7]
_HEAD = struct.Struct(">ii")
_BATCH = struct.Struct(">qi")  # a record batch's base offset and length
_LAST_DELTA = struct.Struct(">i")


class CaptureUnavailable(RuntimeError):
    """tcpdump is missing or cannot capture here (the message says what to do)."""


# --------------------------------------------------------------------------------------------
# The consumer: Fetch v17 on a blocking socket, one request in flight


def fetch_request(
    topic_id: Any, offsets: dict[int, int], correlation_id: int, session: tuple[int, int]
) -> bytes:
    fm = fetch_req
    session_id, epoch = session
    body = fm.FetchRequest(
        max_wait=i32Timedelta.parse(timedelta(milliseconds=500)),
        min_bytes=i32(1),
        max_bytes=i32(FETCH_MAX_BYTES),
        session_id=i32(session_id),
        session_epoch=i32(epoch),
        topics=(
            fm.FetchTopic(
                topic_id=topic_id,
                partitions=tuple(
                    fm.FetchPartition(
                        partition=i32(p),
                        fetch_offset=i64(offset),
                        partition_max_bytes=i32(PARTITION_MAX_BYTES),
                    )
                    for p, offset in sorted(offsets.items())
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    return encode_request(correlation_id, body, client_id="fetch-timing")


def next_offset(records: bytes | None, current: int) -> int:
    """The offset after the last whole record batch of `records` (a partial last batch, which
    the broker may send at the size limit, is fetched again), or `current` if none."""
    if not records:
        return current
    pos, end, found = 0, len(records), current
    while pos + 12 <= end:
        base, length = _BATCH.unpack_from(records, pos)
        if pos + 12 + length > end:
            break
        found = base + _LAST_DELTA.unpack_from(records, pos + 23)[0] + 1
        pos += 12 + length
    return found


@dataclass
class Consumer:
    """One connection to a path, fetching the topic from the start over and over."""

    address: str
    topic_id: Any
    partitions: int
    id_base: int
    session: bool
    sock: socket.socket | None = None
    buf: bytearray = field(default_factory=lambda: bytearray(64 * 2**20))
    offsets: dict[int, int] = field(default_factory=dict)
    fetch_session: tuple[int, int] = (0, -1)
    sent: int = 0
    errors: int = 0

    def connect(self) -> None:
        host, port = self.address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.offsets = dict.fromkeys(range(self.partitions), 0)
        self.fetch_session = (0, 0) if self.session else (0, -1)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def fetch(self) -> tuple[int, int, int, int, int]:
        """One Fetch: (correlation id, ns from send to the first byte, ns to the last byte,
        answer bytes, record bytes)."""
        sock = self.sock
        assert sock is not None
        correlation_id = self.id_base + self.sent
        self.sent += 1
        request = fetch_request(self.topic_id, self.offsets, correlation_id, self.fetch_session)
        view = memoryview(self.buf)
        t0 = time.perf_counter_ns()
        sock.sendall(request)
        got = sock.recv_into(view)
        first = time.perf_counter_ns()
        if not got:
            raise ConnectionError(f"{self.address} closed the connection")
        while got < 4 or got < 4 + _HEAD.unpack_from(self.buf)[0]:
            n = sock.recv_into(view[got:])
            if not n:
                raise ConnectionError(f"{self.address} closed the connection")
            got += n
        last = time.perf_counter_ns()
        size = 4 + _HEAD.unpack_from(self.buf)[0]
        if got != size:
            raise RuntimeError(f"{got - size} bytes after the answer: one fetch is in flight")
        records = self._advance(bytes(view[:size]))
        return correlation_id, first - t0, last - t0, size, records

    def _advance(self, frame: bytes) -> int:
        body = decode_response(frame, fetch_resp.FetchResponse)
        if int(body.error_code):  # e.g. the broker evicted the session: start a new one
            self.errors += 1
            self.fetch_session = (0, 0) if self.session else (0, -1)
            return 0
        if self.session:
            self.fetch_session = (int(body.session_id), self.fetch_session[1] + 1)
        records = 0
        for topic in body.responses:
            for part in topic.partitions:
                p = int(part.partition_index)
                if int(part.error_code):
                    self.errors += 1
                    continue
                records += len(part.records or b"")
                offset = next_offset(part.records, self.offsets[p])
                # the log's end: from the start again (a full fetch of the same partitions)
                self.offsets[p] = 0 if offset >= int(part.high_watermark) - 1 else offset
        return records


def run_fetches(
    consumer: Consumer, warmup: int, count: int, pids: dict[str, int | None]
) -> dict[str, Any]:
    """Warm-up, then `count` timed fetches; over the timed ones, the CPU each process used
    and the time its threads waited for a CPU (`pids`: client, broker, proxy)."""
    for _ in range(warmup):
        consumer.fetch()
    proxy = pids.get("proxy")
    # the client's own account is read last before and first after, so that reading the
    # others' (a JVM has a hundred threads) is not counted as the client's
    ticks_before = user_system_ticks(proxy)
    before = {k: sched_ns(p) for k, p in pids.items() if k != "client"}
    before["client"] = sched_ns(pids.get("client"), tree=False)  # its children: the others
    started = time.perf_counter_ns()
    rtt, first, sizes, records, ids = [], [], [], [], []
    for _ in range(count):
        cid, to_first, to_last, size, got = consumer.fetch()
        ids.append(cid)
        rtt.append(to_last)
        first.append(to_first)
        sizes.append(size)
        records.append(got)
    elapsed = time.perf_counter_ns() - started
    after = {"client": sched_ns(pids.get("client"), tree=False)}
    after.update({k: sched_ns(p) for k, p in pids.items() if k != "client"})
    ticks_after = user_system_ticks(proxy)
    out: dict[str, Any] = {
        "rtt": summary([x / 1000 for x in rtt]),
        "to_first_byte": summary([x / 1000 for x in first]),
        "answer_bytes": statistics.median(sizes),
        "record_bytes": statistics.median(records),
        "ids": ids,
        "errors": consumer.errors,
        "cycle_us": round(elapsed / 1000 / count, 1),  # a fetch and the client's decoding
        "cpu_us_per_fetch": {},
        "cpu_wait_us_per_fetch": {},
    }
    for name in pids:
        b, a = before[name], after[name]
        if a is not None and b is not None:
            out["cpu_us_per_fetch"][name] = round((a[0] - b[0]) / 1000 / count, 1)
            out["cpu_wait_us_per_fetch"][name] = round((a[1] - b[1]) / 1000 / count, 1)
    if out["cpu_us_per_fetch"]:  # how many of the machine's CPUs the three kept busy
        out["cpus_busy"] = round(sum(out["cpu_us_per_fetch"].values()) / out["cycle_us"], 2)
    if "proxy" in out["cpu_us_per_fetch"]:
        out["proxy_cpu_us_per_fetch"] = out["cpu_us_per_fetch"]["proxy"]
    if ticks_before is not None and ticks_after is not None:
        user, system = (a - b for a, b in zip(ticks_after, ticks_before, strict=True))
        if user + system >= 20:  # clock ticks (10 ms): fewer say nothing
            out["proxy_kernel_share"] = round(system / (user + system), 3)
    return out


def sched_ns(pid: int | None, tree: bool = True) -> tuple[int, int] | None:
    """The scheduler's account of a process (and, with `tree`, its descendants), every
    thread (/proc/PID/task/TID/schedstat): ns on a CPU, and ns runnable but waiting for one."""
    if pid is None:
        return None
    run = wait = 0
    try:
        for member in _process_tree(pid) if tree else [pid]:
            for task in os.listdir(f"/proc/{member}/task"):
                with contextlib.suppress(OSError, ValueError):
                    fields = Path(f"/proc/{member}/task/{task}/schedstat").read_text().split()
                    run, wait = run + int(fields[0]), wait + int(fields[1])
    except OSError:
        return None
    return run, wait


def user_system_ticks(pid: int | None) -> tuple[int, int] | None:
    """User and system CPU of a process (clock ticks, /proc/PID/stat), for the kernel's share
    of the proxy's CPU (schedstat, which `cpu_ns` reads, does not split them)."""
    if pid is None:
        return None
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]), int(fields[12])


def summary(values: list[float]) -> dict[str, float]:
    s = sorted(values)
    return {
        "p50": round(percentile(s, 50), 1),  # type: ignore[arg-type]
        "p90": round(percentile(s, 90), 1),  # type: ignore[arg-type]
        "p99": round(percentile(s, 99), 1),  # type: ignore[arg-type]
        "mean": round(statistics.fmean(s), 1),
        "max": round(s[-1], 1),
        "n": len(s),
    }


# --------------------------------------------------------------------------------------------
# Capture: tcpdump on lo, and a reader of its pcap file


def find_tcpdump() -> str | None:
    return shutil.which("tcpdump") or shutil.which("tcpdump", path="/usr/sbin:/sbin")


class Capture:
    """tcpdump writing the headers of every TCP segment on `ports` of lo to `path`."""

    def __init__(self, tcpdump: str, path: Path, ports: list[int]) -> None:
        self.path = path
        self.log = path.with_suffix(".log")
        self.argv = [
            tcpdump,
            *("-i", "lo", "-n", "-s", str(SNAPLEN), "-B", "32768"),
            *("--time-stamp-precision", "nano", "-w", str(path)),
        ]
        if os.geteuid() == 0:  # Debian's tcpdump drops to its own user, who cannot write here
            self.argv += ["-Z", "root"]
        self.argv.append("tcp and (" + " or ".join(f"port {p}" for p in ports) + ")")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            if "listening on" in text:
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop(flush=False)
        raise CaptureUnavailable(
            f"tcpdump could not capture on lo ({shlex.join(self.argv)}): "
            f"{self.log.read_text(errors='replace').strip()[-500:]} (it needs root or "
            "CAP_NET_RAW; --no-capture measures the round trips only)"
        )

    def stop(self, flush: bool = True) -> dict[str, int]:
        """Stop tcpdump (after the ring's block timeout, so every packet is written); its
        counters: captured, dropped by the kernel."""
        proc, self.process = self.process, None
        if proc is None:
            return {}
        if flush:
            time.sleep(CAPTURE_FLUSH_S)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        counts = {}
        for line in self.log.read_text(errors="replace").splitlines():
            words = line.split()
            if len(words) >= 2 and words[0].isdigit():
                if "captured" in line:
                    counts["captured"] = int(words[0])
                elif "dropped by kernel" in line:
                    counts["dropped"] = int(words[0])
        return counts


@dataclass
class Segment:
    off: int  # stream offset of its first payload byte (0: the byte after the SYN)
    end: int
    ts: int  # capture time, ns
    prefix: bytes  # the captured start of its payload


@dataclass
class Stream:
    """One direction of one TCP connection."""

    isn: int | None = None
    client: bool = False  # sent the connection's first SYN (the connecting side)
    segments: list[Segment] = field(default_factory=list)
    orphans: int = 0  # data segments before a SYN was seen


_LINK_HEADER = {1: 14, 113: 16, 276: 20, 0: 4, 101: 0, 228: 0}


def read_pcap(path: Path) -> dict[tuple[int, int], Stream]:
    """The TCP streams of a loopback capture by (source port, destination port)."""
    data = path.read_bytes()
    if len(data) < 24:
        return {}
    magic = data[:4]
    formats = {
        b"\xd4\xc3\xb2\xa1": ("<", 1000),
        b"\x4d\x3c\xb2\xa1": ("<", 1),
        b"\xa1\xb2\xc3\xd4": (">", 1000),
        b"\xa1\xb2\x3c\x4d": (">", 1),
    }
    if magic not in formats:
        raise ValueError(f"{path}: not a pcap file (magic {magic.hex()})")
    order, scale = formats[magic]
    (link,) = struct.unpack_from(order + "I", data, 20)
    if link not in _LINK_HEADER:
        raise ValueError(f"{path}: link type {link} not supported")
    l2 = _LINK_HEADER[link]
    record = struct.Struct(order + "IIII")
    streams: dict[tuple[int, int], Stream] = {}
    pos = 24
    while pos + 16 <= len(data):
        sec, frac, incl, orig = record.unpack_from(data, pos)
        pos += 16
        pkt = data[pos : pos + incl]
        pos += incl
        if len(pkt) < l2 + 20 or pkt[l2] >> 4 != 4 or pkt[l2 + 9] != 6:
            continue  # IPv4 TCP only (the benchmark's addresses are 127.0.0.1)
        t = l2 + (pkt[l2] & 15) * 4
        if len(pkt) < t + 20:
            continue
        sport, dport, seq = struct.unpack_from("!HHI", pkt, t)
        doff = (pkt[t + 12] >> 4) * 4
        flags = pkt[t + 13]
        stream = streams.setdefault((sport, dport), Stream())
        if flags & 0x02:  # SYN
            stream.isn = seq
            stream.client = not flags & 0x10
            continue
        length = orig - t - doff
        if length <= 0:
            continue
        if stream.isn is None:
            stream.orphans += 1
            continue
        off = (seq - stream.isn - 1) & 0xFFFFFFFF
        stream.segments.append(
            Segment(off, off + length, sec * 1_000_000_000 + frac * scale, pkt[t + doff :])
        )
    return streams


@dataclass
class Frame:
    """A Kafka request or answer as it went over one hop."""

    size: int  # with its 4-byte size prefix
    first: int  # capture time of the segment holding its first byte
    last: int  # of its last segment (the latest of those holding it: it is whole then)
    segments: int
    second: int  # capture time of its second segment (by offset), of its last but one
    penultimate: int


def frames(stream: Stream, request: bool) -> dict[int, Frame]:
    """The stream's Kafka frames by correlation id (read from each frame's captured head;
    the walk stops where a frame's head was not captured)."""
    segs = sorted(stream.segments, key=lambda s: (s.off, s.ts))
    if not segs:
        return {}
    offs = [s.off for s in segs]
    total = max(s.end for s in segs)
    head_len = 12 if request else 8  # size, (api key, version,) correlation id

    def head_at(pos: int) -> bytes | None:
        at = bisect.bisect_right(offs, pos) - 1
        for i in range(at, max(at - 4, -1), -1):
            seg = segs[i]
            if seg.end > pos:
                rel = pos - seg.off
                return (
                    seg.prefix[rel : rel + head_len] if rel + head_len <= len(seg.prefix) else None
                )
        return None

    out: dict[int, Frame] = {}
    pos = 0
    while pos + head_len <= total:
        head = head_at(pos)
        if head is None or len(head) < head_len:
            break
        size = 4 + struct.unpack_from(">i", head)[0]
        correlation_id = struct.unpack_from(">i", head, head_len - 4)[0]
        end = pos + size
        if size < head_len or end > total:
            break
        j0 = bisect.bisect_right(offs, pos) - 1
        j1 = bisect.bisect_left(offs, end)
        covering = [s for s in segs[max(j0 - 2, 0) : j1] if s.end > pos]
        first = min(
            (s.ts for s in covering if s.off <= pos),
            default=min(s.ts for s in covering),
        )
        out[correlation_id] = Frame(
            size,
            first,
            max(s.ts for s in covering),
            len(covering),
            covering[1].ts if len(covering) > 1 else first,
            covering[-2].ts if len(covering) > 1 else first,
        )
        pos = end
    return out


def hop_timings(
    streams: dict[tuple[int, int], Stream],
    ports: dict[str, int],
    broker_port: int,
    measured: dict[str, list[int]],
) -> dict[str, dict[str, Any]]:
    """Per path, the per-fetch figures (µs) of its measured fetches, from one capture."""
    # (path, hop) -> correlation id -> (request frame, answer frame)
    hops: dict[tuple[str, str], dict[int, tuple[Frame, Frame]]] = {}
    paths = list(ports)
    for (sport, dport), stream in streams.items():
        if not stream.client:
            continue
        answers = streams.get((dport, sport))
        if answers is None:
            continue
        requests = frames(stream, request=True)
        replies = frames(answers, request=False)
        for cid, req in requests.items():
            index = cid // ID_BLOCK - 1
            if not 0 <= index < len(paths) or cid not in replies:
                continue  # a proxy's own request (its control connection), not the client's
            path = paths[index]
            if dport == broker_port:
                hop = "client" if path == "direct" else "upstream"
            elif dport == ports[path]:
                hop = "client"
            else:
                continue
            hops.setdefault((path, hop), {})[cid] = (req, replies[cid])
    out: dict[str, dict[str, Any]] = {}
    for path in paths:
        client = hops.get((path, "client"), {})
        upstream = hops.get((path, "upstream"), {})
        values: dict[str, list[float]] = {m: [] for m in HOP_METRICS}
        segments: dict[str, list[int]] = {"client": [], "upstream": []}
        for cid in measured.get(path, []):
            if cid not in client:
                continue
            c_req, c_ans = client[cid]
            values["wire_rtt"].append(c_ans.last - c_req.last)
            segments["client"].append(c_ans.segments)
            if path == "direct":
                values["broker"].append(c_ans.first - c_req.last)
                values["upstream_transfer"].append(c_ans.last - c_ans.first)
                values["broker_head_gap"].append(c_ans.second - c_ans.first)
                values["broker_tail_gap"].append(c_ans.last - c_ans.penultimate)
                continue
            if cid not in upstream:
                continue
            u_req, u_ans = upstream[cid]
            if u_ans.size != c_ans.size:
                raise RuntimeError(f"{path}: answer {cid} is {u_ans.size} bytes from the broker, {c_ans.size} to the client")  # fmt: skip
            values["request_in_out"].append(u_req.first - c_req.last)
            values["broker"].append(u_ans.first - u_req.last)
            values["upstream_transfer"].append(u_ans.last - u_ans.first)
            values["first_byte_in_out"].append(c_ans.first - u_ans.first)
            values["last_byte_in_out"].append(c_ans.last - u_ans.last)
            values["client_transfer"].append(c_ans.last - c_ans.first)
            values["broker_head_gap"].append(u_ans.second - u_ans.first)
            values["broker_tail_gap"].append(u_ans.last - u_ans.penultimate)
            segments["upstream"].append(u_ans.segments)
        cell: dict[str, Any] = {
            "matched": len(values["wire_rtt"]) if path == "direct" else len(values["broker"]),
            "measured": len(measured.get(path, [])),
        }
        for metric, vals in values.items():
            if vals:
                cell[metric] = summary([v / 1000 for v in vals])
        for hop, counts in segments.items():
            if counts:
                cell[f"segments_{hop}"] = statistics.median(counts)
        out[path] = cell
    return out


# --------------------------------------------------------------------------------------------
# Setup


def fill_topic(bootstrap: str, topic: str, megabytes: float, record_size: int) -> int:
    """`megabytes` MB of `record_size` byte records (librdkafka, 16 KB batches as the Java
    producer's, acks=1); returns how many."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 5,
            "batch.size": 16384,
            "compression.type": "none",
            "queue.buffering.max.kbytes": 262144,
        }
    )
    value = os.urandom(record_size)
    count = int(megabytes * 2**20 / record_size)
    failed: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(120) or failed:
        raise KafkaException(f"filling {topic}: {failed[:3] or 'flush timed out'}")
    return count


# --------------------------------------------------------------------------------------------
# Report


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 1),
        "min": round(min(values), 1),
        "max": round(max(values), 1),
    }


def aggregate(
    rounds: list[dict[str, Any]], paths: list[str], consumer_mb_per_s: float = 634.0
) -> dict[str, Any]:
    """Medians across rounds (min-max) of the per-round percentiles; the added round trip
    vs direct and vs the relay, paired per round; the rate a consumer reading at
    `consumer_mb_per_s` direct would keep with each path's added mean round trip."""
    out: dict[str, Any] = {}
    for path in paths:
        runs = [r["rtt"][path] for r in rounds]
        cell: dict[str, Any] = {
            "rtt": {p: _stats([x["rtt"][p] for x in runs]) for p in ("p50", "p99", "mean")},
            "to_first_byte_p50": _stats([x["to_first_byte"]["p50"] for x in runs]),
            "answer_bytes": statistics.median(x["answer_bytes"] for x in runs),
        }
        if path != "direct":
            direct = [r["rtt"]["direct"] for r in rounds]
            for p in ("p50", "p99", "mean"):
                cell[f"added_{p}"] = _stats(
                    [x["rtt"][p] - d["rtt"][p] for x, d in zip(runs, direct, strict=True)]
                )
            # one fetch in flight: the consumer's rate is answer bytes / mean round trip
            cell["implied_ratio"] = round(
                statistics.median(
                    d["rtt"]["mean"] / x["rtt"]["mean"] for x, d in zip(runs, direct, strict=True)
                ),
                3,
            )
            # a real consumer's fetch cycle is longer than the round trip (it decodes the
            # records before it asks again): the cycle direct, and the same plus the added
            cycle = [d["answer_bytes"] / 2**20 / consumer_mb_per_s * 1e6 for d in direct]
            cell["consumer_ratio"] = round(
                statistics.median(
                    c / (c + x["rtt"]["mean"] - d["rtt"]["mean"])
                    for c, x, d in zip(cycle, runs, direct, strict=True)
                ),
                3,
            )
        if path.startswith("aclgate") and "relay" in paths:
            relay = [r["rtt"]["relay"] for r in rounds]
            cell["added_p50_vs_relay"] = _stats(
                [x["rtt"]["p50"] - y["rtt"]["p50"] for x, y in zip(runs, relay, strict=True)]
            )
            cell["implied_ratio_vs_relay"] = round(
                statistics.median(
                    y["rtt"]["mean"] / x["rtt"]["mean"] for x, y in zip(runs, relay, strict=True)
                ),
                3,
            )
        if path == "aclgate" and BEFORE in paths:  # today's minus --before's, paired
            before = [r["rtt"][BEFORE] for r in rounds]
            cell["p50_vs_before"] = _stats(
                [x["rtt"]["p50"] - y["rtt"]["p50"] for x, y in zip(runs, before, strict=True)]
            )
            cell["cpu_vs_before"] = _stats(
                [
                    x["proxy_cpu_us_per_fetch"] - y["proxy_cpu_us_per_fetch"]
                    for x, y in zip(runs, before, strict=True)
                    if "proxy_cpu_us_per_fetch" in x and "proxy_cpu_us_per_fetch" in y
                ]
                or [0.0]
            )
        cpu = [x["proxy_cpu_us_per_fetch"] for x in runs if "proxy_cpu_us_per_fetch" in x]
        if cpu and path != "direct":
            cell["proxy_cpu_us_per_fetch"] = _stats(cpu)
        cell["cycle_us"] = _stats([x["cycle_us"] for x in runs])
        for key in ("cpu_us_per_fetch", "cpu_wait_us_per_fetch"):
            cell[key] = {
                name: _stats([x[key][name] for x in runs])
                for name in ("client", "broker", "proxy")
                if all(name in x[key] for x in runs)
            }
        if all("cpus_busy" in x for x in runs):
            cell["cpus_busy"] = round(statistics.median(x["cpus_busy"] for x in runs), 2)
        kernel = [x["proxy_kernel_share"] for x in runs if "proxy_kernel_share" in x]
        if kernel and path != "direct":
            cell["proxy_kernel_share"] = round(statistics.median(kernel), 2)
        spliced = [x["spliced_share"] for x in runs if "spliced_share" in x]
        if spliced:
            cell["spliced_share"] = round(statistics.median(spliced), 3)
        hops = [r["hops"][path] for r in rounds if r.get("hops")]
        if hops:
            cell["hops"] = {
                metric: {
                    p: _stats([h[metric][p] for h in hops])
                    for p in ("p50", "p99")
                    if all(metric in h for h in hops)
                }
                for metric in HOP_METRICS
                if all(metric in h for h in hops)
            }
            cell["capture_rtt_p50"] = _stats(
                [r["captured_rtt"][path]["rtt"]["p50"] for r in rounds]
            )
            for hop in ("client", "upstream"):
                segs = [h[f"segments_{hop}"] for h in hops if f"segments_{hop}" in h]
                if segs:
                    cell[f"segments_{hop}"] = statistics.median(segs)
            cell["matched"] = sum(h["matched"] for h in hops)
            cell["measured"] = sum(h["measured"] for h in hops)
        out[path] = cell
    if any(r.get("hops") for r in rounds):  # the added wire round trip, piece by piece
        for path in paths:
            if path == "direct":
                continue
            parts: dict[str, list[float]] = {}
            for r in rounds:
                h, d = r["hops"][path], r["hops"]["direct"]
                pieces = {
                    "wire_rtt": h["wire_rtt"]["p50"] - d["wire_rtt"]["p50"],
                    "request_in_out": h["request_in_out"]["p50"],
                    "broker": h["broker"]["p50"] - d["broker"]["p50"],
                    "upstream_transfer": h["upstream_transfer"]["p50"]
                    - d["upstream_transfer"]["p50"],
                    "last_byte_in_out": h["last_byte_in_out"]["p50"],
                }
                for k, v in pieces.items():
                    parts.setdefault(k, []).append(v)
            out[path]["added_wire_p50_parts"] = {k: _stats(v) for k, v in parts.items()}
    return out


def _cell(s: dict[str, float], signed: bool = False) -> str:
    fmt = "{:+,.0f}" if signed else "{:,.0f}"
    return f"{fmt.format(s['median'])} ({fmt.format(s['min'])} to {fmt.format(s['max'])})"


def markdown(data: dict[str, Any]) -> str:
    cfg, summary_, env = data["config"], data["summary"], data["environment"]
    paths = cfg["paths"]
    answer_kb = summary_["direct"]["answer_bytes"] / 1024
    lines = [
        "# Fetch timing: a consumer's Fetch round trip and the proxy's forwarding delay",
        "",
        f"Recorded {data['finished']} with `{data['command']}`, {measured_code(env)}; Apache "
        f"Kafka {data['kafka_version']} (1 node) on loopback, {env.get('cores')} vCPUs "
        f"({env.get('cpu_model')}) shared by the client, the broker and the proxy; load "
        f"{env['loadavg_before'][0]} before, {env['loadavg_after'][0]} after.",
        "",
        f"A topic of {cfg['partitions']} partition(s) filled with {cfg['fill_mb']} MB of "
        f"{cfg['record_size']}-byte records; Fetch v17 "
        + ("in a fetch session" if cfg["fetch_session"] else "sessionless")
        + f", one in flight, 1 MiB per partition: answers of {answer_kb:,.0f} KiB (median). "
        f"{cfg['rounds']} rounds, each path in a rotating order, {cfg['fetches']} timed fetches "
        f"after {cfg['warmup']} warm-up ones per path and phase. Cells: median across rounds "
        "of the per-round figure (min to max), µs.",
        "",
        "## Round trip (client-measured, capture off)",
        "",
        f"| Path | p50 | p99 | mean | added p50 vs direct | added p99 vs direct | implied rate vs direct | at {cfg['consumer_mb_per_s']:.0f} MB/s direct | proxy CPU µs per fetch | of it in the kernel |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path in paths:
        c = summary_[path]
        direct = path == "direct"
        lines.append(
            f"| {LABELS[path]} | {_cell(c['rtt']['p50'])} | {_cell(c['rtt']['p99'])} | "
            f"{_cell(c['rtt']['mean'])} | "
            + ("-" if direct else _cell(c["added_p50"], True))
            + " | "
            + ("-" if direct else _cell(c["added_p99"], True))
            + " | "
            + ("1" if direct else f"{c['implied_ratio']:.2f}")
            + " | "
            + ("1" if direct else f"{c['consumer_ratio']:.2f}")
            + " | "
            + (_cell(c["proxy_cpu_us_per_fetch"]) if "proxy_cpu_us_per_fetch" in c else "-")
            + " | "
            + (f"{c['proxy_kernel_share']:.0%}" if "proxy_kernel_share" in c else "-")
            + " |"
        )
    lines.append("")
    for path in paths:
        c = summary_[path]
        if "added_p50_vs_relay" in c:
            lines.append(
                f"* {LABELS[path]} over the relay, paired per round: p50 "
                f"{_cell(c['added_p50_vs_relay'], True)} µs, implied rate "
                f"{c['implied_ratio_vs_relay']:.2f}x the relay's."
            )
        if "p50_vs_before" in c:
            lines.append(
                f"* {LABELS[path]} minus {LABELS[BEFORE]}, paired per round: round trip p50 "
                f"{_cell(c['p50_vs_before'], True)} µs, proxy CPU per fetch "
                f"{_cell(c['cpu_vs_before'], True)} µs."
            )
        if "spliced_share" in c:
            lines.append(
                f"* {LABELS[path]}: {c['spliced_share']:.0%} of the answers' bytes moved with "
                "splice(2)."
            )
    lines.append(
        "* Implied rate: the direct path's mean round trip over this path's, per round (with "
        "one fetch in flight and nothing else to do, a consumer's rate is answer size / round "
        f"trip). At {cfg['consumer_mb_per_s']:.0f} MB/s direct: the rate of a consumer that "
        f"reads {cfg['consumer_mb_per_s']:.0f} MB/s direct (ConsumerPerformance's rate, "
        "docs/bench.md), so whose fetch cycle is answer size / that rate, when each cycle "
        "grows by the added mean round trip."
    )
    lines += [
        "",
        "## Who used the CPUs (capture off)",
        "",
        "Per fetch, from the scheduler's account of every thread (/proc/PID/task/*/schedstat): "
        "µs on a CPU, and µs runnable but waiting for one, of the client (this script: the "
        "fetch, then decoding the answer), the broker (the JVM) and the proxy; the cycle is "
        f"the wall time per fetch; CPUs busy: the three's CPU time over the cycle (of "
        f"{data['environment'].get('cores')}).",
        "",
        "| Path | cycle | CPU: client | broker | proxy | waiting for a CPU: client | broker | proxy | CPUs busy |",
        "|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for path in paths:
        c = summary_[path]
        run, wait = c["cpu_us_per_fetch"], c["cpu_wait_us_per_fetch"]
        row = [LABELS[path], f"{c['cycle_us']['median']:,.0f}"]
        row += [
            f"{run[n]['median']:,.0f}" if n in run else "-" for n in ("client", "broker", "proxy")
        ]
        row += [
            f"{wait[n]['median']:,.0f}" if n in wait else "-" for n in ("client", "broker", "proxy")
        ]
        row.append(f"{c['cpus_busy']:.2f}" if "cpus_busy" in c else "-")
        lines.append("| " + " | ".join(row) + " |")
    if cfg["capture"]:
        lines += [
            "",
            "## Hop by hop (tcpdump on lo, capture on)",
            "",
            "Per fetch, from the capture times of the segments (transmit on lo = arrival in the "
            "receiver's socket buffer). Median across rounds of the per-round p50 / p99, µs.",
            "",
            "| Path | " + " | ".join(HOP_LABELS[m] for m in HOP_TABLE) + " | segments per answer (broker hop; client hop) |",
            "|---|" + "---|" * len(HOP_TABLE) + "---|",
        ]  # fmt: skip
        for path in paths:
            c = summary_[path]
            row = [LABELS[path]]
            for metric in HOP_TABLE:
                h = c["hops"].get(metric)
                row.append(f"{h['p50']['median']:,.0f} / {h['p99']['median']:,.0f}" if h else "-")
            segs = (
                f"{c['segments_client']:.0f}"
                if path == "direct"
                else f"{c.get('segments_upstream', 0):.0f}; {c.get('segments_client', 0):.0f}"
            )
            row.append(segs)
            lines.append("| " + " | ".join(row) + " |")
        lines += [
            "",
            "The added wire round trip (p50, vs direct, paired per round) and its parts: the "
            "proxy's request handling, the broker's slower answer, the slower transfer from the "
            "broker, the proxy's last-byte delay (µs; the parts are medians, so their sum is "
            "close to, not equal to, the whole):",
            "",
            "| Path | added wire round trip | request in -> out | broker slower by | transfer from the broker slower by | last byte in -> out |",
            "|---|---|---|---|---|---|",
        ]  # fmt: skip
        for path in paths:
            parts = summary_[path].get("added_wire_p50_parts")
            if parts:
                lines.append(
                    f"| {LABELS[path]} | "
                    + " | ".join(
                        _cell(parts[k], True)
                        for k in (
                            "wire_rtt",
                            "request_in_out",
                            "broker",
                            "upstream_transfer",
                            "last_byte_in_out",
                        )
                    )
                    + " |"
                )
        lines += [
            "",
            "How the broker paces an answer on its hop (p50 / p99, µs): a Fetch answer leaves "
            "Kafka as its head (a small write), the records (`sendfile`, in 64 KiB steps) and "
            "a 3-byte tail; the gaps after the head and before the tail show the broker "
            "waiting on the hop it writes to.",
            "",
            "| Path | "
            + " | ".join(HOP_LABELS[m] for m in ("broker_head_gap", "broker_tail_gap"))
            + " |",
            "|---|---|---|",
        ]
        for path in paths:
            hops = summary_[path]["hops"]
            lines.append(
                f"| {LABELS[path]} | "
                + " | ".join(
                    f"{hops[m]['p50']['median']:,.0f} / {hops[m]['p99']['median']:,.0f}"
                    for m in ("broker_head_gap", "broker_tail_gap")
                )
                + " |"
            )
        lines.append("")
        matched = "; ".join(
            f"{path} {summary_[path]['matched']}/{summary_[path]['measured']}" for path in paths
        )
        lines.append(f"* Fetches matched across the hops: {matched}.")
        lines.append(
            "* Round trip with the capture on, p50: "
            + "; ".join(
                f"{path} {summary_[path]['capture_rtt_p50']['median']:,.0f} µs" for path in paths
            )
            + " (tcpdump's own CPU is in these)."
        )
    for note in data["notes"]:
        lines.append(f"* {note}")
    lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fetch_timing", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--fetches", type=int, default=1000, help="timed, per path and phase")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--fill-mb", type=float, default=80.0, help="MB written to the topic")
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--unrelated-acls", type=int, default=1000)
    parser.add_argument(
        "--consumer-mb-per-s",
        type=float,
        default=634.0,
        help="a real consumer's direct rate, for the rate it keeps with each path's added "
        "round trip (634: ConsumerPerformance's, docs/bench.md)",
    )
    parser.add_argument(
        "--no-fetch-session",
        dest="fetch_session",
        action="store_false",
        help="sessionless fetches (as librdkafka) instead of a KIP-227 session (as Java)",
    )
    parser.add_argument(
        "--no-capture", dest="capture", action="store_false", help="round trips only"
    )
    parser.add_argument(
        "--keep-pcap", type=Path, metavar="DIR", help="keep each round's capture in DIR"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--stem", default="fetch_timing")
    parser.add_argument(
        "--before",
        metavar="REV",
        help="also measure aclgate (zero-copy on) at commit REV, from a git worktree of it, "
        "as one more path of the same rounds, paired with today's",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="1 round, 8 MB, 30 fetches per phase, to a temporary directory",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.fetches, args.warmup, args.fill_mb = 1, 30, 5, 8.0
        args.unrelated_acls = 50
        if args.out == RESULTS:
            args.out = Path(tempfile.mkdtemp(prefix="aclgate-fetch-timing-"))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = " ".join(
        ["python -m bench.fetch_timing", shlex.join(argv if argv is not None else sys.argv[1:])]
    ).strip()
    tcpdump = find_tcpdump() if args.capture else None
    if args.capture and tcpdump is None:
        print(
            "fetch_timing: tcpdump is not installed; the hop-by-hop timings need it.\n"
            "  install it:  apt-get install tcpdump   (Debian/Ubuntu, as root)\n"
            "  or run the round trips only:  python -m bench.fetch_timing --no-capture",
            file=sys.stderr,
        )
        return 2
    from bench.throughput import free_base_port, start_aclgate, start_relay, write_acls
    from tests.kafka.cluster import KafkaCluster, kafka_version

    env = environment()
    env["loadavg_before"] = _loadavg()
    notes: list[str] = []
    paths = ["direct", "relay", "aclgate"]
    if "--splice-min-bytes" in aclgate_serve_help():
        paths.append("aclgate-nosplice")
    else:
        notes.append("No `--splice-min-bytes 0` path: this checkout's aclgate has no such flag.")
    if args.before:
        paths.append(BEFORE)
        LABELS[BEFORE] = f"aclgate at {args.before}"
    worktrees = contextlib.ExitStack()  # --before's
    rounds: list[dict[str, Any]] = []
    endpoints: dict[str, int] = {}  # each path's port, and the broker's (to read a kept pcap)
    with tempfile.TemporaryDirectory(prefix="aclgate-fetch-timing-") as tmp:
        work = Path(tmp)
        print("starting Apache Kafka ...", flush=True)
        cluster = KafkaCluster(nodes=1, workdir=work / "kafka", base_port=free_base_port())
        cluster.start()
        services: dict[str, Any] = {}
        try:
            bootstrap = cluster.bootstrap  # PLAINTEXT, for every path
            broker_port = int(bootstrap.rsplit(":", 1)[1])
            broker_pid = next(iter(cluster.pids.values()), None)
            topic = "fetch-timing"
            cluster.create_topic(topic, partitions=args.partitions)
            t0 = time.monotonic()
            records = fill_topic(bootstrap, topic, args.fill_mb, args.record_size)
            print(f"filled {topic}: {records:,} records in {time.monotonic() - t0:.1f} s")
            topic_id = topic_id_of(bootstrap, topic)
            acl_file = work / "acls.json"
            write_acls(acl_file, args.unrelated_acls)
            services["relay"] = start_relay(bootstrap, work)
            services["aclgate"] = start_aclgate("aclgate", bootstrap, acl_file, work, [])
            if "aclgate-nosplice" in paths:
                services["aclgate-nosplice"] = start_aclgate(
                    "aclgate-nosplice", bootstrap, acl_file, work, ["--splice-min-bytes", "0"]
                )
            if args.before:  # aclgate at another commit, from a worktree of it
                before_code = worktrees.enter_context(commit_worktree(args.before, work / "before"))
                services[BEFORE] = start_aclgate(
                    BEFORE, bootstrap, acl_file, work, [], code=before_code
                )
            address = {"direct": bootstrap} | {n: s.address for n, s in services.items()}
            ports = {p: int(address[p].rsplit(":", 1)[1]) for p in paths}
            endpoints.update(ports, broker=broker_port)
            for n in range(args.rounds):
                order = paths[n % len(paths) :] + paths[: n % len(paths)]
                entry: dict[str, Any] = {"round": n + 1, "order": order, "rtt": {}}
                for path in order:  # phase 1: round trips, no capture
                    entry["rtt"][path] = measure(
                        args, path, paths, address, topic_id, services, broker_pid
                    )
                    _print_rtt(n, path, entry["rtt"][path])
                if tcpdump is not None:  # phase 2: the same with tcpdump on
                    pcap = work / f"round-{n + 1}.pcap"
                    capture = Capture(tcpdump, pcap, [broker_port, *ports.values()])
                    capture.start()
                    captured: dict[str, Any] = {}
                    try:
                        for path in order:
                            captured[path] = measure(
                                args, path, paths, address, topic_id, services, broker_pid
                            )
                    finally:
                        entry["capture_counts"] = capture.stop()
                    streams = read_pcap(pcap)
                    measured = {p: captured[p].pop("ids") for p in paths}
                    entry["hops"] = hop_timings(streams, ports, broker_port, measured)
                    entry["captured_rtt"] = captured
                    if args.keep_pcap:
                        args.keep_pcap.mkdir(parents=True, exist_ok=True)
                        shutil.move(pcap, args.keep_pcap / pcap.name)
                    else:
                        pcap.unlink()
                    for path in paths:
                        _print_hops(n, path, entry["hops"][path])
                for cell in entry["rtt"].values():
                    cell.pop("ids", None)
                entry["loadavg"] = _loadavg()
                entry["cpu_pressure_avg10"] = _cpu_pressure()
                rounds.append(entry)
        finally:
            for service in services.values():
                service.stop()
            worktrees.close()
            cluster.stop()
    env["loadavg_after"] = _loadavg()
    notes += _notes(args, env, rounds)
    data = {
        "command": command,
        "finished": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "kafka_version": kafka_version(),
        "environment": env,
        "config": {
            "rounds": args.rounds,
            "fetches": args.fetches,
            "warmup": args.warmup,
            "fill_mb": args.fill_mb,
            "record_size": args.record_size,
            "partitions": args.partitions,
            "fetch_session": args.fetch_session,
            "unrelated_acls": args.unrelated_acls,
            "consumer_mb_per_s": args.consumer_mb_per_s,
            "capture": tcpdump is not None,
            "paths": paths,
            "ports": endpoints,
        },
        "rounds": rounds,
        "summary": aggregate(rounds, paths, args.consumer_mb_per_s),
        "notes": notes,
    }
    text = markdown(data)
    write_results(args.out, args.stem, data, text)
    print(text)
    print(f"wrote {args.out}/{args.stem}.json, .md")
    return 0


def measure(
    args: argparse.Namespace,
    path: str,
    paths: list[str],
    address: dict[str, str],
    topic_id: Any,
    services: dict[str, Any],
    broker_pid: int | None,
) -> dict[str, Any]:
    """One phase of one path: a fresh connection, warm-up, timed fetches."""
    from bench.throughput import spliced_mb

    service = services.get(path)
    pid = service.process.pid if service is not None and service.process is not None else None
    gate = path.startswith("aclgate")
    spliced0 = spliced_mb(service) if gate else 0.0
    consumer = Consumer(
        address[path],
        topic_id,
        args.partitions,
        (paths.index(path) + 1) * ID_BLOCK,
        args.fetch_session,
    )
    consumer.connect()
    try:
        result = run_fetches(
            consumer,
            args.warmup,
            args.fetches,
            {"client": os.getpid(), "broker": broker_pid, "proxy": pid},
        )
    finally:
        consumer.close()
    if gate:
        moved = (spliced_mb(service) - spliced0) * 2**20
        total = result["answer_bytes"] * (args.warmup + args.fetches)
        result["spliced_share"] = round(moved / total, 3) if total else 0.0
    return result


def _print_rtt(n: int, path: str, cell: dict[str, Any]) -> None:
    rtt = cell["rtt"]
    cpu = cell.get("proxy_cpu_us_per_fetch")
    print(
        f"round {n + 1} {path:17} rtt p50 {rtt['p50']:8,.0f} p99 {rtt['p99']:8,.0f} "
        f"mean {rtt['mean']:8,.0f} µs, answer {cell['answer_bytes'] / 1024:,.0f} KiB"
        + (f", proxy CPU {cpu:,.0f} µs/fetch" if cpu is not None and path != "direct" else ""),
        flush=True,
    )


def _print_hops(n: int, path: str, cell: dict[str, Any]) -> None:
    parts = [f"{m} {cell[m]['p50']:,.0f}/{cell[m]['p99']:,.0f}" for m in HOP_METRICS if m in cell]
    print(
        f"round {n + 1} {path:17} capture ({cell['matched']}/{cell['measured']} matched): "
        + ", ".join(parts),
        flush=True,
    )


def _notes(
    args: argparse.Namespace, env: dict[str, Any], rounds: list[dict[str, Any]]
) -> list[str]:
    notes = []
    if max(env["loadavg_before"][0], env["loadavg_after"][0]) > (env.get("cores") or 1):
        notes.append(
            f"The machine was busier than its core count (load {env['loadavg_before'][0]:.1f} "
            f"before, {env['loadavg_after'][0]:.1f} after): compare paths within a round only."
        )
    dropped = sum(r.get("capture_counts", {}).get("dropped", 0) for r in rounds)
    if args.capture:
        notes.append(
            f"tcpdump: {sum(r.get('capture_counts', {}).get('captured', 0) for r in rounds):,} "
            f"segments captured, {dropped} dropped by the kernel."
        )
    errors = sum(c.get("errors", 0) for r in rounds for c in r["rtt"].values())
    if errors:
        notes.append(f"{errors} fetch answers carried an error code (and were retried).")
    return notes


if __name__ == "__main__":
    raise SystemExit(main())
