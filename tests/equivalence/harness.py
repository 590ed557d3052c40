"""The equivalence harness: one scripted scenario, run against two targets, compared per step.

A scenario (tests/equivalence/scenarios.py) is a script of steps, each performed by one
principal through a real client (confluent-kafka) or a raw Kafka request, plus the ACLs that
apply. The harness runs the same script twice:

    reference  Apache Kafka deciding by itself (StandardAuthorizer holding the ACLs), or, for
               scenarios without authorization, Apache Kafka reached directly;
    candidate  aclgate holding the same ACLs (its ACL file), in front of an Apache Kafka
               without an authorizer.

Every step returns a normalized outcome (plain JSON-able data: error names, records, visible
topics, offsets); the two runs are compared step by step and a difference is rendered as a
side-by-side diff. An empty diff is the proof that aclgate decides as Kafka does.

Terms:
    principal  "User:ANONYMOUS", "User:alice", ...: who performs a step. Each target maps a
               principal to a `Profile` (bootstrap + client config + SASL credentials), so the
               same script runs as the same principal on both sides.
    observer   a super user talking to the cluster directly (never through the proxy). It
               prepares topics and groups (setup, not compared) and reads the ground truth
               after a step (e.g. the records really in a topic), which is compared.
    namespace  every topic, group and transactional id of a run gets a per-run prefix
               (clusters are shared by the whole test session and by both runs); scripts use
               logical names and outcomes are normalized back to them.

Normalizations (each one a known, explained difference; docs/equivalence.md lists them too):
NORMALIZATIONS maps a short key to the explanation; the code that applies one names its key.
"""

from __future__ import annotations

import contextlib
import datetime
import difflib
import gc
import itertools
import json
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AclBinding as CkAclBinding
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from confluent_kafka.admin import ResourceType as CkResourceType

STEP_TIMEOUT = 20.0  # seconds, the most any one step may take
SESSION_TIMEOUT_MS = 6000  # the smallest Kafka accepts by default

NORMALIZATIONS: dict[str, str] = {
    "unordered": (
        "Records written over several independent connections are compared as a sorted list of "
        "values: nothing orders separate connections against each other, on Kafka either."
    ),
    "names": (
        "Topic, group and transactional-id names carry a per-run prefix (both runs share "
        "session clusters); outcomes show the logical name the script used."
    ),
    "foreign": (
        "Listings (all-topics Metadata, ListGroups, list_topics) keep only names of the "
        "run's own namespace: the shared clusters hold other tests' topics and groups, and "
        "internal topics (__consumer_offsets, __transaction_state) whose existence depends "
        "on what ran before."
    ),
    "addresses": (
        "Broker host/port, cluster id and topic ids are dropped: the proxy rewrites "
        "addresses by design, and the two clusters differ in ids. Node ids are compared."
    ),
    "messages": (
        "Error message strings are dropped, error codes (names) are compared: Kafka's own "
        "strings vary by code path (null, 'Authorization failed.', exception text) and "
        "librdkafka adds its own wording."
    ),
    "timing": (
        "Throttle times, record timestamps, member/client ids and group generations are never "
        "recorded; librdkafka's transient connection errors (_TRANSPORT, _ALL_BROKERS_DOWN, "
        "_RESOLVE, _DESTROY) are dropped: they depend on timing and connection handling, not "
        "on authorization."
    ),
    "order": (
        "Answer lists whose order Kafka does not define are compared sorted: those it builds "
        "from hash maps and sets (CreatePartitions, DeleteRecords, OffsetDelete, the denied "
        "topics of DescribeTopicPartitions) or from its coordinators' results "
        "(ConsumerGroupDescribe, ...) follow the names' hashes, and names carry a per-run "
        "prefix. Clients match entries by name."
    ),
    "eventual": (
        "A step that reads an effect the cluster applies asynchronously (client quotas and "
        "SCRAM credentials in force on the broker, a share group's state after its "
        "assignment) asks again until the effect shows, on both sides, within the step's "
        "time (Client.raw's `until`)."
    ),
    "retries": (
        "Raw requests retry retriable coordinator errors (COORDINATOR_LOAD_IN_PROGRESS, "
        "NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, CONCURRENT_TRANSACTIONS) as every client "
        "does, and send FindCoordinator first: the first group or transaction on a fresh "
        "cluster creates __consumer_offsets / __transaction_state, so these errors depend on "
        "the cluster's history, not on the ACLs."
    ),
}

RETRIABLE_COORDINATOR_ERRORS = frozenset(
    {
        "COORDINATOR_LOAD_IN_PROGRESS",
        "COORDINATOR_NOT_AVAILABLE",
        "NOT_COORDINATOR",
        "CONCURRENT_TRANSACTIONS",
    }
)
TRANSIENT_ERRORS = frozenset({"_TRANSPORT", "_ALL_BROKERS_DOWN", "_RESOLVE", "_DESTROY"})


# --------------------------------------------------------------------------- ACLs


CLUSTER = "kafka-cluster"


@dataclass(frozen=True)
class Acl:
    """One ACL with a logical resource name (the harness prefixes it per run).

    `name="*"` (LITERAL) and the CLUSTER resource are not prefixed.
    """

    principal: str
    operation: str
    resource_type: str = "TOPIC"
    name: str = "*"
    pattern: str = "LITERAL"
    permission: str = "ALLOW"
    host: str = "*"

    def real_name(self, ns: Namespace) -> str:
        if self.resource_type == "CLUSTER" or (self.name == "*" and self.pattern == "LITERAL"):
            return self.name
        return ns.real(self.name)

    def describe(self) -> str:
        host = "" if self.host == "*" else f" from host {self.host}"
        return (
            f"{self.permission} {self.principal} {self.operation} on "
            f"{self.resource_type}:{self.pattern}:{self.name}{host}"
        )


def allow(principal: str, operation: str, resource_type: str = "TOPIC", name: str = "*", **kw):
    return Acl(principal, operation, resource_type, name, **kw)


def deny(principal: str, operation: str, resource_type: str = "TOPIC", name: str = "*", **kw):
    return Acl(principal, operation, resource_type, name, permission="DENY", **kw)


def aclgate_bindings(acls: Sequence[Acl], ns: Namespace):
    """The ACLs as aclgate's AclBinding objects (for its ACL file)."""
    from aclgate.authz.model import AclBinding

    return [
        AclBinding.from_dict(
            {
                "resource_type": a.resource_type,
                "resource_name": a.real_name(ns),
                "pattern_type": a.pattern,
                "principal": a.principal,
                "host": a.host,
                "operation": a.operation,
                "permission_type": a.permission,
            }
        )
        for a in acls
    ]


def kafka_bindings(acls: Sequence[Acl], ns: Namespace) -> list[CkAclBinding]:
    """The ACLs as confluent-kafka AclBinding objects (for Kafka's CreateAcls)."""
    from tests.kafka.acls import KafkaAcls

    return [
        KafkaAcls.binding(
            a.principal,
            a.operation,
            CkResourceType.BROKER if a.resource_type == "CLUSTER" else a.resource_type,
            a.real_name(ns),
            pattern=a.pattern,
            permission=a.permission,
            host=a.host,
        )
        for a in acls
    ]


# --------------------------------------------------------------------------- targets


@dataclass(frozen=True)
class Profile:
    """How one principal reaches one target."""

    principal: str
    bootstrap: str
    config: Mapping[str, Any] = field(default_factory=dict)  # confluent-kafka settings
    sasl: tuple[str, str, str] | None = None  # (mechanism, user, password) for raw requests
    tls: tuple[str, str, str] | None = None  # (CA, certificate, key) PEM paths for raw requests

    def client_config(self, **extra: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "log_level": 3, **self.config, **extra}


@dataclass
class Env:
    """What a script sees of one target while it runs."""

    profiles: Mapping[str, Profile]  # principal -> profile
    observer: Mapping[str, Any]  # confluent-kafka config of a super user, straight to Kafka


