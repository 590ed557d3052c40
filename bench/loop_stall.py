"""The loop-stall budget: what one client's hostile input costs every other client.

    python -m bench.loop_stall                      # every input kind; writes bench/results/
    python -m bench.loop_stall --kinds metadata_denied_topics,unknown_api_keys --out /tmp/x

One event loop serves every connection of a worker, so the cost of a hostile input is the
longest time the loop cannot answer anybody else. A pinger in its own process (so that the
hostile client's Python does not take its GIL) sends ApiVersions to the same `aclgate serve`
one request at a time, every 5 ms, on a connection of its own, and prints each round trip.
The worst round trip that overlaps an input's window is that input's stall.

The inputs are issue 20's breaks (B5-B9) and a slice of the TCP fuzzer's corpus. Each runs
against an `aclgate serve` child process in front of tansu, in one of three profiles: `plain`
(an ACL file, an audit file, metrics; the hostile client is User:ANONYMOUS, allowed only
`pub`), `admin` (User:ANONYMOUS a super user, 50,000 ACLs: the ACL Admin API's own cost) and
`sasl` (SASL_PLAINTEXT, PLAIN; the pinger logs in first). tests/stall/test_loop_stall.py runs
the same inputs in `make test` and asserts each budget (docs/operations.md, "Bounds").

Writes loop_stall.json and loop_stall.md to bench/results/ or --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aclgate.protocol.codec import encode_request
from aclgate.protocol.lengths import length_prefix
from tests.fixtures.rawclient import request_entity

RESULTS = Path(__file__).resolve().parent / "results"
_SIZE = struct.Struct(">i")
#: the default budget: no single client's input may stall the others longer (issue 20)
BUDGET_MS = 100.0
#: the pinger's pause between two round trips
PING_PAUSE = 0.005
PLAIN_MECHANISM, SASL_USER, SASL_PASSWORD = "PLAIN", "pinger", "pinger-secret"
KB, MB = 1024, 1024 * 1024
#: ACLs in the `admin` profile's policy
ADMIN_ACLS = 50_000


# ------------------------------------------------------------------------------ the pinger


async def _ping_forever(host: str, port: int, sasl: bool) -> None:
    """Round trips of ApiVersions v3, one at a time; prints "<sent at> <seconds>" each."""
    from tests.fuzz.client import Reader, sasl_login

    frame = encode_request(
        1, request_entity(18, 3, client_software_name="pinger", client_software_version="1")
    )
    sent: float | None = None
    while True:
        try:
            raw_reader, writer = await asyncio.open_connection(host, port)
            reader = Reader(raw_reader)
            if sasl:
                await sasl_login(reader, writer, PLAIN_MECHANISM, SASL_USER, SASL_PASSWORD)
            print("ready", flush=True)
            while True:
                sent = time.monotonic()
                writer.write(frame)
                answer = await reader.frame(120.0)
                if answer is None:
                    raise ConnectionError("closed")
                print(f"{sent:.6f} {time.monotonic() - sent:.6f}", flush=True)
                sent = None
                await asyncio.sleep(PING_PAUSE)
        except (OSError, ConnectionError, TimeoutError) as exc:
            if sent is not None:  # a ping lost with its connection waited until now
                print(f"{sent:.6f} {time.monotonic() - sent:.6f}", flush=True)
                sent = None
            print(f"reconnect {time.monotonic():.6f} {exc!r}", flush=True)
            await asyncio.sleep(0.05)


class Pinger:
    """The pinger's child process and the round trips it reported (CLOCK_MONOTONIC is one
    clock for every process of the machine, so its times compare with ours)."""

    def __init__(self, host: str, port: int, sasl: bool = False):
        args = [sys.executable, "-m", "bench.loop_stall", "ping", host, str(port)]
        self.proc = subprocess.Popen(
            [*args, "--sasl"] if sasl else args,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=Path(__file__).resolve().parent.parent,
        )
        self.samples: list[tuple[float, float]] = []
        self.reconnects = 0
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()
        if not self._ready.wait(30):
            self.close()
            raise RuntimeError(f"the pinger did not connect to {host}:{port}")

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode()
            if line.startswith("ready"):
                self._ready.set()
            elif line.startswith("reconnect"):
                self.reconnects += 1
            else:
                sent, seconds = line.split()
                self.samples.append((float(sent), float(seconds)))

    def worst(self, start: float, end: float, timeout: float = 120.0) -> float:
        """The longest round trip that overlapped [start, end], in seconds; waits for the
        pinger to report a round trip sent after `end` (a stuck one is reported late)."""
        deadline = time.monotonic() + timeout
        while not (self.samples and self.samples[-1][0] > end):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("the pinger reported nothing after the input ended")
            time.sleep(0.01)
        return max(
            (rtt for sent, rtt in self.samples if sent <= end and sent + rtt >= start),
            default=0.0,
        )

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(5)


# ------------------------------------------------------------------- building large frames


def frame_with_entries(
    api_key: int,
    version: int,
    build: Callable[[list[Any]], Any],
    entry: Callable[[int], Any],
    names: Callable[[int], str],
    count: int,
    client_id: str = "stall",
) -> bytes:
    """A request whose one top-level array holds `count` entries, entry i naming `names(i)`
    (all names of one length), built from kio's encoding of one, two and three entries
    without encoding a million objects: the array is the only thing that differs, and its
    count is one byte long up to 126 entries (a compact varint, or an int32's last byte)."""
    f1, f2, f3 = (encode_request(1, build([entry(0)] * n), client_id)[4:] for n in (1, 2, 3))
    size = len(f3) - len(f2)
    assert len(f2) - len(f1) == size, "entries must encode to one length"
    prefix = 0
    while f1[prefix] == f2[prefix] == f3[prefix]:
        prefix += 1
    flexible = f1[prefix] == 2  # compact: n + 1; int32: n (its 3 high bytes are in the prefix)
    template = f1[prefix + 1 : prefix + 1 + size]
    suffix = f1[prefix + 1 + size :]
    first = names(0).encode()
    assert template.count(first) == 1, "the entry's name must be unique in it"
    cut = template.index(first)
    head, tail = template[:cut], template[cut + len(first) :]
    start, counted = f1[: prefix if flexible else prefix - 3], length_prefix(count, flexible)
    body = b"".join(
        [start, counted, *(head + names(i).encode() + tail for i in range(count)), suffix]
    )
    return _SIZE.pack(len(body)) + body


def _acl_frame(
    api_key: int, array: str, entity: str, name: str, count: int, **fields: Any
) -> bytes:
    """CreateAcls or DeleteAcls v3 whose `array` holds `count` topic ACL entries (`entity`),
    entry i naming `name` + i in its name field (the first of `fields`)."""
    from tests.fixtures.rawclient import module

    name_field = next(iter(fields))

    def entry(i: int) -> Any:
        return getattr(module(api_key, 3), entity)(**{**fields, name_field: f"{name}{i:09d}"})

    return frame_with_entries(
        api_key,
        3,
        lambda entries: request_entity(api_key, 3, **{array: tuple(entries)}),
        entry,
        lambda i: f"{name}{i:09d}",
        count,
    )


def create_acls_frame(count: int) -> bytes:
    """CreateAcls v3 with `count` creations of distinct topic ACLs."""
    return _acl_frame(
        30, "creations", "AclCreation", "t", count,
        resource_name="", resource_type=2, resource_pattern_type=3, principal="User:x",
        host="*", operation=2, permission_type=3,
    )  # fmt: skip


def delete_acls_frame(count: int) -> bytes:
    """DeleteAcls v3 with `count` literal topic filters that match nothing."""
    return _acl_frame(
        31, "filters", "DeleteAclsFilter", "nomatch", count,
        resource_name_filter="", resource_type_filter=2, pattern_type_filter=3,
        principal_filter="User:nobody", host_filter="*", operation=2, permission_type=3,
    )  # fmt: skip


def metadata_frame(count: int) -> bytes:
    """Metadata v12 naming `count` distinct topics (denied to User:ANONYMOUS)."""
    from tests.fixtures.rawclient import module

    topic = module(3, 12).MetadataRequestTopic

    def entry(i: int) -> Any:
        return topic(topic_id=None, name=f"d{i:09d}")

    return frame_with_entries(
        3,
        12,
        lambda entries: request_entity(
            3,
            12,
            topics=tuple(entries),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
        entry,
        lambda i: f"d{i:09d}",
        count,
    )


def list_offsets_frame(count: int) -> bytes:
    """ListOffsets v9 listing `count` distinct topics of one partition each (denied to
    User:ANONYMOUS)."""
    from tests.fixtures.rawclient import module

    mod = module(2, 9)
    partition = mod.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)

    def entry(i: int) -> Any:
        return mod.ListOffsetsTopic(name=f"d{i:09d}", partitions=(partition,))

    return frame_with_entries(
        2,
        9,
        lambda entries: request_entity(2, 9, replica_id=-1, isolation_level=0, topics=entries),
        entry,
        lambda i: f"d{i:09d}",
        count,
    )


def _named_entries(
    api_key: int, version: int, array: str, entry: Callable[[Any, str], Any], **fields: Any
) -> Callable[[int], bytes]:
    """`count` -> a request of `api_key` whose array `array` (a top-level field, or
    "outer.inner" inside one entry of a top-level array) holds `count` entries, entry i made
    by `entry(module, name i)`; `fields` are the request's other fields."""
    from tests.fixtures.rawclient import module

    mod = module(api_key, version)
    outer, _, inner = array.partition(".")

    def make(count: int) -> bytes:
        def body(entries: list[Any]) -> Any:
            if not inner:
                return request_entity(api_key, version, **{array: tuple(entries)}, **fields)
            holder, holder_fields = fields[outer]
            return request_entity(
                api_key,
                version,
                **{k: v for k, v in fields.items() if k != outer},
                **{outer: (holder(**holder_fields, **{inner: tuple(entries)}),)},
            )

        return frame_with_entries(
            api_key, version, body, lambda i: entry(mod, f"n{i:09d}"), lambda i: f"n{i:09d}", count
        )

    return make


_MS = timedelta(seconds=30)
#: the cluster-only APIs whose denied answer mirrors the request's entries (protocol/enforce/
#: denied_bytes.py): (api_key, version, `count` -> a request of `count` named entries)
CLUSTER_ONLY: dict[str, tuple[int, int, Callable[[int], bytes]]] = {
    "elect_leaders": (43, 2, _named_entries(
        43, 2, "topic_partitions", lambda m, n: m.TopicPartitions(topic=n, partitions=(0,)),
        election_type=0, timeout=_MS,
    )),
    "alter_partition_reassignments": (45, 1, _named_entries(
        45, 1, "topics",
        lambda m, n: m.ReassignableTopic(
            name=n, partitions=(m.ReassignablePartition(partition_index=0, replicas=None),)
        ),
        timeout=_MS, allow_replication_factor_change=True,
    )),
    "list_partition_reassignments": (46, 0, _named_entries(
        46, 0, "topics",
        lambda m, n: m.ListPartitionReassignmentsTopics(name=n, partition_indexes=(0,)),
        timeout=_MS,
    )),
    "alter_replica_log_dirs": (34, 2, _named_entries(
        34, 2, "dirs.topics", lambda m, n: m.AlterReplicaLogDirTopic(name=n, partitions=(0,)),
        dirs=(lambda **f: _module(34, 2).AlterReplicaLogDir(**f), {"path": "/d"}),
    )),
    "alter_client_quotas": (49, 1, _named_entries(
        49, 1, "entries",
        lambda m, n: m.EntryData(entity=(m.EntityData(entity_type="user", entity_name=n),), ops=()),
        validate_only=False,
    )),
    "describe_user_scram_credentials": (50, 0, _named_entries(
        50, 0, "users", lambda m, n: m.UserName(name=n)
    )),
    "alter_user_scram_credentials": (51, 0, _named_entries(
        51, 0, "deletions", lambda m, n: m.ScramCredentialDeletion(name=n, mechanism=1),
        upsertions=(),
    )),
    "describe_client_quotas": (48, 1, _named_entries(
        48, 1, "components",
        lambda m, n: m.ComponentData(entity_type=n, match_type=1, match=None), strict=False,
    )),
    "describe_log_dirs": (35, 4, _named_entries(
        35, 4, "topics", lambda m, n: m.DescribableLogDirTopic(topic=n, partitions=(0,))
    )),
}  # fmt: skip


#: the group APIs decided on their group id, read in place (protocol/enforce/groupfirst.py):
#: (api_key, version, `count` -> a request of `count` entries in its one array, group "g")
GROUP_FIRST: dict[str, tuple[int, int, Callable[[int], bytes]]] = {
    "join_group": (11, 9, _named_entries(
        11, 9, "protocols", lambda m, n: m.JoinGroupRequestProtocol(name=n, metadata=b""),
        group_id="g", session_timeout=_MS, rebalance_timeout=_MS, member_id="",
        group_instance_id=None, protocol_type="consumer", reason=None,
    )),
    "sync_group": (14, 5, _named_entries(
        14, 5, "assignments", lambda m, n: m.SyncGroupRequestAssignment(member_id=n, assignment=b""),
        group_id="g", generation_id=1, member_id="m", group_instance_id=None,
        protocol_type="consumer", protocol_name="range",
    )),
    "leave_group": (13, 5, _named_entries(
        13, 5, "members",
        lambda m, n: m.MemberIdentity(member_id=n, group_instance_id=None, reason=None),
        group_id="g",
    )),
}  # fmt: skip


def _commit_partition(m: Any) -> tuple[Any, ...]:
    return (m.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                           committed_leader_epoch=-1, committed_metadata=None),)  # fmt: skip


