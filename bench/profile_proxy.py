"""Where aclgate's CPU goes under Kafka's ProducerPerformance (or ConsumerPerformance) load.

    python -m bench.profile_proxy                        # producer, 300,000 records
    python -m bench.profile_proxy --tool consumer --stem profile_consume

Method: the setup of bench/throughput.py (1-node Apache Kafka 4.x on loopback, aclgate with
ALL for User:ANONYMOUS plus 1,000 unrelated prefixed ACLs, --metrics-listen on). After a
warm-up run, two measured runs of the tool through the same proxy process:

1. unprofiled: the proxy's user and system CPU (/proc/<pid>/stat) and its request counts
   (the /metrics endpoint) give the CPU per request and per MB;
2. sampled by py-spy (`py-spy record --pid ... --nonblocking -f raw`, a dev tool, not a
   runtime dependency): the share of the samples in each function, self and inclusive, is
   turned into µs per request by scaling with the unprofiled CPU per request.

py-spy sees Python frames only: time spent in uvloop's C code and in the kernel with no
Python frame on the stack (the event loop's own reads, writes and epoll) is not sampled and
appears only in the system CPU of run 1 and in the "not sampled" line of the report.

Writes <stem>.json and <stem>.md to bench/results/ (or --out).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aclgate.proxy.demo.embedded_broker import free_port
from bench.latency import RESULTS, Service, _loadavg, environment
from bench.recording import measured_code, write_results
from bench.throughput import _CLK_TCK, free_base_port, run_consumer, run_producer, write_acls

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")
_API_LINE = re.compile(r'^aclgate_requests_total\{api="(?P<api>[^"]+)"\} (?P<n>[\d.e+]+)$', re.M)


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of one process so far."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) / _CLK_TCK, int(fields[12]) / _CLK_TCK


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) so far of each thread of a process, by `tid name`."""
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        out[f"{tid} {name}"] = (int(fields[11]) + int(fields[12])) / _CLK_TCK
    return out


