"""Broker-side regex subscriptions (KIP-848 `SubscribedTopicRegex`) through aclgate, compared
with Apache Kafka deciding by itself (issue 21, docs/caller-identity.md G1).

Kafka's group coordinator resolves a member's RE2J regex over every topic and keeps those the
member's principal may DESCRIBE. Through aclgate the broker sees the proxy's identity, so
aclgate must resolve the regex for the client's principal. Each scenario runs twice, with the
same client and the same rights for `User:alice`:

    direct   Kafka's StandardAuthorizer (`kafka_authz`, SASL_PLAINTEXT as alice, Kafka ACLs);
    aclgate  a SASL_PLAINTEXT aclgate (users file: alice) in front of the same Kafka, reached
             as a super user (the INTERNAL listener), holding the same ACLs in its ACL file;

and both outcomes must be equal. Both sides share the cluster, so the same topics (and ids);
each side has its own group. `kafka_authz` re-resolves regexes every 10 s
(`group.consumer.regex.refresh.interval.ms`, tests/fixtures/kafka.py): the default 10 min
is when Kafka itself would notice an ACL granted to a running member.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from aclgate.authz.aclfile import dump_acl_file
from aclgate.protocol.versions import request_class
from aclgate.proxy.security.usersfile import add_user
from tests.equivalence.harness import (
    Acl,
    Namespace,
    Profile,
    _find_coordinator,
    _raw_client,
    aclgate_bindings,
    allow,
    error_name,
    kafka_bindings,
)
from tests.equivalence.rawapi import build
from tests.fixtures.kafka import since_kafka
from tests.fixtures.rawclient import RawClient
from tests.kafka import javaclient, tools
from tests.kafka.cluster import KafkaCluster, write_properties

pytestmark = [
    pytest.mark.kafka,
    since_kafka("4.0", "broker-side regex subscriptions (KIP-848)"),
]

ALICE = "User:alice"
STEP_TIMEOUT = 45.0  # one refresh (10 s apart at least) and two heartbeats (5 s) fit


@dataclass
class Side:
    """How alice reaches one side, and the group she uses there."""

    name: str  # "direct" / "aclgate"
    bootstrap: str
    profile: Profile  # for raw requests
    group: str


@dataclass
class Gate:
    """Both sides, a namespace for names, and ACLs granted to both at once."""

    ns: Namespace
    direct: Side
    aclgate: Side
    client_properties: Path
    grant: Callable[..., None]
    kafka: KafkaCluster

    @property
    def sides(self) -> tuple[Side, Side]:
        return self.direct, self.aclgate

    def topic(self, logical: str, values: Sequence[str]) -> str:
        """A one-partition topic holding `values`; its real name."""
        name = self.ns.real(logical)
        self.kafka.create_topic(name)
        producer = Producer(self.kafka.internal.confluent_config())
        for v in values:
            producer.produce(name, v.encode())
        assert producer.flush(30) == 0
        return name


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return javaclient.compile_clients(tmp_path_factory, "RegexClient")


@pytest.fixture
def gate(kafka_authz, kafka_acls, proxy_factory, tmp_path, request) -> Gate:
    lst = kafka_authz.listener("SASL_PLAINTEXT")
    password = lst.users["alice"]
    users = tmp_path / "users.json"
    add_user(users, "alice", password, ["PLAIN"])
    acl_file = tmp_path / "acls.json"
    acl_file.write_text(dump_acl_file([]))
    proxy = proxy_factory(
        kafka_authz.internal.bootstrap,  # PLAINTEXT: User:ANONYMOUS, a super user there
        acl_file=acl_file,
        allow_everyone_if_no_acl_found=False,
        listener_security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms="PLAIN",
        users_file=users,
    )
    ns = Namespace(request.node.name, "rx")
    props = tmp_path / "client.properties"
    write_properties(props, lst.java_properties(user="alice", mechanism="PLAIN"))

    granted: list[Acl] = []

    def side(name: str, bootstrap: str) -> Side:
        profile = Profile(ALICE, bootstrap, sasl=("PLAIN", "alice", password))
        return Side(name, bootstrap, profile, ns.real(f"g-{name}"))

    def grant(*acls: Acl) -> None:
        """The ACLs in force on both sides: Kafka's authorizer and aclgate's file."""
        kafka_acls.add_bindings(kafka_bindings(acls, ns))
        granted.extend(acls)
        acl_file.write_text(dump_acl_file(aclgate_bindings(granted, ns)))
        proxy.run(proxy.server.watcher.reload_once)  # (or the watcher's own poll did)

    return Gate(
        ns,
        side("direct", lst.bootstrap),
        side("aclgate", proxy.bootstrap),
        props,
        grant,
        kafka_authz,
    )


def read_rights(name: str, pattern: str = "LITERAL") -> list[Acl]:
    return [allow(ALICE, op, "TOPIC", name, pattern=pattern) for op in ("READ", "DESCRIBE")]


# ------------------------------------------------------------------ the Java consumer


class RegexConsumer:
    """RegexClient's consumer mode in its own JVM, its event lines collected as they come."""

    def __init__(self, classes: Path, gate: Gate, side: Side, regex: str) -> None:
        self.side = side
        self.lines: list[str] = []
        self.stderr: deque[str] = deque(maxlen=40)
        command = javaclient.client_command(
            classes,
            "RegexClient",
            "consumer",
            side.bootstrap,
            str(gate.client_properties),
            side.group,
            regex,
            "240000",
        )
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def records(self) -> dict[str, list[str]]:
        """topic -> values read, in order."""
        out: dict[str, list[str]] = {}
        for line in list(self.lines):
            if line.startswith("RECORD "):
                _, topic, value = line.split(" ", 2)
                out.setdefault(topic, []).append(value)
        return out

    def assigned_topics(self) -> set[str]:
        """Every topic that was ever in the consumer's assignment."""
        return {
            tp.rsplit("-", 1)[0]
            for line in list(self.lines)
            if line.startswith("ASSIGNED ")
            for tp in line[len("ASSIGNED ") :].split(",")
            if tp
        }

    def stop(self) -> str:
        """Close its stdin (the client leaves the group and ends); its last line."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.lines[-1] if self.lines else ""

    def tail(self) -> str:
        return "\n".join(self.lines[-10:]) + "\nstderr:\n" + "".join(self.stderr)


def wait_all(consumers: Sequence[RegexConsumer], done: Callable[[RegexConsumer], bool]) -> None:
    """Until `done` holds for every consumer, a consumer fails, or STEP_TIMEOUT."""
    deadline = time.monotonic() + STEP_TIMEOUT
    while time.monotonic() < deadline:
        if all(done(c) for c in consumers):
            return
        if any(c.proc.poll() is not None for c in consumers):
            return
        time.sleep(0.2)


def outcome(c: RegexConsumer, ns: Namespace) -> dict[str, Any]:
    """What a consumer read and was assigned, with logical topic names."""
    return {
        "records": ns.logical(c.records()),
        "assigned": sorted(ns.logical(list(c.assigned_topics()))),
        "failed": [ln for ln in c.lines if ln.startswith("ERROR ")],
    }


def test_subscription_pattern_reads_allowed_topics_as_kafka_does(gate: Gate, classes: Path):
    """A Java KafkaConsumer subscribed with SubscriptionPattern("...pub.*|...secret"), alice
    holding READ+DESCRIBE on the `pub` prefix only: (a) it reads pub and is never assigned
    secret; (b) a matching topic created while it runs (pub2) is picked up; (c) secret, once
    granted while it runs, too. The same each step, directly and through aclgate."""
    ns = gate.ns
    gate.topic("pub", [f"p{i}" for i in range(5)])
    secret = gate.topic("secret", [f"s{i}" for i in range(5)])
    gate.grant(
        *read_rights("pub", "PREFIXED"), allow(ALICE, "READ", "GROUP", "g-", pattern="PREFIXED")
    )
    regex = f"{ns.real('pub')}.*|{secret}"
    consumers = [RegexConsumer(classes, gate, side, regex) for side in gate.sides]
    try:
        expected: dict[str, Any] = {"records": {}, "assigned": [], "failed": []}

        def step(records: dict[str, list[str]], assigned: list[str]) -> None:
            expected["records"].update(records)
            expected["assigned"] = assigned
            want = {ns.real(t): v for t, v in expected["records"].items()}
            wait_all(consumers, lambda c: c.records() == want)
            got = {c.side.name: outcome(c, ns) for c in consumers}
            assert got == {"direct": expected, "aclgate": expected}, "\n\n".join(
                f"{c.side.name}:\n{c.tail()}" for c in consumers
            )

        # (a) only pub: secret matches, but alice may not DESCRIBE it
        step({"pub": [f"p{i}" for i in range(5)]}, ["pub"])
        # (b) a topic created later, matching the regex and the PREFIXED ACL
        gate.topic("pub2", ["q0", "q1", "q2"])
        step({"pub2": ["q0", "q1", "q2"]}, ["pub", "pub2"])
        # (c) secret granted while the member runs
        gate.grant(*read_rights("secret"))
        step({"secret": [f"s{i}" for i in range(5)]}, ["pub", "pub2", "secret"])
    finally:
        ends = [c.stop() for c in consumers]
    assert ends == ["END", "END"], "\n\n".join(c.tail() for c in consumers)


# ------------------------------------------------------------------ raw heartbeats


def topic_ids(kafka: KafkaCluster, names: Sequence[str]) -> dict[uuid.UUID, str]:
    """Topic id -> name, from Metadata as a super user on Kafka's INTERNAL listener."""
    with RawClient(kafka.internal.address(kafka.node_ids[0])) as raw:
        m = request_class(3, 12)
        topics = [{"name": n, "topic_id": None} for n in names]
        body = raw.request(
            build(
                m,
                {
                    "topics": topics,
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                },
            )
        )
    return {t.topic_id: t.name for t in body.topics if t.error_code == 0}