#: the per-topic APIs walked as bytes at this size (protocol/enforce/entrybytes.py), denied
#: on their group or transactional id (User:ANONYMOUS has no group right but ALLOWED_GROUP's)
#: or on their topics
ALLOWED_GROUP = "stall-allowed"
PER_TOPIC: dict[str, tuple[int, int, Callable[[int], bytes]]] = {
    "offset_commit_group_denied": (8, 9, _named_entries(
        8, 9, "topics",
        lambda m, n: m.OffsetCommitRequestTopic(name=n, partitions=_commit_partition(m)),
        group_id="g", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
    )),
    "offset_commit_topics_denied": (8, 9, _named_entries(
        8, 9, "topics",
        lambda m, n: m.OffsetCommitRequestTopic(name=n, partitions=_commit_partition(m)),
        group_id=ALLOWED_GROUP, generation_id_or_member_epoch=-1, member_id="",
        group_instance_id=None,
    )),
    "txn_offset_commit": (28, 4, _named_entries(
        28, 4, "topics",
        lambda m, n: m.TxnOffsetCommitRequestTopic(name=n, partitions=(
            m.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                              committed_leader_epoch=-1, committed_metadata=None),
        )),
        transactional_id="x", group_id="g", producer_id=1, producer_epoch=0, generation_id=-1,
        member_id="", group_instance_id=None,
    )),
    "delete_records": (21, 2, _named_entries(
        21, 2, "topics",
        lambda m, n: m.DeleteRecordsTopic(name=n, partitions=(
            m.DeleteRecordsPartition(partition_index=0, offset=0),
        )),
        timeout=_MS,
    )),
}  # fmt: skip
#: SyncGroup keeps the 100 MiB frame limit (a big group's assignments): measured at 32 MiB
GROUP_SIZES = {14: 32 * MB}
#: requests whose denied entries are answered one by one, as bytes (DeleteTopics,
#: DescribeConfigs, OffsetFetch's batched groups, DeleteGroups): what is left is decoding and
#: one authorization per name
PER_ENTRY: dict[str, tuple[int, int, Callable[[int], bytes]]] = {
    "delete_topics": (20, 6, _named_entries(
        20, 6, "topics", lambda m, n: m.DeleteTopicState(name=n, topic_id=uuid.UUID(int=0)),
        timeout=_MS,
    )),
    "describe_configs": (32, 4, _named_entries(
        32, 4, "resources",
        lambda m, n: m.DescribeConfigsResource(resource_type=2, resource_name=n,
                                               configuration_keys=None),
        include_synonyms=False, include_documentation=False,
    )),
    "offset_fetch": (9, 9, _named_entries(
        9, 9, "groups",
        lambda m, n: m.OffsetFetchRequestGroup(group_id=n, member_id=None, member_epoch=-1,
                                               topics=None),
        require_stable=False,
    )),
    "delete_groups": (42, 2, _named_entries(42, 2, "groups_names", lambda m, n: n)),
}  # fmt: skip


