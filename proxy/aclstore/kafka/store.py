"""The `kafka` ACL store backend: the fleet's ACLs as an ordered, compacted log in one Kafka topic
(KIP-801's model, with Kafka as the log; docs/authz.md, "A fleet on the kafka store").

    writer (change)  ──transaction: tombstones + records, acks=all──▶  topic (1 partition, compact)
    reader thread    ◀── read_committed, strictly in offset order ─────┘
                     └─ each poll batch: one Authorizer.update (one new snapshot)

* Start: the topic is created if missing (one partition, cleanup.policy=compact), then read from
  the beginning to the end of the committed log; only then is the authorizer loaded (until
  then it answers "not ready" to everyone but super users).
* A change is one Kafka transaction (idempotent, acks=all): a reader sees all its records or
  none, so a change cut short (the partition leader killed mid-write, this process killed) is
  never half-applied. `change` returns once the transaction is committed *and* this instance's
  reader has applied it (read-your-writes).
* Fail closed: a record that does not decode stops the reader at its offset (it could be a
  DENY); the last good snapshot stays in force and the status says degraded. While the topic
  cannot be reached the last snapshot stays in force and the status says how stale it is.

librdkafka's calls block: the reader runs on a thread of its own, the writer on a one-thread
executor; the event loop only awaits them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aclgate.authz.acllog import AclLogState
from aclgate.authz.aclrecords import RecordDecodeError, decode, encode_change
from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import AclBinding
from aclgate.proxy.aclstore.backend import AclStoreError, AclStoreStatus, warn_literal_cidr_hosts
from aclgate.proxy.rdkafka import close_producer

log = logging.getLogger("aclgate.aclstore")

DEFAULT_TOPIC = "__aclgate_acls"
#: how long a change's transaction may stay open (Kafka aborts it then, within its check
#: interval, 10 s by default): the longest a crashed writer can hold back every reader
TRANSACTION_TIMEOUT_MS = 10_000
#: a store that has not confirmed it is at the end of the log for this long reports staleness
STALE_AFTER = 5.0
#: every transactional id aclgate writes ACL changes with starts so (docs/authz.md's grants)
TRANSACTIONAL_ID_PREFIX = "aclgate-acls-"


@dataclass(frozen=True)
class KafkaStoreSettings:
    """Where the ACL topic is and how to reach it."""

    bootstrap: str
    topic: str = DEFAULT_TOPIC
    #: None: the smaller of 3 and the number of brokers
    replication_factor: int | None = None
    #: librdkafka settings for the connection (security: proxy/aclstore/kafka/client.py)
    client: dict[str, str] = field(default_factory=dict)
    #: how long a change may take to be committed and applied here
    change_timeout: float = 30.0
    #: how long `start` waits for the initial replay
    start_timeout: float = 120.0
    #: how long `start` waits for the cluster to answer (the topic's metadata)
    connect_timeout: float = 30.0
    #: offsets an operator has inspected and chosen to skip (--acl-topic-skip-offset)
    skip_offsets: frozenset[int] = frozenset()
    #: the writer's transactional.id, stable per instance: a restarted instance's first
    #: init_transactions then aborts the change its killed predecessor left open at once, where
    #: a new id leaves it holding every reader back until it times out (docs/design.md).
    #: None: a random one per producer (a one-shot command, or no stable identity)
    transactional_id: str | None = None
    #: KIP-1276, opt-in (--acl-host-cidr): a record whose host has `/` but is no network is
    #: not a valid ACL, so it does not decode (docs/authz.md, "CIDR hosts (KIP-1276, opt-in)")
    cidr_hosts: bool = False


# ----------------------------------------------------------------------- the topic


def ensure_topic(settings: KafkaStoreSettings) -> None:
    """Create the topic if it is missing; refuse one that cannot keep the ACLs in order
    (more than one partition) or forever (no compaction)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

    timeout = settings.connect_timeout
    admin = AdminClient({"bootstrap.servers": settings.bootstrap, **settings.client})
    try:
        md = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise AclStoreError(f"ACL topic: cannot reach {settings.bootstrap}: {exc}") from None
    if settings.topic not in md.topics:
        rf = settings.replication_factor or min(3, len(md.brokers))
        new = NewTopic(
            settings.topic,
            num_partitions=1,
            replication_factor=rf,
            config={"cleanup.policy": "compact", "min.insync.replicas": str(min(2, rf))},
        )
        try:
            admin.create_topics([new], request_timeout=timeout)[settings.topic].result(timeout)
            log.info("created the ACL topic %s (replication factor %d)", settings.topic, rf)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # another instance did
                raise AclStoreError(
                    f"ACL topic {settings.topic}: cannot create it: {exc}"
                ) from None
    deadline = time.monotonic() + timeout
    while True:  # a new topic's partitions reach the metadata a moment after its creation
        md = admin.list_topics(topic=settings.topic, timeout=timeout)
        partitions = len(md.topics[settings.topic].partitions)
        if partitions or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if partitions != 1:
        raise AclStoreError(
            f"ACL topic {settings.topic} has {partitions} partitions; it needs exactly 1 "
            "(one partition is one order)"
        )
    resource = ConfigResource(ResourceType.TOPIC, settings.topic)
    while True:  # the broker asked may learn of a new topic a moment after the one that made it
        try:
            configs = admin.describe_configs([resource])[resource].result(timeout)
            break
        except KafkaException as exc:
            unknown = exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            if not unknown or time.monotonic() > deadline:
                raise AclStoreError(
                    f"ACL topic {settings.topic}: cannot read its configs: {exc}"
                ) from None
            time.sleep(0.1)
    policy = configs["cleanup.policy"].value or ""
    if "compact" not in policy or "delete" in policy:
        raise AclStoreError(
            f"ACL topic {settings.topic} has cleanup.policy={policy}; it needs compact "
            "(records deleted by retention would drop ACLs from every replay)"
        )