class Target:
    """One side of the comparison; `open` applies a scenario's ACLs for the run."""

    key: str  # short, used in names: "kafka" / "aclgate"
    label: str  # column header in the diff

    def open(self, acls: Sequence[Acl], ns: Namespace) -> contextlib.AbstractContextManager[Env]:
        raise NotImplementedError


class KafkaTarget(Target):
    """Apache Kafka reached directly; ACLs go to its StandardAuthorizer (if it has one)."""

    def __init__(
        self,
        label: str,
        profiles: Mapping[str, Profile],
        observer: Mapping[str, Any],
        kafka_acls: Any = None,  # tests.kafka.acls.KafkaAcls, None without an authorizer
        key: str = "kafka",
    ) -> None:
        self.key, self.label = key, label
        self.profiles, self.observer, self.kafka_acls = dict(profiles), dict(observer), kafka_acls

    @contextlib.contextmanager
    def open(self, acls: Sequence[Acl], ns: Namespace) -> Iterator[Env]:
        if acls and self.kafka_acls is None:
            raise ValueError(f"{self.label} has no authorizer: cannot hold ACLs")
        if self.kafka_acls is not None:
            self.kafka_acls.clear()
            self.kafka_acls.add_bindings(kafka_bindings(acls, ns))
        try:
            yield Env(self.profiles, self.observer)
        finally:
            if self.kafka_acls is not None:
                self.kafka_acls.clear()


class ProxyTarget(Target):
    """aclgate in front of an Apache Kafka without an authorizer, holding the ACLs in its file.

    `profiles(proxy)` maps principals to profiles once the proxy runs (its port is ephemeral).
    `authorize=False`: no ACL file and allow-everyone, i.e. a transparent proxy.
    """

    def __init__(
        self,
        label: str,
        upstream: str,
        profiles: Callable[[Any], Mapping[str, Profile]],
        observer: Mapping[str, Any],
        workdir: Path,
        authorize: bool = True,
        key: str = "aclgate",
        **proxy_options: Any,
    ) -> None:
        self.key, self.label = key, label
        self.upstream, self.profiles_for, self.observer = upstream, profiles, dict(observer)
        self.workdir, self.authorize, self.proxy_options = workdir, authorize, proxy_options

    @contextlib.contextmanager
    def open(self, acls: Sequence[Acl], ns: Namespace) -> Iterator[Env]:
        from aclgate.authz.aclfile import dump_acl_file
        from aclgate.proxy.listen.server import ProxyServer
        from tests.fixtures.proxy import RunningProxy, make_config

        options: dict[str, Any] = dict(self.proxy_options)
        if self.authorize:
            acl_file = self.workdir / f"{ns.prefix}acls.json"
            acl_file.write_text(dump_acl_file(aclgate_bindings(acls, ns)))
            options.setdefault("allow_everyone_if_no_acl_found", False)
            options["acl_file"] = acl_file
        elif acls:
            raise ValueError(f"{self.label} does not authorize: cannot hold ACLs")
        proxy = RunningProxy(ProxyServer(make_config(self.upstream, **options)))
        try:
            yield Env(self.profiles_for(proxy), self.observer)
        finally:
            proxy.stop()


# --------------------------------------------------------------------------- names