def _module(api_key: int, version: int) -> Any:
    from tests.fixtures.rawclient import module

    return module(api_key, version)


def elect_leaders_partitions_frame(count: int) -> bytes:
    """ElectLeaders v2 of one topic and `count` partitions (the answer's largest: 37 bytes
    per partition)."""
    body = request_entity(
        43, 2, election_type=0, timeout=_MS,
        topic_partitions=(_module(43, 2).TopicPartitions(topic="t", partitions=(0,) * count),),
    )  # fmt: skip
    return encode_request(1, body, "stall")


def in_process_ms(frame: bytes, tries: int = 3, closes: bool = False) -> tuple[float, int]:
    """(the best of `tries` CPU times, in ms, of the longest turn of the event loop a proxy
    session of a principal without any right takes to answer `frame` (a request decided a
    slice per turn takes several: protocol/enforce/slices.py); the answer's bytes): the
    loop's own cost, no sockets, CPU time so that the other processes of a busy machine do
    not count. With `closes`, a request answered by closing the connection is one too."""
    from tests.protocol.test_request_limits import _session

    best, size = float("inf"), 0
    for _ in range(tries):
        session, io = _session([], auto_turns=False)
        started = time.thread_time()
        session.client_data(frame)
        longest = time.thread_time() - started
        while io.turns:
            started = time.thread_time()
            session.resume(io.turns.pop(0))
            longest = max(longest, time.thread_time() - started)
        best = min(best, longest)
        if io.closed is not None and not closes:
            raise AssertionError(f"closed: {io.closed}")
        size = len(io.client)
    return round(best * 1000, 1), size


