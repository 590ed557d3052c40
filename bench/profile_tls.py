"""Where aclgate's CPU goes over SASL_SSL: handshakes, record encryption, copies, kernel, Python.

    python -m bench.profile_tls                     # 300,000 records of 1 KB, about 3 minutes
    python -m bench.profile_tls --quick             # a smoke run, to a temporary directory

Method: the setup of `python -m bench.throughput --tls` (1-node Apache Kafka 4.x on loopback with
a PLAINTEXT and a SASL_SSL listener; bench/throughput.py's tls_setup: the clients talk
SASL_SSL/SCRAM-SHA-512 to aclgate, aclgate talks SASL_SSL to Kafka as `admin`), and next to it a
plaintext aclgate in front of the PLAINTEXT listener (`--splice-min-bytes 0` by default, so both
relay every byte through user space and the difference is TLS). For each of the two proxies,
after a warm-up, ProducerPerformance writes --records records through it, then
ConsumerPerformance (or the librdkafka consumer, --consumer rdkafka) reads them back through it,
three times over:

1. unprofiled: the proxy's user and system CPU (/proc/<pid>/stat), its client connections and
   requests (/metrics): the CPU per MB;
2. under `perf record -F 999 --call-graph dwarf -p <proxy>` (every thread, user and kernel
   mode): where that CPU goes;
3. under `perf record` of the syscall tracepoints (no stacks; --no-syscalls leaves it out):
   the proxy's reads, writes and epoll waits per MB and the bytes each moved, by side (client or
   Kafka, from /proc/<pid>/fd), its accepts and connects (so its handshakes).

Each perf sample's stack (leaf first) is put in one category:

1. connection setup: a frame of a TLS handshake (SSL_do_handshake, OpenSSL's state machine) or
   of a SASL login's hashing (PBKDF2: aclgate's SCRAM client towards Kafka) anywhere on it;
2. kernel: the leaf is in the kernel (system calls, TCP on loopback, page faults, the
   scheduler), grouped by the system call on the stack;
3. record encryption: OpenSSL code under a cipher call (EVP_*Update/Final/Init), split into
   AES-GCM itself (libcrypto's assembly) and the calls around it;
4. copies: the leaf is libc's memcpy/memmove, labelled by its caller (into or out of a memory
   BIO, OpenSSL's record buffers, b''.join, bytes(...));
5. allocator: the leaf is libc's malloc/free family, labelled by its caller;
6. TLS record layer: other OpenSSL code (libssl, libcrypto), Python's _ssl module, uvloop's
   SSLProtocol, and the libc or Python C API they call (the first frame going up that is
   neither libc nor libpython decides);
7. Python and aclgate: the rest (the interpreter running aclgate and asyncio, uvloop's loop,
   kio, libc under them).

A category's ms of CPU per MB = its share of the samples (weighted by period) x the unprofiled
run's CPU per MB. The difference from the plaintext proxy, category by category, is what TLS
adds. The handshakes are also counted and costed on their own: each client connection is one
TLS handshake with the client and one with Kafka (aclgate connects upstream after the client's
SASL login), so a run's handshakes are twice its new client connections; a connect-only loop
(--connections sequential clients: TLS, SCRAM login, one Metadata request, close) gives the
CPU of one connection's setup (/proc/<pid>/task/*/schedstat, exact), one with TLS only
(handshake, close) that of one server-side handshake, and one through the plaintext proxy the
part that is not TLS or SASL.

Needs `perf` (linux-perf) able to attach to the proxy (root, or perf_event_paranoid <= 1);
hardware counters are not needed: perf falls back to the cpu-clock timer.

Writes <stem>.json and <stem>.md (default profile_tls) to bench/results/ or --out.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.latency import RESULTS, _cpu_pressure, _loadavg, environment
from bench.profile_proxy import cpu_split, request_counts
from bench.recording import measured_code, write_results
from bench.throughput import (
    PLAIN,
    TLS_PASSWORD,
    TLS_USER,
    Client,
    free_base_port,
    run_consumer,
    run_producer,
    run_rdkafka_consumer,
    start_aclgate,
    tls_setup,
    write_acls,
)

MODES = ("tls", "plain")
MODE_NAMES = {"tls": "SASL_SSL both sides", "plain": "PLAINTEXT"}
TOOL_NAMES = {
    "producer": "ProducerPerformance",
    "consumer": "ConsumerPerformance",
    "rdkafka": "librdkafka consumer",
}

#: the categories, in the report's order
CATEGORIES = {
    "setup": "Connection setup: TLS handshakes + SASL logins",
    "crypto": "Record encryption/decryption (OpenSSL ciphers)",
    "tls_layer": "TLS record layer + memory BIOs (libssl, _ssl, uvloop SSLProtocol)",
    "copies": "Memory copies (libc memcpy/memmove)",
    "allocator": "Allocator (libc malloc/free)",
    "kernel": "Kernel (system calls, loopback TCP, page faults)",
    "python": "Python + aclgate (interpreter, uvloop loop, kio, libc)",
}

_HANDSHAKE = re.compile(
    r"SSL_do_handshake|ossl_statem_|tls_construct_|tls_process_|state_machine|"
    r"PKCS5_PBKDF2|pbkdf2|SSLProtocol__do_handshake|_ssl__SSLSocket_do_handshake|"
    r"SSL_CTX_use_|load_verify|_ssl__SSLContext_load"
)
_CIPHER = re.compile(
    r"EVP_(Encrypt|Decrypt|Cipher)(Update|Final|Init)|EVP_Cipher$|ossl_gcm|gcm_|aes_gcm|"
    r"ossl_cipher_|ossl_aes|CRYPTO_gcm128|chacha|poly1305|aesni"
)
_BULK = re.compile(r"aesni|gcm|ghash|ctr32|aes_|_aes", re.I)
_COPY = re.compile(r"^(__)?mem(cpy|move)|^__memcpy|^__memmove|^memcpy|^memmove")
_ALLOC = re.compile(
    r"^(__libc_)?(malloc|free|calloc|realloc|cfree)(@\S+)?$|^_int_(malloc|free|realloc)|"
    r"^malloc_consolidate|^unlink_chunk|^sysmalloc|^tcache_|^_mid_memalign|^__libc_memalign|"
    r"^alloc_perturb|^__GI___libc_(malloc|free|realloc)|^systrim|^munmap_chunk|^mremap_chunk"
)
_KERNEL_COPY = re.compile(
    r"copy_user|_copy_to_iter|_copy_from_iter|rep_movs|copy_page|^memcpy_orig$|"
    r"^__memcpy$|^memcpy$|^memmove$|skb_copy_datagram|csum_partial_copy"
)
#: what a kernel sample was doing, by the first of these found on its stack (leaf first)
_KERNEL_GROUPS = (
    ("page faults", re.compile(r"exc_page_fault")),
    ("epoll", re.compile(r"ep_poll|do_epoll|epoll_")),
    (
        "send (write, sendto; loopback delivery to the peer included)",
        re.compile(r"ksys_write|__sys_sendto|__sys_sendmsg|do_writev|sock_write_iter|tcp_sendmsg"),
    ),
    (
        "receive (read, recvfrom)",
        re.compile(r"ksys_read|__sys_recvfrom|__sys_recvmsg|do_readv|sock_read_iter|tcp_recvmsg"),
    ),
    ("scheduler (context switches)", re.compile(r"^schedule$|__schedule|finish_task_switch")),
)
_SYSCALL = re.compile(r"^(?:__x64_sys|__se_sys|__do_sys|ksys|__sys)_(\w+)$")
#: the callers of a copy worth naming: (pattern on the caller's symbol, label)
_COPY_CALLERS = (
    (re.compile(r"^mem_write|^BIO_write"), "into a memory BIO (MemoryBIO.write, OpenSSL)"),
    (re.compile(r"^mem_read|^BIO_read"), "out of a memory BIO (MemoryBIO.read, OpenSSL)"),
    (re.compile(r"^ssl3_|^tls1?3?_|^SSL_|^ssl_|^tls_"), "OpenSSL record buffers (libssl)"),
    (re.compile(r"bytes_join|_PyBytes_Join|stringlib_bytes_join"), "b''.join (Python)"),
    (
        re.compile(r"PyBytes_FromStringAndSize|bytes_new|_PyBytes_FromBuffer|memory_tobytes"),
        "bytes(...) / slices (Python)",
    ),
    (re.compile(r"bytearray|PyByteArray"), "bytearray (Python)"),
    (re.compile(r"__pyx_.*uvloop"), "uvloop"),
)


# --------------------------------------------------------------------------------------------
# perf


def perf_problem() -> str | None:
    """Why `perf record` cannot sample here, or None when it can."""
    with tempfile.TemporaryDirectory(prefix="aclgate-perf-") as tmp:
        try:
            got = subprocess.run(
                ["perf", "record", "-q", "-F", "99", "-g", "-o", f"{tmp}/p", "--", "true"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"perf not runnable: {exc}"
        if got.returncode != 0:
            return f"perf record failed: {got.stderr.strip()[-500:]}"
    return None


@contextmanager
def perf_record(pid: int, path: Path, rate: int, stack_bytes: int) -> Iterator[None]:
    """`perf record` of every thread of `pid` (user and kernel mode) with DWARF call stacks
    while the block runs."""
    spy = subprocess.Popen(
        [
            *("perf", "record", "-q", "-F", str(rate), "-p", str(pid)),
            *("--call-graph", f"dwarf,{stack_bytes}", "-o", str(path)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    time.sleep(1.0)  # attached before the load starts
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        _, err = spy.communicate(timeout=120)
        if not path.exists():
            raise RuntimeError(f"perf wrote nothing: {err.decode(errors='replace')}")


#: the system calls counted, with their byte counts, in the profiled runs
SYSCALLS = (
    *("read", "write", "writev", "recvfrom", "sendto", "splice", "epoll_wait", "epoll_pwait"),
    *("accept4", "connect"),
)


@contextmanager
def syscall_record(pid: int, path: Path, upstream_ports: set[int]) -> Iterator[dict[int, str]]:
    """`perf record` of the proxy's SYSCALLS (entry and exit tracepoints, no stacks) while the
    block runs; yields {fd: "client" | "upstream"}, filled by watching /proc/<pid>/fd."""
    events = ",".join(f"syscalls:sys_{e}_{c}" for c in SYSCALLS for e in ("enter", "exit"))
    spy = subprocess.Popen(
        ["perf", "record", "-q", "-e", events, "-p", str(pid), "-o", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    sides: dict[int, str] = {}
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.2):
            sides.update(socket_sides(pid, upstream_ports))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    time.sleep(1.0)
    try:
        yield sides
    finally:
        stop.set()
        watcher.join()
        spy.send_signal(signal.SIGINT)
        spy.communicate(timeout=120)


def socket_sides(pid: int, upstream_ports: set[int]) -> dict[int, str]:
    """{fd: "upstream"} for the proxy's TCP sockets to a port in `upstream_ports`, "client"
    for its other connected TCP sockets."""
    inodes: dict[int, int] = {}
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes[int(link[8:-1])] = int(fd)
        lines = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return {}
    out = {}
    for line in lines:
        f = line.split()
        inode, remote = int(f[9]), int(f[2].rsplit(":", 1)[1], 16)
        if inode in inodes and remote:
            out[inodes[inode]] = "upstream" if remote in upstream_ports else "client"
    return out


def syscall_counts(path: Path, sides: dict[int, str]) -> dict[str, dict[str, float]]:
    """{"<call> <side>": {"calls": n, "bytes": total returned}} from syscall_record's file."""
    text = subprocess.run(
        ["perf", "script", "-i", str(path), "-F", "tid,event,trace"],
        capture_output=True,
        text=True,
        timeout=600,
    ).stdout
    out: dict[str, dict[str, float]] = defaultdict(
        lambda: {"calls": 0, "returned": 0, "bytes": 0, "asked": 0}
    )
    pending: dict[int, tuple[str, int]] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(\d+)\s+syscalls:sys_(enter|exit)_(\w+):\s*(.*)$", line)
        if not m:
            continue
        tid, edge, call, rest = int(m[1]), m[2], m[3], m[4]
        if edge == "enter":
            fields = dict(
                (k.strip(), v.strip()) for k, _, v in (x.partition(":") for x in rest.split(","))
            )
            fd = int(fields.get("fd", "-1"), 16) if "fd" in fields else -1
            asked = int(fields.get("count", fields.get("len", "0")), 16)
            side = (
                "loop"
                if call.startswith("epoll")
                else "new"
                if call in ("accept4", "connect")
                else sides.get(fd, "other")
            )
            pending[tid] = (f"{call.replace('epoll_pwait', 'epoll_wait')} {side}", asked)
        elif tid in pending:
            key, asked = pending.pop(tid)
            ret = int(rest.strip(), 16)
            if ret >= 2**63:
                ret -= 2**64
            cell = out[key]
            cell["calls"] += 1
            cell["asked"] += asked
            if ret > 0:
                cell["returned"] += 1
                cell["bytes"] += ret
    return {k: dict(v) for k, v in sorted(out.items())}


