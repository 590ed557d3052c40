"""Throughput harness: Kafka's own perf tools, direct to Apache Kafka vs through aclgate.

    python -m bench.throughput                   # or: make bench-throughput (3 rounds)
    python -m bench.throughput --quick           # smoke run, writes to a temporary directory
    python -m bench.throughput --records 300000 --rounds 3

Method: a 1-node Apache Kafka 4.x (tests/kafka/cluster.py, the jars in tests/kafka/lib) on
loopback; aclgate (`python -m aclgate serve`) in its own process in front of it, enforcing ALL
for User:ANONYMOUS plus --unrelated-acls prefixed ACLs for other principals (so the decision
cache holds a realistic index); and, when this checkout's `aclgate serve --help` has
`--workers`, a second aclgate with `--workers 2`; when it has `--splice-min-bytes`, a third
with the zero-copy relay of answers off (`--splice-min-bytes 0`), so its gain shows in the same
run. Each round runs every path in a rotating
order (A B C, B C A, ...): Kafka's `ProducerPerformance` writes --records records of
--record-size bytes (acks=1, no throttle) to a fresh topic, then `ConsumerPerformance` reads
them back. Per run: MB/s and records/s as the tools report them (MB = 2^20 bytes), the ratio
to direct in the same round, and aclgate's CPU per MB moved: user + system CPU time of the
proxy's processes (/proc/<pid>/stat, workers included) over the run, divided by the MB the
tool moved. The consumer's figure is the tool's fetch rate (`fetch.MB.sec`: from the first
record, so the group join is left out); the whole-run rate is kept in the JSON too.

Writes throughput.json (every run and the environment), throughput.md (the table) and
throughput.png (needs matplotlib) to bench/results/ or --out.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aclgate.proxy.demo.embedded_broker import free_port
from bench.latency import (
    RESULTS,
    Service,
    _cpu_pressure,
    _loadavg,
    aclgate_serve_help,
    environment,
)
from bench.recording import measured_code, write_results

LABELS = {
    "direct": "Direct to Kafka",
    "aclgate": "aclgate",
    "aclgate-w2": "aclgate --workers 2",
    "aclgate-nosplice": "aclgate --splice-min-bytes 0",
    "relay": "Bare relay (bench/relay.py, the floor)",
}
TOOLS = ("producer", "consumer", "rdkafka")
#: how each tool is named in the table and the plot
TOOL_NAMES = {
    "producer": "Producer",
    "consumer": "Consumer",
    "rdkafka": "librdkafka consumer",
}
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PRODUCER_LINE = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)")


# --------------------------------------------------------------------------------------------
# CPU of a process tree


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system CPU seconds) of one process, from /proc/<pid>/stat."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _CLK_TCK


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds used so far by `root` and every live descendant (aclgate's workers)."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            got = _stat(int(entry))
            if got is not None:
                parents[int(entry)], cpu[int(entry)] = got
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo += [child for child, parent in parents.items() if parent == pid]
    return total


# --------------------------------------------------------------------------------------------
# The tools


def run_producer(
    bootstrap: str, topic: str, records: int, size: int, client: Client | None = None
) -> dict[str, float]:
    client = client or PLAIN
    from tests.kafka.tools import producer_perf_test

    result = producer_perf_test(
        bootstrap,
        topic,
        num_records=records,
        record_size=size,
        properties={"acks": "1"},
        # a file, not --command-property: a JAAS value holds '=' the tool would split on
        config=client.java or None,
        timeout=600,
    ).check()
    matches = _PRODUCER_LINE.findall(result.stdout)
    if not matches:
        raise RuntimeError(f"no ProducerPerformance summary in:\n{result.stdout[-2000:]}")
    sent, per_s, mb_s = matches[-1]
    return {"records": int(sent), "records_per_s": float(per_s), "mb_per_s": float(mb_s)}


def run_consumer(
    bootstrap: str, topic: str, records: int, client: Client | None = None
) -> dict[str, float]:
    client = client or PLAIN
    from tests.kafka.tools import run_tool

    result = run_tool(
        "kafka-consumer-perf-test",
        *("--bootstrap-server", bootstrap, "--topic", topic),
        *("--num-records", str(records), "--hide-header", "--timeout", "120000"),
        config=client.java or None,
        timeout=600,
    ).check()
    line = [x for x in result.stdout.splitlines() if x.count(",") >= 9][-1]
    cells = [c.strip() for c in line.split(",")]
    # start, end, MB, MB/s, records, records/s, rebalance ms, fetch ms, fetch MB/s, fetch rec/s
    return {
        "records": int(float(cells[4])),
        "mb": float(cells[2]),
        "mb_per_s": float(cells[8]),
        "records_per_s": float(cells[9]),
        "whole_run_mb_per_s": float(cells[3]),
        "rebalance_ms": float(cells[6]),
    }


def run_rdkafka_consumer(
    bootstrap: str, topic: str, records: int, client: Client | None = None
) -> dict[str, float]:
    """librdkafka (confluent-kafka) reading the topic from the start: MB/s and records/s from
    the first record to the last, as ConsumerPerformance's fetch rate (the group join left
    out). The values are only counted, so the client's Python loop costs little per MB."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"rdkafka-perf-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **(client or PLAIN).rdkafka,
        }
    )
    consumer.subscribe([topic])
    got = size = 0
    first = last = 0.0
    deadline = time.monotonic() + 300
    try:
        while got < records and time.monotonic() < deadline:
            # short polls: the clock starts when the call that returns the first records
            # began, so the group join is left out (up to one poll's 50 ms of it counted)
            began = time.monotonic()
            for msg in consumer.consume(10_000, 0.05):
                if msg.error() is not None:
                    continue
                if not got:
                    first = began
                got += 1
                size += len(msg.value() or b"")
            last = time.monotonic()
    finally:
        consumer.close()
    if got < records:
        raise RuntimeError(f"librdkafka consumer read {got} of {records} records")
    seconds = max(last - first, 1e-6)
    mb = size / 2**20
    return {
        "records": got,
        "mb": round(mb, 2),
        "mb_per_s": round(mb / seconds, 2),
        "records_per_s": round(got / seconds, 1),
    }


