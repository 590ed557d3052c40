"""The audit topic sink: every audit line to a Kafka topic, keyed by principal, nothing lost.

    event loop ── write(): deque.append ──▶ sink thread ── produce (idempotent, acks=all) ──▶ topic
                                             │  ▲ failed (cluster down, topic missing, refused)
                                             ▼  │ drained oldest first once the topic takes them
                                            spool (proxy/audit/spool.py, bounded, on disk)

* The hot path only appends to a deque: the thread does the producing, the polling, the disk.
* The producer is librdkafka's (confluent-kafka), idempotent with acks=all, so its own retries
  never duplicate or reorder a principal's lines within a partition (key = principal).
* A line librdkafka could not deliver within `delivery_timeout` (or refused at once: no room
  in its queue, topic authorization failed, a fatal producer error) goes to the spool. While
  the spool holds anything, new lines go there too, behind the older ones, so the topic gets
  them in order; the drain sends them oldest first, a batch at a time, and only a batch the
  topic confirmed whole is committed out of the spool. A graceful stop spools what is still in
  flight; a restart drains an existing spool first.
* Loss is never silent: a line that does not fit in the full spool, that the topic refuses for
  good (too large), or that was found cut short after a crash is counted in
  aclgate_audit_sink_dropped_total{reason} and logged at ERROR.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aclgate.proxy.audit.formats import (
    CLOUDEVENTS_CONTENT_TYPE,
    CLOUDEVENTS_PREFIX,
    principal_of,
)
from aclgate.proxy.audit.spool import AuditSpool, Mark
from aclgate.proxy.rdkafka import close_producer

if TYPE_CHECKING:
    from aclgate.proxy.config import ProxyConfig

log = logging.getLogger("aclgate.audit")


class _RdkafkaLog:
    """librdkafka's own lines, at DEBUG on aclgate.audit.kafka: with the cluster down it
    repeats a connection error every second, while the sink says so once (WARNING) and
    /readyz and the metrics tell the rest."""

    logger = logging.getLogger("aclgate.audit.kafka")

    def log(self, level: int, msg: str, *args: object) -> None:
        self.logger.debug(msg, *args)


rdkafka_log = _RdkafkaLog()

#: lines per drain batch (a batch is committed out of the spool only when delivered whole)
DRAIN_LINES = 1000
#: how long the thread waits in one poll for delivery reports when there is nothing to do
POLL_SECONDS = 0.05
#: how long a stop waits for lines in flight before spooling them
STOP_FLUSH_SECONDS = 5.0
#: at most one "spool full" error line per this many seconds (each with the running count)
LOSS_LOG_INTERVAL = 10.0
#: the record headers of a CloudEvents line (--audit-format cloudevents): the Kafka protocol
#: binding's structured mode; lines of the other formats have none
CLOUDEVENTS_HEADERS = [("content-type", CLOUDEVENTS_CONTENT_TYPE.encode("ascii"))]


def headers_of(line: str) -> list[tuple[str, bytes]] | None:
    """The record headers of an audit line: by the line itself, so that a spooled line keeps
    the headers of its format whatever --audit-format is when it is sent."""
    return CLOUDEVENTS_HEADERS if line.startswith(CLOUDEVENTS_PREFIX) else None


#: how often a missing audit topic may be created (tried again after unknown-topic errors)
CREATE_INTERVAL = 10.0
#: how long after a fatal producer error (e.g. no permission to get a producer id) a new
#: producer is made; lines go to the spool meanwhile
RENEW_INTERVAL = 5.0


@dataclass(frozen=True)
class AuditTopicSettings:
    """Where the audit topic is and how to reach it."""

    bootstrap: str
    topic: str
    spool: Path
    spool_max_bytes: int = 256 << 20
    #: librdkafka settings for the connection (security: proxy/aclstore/kafka/client.py)
    client: dict[str, str] = field(default_factory=dict)
    #: how long librdkafka tries one line before it goes to the spool (message.timeout.ms)
    delivery_timeout: float = 10.0


def topic_settings(config: ProxyConfig, spool: Path) -> AuditTopicSettings:
    """--audit-topic on --audit-bootstrap (default: the --upstream cluster), reached with the
    proxy's own upstream identity, as the kafka ACL store is."""
    from aclgate.proxy.aclstore.kafka.client import client_config

    assert config.audit_topic is not None
    return AuditTopicSettings(
        bootstrap=config.audit_bootstrap or ",".join(f"{h}:{p}" for h, p in config.upstream),
        topic=config.audit_topic,
        spool=spool,
        spool_max_bytes=config.audit_spool_max_bytes,
        client=client_config(config, client_id="aclgate-audit", who="audit topic"),
        delivery_timeout=config.audit_delivery_timeout,
    )


