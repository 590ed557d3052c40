"""`aclgate serve --workers 2` vs `--workers 1` when the proxy is the bottleneck.

    python -m bench.workers_scaling                 # 3 rounds of 10 s per path
    python -m bench.workers_scaling --seconds 5 --rounds 1

Method: the embedded tansu broker behind two aclgate processes, one with `--workers 1`, one
with `--workers 2`, both enforcing ALL on every topic for User:ANONYMOUS. Load: --clients
client processes, each with --connections connections to the proxy's bootstrap port, each
keeping --depth requests in flight (a new request for every answer). The default request,
ApiVersions v3, is static and cheap for tansu, and the clients only count answer frames, so
the proxy, which decodes and trims every answer (about 70 µs of CPU each), is the most
expensive hop; `--request metadata` (one topic, authorized) costs tansu more than the proxy. Rounds alternate the order of the paths. Per run: answers per
second, and the CPU seconds the proxy's processes (the supervisor and its workers) used per
10,000 answers. The machine is shared: the load average before and after is recorded.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import selectors
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.latency import RESULTS, _cpu_pressure, _loadavg, environment
from bench.recording import measured_code, write_results
from bench.throughput import tree_cpu_seconds

TOPIC = "scaling"
PATHS = {"w1": "1", "w2": "2"}


def _request_bytes(kind: str) -> bytes:
    """One encoded request of `kind` (REQUESTS)."""
    from aclgate.protocol.codec import encode_request
    from aclgate.protocol.versions import request_class

    if kind in ("produce", "produce_v11"):
        from bench.latency import build_requests

        return build_requests(TOPIC)[kind]
    if kind == "apiversions":
        cls = request_class(18, 3)
        body = cls(client_software_name="scaling", client_software_version="1")
    else:
        cls = request_class(3, 4)
        mod = sys.modules[cls.__module__]
        topic = mod.MetadataRequestTopic(name=TOPIC)
        body = cls(topics=(topic,), allow_auto_topic_creation=False)
    return encode_request(1, body, "scaling")


#: what the clients may keep in flight: Metadata v4 for one topic (authorized, answer
#: rewritten), ApiVersions v3 (not authorized; the answer is narrowed by the proxy), or Produce
#: v9 / v11 of one 100-byte record (the hot path: peeked, authorized, answer walked)
REQUESTS = ("metadata", "apiversions", "produce", "produce_v11")


def start_replay_upstream(binary: Path, broker: str) -> tuple[subprocess.Popen, str]:
    """bench/loadgen's replaying broker stand-in in front of `broker`: the first request of
    each kind goes to the broker, identical ones are answered with its answer (a few µs)."""
    proc = subprocess.Popen(
        [str(binary), "-replay-listen", "127.0.0.1:0", "-replay-upstream", broker],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def client(
    address: tuple[str, int], connections: int, depth: int, seconds: float, kind: str, out
) -> None:
    """Keep `depth` requests in flight on each connection for `seconds`; put the answer
    count (after a one-second warm-up) on `out`."""
    request = _request_bytes(kind)
    selector = selectors.DefaultSelector()
    buffers: dict[socket.socket, bytearray] = {}
    for _ in range(connections):
        sock = socket.create_connection(address)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(request * depth)
        sock.setblocking(False)
        buffers[sock] = bytearray()
        selector.register(sock, selectors.EVENT_READ)
    warm_until = time.monotonic() + 1.0
    end = warm_until + seconds
    counted = 0
    while (now := time.monotonic()) < end:
        for key, _ in selector.select(0.1):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            data = sock.recv(1 << 20)
            if not data:
                raise ConnectionError("the proxy closed a connection")
            buf = buffers[sock]
            buf += data
            frames, pos = 0, 0
            while len(buf) - pos >= 4:
                size = int.from_bytes(buf[pos : pos + 4], "big")
                if len(buf) - pos < 4 + size:
                    break
                pos += 4 + size
                frames += 1
            del buf[:pos]
            if frames:
                sock.setblocking(True)
                sock.sendall(request * frames)
                sock.setblocking(False)
                if now >= warm_until:
                    counted += frames
    for sock in buffers:
        sock.close()
    out.put(counted)


def build_go_client(work: Path) -> Path:
    """bench/loadgen (Go, standard library only) built into `work`: a client that spends a
    few µs per answer, so the proxy is the hop that runs out of CPU on a small machine."""
    binary = work / "loadgen"
    source = Path(__file__).with_name("loadgen")
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}
    subprocess.run(["go", "build", "-o", str(binary), "."], check=True, cwd=source, env=env)
    return binary


def run_go_load(port: int, pid: int, args: argparse.Namespace) -> dict[str, float]:
    """The same load from one Go process (connections = --clients x --connections)."""
    request = args.work / f"{args.request}.bin"
    request.write_bytes(_request_bytes(args.request))
    command = [
        str(args.go_binary),
        *("-addr", f"127.0.0.1:{port}", "-request", str(request)),
        *("-connections", str(args.clients * args.connections), "-depth", str(args.depth)),
        *("-warmup", "1s", "-seconds", str(args.seconds)),
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)  # the client's warm-up second
    cpu0 = tree_cpu_seconds(pid)
    out, _ = proc.communicate(timeout=args.seconds + 60)
    cpu = tree_cpu_seconds(pid) - cpu0
    if proc.returncode != 0:
        raise SystemExit(f"loadgen failed (exit {proc.returncode})")
    result = json.loads(out)
    answers = int(result["answers"])
    return {
        "answers_per_s": round(answers / float(result["seconds"])),
        "proxy_cpu_s": round(cpu, 2),
        "proxy_cpu_s_per_10k": round(cpu / answers * 10_000, 4) if answers else 0.0,
    }


def run_load(port: int, pid: int, args: argparse.Namespace) -> dict[str, float]:
    if args.client == "go":
        return run_go_load(port, pid, args)
    queue: Any = multiprocessing.Queue()
    procs = [
        multiprocessing.Process(
            target=client,
            args=(
                ("127.0.0.1", port),
                args.connections,
                args.depth,
                args.seconds,
                args.request,
                queue,
            ),
        )
        for _ in range(args.clients)
    ]
    for p in procs:
        p.start()
    time.sleep(1.0)  # the clients' warm-up second
    cpu0 = tree_cpu_seconds(pid)
    counts = [queue.get(timeout=args.seconds + 60) for _ in procs]
    cpu = tree_cpu_seconds(pid) - cpu0
    for p in procs:
        p.join(10)
    answers = sum(counts)
    return {
        "answers_per_s": round(answers / args.seconds),
        "proxy_cpu_s": round(cpu, 2),
        "proxy_cpu_s_per_10k": round(cpu / answers * 10_000, 4) if answers else 0.0,
    }


def markdown(data: dict[str, Any]) -> str:
    s = data["summary"]
    lines = [
        "# `--workers 2` vs `--workers 1`, proxy-bound load",
        "",
        f"`{data['command']}`, {data['finished']}, {measured_code(data['environment'])}; "
        f"{data['environment']['cores']} cores; load average "
        f"{data['environment']['loadavg_before'][0]} before, "
        f"{data['environment']['loadavg_after'][0]} after.",
        "",
        (
            f"One Go client process (bench/loadgen) with "
            f"{data['config']['clients'] * data['config']['connections']} connections"
            if data["config"].get("client") == "go"
            else f"{data['config']['clients']} Python client processes x "
            f"{data['config']['connections']} connections"
        )
        + f" x {data['config']['depth']} {data['config']['request']} requests in flight, "
        f"{data['config']['seconds']} s per run, {data['config']['rounds']} rounds.",
        "",
        "| | answers/s (median) | proxy CPU s per 10k answers | runs |",
        "|---|---:|---:|---|",
    ]
    for path in PATHS:
        runs = ", ".join(str(r["results"][path]["answers_per_s"]) for r in data["rounds"])
        lines.append(
            f"| `--workers {PATHS[path]}` | {s[path]['answers_per_s']} | "
            f"{s[path]['proxy_cpu_s_per_10k']} | {runs} |"
        )
    lines += ["", f"Ratio w2/w1 (medians): **{s['ratio']}**", ""]
    lines += [f"- {note}" for note in data["notes"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from confluent_kafka.admin import AdminClient, NewTopic

    from aclgate.authz.aclfile import dump_acl_file
    from aclgate.authz.model import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourceType,
    )
    from aclgate.proxy.demo.embedded_broker import TansuBroker, free_port
    from bench.latency import Service

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--depth", type=int, default=32)
    parser.add_argument("--request", choices=REQUESTS, default="apiversions")
    parser.add_argument(
        "--upstream",
        choices=("replay", "tansu"),
        default="replay",
        help="replay: bench/loadgen's broker stand-in in front of tansu answers repeated "
        "requests with tansu's first answer (a few µs each); tansu: tansu itself (about 70 µs "
        "of CPU per ApiVersions, more under concurrency: the broker becomes the bottleneck)",
    )
    parser.add_argument(
        "--client",
        choices=("go", "python"),
        default="go",
        help="go: bench/loadgen built with `go build` (a few µs per answer); python: "
        "selector loops in --clients processes (costlier than the proxy's work per answer)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--stem", default="workers_scaling")
    args = parser.parse_args(argv)
    command = "python -m bench.workers_scaling " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    env = environment()
    env["loadavg_before"] = _loadavg()
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="aclgate-scaling-") as tmp:
        work = Path(tmp)
        args.work = work
        if args.client == "go" or args.upstream == "replay":
            args.go_binary = build_go_client(work)
        acl_file = work / "acls.json"
        acl_file.write_text(
            dump_acl_file(
                [
                    AclBinding(
                        ResourceType.TOPIC,
                        "*",
                        PatternType.LITERAL,
                        "User:ANONYMOUS",
                        "*",
                        AclOperation.ALL,
                        AclPermissionType.ALLOW,
                    )
                ]
            )
        )
        with TansuBroker(log_path=work / "tansu.log") as broker:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
                future.result(30)
            services = {}
            replay = None
            upstream = broker.bootstrap
            if args.upstream == "replay":
                replay, upstream = start_replay_upstream(args.go_binary, broker.bootstrap)
            try:
                for path, count in PATHS.items():
                    port, node = free_port(), free_port()
                    first = node - 111  # tansu's node id: FIRST + 111 is a free port
                    argv_ = [
                        sys.executable,
                        *("-m", "aclgate", "serve", "--upstream", upstream),
                        *("--listen", f"127.0.0.1:{port}"),
                        *("--broker-ports", f"{first}-{first + 999}"),
                        *("--acl-file", str(acl_file), "--log-level", "INFO"),
                        *("--workers", count),
                    ]
                    services[path] = Service(path, argv_, port, work)
                    services[path].launch()
                for service in services.values():
                    service.wait_ready()
                deadline = time.monotonic() + 60  # every worker of w2 listening, not just one
                while "2 workers serving" not in services["w2"].log_path.read_text():
                    assert time.monotonic() < deadline, "aclgate --workers 2 did not start"
                    time.sleep(0.1)
                for n in range(args.rounds):
                    order = list(PATHS) if n % 2 == 0 else list(reversed(PATHS))
                    results = {}
                    for path in order:
                        service = services[path]
                        assert service.process is not None
                        port = int(service.address.rsplit(":", 1)[1])
                        results[path] = run_load(port, service.process.pid, args)
                        print(f"round {n + 1} {path} {results[path]}", flush=True)
                    rounds.append(
                        {
                            "round": n + 1,
                            "order": order,
                            "results": results,
                            "loadavg": _loadavg(),
                            "cpu_pressure_avg10": _cpu_pressure(),
                        }
                    )
            finally:
                for service in services.values():
                    service.stop()
                if replay is not None:
                    replay.kill()
                    replay.wait()
    env["loadavg_after"] = _loadavg()
    summary: dict[str, Any] = {
        path: {
            key: statistics.median(r["results"][path][key] for r in rounds)
            for key in ("answers_per_s", "proxy_cpu_s_per_10k")
        }
        for path in PATHS
    }
    summary["ratio"] = round(summary["w2"]["answers_per_s"] / summary["w1"]["answers_per_s"], 2)
    notes = [
        "The clients and the upstream share the machine's cores with the proxy: on 2 cores, "
        "`--workers 2` competes with them for the second core, so the ratio is a floor of "
        "what 2 workers give on a host where the proxy has 2 cores to itself.",
    ]
    if args.upstream == "replay":
        notes.append(
            "Upstream: bench/loadgen's replaying stand-in in front of tansu. The first request "
            "of each kind (the frame past its correlation id) is asked of tansu; identical "
            "requests get tansu's answer with their correlation id patched in, a few µs each. "
            "tansu itself spends about 70 µs of CPU per ApiVersions, and more under "
            "concurrency, so in front of it the broker, not the proxy, is the bottleneck "
            "(`--upstream tansu`)."
        )
    if max(env["loadavg_before"][0], env["loadavg_after"][0]) > (env.get("cores") or 1):
        notes.append(
            "The machine was busier than its core count (other work was running): compare "
            "the two paths within this run only."
        )
    data = {
        "command": command,
        "finished": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "environment": env,
        "config": {
            k: getattr(args, k)
            for k in (
                "seconds",
                "rounds",
                "clients",
                "connections",
                "depth",
                "request",
                "client",
                "upstream",
            )
        },
        "rounds": rounds,
        "summary": summary,
        "notes": notes,
    }
    write_results(args.out, args.stem, data, markdown(data))
    print(markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