# --------------------------------------------------------------------------------------------
# Setup


@dataclass(frozen=True)
class Client:
    """How the tools connect on one side: Java client properties and librdkafka settings
    (nothing for PLAINTEXT)."""

    java: dict[str, str] = field(default_factory=dict)
    rdkafka: dict[str, Any] = field(default_factory=dict)


#: PLAINTEXT: no client settings
PLAIN = Client()

#: the client principal of --tls (a SCRAM user of both aclgate's users file and Kafka's)
TLS_USER, TLS_PASSWORD = "alice", "alice-secret"


def tls_setup(cluster: Any, work: Path) -> tuple[dict[str, Client], list[str]]:
    """--tls: the clients talk SASL_SSL (SCRAM-SHA-512) to Kafka's SASL_SSL listener directly,
    or to aclgate's SASL_SSL listener (a dev-PKI certificate, a users file), and aclgate talks
    SASL_SSL to the same Kafka listener as `admin`. Returns the clients and aclgate's flags."""
    from aclgate.certs import pki
    from aclgate.proxy.security.usersfile import add_user

    kafka = cluster.listener("SASL_SSL")
    ca_dir = work / "aclgate-pki"
    pki.create_ca(ca_dir)
    pki.issue_server(ca_dir, dns=["localhost"], ips=["127.0.0.1"])
    users = work / "users.json"
    add_user(users, TLS_USER, TLS_PASSWORD, ("SCRAM-SHA-512",))
    password_file = work / "upstream-password"
    password_file.write_text(kafka.users["admin"])
    mechanism = "SCRAM-SHA-512"
    direct = Client(
        java=kafka.java_properties(user=TLS_USER, mechanism=mechanism),
        rdkafka={
            k: v
            for k, v in kafka.confluent_config(user=TLS_USER, mechanism=mechanism).items()
            if k != "bootstrap.servers"
        },
    )
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{TLS_USER}" password="{TLS_PASSWORD}";'
    )
    proxied = Client(
        java={
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism,
            "sasl.jaas.config": jaas,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(ca_dir / "ca.crt"),
        },
        rdkafka={
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism,
            "sasl.username": TLS_USER,
            "sasl.password": TLS_PASSWORD,
            "ssl.ca.location": str(ca_dir / "ca.crt"),
        },
    )
    flags = [
        *("--listener-security-protocol", "SASL_SSL", "--sasl-mechanisms", mechanism),
        *("--users-file", str(users)),
        *(
            "--ssl-certfile",
            str(ca_dir / "server.crt"),
            "--ssl-keyfile",
            str(ca_dir / "server.key"),
        ),
        *("--upstream-security-protocol", "SASL_SSL", "--upstream-ssl-cafile", str(kafka.ca_file)),
        *("--upstream-sasl-mechanism", mechanism, "--upstream-sasl-username", "admin"),
        *("--upstream-sasl-password-file", str(password_file)),
    ]
    return {"direct": direct, "aclgate": proxied}, flags


