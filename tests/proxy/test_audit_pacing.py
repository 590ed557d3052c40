"""Issue 20: a request naming tens of thousands of distinct denied resources is audited
`AUDIT_PER_TURN` records a turn of the event loop, not all in the turn that handled it
(proxy/audit/decisions.py, DecisionRecorder): every record is still made, in order."""

from __future__ import annotations

import asyncio
from pathlib import Path

import uvloop

from aclgate.authz.decision import Decision
from aclgate.authz.model import AclOperation
from aclgate.protocol.enforce.context import DecisionRecord
from aclgate.protocol.header import RequestHeader
from aclgate.proxy.audit import decisions
from aclgate.proxy.audit.decisions import AUDIT_PER_TURN, DecisionRecorder
from aclgate.proxy.audit.log import AuditLog
from tests.fixtures.decisions import decision_record

DENIED = Decision(False, "NO_MATCHING_ACL", None)
HEADER = RequestHeader(3, 12, 1, "c", True, 0)
COUNT = 5 * AUDIT_PER_TURN + 17


class Spy(AuditLog):
    """An audit log that remembers the names it was asked to record, and when."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, "p")
        self.names: list[str] = []

    def record(self, record: DecisionRecord) -> None:
        self.names.append(record.resource_name)
        super().record(record)


def _deny_all(recorder: DecisionRecorder) -> None:
    for i in range(COUNT):
        recorder.decided(
            decision_record(DENIED, f"t{i}", "User:x", "127.0.0.1", operation=AclOperation.DESCRIBE)
        )


def test_one_turn_makes_at_most_its_share_of_audit_records(tmp_path) -> None:
    """Before: all 5,017 records in the turn that handled the request (5,017 here)."""
    audit = Spy(tmp_path / "audit.jsonl")
    recorder = DecisionRecorder({}, audit)
    made_per_turn: list[int] = []

    async def main() -> None:
        _deny_all(recorder)
        made_per_turn.append(len(audit.names))
        while len(audit.names) < COUNT and len(made_per_turn) < 100:
            await asyncio.sleep(0)
            made_per_turn.append(len(audit.names) - sum(made_per_turn))

    uvloop.run(main())
    assert made_per_turn[0] == AUDIT_PER_TURN
    assert max(made_per_turn) <= AUDIT_PER_TURN
    assert audit.names == [f"t{i}" for i in range(COUNT)]  # all, in order


def test_without_an_event_loop_every_record_is_made_at_once(tmp_path) -> None:
    audit = Spy(tmp_path / "audit.jsonl")
    _deny_all(DecisionRecorder({}, audit))
    assert len(audit.names) == COUNT


def test_waiting_records_are_bounded_and_flushed_before_the_log_closes(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(decisions, "AUDIT_MAX_PENDING", 1000)
    audit = Spy(tmp_path / "audit.jsonl")
    recorder = DecisionRecorder({}, audit)

    async def main() -> None:
        _deny_all(recorder)
        # past the bound, records are made at once rather than kept
        assert len(recorder._pending) == 1000
        assert len(audit.names) == COUNT - 1000
        recorder.flush_audit()
        assert len(audit.names) == COUNT

    uvloop.run(main())
    assert sorted(audit.names) == sorted(f"t{i}" for i in range(COUNT))


def test_a_request_decided_a_slice_per_turn_goes_on_once_the_audit_caught_up(
    tmp_path,
) -> None:
    """The NextTurn effect (protocol/enforce/slices.py): the next slice of decisions waits
    until at most AUDIT_CAUGHT_UP records wait, so a request naming 58,000 denied groups is
    decided at the audit's pace and its records never pile up past that mark plus a slice."""
    audit = Spy(tmp_path / "audit.jsonl")
    recorder = DecisionRecorder({}, audit)
    released: list[int] = []

    async def main() -> None:
        recorder.when_caught_up(lambda: released.append(len(recorder._pending)))
        assert released == []  # never at once: in a later turn
        await asyncio.sleep(0)
        assert released == [0]
        _deny_all(recorder)
        _deny_all(recorder)
        waiting = len(recorder._pending)
        assert waiting > decisions.AUDIT_CAUGHT_UP
        recorder.when_caught_up(lambda: released.append(len(recorder._pending)))
        turns = 0
        while len(released) < 2 and turns < 100:
            await asyncio.sleep(0)
            turns += 1
        assert turns > 1  # it waited for the audit

    uvloop.run(main())
    assert released[1] <= decisions.AUDIT_CAUGHT_UP
    assert len(audit.names) >= 2 * COUNT - released[1]