class Namespace:
    """Per-run prefix for topics, groups and transactional ids."""

    _seq = itertools.count(1)

    def __init__(self, scenario: str, side: str) -> None:
        short = "".join(c for c in scenario if c.isalnum() or c == "-")[:40]
        self.prefix = f"eq{next(self._seq)}-{short}-{side}-{uuid.uuid4().hex[:4]}-"

    def real(self, logical: str) -> str:
        return self.prefix + logical

    def owns(self, real: str) -> bool:
        return real.startswith(self.prefix)

    def logical(self, value: Any) -> Any:
        """`value` with the prefix removed from every string and dict key (normalization
        "names")."""
        if isinstance(value, str):
            return value.replace(self.prefix, "")
        if isinstance(value, dict):
            return {self.logical(k): self.logical(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.logical(v) for v in value]
        return value


# --------------------------------------------------------------------------- errors


def error_name(error: Any) -> str:
    """A Kafka error as its protocol name, e.g. TOPIC_AUTHORIZATION_FAILED (normalization
    "messages"); librdkafka's local errors keep their names (_TIMED_OUT), fatal ones are
    prefixed FATAL:."""
    if isinstance(error, KafkaException) and error.args:
        error = error.args[0]
    if isinstance(error, KafkaError):
        code = error.code()
        name = _protocol_error_name(code) if code > 0 else error.name()
        return f"FATAL:{name}" if error.fatal() else name
    if isinstance(error, int):
        return _protocol_error_name(error)
    return f"{type(error).__name__}"


def _protocol_error_name(code: int) -> str:
    from kio.schema.errors import ErrorCode

    try:
        return ErrorCode(code).name.upper() if code else "NONE"
    except ValueError:
        return f"ERROR_{code}"


def _drain(producer: Producer, timeout: float) -> int:
    """Serve delivery reports until none is outstanding or `timeout`; returns how many are
    left. (Not flush(): confluent-kafka 2.16's flush() can raise SystemError after a fatal
    idempotence error, e.g. CLUSTER_AUTHORIZATION_FAILED from InitProducerId.)"""
    deadline = time.monotonic() + timeout
    while len(producer) and time.monotonic() < deadline:
        try:
            producer.poll(0.1)
        except SystemError:
            time.sleep(0.1)
    return len(producer)


def _future(fut, timeout: float = STEP_TIMEOUT) -> tuple[Any, str | None]:
    """(result, None) or (None, error name) of an Admin API future."""
    try:
        return fut.result(timeout=timeout), None
    except KafkaException as exc:
        return None, error_name(exc)
    except TimeoutError:
        return None, "HARNESS_TIMEOUT"


# --------------------------------------------------------------------------- raw requests


def _raw_client(profile: Profile, api_versions: bool = True):
    """A RawClient connected to the profile's bootstrap: ApiVersions first, as every client
    does (`api_versions=False` skips it: then the next request is the connection's first),
    then SASL/PLAIN if the profile has credentials."""
    from tests.fixtures.rawclient import RawClient, request_entity

    client = RawClient(profile.bootstrap.split(",")[0], timeout=STEP_TIMEOUT)
    if profile.tls:
        import ssl

        ca, cert, key = profile.tls
        context = ssl.create_default_context(cafile=ca)
        context.load_cert_chain(cert, key)
        client.sock = context.wrap_socket(client.sock, server_hostname="127.0.0.1")
    if api_versions:
        av = client.request(
            request_entity(
                18, 3, client_software_name="aclgate-equivalence", client_software_version="1"
            )
        )
        if av.error_code:
            raise RuntimeError(f"ApiVersions failed: {error_name(int(av.error_code))}")
    if profile.sasl:
        mechanism, user, password = profile.sasl
        if mechanism != "PLAIN":
            raise ValueError("raw requests authenticate with SASL/PLAIN only")
        hs = client.request(request_entity(17, 1, mechanism="PLAIN"))
        if hs.error_code:
            raise RuntimeError(f"SaslHandshake failed: {error_name(int(hs.error_code))}")
        auth = client.request(request_entity(36, 2, auth_bytes=f"\0{user}\0{password}".encode()))
        if auth.error_code:
            raise RuntimeError(f"SaslAuthenticate failed: {error_name(int(auth.error_code))}")
    return client


def _find_coordinator(client, key_type: int, key: str, deadline: float) -> str | None:
    """FindCoordinator v4 (0 = group, 1 = transaction) until it answers or fails for good,
    as every client does (it also creates __consumer_offsets / __transaction_state on a fresh
    cluster); None when found, else "FindCoordinator: <error>". Single-node clusters only:
    the coordinator is the node the client is connected to."""
    from kio.static.primitive import i8

    from tests.fixtures.rawclient import request_entity

    find = request_entity(10, 4, key_type=i8(key_type), coordinator_keys=(key,))
    while True:
        name = error_name(int(client.request(find).coordinators[0].error_code))
        if name == "NONE":
            return None
        if name not in RETRIABLE_COORDINATOR_ERRORS or time.monotonic() > deadline:
            return f"FindCoordinator: {name}"
        time.sleep(0.2)


def _init_producer_id(client, txn_id: str | None, deadline: float) -> tuple[Any, str]:
    """InitProducerId v4 (idempotent when `txn_id` is None) until it answers or fails for
    good: (answer, error name). A transactional id is looked up with FindCoordinator first;
    if that fails, (None, its error)."""
    from kio.static.primitive import i16, i32Timedelta, i64

    from tests.fixtures.rawclient import request_entity

    if txn_id is not None:
        failed = _find_coordinator(client, 1, txn_id, deadline)
        if failed:
            return None, failed
    req = request_entity(
        22,
        4,
        transactional_id=txn_id,
        transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        producer_id=i64(-1),
        producer_epoch=i16(-1),
    )
    while True:
        answer = client.request(req)
        name = error_name(int(answer.error_code))
        if name not in RETRIABLE_COORDINATOR_ERRORS or time.monotonic() > deadline:
            return answer, name
        time.sleep(0.2)


def _batch(values: Sequence[str]) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, v in enumerate(values):
        b.append(i, timestamp=None, key=None, value=v.encode(), headers=[])
    return bytes(b.build())


def _decode_records(data: bytes | None) -> list[str]:
    from kafka.record import MemoryRecords

    out: list[str] = []
    if not data:
        return out
    records = MemoryRecords(bytes(data))
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break
        for r in batch:
            out.append(f"@{r.offset}={r.value.decode() if r.value is not None else None}")
    return out


_OPS = {
    2: "ALL",
    3: "READ",
    4: "WRITE",
    5: "CREATE",
    6: "DELETE",
    7: "ALTER",
    8: "DESCRIBE",
    9: "CLUSTER_ACTION",
    10: "DESCRIBE_CONFIGS",
    11: "ALTER_CONFIGS",
    12: "IDEMPOTENT_WRITE",
    13: "CREATE_TOKENS",
    14: "DESCRIBE_TOKENS",
}


def authorized_ops(bits: int) -> list[str] | str:
    """Kafka's authorized-operations bitfield as operation names."""
    if bits == -(2**31):
        return "NOT_REQUESTED"
    return [name for bit, name in _OPS.items() if bits & (1 << bit)]


# --------------------------------------------------------------------------- clients


class Client:
    """The operations a step can perform as one principal; each returns a normalized outcome
    (names still real: the Run strips the namespace afterwards)."""

    def __init__(self, profile: Profile, ns: Namespace) -> None:
        self.profile, self.ns = profile, ns
        self._admin_client: AdminClient | None = None

    def t(self, logical: str) -> str:
        return self.ns.real(logical)

    # ------------------------------------------------------------ produce / consume

    def produce(
        self,
        topic: str,
        values: Sequence[str],
        *,
        partition: int = 0,
        idempotent: bool = False,
        **config: Any,
    ) -> dict[str, Any]:
        """Produce `values` to one partition; per value the delivery ("p0@3") or error name,
        plus errors the producer raised on its own (error_cb), e.g. a fatal idempotence error."""
        errors: list[str] = []
        producer = Producer(
            self.profile.client_config(
                **{
                    "enable.idempotence": idempotent,
                    "message.timeout.ms": int(STEP_TIMEOUT * 1000) - 5000,
                    "linger.ms": 5,
                    "error_cb": lambda e: errors.append(error_name(e)),
                    **config,
                }
            )
        )
        delivered: dict[int, str] = {}

        def report(i: int):
            def cb(err, msg):
                delivered[i] = error_name(err) if err else f"p{msg.partition()}@{msg.offset()}"

            return cb

        for i, v in enumerate(values):
            try:
                producer.produce(
                    self.t(topic), v.encode(), partition=partition, on_delivery=report(i)
                )
            except (KafkaException, BufferError) as exc:
                delivered[i] = f"produce() raised {error_name(exc)}"
        remaining = _drain(producer, STEP_TIMEOUT)
        out: dict[str, Any] = {
            "delivery": [delivered.get(i, "NO_DELIVERY_REPORT") for i in range(len(values))]
        }
        client_errors = sorted(set(errors) - TRANSIENT_ERRORS)  # normalization "timing"
        if client_errors:
            out["client_errors"] = client_errors
        if remaining:
            out["undelivered"] = remaining
        return out

    def consume(
        self,
        topics: str | Sequence[str],
        group: str,
        want: int,
        *,
        commit: bool = True,
        **config: Any,
    ) -> dict[str, Any]:
        """Subscribe in `group`, poll until `want` records or the first error (or timeout),
        then commit synchronously. Records as "topic:p0@3=value"."""
        topics = [topics] if isinstance(topics, str) else list(topics)
        settings: dict[str, Any] = {
            "group.id": self.t(group),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **config,
        }
        if settings.get("group.protocol") != "consumer":
            settings.setdefault("session.timeout.ms", SESSION_TIMEOUT_MS)
        consumer = Consumer(self.profile.client_config(**settings))
        records: list[str] = []
        error: str | None = None
        try:
            consumer.subscribe([self.t(t) for t in topics])
            deadline = time.monotonic() + STEP_TIMEOUT - 5
            while len(records) < want and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    name = error_name(msg.error())
                    if name in TRANSIENT_ERRORS:  # normalization "timing"
                        continue
                    error = name
                    break
                records.append(
                    f"{msg.topic()}:p{msg.partition()}@{msg.offset()}={msg.value().decode()}"
                )
            out: dict[str, Any] = {"records": sorted(records), "error": error}
            if len(records) < want and error is None:
                out["error"] = "HARNESS_TIMEOUT"
            if commit and records:
                try:
                    consumer.commit(asynchronous=False)
                    out["commit"] = "ok"
                except KafkaException as exc:
                    out["commit"] = error_name(exc)
            return out
        finally:
            consumer.close()

    def transaction(
        self,
        txn_id: str,
        topic: str,
        values: Sequence[str],
        *,
        commit: bool = True,
        offsets_group: str | None = None,
    ) -> dict[str, Any]:
        """init_transactions, begin, produce `values`, (send offsets), commit or abort; each
        phase's outcome; stops at the first failing phase."""
        out: dict[str, Any] = {}
        errors: list[str] = []
        producer = Producer(
            self.profile.client_config(
                **{
                    "transactional.id": self.t(txn_id),
                    "transaction.timeout.ms": 30000,
                    "message.timeout.ms": int(STEP_TIMEOUT * 1000) - 5000,
                    "error_cb": lambda e: errors.append(error_name(e)),
                }
            )
        )
        delivered: dict[int, str] = {}

        def phase(name: str, fn: Callable[[], Any]) -> bool:
            try:
                fn()
                out[name] = "ok"
                return True
            except KafkaException as exc:
                out[name] = error_name(exc)
                return False

        def produce_all() -> None:
            for i, v in enumerate(values):

                def cb(err, msg, i=i):
                    delivered[i] = error_name(err) if err else f"p{msg.partition()}@{msg.offset()}"

                producer.produce(self.t(topic), v.encode(), partition=0, on_delivery=cb)
            _drain(producer, STEP_TIMEOUT - 5)
            out["delivery"] = [delivered.get(i, "NO_DELIVERY_REPORT") for i in range(len(values))]

        ok = phase("init", lambda: producer.init_transactions(STEP_TIMEOUT))
        ok = ok and phase("begin", producer.begin_transaction)
        ok = ok and phase("produce", produce_all)
        if ok and offsets_group:
            # group metadata comes from a consumer of that group (it never contacts Kafka)
            member = Consumer(self.profile.client_config(**{"group.id": self.t(offsets_group)}))
            try:
                ok = phase(
                    "send_offsets",
                    lambda: producer.send_offsets_to_transaction(
                        [TopicPartition(self.t(topic), 0, len(values))],
                        member.consumer_group_metadata(),
                        STEP_TIMEOUT,
                    ),
                )
            finally:
                member.close()
        if ok:
            if commit:
                phase("commit", lambda: producer.commit_transaction(STEP_TIMEOUT))
            else:
                phase("abort", lambda: producer.abort_transaction(STEP_TIMEOUT))
        client_errors = sorted(set(errors) - TRANSIENT_ERRORS)
        if client_errors:
            out["client_errors"] = client_errors
        return out

    # ------------------------------------------------------------ raw requests

    def raw_produce(
        self, batches: Mapping[str, Sequence[str]], acks: int = -1, *, first: bool = False
    ) -> dict:
        """ONE Produce request (v9) with a batch per topic (partition 0): the per-topic
        partition results ("@base_offset" or error name). acks=0: whether the peer closed
        the connection within 3 s. `first`: no ApiVersions before it (PLAINTEXT only)."""
        from kio.static.primitive import i16, i32, i32Timedelta

        from tests.fixtures.rawclient import module, request_entity

        m = module(0, 9)
        req = request_entity(
            0,
            9,
            acks=i16(acks),
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
            topic_data=tuple(
                m.TopicProduceData(
                    name=self.t(topic),
                    partition_data=(m.PartitionProduceData(index=i32(0), records=_batch(vals)),),
                )
                for topic, vals in batches.items()
            ),
        )
        with _raw_client(self.profile, api_versions=not first) as client:
            if acks == 0:  # no response; a denial closes the connection (as the broker does)
                client.send(req)
                return {"connection_closed": client.is_closed_by_peer(timeout=3.0)}
            resp = client.request(req)
        return {
            r.name: {
                f"p{p.index}": f"@{p.base_offset}"
                if p.error_code == 0
                else error_name(p.error_code)
                for p in r.partition_responses
            }
            for r in resp.responses
        }

    def raw_fetch(self, topics: Sequence[str]) -> dict:
        """ONE sessionless Fetch request (v12) for partition 0 of each topic from offset 0:
        per topic the error name and the records."""
        from kio.static.primitive import i32, i32Timedelta, i64

        from tests.fixtures.rawclient import module, request_entity

        m = module(1, 12)
        req = request_entity(
            1,
            12,
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=200)),
            min_bytes=i32(1),
            topics=tuple(
                m.FetchTopic(
                    topic=self.t(t),
                    partitions=(
                        m.FetchPartition(
                            partition=i32(0),
                            fetch_offset=i64(0),
                            log_start_offset=i64(-1),
                            partition_max_bytes=i32(1 << 20),
                        ),
                    ),
                )
                for t in topics
            ),
            forgotten_topics_data=(),
        )
        with _raw_client(self.profile) as client:
            resp = client.request(req)
        out: dict[str, Any] = {}
        if resp.error_code:
            out["error"] = error_name(int(resp.error_code))
        for r in resp.responses:
            for p in r.partitions:
                out[f"{r.topic}:p{p.partition_index}"] = {
                    "error": error_name(int(p.error_code)),
                    "high_watermark": p.high_watermark,
                    "records": _decode_records(p.records),
                }
        return out

    def raw_metadata(
        self, topics: Sequence[str] | None = None, *, auto_create: bool = False
    ) -> dict:
        """Metadata v12: brokers (ids only), and per topic of the run's namespace its error,
        partition count and authorized operations."""
        from tests.fixtures.rawclient import module, request_entity

        m = module(3, 12)
        req = request_entity(
            3,
            12,
            topics=None
            if topics is None
            else tuple(m.MetadataRequestTopic(name=self.t(t), topic_id=None) for t in topics),
            allow_auto_topic_creation=auto_create,
            include_topic_authorized_operations=True,
        )
        with _raw_client(self.profile) as client:
            resp = client.request(req)
        out: dict[str, Any] = {"brokers": sorted(int(b.node_id) for b in resp.brokers)}
        for t in resp.topics:
            if t.name is None or not self.ns.owns(t.name):  # normalization "foreign"
                continue
            out[t.name] = {
                "error": error_name(int(t.error_code)),
                "partitions": len(t.partitions),
                "internal": t.is_internal,
                "authorized_operations": authorized_ops(int(t.topic_authorized_operations)),
            }
        return out

    # ------------------------------------------------------------ ACL admin (keys 29-31)
    # ACLs are given as (resource type, name, pattern type, principal, host, operation,
    # permission): enum names, or raw codes (ints) to send what no client would. Names are
    # the script's logical names, except the cluster's, "*" and "". Error messages are kept
    # (Kafka's validation messages are part of the behaviour) except with 31: Kafka's own
    # names internal request details (normalization "messages").

    def _acl_name(self, resource_type: int, name: str | None) -> str | None:
        if name is None or name in ("", "*") or resource_type == 4:
            return name
        return self.t(name)

    @staticmethod
    def _acl_codes(
        acl: Sequence[Any],
    ) -> tuple[int, str | None, int, str | None, str | None, int, int]:
        from aclgate.authz.model import (
            AclOperation,
            AclPermissionType,
            PatternType,
            ResourceType,
        )

        def code(enum: Any, value: Any) -> int:
            return value if isinstance(value, int) else int(enum[value])

        rtype, name, pattern, principal, host, op, perm = acl
        return (
            code(ResourceType, rtype),
            name,
            code(PatternType, pattern),
            principal,
            host,
            code(AclOperation, op),
            code(AclPermissionType, perm),
        )

    @staticmethod
    def _acl_text(rtype: int, name: str, pattern: int, principal: str, host: str, op: int,
                  perm: int) -> str:  # fmt: skip
        from aclgate.authz.model import (
            AclOperation,
            AclPermissionType,
            PatternType,
            ResourceType,
        )

        return (
            f"{ResourceType(rtype).name}:{PatternType(pattern).name}:{name} {principal}@{host} "
            f"{AclOperation(op).name} {AclPermissionType(perm).name}"
        )

    @staticmethod
    def _acl_error(code: int, message: str | None) -> dict[str, Any]:
        return {"error": error_name(code), "message": None if code == 31 else message}

    def _acl_request(self, body: Any) -> Any:
        """The answer, or "CONNECTION_CLOSED" when the target closes on the request."""
        with _raw_client(self.profile) as client:
            try:
                return client.request(body)
            except (AssertionError, OSError):
                return "CONNECTION_CLOSED"

    def raw_create_acls(self, creations: Sequence[Sequence[Any]], version: int = 3) -> Any:
        """CreateAcls: per creation its error and message."""
        from kio.static.primitive import i8

        from tests.fixtures.rawclient import module, request_entity

        m = module(30, version)
        entries = []
        for acl in creations:
            rtype, name, pattern, principal, host, op, perm = self._acl_codes(acl)
            entries.append(
                m.AclCreation(
                    resource_type=i8(rtype),
                    resource_name=self._acl_name(rtype, name),
                    resource_pattern_type=i8(pattern),
                    principal=principal,
                    host=host,
                    operation=i8(op),
                    permission_type=i8(perm),
                )
            )
        resp = self._acl_request(request_entity(30, version, creations=tuple(entries)))
        if isinstance(resp, str):
            return resp
        return [self._acl_error(int(r.error_code), r.error_message) for r in resp.results]

    def _acl_filter_fields(self, flt: Sequence[Any]) -> dict[str, Any]:
        from kio.static.primitive import i8

        rtype, name, pattern, principal, host, op, perm = self._acl_codes(flt)
        return {
            "resource_type_filter": i8(rtype),
            "resource_name_filter": self._acl_name(rtype, name),
            "pattern_type_filter": i8(pattern),
            "principal_filter": principal,
            "host_filter": host,
            "operation": i8(op),
            "permission_type": i8(perm),
        }

    def raw_describe_acls(self, flt: Sequence[Any], version: int = 3) -> Any:
        """DescribeAcls: the error, and the ACLs found, sorted (Kafka answers in hash order)."""
        from tests.fixtures.rawclient import request_entity

        resp = self._acl_request(request_entity(29, version, **self._acl_filter_fields(flt)))
        if isinstance(resp, str):
            return resp
        found = sorted(
            self._acl_text(int(r.resource_type), r.resource_name, int(r.pattern_type),
                           a.principal, a.host, int(a.operation), int(a.permission_type))
            for r in resp.resources
            for a in r.acls
        )  # fmt: skip
        return {**self._acl_error(int(resp.error_code), resp.error_message), "acls": found}

    def raw_delete_acls(self, filters: Sequence[Sequence[Any]], version: int = 3) -> Any:
        """DeleteAcls: per filter its error and the ACLs it matched, sorted."""
        from tests.fixtures.rawclient import module, request_entity

        m = module(31, version)
        body = request_entity(
            31,
            version,
            filters=tuple(m.DeleteAclsFilter(**self._acl_filter_fields(f)) for f in filters),
        )
        resp = self._acl_request(body)
        if isinstance(resp, str):
            return resp
        return [
            {
                **self._acl_error(int(r.error_code), r.error_message),
                "matched": sorted(
                    self._acl_text(
                        int(a.resource_type),
                        a.resource_name,
                        int(a.pattern_type),
                        a.principal,
                        a.host,
                        int(a.operation),
                        int(a.permission_type),
                    )
                    + ("" if int(a.error_code) == 0 else f" {error_name(int(a.error_code))}")
                    for a in r.matching_acls
                ),
            }
            for r in resp.filter_results
        ]

    def raw_init_producer_id(self, txn_id: str | None = None) -> str:
        """InitProducerId v4 (idempotent when `txn_id` is None): the error name. With a
        transactional id, FindCoordinator v4 first, as every client does (it also creates
        __transaction_state on a fresh cluster); its error, if any, is the outcome."""
        deadline = time.monotonic() + STEP_TIMEOUT - 5
        with _raw_client(self.profile) as client:
            return _init_producer_id(client, None if txn_id is None else self.t(txn_id), deadline)[
                1
            ]

    def raw_add_partitions_to_txn(self, txn_id: str, partitions: Mapping[str, Sequence[int]]):
        """FindCoordinator + InitProducerId for `txn_id`, then ONE AddPartitionsToTxn v3 (what
        producers send): the error name per "topic:pN", or the first failing step's error."""
        from kio.static.primitive import i32

        from tests.fixtures.rawclient import module, request_entity

        m = module(24, 3)
        deadline = time.monotonic() + STEP_TIMEOUT - 5
        with _raw_client(self.profile) as client:
            producer, name = _init_producer_id(client, self.t(txn_id), deadline)
            if producer is None:
                return name
            if name != "NONE":
                return f"InitProducerId: {name}"
            resp = client.request(
                request_entity(
                    24,
                    3,
                    v3_and_below_transactional_id=self.t(txn_id),
                    v3_and_below_producer_id=producer.producer_id,
                    v3_and_below_producer_epoch=producer.producer_epoch,
                    v3_and_below_topics=tuple(
                        m.AddPartitionsToTxnTopic(
                            name=self.t(topic), partitions=tuple(i32(p) for p in parts)
                        )
                        for topic, parts in partitions.items()
                    ),
                )
            )
        return {
            f"{r.name}:p{p.partition_index}": error_name(int(p.partition_error_code))
            for r in resp.results_by_topic_v3_and_below
            for p in r.results_by_partition
        }

    def raw_delete_topics(
        self, entries: Sequence[tuple[str | None, str | None]], version: int = 6
    ) -> list[str]:
        """ONE DeleteTopics with (name, id label) entries, None for an absent name or a
        zero id; a label stands for a fixed id no topic has (v5: names only). Per result
        "name|id|error|message", sorted (Kafka shuffles them)."""
        from kio.static.primitive import i32Timedelta

        from tests.fixtures.rawclient import module, request_entity

        ids = {label: uuid.uuid5(uuid.NAMESPACE_OID, label) for _, label in entries if label}
        labels = {v: k for k, v in ids.items()}
        m = module(20, version)
        timeout = i32Timedelta.parse(datetime.timedelta(seconds=STEP_TIMEOUT - 5))
        if version < 6:
            req = request_entity(
                20, version, topic_names=tuple(self.t(n) for n, _ in entries), timeout=timeout
            )
        else:
            req = request_entity(
                20,
                version,
                topics=tuple(
                    m.DeleteTopicState(
                        name=None if name is None else self.t(name),
                        topic_id=ids[label] if label else uuid.UUID(int=0),
                    )
                    for name, label in entries
                ),
                timeout=timeout,
            )
        with _raw_client(self.profile) as client:
            resp = client.request(req)
        return sorted(
            "|".join(
                (
                    "-" if r.name is None else self.ns.logical(r.name),
                    "zero"
                    if getattr(r, "topic_id", None) in (None, uuid.UUID(int=0))
                    else labels.get(r.topic_id, "other"),
                    error_name(int(r.error_code)),
                    str(r.error_message),
                )
            )
            for r in resp.responses
        )

    def raw_commit_offsets(self, group: str, offsets: Mapping[str, int]) -> Any:
        """FindCoordinator, then OffsetCommit v8 outside any generation (generation -1, no
        member: what admin tools send) for partition 0 of each topic: per-partition errors,
        or the FindCoordinator error."""
        from kio.static.primitive import i32, i64

        from tests.fixtures.rawclient import module, request_entity

        m = module(8, 8)
        req = request_entity(
            8,
            8,
            group_id=self.t(group),
            generation_id_or_member_epoch=i32(-1),
            member_id="",
            group_instance_id=None,
            topics=tuple(
                m.OffsetCommitRequestTopic(
                    name=self.t(t),
                    partitions=(
                        m.OffsetCommitRequestPartition(
                            partition_index=i32(0),
                            committed_offset=i64(o),
                            committed_leader_epoch=i32(-1),
                            committed_metadata="",
                        ),
                    ),
                )
                for t, o in offsets.items()
            ),
        )
        deadline = time.monotonic() + STEP_TIMEOUT - 5
        with _raw_client(self.profile) as client:
            failed = _find_coordinator(client, 0, self.t(group), deadline)
            if failed:
                return failed
            while True:
                resp = client.request(req)
                errors = {
                    f"{t.name}:p{p.partition_index}": error_name(int(p.error_code))
                    for t in resp.topics
                    for p in t.partitions
                }
                retry = set(errors.values()) & RETRIABLE_COORDINATOR_ERRORS
                if not retry or time.monotonic() > deadline:
                    return errors
                time.sleep(0.2)

    def raw(
        self,
        api_key: int,
        version: int,
        *,
        coordinator: tuple[int, str] | None = None,
        drop: Sequence[str] = (),
        keep: Sequence[str] = (),
        foreign: bool = True,
        unordered: Sequence[str] = (),
        until: Callable[[Any], bool] | None = None,
        **fields: Any,
    ) -> Any:
        """ONE request of any API, written as plain data with kio's field names (real names:
        use `self.t`), answered as normalized plain data (tests/equivalence/rawapi.py).
        `coordinator` = (key type, logical key): FindCoordinator first, as clients do.
        Answers holding a retriable coordinator error are asked again (normalization
        "retries"); lists under the `unordered` field names are compared sorted
        (normalization "order"); with `until`, an answer it rejects is asked again
        until the step's time is up (normalization "eventual"); fields named in `keep` are
        compared although DROPPED_FIELDS would drop them (an error message that is Kafka's
        behaviour); "CONNECTION_CLOSED" when the target closes instead of answering."""
        from aclgate.protocol.versions import request_class
        from tests.equivalence.rawapi import build, normalize

        body = build(request_class(api_key, version), fields)
        deadline = time.monotonic() + STEP_TIMEOUT - 5
        with _raw_client(self.profile) as client:
            if coordinator is not None:
                failed = _find_coordinator(client, coordinator[0], self.t(coordinator[1]), deadline)
                if failed:
                    return failed
            while True:
                try:
                    answer = client.request(body)
                except (AssertionError, OSError):
                    return "CONNECTION_CLOSED"
                out = normalize(
                    answer,
                    self.ns.owns,
                    drop=frozenset(drop),
                    keep=frozenset(keep),
                    foreign=foreign,
                    unordered=frozenset(unordered),
                )
                text = json.dumps(out)
                retry = any(e in text for e in RETRIABLE_COORDINATOR_ERRORS)
                if time.monotonic() > deadline or not (retry or (until and not until(out))):
                    return out
                time.sleep(0.2)

    # ------------------------------------------------------------ admin

    def _admin(self) -> AdminClient:
        """This step's AdminClient; kept on the Client, as futures die with their client."""
        if self._admin_client is None:
            self._admin_client = AdminClient(self.profile.client_config())
        return self._admin_client

    def create_topics(self, names: Sequence[str], partitions: int = 1) -> dict[str, str]:
        futures = self._admin().create_topics(
            [NewTopic(self.t(n), partitions, 1) for n in names],
            operation_timeout=STEP_TIMEOUT - 5,
            request_timeout=STEP_TIMEOUT,
        )
        return {name: _future(f)[1] or "ok" for name, f in futures.items()}

    def delete_topics(self, names: Sequence[str]) -> dict[str, str]:
        futures = self._admin().delete_topics(
            [self.t(n) for n in names],
            operation_timeout=STEP_TIMEOUT - 5,
            request_timeout=STEP_TIMEOUT,
        )
        return {name: _future(f)[1] or "ok" for name, f in futures.items()}

    def describe_configs(
        self,
        topic: str,
        keys: Sequence[str] = ("cleanup.policy",),
        until: Callable[[Any], bool] | None = None,
    ) -> Any:
        """The topic's values of `keys`; with `until`, asked again until it accepts them or
        the step's time is up (normalization "eventual": the broker applies a config change
        from its metadata log after answering it)."""
        from confluent_kafka.admin import ConfigResource

        res = ConfigResource("TOPIC", self.t(topic))
        deadline = time.monotonic() + STEP_TIMEOUT - 5
        while True:
            result, err = _future(self._admin().describe_configs([res])[res])
            out = err if err else {k: result[k].value for k in keys if k in result}
            if until is None or until(out) or time.monotonic() > deadline:
                return out
            time.sleep(0.2)

    def list_topics(self) -> Any:
        """AdminClient.list_topics(): the run's topics that are listed, without errors."""
        try:
            md = self._admin().list_topics(timeout=STEP_TIMEOUT)
        except KafkaException as exc:
            return error_name(exc)
        return sorted(
            t for t, tm in md.topics.items() if self.ns.owns(t) and tm.error is None
        )  # normalization "foreign"

    def list_groups(self) -> Any:
        result, err = _future(self._admin().list_consumer_groups(request_timeout=STEP_TIMEOUT))
        if err:
            return err
        out: dict[str, Any] = {
            "groups": sorted(g.group_id for g in result.valid if self.ns.owns(g.group_id))
        }
        if result.errors:
            out["errors"] = sorted(error_name(e) for e in result.errors)
        return out

    def describe_groups(self, groups: Sequence[str]) -> dict[str, Any]:
        futures = self._admin().describe_consumer_groups(
            [self.t(g) for g in groups],
            request_timeout=STEP_TIMEOUT,
            include_authorized_operations=True,
        )
        out: dict[str, Any] = {}
        for name, f in futures.items():
            result, err = _future(f)
            out[name] = err or {
                "state": result.state.name,
                "members": len(result.members),
                "authorized_operations": sorted(
                    op.name for op in (result.authorized_operations or [])
                ),
            }
        return out

    def delete_groups(self, groups: Sequence[str]) -> dict[str, str]:
        futures = self._admin().delete_consumer_groups(
            [self.t(g) for g in groups], request_timeout=STEP_TIMEOUT
        )
        return {name: _future(f)[1] or "ok" for name, f in futures.items()}

    def group_offsets(self, group: str) -> Any:
        """list_consumer_group_offsets: committed offsets by "topic:p0", or the error."""
        fut = self._admin().list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(self.t(group))], request_timeout=STEP_TIMEOUT
        )[self.t(group)]
        result, err = _future(fut)
        if err:
            return err
        return {
            f"{tp.topic}:p{tp.partition}": tp.offset if tp.error is None else error_name(tp.error)
            for tp in result.topic_partitions
        }

    def list_offsets(self, topics: Sequence[str], spec: str = "latest") -> dict[str, Any]:
        """ListOffsets for partition 0 of each topic (one request): offset or error name."""
        tps = {TopicPartition(self.t(t), 0): getattr(OffsetSpec, spec)() for t in topics}
        futures = self._admin().list_offsets(tps, request_timeout=STEP_TIMEOUT)
        out: dict[str, Any] = {}
        for tp, f in futures.items():
            result, err = _future(f)
            out[f"{tp.topic}:p{tp.partition}"] = err or result.offset
        return out

    def commit_offsets(self, group: str, offsets: Mapping[str, int]) -> Any:
        """OffsetCommit outside any generation (the group is created empty if new) for
        partition 0 of each topic: "ok" or the error name."""
        c = Consumer(
            self.profile.client_config(**{"group.id": self.t(group), "enable.auto.commit": False})
        )
        try:
            result = c.commit(
                offsets=[TopicPartition(self.t(t), 0, o) for t, o in offsets.items()],
                asynchronous=False,
            )
        except KafkaException as exc:
            return error_name(exc)
        finally:
            c.close()
        errors = sorted({error_name(tp.error) for tp in result or [] if tp.error})
        return errors or "ok"

    def describe_cluster(self) -> Any:
        result, err = _future(
            self._admin().describe_cluster(
                include_authorized_operations=True, request_timeout=STEP_TIMEOUT
            )
        )
        if err:
            return err
        return {
            "nodes": sorted(n.id for n in result.nodes),
            "controller": result.controller.id if result.controller else None,
            "authorized_operations": sorted(op.name for op in (result.authorized_operations or [])),
        }

    def _alter_configs(self, topics: Mapping[str, Mapping[str, str]], incremental: bool) -> Any:
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        resources = []
        for topic, configs in topics.items():
            if incremental:
                entries = [
                    ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                    for k, v in configs.items()
                ]
                resources.append(
                    ConfigResource("TOPIC", self.t(topic), incremental_configs=entries)
                )
            else:
                resources.append(ConfigResource("TOPIC", self.t(topic), set_config=dict(configs)))
        admin = self._admin()
        call = admin.incremental_alter_configs if incremental else admin.alter_configs
        futures = call(resources, request_timeout=STEP_TIMEOUT)
        return {res.name: _future(f)[1] or "ok" for res, f in futures.items()}

    def incremental_alter_configs(self, topics: Mapping[str, Mapping[str, str]]) -> Any:
        """AdminClient.incremental_alter_configs (SET) per topic: "ok" or the error."""
        return self._alter_configs(topics, incremental=True)

    def alter_configs(self, topics: Mapping[str, Mapping[str, str]]) -> Any:
        """AdminClient.alter_configs (legacy AlterConfigs) per topic: "ok" or the error."""
        return self._alter_configs(topics, incremental=False)

    def create_partitions(self, counts: Mapping[str, int]) -> dict[str, str]:
        from confluent_kafka.admin import NewPartitions

        futures = self._admin().create_partitions(
            [NewPartitions(self.t(t), n) for t, n in counts.items()],
            operation_timeout=STEP_TIMEOUT - 5,
            request_timeout=STEP_TIMEOUT,
        )
        return {name: _future(f)[1] or "ok" for name, f in futures.items()}

    def delete_records(self, before: Mapping[str, int]) -> dict[str, Any]:
        """AdminClient.delete_records on partition 0: the new low watermark or the error."""
        futures = self._admin().delete_records(
            [TopicPartition(self.t(t), 0, o) for t, o in before.items()],
            request_timeout=STEP_TIMEOUT,
            operation_timeout=STEP_TIMEOUT - 5,
        )
        out: dict[str, Any] = {}
        for tp, f in futures.items():
            result, err = _future(f)
            out[tp.topic] = err or result.low_watermark
        return out

    def describe_topics(self, topics: Sequence[str]) -> dict[str, Any]:
        """AdminClient.describe_topics (DescribeTopicPartitions): partition count, internal
        flag and authorized operations per topic, or the error."""
        from confluent_kafka import TopicCollection

        futures = self._admin().describe_topics(
            TopicCollection([self.t(t) for t in topics]),
            request_timeout=STEP_TIMEOUT,
            include_authorized_operations=True,
        )
        out: dict[str, Any] = {}
        for name, f in futures.items():
            result, err = _future(f)
            out[name] = err or {
                "partitions": len(result.partitions),
                "internal": result.is_internal,
                "authorized_operations": sorted(
                    op.name for op in (result.authorized_operations or [])
                ),
            }
        return out

    def describe_user_scram_credentials(self, users: Sequence[str]) -> dict[str, Any]:
        """AdminClient.describe_user_scram_credentials: mechanisms and iterations per user,
        or the error."""
        futures = self._admin().describe_user_scram_credentials(
            [self.t(u) for u in users], request_timeout=STEP_TIMEOUT
        )
        out: dict[str, Any] = {}
        for name, f in futures.items():
            result, err = _future(f)
            out[name] = err or sorted(
                f"{i.mechanism.name}/{i.iterations}" for i in result.scram_credential_infos
            )
        return out