def write_acls(path: Path, unrelated: int, principal: str = "User:ANONYMOUS") -> None:
    """ALL for `principal` on every topic, group and the cluster, plus `unrelated`
    prefixed ACLs of other principals."""
    from aclgate.authz.aclfile import dump_acl_file
    from aclgate.authz.model import AclBinding

    def acl(principal: str, rtype: str, name: str, pattern: str = "LITERAL") -> AclBinding:
        return AclBinding.from_dict(
            {
                "resource_type": rtype,
                "resource_name": name,
                "pattern_type": pattern,
                "principal": principal,
                "host": "*",
                "operation": "ALL",
                "permission_type": "ALLOW",
            }
        )

    acls = [
        acl(principal, "TOPIC", "*"),
        acl(principal, "GROUP", "*"),
        acl(principal, "CLUSTER", "kafka-cluster"),
    ]
    acls += [
        acl(f"User:app-{i % 50}", "TOPIC", f"unrelated-{i}-", "PREFIXED") for i in range(unrelated)
    ]
    path.write_text(dump_acl_file(acls))


def free_base_port() -> int:
    """A port p with p..p+9 free (the cluster's fixed ports: PLAINTEXT p, INTERNAL p+1,
    CONTROLLER p+9)."""
    import socket

    for _ in range(50):
        base = free_port()
        try:
            for port in range(base, base + 10):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no 10 consecutive free ports")


def start_relay(upstream: str, work: Path, port: int | None = None) -> Any:
    """The bare relay (bench/relay.py, the floor of any Python hop) in front of `upstream`."""
    port = port or free_port()
    argv = [sys.executable, "-m", "bench.relay", "--listen", f"127.0.0.1:{port}"]
    service = Service("relay", [*argv, "--upstream", upstream], port, work)
    service.launch()
    service.wait_ready()
    return service


def start_aclgate(
    name: str, upstream: str, acl_file: Path, work: Path, extra: list[str], code: Path | None = None
) -> Any:
    """`aclgate serve` in front of `upstream`, from this checkout or from `code` (a worktree
    of another commit: bench.fetch_timing's --before)."""
    port, node1 = free_port(), free_port()
    first = node1 - 1  # port_for_node: FIRST + node id, and the 1-node cluster's id is 1
    argv = [
        sys.executable,
        *("-m", "aclgate", "serve", "--upstream", upstream),
        *("--listen", f"127.0.0.1:{port}", "--broker-ports", f"{first}-{first + 9}"),
        *("--acl-file", str(acl_file), "--log-level", "WARNING", *extra),
    ]
    tls = "SASL_SSL" in extra
    metrics = free_port()
    argv += ["--metrics-listen", f"127.0.0.1:{metrics}"]
    service = (
        Service(name, argv, port, work)
        if code is None
        else Service(name, argv, port, work, code=code)
    )
    service.metrics_port = metrics
    service.launch()
    if tls:
        _wait_readyz(service, metrics)
    else:
        service.wait_ready()
    return service


def spliced_mb(service: Any) -> float:
    """MB aclgate relayed with splice(2) so far (`aclgate_spliced_bytes_total`; every
    worker's, merged, with --workers)."""
    import urllib.request

    url = f"http://127.0.0.1:{service.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    for line in text.splitlines():
        if line.startswith("aclgate_spliced_bytes_total "):
            return float(line.split()[1]) / 2**20
    return 0.0