@dataclass
class Member:
    """A KIP-848 member heartbeating by hand with a regex subscription."""

    side: Side
    regex: str
    group: str
    seen_ids: set[uuid.UUID] = field(default_factory=set)
    member_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    epoch: int = 0
    owned: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.client = _raw_client(self.side.profile)
        failed = _find_coordinator(self.client, 0, self.group, time.monotonic() + 20)
        assert failed is None, failed

    def heartbeat(self, leave: bool = False) -> Any:
        first = self.epoch == 0
        body = build(
            request_class(68, 1),
            {
                "group_id": self.group,
                "member_id": self.member_id,
                "member_epoch": -1 if leave else self.epoch,
                "rebalance_timeout": 30000,
                "subscribed_topic_regex": self.regex if first else None,
                "topic_partitions": self.owned,
            },
        )
        answer = self.client.request(body)
        if not answer.error_code and not leave:
            self.epoch = int(answer.member_epoch)
            if answer.assignment is not None:
                self.owned = [
                    {"topic_id": str(t.topic_id), "partitions": [int(p) for p in t.partitions]}
                    for t in answer.assignment.topic_partitions
                ]
                self.seen_ids.update(t.topic_id for t in answer.assignment.topic_partitions)
        return answer

    def until_assigned(self) -> str:
        """Heartbeats until the member owns something: "NONE", or the error answered."""
        deadline = time.monotonic() + 25
        while True:
            answer = self.heartbeat()
            name = error_name(int(answer.error_code))
            if name != "NONE" or self.owned or time.monotonic() > deadline:
                return name
            time.sleep(0.3)

    def leave(self) -> None:
        if self.epoch:
            self.heartbeat(leave=True)
        self.client.close()