_STACK_LINE = re.compile(r"^\s+([0-9a-f]+)\s+(.*?)\s+\((.*)\)$")


def perf_stacks(path: Path) -> list[tuple[int, list[tuple[str, str]]]]:
    """(period in ns, stack leaf first as (symbol, shared object)) of every sample."""
    text = subprocess.run(
        ["perf", "script", "-i", str(path), "-F", "tid,period,ip,sym,dso", "--no-inline"],
        capture_output=True,
        text=True,
        timeout=900,
    ).stdout
    samples: list[tuple[int, list[tuple[str, str]]]] = []
    period, stack = 0, []
    for line in text.splitlines():
        if not line.strip():
            if stack:
                samples.append((period, stack))
            period, stack = 0, []
            continue
        m = _STACK_LINE.match(line)
        if m:
            sym = re.sub(r"\+0x[0-9a-f]+$", "", m[2])
            stack.append((sym, Path(m[3]).name))
        else:
            fields = line.split()
            period = int(fields[-1]) if fields and fields[-1].isdigit() else 1
    if stack:
        samples.append((period, stack))
    return samples


def _kernel(dso: str) -> bool:
    return dso.startswith("[kernel") or dso in ("[vdso]", "[vsyscall]")


def _openssl(dso: str) -> bool:
    return dso.startswith(("libssl.so", "libcrypto.so", "_ssl.cpython"))