class Observer(Client):
    """The super user, straight to the cluster: setup (not compared) and ground truth."""

    def __init__(self, config: Mapping[str, Any], ns: Namespace) -> None:
        # raw requests log in as the super user too where its listener wants SASL/PLAIN
        plain = config.get("sasl.mechanism") == "PLAIN"
        sasl = ("PLAIN", config["sasl.username"], config["sasl.password"]) if plain else None
        super().__init__(Profile("observer", config["bootstrap.servers"], config, sasl), ns)

    def broker_ids(self) -> list[int]:
        return sorted(self._admin().list_topics(timeout=STEP_TIMEOUT).brokers)

    def bootstrap_node(self) -> int:
        """The node behind the first bootstrap address (the proxy's bootstrap listener
        relays to the same first upstream address)."""
        first = self.profile.bootstrap.split(",")[0]
        brokers = self._admin().list_topics(timeout=STEP_TIMEOUT).brokers
        return next(b.id for b in brokers.values() if f"{b.host}:{b.port}" == first)

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        records: Sequence[str] = (),
        *,
        off_bootstrap: bool = False,
    ) -> None:
        """`off_bootstrap`: on a multi-node cluster every partition's only replica (its
        leader) is the highest node id, never the bootstrap node (checked)."""
        admin = self._admin()
        topic = NewTopic(self.t(name), partitions, 1)
        brokers = self.broker_ids()
        avoid = -1  # a node no partition may be led by
        if off_bootstrap and len(brokers) > 1:
            avoid = self.bootstrap_node()
            leader = max(set(brokers) - {avoid})
            # confluent-kafka 2.16 wants the count with an assignment (its docs say -1)
            topic = NewTopic(
                self.t(name), partitions, -1, replica_assignment=[[leader]] * partitions
            )
        admin.create_topics([topic])[self.t(name)].result(STEP_TIMEOUT)
        deadline = time.monotonic() + STEP_TIMEOUT
        while True:
            md = admin.list_topics(topic=self.t(name), timeout=STEP_TIMEOUT)
            tm = md.topics.get(self.t(name))
            if (
                tm is not None
                and tm.error is None
                and len(tm.partitions) == partitions
                and all(p.leader >= 0 for p in tm.partitions.values())
            ):
                if any(p.leader == avoid for p in tm.partitions.values()):
                    raise RuntimeError(f"topic {name}: a partition is led by node {avoid}")
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name} not ready")
            time.sleep(0.05)
        if records:
            p = Producer(self.profile.client_config(**{"linger.ms": 0}))
            for v in records:
                p.produce(self.t(name), v.encode(), partition=0)
            if p.flush(STEP_TIMEOUT):
                raise TimeoutError(f"records for {name} not delivered")

    def records(self, topic: str, partition: int = 0) -> list[str]:
        """Every record in the partition ("@offset=value"), read up to the high watermark."""
        c = Consumer(
            self.profile.client_config(
                **{"group.id": f"{self.ns.prefix}observer", "enable.auto.commit": False}
            )
        )
        try:
            tp = TopicPartition(self.t(topic), partition)
            lo, hi = c.get_watermark_offsets(tp, timeout=STEP_TIMEOUT)
            out: list[str] = []
            if hi <= lo:
                return out
            c.assign([TopicPartition(self.t(topic), partition, lo)])
            deadline = time.monotonic() + STEP_TIMEOUT
            while time.monotonic() < deadline:
                msg = c.poll(0.2)
                if msg is not None and not msg.error():
                    out.append(f"@{msg.offset()}={msg.value().decode()}")
                # the position passes transaction markers, which poll() never returns
                if c.position([TopicPartition(self.t(topic), partition)])[0].offset >= hi:
                    break
            return out
        finally:
            c.close()

    def topic_id(self, topic: str) -> str:
        """The topic's id on this side's cluster, for requests that name topics by id."""
        from confluent_kafka import TopicCollection

        fut = self._admin().describe_topics(
            TopicCollection([self.t(topic)]), request_timeout=STEP_TIMEOUT
        )[self.t(topic)]
        tid = fut.result(STEP_TIMEOUT).topic_id
        mask = (1 << 64) - 1
        msb, lsb = tid.get_most_significant_bits(), tid.get_least_significant_bits()
        return str(uuid.UUID(int=((msb & mask) << 64) | (lsb & mask)))

    def off_bootstrap(self, key_type: int, candidates: Sequence[str]) -> str:
        """The first logical group (key_type 0) or transactional id (1) of `candidates` whose
        coordinator is not the bootstrap node (FindCoordinator v4, one request); the first
        candidate on a single-node cluster. Setup, not compared: scripts keep the chosen
        name out of outcomes (step names and results stay the same on both sides)."""
        from kio.static.primitive import i8

        from tests.fixtures.rawclient import request_entity

        if len(self.broker_ids()) == 1:
            return candidates[0]
        # FindCoordinator creates __consumer_offsets / __transaction_state if need be; the
        # loop asks again until every key has its coordinator
        bootstrap = self.bootstrap_node()
        deadline = time.monotonic() + STEP_TIMEOUT
        with _raw_client(self.profile) as client:
            while time.monotonic() < deadline:
                answer = client.request(
                    request_entity(
                        10,
                        4,
                        key_type=i8(key_type),
                        coordinator_keys=tuple(self.t(c) for c in candidates),
                    )
                )
                found = {c.key: int(c.node_id) for c in answer.coordinators if c.error_code == 0}
                if len(found) == len(candidates):
                    for c in candidates:
                        if found[self.t(c)] != bootstrap:
                            return c
                    raise RuntimeError(f"every candidate's coordinator is node {bootstrap}")
                time.sleep(0.2)
        raise TimeoutError("FindCoordinator did not answer for every candidate")

    def partition_count(self, topic: str) -> int | str:
        md = self._admin().list_topics(topic=self.t(topic), timeout=STEP_TIMEOUT)
        tm = md.topics.get(self.t(topic))
        if tm is None or tm.error is not None:
            return error_name(tm.error) if tm is not None else "ABSENT"
        return len(tm.partitions)

    def topic_exists(self, topic: str, wait: float = 0.0) -> bool:
        """Whether the topic exists (waiting up to `wait` seconds for it to appear)."""
        admin = self._admin()
        deadline = time.monotonic() + wait
        while True:
            md = admin.list_topics(timeout=STEP_TIMEOUT)
            if self.t(topic) in md.topics:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)


