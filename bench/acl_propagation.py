"""The `kafka` ACL store's two figures (issue 11): how fast a change reaches the rest of the fleet,
and how long a new instance takes to replay a big policy.

    python -m bench.acl_propagation                         # 3-node Apache Kafka of its own
    python -m bench.acl_propagation --changes 500 --replay-acls 100000 --out /tmp/x
    python -m bench.acl_propagation --bootstrap HOST:PORT   # an existing (PLAINTEXT) cluster

Propagation: two `aclgate serve` processes, A and B, on one ACL topic (--acl-store kafka,
everyone allowed where no ACL applies). For each change, a DENY DESCRIBE for User:ANONYMOUS on
a topic of its own is created through A with confluent-kafka's AdminClient (CreateAcls answered:
committed to the topic and in force on A); from that moment a client of B asks B for the
topic's metadata over and over until B answers TOPIC_AUTHORIZATION_FAILED. The figure is the
time from A's answer to B's first denial, so it includes one Metadata round trip through B
(also reported: the same probe's round trip when nothing changes).

Replay: 500,000 distinct ACLs written to a fresh ACL topic (one record each, as the store
writes them), then a new store instance (proxy/aclstore/kafka/store.py, in this process) is started
and timed from start() to ready: topic check, reading the whole topic, decoding every record,
loading the authorizer.

Writes acl_propagation.json and acl_propagation.md to bench/results/ or --out.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.recording import measured_code, write_results

RESULTS = Path(__file__).resolve().parent / "results"


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _stats_ms(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {
        "n": len(ms),
        "p50_ms": round(_quantile(ms, 0.50), 1),
        "p90_ms": round(_quantile(ms, 0.90), 1),
        "p99_ms": round(_quantile(ms, 0.99), 1),
        "max_ms": round(max(ms), 1),
        "mean_ms": round(statistics.fmean(ms), 1),
    }


# ----------------------------------------------------------------------------- propagation


def propagation(bootstrap: str, changes: int, workdir: Path) -> dict[str, Any]:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    from tests.fixtures.proxyprocess import ProxyProcess
    from tests.fixtures.wait import wait_until

    topic = f"__aclgate_bench_{uuid.uuid4().hex[:8]}"
    args = [
        *("--upstream", bootstrap, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"),
        *("--acl-store", "kafka", "--acl-topic", topic, "--allow-everyone-if-no-acl-found"),
    ]
    a = ProxyProcess(args, workdir / "aclgate-a.log")
    b = ProxyProcess(args, workdir / "aclgate-b.log")
    try:
        for proc in (a, b):
            wait_until(lambda p=proc: p.readyz()[0] == 200, timeout=60, what="ACL topic replayed")
        writer = AdminClient({"bootstrap.servers": a.bootstrap})
        prober = AdminClient({"bootstrap.servers": b.bootstrap})
        run = uuid.uuid4().hex[:6]

        def denied(name: str) -> bool:
            t = prober.list_topics(topic=name, timeout=10).topics[name]
            return t.error is not None and t.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

        probe_rtt = []
        for i in range(50):  # the probe alone: one Metadata round trip through B
            t0 = time.perf_counter()
            assert not denied(f"bench-{run}-idle-{i}")
            probe_rtt.append(time.perf_counter() - t0)
        acked, seen, probes = [], [], []
        for i in range(changes):
            name = f"bench-{run}-{i}"
            binding = AclBinding(
                ResourceType.TOPIC,
                name,
                ResourcePatternType.LITERAL,
                "User:ANONYMOUS",
                "*",
                AclOperation.DESCRIBE,
                AclPermissionType.DENY,
            )
            t0 = time.perf_counter()
            writer.create_acls([binding])[binding].result(30)
            t1 = time.perf_counter()
            n = 1
            while not denied(name):
                n += 1
                if time.perf_counter() - t1 > 30:
                    raise AssertionError(f"change {i} not enforced by B within 30 s")
            seen.append(time.perf_counter() - t1)
            acked.append(t1 - t0)
            probes.append(n)
        status_a, status_b = a.readyz()[1]["acl_store"], b.readyz()[1]["acl_store"]
    finally:
        a.stop()
        b.stop()
    return {
        "changes": changes,
        "ack_to_enforced_on_b": _stats_ms(seen),
        "create_acls_round_trip_on_a": _stats_ms(acked),
        "probe_round_trip_idle": _stats_ms(probe_rtt),
        "probes_per_change_mean": round(statistics.fmean(probes), 2),
        "same_fingerprint_at_end": status_a["fingerprint"] == status_b["fingerprint"],
        "applied_offset_at_end": [status_a["applied_offset"], status_b["applied_offset"]],
    }


# ----------------------------------------------------------------------------- replay


def _fill(bootstrap: str, topic: str, count: int) -> float:
    """`count` distinct ACL records in `topic` (created as the store creates it); seconds."""
    from confluent_kafka import Producer

    from aclgate.authz.aclrecords import encode_change
    from aclgate.authz.model import AclBinding
    from aclgate.proxy.aclstore.kafka.store import KafkaStoreSettings, ensure_topic

    ensure_topic(KafkaStoreSettings(bootstrap, topic))
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    ops, perms = ("READ", "WRITE", "DESCRIBE", "CREATE"), ("ALLOW", "ALLOW", "ALLOW", "DENY")
    t0 = time.perf_counter()
    for i in range(count):
        b = AclBinding.from_dict(
            {
                "resource_type": "TOPIC" if i % 5 else "GROUP",
                "resource_name": f"app-{i // 4}",
                "pattern_type": "PREFIXED" if i % 7 == 0 else "LITERAL",
                "principal": f"User:svc-{i % 2000}",
                "host": "*",
                "operation": ops[i % 4],
                "permission_type": perms[(i // 4) % 4],
            }
        )
        _, records = encode_change([(uuid.uuid4(), b)], [])
        key, value, headers = records[0]
        while True:
            try:
                producer.produce(topic, key=key, value=value, headers=headers, partition=0)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0, "not every ACL record was delivered"
    return time.perf_counter() - t0


def replay(bootstrap: str, count: int) -> dict[str, Any]:
    import resource

    from aclgate.authz.authorizer import Authorizer
    from aclgate.authz.model import ResourceType
    from aclgate.proxy.aclstore.kafka.store import KafkaAclBackend, KafkaStoreSettings

    topic = f"__aclgate_bench_replay_{uuid.uuid4().hex[:8]}"
    fill_s = _fill(bootstrap, topic, count)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    async def start() -> tuple[float, int, str]:
        authorizer = Authorizer(prebuild_by_resource_type=(ResourceType.TOPIC,))
        backend = KafkaAclBackend(KafkaStoreSettings(bootstrap, topic), authorizer)
        t0, c0 = time.perf_counter(), time.process_time()
        await backend.start()
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        try:
            while not backend.status().fingerprint:  # computed just after ready
                await asyncio.sleep(0.05)
            status = backend.status()
            assert status.loaded and status.error is None
            return seconds, cpu, authorizer.acl_count(), status.fingerprint
        finally:
            await backend.stop()

    from aclgate.proxy.process.gctune import tune_gc

    tune_gc()  # as `aclgate serve` does before it loads its policy
    load_before = os.getloadavg()[0]
    seconds, cpu, loaded, fingerprint = asyncio.run(start())
    assert loaded == count, f"replayed {loaded} ACLs, wrote {count}"
    return {
        "acls": count,
        "fill_seconds": round(fill_s, 2),
        "start_to_ready_seconds": round(seconds, 2),
        "start_to_ready_cpu_seconds": round(cpu, 2),
        "load_average_before": round(load_before, 2),
        "acls_in_force": loaded,
        "fingerprint": fingerprint,
        "peak_rss_mib_before": round(rss0 / 1024, 1),
        "peak_rss_mib_after": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


# ----------------------------------------------------------------------------- report


def markdown(data: dict[str, Any]) -> str:
    p, r, env = data["propagation"], data["replay"], data["environment"]
    e = p["ack_to_enforced_on_b"]
    a = p["create_acls_round_trip_on_a"]
    i = p["probe_round_trip_idle"]
    lines = [
        "# ACL propagation and replay (the `kafka` ACL store)",
        "",
        f"`{data['command']}` on {data['date']}, {measured_code(env)}; {env['cores']} cores, "
        f"Python {env['python']}, Apache Kafka {data['kafka']} ({data['cluster']}).",
        "Method: bench/acl_propagation.py (docstring). Both aclgate processes, the Kafka "
        "nodes and the clients share the machine.",
        "",
        "| measurement | p50 | p90 | p99 | max | target |",
        "|---|---:|---:|---:|---:|---|",
        f"| CreateAcls answered on A -> denied by B ({e['n']} changes) | {e['p50_ms']} ms "
        f"| {e['p90_ms']} ms | {e['p99_ms']} ms | {e['max_ms']} ms | p99 < 1 s |",
        f"| CreateAcls round trip on A (commit + applied on A) | {a['p50_ms']} ms "
        f"| {a['p90_ms']} ms | {a['p99_ms']} ms | {a['max_ms']} ms | |",
        f"| the probe alone: Metadata through B, nothing changing | {i['p50_ms']} ms "
        f"| {i['p90_ms']} ms | {i['p99_ms']} ms | {i['max_ms']} ms | |",
        "",
        f"Probes per change (mean): {p['probes_per_change_mean']}; A and B at the end: "
        f"applied offsets {p['applied_offset_at_end']}, same fingerprint: "
        f"{p['same_fingerprint_at_end']}.",
        "",
        "| replay | value | target |",
        "|---|---:|---|",
        f"| {r['acls']:,} ACLs: store start() to ready (wall clock) | "
        f"{r['start_to_ready_seconds']} s | < 10 s |",
        f"| the same: CPU time of the process (all its threads, librdkafka's too) | "
        f"{r['start_to_ready_cpu_seconds']} s | |",
        f"| load average (1 min) on the 2 cores when the replay started | "
        f"{r['load_average_before']} | |",
        f"| writing them to the topic first (not part of the figure) | {r['fill_seconds']} s | |",
        f"| peak RSS of the bench process before / after the replay | "
        f"{r['peak_rss_mib_before']} / {r['peak_rss_mib_after']} MiB | |",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.acl_propagation")
    parser.add_argument("--changes", type=int, default=250)
    parser.add_argument("--replay-acls", type=int, default=500_000)
    parser.add_argument(
        "--bootstrap", help="an existing PLAINTEXT cluster (default: start 3 nodes)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--stem", default="acl_propagation")
    args = parser.parse_args(argv)
    from bench.latency import environment
    from tests.kafka.cluster import KafkaCluster, ensure_jars, kafka_version

    cluster = None
    with tempfile.TemporaryDirectory(prefix="aclgate-bench-acl-") as tmp:
        workdir = Path(tmp)
        if args.bootstrap:
            bootstrap, described = args.bootstrap, f"existing cluster {args.bootstrap}"
        else:
            problem = ensure_jars()
            if problem:
                print(f"bench.acl_propagation: {problem}", file=sys.stderr)
                return 2
            cluster = KafkaCluster(nodes=3, workdir=workdir / "kafka").start()
            bootstrap, described = cluster.bootstrap, "3 nodes started by the bench"
        try:
            print(f"propagation: {args.changes} changes ...", flush=True)
            prop = propagation(bootstrap, args.changes, workdir)
            print(f"  {prop['ack_to_enforced_on_b']}", flush=True)
            print(f"replay: {args.replay_acls:,} ACLs ...", flush=True)
            rep = replay(bootstrap, args.replay_acls)
            print(f"  {rep}", flush=True)
        finally:
            if cluster is not None:
                cluster.stop()
    data = {
        "command": " ".join(["python -m bench.acl_propagation", *(argv or sys.argv[1:])]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "environment": environment(),
        "kafka": kafka_version(),
        "cluster": described,
        "propagation": prop,
        "replay": rep,
    }
    write_results(args.out, args.stem, data, markdown(data))
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