# ----------------------------------------------------------------------- reading


class LogReader:
    """A read_committed consumer of partition 0 from the beginning, feeding an AclLogState."""

    def __init__(self, settings: KafkaStoreSettings, state: AclLogState) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.settings = settings
        self.state = state
        self.consumer = Consumer(
            {
                "bootstrap.servers": settings.bootstrap,
                **settings.client,
                "group.id": f"aclgate-acl-reader-{uuid.uuid4()}",  # assign only: never joins
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 100,
                "max.partition.fetch.bytes": 16 * 2**20,
                "fetch.max.bytes": 64 * 2**20,
                "topic.metadata.refresh.interval.ms": 10_000,
            }
        )
        self.partition = TopicPartition(settings.topic, 0, OFFSET_BEGINNING)
        self.consumer.assign([self.partition])
        #: the offset and reason of the record the reader stopped at
        self.halted: tuple[int, str] | None = None
        self.undecodable = 0
        #: records read (and decoded) since the start: the initial replay's progress
        self.records_read = 0
        self.last_error: str | None = None
        self._group_denied_logged = False
        #: one object per distinct name, principal and host (a big policy repeats them)
        self._strings: dict[str, str] = {}

    def step(self, timeout: float, replaying: bool, max_records: int = 50_000) -> int | None:
        """Read what is there (up to `max_records`) into the state (`replaying`: applied at
        once, else fed to be applied a change at a time); returns the end offset when the end
        of the committed log was reached in this step, else None."""
        from confluent_kafka import KafkaError

        if self.halted is not None:
            time.sleep(timeout)
            return None
        end = None
        # poll waits for the first message only; consume(timeout=0) then takes what is queued
        # (consume with a timeout would wait for `max_records` or the whole timeout)
        first = self.consumer.poll(timeout)
        if first is None:
            return None
        batch = [first, *self.consumer.consume(num_messages=max_records - 1, timeout=0)]
        for msg in batch:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    end = msg.offset()
                elif err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                    # librdkafka looks up its group's coordinator even for a consumer that
                    # only assigns itself a partition; the reader never uses the group, so
                    # its identity needs no group permission (docs/authz.md)
                    if not self._group_denied_logged:
                        self._group_denied_logged = True
                        log.info(
                            "ACL topic %s: no group permission (not needed): %s", msg.topic(), err
                        )
                else:
                    self.last_error = str(err)
                    log.warning("ACL topic %s: %s", self.settings.topic, err)
                continue
            offset = int(msg.offset() or 0)  # a consumed record always has one
            end = None
            if offset in self.settings.skip_offsets:
                log.warning("ACL topic %s: skipping offset %d as configured", msg.topic(), offset)
                continue
            try:
                record = decode(
                    msg.key(),
                    msg.value(),
                    msg.headers(),  # type: ignore[arg-type]
                    offset,
                    self._strings,
                    self.settings.cidr_hosts,
                )
            except RecordDecodeError as exc:
                self.halted = (offset, str(exc))
                self.undecodable += 1
                log.error(
                    "ACL topic %s: the record at offset %d cannot be decoded (%s): replay "
                    "stopped there, the policy before it stays in force (docs/authz.md)",
                    msg.topic(),
                    offset,
                    exc,
                )
                break
            self.records_read += 1
            if replaying:
                self.state.replay(offset, record)
            else:
                self.state.feed(offset, record)
        return end

    def position(self) -> int:
        """The next offset the consumer will fetch (past control records too); -1 if unknown."""
        offset = self.consumer.position([self.partition])[0].offset
        return int(offset) if offset is not None and offset >= 0 else -1

    def end_offset(self, timeout: float) -> int:
        """The partition's high-water mark, asked of its leader now."""
        _, high = self.consumer.get_watermark_offsets(self.partition, timeout=timeout, cached=False)
        return int(high)

    def close(self) -> None:
        self.consumer.close()