def _caller(stack: list[tuple[str, str]], skip: re.Pattern[str]) -> str:
    """The first named frame above the leaf's own frames (those matching `skip`)."""
    for sym, dso in stack[1:]:
        if skip.search(sym) or sym == "[unknown]":
            continue
        return f"{sym} ({dso})"
    return "?"


def classify(stack: list[tuple[str, str]]) -> tuple[str, str]:
    """(category, detail) of one sample; the stack is leaf first."""
    names = [sym for sym, _ in stack]
    leaf, leaf_dso = stack[0]
    if any(_HANDSHAKE.search(n) for n in names):
        kind = (
            "PBKDF2 (SCRAM client)"
            if any("pbkdf2" in n.lower() for n in names)
            else "TLS handshake"
            if any(re.search(r"handshake|statem|tls_construct|tls_process", n) for n in names)
            else "TLS context"
        )
        return "setup", kind
    if _kernel(leaf_dso):
        group = next((g for g, p in _KERNEL_GROUPS if any(p.search(n) for n in names)), None)
        if group is None:
            group = next((f"{m[1]}" for n in names if (m := _SYSCALL.match(n))), "other")
        if _KERNEL_COPY.search(leaf):
            group += ": copying to/from user space"
        return "kernel", group
    if _COPY.search(leaf) and leaf_dso.startswith("libc.so"):
        caller = _caller(stack, _COPY)
        for pattern, label in _COPY_CALLERS:
            if pattern.search(caller):
                return "copies", label
        return "copies", caller
    if _ALLOC.search(leaf) and leaf_dso.startswith("libc.so"):
        return "allocator", _caller(stack, _ALLOC)
    # the leaf's owner: the first frame going up that is neither libc nor Python's C API (or
    # the interpreter running Python code); unknown symbols of libcrypto are its assembly
    at = next(
        (
            i
            for i, (sym, dso) in enumerate(stack)
            if sym == "_PyEval_EvalFrameDefault" or not dso.startswith(("libpython", "libc.so"))
        ),
        len(stack) - 1,
    )
    owner, owner_dso = stack[at]
    under = "" if at == 0 else " (libc or Python's C API under it)"
    if _openssl(owner_dso):
        run = []
        for sym, dso in stack[at:]:
            if not (_openssl(dso) or dso == "[unknown]"):
                break
            run.append(sym)
        if any(_CIPHER.search(n) for n in run):
            if at == 0 and (leaf == "[unknown]" or _BULK.search(leaf)):
                return "crypto", "AES-GCM itself (libcrypto's assembly)"
            return "crypto", "around it (EVP calls, provider parameters)"
        return "tls_layer", owner_dso.split(".so")[0].split(".cpython")[0] + under
    if "SSLProtocol" in owner:
        return "tls_layer", "uvloop SSLProtocol" + under
    if leaf_dso.startswith("libpython"):
        return "python", "interpreter (aclgate, asyncio)"
    if leaf_dso.startswith("loop.cpython"):
        return "python", "uvloop's loop (libuv, Cython)"
    return "python", leaf_dso.split(".so")[0].split(".cpython")[0]