def _wait_readyz(service: Any, port: int, timeout: float = 60.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service.process is None or service.process.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    service.stop()
    raise RuntimeError(f"{service.name} not ready: {service.log_path.read_text()[-2000:]}")


# --------------------------------------------------------------------------------------------
# Report


def aggregate(rounds: list[dict[str, Any]], paths: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in paths:
        out[path] = {}
        for tool in TOOLS:
            runs = [r["results"][path][tool] for r in rounds]
            cell: dict[str, Any] = {
                key: round(statistics.median(run[key] for run in runs), 2)
                for key in ("mb_per_s", "records_per_s")
            }
            cell["mb_per_s_range"] = [
                min(r["mb_per_s"] for r in runs),
                max(r["mb_per_s"] for r in runs),
            ]
            if path != "direct":
                ratios = [
                    r["results"][path][tool]["mb_per_s"] / r["results"]["direct"][tool]["mb_per_s"]
                    for r in rounds
                ]
                cell["ratio_to_direct"] = round(statistics.median(ratios), 3)
                cell["ratio_range"] = [round(min(ratios), 3), round(max(ratios), 3)]
                if "relay" in paths and path != "relay":
                    floor = [
                        r["results"][path][tool]["mb_per_s"]
                        / r["results"]["relay"][tool]["mb_per_s"]
                        for r in rounds
                    ]
                    cell["ratio_to_relay"] = round(statistics.median(floor), 3)
                    cell["ratio_to_relay_range"] = [round(min(floor), 3), round(max(floor), 3)]
                cpu = [run["cpu_ms_per_mb"] for run in runs]
                cell["cpu_ms_per_mb"] = round(statistics.median(cpu), 2)
                cell["cpu_ms_per_mb_range"] = [round(min(cpu), 2), round(max(cpu), 2)]
            out[path][tool] = cell
    return out


def markdown(data: dict[str, Any]) -> str:
    cfg, summary, env = data["config"], data["summary"], data["environment"]
    lines = [
        "# Throughput: Kafka's perf tools, direct vs through aclgate",
        "",
        f"Recorded {data['finished']} with `{data['command']}`, {measured_code(env)}; Apache "
        f"Kafka {data['kafka_version']} (1 node) on loopback, {env.get('cores')} vCPUs "
        f"({env.get('cpu_model')}) shared by the tools, the broker and the proxy.",
        "",
        f"{cfg['rounds']} interleaved rounds of {cfg['records']:,} records of "
        f"{cfg['record_size']} bytes (acks=1) to a topic of {cfg.get('partitions', 1)} "
        "partition(s), read back by ConsumerPerformance and by a librdkafka consumer"
        + (", all over SASL_SSL" if cfg.get("tls") else "")
        + "; aclgate enforcing ALL for "
        f"{'User:' + TLS_USER if cfg.get('tls') else 'User:ANONYMOUS'} plus "
        f"{cfg['unrelated_acls']:,} unrelated prefixed ACLs. Cells: median across rounds "
        "(min-max of MB/s in parentheses); MB = 2^20 bytes; the consumer's rate is "
        "`fetch.MB.sec` (from the first record). Ratio: this path's MB/s over direct's in the "
        "same round, median (range). CPU: user + system time of the proxy's processes per MB "
        "moved.",
        "",
        "| Path | "
        + " | ".join(
            f"{TOOL_NAMES[t]} MB/s | {TOOL_NAMES[t]} records/s | {TOOL_NAMES[t]} ratio"
            for t in TOOLS
        )
        + " | aclgate CPU ms/MB ("
        + "; ".join(TOOL_NAMES[t].lower() for t in TOOLS)
        + ") |",
        "|---|" + "---|---|---|" * len(TOOLS) + "---|",
    ]
    for path in cfg["paths"]:
        row = [LABELS.get(path, path)]
        for tool in TOOLS:
            c = summary[path][tool]
            lo, hi = c["mb_per_s_range"]
            row.append(f"{c['mb_per_s']:.1f} ({lo:.1f}-{hi:.1f})")
            row.append(f"{c['records_per_s']:,.0f}")
            row.append(
                "baseline"
                if path == "direct"
                else f"{c['ratio_to_direct']:.2f} ({c['ratio_range'][0]:.2f}-{c['ratio_range'][1]:.2f})"
            )
        row.append(
            "-"
            if path == "direct"
            else "; ".join(f"{summary[path][t]['cpu_ms_per_mb']:.2f}" for t in TOOLS)
        )
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    if "relay" in cfg["paths"]:
        for path in cfg["paths"]:
            if path in ("direct", "relay"):
                continue
            ratios = "; ".join(
                f"{TOOL_NAMES[t]} {summary[path][t]['ratio_to_relay']:.2f} "
                f"({summary[path][t]['ratio_to_relay_range'][0]:.2f}-"
                f"{summary[path][t]['ratio_to_relay_range'][1]:.2f})"
                for t in TOOLS
            )
            lines.append(f"* {LABELS.get(path, path)} over the bare relay, same rounds: {ratios}.")
    for note in data["notes"]:
        lines.append(f"* {note}")
    lines.append("")
    return "\n".join(lines)


def plot(data: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    paths = data["config"]["paths"]
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(paths)
    for i, p in enumerate(paths):
        values = [data["summary"][p][t]["mb_per_s"] for t in TOOLS]
        ax.bar([x + i * width for x in range(len(TOOLS))], values, width, label=LABELS.get(p, p))
    ax.set_xticks([x + width * (len(paths) - 1) / 2 for x in range(len(TOOLS))])
    ax.set_xticklabels([TOOL_NAMES[t] for t in TOOLS])
    ax.set_ylabel("MB/s (median of rounds)")
    ax.set_title(f"{data['config']['records']:,} records of {data['config']['record_size']} B")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# --------------------------------------------------------------------------------------------
# Main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=1, help="of each topic (1)")
    parser.add_argument("--unrelated-acls", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--stem", default="throughput")
    parser.add_argument(
        "--quick", action="store_true", help="1 round of 20,000 records, to a temporary directory"
    )
    parser.add_argument("--no-workers", action="store_true", help="leave out --workers 2")
    parser.add_argument(
        "--tls",
        action="store_true",
        help="SASL_SSL (SCRAM-SHA-512) between the clients and Kafka or aclgate, and from "
        "aclgate to Kafka (default: PLAINTEXT everywhere)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.rounds = 20_000, 1
        args.out = Path(tempfile.mkdtemp(prefix="aclgate-throughput-"))
    command = "python -m bench.throughput " + shlex.join(argv if argv is not None else sys.argv[1:])
    env = environment()
    env["loadavg_before"] = _loadavg()
    notes: list[str] = []
    paths = ["direct", "aclgate"]
    serve_help = aclgate_serve_help()
    if not args.tls:  # the floor of any Python hop, in the same rounds
        paths.insert(1, "relay")
        notes.append(
            "The bare relay (bench/relay.py: uvloop Protocols copying bytes both ways, nothing "
            "parsed) is the floor of any Python hop: Kafka advertises it on its PLAINTEXT "
            "listener, and direct and aclgate use the INTERNAL listener (PLAINTEXT too)."
        )
    if args.tls:
        notes.append(
            "SASL_SSL (SCRAM-SHA-512) from the clients to Kafka's or aclgate's listener, and "
            "from aclgate to Kafka (`--tls`); no zero-copy path: TLS is never spliced."
        )
    elif "--splice-min-bytes" in serve_help:  # the zero-copy relay's gain, in the same run
        paths.append("aclgate-nosplice")
    if args.no_workers:
        notes.append("`--workers 2` left out (--no-workers).")
    elif "--workers" in serve_help:
        paths.append("aclgate-w2")
    else:
        notes.append(
            "No `--workers 2` column: this checkout's `aclgate serve --help` has no --workers."
        )

    from tests.kafka.cluster import KafkaCluster, kafka_version

    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="aclgate-throughput-") as tmp:
        work = Path(tmp)
        acl_file = work / "acls.json"
        write_acls(
            acl_file, args.unrelated_acls, f"User:{TLS_USER}" if args.tls else "User:ANONYMOUS"
        )
        print("starting Apache Kafka ...", flush=True)
        listeners = ("PLAINTEXT", "SASL_SSL") if args.tls else ("PLAINTEXT",)
        base, relay_port = free_base_port(), free_port()
        # the relay needs Kafka to advertise it on the PLAINTEXT listener (so every connection
        # of a tool goes through it); direct and aclgate then use INTERNAL, which advertises
        # itself (bench/profile_proxy.py does the same)
        advertised = {} if args.tls else {
            "advertised.listeners": f"INTERNAL://127.0.0.1:{base + 1},"
            f"PLAINTEXT://127.0.0.1:{relay_port}"
        }  # fmt: skip
        cluster = KafkaCluster(
            nodes=1,
            listeners=listeners,
            workdir=work / "kafka",
            base_port=base,
            broker_config=advertised,
        ).start()
        services: dict[str, Any] = {}
        clients: dict[str, Client] = {"direct": Client(), "aclgate": Client()}
        upstream, security = cluster.internal.bootstrap, []
        if "relay" in paths:
            services["relay"] = start_relay(f"127.0.0.1:{base}", work, relay_port)
        if args.tls:
            clients, security = tls_setup(cluster, work)
            upstream = cluster.listener("SASL_SSL").bootstrap
        try:
            services["aclgate"] = start_aclgate("aclgate", upstream, acl_file, work, security)
            if "aclgate-nosplice" in paths:
                services["aclgate-nosplice"] = start_aclgate(
                    "aclgate-nosplice",
                    upstream,
                    acl_file,
                    work,
                    ["--splice-min-bytes", "0", *security],
                )
            if "aclgate-w2" in paths:
                services["aclgate-w2"] = start_aclgate(
                    "aclgate-w2", upstream, acl_file, work, ["--workers", "2", *security]
                )
            bootstrap = {"direct": upstream}
            bootstrap.update({name: s.address for name, s in services.items()})
            for n in range(args.rounds):
                order = paths[n % len(paths) :] + paths[: n % len(paths)]
                results: dict[str, Any] = {}
                for path in order:
                    topic = f"tp-{n}-{path}"
                    cluster.create_topic(topic, partitions=args.partitions)
                    results[path] = {}
                    pid = services[path].process.pid if path in services else None
                    for tool in TOOLS:
                        cpu0, t0 = (tree_cpu_seconds(pid) if pid else 0.0), time.monotonic()
                        gate = path.startswith("aclgate")
                        spliced0 = spliced_mb(services[path]) if gate else 0.0
                        client = clients["direct" if path == "direct" else "aclgate"]
                        if tool == "producer":
                            got = run_producer(
                                bootstrap[path], topic, args.records, args.record_size, client
                            )
                        elif tool == "consumer":
                            got = run_consumer(bootstrap[path], topic, args.records, client)
                        else:
                            got = run_rdkafka_consumer(bootstrap[path], topic, args.records, client)
                        got["wall_s"] = round(time.monotonic() - t0, 2)
                        mb = got["records"] * args.record_size / 2**20
                        if pid:
                            cpu = tree_cpu_seconds(pid) - cpu0
                            got["proxy_cpu_s"] = round(cpu, 3)
                            got["cpu_ms_per_mb"] = round(cpu * 1000 / mb, 3) if mb else None
                            if gate:
                                got["spliced_mb"] = round(spliced_mb(services[path]) - spliced0, 1)
                        results[path][tool] = got
                        print(f"round {n + 1} {path:10} {tool:8} {got}", flush=True)
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
            cluster.stop()
    env["loadavg_after"] = _loadavg()
    if max(env["loadavg_before"][0], env["loadavg_after"][0]) > (env.get("cores") or 1):
        notes.append(
            f"The machine was busier than its core count (load {env['loadavg_before'][0]:.1f} "
            f"before, {env['loadavg_after'][0]:.1f} after): compare paths within this run only."
        )
    notes.append(
        "aclgate's CPU per MB includes its share of the tools' metadata and group requests; "
        "the producer and consumer each ran alone, so the figure is the proxy's cost per MB "
        "for that direction."
    )
    data = {
        "command": command,
        "finished": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "kafka_version": kafka_version(),
        "environment": env,
        "config": {
            "records": args.records,
            "record_size": args.record_size,
            "rounds": args.rounds,
            "unrelated_acls": args.unrelated_acls,
            "paths": paths,
            "partitions": args.partitions,
            "tls": args.tls,
        },
        "rounds": rounds,
        "summary": aggregate(rounds, paths),
        "notes": notes,
    }
    write_results(args.out, args.stem, data, markdown(data))
    plotted = plot(data, args.out / f"{args.stem}.png")
    print(markdown(data))
    print(f"wrote {args.out}/{args.stem}.json, .md" + (", .png" if plotted else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