# --------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class Outcome:
    step: str
    principal: str
    result: Any
    seconds: float = 0.0


class Run:
    """One execution of a script against one target."""

    def __init__(self, target: Target, env: Env, ns: Namespace) -> None:
        self.target, self.env, self.ns = target, env, ns
        self.observer = Observer(env.observer, ns)
        self.outcomes: list[Outcome] = []

    def step(self, name: str, principal: str, action: Callable[[Client], Any]) -> Any:
        """Perform `action` as `principal`; record and return the normalized outcome."""
        profile = self.env.profiles[principal]
        return self._record(name, principal, lambda: action(Client(profile, self.ns)))

    def observe(self, name: str, action: Callable[[Observer], Any]) -> Any:
        """Read ground truth as the observer; recorded and compared like a step."""
        return self._record(name, "observer", lambda: action(self.observer))

    def _record(self, name: str, principal: str, fn: Callable[[], Any]) -> Any:
        t0 = time.monotonic()
        try:
            result = fn()
        except KafkaException as exc:
            result = {"exception": error_name(exc)}
        except (OSError, RuntimeError, ValueError, AssertionError) as exc:
            result = {"exception": f"{type(exc).__name__}: {self.ns.logical(str(exc))}"}
        result = json.loads(json.dumps(self.ns.logical(result), sort_keys=True, default=str))
        self.outcomes.append(Outcome(name, principal, result, time.monotonic() - t0))
        return result