def breakdown(samples: list[tuple[int, list[tuple[str, str]]]]) -> dict[str, Any]:
    """Shares of the samples' periods by category and by (category, detail)."""
    total = sum(p for p, _ in samples) or 1
    by_cat: Counter[str] = Counter()
    detail: dict[str, Counter[str]] = defaultdict(Counter)
    for period, stack in samples:
        cat, what = classify(stack)
        by_cat[cat] += period
        detail[cat][what] += period
    return {
        "samples": len(samples),
        "share": {c: by_cat[c] / total for c in CATEGORIES},
        "detail": {
            c: {k: v / total for k, v in detail[c].most_common()} for c in CATEGORIES if detail[c]
        },
    }


def keep(perf: Path, where: Path | None) -> None:
    """Move perf's data file to `where` (--keep-perf), or delete it."""
    if where is None:
        perf.unlink()
    else:
        where.mkdir(parents=True, exist_ok=True)
        shutil.move(perf, where / perf.name)


# --------------------------------------------------------------------------------------------
# Runs


def connections_total(metrics: str) -> float:
    """Client connections the proxy accepted so far (aclgate_connections_total)."""
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("aclgate_connections_total")
    )


def cpu_ns(pid: int) -> int:
    """CPU time of every live thread of `pid` so far, in ns (/proc/<pid>/task/*/schedstat: exact,
    where /proc/<pid>/stat counts 10 ms ticks)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total


def settle(pid: int, quiet: float = 0.3, timeout: float = 5.0) -> None:
    """Wait until the process has used no CPU for `quiet` seconds (closing connections)."""
    deadline = time.monotonic() + timeout
    last = sum(cpu_split(pid))
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = sum(cpu_split(pid))
        if now == last:
            return
        last = now


def measured(
    service: Any,
    work: Callable[[], dict[str, Any]],
    mb: float,
    probe: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """One run of `work` through the proxy, with its CPU, connections and requests around it;
    inside the context manager `probe()` makes, if any (perf attached)."""
    pid = service.process.pid
    metrics = f"127.0.0.1:{service.metrics_port}"
    settle(pid)
    u0, s0 = cpu_split(pid)
    c0, r0 = connections_total(metrics), request_counts(metrics)
    t0 = time.monotonic()
    if probe is None:
        got = work()
    else:
        with probe() as watched:
            got = work()
            settle(pid)
        got["watched"] = watched
    wall = time.monotonic() - t0
    settle(pid)
    u1, s1 = cpu_split(pid)
    c1, r1 = connections_total(metrics), request_counts(metrics)
    cpu = (u1 - u0) + (s1 - s0)
    return {
        "tool": got,
        "wall_s": round(wall, 2),
        "user_s": round(u1 - u0, 3),
        "system_s": round(s1 - s0, 3),
        "mb": round(mb, 2),
        "cpu_ms_per_mb": round(cpu * 1000 / mb, 3) if mb else None,
        "client_connections": int(c1 - c0),
        "requests": {k: int(v - r0.get(k, 0)) for k, v in r1.items() if v - r0.get(k, 0)},
        "loadavg": _loadavg(),
        "cpu_pressure_avg10": _cpu_pressure(),
    }


def connect_loop(
    service: Any, count: int, context: ssl.SSLContext | None, login: bool
) -> dict[str, Any]:
    """`count` clients one after another: connect (TLS handshake if `context`), then if `login`
    the SASL login (TLS only) and one Metadata request (the proxy connects upstream), close.
    Returns the proxy's CPU per connection (schedstat: every thread, exact)."""
    from tests.fixtures.rawclient import RawClient
    from tests.listeners.util import metadata_request, sasl_login

    host, port = service.address.rsplit(":", 1)
    pid = service.process.pid
    metrics = f"127.0.0.1:{service.metrics_port}"

    def one() -> str | None:
        sock = socket.create_connection((host, int(port)), timeout=30)
        cipher = None
        if context is not None:
            sock = context.wrap_socket(sock, server_hostname=host)
            got = sock.cipher()
            cipher = f"{got[1]} {got[0]}" if got else None
        raw = RawClient.__new__(RawClient)
        raw.sock = sock
        raw._ids = iter(range(1, 1000))  # type: ignore[assignment]
        try:
            if login:
                if context is not None:
                    answer = sasl_login(raw, "SCRAM-SHA-512", TLS_USER, TLS_PASSWORD)
                    if answer.error_code != 0:
                        raise RuntimeError(f"SASL login refused: {answer}")
                brokers = raw.request(metadata_request()).brokers
                if not brokers:
                    raise RuntimeError("no brokers in the Metadata answer")
        finally:
            sock.close()
        return cipher

    cipher = one()  # warm
    settle(pid)
    c0 = connections_total(metrics)
    n0 = cpu_ns(pid)
    t0 = time.monotonic()
    for _ in range(count):
        one()
    wall = time.monotonic() - t0
    settle(pid)
    spent = cpu_ns(pid) - n0
    return {
        "connections": count,
        "accepted": int(connections_total(metrics) - c0),
        "wall_s": round(wall, 2),
        "cpu_s": round(spent / 1e9, 4),
        "cpu_ms_per_connection": round(spent / 1e6 / count, 3),
        "cipher": cipher,
    }


