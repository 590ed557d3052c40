"""What an ACL Admin request with many filters, or one wide filter, costs the other clients
(issue 20, B7): the worst ApiVersions round trip another connection sees while it is served.

    python -m bench.acl_filters
    python -m bench.acl_filters --out /tmp/x

Each case runs a fresh `aclgate serve` (a child process) in front of an embedded tansu broker,
with an ACL file of N distinct LITERAL TOPIC ACLs and `--super-user User:ANONYMOUS`. A pinger
thread (its own connection) sends an ApiVersions every 20 ms and records each round trip; the
admin connection sends the case's request once the pinger is running, and the figures are the
admin request's own time and the worst ping round trip that overlapped it (the stall).

Cases (issue 20's figures): DeleteAcls with 200 non-matching LITERAL filters over 50,000 ACLs;
1,000 over 210,000; DescribeAcls ANY over 210,000 (an answer of 210,000 ACLs); and DeleteAcls
ANY over 50,000 (all removed: the answer, the store's change and its audit event list them).

Writes acl_filters.json and acl_filters.md to bench/results/ or --out.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aclgate.protocol.codec import decode_response, encode_request
from aclgate.protocol.versions import request_class
from bench.recording import measured_code, write_results

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parent.parent
PING_INTERVAL = 0.02
API_VERSIONS, DESCRIBE_ACLS, DELETE_ACLS = 18, 29, 31
TOPIC, LITERAL, ANY_TYPE, ANY_PATTERN, ANY_OP, ANY_PERM = 2, 3, 1, 1, 1, 1
#: (label, ACLs in the file, request, filters)
CASES: tuple[tuple[str, int, str, int], ...] = (
    ("DeleteAcls, 200 non-matching LITERAL filters", 50_000, "delete", 200),
    ("DeleteAcls, 1,000 non-matching LITERAL filters", 210_000, "delete", 1_000),
    ("DescribeAcls ANY (the whole ACL set)", 210_000, "describe", 1),
    ("DeleteAcls ANY (removes the whole ACL set)", 50_000, "delete-all", 1),
)


class Conn:
    """A blocking Kafka connection: one request at a time."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=600)
        self.cid = 0

    def request(self, body: Any) -> Any:
        self.cid += 1
        self.sock.sendall(encode_request(self.cid, body, "bench"))
        size = struct.unpack(">i", self._exactly(4))[0]
        frame = struct.pack(">i", size) + self._exactly(size)
        return decode_response(frame, body.__api_key__, body.__version__)

    def _exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionError("the proxy closed the connection")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def api_versions() -> Any:
    return request_class(API_VERSIONS, 3)(client_software_name="bench", client_software_version="1")


def filter_fields(name: str | None, rtype: int, pattern: int) -> dict[str, Any]:
    return {
        "resource_type_filter": rtype,
        "resource_name_filter": name,
        "pattern_type_filter": pattern,
        "principal_filter": None,
        "host_filter": None,
        "operation": ANY_OP,
        "permission_type": ANY_PERM,
    }


def admin_request(kind: str, filters: int) -> Any:
    if kind == "describe":
        return request_class(DESCRIBE_ACLS, 3)(**filter_fields(None, ANY_TYPE, ANY_PATTERN))
    cls = request_class(DELETE_ACLS, 3)
    mod = sys.modules[cls.__module__]
    if kind == "delete-all":
        return cls(filters=(mod.DeleteAclsFilter(**filter_fields(None, ANY_TYPE, ANY_PATTERN)),))
    return cls(
        filters=tuple(
            mod.DeleteAclsFilter(**filter_fields(f"absent-{i}", TOPIC, LITERAL))
            for i in range(filters)
        )
    )


def acl_entry(i: int) -> dict[str, str]:
    """The ACL file's i-th entry: READ on its own LITERAL topic, for one of 100 users."""
    return {
        "resource_type": "TOPIC",
        "resource_name": f"topic-{i}",
        "pattern_type": "LITERAL",
        "principal": f"User:u{i % 100}",
        "host": "*",
        "operation": "READ",
        "permission_type": "ALLOW",
    }