def entries_at_limit(make: Callable[[int], bytes], api_key: int) -> int:
    """The most entries `make` can put in one request within the API's size limit
    (protocol/enforce/table.py `MAX_REQUEST_BYTES`, else GROUP_SIZES; the limit counts the
    frame without its 4-byte size)."""
    from aclgate.protocol.enforce.table import request_limits

    limit = request_limits().get(api_key) or GROUP_SIZES[api_key]
    one, two = len(make(1)) - 4, len(make(2)) - 4
    # counts past 126 take a longer length prefix (at most 4 more bytes)
    return (limit - (one - (two - one)) - 4) // (two - one)


def _at_limit(make: Callable[[int], bytes], api_key: int) -> Callable[[Target], dict[str, Any]]:
    """One request of `make` holding as many entries as its API's size limit allows."""

    def run(target: Target) -> dict[str, Any]:
        return _one_frame(make, entries_at_limit(make, api_key))(target)

    return run


# ------------------------------------------------------------------------- sending inputs


@dataclass
class Target:
    """The proxy under test."""

    host: str
    port: int
    metrics: str
    proxy: Any  # tests.fixtures.proxyprocess.ProxyProcess

    def connect(self, timeout: float = 30.0) -> socket.socket:
        return socket.create_connection((self.host, self.port), timeout=timeout)


def send_and_wait(target: Target, frame: bytes, timeout: float = 120.0) -> str:
    """Send one frame and read until its answer or a close: "answered" or "closed"."""
    with target.connect(timeout) as sock:
        sock.settimeout(timeout)
        try:
            sock.sendall(frame)
        except (BrokenPipeError, ConnectionResetError):
            return "closed"
        return _await_answer(sock)


def _await_answer(sock: socket.socket) -> str:
    data = bytearray()
    try:
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                return "closed"
            data += chunk
            if len(data) >= 4 and len(data) - 4 >= _SIZE.unpack_from(data)[0]:
                return "answered"
    except ConnectionResetError:
        return "closed"
    except TimeoutError:
        return "timed out"