def run_tool(tool: str, bootstrap: str, topic: str, args: Any, client: Client) -> dict[str, Any]:
    if tool == "producer":
        return run_producer(bootstrap, topic, args.records, args.record_size, client)
    if tool == "consumer":
        return run_consumer(bootstrap, topic, args.records, client)
    return run_rdkafka_consumer(bootstrap, topic, args.records, client)


def profile_runs(
    mode: str,
    service: Any,
    client: Client,
    cluster: Any,
    tools: list[str],
    passes: list[str],
    args: Any,
    work: Path,
) -> dict[str, Any]:
    """A warm-up, then each pass (unprofiled, profiled, syscalls) of each tool through one
    proxy: the producer writes a fresh topic, the consumer reads it back."""
    cluster.create_topic(f"warm-{mode}")
    run_tool("producer", service.address, f"warm-{mode}", args, client)
    pid = service.process.pid
    mb = args.records * args.record_size / 2**20
    upstream_ports = {cluster.listener("SASL_SSL").port(1), cluster.internal.port(1)}
    results: dict[str, Any] = {}
    for kind in passes:
        topic = f"{mode}-{kind}"
        cluster.create_topic(topic)
        for tool in tools:
            data_file = work / f"{mode}-{tool}-{kind}.perf"
            probe: Callable[[], Any] | None = None
            if kind == "profiled":
                probe = functools.partial(perf_record, pid, data_file, args.rate, args.stack_bytes)
            elif kind == "syscalls":
                probe = functools.partial(syscall_record, pid, data_file, upstream_ports)
            work_fn = functools.partial(run_tool, tool, service.address, topic, args, client)
            got = measured(service, work_fn, mb, probe)
            watched = got["tool"].pop("watched", None)
            print(f"{mode} {tool} {kind}: {got}", flush=True)
            entry = results.setdefault(tool, {})
            entry[kind] = got
            if kind == "profiled":
                entry["profile"] = breakdown(perf_stacks(data_file))
                keep(data_file, args.keep_perf)
            elif kind == "syscalls":
                entry["syscall_counts"] = syscall_counts(data_file, watched or {})
                keep(data_file, args.keep_perf)
    return results


# --------------------------------------------------------------------------------------------
# Report

#: the columns of the system call table: "<call> <side>" keys of syscall_counts
_SYSCALL_COLUMNS = (
    "read client",
    "write client",
    "read upstream",
    "write upstream",
    "epoll_wait loop",
)


def categorized(run: dict[str, Any], profile: dict[str, Any]) -> dict[str, float]:
    """ms of CPU per MB by category: the profile's shares x the unprofiled CPU per MB."""
    return {c: run["cpu_ms_per_mb"] * profile["share"][c] for c in CATEGORIES}