def describe_group(side: Side, group: str, ids: dict[uuid.UUID, str], ns: Namespace) -> Any:
    """ConsumerGroupDescribe v1 as alice, the members' subscription and assignments with
    logical topic names (ids are those of the shared cluster)."""

    def names(assignment: Any) -> list[str]:
        return sorted(
            ns.logical(ids.get(t.topic_id, str(t.topic_id))) for t in assignment.topic_partitions
        )

    with _raw_client(side.profile) as raw:
        body = raw.request(
            build(
                request_class(69, 1), {"group_ids": [group], "include_authorized_operations": False}
            )
        )
    (g,) = body.groups
    return {
        "error": error_name(int(g.error_code)),
        "state": g.group_state,
        "members": [
            {
                "regex": ns.logical(m.subscribed_topic_regex),
                "names": sorted(ns.logical(list(m.subscribed_topic_names))),
                "assignment": names(m.assignment),
                "target": names(m.target_assignment),
                "type": int(m.member_type),
            }
            for m in g.members
        ],
    }


def describe_tool(gate: Gate, side: Side, member: Member) -> list[str]:
    """kafka-consumer-groups --describe --members --verbose as alice: its table with the
    group and member ids (which differ per side) replaced by G and M, without the epoch
    columns (how often the group was bumped is timing, not authorization)."""
    out = tools.run_tool(
        "kafka-consumer-groups",
        "--bootstrap-server",
        side.bootstrap,
        "--describe",
        "--members",
        "--verbose",
        "--group",
        member.group,
        config=gate.client_properties,
    )
    text = out.stdout.replace(member.group, "G").replace(member.member_id, "M")
    rows = [gate.ns.logical(line).split() for line in text.splitlines() if line.strip()]
    drop = {i for i, h in enumerate(rows[0]) if h.endswith("-EPOCH")} if rows else set()
    return [
        " ".join(c for i, c in enumerate(row) if len(row) != len(rows[0]) or i not in drop)
        for row in rows
    ]