def _unknown_api_keys(target: Target) -> dict[str, Any]:
    """B5: one connection per API key Kafka does not define, then 4 concurrent scrapes."""
    keys = [k for k in range(-32768, 32768, 21) if not 0 <= k < 100][:3000]

    def refused(key: int) -> None:
        header = struct.pack(">hhih", key, 0, 1, -1)
        with target.connect(10) as sock:
            sock.sendall(_SIZE.pack(len(header)) + header)
            _await_answer(sock)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(refused, keys))
        sizes = list(pool.map(lambda _: len(_scrape(target)), range(4)))
    return {"connections": len(keys), "metrics_bytes": max(sizes)}


def _scrape(target: Target) -> bytes:
    with urllib.request.urlopen(f"http://{target.metrics}/metrics", timeout=120) as answer:
        return answer.read()


def _one_frame(make: Callable[[int], bytes], count: int) -> Callable[[Target], dict[str, Any]]:
    def run(target: Target) -> dict[str, Any]:
        frame = make(count)
        return {"entries": count, "bytes": len(frame), "outcome": send_and_wait(target, frame)}

    return run


def _client_ids(per_connection: int, length: int) -> Callable[[Target], dict[str, Any]]:
    """B8: 4 connections, `per_connection` allowed Metadata requests each, every one with a
    new client id `length` characters long (the audit groups allowed decisions by client
    id: a new key each)."""

    def run(target: Target) -> dict[str, Any]:
        from tests.fixtures.rawclient import module

        topic = module(3, 12).MetadataRequestTopic(topic_id=None, name="pub")
        body = request_entity(
            3, 12, topics=(topic,), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )  # fmt: skip
        before = target.proxy.rss_bytes()

        def one_connection(n: int) -> None:
            with target.connect(60) as sock:
                for i in range(per_connection):
                    client_id = f"{n}-{i}-".ljust(length, "x")
                    sock.sendall(encode_request(i, body, client_id))
                    if _await_answer(sock) != "answered":
                        raise AssertionError("an allowed Metadata request was not answered")

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(one_connection, range(4)))
        grown = target.proxy.rss_bytes() - before
        return {"requests": 4 * per_connection, "rss_growth_bytes": grown}

    return run


def _garbage(target: Target) -> dict[str, Any]:
    """Garbage, impossible sizes and half frames from 300 connections."""
    rng = random.Random(20)
    log_before = target.proxy.log_path.stat().st_size

    def one(i: int) -> None:
        kind = i % 3
        if kind == 0:
            data = _SIZE.pack(60) + rng.randbytes(60)
        elif kind == 1:
            data = _SIZE.pack(-5 - i) + rng.randbytes(8)
        else:
            data = _SIZE.pack(1000) + rng.randbytes(10)  # a half frame, then a close
        with target.connect(10) as sock:
            sock.sendall(data)
            if kind != 2:
                _await_answer(sock)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(300)))
    return {"connections": 300, "log_bytes": target.proxy.log_path.stat().st_size - log_before}


def _fuzz_corpus(target: Target) -> dict[str, Any]:
    """400 cases of the TCP fuzzer's corpus (tests/fuzz/corpus.py), 24 connections at once."""
    from tests.fuzz.client import Target as FuzzTarget
    from tests.fuzz.client import run_cases
    from tests.fuzz.corpus import corpus_seeds, make_case

    seeds = corpus_seeds()
    keys = sorted({s.api_key for s in seeds})
    cases = [make_case("stall", i, "plain", seeds, keys) for i in range(400)]
    fuzz_target = {"plain": FuzzTarget("plain", target.host, target.port)}
    batch = asyncio.run(run_cases(fuzz_target, cases, concurrency=24))
    return {"cases": len(batch.outcomes)}


def _long_sasl_mechanism(target: Target) -> dict[str, Any]:
    """B9: 300 SaslHandshakes naming a 32 KB mechanism, 10 connections at once."""
    frame = encode_request(1, request_entity(17, 1, mechanism="M" * 32_767), "stall")
    log_before = target.proxy.log_path.stat().st_size

    def one(_: int) -> None:
        send_and_wait(target, frame, 30)

    with ThreadPoolExecutor(10) as pool:
        list(pool.map(one, range(300)))
    return {"handshakes": 300, "log_bytes": target.proxy.log_path.stat().st_size - log_before}


def _delete_acls_super(target: Target) -> dict[str, Any]:
    """B7: a super user's DeleteAcls, 1,000 literal filters matching none of 50,000 ACLs."""
    frame = delete_acls_frame(1000)
    return {"filters": 1000, "outcome": send_and_wait(target, frame)}


def _describe_acls_any(target: Target) -> dict[str, Any]:
    """B7: a super user's DescribeAcls ANY: every one of the 50,000 ACLs in the answer."""
    body = request_entity(
        29, 3, resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
        principal_filter=None, host_filter=None, operation=1, permission_type=1,
    )  # fmt: skip
    return {"outcome": send_and_wait(target, encode_request(1, body, "stall"))}


@dataclass(frozen=True)
class InputKind:
    name: str
    profile: str
    run: Callable[[Target], dict[str, Any]]
    what: str
    budget_ms: float = BUDGET_MS
    #: bounds on the input's figures (e.g. the proxy's RSS growth, bytes logged)
    limits: Mapping[str, int] = field(default_factory=dict)
    #: an input known to stall past its budget still: what was measured and what is left
    #: (tests/stall marks it xfail(strict=True), so fixing it makes the test say so)
    over_budget: str | None = None

    def over_limits(self, figures: Mapping[str, Any]) -> list[str]:
        """The figures past their bound, described."""
        return [
            f"{name} {figures[name]} > {bound}"
            for name, bound in self.limits.items()
            if figures[name] > bound
        ]