def markdown(data: dict[str, Any]) -> str:
    cfg, env, res = data["config"], data["environment"], data["results"]
    tools = [t for t in ("producer", cfg["consumer"])]
    modes = [m for m in MODES if m in res]
    lines = [
        "# Profile: where aclgate's CPU goes over SASL_SSL",
        "",
        f"Recorded {data['finished']} with `{data['command']}`, {measured_code(env)}; Apache Kafka "
        f"{data['kafka_version']} (1 node) on loopback, {env.get('cores')} vCPUs "
        f"({env.get('cpu_model')}) shared by the tools, the broker, the proxies and perf; "
        f"Python {env.get('python')}, uvloop {env.get('uvloop')}, {data['openssl']}. Load "
        f"average (1 min) {env['loadavg_before'][0]} before, {env['loadavg_after'][0]} after.",
        "",
        f"{cfg['records']:,} records of {cfg['record_size']} B written by ProducerPerformance "
        f"(acks=1) and read back by {TOOL_NAMES[cfg['consumer']]}, through an aclgate with "
        "SASL_SSL (SCRAM-SHA-512) on both sides and through a plaintext aclgate "
        f"(`{cfg['plain_extra'] or 'defaults'}`); each tool run once unprofiled (CPU per MB: "
        "user + system time of the proxy from /proc over the MB moved), once under "
        f"`perf record -F {cfg['rate']} --call-graph dwarf` (each category's share of the "
        "samples x the unprofiled CPU per MB) and, unless --no-syscalls, once under perf's "
        "syscall tracepoints (the reads and writes). MB = 2^20 bytes.",
        "",
        "## aclgate's CPU per MB by category (ms)",
        "",
    ]
    head = ["Category"]
    for tool in tools:
        head += [f"{TOOL_NAMES[tool]}: {MODE_NAMES[m]}" for m in modes]
        if len(modes) == 2:
            head.append(f"{TOOL_NAMES[tool]}: TLS adds")
    lines += ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    per: dict[tuple[str, str], dict[str, float]] = {
        (m, t): categorized(res[m][t]["unprofiled"], res[m][t]["profile"])
        for m in modes
        for t in tools
    }
    for cat, label in CATEGORIES.items():
        row = [label]
        for tool in tools:
            row += [f"{per[m, tool][cat]:.2f}" for m in modes]
            if len(modes) == 2:
                row.append(f"{per['tls', tool][cat] - per['plain', tool][cat]:+.2f}")
        lines.append("| " + " | ".join(row) + " |")
    row = ["**Total (unprofiled run)**"]
    for tool in tools:
        row += [f"**{res[m][tool]['unprofiled']['cpu_ms_per_mb']:.2f}**" for m in modes]
        if len(modes) == 2:
            d = (
                res["tls"][tool]["unprofiled"]["cpu_ms_per_mb"]
                - res["plain"][tool]["unprofiled"]["cpu_ms_per_mb"]
            )
            row.append(f"**{d:+.2f}**")
    lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Runs (unprofiled; the profiled run's figures after the slash):", ""]
    lines += [
        "| Proxy | Tool | MB/s | CPU ms/MB | user / system s | system share (/proc; perf) | "
        "client connections | requests | perf samples |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in modes:
        for tool in tools:
            r, p = res[m][tool]["unprofiled"], res[m][tool]["profiled"]
            prof = res[m][tool]["profile"]
            sys_share = r["system_s"] / max(r["user_s"] + r["system_s"], 1e-9)
            reqs = ", ".join(f"{k} {v:,}" for k, v in sorted(r["requests"].items()))
            lines.append(
                f"| {MODE_NAMES[m]} | {TOOL_NAMES[tool]} | {r['tool']['mb_per_s']:.1f} / "
                f"{p['tool']['mb_per_s']:.1f} | {r['cpu_ms_per_mb']:.2f} / {p['cpu_ms_per_mb']:.2f} "
                f"| {r['user_s']:.2f} / {r['system_s']:.2f} | {100 * sys_share:.0f}%; "
                f"{100 * prof['share']['kernel']:.0f}% | {r['client_connections']} | {reqs} "
                f"| {prof['samples']:,} |"
            )
    setup = data.get("connect_loops", {})
    if setup:
        lines += ["", "## Handshakes: count and cost", ""]
        lines += [
            "| Loop | connections | proxy CPU per connection (ms) |",
            "|---|---|---|",
        ]
        labels = {
            "tls_full": "SASL_SSL: TLS handshake, SCRAM login, Metadata (upstream TLS + SCRAM)",
            "tls_handshake": "SASL_SSL: TLS handshake only, then close",
            "plain_full": "PLAINTEXT: connect, Metadata (upstream connect)",
        }
        for key, label in labels.items():
            if key in setup:
                s = setup[key]
                lines.append(f"| {label} | {s['connections']} | {s['cpu_ms_per_connection']:.2f} |")
        if "tls_full" in setup and "tls" in res:
            full = setup["tls_full"]["cpu_ms_per_connection"]
            plain = setup.get("plain_full", {}).get("cpu_ms_per_connection", 0.0)
            lines.append("")
            for tool in tools:
                r = res["tls"][tool]["unprofiled"]
                n = r["client_connections"]
                seen = res["tls"][tool].get("syscall_counts", {})
                counted = (
                    f" (the syscalls run: {seen.get('accept4 new', {}).get('calls', 0)} accepted, "
                    f"{seen.get('connect new', {}).get('calls', 0)} opened to Kafka)"
                    if seen
                    else ""
                )
                lines.append(
                    f"* {TOOL_NAMES[tool]} over SASL_SSL: {n} client connections{counted} = "
                    f"{2 * n} TLS handshakes (one with the client, one with Kafka) and {2 * n} "
                    f"SCRAM logins; x {full - plain:.2f} ms (a SASL_SSL connection's setup over "
                    f"a plaintext one's) = {n * (full - plain):.1f} ms of CPU, "
                    f"**{n * (full - plain) / r['mb']:.3f} ms per MB** over {r['mb']:.0f} MB; "
                    f"in the profile: {per['tls', tool]['setup']:.3f} ms per MB."
                )
            if setup["tls_full"].get("cipher"):
                lines.append(
                    f"* Negotiated by the loop's Python client with aclgate: "
                    f"{setup['tls_full']['cipher']}."
                )
        if "tls_full_profile" in setup:
            det = setup["tls_full_profile"]["detail"]
            full = setup["tls_full"]["cpu_ms_per_connection"]
            parts = []
            for cat, label in CATEGORIES.items():
                share = setup["tls_full_profile"]["share"][cat]
                if share >= 0.01:
                    sub = ""
                    if cat == "setup":
                        sub = (
                            " ("
                            + ", ".join(
                                f"{k} {v * full:.2f}" for k, v in det.get("setup", {}).items()
                            )
                            + ")"
                        )
                    parts.append(
                        f"{label.split(':')[0].split('(')[0].strip()} {share * full:.2f}{sub}"
                    )
            lines.append(
                f"* One SASL_SSL connection's {full:.2f} ms, by the same categories (perf over "
                f"the loop): " + "; ".join(parts) + "."
            )
    if any("syscall_counts" in res[m][t] for m in modes for t in tools):
        lines += [
            "",
            "## System calls per MB (a third run, perf's syscall tracepoints)",
            "",
            "Calls per MB moved, and the bytes a call that returned data returned on average "
            "(KiB asked for); "
            "client: the tool's connections, upstream: the connections to Kafka. Kernel µs per "
            "call: the kernel row over these calls (epoll_wait included); Python µs per read: "
            "the Python row over the reads that returned (each one data_received at most).",
            "",
            "| Proxy | Tool | "
            + " | ".join(_SYSCALL_COLUMNS)
            + " | kernel µs per call | Python µs per read |",
            "|---|---|" + "---|" * (len(_SYSCALL_COLUMNS) + 2),
        ]
        for m in modes:
            for tool in tools:
                counts = res[m][tool].get("syscall_counts")
                if not counts:
                    continue
                run_mb = res[m][tool]["syscalls"]["mb"]
                cells = []
                for key in _SYSCALL_COLUMNS:
                    c = counts.get(key)
                    if not c or not c["calls"]:
                        cells.append("-")
                    elif key.startswith("epoll"):
                        cells.append(f"{c['calls'] / run_mb:,.0f}")
                    else:
                        cells.append(
                            f"{c['calls'] / run_mb:,.0f} "
                            f"({c['bytes'] / max(c['returned'], 1) / 1024:.1f} KiB; "
                            f"{c['asked'] / c['calls'] / 1024:.0f})"
                        )
                calls = sum(counts.get(k, {}).get("calls", 0) for k in _SYSCALL_COLUMNS) / run_mb
                reads = sum(
                    counts.get(k, {}).get("returned", 0) for k in ("read client", "read upstream")
                )
                cells.append(f"{per[m, tool]['kernel'] * 1000 / calls:.1f}" if calls else "-")
                cells.append(
                    f"{per[m, tool]['python'] * 1000 * run_mb / reads:.1f}" if reads else "-"
                )
                lines.append(
                    f"| {MODE_NAMES[m]} | {TOOL_NAMES[tool]} | " + " | ".join(cells) + " |"
                )
    lines += ["", "## Details by category (ms per MB)", ""]
    for m in modes:
        for tool in tools:
            r, prof = res[m][tool]["unprofiled"], res[m][tool]["profile"]
            lines += [f"### {MODE_NAMES[m]}, {TOOL_NAMES[tool]}", ""]
            for cat in ("copies", "allocator", "kernel", "crypto", "tls_layer", "python"):
                items = prof["detail"].get(cat, {})
                shown = [
                    f"{k} {v * r['cpu_ms_per_mb']:.3f}"
                    for k, v in items.items()
                    if v * r["cpu_ms_per_mb"] >= 0.005
                ][:8]
                if shown:
                    lines.append(f"* {CATEGORIES[cat]}: " + "; ".join(shown) + ".")
            lines.append("")
    for note in data.get("notes", []):
        lines.append(f"* {note}")
    lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--consumer", choices=("consumer", "rdkafka"), default="consumer")
    parser.add_argument("--unrelated-acls", type=int, default=1000)
    parser.add_argument("--rate", type=int, default=999, help="perf samples per second (999)")
    parser.add_argument(
        "--stack-bytes", type=int, default=16384, help="stack copied per perf sample (16384)"
    )
    parser.add_argument(
        "--connections", type=int, default=100, help="clients of each connect-only loop (100)"
    )
    parser.add_argument(
        "--plain-extra",
        default="--splice-min-bytes 0",
        help="`aclgate serve` flags of the plaintext proxy (default: --splice-min-bytes 0, "
        "every byte through user space as over TLS)",
    )
    parser.add_argument("--no-plain", action="store_true", help="profile the TLS proxy only")
    parser.add_argument(
        "--no-syscalls",
        action="store_true",
        help="leave out the third run of each tool, which counts the proxy's reads and writes",
    )
    parser.add_argument(
        "--keep-perf", type=Path, default=None, help="keep perf's data files in this directory"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="default bench/results/ (--quick: a temporary one)"
    )
    parser.add_argument("--stem", default="profile_tls")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="10,000 records, 5 connections, to a temporary directory",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.connections = 10_000, 5
        args.out = args.out or Path(tempfile.mkdtemp(prefix="aclgate-profile-tls-"))
    args.out = args.out or RESULTS
    command = (
        "python -m bench.profile_tls " + shlex.join(argv if argv is not None else sys.argv[1:])
    ).strip()
    problem = perf_problem()
    if problem:
        raise SystemExit(f"needs perf (apt-get install linux-perf): {problem}")
    env = environment()
    env["loadavg_before"] = _loadavg()
    modes = ["tls"] if args.no_plain else list(MODES)
    tools = ["producer", args.consumer]
    passes = ["unprofiled", "profiled"] + ([] if args.no_syscalls else ["syscalls"])

    from tests.kafka.cluster import KafkaCluster, kafka_version

    results: dict[str, Any] = {}
    loops: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="aclgate-profile-tls-") as tmp:
        work = Path(tmp)
        print("starting Apache Kafka ...", flush=True)
        cluster = KafkaCluster(
            nodes=1,
            listeners=("PLAINTEXT", "SASL_SSL"),
            workdir=work / "kafka",
            base_port=free_base_port(),
        ).start()
        services: dict[str, Any] = {}
        clients: dict[str, Client] = {}
        try:
            tls_clients, flags = tls_setup(cluster, work)
            acl_tls, acl_plain = work / "acls-tls.json", work / "acls-plain.json"
            write_acls(acl_tls, args.unrelated_acls, f"User:{TLS_USER}")
            write_acls(acl_plain, args.unrelated_acls, "User:ANONYMOUS")
            services["tls"] = start_aclgate(
                "aclgate-tls", cluster.listener("SASL_SSL").bootstrap, acl_tls, work, flags
            )
            clients["tls"] = tls_clients["aclgate"]
            if "plain" in modes:
                services["plain"] = start_aclgate(
                    "aclgate-plain",
                    cluster.internal.bootstrap,
                    acl_plain,
                    work,
                    shlex.split(args.plain_extra),
                )
                clients["plain"] = PLAIN
            for mode in modes:
                print(f"{mode}: warm-up ...", flush=True)
                results[mode] = profile_runs(
                    mode, services[mode], clients[mode], cluster, tools, passes, args, work
                )
            print("connect-only loops ...", flush=True)
            tls_ctx = ssl.create_default_context(cafile=str(work / "aclgate-pki" / "ca.crt"))
            loops["tls_handshake"] = connect_loop(services["tls"], args.connections, tls_ctx, False)
            loops["tls_full"] = connect_loop(services["tls"], args.connections, tls_ctx, True)
            if "plain" in modes:
                loops["plain_full"] = connect_loop(services["plain"], args.connections, None, True)
            perf = work / "connect.perf"
            with perf_record(services["tls"].process.pid, perf, args.rate, args.stack_bytes):
                connect_loop(services["tls"], args.connections, tls_ctx, True)
            loops["tls_full_profile"] = breakdown(perf_stacks(perf))
            keep(perf, args.keep_perf)
            print(loops, flush=True)
        finally:
            for service in services.values():
                service.stop()
            cluster.stop()
    env["loadavg_after"] = _loadavg()
    notes = [
        "Categories are decided per sample from its whole stack (DWARF unwinding): a sample "
        "anywhere under a TLS handshake or PBKDF2 is connection setup, whatever its leaf; "
        "otherwise the leaf and its owner decide (see bench/profile_tls.py). aclgate's Python "
        "called from SSLProtocol's data_received is Python, not TLS; aclgate's own SCRAM "
        "server (Python, in data_received) is Python too: 2-3 logins per run.",
        "The kernel row is perf's share of kernel-mode samples; /proc's user/system split is "
        "sampled at the scheduler tick and shows a lower system share on this VM. The rows use "
        "perf's shares of /proc's total CPU (exact to its 10 ms ticks).",
        "The profiled run costs up to ~25% more CPU per MB than the unprofiled one (perf "
        "copies 16 KiB of stack per sample); its shares are applied to the unprofiled total.",
    ]
    if max(env["loadavg_before"][0], env["loadavg_after"][0]) > (env.get("cores") or 1):
        notes.append(
            f"The machine was busier than its core count (load {env['loadavg_before'][0]:.1f} "
            f"before, {env['loadavg_after'][0]:.1f} after): MB/s are noisy; CPU per MB less so."
        )
    data = {
        "command": command,
        "finished": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "kafka_version": kafka_version(),
        "openssl": ssl.OPENSSL_VERSION,
        "environment": env,
        "config": {
            "records": args.records,
            "record_size": args.record_size,
            "consumer": args.consumer,
            "rate": args.rate,
            "stack_bytes": args.stack_bytes,
            "connections": args.connections,
            "plain_extra": args.plain_extra if "plain" in modes else None,
            "modes": modes,
            "unrelated_acls": args.unrelated_acls,
        },
        "categories": CATEGORIES,
        "results": results,
        "ms_per_mb": {
            m: {
                t: categorized(results[m][t]["unprofiled"], results[m][t]["profile"]) for t in tools
            }
            for m in modes
        },
        "connect_loops": loops,
        "notes": notes,
    }
    text = markdown(data)
    write_results(args.out, args.stem, data, text)
    print(text)
    print(f"wrote {args.out}/{args.stem}.json, .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