def request_counts(metrics: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {m["api"]: float(m["n"]) for m in _API_LINE.finditer(text)}


def short(frame: str) -> str:
    """`func (path/to/file.py:12)` -> `func (file.py)`: samples grouped by function."""
    m = _FRAME.match(frame)
    if not m:
        return frame
    path = m["file"]
    for marker in ("/protocol/", "/proxy/", "/authz/", "/site-packages/", "/lib/python3"):
        if marker in path:
            path = path[path.index(marker) + 1 :]
            break
    return f"{m['func']} ({path})"


def summarize(raw: str) -> dict[str, Any]:
    """Self and inclusive sample counts per function from py-spy's raw (collapsed) output."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [short(f) for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            inclusive[f] += n
    return {"samples": total, "self": dict(own), "inclusive": dict(inclusive)}


def run_tool(tool: str, bootstrap: str, topic: str, records: int, size: int) -> dict[str, Any]:
    if tool == "producer":
        return run_producer(bootstrap, topic, records, size)
    return run_consumer(bootstrap, topic, records)


def measured(
    tool: str, proxy: Service, metrics: str | None, topic: str, args: argparse.Namespace
) -> dict[str, Any]:
    """One run of the tool through the proxy with its CPU and request counts around it."""
    assert proxy.process is not None
    pid = proxy.process.pid
    u0, s0 = cpu_split(pid)
    th0 = thread_cpu(pid)
    c0 = request_counts(metrics) if metrics else {}
    t0 = time.monotonic()
    got = run_tool(tool, proxy.address, topic, args.records, args.record_size)
    wall = time.monotonic() - t0
    u1, s1 = cpu_split(pid)
    th1 = thread_cpu(pid)
    c1 = request_counts(metrics) if metrics else {}
    counts = {api: c1.get(api, 0) - c0.get(api, 0) for api in c1}
    mb = args.records * args.record_size / 2**20
    return {
        "tool": got,
        "wall_s": round(wall, 2),
        "user_s": round(u1 - u0, 3),
        "system_s": round(s1 - s0, 3),
        "requests": {k: int(v) for k, v in counts.items() if v},
        "mb": round(mb, 2),
        "threads": {
            k: round(v - th0.get(k, 0.0), 3) for k, v in th1.items() if v - th0.get(k, 0.0) > 0
        },
    }


def traced(
    probe: list[str],
    tool: str,
    proxy: Service,
    metrics: str,
    topic: str,
    cluster: Any,
    args: argparse.Namespace,
    work: Path,
) -> dict[str, Any]:
    """One more run with `probe` (strace -c or perf record) attached to the proxy; returns
    the run and the probe's report (strace's table, or perf's samples by shared object and
    by symbol)."""
    cluster.create_topic(topic)
    if tool == "consumer":
        run_producer(cluster.bootstrap, topic, args.records, args.record_size)
    out = work / f"{topic}.out"
    cmd = [*probe, "-o", str(out)]
    spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=work)
    time.sleep(1.5)
    run = measured(tool, proxy, metrics, topic, args)
    spy.send_signal(signal.SIGINT)
    spy.communicate(timeout=120)
    if probe[0] == "strace":
        report = out.read_text()
    else:
        report = "\n".join(
            subprocess.run(
                [
                    "perf",
                    "report",
                    "-i",
                    str(out),
                    "--stdio",
                    "--sort",
                    sort,
                    "--percent-limit",
                    "0.5",
                ],
                capture_output=True,
                text=True,
                timeout=300,
            ).stdout
            for sort in ("dso", "dso,sym")
        )
    return {"run": run, "report": report}


def markdown(data: dict[str, Any], top: int) -> str:
    run = data["unprofiled"]
    main_api = data["main_api"]
    n = run["requests"].get(main_api, 0) or 1
    cpu_us = (run["user_s"] + run["system_s"]) * 1e6 / n
    user_us = run["user_s"] * 1e6 / n
    prof = data["profile"]
    floor = data["relay_floor"]
    samples = prof["samples"] or 1
    # py-spy counts a sample when the thread is running (user or kernel mode): the samples
    # stand for the whole CPU time
    scale = cpu_us / samples
    lines = [
        f"# Profile: aclgate under {data['tool_name']}",
        "",
        f"Recorded {data['finished']} with `{data['command']}`, {measured_code(data['environment'])}; "
        f"Apache Kafka {data['kafka_version']} (1 node) on loopback, 2 vCPUs shared by the tool, "
        f"the broker, the proxy and py-spy. Load average (1 min) {data['loadavg_before'][0]} before, "
        f"{data['loadavg_after'][0]} after.",
        "",
        f"Unprofiled run: {data['config']['records']:,} records of {data['config']['record_size']} B, "
        f"{run['tool']['mb_per_s']} MB/s; {n:,} {main_api} requests "
        f"({data['config']['records'] / n:.1f} records, "
        f"{data['config']['records'] * data['config']['record_size'] / n / 1024:.1f} KiB each); "
        f"proxy CPU {run['user_s']:.2f} s user + {run['system_s']:.2f} s system = "
        f"**{cpu_us:.1f} µs per {main_api} request** ({user_us:.1f} user, "
        f"{cpu_us - user_us:.1f} system), "
        f"**{(run['user_s'] + run['system_s']) * 1000 / run['mb']:.2f} ms per MB**.",
        "",
        f"The bare relay (bench/relay.py: uvloop Protocols copying bytes both ways, no "
        f"parsing; the floor of any Python hop) under the same tool right after: "
        f"{floor['tool']['mb_per_s']} MB/s, CPU {floor['user_s']:.2f} s user + "
        f"{floor['system_s']:.2f} s system = "
        f"**{(floor['user_s'] + floor['system_s']) * 1e6 / n:.1f} µs per request** "
        f"(same request count assumed), "
        f"**{(floor['user_s'] + floor['system_s']) * 1000 / floor['mb']:.2f} ms per MB**.",
        "",
        f"Profiled run (py-spy {data['py_spy_rate']} Hz, non-blocking): {prof['samples']:,} "
        "samples of the running proxy thread (user or kernel mode); each function's share of "
        "them times the unprofiled run's CPU per request gives its µs per request. Time in C "
        "code with no Python frame above it (uvloop's loop: epoll, the socket reads and the "
        "callbacks' dispatch) is charged to `Runner.run`; a write's syscall to the Python "
        "function that called `transport.write`.",
        "",
        f"## Top {top} functions by inclusive time",
        "",
        "| Function | inclusive % | µs / request | self % | self µs / request |",
        "|---|---|---|---|---|",
    ]
    inclusive, own = prof["inclusive"], prof["self"]
    for func, count in sorted(inclusive.items(), key=lambda kv: -kv[1])[:top]:
        s = own.get(func, 0)
        lines.append(
            f"| `{func}` | {100 * count / samples:.1f} | {count * scale:.1f} | "
            f"{100 * s / samples:.1f} | {s * scale:.1f} |"
        )
    lines += [
        "",
        f"## Top {top} functions by self time",
        "",
        "| Function | self % | self µs / request |",
        "|---|---|---|",
    ]
    for func, count in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"| `{func}` | {100 * count / samples:.1f} | {count * scale:.1f} |")
    for probe, title in (
        ("strace", "System calls (strace -c, one more run)"),
        ("perf", "perf (one more run): samples by shared object and symbol"),
    ):
        got = data.get(probe)
        if got:
            r = got["run"]
            lines += [
                "",
                f"## {title}",
                "",
                f"{r['requests'].get(main_api, 0):,} {main_api} requests in that run "
                f"({r['tool']['mb_per_s']} MB/s under the probe).",
                "",
                "```",
                got["report"].strip(),
                "```",
            ]
    lines.append("")
    for note in data.get("notes", []):
        lines.append(f"* {note}")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tool", choices=("producer", "consumer"), default="producer")
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--unrelated-acls", type=int, default=1000)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--stem", default=None)
    parser.add_argument("--strace", action="store_true", help="one more run under strace -c")
    parser.add_argument("--perf", action="store_true", help="one more run under perf record")
    parser.add_argument("--extra", default="", help="more `aclgate serve` arguments")
    args = parser.parse_args(argv)
    stem = args.stem or ("profile_produce" if args.tool == "producer" else "profile_consume")
    command = "python -m bench.profile_proxy " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    py_spy = Path(sys.executable).with_name("py-spy")
    if not py_spy.exists():
        raise SystemExit(f"needs py-spy next to {sys.executable}: pip install py-spy")
    env = environment()
    loadavg_before = _loadavg()

    from tests.kafka.cluster import KafkaCluster, kafka_version

    with tempfile.TemporaryDirectory(prefix="aclgate-profile-") as tmp:
        work = Path(tmp)
        acl_file = work / "acls.json"
        write_acls(acl_file, args.unrelated_acls)
        print("starting Apache Kafka ...", flush=True)
        relay_port = free_port()
        base = free_base_port()
        # The relay floor needs the broker to advertise the relay on its PLAINTEXT listener
        # (so the tool's produce connection goes through it too); aclgate then talks to the
        # INTERNAL listener, which advertises itself.
        cluster = KafkaCluster(
            nodes=1,
            listeners=("PLAINTEXT",),
            workdir=work / "kafka",
            base_port=base,
            broker_config={
                "advertised.listeners": f"INTERNAL://127.0.0.1:{base + 1},"
                f"PLAINTEXT://127.0.0.1:{relay_port}"
            },
        ).start()
        upstream = cluster.internal.bootstrap
        relay = Service(
            "relay",
            [
                sys.executable,
                *("-m", "bench.relay", "--listen", f"127.0.0.1:{relay_port}"),
                *("--upstream", f"127.0.0.1:{base}"),
            ],
            relay_port,
            work,
        )
        port, node1, mport = free_port(), free_port(), free_port()
        first = node1 - 1
        metrics = f"127.0.0.1:{mport}"
        argv_proxy = [
            sys.executable,
            *("-m", "aclgate", "serve", "--upstream", upstream),
            *("--listen", f"127.0.0.1:{port}", "--broker-ports", f"{first}-{first + 9}"),
            *("--acl-file", str(acl_file), "--log-level", "WARNING"),
            *("--metrics-listen", metrics, *shlex.split(args.extra)),
        ]
        proxy = Service("aclgate", argv_proxy, port, work)
        try:
            proxy.launch()
            proxy.wait_ready()
            assert proxy.process is not None
            topics = [f"profile-{i}" for i in range(3)]
            for topic in topics:
                cluster.create_topic(topic)
            relay.launch()
            relay.wait_ready()
            if args.tool == "consumer":
                for topic in topics:
                    run_producer(relay.address, topic, args.records, args.record_size)
            print("warm-up ...", flush=True)
            run_tool(args.tool, proxy.address, topics[0], args.records // 4, args.record_size)
            print("unprofiled run ...", flush=True)
            unprofiled = measured(args.tool, proxy, metrics, topics[1], args)
            print(unprofiled, flush=True)
            print("relay floor run ...", flush=True)
            cluster.create_topic("relay-floor")
            if args.tool == "consumer":
                run_producer(relay.address, "relay-floor", args.records, args.record_size)
            floor = measured(args.tool, relay, None, "relay-floor", args)
            print(floor, flush=True)
            print("profiled run ...", flush=True)
            raw_path = work / "pyspy.txt"
            spy = subprocess.Popen(
                [
                    str(py_spy),
                    *("record", "--pid", str(proxy.process.pid), "--rate", str(args.rate)),
                    *("--nonblocking", "--format", "raw", "--output", str(raw_path)),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            time.sleep(1.0)
            profiled = measured(args.tool, proxy, metrics, topics[2], args)
            spy.send_signal(signal.SIGINT)
            _, err = spy.communicate(timeout=60)
            if not raw_path.exists():
                raise RuntimeError(f"py-spy wrote nothing: {err.decode(errors='replace')}")
            profile = summarize(raw_path.read_text())
            syscalls = perf_dsos = None
            if args.strace:
                print("strace run ...", flush=True)
                syscalls = traced(
                    ["strace", "-c", "-f", "-p", str(proxy.process.pid)],
                    args.tool,
                    proxy,
                    metrics,
                    f"{args.tool}-strace",
                    cluster,
                    args,
                    work,
                )
            if args.perf:
                print("perf run ...", flush=True)
                perf_dsos = traced(
                    ["perf", "record", "-F", "999", "-p", str(proxy.process.pid)],
                    args.tool,
                    proxy,
                    metrics,
                    f"{args.tool}-perf",
                    cluster,
                    args,
                    work,
                )
        finally:
            proxy.stop()
            relay.stop()
            cluster.stop()
    data = {
        "command": command,
        "finished": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "kafka_version": kafka_version(),
        "environment": env,
        "loadavg_before": loadavg_before,
        "loadavg_after": _loadavg(),
        "config": {"records": args.records, "record_size": args.record_size},
        "tool_name": "ProducerPerformance" if args.tool == "producer" else "ConsumerPerformance",
        "main_api": "Produce" if args.tool == "producer" else "Fetch",
        "py_spy_rate": args.rate,
        "unprofiled": unprofiled,
        "relay_floor": floor,
        "profiled": profiled,
        "profile": profile,
        "strace": syscalls,
        "perf": perf_dsos,
        "notes": [],
    }
    text = markdown(data, args.top)
    write_results(args.out, stem, data, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