KINDS: tuple[InputKind, ...] = (
    InputKind(
        "long_client_ids",
        "plain",
        _client_ids(1000, 30_000),
        "B8: 4,000 allowed requests, each with a new 30 KB client id, 4 connections",
        limits={"rss_growth_bytes": 48 * MB},
    ),
    InputKind(
        "many_client_ids",
        "plain",
        _client_ids(3000, 64),
        "B8: 12,000 allowed requests, each with a new client id: the audit aggregation "
        "reaches its 2,000 keys six times and is written early each time",
    ),
    InputKind(
        "unknown_api_keys",
        "plain",
        _unknown_api_keys,
        "B5: 3,000 connections, each an API key Kafka does not define; 4 concurrent scrapes",
    ),
    InputKind(
        "create_acls_unauthorized",
        "plain",
        _one_frame(create_acls_frame, 1_000_000),
        "B6: CreateAcls of 1,000,000 creations by a principal without ALTER on the cluster",
    ),
    InputKind(
        "delete_acls_unauthorized",
        "plain",
        _one_frame(delete_acls_frame, 800_000),
        "B6: DeleteAcls of 800,000 filters (~32 MB) by a principal without ALTER",
    ),
    InputKind(
        "metadata_denied_topics",
        "plain",
        _one_frame(metadata_frame, 1_000_000),
        "B6: Metadata naming 1,000,000 distinct topics, all denied",
    ),
    InputKind(
        "metadata_at_limit",
        "plain",
        _at_limit(metadata_frame, 3),
        "Metadata v12 naming as many distinct denied topics as its 256 KiB limit holds",
    ),
    InputKind(
        "list_offsets_at_limit",
        "plain",
        _at_limit(list_offsets_frame, 2),
        "ListOffsets v9 listing as many denied topics (one partition each) as its 256 KiB limit "
        "holds",
    ),
    InputKind(
        "garbage_frames",
        "plain",
        _garbage,
        "B9: 300 connections of garbage, impossible sizes and half frames",
        limits={"log_bytes": 16 * KB},
    ),
    InputKind("fuzz_corpus", "plain", _fuzz_corpus, "400 cases of the TCP fuzz corpus"),
    InputKind(
        "long_sasl_mechanism",
        "sasl",
        _long_sasl_mechanism,
        "B9: 300 SaslHandshakes naming a 32 KB mechanism",
        limits={"log_bytes": 16 * KB},
    ),
    InputKind(
        "delete_acls_super_filters",
        "admin",
        _delete_acls_super,
        "B7: a super user's DeleteAcls, 1,000 literal filters over 50,000 ACLs",
    ),
    InputKind(
        "describe_acls_any",
        "admin",
        _describe_acls_any,
        "B7: a super user's DescribeAcls ANY over 50,000 ACLs",
    ),
)
PROFILES = ("plain", "sasl", "admin", "cluster")
#: profiles whose proxy stands in front of Apache Kafka, not tansu
KAFKA_PROFILES = frozenset({"cluster"})


def _answered_at_limit(
    name: str, inputs: Mapping[str, tuple[int, int, Callable[[int], bytes]]] = CLUSTER_ONLY
) -> Callable[[Target], dict[str, Any]]:
    """A request of `inputs` (CLUSTER_ONLY, GROUP_FIRST) as large as its limit allows, denied
    to User:ANONYMOUS: answered by aclgate itself, which the outcome must say. Profile
    `cluster`: the proxy accepts only the APIs its cluster serves (a request of another is
    closed on its header, as Kafka closes it), and tansu serves none of the cluster-only
    APIs but ListPartitionReassignments and the SCRAM ones."""
    key, _version, make = inputs[name]
    run = _at_limit(make, key)

    def checked(target: Target) -> dict[str, Any]:
        figures = run(target)
        if figures["outcome"] != "answered":
            raise AssertionError(f"{name}: {figures['outcome']}, not answered")
        return figures

    return checked


#: PER_ENTRY inputs still past the budget at their limit: none since their decisions are
#: made a slice per turn (protocol/enforce/slices.py) and OffsetFetch's group ids are read in
#: place (was: OffsetFetch 222 ms at 1 MiB, DeleteGroups 241 ms at 256 KiB through serve)
PER_ENTRY_OVER: dict[str, str] = {}


def produce_frame(count: int) -> bytes:
    """Produce v9, acks=1, naming `count` distinct topics of one partition each (no records):
    Produce has no limit of its own (`--max-frame-bytes` alone: record batches are large)."""
    mod = _module(0, 9)
    topics = tuple(
        mod.TopicProduceData(
            name=f"d{i:09d}", partition_data=(mod.PartitionProduceData(index=0, records=None),)
        )
        for i in range(count)
    )
    body = request_entity(0, 9, transactional_id=None, acks=1, timeout=_MS, topic_data=topics)
    return encode_request(1, body, "stall")