def write_acls(path: Path, count: int) -> None:
    path.write_text(json.dumps({"version": 1, "acls": [acl_entry(i) for i in range(count)]}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Pinger(threading.Thread):
    """ApiVersions every PING_INTERVAL on its own connection: (sent_at, round trip) pairs."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.conn = Conn(port)
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        body = api_versions()
        while not self.stop.is_set():
            sent = time.monotonic()
            try:
                self.conn.request(body)
            finally:  # a ping that never came back is a stall too
                self.samples.append((sent, time.monotonic() - sent))
            self.stop.wait(PING_INTERVAL)

    def worst(self, start: float, end: float) -> float:
        """The longest round trip that overlapped [start, end] (0: none did, the request was
        answered between two pings)."""
        return max((rtt for sent, rtt in self.samples if sent <= end and sent + rtt >= start),
                   default=0.0)  # fmt: skip


def run_case(broker: str, workdir: Path, label: str, acls: int, kind: str, filters: int) -> dict:
    acl_file = workdir / f"acls-{acls}.json"
    if not acl_file.exists():
        write_acls(acl_file, acls)
    port = free_port()
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "aclgate", "serve", "--upstream", broker),
            *("--listen", f"127.0.0.1:{port}", "--acl-file", str(acl_file)),
            *("--super-user", "User:ANONYMOUS"),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "proxy.log", "ab"),  # noqa: SIM115
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                probe = Conn(port)
                probe.request(api_versions())
                probe.close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the proxy did not start (see proxy.log)") from None
                time.sleep(0.2)
        pinger = Pinger(port)
        pinger.start()
        admin = Conn(port)
        body = admin_request(kind, filters)
        time.sleep(0.5)  # a baseline of pings
        start = time.monotonic()
        response = admin.request(body)
        end = time.monotonic()
        time.sleep(0.2)
        pinger.stop.set()
        pinger.join(10)
        admin.close()
        baseline = [rtt for sent, rtt in pinger.samples if sent + rtt < start]
        if kind == "describe":
            answered = sum(len(r.acls) for r in response.resources)
        else:
            answered = sum(len(r.matching_acls) for r in response.filter_results)
        return {
            "case": label,
            "acls": acls,
            "filters": filters,
            "request_s": round(end - start, 3),
            "worst_ping_ms": round(pinger.worst(start, end) * 1000, 1),
            "baseline_ping_max_ms": round(max(baseline, default=0.0) * 1000, 1),
            "acls_in_answer": answered,
        }
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def markdown(data: dict[str, Any]) -> str:
    lines = [
        "# ACL filters: what one ACL Admin request costs the other clients",
        "",
        f"Recorded {data['recorded_at']} {measured_code(data['environment'])}: "
        f"`{data['command']}`.",
        "",
        "A fresh `aclgate serve` per case (uvloop, one worker, an ACL file of N LITERAL TOPIC "
        "ACLs, super user User:ANONYMOUS) in front of tansu; another connection sends an "
        "ApiVersions every 20 ms. *Worst ping* is the longest of its round trips that overlapped "
        "the admin request (the stall every client of the worker saw). *Ping before* is the "
        "worst round trip before the request: the noise of whatever else the machine ran.",
        "",
        *TABLE_HEAD,
        *_rows(data["cases"]),
    ]
    if data.get("notes"):
        lines += ["", data["notes"]]
    before = data.get("before")
    if before:
        lines += [
            "",
            f"Before: {before['code']}, recorded {before['recorded_at']}, same command.",
            "",
            *TABLE_HEAD,
            *_rows(before["cases"]),
        ]
    return "\n".join(lines) + "\n"


TABLE_HEAD = (
    "| case | ACLs | request | worst ping | ping before (max) | ACLs in answer |",
    "|---|---:|---:|---:|---:|---:|",
)


def _rows(cases: list[dict[str, Any]]) -> list[str]:
    return [
        f"| {r['case']} | {r['acls']:,} | {r['request_s']} s | {r['worst_ping_ms']} ms | "
        f"{r['baseline_ping_max_ms']} ms | {r['acls_in_answer']:,} |"
        for r in cases
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.acl_filters")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--only", type=int, action="append", help="case numbers (1-based)")
    parser.add_argument(
        "--before",
        nargs=2,
        metavar=("JSON", "CODE"),
        help="an earlier run's acl_filters.json, and which code it measured, shown as 'before'",
    )
    args = parser.parse_args(argv)

    from aclgate.proxy.demo.embedded_broker import TansuBroker
    from bench.latency import environment

    env = environment()
    cases = [c for i, c in enumerate(CASES, 1) if not args.only or i in args.only]
    results = []
    with tempfile.TemporaryDirectory(prefix="aclgate-aclfilters-") as tmp:
        workdir = Path(tmp)
        with TansuBroker(log_path=workdir / "tansu.log") as broker:
            bootstrap = broker.bootstrap
            for case in cases:
                result = run_case(bootstrap, workdir, *case)
                print(json.dumps(result), flush=True)
                results.append(result)
    data = {
        "benchmark": "acl_filters",
        "recorded_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python -m bench.acl_filters " + " ".join(argv or sys.argv[1:]),
        "environment": env,
        "cases": results,
    }
    if args.before:
        earlier = json.loads(Path(args.before[0]).read_text())
        data["before"] = {
            "code": args.before[1],
            "recorded_at": earlier["recorded_at"],
            "cases": earlier["cases"],
        }
    md = markdown(data)
    write_results(args.out, "acl_filters", data, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
