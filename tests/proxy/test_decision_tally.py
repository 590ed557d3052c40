"""Allowed decisions that nothing but the counters wants are counted by AuthContext.check
itself, without a DecisionRecord or a call into the sink (issue 24: the sink's Python frame
was ~5,000 of a compiled Produce's ~53,000 instructions). What the sink did with them must not
change: the counts, the DEBUG lines when they are on, the audit trail when it is on."""

from __future__ import annotations

import logging

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import AclBinding, AclOperation, ResourceType
from aclgate.protocol.enforce.context import AuthContext, DecisionRecord, Policy
from aclgate.protocol.header import RequestHeader
from aclgate.proxy.audit.decisions import DecisionRecorder
from aclgate.proxy.audit.log import AuditLog
from aclgate.proxy.ops.metrics import HotCounters
from tests.enforce.test_hotpath import ALLOW_ORDERS, metadata_request
from tests.fixtures.rawclient import RawClient
from tests.fixtures.wait import wait_until

WRITE, TOPIC = AclOperation.WRITE, ResourceType.TOPIC
PRODUCE_V9 = RequestHeader(0, 9, 1, "c", True, 13)
ALLOWED = (0, WRITE, TOPIC, True, True)
DENIED = (0, WRITE, TOPIC, False, True)


class SpyRecorder(DecisionRecorder):
    """The proxy's sink, noting the records it is handed."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.records: list[DecisionRecord] = []

    def decided(self, record: DecisionRecord) -> None:
        self.records.append(record)
        super().decided(record)


def alice(sink: DecisionRecorder) -> AuthContext:
    """User:alice may write `orders`, nothing else."""
    authorizer = Authorizer()
    authorizer.load([AclBinding.from_dict(ALLOW_ORDERS)])
    return AuthContext(Policy(authorizer=authorizer, sink=sink), "User:alice", "10.0.0.1", "L")


def authorizer_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "aclgate.authorizer"]


def test_an_allowed_decision_is_only_counted(caplog):
    caplog.set_level(logging.INFO, logger="aclgate.authorizer")
    hot = HotCounters()
    sink = SpyRecorder(hot.decisions, None)
    ctx = alice(sink)
    assert sink.allowed_tally is hot.decisions
    assert all(ctx.check(PRODUCE_V9, WRITE, TOPIC, "orders") for _ in range(3))
    assert sink.records == [] and hot.decisions == {ALLOWED: 3}
    assert authorizer_lines(caplog) == []


def test_a_denial_still_reaches_the_sink(caplog):
    caplog.set_level(logging.INFO, logger="aclgate.authorizer")
    hot = HotCounters()
    sink = SpyRecorder(hot.decisions, None)
    ctx = alice(sink)
    assert not ctx.check(PRODUCE_V9, WRITE, TOPIC, "payroll")
    assert [r.resource_name for r in sink.records] == ["payroll"]
    assert hot.decisions == {DENIED: 1}
    assert any("is Denied operation = WRITE" in line for line in authorizer_lines(caplog))


def test_with_debug_lines_on_every_allowed_decision_is_recorded(caplog):
    caplog.set_level(logging.DEBUG, logger="aclgate.authorizer")
    hot = HotCounters()
    sink = SpyRecorder(hot.decisions, None)
    assert sink.allowed_tally is None
    assert alice(sink).check(PRODUCE_V9, WRITE, TOPIC, "orders")
    assert len(sink.records) == 1 and hot.decisions == {ALLOWED: 1}
    assert any("is Allowed operation = WRITE" in line for line in authorizer_lines(caplog))


def test_a_log_level_changed_later_is_followed(caplog):
    caplog.set_level(logging.INFO, logger="aclgate.authorizer")
    hot = HotCounters()
    sink = SpyRecorder(hot.decisions, None)
    ctx = alice(sink)
    assert ctx.check(PRODUCE_V9, WRITE, TOPIC, "orders") and sink.records == []
    caplog.set_level(logging.DEBUG, logger="aclgate.authorizer")
    sink.follow_log_level()  # what the server's sweeper does every second at most
    assert ctx.check(PRODUCE_V9, WRITE, TOPIC, "orders") and len(sink.records) == 1
    caplog.set_level(logging.INFO, logger="aclgate.authorizer")
    sink.follow_log_level()
    assert ctx.check(PRODUCE_V9, WRITE, TOPIC, "orders") and len(sink.records) == 1
    assert hot.decisions == {ALLOWED: 3}


def test_with_an_audit_trail_every_allowed_decision_is_audited(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="aclgate.authorizer")
    hot = HotCounters()
    sink = SpyRecorder(hot.decisions, None)
    sink.audit = audit = AuditLog(tmp_path / "audit.jsonl", "proxy", clock=lambda: 1000.0)
    assert sink.allowed_tally is None
    ctx = alice(sink)
    assert ctx.check(PRODUCE_V9, WRITE, TOPIC, "orders")
    audit.close()
    assert len(sink.records) == 1 and hot.decisions == {ALLOWED: 1}
    assert '"orders"' in audit.path.read_text()
    sink.audit = None  # off again: counted only
    assert ctx.check(PRODUCE_V9, WRITE, TOPIC, "orders") and len(sink.records) == 1


def test_a_running_proxy_follows_a_debug_level_set_after_it_started(tansu, proxy_factory, caplog):
    """The authorizer's DEBUG lines, switched on while the proxy runs, appear within about a
    second (the sweeper's tick) without a restart."""
    caplog.set_level(logging.INFO, logger="aclgate.authorizer")
    proxy = proxy_factory(tansu.bootstrap, allow_everyone_if_no_acl_found=True)
    with RawClient(proxy.bootstrap, timeout=10) as client:
        client.send_raw(metadata_request(1, ("tally",)))
        assert client.recv_frame()
        assert not [m for m in authorizer_lines(caplog) if " is Allowed " in m]
        caplog.set_level(logging.DEBUG, logger="aclgate.authorizer")
        corr = iter(range(2, 10_000))

        def allowed_line_written() -> bool:
            client.send_raw(metadata_request(next(corr), ("tally",)))
            assert client.recv_frame()
            return any(" is Allowed " in m for m in authorizer_lines(caplog))

        wait_until(allowed_line_written, 10)