@dataclass(frozen=True)
class Scenario:
    """A named script: ACLs in force for the whole run, and the steps."""

    name: str
    doc: str
    script: Callable[[Run], None]
    acls: tuple[Acl, ...] = ()
    principals: tuple[str, ...] = ("User:ANONYMOUS",)
    xfail: str | None = None  # a known proxy difference: the exact difference and the file
    #: (version, reason): the same, but only against Kafka older than `version` (the
    #: version matrix, docs/kafka.md)
    xfail_before: tuple[str, str] | None = None
    #: (version, feature): skipped against Kafka older than `version`, which lacks `feature`
    since: tuple[str, str] | None = None
    #: step name -> why it differs: a deliberate difference listed in docs/design.md
    #: ("Deliberate differences from Apache Kafka"). Such a step must still differ (an
    #: explanation that no longer applies fails the test), other steps must be equal.
    explained: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Comparison:
    scenario: Scenario
    reference: Target
    candidate: Target
    left: list[Outcome]
    right: list[Outcome]
    seconds: float

    @property
    def rows(self) -> list[tuple[Outcome | None, Outcome | None]]:
        return list(itertools.zip_longest(self.left, self.right))

    @staticmethod
    def _differ(a: Outcome | None, b: Outcome | None) -> bool:
        return (
            a is None
            or b is None
            or (a.step, a.principal, a.result) != (b.step, b.principal, b.result)
        )

    def _explained(self, a: Outcome | None, b: Outcome | None) -> bool:
        return (
            a is not None
            and b is not None
            and (a.step, a.principal) == (b.step, b.principal)
            and a.step in self.scenario.explained
        )

    def differences(self) -> list[tuple[Outcome | None, Outcome | None]]:
        """Differing rows that no explanation covers."""
        return [(a, b) for a, b in self.rows if self._differ(a, b) and not self._explained(a, b)]

    def explained_differences(self) -> list[tuple[Outcome, Outcome]]:
        return [(a, b) for a, b in self.rows if self._differ(a, b) and self._explained(a, b)]  # type: ignore[misc]

    def stale_explanations(self) -> list[str]:
        """Explained steps that no longer differ, or that the script never ran."""
        differing = {a.step for a, _ in self.explained_differences()}
        return sorted(set(self.scenario.explained) - differing)

    @property
    def equal(self) -> bool:
        """No unexplained difference, and every explained one still there."""
        return not self.differences() and not self.stale_explanations()

    def render(self, width: int = 120, only_differences: bool = False) -> str:
        return render_diff(self, width, only_differences)


