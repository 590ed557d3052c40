"""A local Apache Kafka for people: start it, look at it, stop it.

    python -m tests.kafka.local up [--nodes 1|3] [--listeners PLAINTEXT,SASL_PLAINTEXT,SSL,SASL_SSL]
                                   [--authorizer] [--base-port 29092]
    python -m tests.kafka.local status
    python -m tests.kafka.local down

(`make kafka-up NODES=3` and `make kafka-down` wrap these.) The cluster is the same
`KafkaCluster` the tests use, started detached: it keeps running after this command exits.
Its state (pids, ports, users, CA file) and the node directories with their logs live in
.cache/kafka-local/ (gitignored); `down` stops the JVMs and deletes that directory.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from tests.kafka.cluster import (
    CLIENT_PROTOCOLS,
    KafkaCluster,
    KafkaStartError,
    api_versions_ok,
    kafka_version,
    metadata_brokers,
    rss_bytes,
)

STATE_DIR = Path(__file__).resolve().parents[2] / ".cache" / "kafka-local"


def _state_file(state_dir: Path) -> Path:
    return state_dir / "state.json"


def _load(state_dir: Path) -> KafkaCluster | None:
    try:
        state = json.loads(_state_file(state_dir).read_text())
    except (OSError, ValueError):
        return None
    return KafkaCluster.from_state(state)


def _describe(cluster: KafkaCluster) -> str:
    lines = [
        f"Apache Kafka {kafka_version()}: {cluster.node_count} node(s), ids {cluster.node_ids}"
        + (", StandardAuthorizer" if cluster.authorizer else "")
    ]
    for name, lst in cluster.listeners.items():
        note = ""
        if name == "INTERNAL":
            note = "  (inter-broker; ANONYMOUS" + (
                " is a super user)" if cluster.authorizer else ")"
            )
        lines.append(f"  {name:15s} {lst.bootstrap}{note}")
    sasl = next((lst for lst in cluster.listeners.values() if lst.sasl), None)
    if sasl:
        users = ", ".join(f"{u}/{p}" for u, p in sasl.users.items())
        lines.append(f"  SASL mechanisms {', '.join(sasl.mechanisms)}; users {users}")
    if cluster.ca_file:
        lines.append(f"  TLS CA          {cluster.ca_file}")
    for node_id, path in cluster.log_paths.items():
        lines.append(f"  node {node_id} log      {path}")
    first = cluster.client_listener
    lines.append("Put aclgate in front of it:")
    lines.append(
        f"  aclgate serve --upstream {first.address(cluster.node_ids[0])} "
        "--listen 127.0.0.1:9092 --broker-ports 19092-19099"
    )
    return "\n".join(lines)


def cmd_up(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir
    running = _load(state_dir)
    if running is not None and any(n.alive() for n in running.nodes):
        print(f"already running (stop it with `down`):\n{_describe(running)}")
        return 0
    if state_dir.exists():
        shutil.rmtree(state_dir)
    listeners = [p.strip().upper() for p in args.listeners.split(",") if p.strip()]
    cluster = KafkaCluster(
        nodes=args.nodes,
        listeners=listeners,
        authorizer=args.authorizer,
        workdir=state_dir / "cluster",
        base_port=args.base_port,
        detach=True,
        start_timeout=args.timeout,
    )
    print(f"starting Apache Kafka {kafka_version()} ({args.nodes} node(s)) ...", flush=True)
    try:
        cluster.start()
    except KafkaStartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    _state_file(state_dir).write_text(json.dumps(cluster.to_state(), indent=2))
    print(f"up in {cluster.start_seconds:.1f}s")
    print(_describe(cluster))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    cluster = _load(args.state_dir)
    if cluster is None:
        print(f"not running (no state in {args.state_dir})")
        return 1
    print(_describe(cluster))
    up = 0
    for n in cluster.nodes:
        alive = n.alive()
        port = cluster.internal.port(n.node_id)
        answers = alive and api_versions_ok(cluster.host, port)
        brokers = sorted(metadata_brokers(cluster.host, port)) if answers else []
        rss = rss_bytes(n.pid) / 2**20 if alive and n.pid else 0
        state = "up" if answers else ("starting/stuck" if alive else "down")
        print(f"  node {n.node_id}: pid {n.pid} {state}, RSS {rss:.0f} MiB, sees brokers {brokers}")
        up += bool(answers)
    return 0 if up == len(cluster.nodes) else (3 if up else 1)


def cmd_down(args: argparse.Namespace) -> int:
    cluster = _load(args.state_dir)
    if cluster is None:
        print("not running")
        return 0
    cluster.stop()
    shutil.rmtree(args.state_dir, ignore_errors=True)
    print(f"stopped node(s) {cluster.node_ids}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.kafka.local", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--state-dir", type=Path, default=STATE_DIR, help="default: %(default)s")
    sub = ap.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a detached local cluster")
    up.add_argument("--nodes", type=int, choices=(1, 3), default=1)
    up.add_argument(
        "--listeners",
        default="PLAINTEXT",
        help=f"comma-separated, from {','.join(CLIENT_PROTOCOLS)} (default: %(default)s)",
    )
    up.add_argument(
        "--authorizer", action="store_true", help="StandardAuthorizer, super user admin"
    )
    up.add_argument("--base-port", type=int, help="fixed ports from here (default: free ports)")
    up.add_argument("--timeout", type=float, default=120.0, help="start-up timeout in seconds")
    up.set_defaults(func=cmd_up)
    sub.add_parser("status", help="show listeners and node health").set_defaults(func=cmd_status)
    sub.add_parser("down", help="stop the cluster and delete its data").set_defaults(func=cmd_down)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