def _codes() -> tuple[frozenset[int], frozenset[int]]:
    from confluent_kafka import KafkaError

    #: the topic will never take this line, however often it is sent
    permanent = frozenset(
        {
            KafkaError.MSG_SIZE_TOO_LARGE,
            KafkaError.RECORD_LIST_TOO_LARGE,
            KafkaError.INVALID_RECORD,
            KafkaError.INVALID_MSG,
        }
    )
    missing = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})
    return permanent, missing


class _Batch:
    """A drain batch in flight: committed out of the spool only when every line is confirmed."""

    def __init__(self, mark: Mark, lines: int) -> None:
        self.mark = mark
        self.waiting = lines
        self.delivered = 0
        self.failed = 0


class KafkaAuditSink:
    """An AuditSink (proxy/audit/sink.py) producing to the audit topic from a thread of its own."""

    def __init__(self, settings: AuditTopicSettings) -> None:
        self.settings = settings
        # opened here, on the caller's thread: a spool in use by another process stops the
        # start with a clear error instead of a dead sink thread
        self.spool = AuditSpool(settings.spool, settings.spool_max_bytes)
        self._permanent, self._missing = _codes()
        self._queue: collections.deque[tuple[str, str]] = collections.deque()
        self._stop = threading.Event()
        self._producer: Any = None
        self._fatal: Any = None
        self._next_producer = 0.0
        self._failed: list[str] = []  # lines of failed direct deliveries, to spool
        #: direct lines in the producer, by sequence number: spooled if the producer goes
        #: away without reporting them (a fatal state may keep it from serving callbacks)
        self._inflight: dict[int, str] = {}
        self._seq = 0
        self._batch: _Batch | None = None
        self._next_drain = 0.0
        self._drain_failures = 0
        self._topic_missing = True  # checked (and created) before the first send
        self._last_create = -CREATE_INTERVAL
        self._last_loss_log = -LOSS_LOG_INTERVAL
        self._outage_logged = False
        # read by /metrics and /readyz on the event loop's thread; plain ints and strings,
        # each written by the sink thread only
        self.sent = 0
        self.spooled = 0
        self.dropped: dict[str, int] = {
            "spool_full": 0,
            "rejected": 0,
            "corrupt": 0,
            "sink_failed": 0,
        }
        #: set if the thread died of a bug: lines are then counted as lost, not queued forever
        self._dead = False
        self.spool_bytes = self.spool.size
        self.spool_pending_bytes = self.spool.pending_bytes
        self.last_error: str | None = None
        if self.spool.repaired_bytes:
            self.dropped["corrupt"] += 1
        self._thread = threading.Thread(target=self._run, name="aclgate-audit-sink", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------- event loop side

    def write(self, line: str, key: str, urgent: bool) -> None:
        if self._dead:
            self.dropped["sink_failed"] += 1
            return
        self._queue.append((line, key))

    def tick(self) -> None:
        pass  # the thread sends as lines arrive

    def close(self) -> None:
        self._stop.set()
        self._thread.join(STOP_FLUSH_SECONDS + self.settings.delivery_timeout + 10)
        if self._thread.is_alive():
            log.error("audit topic %s: the sink did not stop in time", self.settings.topic)

    @property
    def state(self) -> str:
        """`sending` while lines go straight to the topic, `spooling` while the spool holds any."""
        return "spooling" if self.spool_pending_bytes or self._failed else "sending"

    def status(self) -> dict[str, Any]:
        """For /readyz (never failing it: the spool keeps the trail while the topic is away)."""
        return {
            "topic": self.settings.topic,
            "bootstrap": self.settings.bootstrap,
            "state": self.state,
            "sent": self.sent,
            "spooled": self.spooled,
            "spool_bytes": self.spool_bytes,
            "spool_pending_bytes": self.spool_pending_bytes,
            "dropped": dict(self.dropped),
            "last_error": self.last_error,
        }

    # ------------------------------------------------------------- the sink thread

    def _run(self) -> None:
        try:
            self._ensure_topic()
            while True:
                stopping = self._stop.is_set()
                self._step()
                if stopping and not self._queue:
                    break
            self._shutdown()
        except Exception:  # a bug: say so loudly; the file sink (if any) keeps the trail
            self._dead = True
            self.dropped["sink_failed"] += len(self._queue)
            self._queue.clear()
            log.exception(
                "audit topic %s: the sink thread failed; from now on audit lines are not sent "
                "to the topic (counted in aclgate_audit_sink_dropped_total"
                '{reason="sink_failed"}); restart aclgate',
                self.settings.topic,
            )
        finally:
            self.spool.close()

    def _step(self) -> None:
        if self._fatal is not None:
            self._drop_producer()
        if self._producer is None and time.monotonic() >= self._next_producer:
            self._producer = self._new_producer()
        lines = self._take()
        if lines:
            if self._producer is not None and self._direct():
                self._produce_direct(lines)
            else:
                self._to_spool([line for line, _ in lines])
        if self._producer is not None:
            self._poll(0 if self._queue else POLL_SECONDS)
        elif not self._queue:
            self._stop.wait(POLL_SECONDS)
        if self._failed:
            failed, self._failed = self._failed, []
            self._to_spool(failed)
        self.spool.sync()
        self._drain()
        self.spool_bytes = self.spool.size
        self.spool_pending_bytes = self.spool.pending_bytes

    def _poll(self, timeout: float) -> None:
        """Serve delivery reports; a fatal error may also surface here as an exception."""
        from confluent_kafka import KafkaException

        try:
            self._producer.poll(timeout)
        except KafkaException as exc:
            self._fatal = exc.args[0] if exc.args else exc

    def _take(self) -> list[tuple[str, str]]:
        queue, out = self._queue, []
        while queue:
            out.append(queue.popleft())
        return out

    def _direct(self) -> bool:
        return self.spool.empty and self._batch is None and not self._failed

    def _new_producer(self) -> Any:
        from confluent_kafka import Producer

        return Producer(
            {
                "bootstrap.servers": self.settings.bootstrap,
                **self.settings.client,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 20,
                "message.timeout.ms": int(self.settings.delivery_timeout * 1000),
                # Java's partitioner: a principal lands on the partition a Java client's
                # record with the same key would
                "partitioner": "murmur2_random",
                "error_cb": self._on_error,
                "logger": rdkafka_log,
            }
        )

    def _drop_producer(self) -> None:
        """After a fatal error: every line in the producer is reported failed (spooled), and
        a new producer is made RENEW_INTERVAL later."""
        producer, self._producer = self._producer, None
        self._note_failure(f"fatal producer error: {self._fatal}")
        log.error(
            "audit topic %s: fatal producer error (%s): its lines go to the spool, a new "
            "producer in %.0f s",
            self.settings.topic,
            self._fatal,
            RENEW_INTERVAL,
        )
        self._fatal = None
        self._next_producer = time.monotonic() + RENEW_INTERVAL
        if producer is not None:
            close_producer(producer, 0)
        self._drain()  # a batch confirmed whole is committed, not sent again
        self._abandon_inflight()

    def _abandon_inflight(self) -> None:
        """The producer is gone: its unreported direct lines go to the spool, and a drain batch
        still waiting is given up (its lines are still in the spool: sent again later)."""
        self._failed.extend(self._inflight.values())
        self._inflight.clear()
        self._batch = None

    def _on_error(self, err: Any) -> None:
        self.last_error = str(err)
        if err.fatal():
            self._fatal = err

    def _produce_direct(self, lines: list[tuple[str, str]]) -> None:
        from confluent_kafka import KafkaException

        topic, producer, inflight = self.settings.topic, self._producer, self._inflight
        for i, (line, key) in enumerate(lines):
            self._seq += 1
            seq = self._seq
            try:
                producer.produce(
                    topic,
                    value=line[:-1].encode("utf-8"),
                    key=key.encode("utf-8"),
                    headers=headers_of(line),
                    on_delivery=lambda err, msg, seq=seq: self._on_direct(seq, err, msg),
                )
            except (BufferError, KafkaException) as exc:
                self._note_failure(f"not queued: {exc}")
                self._to_spool([line for line, _ in lines[i:]])
                return
            inflight[seq] = line

    def _on_direct(self, seq: int, err: Any, msg: Any) -> None:
        line = self._inflight.pop(seq, None)
        if line is None:  # already spooled when its producer went away
            return
        if err is None:
            self.sent += 1
        elif err.code() in self._permanent:
            self._reject(err, msg.value())
        else:
            self._note_failure(str(err), err.code())
            self._failed.append(line)

    def _to_spool(self, lines: list[str]) -> None:
        if not lines:
            return
        refused = self.spool.append(lines)
        self.spooled += len(lines) - refused
        if refused:
            self.dropped["spool_full"] += refused
            now = time.monotonic()
            if now - self._last_loss_log >= LOSS_LOG_INTERVAL:
                self._last_loss_log = now
                log.error(
                    "audit spool %s is full (%d bytes, limit %d): %d audit lines lost so far "
                    '(aclgate_audit_sink_dropped_total{reason="spool_full"})',
                    self.settings.spool,
                    self.spool.size,
                    self.spool.max_bytes,
                    self.dropped["spool_full"],
                )

    def _note_failure(self, why: str, code: int | None = None) -> None:
        if not self._outage_logged:  # once per outage; the spool's size tells the rest
            self._outage_logged = True
            log.warning(
                "audit topic %s on %s: %s; audit lines go to the spool %s until it takes them",
                self.settings.topic,
                self.settings.bootstrap,
                why,
                self.settings.spool,
            )
        self.last_error = why
        if code in self._missing:
            self._topic_missing = True

    def _reject(self, err: Any, value: bytes | None) -> None:
        self.dropped["rejected"] += 1
        log.error(
            "audit topic %s refused an audit line for good (%s); it is lost from the topic: %.300s",
            self.settings.topic,
            err,
            (value or b"").decode("utf-8", errors="replace"),
        )

    # ------------------------------------------------------------- the drain

    def _drain(self) -> None:
        batch = self._batch
        if batch is not None:
            if batch.waiting:
                return
            self._batch = None
            if batch.failed:
                self._drain_failures += 1
                self._next_drain = time.monotonic() + min(5.0, 0.5 * 2**self._drain_failures)
                return
            self.spool.commit(batch.mark)
            self.sent += batch.delivered
            self._drain_failures = 0
            if self.spool.empty:
                log.info(
                    "audit topic %s takes lines again: the spool is delivered", self.settings.topic
                )
                self.last_error = None
                self._outage_logged = False
        if (
            self.spool.empty
            or self._producer is None
            or time.monotonic() < self._next_drain
            or self._stop.is_set()
        ):
            return
        if self._topic_missing:
            self._ensure_topic()
        self._send_batch(self.spool.read(DRAIN_LINES))

    def _send_batch(self, lines: list[tuple[str, Mark]]) -> None:
        from confluent_kafka import KafkaException

        if not lines:
            return
        mark: Mark | None = None
        batch = _Batch(lines[0][1], 0)

        def delivered(err: Any, msg: Any) -> None:
            batch.waiting -= 1
            if err is None:
                batch.delivered += 1
            elif err.code() in self._permanent:
                self._reject(err, msg.value())
            else:
                batch.failed += 1
                self._note_failure(str(err), err.code())

        for line, after in lines:
            try:
                key = principal_of(json.loads(line))
                if not isinstance(key, str):
                    raise TypeError("principal is not a string")
            except (ValueError, KeyError, TypeError) as exc:
                self.dropped["corrupt"] += 1
                log.error(
                    "audit spool %s: a line that is not an audit event (%s), skipped: %.300s",
                    self.settings.spool,
                    exc,
                    line,
                )
                mark = after
                continue
            try:
                self._producer.produce(
                    self.settings.topic,
                    value=line.rstrip("\n").encode("utf-8"),
                    key=key.encode("utf-8"),
                    headers=headers_of(line),
                    on_delivery=delivered,
                )
            except (BufferError, KafkaException):
                break  # the rest waits for the next batch
            batch.waiting += 1
            mark = after
        if mark is None:
            return
        batch.mark = mark
        self._batch = batch

    def _ensure_topic(self) -> None:
        now = time.monotonic()
        if now - self._last_create < CREATE_INTERVAL:
            return
        self._last_create = now
        error = ensure_audit_topic(self.settings, min(10.0, self.settings.delivery_timeout))
        self._topic_missing = error is not None
        if error is not None:
            self._note_failure(error)

    # ------------------------------------------------------------- stop

    def _shutdown(self) -> None:
        """Give lines in flight a few seconds, then spool what is still undelivered."""
        producer, self._producer = self._producer, None
        if producer is not None:
            close_producer(producer, STOP_FLUSH_SECONDS)
        self._drain()  # commits a drain batch that completed; a failed one stays spooled
        self._abandon_inflight()
        self._to_spool(self._failed)
        self._failed = []
        self.spool.sync()
        self.spool_bytes = self.spool.size
        self.spool_pending_bytes = self.spool.pending_bytes
        if self.spool_pending_bytes:
            log.warning(
                "audit topic %s: %d bytes of audit lines stay in the spool %s; they are sent "
                "when aclgate starts again",
                self.settings.topic,
                self.spool_pending_bytes,
                self.settings.spool,
            )


def ensure_audit_topic(settings: AuditTopicSettings, timeout: float = 10.0) -> str | None:
    """Create the audit topic if it is missing, with the cluster's defaults (num.partitions,
    default.replication.factor); None when it exists, else why it could not be made."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    conf: dict[str, Any] = {"bootstrap.servers": settings.bootstrap, **settings.client}
    conf["logger"] = rdkafka_log
    admin = AdminClient(conf)
    try:
        md = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        return f"cannot reach {settings.bootstrap}: {exc}"
    if settings.topic in md.topics and md.topics[settings.topic].error is None:
        return None
    new = NewTopic(settings.topic, num_partitions=-1, replication_factor=-1)
    try:
        admin.create_topics([new], request_timeout=timeout)[settings.topic].result(timeout)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return None
        return (
            "the topic is not visible to aclgate's identity (missing, or no DESCRIBE on it) "
            f"and could not be created: {exc}"
        )
    log.info("created the audit topic %s on %s", settings.topic, settings.bootstrap)
    return None