#: topics of `produce_many_topics`: 1 MiB, the Java producer's default max.request.size
PRODUCE_TOPICS = (MB - 64) // 19


def _limit_text(api_key: int) -> str:
    from aclgate.protocol.enforce.table import request_limits

    limit = request_limits().get(api_key) or GROUP_SIZES[api_key]
    return f"{limit // MB} MiB" if limit % MB == 0 else f"{limit // KB} KiB"


def _elect_leaders_partitions(target: Target) -> dict[str, Any]:
    """ElectLeaders v2 of one topic naming as many partitions as 1 MiB holds (a 9.7 MB
    answer)."""
    from aclgate.protocol.enforce.table import request_limits

    count = (request_limits()[43] - 60) // 4
    figures = _one_frame(elect_leaders_partitions_frame, count)(target)
    if figures["outcome"] != "answered":
        raise AssertionError(f"elect_leaders_partitions: {figures['outcome']}")
    return figures


KINDS += (
    *(
        InputKind(
            f"{name}_at_limit",
            "cluster",
            _answered_at_limit(name),
            f"{name.replace('_', ' ').capitalize()} v{version} of as many named entries as its "
            f"{_limit_text(key)} limit holds, by a principal without the cluster right (answered "
            "from the request's bytes, protocol/enforce/denied_bytes.py)",
        )
        for name, (key, version, _make) in CLUSTER_ONLY.items()
    ),
    InputKind(
        "elect_leaders_partitions_at_limit",
        "cluster",
        _elect_leaders_partitions,
        "ElectLeaders v2 of one topic and some 262,000 partitions (1 MiB), denied: a 9.7 MB answer",
    ),
    *(
        InputKind(
            f"{name}_at_limit",
            "plain",
            _answered_at_limit(name, PER_ENTRY),
            f"{name.replace('_', ' ').capitalize()} v{version} naming as many distinct denied "
            f"entries as its {_limit_text(key)} limit holds (answered as bytes, one "
            "authorization per name)",
            over_budget=PER_ENTRY_OVER.get(name),
        )
        for name, (key, version, _make) in PER_ENTRY.items()
    ),
    InputKind(
        "produce_many_topics",
        "plain",
        _one_frame(produce_frame, PRODUCE_TOPICS),
        f"Produce v9 (acks=1) naming {PRODUCE_TOPICS:,} distinct denied topics (1 MiB, the Java "
        "producer's default max.request.size; Produce has no limit of its own): walked, decided "
        "and answered as bytes a slice per turn (protocol/enforce/producebytes.py)",
    ),
    *(
        InputKind(
            f"{name}_at_limit",
            "plain",
            _answered_at_limit(name, PER_TOPIC),
            f"{name.replace('_', ' ').capitalize()} v{version} naming as many distinct topics "
            f"as its {_limit_text(key)} limit holds (walked and answered as bytes a slice per "
            "turn: protocol/enforce/entrybytes.py)",
        )
        for name, (key, version, _make) in PER_TOPIC.items()
    ),
    *(
        InputKind(
            f"{name}_at_limit",
            "plain",
            _answered_at_limit(name, GROUP_FIRST),
            f"{name.replace('_', ' ').capitalize()} v{version} of group g, denied, with as many "
            f"entries in its one array as {_limit_text(key)} holds (decided on the group id read "
            "in place, the body never read: protocol/enforce/groupfirst.py)",
        )
        for name, (key, version, _make) in GROUP_FIRST.items()
    ),
)


# ------------------------------------------------------------------------ the proxies


def _write_acl_file(path: Path, extra: int) -> None:
    acls = [
        {"resource_type": "TOPIC", "resource_name": "pub", "pattern_type": "LITERAL",
         "principal": "User:ANONYMOUS", "host": "*", "operation": op, "permission_type": "ALLOW"}
        for op in ("READ", "DESCRIBE")
    ]  # fmt: skip
    acls.append(
        {"resource_type": "GROUP", "resource_name": ALLOWED_GROUP, "pattern_type": "LITERAL",
         "principal": "User:ANONYMOUS", "host": "*", "operation": "READ",
         "permission_type": "ALLOW"}
    )  # fmt: skip
    acls += [
        {"resource_type": "TOPIC", "resource_name": f"admin-{i:06d}", "pattern_type": "LITERAL",
         "principal": f"User:u{i % 997}", "host": "*", "operation": "READ",
         "permission_type": "ALLOW"}
        for i in range(extra)
    ]  # fmt: skip
    path.write_text(json.dumps({"version": 1, "acls": acls}))