def run_scenario(scenario: Scenario, reference: Target, candidate: Target) -> Comparison:
    """Run the script against both targets (reference first) and pair the outcomes."""
    t0 = time.monotonic()
    runs = []
    for target in (reference, candidate):
        ns = Namespace(scenario.name, target.key)
        with target.open(scenario.acls, ns) as env:
            missing = set(scenario.principals) - set(env.profiles)
            if missing:
                raise ValueError(f"{target.label} has no profile for {sorted(missing)}")
            run = Run(target, env, ns)
            try:
                scenario.script(run)
            finally:
                # librdkafka handles caught in reference cycles would outlive the target and
                # log reconnect failures once a proxy is gone: free them while it is up
                gc.collect()
            runs.append(run.outcomes)
    return Comparison(scenario, reference, candidate, runs[0], runs[1], time.monotonic() - t0)


# --------------------------------------------------------------------------- rendering


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(", ", ": "))


def _pretty(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    text = json.dumps(value, sort_keys=True, indent=1)
    compact = json.dumps(value, sort_keys=True)
    return [compact] if len(compact) <= 56 else text.splitlines()


def render_diff(c: Comparison, width: int = 120, only_differences: bool = False) -> str:
    """Readable side by side: one line per equal step, both outcomes for a differing one."""
    col = (width - 6) // 2
    diffs = c.differences()
    explained = c.explained_differences()
    head = (
        f"scenario {c.scenario.name}: "
        + (f"{len(diffs)} of {len(c.rows)} steps differ" if diffs else "no difference")
        + (f", {len(explained)} explained" if explained else "")
        + f" ({c.seconds:.1f}s)"
    )
    lines = [head, f"  left  = {c.reference.label}", f"  right = {c.candidate.label}"]
    for step in c.stale_explanations():
        lines.append(f"  STALE explanation: step {step!r} does not differ (any more)")
    if c.scenario.acls:
        lines.append("  ACLs:")
        lines += [f"    {a.describe()}" for a in c.scenario.acls]
    for n, (a, b) in enumerate(c.rows, 1):
        some = a or b
        assert some is not None
        same = (a, b) not in diffs
        why = c.scenario.explained.get(some.step) if (a, b) in explained else None
        if same and why is None and only_differences:
            continue
        slow = max(o.seconds for o in (a, b) if o is not None)
        took = f" ({slow:.1f}s)" if slow >= 2 else ""
        title = f"{n:>2} {some.step} [{some.principal.removeprefix('User:')}]{took}"
        if same and why is None:
            summary = some.result if isinstance(some.result, str) else _compact(some.result)
            summary = textwrap.shorten(summary, width - len(title) - 8, placeholder=" …")
            lines.append(f"  = {title}: {summary}")
            continue
        if why is not None:
            lines.append(f"  ~ {title}  (explained: {why})")
        else:
            lines.append(f"  ≠ {title}")
        if a and b and (a.step, a.principal) != (b.step, b.principal):
            lines.append(f"      right side ran step {b.step!r} as {b.principal} here")
        left = _pretty(a.result) if a else ["<no such step>"]
        right = _pretty(b.result) if b else ["<no such step>"]
        left = [w for line in left for w in (textwrap.wrap(line, col) or [""])]
        right = [w for line in right for w in (textwrap.wrap(line, col) or [""])]
        matcher = difflib.SequenceMatcher(a=left, b=right, autojunk=False)
        lines.append(f"      {'left (' + c.reference.key + ')':<{col}} | right ({c.candidate.key})")
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            ls, rs = left[i1:i2], right[j1:j2]
            for x, y in itertools.zip_longest(ls, rs, fillvalue=""):
                mark = "|" if tag == "equal" else "≠"
                lines.append(f"      {x:<{col}} {mark} {y}")
    return "\n".join(lines)


__all__ = [
    "CLUSTER",
    "NORMALIZATIONS",
    "Acl",
    "Client",
    "Comparison",
    "Env",
    "KafkaTarget",
    "Namespace",
    "Observer",
    "Profile",
    "ProxyTarget",
    "Run",
    "Scenario",
    "Target",
    "allow",
    "deny",
    "error_name",
    "run_scenario",
]
