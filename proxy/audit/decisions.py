"""Where every authorization decision goes: the audit log, the authorizer log line, metrics."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable

from aclgate.authz.model import ResourceType
from aclgate.protocol.bounds import PRINCIPAL, RESOURCE_NAME, bounded
from aclgate.protocol.enforce.context import DecisionRecord
from aclgate.protocol.versions import api_name
from aclgate.proxy.audit.log import AuditLog
from aclgate.proxy.ops.logs import log_safe
from aclgate.proxy.ops.metrics import DecisionCounts

#: Kafka logs its decisions on kafka.authorizer.logger; ours has a name of its own
authorizer_log = logging.getLogger("aclgate.authorizer")

_TYPE_TEXT = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}


def kafka_log_line(record: DecisionRecord) -> str:
    """StandardAuthorizer's audit line (docs/audit.md, "The authorizer log line"), word for
    word, except that control characters are escaped: the resource name and the principal come
    from the client, and a topic name with a newline must not forge a second line."""
    verdict = "Allowed" if record.outcome.allowed else "Denied"
    who = record.principal
    if record.groups:  # an aclgate session's groups (Kafka's line has none): cut to a bound
        who += f" (groups = {bounded(', '.join(sorted(record.groups)), PRINCIPAL)})"
    return log_safe(
        f"Principal = {who} is {verdict} operation = {record.operation.name} "
        f"from host = {record.host} on resource = {_TYPE_TEXT[record.resource_type]}:LITERAL:"
        f"{record.resource_name} for request = {api_name(record.api_key)} with "
        f"resourceRefCount = {record.ref_count} based on rule {record.outcome.kafka_rule()}"
    )


class DenialLogLimiter:
    """A rate limit for the denial lines of the authorizer log, like the audit log's.

    A client pipelining denied requests made 1.27 million INFO lines (500 MB) in a minute.
    Within a window (a second), at most `per_key` lines are written for one (principal,
    operation, resource, request) and at most `per_second` in all; the rest are counted, and
    when the window ends one summary line per held-back key (the `summary_keys` biggest, the
    others in one line) says how many were not written, so nothing is lost silently. The
    lines that are written are Kafka's, unchanged.

    Per denial this costs a clock read, a dict lookup and a counter; the dict holds at most
    `per_second` keys (a key is only tracked while lines may still be written), so a client
    that varies the topic name of every request cannot grow it either.
    """

    def __init__(
        self,
        per_key: int = 10,
        per_second: int = 1000,
        window: float = 1.0,
        summary_keys: int = 10,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.per_key = per_key
        self.per_second = per_second
        self.window = window
        self.summary_keys = summary_keys
        self.clock = clock
        #: denial lines not written, since the start (aclgate_denial_log_suppressed_total)
        self.suppressed = 0
        self._start = -math.inf
        #: key -> denials of the window (written or not)
        self._seen: dict[tuple, int] = {}
        self._written = 0
        #: denials not written in this window for keys not tracked (over `per_second`)
        self._untracked = 0
        self._held = False
        self._timer: asyncio.TimerHandle | None = None

    def admit(self, key: tuple) -> bool:
        """True when the denial line of `key` may be written now."""
        now = self.clock()
        if now - self._start >= self.window:
            if self._held:
                self.flush()
            self._start = now
            self._seen.clear()
            self._written = 0
        seen = self._seen
        count = seen.get(key)
        if count is None:
            if self._written >= self.per_second:
                self._untracked += 1
                self._hold()
                return False
            count = 0
        count += 1
        seen[key] = count
        if count <= self.per_key and self._written < self.per_second:
            self._written += 1
            return True
        self._hold()
        return False

    def _hold(self) -> None:
        self.suppressed += 1
        if self._held:
            return
        self._held = True
        # the summary must come even when no further denial arrives to end the window
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a unit test): the next denial or flush() writes it
            return
        self._timer = loop.call_later(self._start + self.window - self.clock(), self._expire)

    def _expire(self) -> None:
        self._timer = None
        left = self._start + self.window - self.clock()
        if left > 0:  # the loop's clock ran ahead of ours
            self._timer = asyncio.get_running_loop().call_later(left, self._expire)
        elif self._held:
            self.flush()

    def flush(self) -> None:
        """Write the summary lines of the window's held-back denials (at its end, or when the
        proxy stops)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._held:
            return
        self._held = False
        held = sorted(
            (
                (count - self.per_key, key)
                for key, count in self._seen.items()
                if count > self.per_key
            ),
            key=lambda item: -item[0],
        )
        # keys under their own limit that hit the overall one
        over_all = sum(self._seen.values()) - self._written - sum(n for n, _ in held)
        limits = (
            f"(at most {self.per_key} a second for one principal, operation, resource and "
            f"request, {self.per_second} in all)"
        )
        for number, (principal, operation, resource_type, name, api_key) in held[
            : self.summary_keys
        ]:
            authorizer_log.info(
                log_safe(
                    f"suppressed {number} denial lines for Principal = {principal} operation = "
                    f"{operation.name} on resource = {_TYPE_TEXT[resource_type]}:LITERAL:{name} "
                    f"for request = {api_name(api_key)} in the last {self.window:g} s {limits}"
                )
            )
        others = over_all + self._untracked + sum(n for n, _ in held[self.summary_keys :])
        if others:
            authorizer_log.info(
                f"suppressed {others} denial lines for other principals, operations, resources "
                f"or requests in the last {self.window:g} s {limits}"
            )
        self._seen.clear()
        self._untracked = 0
        self._start = -math.inf
        self._written = 0