def proxy_args(profile: str, broker: str, workdir: Path) -> list[str]:
    """`aclgate serve` arguments of one profile (files written into `workdir`); `cluster`
    is `plain` in front of Apache Kafka."""
    acl_file = workdir / f"acls-{profile}.json"
    _write_acl_file(acl_file, ADMIN_ACLS if profile == "admin" else 0)
    args = [
        *("--upstream", broker, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"),
        *("--acl-file", str(acl_file), "--audit-file", str(workdir / f"audit-{profile}.jsonl")),
    ]
    if profile == "admin":
        args += ["--super-user", "User:ANONYMOUS"]
    if profile == "sasl":
        from aclgate.proxy.security.usersfile import add_user

        users = workdir / "users.json"
        if not users.exists():
            add_user(users, SASL_USER, SASL_PASSWORD, [PLAIN_MECHANISM], iterations=4096)
        args += [
            *("--listener-security-protocol", "SASL_PLAINTEXT", "--sasl-mechanisms", "PLAIN"),
            *("--users-file", str(users)),
        ]
    return args


@dataclass
class Profile:
    """A running proxy of one profile and its pinger."""

    target: Target
    pinger: Pinger


@contextmanager
def running(profile: str, broker: str, workdir: Path) -> Iterator[Profile]:
    from tests.fixtures.proxyprocess import ProxyProcess

    proxy = ProxyProcess(proxy_args(profile, broker, workdir), workdir / f"aclgate-{profile}.log")
    pinger = None
    try:
        host, port = proxy.bootstrap.rsplit(":", 1)
        pinger = Pinger(host, int(port), sasl=profile == "sasl")
        target = Target(host, int(port), f"127.0.0.1:{proxy.metrics_port}", proxy)
        yield Profile(target, pinger)
    finally:
        if pinger is not None:
            pinger.close()
        proxy.stop()


@dataclass
class Measurement:
    kind: str
    stall_ms: float
    seconds: float
    figures: dict[str, Any] = field(default_factory=dict)
    tries: int = 1


def measure(profile: Profile, kind: InputKind) -> Measurement:
    """Run `kind` once; its stall is the worst round trip of the pinger during the input."""
    started = time.monotonic()
    figures = kind.run(profile.target)
    ended = time.monotonic()
    stall = profile.pinger.worst(started, ended)
    return Measurement(kind.name, round(stall * 1000, 1), round(ended - started, 2), figures)


def measure_within_budget(profile: Profile, kind: InputKind, tries: int = 5) -> Measurement:
    """The best of up to `tries` runs: an input that costs the loop costs it every time,
    while a scheduling hiccup of this shared 2-core machine does not repeat on demand."""
    best: Measurement | None = None
    for attempt in range(1, tries + 1):
        m = measure(profile, kind)
        m.tries = attempt
        if best is None or m.stall_ms < best.stall_ms:
            best = m
        if best.stall_ms <= kind.budget_ms:
            break
    assert best is not None
    return best


# ------------------------------------------------------------------------------ the CLI


def _markdown(rows: Sequence[Measurement], env: dict[str, Any]) -> str:
    from bench.recording import measured_code

    by_name = {k.name: k for k in KINDS}
    lines = [
        "# Loop stall per hostile input",
        "",
        f"`python -m bench.loop_stall` {measured_code(env)}, {env['date']}. Worst round trip of "
        "an ApiVersions pinger (its own process and connection, one request every 5 ms) while "
        "the input ran, best of up to 5 runs (tests/stall/test_loop_stall.py asserts the "
        f"budget in `make test`). Load average (1 min) {env.get('load', '?')}: the machine's "
        "other work shows in every figure.",
        "",
        "| input | what | stall (ms) | budget (ms) | input took (s) | figures |",
        "|---|---|---:|---:|---:|---|",
    ]
    for m in rows:
        kind = by_name[m.kind]
        figures = ", ".join(f"{k} {v}" for k, v in m.figures.items())
        lines.append(
            f"| {m.kind} | {kind.what} | {m.stall_ms} | {kind.budget_ms:g} | {m.seconds} | "
            f"{figures} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loop_stall", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    ping = sub.add_parser("ping", help="(internal) the pinger process")
    ping.add_argument("host")
    ping.add_argument("port", type=int)
    ping.add_argument("--sasl", action="store_true")
    parser.add_argument("--kinds", default="", help="comma-separated input kinds (default all)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.command == "ping":
        import uvloop

        uvloop.run(_ping_forever(args.host, args.port, args.sasl))
        return 0

    import tempfile

    from aclgate.proxy.demo.embedded_broker import TansuBroker
    from bench.latency import environment
    from bench.recording import write_results

    wanted = [k for k in KINDS if not args.kinds or k.name in args.kinds.split(",")]
    rows: list[Measurement] = []
    load_before = os.getloadavg()[0]
    with (
        tempfile.TemporaryDirectory() as tmp,
        TansuBroker(log_path=Path(tmp) / "tansu.log") as tansu,
        ExitStack() as stack,
    ):
        for profile_name in PROFILES:
            kinds = [k for k in wanted if k.profile == profile_name]
            if not kinds:
                continue
            broker = tansu.bootstrap
            if profile_name in KAFKA_PROFILES:
                from tests.kafka.cluster import KafkaCluster

                kafka = KafkaCluster(workdir=Path(tmp) / "kafka").start()
                stack.callback(kafka.stop)
                broker = kafka.bootstrap
            with running(profile_name, broker, Path(tmp)) as profile:
                for kind in kinds:
                    m = measure_within_budget(profile, kind)
                    print(f"{m.kind}: stall {m.stall_ms} ms ({m.seconds} s) {m.figures}")
                    rows.append(m)
    env = {
        **environment(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load": f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after",
    }
    data = {"environment": env, "rows": [m.__dict__ for m in rows]}
    write_results(args.out, "loop_stall", data, _markdown(rows, env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