def test_heartbeat_regex_never_names_a_hidden_topic(gate: Gate):
    """ConsumerGroupHeartbeat v1 by hand: the assignment names only topics alice may
    DESCRIBE (never secret's id), ConsumerGroupDescribe shows the member's own regex, and
    regexes in RE2J's syntax (valid or not, where Python's `re` differs) are answered as Kafka
    answers them."""
    ns = gate.ns
    pub = gate.topic("pub", ["p0"])
    secret = gate.topic("secret", ["s0"])
    gate.grant(*read_rights("pub"), allow(ALICE, "READ", "GROUP", "g-", pattern="PREFIXED"))
    ids = topic_ids(gate.kafka, [pub, secret])
    assert set(ids.values()) == {pub, secret}
    p = ns.real("")
    regexes = {
        "alternation": f"{pub}|{secret}",
        "invalid": "(",
        "re2-quote": rf"\Q{pub}\E",  # RE2 literal text; Python re: bad escape
        "named-group": f"(?P<n>{pub})",
        "unicode-class": rf"{p}\pL+",  # pub and secret; Python re: bad escape \p
        "lookahead": f"{pub}(?=x)",  # RE2 has none; Python re accepts it
        "possessive": f"{p}pub*+",  # RE2: invalid nested repetition; Python 3.11 accepts
        "any-byte": rf"{pub}\C*",  # RE2 (C++) has \C, RE2J refuses it
    }
    results: dict[str, dict[str, Any]] = {}
    for side in gate.sides:
        got: dict[str, Any] = {}
        for key, regex in regexes.items():
            member = Member(side, regex, f"{side.group}-{key}")
            try:
                error = member.until_assigned()
                got[key] = {
                    "error": error,
                    "assigned": sorted(
                        ns.logical(ids.get(i, f"unknown {i}")) for i in member.seen_ids
                    ),
                }
                if key == "alternation":
                    got["describe"] = describe_group(side, member.group, ids, ns)
                    got["tool"] = describe_tool(gate, side, member)
            finally:
                member.leave()
        results[side.name] = got
    print(json.dumps(results, indent=1))
    direct, through = results["direct"], results["aclgate"]
    # Kafka's own answers, for the record: a hidden topic is never assigned, the member
    # described with its regex and no subscribed names
    assert direct["alternation"] == {"error": "NONE", "assigned": ["pub"]}
    assert direct["describe"]["members"][0]["regex"] == "pub|secret"
    assert direct["invalid"]["error"] == "INVALID_REGULAR_EXPRESSION"
    assert "secret" not in through["alternation"]["assigned"], "secret's id sent to the client"
    assert through == direct


# ------------------------------------------------------------------ Kafka Streams


def test_streams_pattern_source_is_refused_as_by_kafka(gate: Gate, classes: Path):
    """A Streams topology with a Pattern source on group.protocol=streams: Kafka Streams
    4.3.1 refuses it in the KafkaStreams constructor, before any request (so no
    StreamsGroupHeartbeat ever carries a source regex from it), with every ACL it could
    need; the same through aclgate (docs/caller-identity.md W1)."""
    ns = gate.ns
    gate.topic("in", ["v0"])
    sink = gate.topic("out", [])
    gate.grant(
        allow(ALICE, "ALL", "TOPIC", "", pattern="PREFIXED"),
        allow(ALICE, "ALL", "GROUP", "", pattern="PREFIXED"),
    )

    def run(side: Side) -> str:
        return javaclient.run_client(
            classes,
            "RegexClient",
            "streams",
            side.bootstrap,
            str(gate.client_properties),
            ns.real(f"app-{side.name}"),
            f"{ns.real('in')}.*",
            sink,
            "20000",
            timeout=60,
        )

    with ThreadPoolExecutor(2) as pool:
        direct, through = pool.map(run, gate.sides)
    assert direct == (
        "ERROR UnsupportedOperationException "
        "Pattern subscriptions are not supported with the STREAMS protocol."
    ), direct
    assert through == direct