#: audit records made at once in one turn of the event loop; the rest wait for later turns
AUDIT_PER_TURN = 250
#: audit records waiting at most; past it one is made at once (memory before latency)
AUDIT_MAX_PENDING = 100_000
#: audit records waiting, at most, when a request decided a slice per turn goes on with its
#: next slice (protocol/enforce/slices.py): its records are made at the audit's pace
AUDIT_CAUGHT_UP = 4 * AUDIT_PER_TURN


class DecisionRecorder:
    """The DecisionSink of a running proxy.

    An audit record costs some 10 us (a line, or a key of an aggregation), so a request
    naming 37,000 distinct denied topics would hold the loop 0.4 s on its audit alone (issue
    20). Past `AUDIT_PER_TURN` records, the next ones wait in order (at most
    `AUDIT_MAX_PENDING`) and are made `AUDIT_PER_TURN` a turn in the turns that follow,
    between other clients' work; their timestamps are those of the turn that makes them."""

    def __init__(
        self,
        counts: dict[tuple, int],
        audit: AuditLog | None,
        denial_log: DenialLogLimiter | None = None,
    ):
        #: (AuthContext.check) the counts, while an allowed decision needs nothing else;
        #: None while the audit trail or the authorizer's DEBUG lines want each one
        self.allowed_tally: dict[tuple, int] | None = None
        self.counts = counts
        self.audit = audit  # sets allowed_tally
        #: records made at once since the last turn that made waiting ones
        self._turn = 0
        self._pending: deque[DecisionRecord] = deque()
        self._scheduled = False
        #: what waits for the audit to catch up (`when_caught_up`)
        self._catching_up: list[Callable[[], None]] = []
        self.denial_log = denial_log or DenialLogLimiter()
        if isinstance(counts, DecisionCounts):  # so aclgate_denial_log_suppressed is exported
            counts.denial_log = self.denial_log

    @property
    def audit(self) -> AuditLog | None:
        return self._audit

    @audit.setter
    def audit(self, audit: AuditLog | None) -> None:
        self._audit = audit
        self.follow_log_level()

    def follow_log_level(self) -> None:
        """Whether allowed decisions are only counted (`allowed_tally`): not while the
        audit trail records them or the authorizer logger writes them at DEBUG. aclgate sets
        its log level at start; a change made later (logging's own API) is followed when
        the server's sweeper next calls this, within a second."""
        wanted = self._audit is not None or authorizer_log.isEnabledFor(logging.DEBUG)
        self.allowed_tally = None if wanted else self.counts

    def decided(self, record: DecisionRecord) -> None:
        # one unpacking (a specialised bytecode for tuples) rather than an attribute lookup
        # per field, which NamedTuple fields do not get: this runs for every decision
        (
            _p,
            _h,
            _l,
            _g,
            _c,
            api_key,
            _v,
            operation,
            resource_type,
            _n,
            outcome,
            enforced,
            logs,
            _r,
        ) = record
        allowed = outcome.allowed
        key = (api_key, operation, resource_type, allowed, enforced)
        counts = self.counts
        counts[key] = counts.get(key, 0) + 1
        # Kafka's levels (docs/audit.md, "The authorizer log line"): allowed at DEBUG, denied
        # at INFO if logIfDenied, else not at all
        level = logging.DEBUG if allowed else (logging.INFO if logs else 0)
        if level and authorizer_log.isEnabledFor(level):
            self._log_line(record, level)
        if self._audit is not None and (allowed or logs):
            self._record(record)

    def _log_line(self, record: DecisionRecord, level: int) -> None:
        """The authorizer log line, denials rate limited; the line and the rate limit's
        keys get cut strings (protocol/bounds.py; the client id already is, by
        protocol/header.py; the audit log cuts its own)."""
        principal = bounded(record.principal, PRINCIPAL)
        name = bounded(record.resource_name, RESOURCE_NAME)
        if record.outcome.allowed or self.denial_log.admit(
            (principal, record.operation, record.resource_type, name, record.api_key)
        ):
            line = kafka_log_line(record._replace(principal=principal, resource_name=name))
            authorizer_log.log(
                level, line if record.enforced else line + " (dry-run: not enforced)"
            )

    def _record(self, record: DecisionRecord) -> None:
        """`AuditLog.record` now, or in a later turn of the loop (the class docstring)."""
        assert self.audit is not None
        if self._turn < AUDIT_PER_TURN or len(self._pending) >= AUDIT_MAX_PENDING:
            self._turn += 1
            self.audit.record(record)
            return
        if not self._scheduled:
            try:
                asyncio.get_running_loop().call_soon(self._next_turn)
            except RuntimeError:  # no event loop (a tool, a test): everything at once
                self._turn = 1
                self.audit.record(record)
                return
            self._scheduled = True
        self._pending.append(record)

    def _next_turn(self) -> None:
        """Make up to `AUDIT_PER_TURN` waiting records, in order; again next turn if more."""
        self._scheduled = False
        pending, made = self._pending, 0
        if self.audit is not None:
            record = self.audit.record
            while pending and made < AUDIT_PER_TURN:
                record(pending.popleft())
                made += 1
        self._turn = made
        if pending and not self._scheduled:
            asyncio.get_running_loop().call_soon(self._next_turn)
            self._scheduled = True
        if self._catching_up and len(pending) <= AUDIT_CAUGHT_UP:
            self._release_caught_up()

    def when_caught_up(self, then: Callable[[], None]) -> None:
        """`then()` in a later turn of the loop, once at most `AUDIT_CAUGHT_UP` audit
        records wait (the NextTurn effect: a request decided a slice per turn)."""
        self._catching_up.append(then)
        if len(self._pending) <= AUDIT_CAUGHT_UP and len(self._catching_up) == 1:
            asyncio.get_running_loop().call_soon(self._release_caught_up)

    def _release_caught_up(self) -> None:
        waiting, self._catching_up = self._catching_up, []
        for then in waiting:
            then()

    def flush_audit(self) -> None:
        """Make every waiting audit record now (before the audit log closes)."""
        while self._pending and self.audit is not None:
            self.audit.record(self._pending.popleft())
        self._pending.clear()