def read_acl_topic(settings: KafkaStoreSettings, timeout: float = 60.0) -> list[AclBinding]:
    """The ACL set the topic holds now, replayed as a starting proxy would (`aclgate check
    --acl-store kafka`); AclStoreError if it cannot be read to its end or does not decode."""
    state = AclLogState()
    reader = LogReader(settings, state)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            end = reader.step(0.5, replaying=True)
            if reader.halted is not None:
                offset, why = reader.halted
                raise AclStoreError(f"ACL topic {settings.topic}: offset {offset}: {why}")
            if end is not None:
                return state.bindings()
    finally:
        reader.close()
    raise AclStoreError(f"ACL topic {settings.topic}: not read to its end within {timeout:.0f} s")


# ----------------------------------------------------------------------- the backend


def _fenced_codes() -> frozenset[int]:
    """The errors meaning "another producer initialized this transactional id": the broker's
    PRODUCER_FENCED and INVALID_PRODUCER_EPOCH, and librdkafka's fatal _FENCED."""
    from confluent_kafka import KafkaError

    return frozenset(
        {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
    )


class KafkaAclBackend:
    """ACLs in a Kafka topic shared by a fleet; see the module docstring."""

    name = "kafka"

    def __init__(self, settings: KafkaStoreSettings, authorizer: Authorizer) -> None:
        self.settings = settings
        self.authorizer = authorizer
        self.state = AclLogState()
        self._reader: LogReader | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._replayed: asyncio.Future[None] | None = None
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="acl-writer")
        self._producer: Any = None
        self._change_lock = asyncio.Lock()
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        #: (applied offset, fingerprint) published together by the reader
        self._published: tuple[int, str] | None = None
        self._loaded = False
        self._in_step_at = time.monotonic()
        self._start_error: str | None = None
        #: seconds the initial replay took (start to ready)
        self.replay_seconds: float | None = None
        #: changes that failed because another producer took this writer's transactional id
        self.writer_fenced = 0

    # -------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self.stop()  # no reader left polling a store that never loaded
            raise

    async def _start(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        await asyncio.to_thread(ensure_topic, self.settings)
        self._reader = await asyncio.to_thread(LogReader, self.settings, self.state)
        self._replayed = loop.create_future()
        self._thread = threading.Thread(target=self._read_loop, name="acl-reader", daemon=True)
        self._thread.start()
        self._writer.submit(self._warm_producer)  # the first change need not wait for it
        try:
            async with asyncio.timeout(self.settings.start_timeout):
                await asyncio.shield(self._replayed)
        except TimeoutError:
            raise AclStoreError(
                f"ACL topic {self.settings.topic}: not replayed to its end within "
                f"{self.settings.start_timeout:.0f} s ({self._reader.last_error or 'no error'})"
            ) from None
        self.replay_seconds = time.monotonic() - t0
        log.info(
            "ACL topic %s replayed: %d ACLs in force at offset %d (%.2f s)",
            self.settings.topic,
            len(self.state),
            self.state.applied_offset,
            self.replay_seconds,
        )

    async def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        if self._reader is not None:
            await asyncio.to_thread(self._reader.close)
        self._writer.submit(self._close_producer)
        self._writer.shutdown(wait=True)
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(AclStoreError("the ACL store is stopping"))

    # -------------------------------------------------------------- the reader thread

    def _read_loop(self) -> None:
        reader = self._reader
        assert reader is not None
        last_check = 0.0
        while not self._stopping.is_set():
            try:
                end = reader.step(0.2, replaying=not self._loaded)
                self._absorb(end)
                now = time.monotonic()
                if self._loaded and now - last_check >= 1.0 and reader.halted is None:
                    last_check = now
                    self._check_in_step(reader)
            except Exception as exc:  # the reader must not die silently: report and go on
                log.exception("ACL topic reader: %s", exc)
                reader.last_error = str(exc)
                time.sleep(0.5)

    def _absorb(self, end: int | None) -> None:
        """Apply what the last step read: during the initial replay, only into the state
        (loaded into the authorizer once, at the end); afterwards, each batch as one update."""
        state = self.state
        if not self._loaded:
            if end is None:
                if self._reader is not None and self._reader.halted is not None:
                    self._fail_start(*self._reader.halted)
                return
            state.reached(end)
            bindings = state.bindings()
            self.authorizer.load(bindings)
            topic = f"ACL topic {self.settings.topic}"
            warn_literal_cidr_hosts(log, bindings, self.authorizer.cidr_hosts, topic)
            self._loaded = True
            self._call(self._replay_done)
            self._publish()  # the fingerprint (a second at 500,000 ACLs) after ready
            return
        added, removed = state.drain(end)
        reader = self._reader
        if reader is not None:
            # past a transaction's commit marker too: instances in step report one offset
            state.reached(reader.halted[0] if reader.halted is not None else reader.position())
        if added or removed:
            self.authorizer.update(add=added, remove=removed)
        if end is not None:
            self._in_step_at = time.monotonic()
        self._publish()

    def _publish(self) -> None:
        published = (self.state.applied_offset, self.state.fingerprint())
        if published != self._published:
            self._published = published
            self._call(self._wake, published[0])

    def _check_in_step(self, reader: LogReader) -> None:
        try:
            high = reader.end_offset(timeout=3.0)
        except Exception as exc:
            reader.last_error = str(exc)
            return
        if self.state.applied_offset >= high:
            self._in_step_at = time.monotonic()
            reader.last_error = None

    def _fail_start(self, offset: int, why: str) -> None:
        self._start_error = f"offset {offset}: {why}"
        self._call(self._replay_done)

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(fn, *args)

    # -------------------------------------------------------------- on the event loop

    def _replay_done(self) -> None:
        fut = self._replayed
        if fut is None or fut.done():
            return
        if self._start_error is not None:
            fut.set_exception(
                AclStoreError(
                    f"ACL topic {self.settings.topic}: the record at {self._start_error}; the "
                    "replay stopped there and no policy is loaded (docs/authz.md)"
                )
            )
        else:
            fut.set_result(None)

    def _wake(self, applied: int) -> None:
        keep = []
        for target, fut in self._waiters:
            if fut.done():
                continue
            if applied > target:
                fut.set_result(None)
            else:
                keep.append((target, fut))
        self._waiters = keep

    async def change(self, additions: Sequence[AclBinding], removals: Sequence[AclBinding]) -> None:
        if not self._loaded:
            raise AclStoreError("the ACL store has not replayed its topic yet")
        async with self._change_lock:
            self._check_healthy()
            removed = set(removals)
            holders = self.state.holders([*removed, *additions])
            tombstones = sorted({u for b in removed for u in holders[b]})
            adds = [
                (uuid.uuid4(), b)
                for b in dict.fromkeys(additions)
                if b in removed or not holders[b]
            ]
            if not tombstones and not adds:
                return  # nothing to write: every addition is in force, no removal is
            _, records = encode_change(adds, tombstones)
            loop = asyncio.get_running_loop()
            last = await loop.run_in_executor(self._writer, self._write, records)
            await self._applied_past(last)

    def _check_healthy(self) -> None:
        reader = self._reader
        if reader is not None and reader.halted is not None:
            offset, why = reader.halted
            raise AclStoreError(
                f"the ACL store is degraded (offset {offset}: {why}); changes are refused "
                "until it is repaired (docs/authz.md)"
            )

    async def _applied_past(self, offset: int) -> None:
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, fut))
        published = self._published
        if published is not None:
            self._wake(published[0])
        try:
            async with asyncio.timeout(self.settings.change_timeout):
                await fut
        except TimeoutError:
            self._check_healthy()
            raise AclStoreError(
                f"the change is committed to {self.settings.topic} (offset {offset}) but was "
                f"not applied here within {self.settings.change_timeout:.0f} s"
            ) from None

    # -------------------------------------------------------------- the writer thread

    def _new_producer(self) -> Any:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.settings.bootstrap,
                **self.settings.client,
                "transactional.id": self.settings.transactional_id
                or f"{TRANSACTIONAL_ID_PREFIX}{uuid.uuid4()}",
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 0,
                # an instance killed mid-change leaves its transaction open, and every reader
                # (read_committed) waits at it until the coordinator aborts it: keep that short
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            }
        )
        producer.init_transactions(self.settings.change_timeout)
        return producer

    def _warm_producer(self) -> None:
        try:
            if self._producer is None:
                self._producer = self._new_producer()
        except Exception as exc:  # the first change tries again and reports it
            log.warning("ACL topic %s: the writer is not ready: %s", self.settings.topic, exc)

    def _close_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            close_producer(producer, 5)

    def _write(self, records: list[tuple[bytes, bytes | None, list[tuple[str, bytes]]]]) -> int:
        """One transaction; the offset of its last record. AclStoreError when it did not
        commit (it is then aborted: nothing of it is ever read)."""
        from confluent_kafka import KafkaException

        try:
            if self._producer is None:
                self._producer = self._new_producer()
            producer = self._producer
            offsets: list[int] = []
            failures: list[str] = []

            def delivered(err: Any, msg: Any) -> None:
                if err is not None:
                    failures.append(str(err))
                else:
                    offsets.append(msg.offset())

            producer.begin_transaction()
            for key, value, headers in records:
                producer.produce(
                    self.settings.topic,
                    key=key,
                    value=value,
                    headers=headers,
                    partition=0,
                    on_delivery=delivered,
                )
            self._commit(producer)
        except KafkaException as exc:
            raise self._failed(exc) from None
        if failures or len(offsets) != len(records):
            raise AclStoreError(f"ACL topic {self.settings.topic}: not written: {failures}")
        return max(offsets)

    def _commit(self, producer: Any) -> None:
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.settings.change_timeout
        while True:
            try:
                producer.commit_transaction(max(1.0, deadline - time.monotonic()))
                return
            except KafkaException as exc:
                error = exc.args[0]
                if error.retriable() and time.monotonic() < deadline:
                    continue
                raise

    def _failed(self, exc: Exception) -> AclStoreError:
        """Abort what can be aborted; a producer in an unknown state is replaced."""
        error = exc.args[0] if exc.args else None
        producer, message = self._producer, f"ACL topic {self.settings.topic}: {exc}"
        if error is not None and error.code() in _fenced_codes():
            message = self._fenced(message)
        try:
            if producer is not None and error is not None and error.txn_requires_abort():
                producer.abort_transaction(self.settings.change_timeout)
                return AclStoreError(f"{message} (aborted: nothing of the change applies)")
        except Exception as abort_exc:
            message += f"; abort failed: {abort_exc}"
        # fatal, or an outcome we cannot tell: a new producer, whose init_transactions (same
        # transactional id) aborts whatever the old one left open; the old one is closed now,
        # not whenever the traceback holding it goes
        self._producer = None
        if producer is not None:
            close_producer(producer, 0)
        return AclStoreError(
            f"{message} (the change may not have been committed; list the ACLs to see)"
        )

    def _fenced(self, message: str) -> str:
        """Count and explain a fenced writer: another producer initialized this instance's
        transactional id. Not fatal: the next change starts a producer that fences it in turn,
        so two live instances sharing an id fail each other's changes now and then but keep
        running; the log line and the counter name the misconfiguration."""
        self.writer_fenced += 1
        tid = self.settings.transactional_id
        why = (
            f"another instance uses transactional id {tid} (give every instance its own "
            "--acl-transactional-id; docs/authz.md)"
            if tid is not None
            else "another producer took this writer's transactional id"
        )
        log.error("ACL topic %s: the change was fenced: %s", self.settings.topic, why)
        return f"{message} (fenced: {why})"

    # -------------------------------------------------------------- status

    @property
    def undecodable_records(self) -> int:
        """Records the reader stopped at (0 or 1 per process: it stops at the first)."""
        return self._reader.undecodable if self._reader is not None else 0

    def status(self) -> AclStoreStatus:
        published = self._published
        reader = self._reader
        error = None
        if reader is not None and reader.halted is not None:
            offset, why = reader.halted
            error = f"degraded: the record at offset {offset} of {self.settings.topic} cannot be decoded ({why}); replay stopped there"
        elif self._start_error is not None:
            error = f"degraded: {self._start_error}"
        stale = None
        if self._loaded:
            since = time.monotonic() - self._in_step_at
            if since > STALE_AFTER or error is not None:
                stale = since
        return AclStoreStatus(
            backend=self.name,
            loaded=self._loaded,
            applied_offset=published[0] if published else None,
            # "" in the moment between ready and the first fingerprint
            fingerprint=published[1] if published else "",
            error=error,
            seconds_stale=stale,
            records_replayed=reader.records_read if reader is not None else 0,
            writer_fenced=self.writer_fenced,
        )
