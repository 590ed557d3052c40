"""The authorizer's denial log has a rate limit: a flood of denials costs a bounded number of
lines, and summary lines say how many were held back (B2 of issue 15: 1.27 million lines in a
minute from one client pipelining denied Produce requests)."""

from __future__ import annotations

import logging
import re
import threading
from types import SimpleNamespace

from aclgate.authz.decision import Decision
from aclgate.authz.model import AclOperation
from aclgate.protocol.codec import encode_request
from aclgate.proxy.audit.decisions import DecisionRecorder, DenialLogLimiter, kafka_log_line
from aclgate.proxy.ops.metrics import HotCounters
from tests.fixtures.decisions import decision_record
from tests.fixtures.rawclient import RawClient
from tests.fixtures.wait import wait_until
from tests.proxy.test_log_safety import denied_produce

SUMMARY = re.compile(r"^suppressed (\d+) denial lines for ")
DENY = Decision(False, "NO_MATCH", None)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def recorder(clock: Clock, **limits) -> tuple[DecisionRecorder, HotCounters]:
    hot = HotCounters()
    return DecisionRecorder(hot.decisions, None, DenialLogLimiter(clock=clock, **limits)), hot


#: the recorder reads only principal and host from the context
NO_POLICY = SimpleNamespace(
    authorizer=SimpleNamespace(authorize=None, super_users=frozenset()),
    sink=None,
    protected_topics=frozenset(),
)


def deny(rec: DecisionRecorder, topic: str = "secret", principal: str = "User:eve") -> None:
    rec.decided(decision_record(DENY, topic, principal, "10.0.0.9", client_id="cli"))


def messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "aclgate.authorizer"]


def suppressed_in(lines: list[str]) -> int:
    return sum(int(m.group(1)) for m in map(SUMMARY.match, lines) if m)


def test_a_flood_of_one_denial_writes_the_limit_then_one_summary(caplog):
    caplog.set_level(logging.INFO, logger="aclgate.authorizer")
    clock = Clock()
    rec, hot = recorder(clock)
    for _ in range(5000):
        deny(rec)
    lines = messages(caplog)
    expected = kafka_log_line(decision_record(DENY, "secret", "User:eve", "10.0.0.9"))
    assert lines == [expected] * 10  # Kafka's line, unchanged, up to the limit
    clock.now += 1.0
    deny(rec)  # the next window: its first denial is written after the summary of the last
    lines = messages(caplog)
    assert lines[10] == (
        "suppressed 4990 denial lines for Principal = User:eve operation = WRITE on resource = "
        "Topic:LITERAL:secret for request = Produce in the last 1 s (at most 10 a second for "
        "one principal, operation, resource and request, 1000 in all)"
    )
    assert lines[11] == expected and len(lines) == 12
    assert hot.decisions.denial_log.suppressed == 4990
    (family,) = [f for f in hot.collect() if f.name == "aclgate_denial_log_suppressed"]
    assert family.samples[0].value == 4990
    # every denial is still counted as a decision
    assert sum(hot.decisions.values()) == 5001


def test_distinct_keys_are_bounded_overall_and_summarised(caplog):
    """A client that names a new topic in every request gets at most `per_second` lines a
    second, the limiter tracks at most that many keys, and one line sums up the rest."""
    caplog.set_level(logging.INFO, logger="aclgate.authorizer")
    clock = Clock()
    rec, _ = recorder(clock, per_second=100)
    for i in range(3000):
        deny(rec, topic=f"t{i}\n")
    assert len(rec.denial_log._seen) <= 100
    rec.denial_log.flush()
    lines = messages(caplog)
    assert len(lines) == 101
    assert lines[-1].startswith("suppressed 2900 denial lines for other principals")
    assert all("\n" not in line for line in lines)
    assert rec.denial_log.suppressed == 2900


def test_each_key_has_its_own_limit_and_a_quiet_key_is_untouched(caplog):
    caplog.set_level(logging.INFO, logger="aclgate.authorizer")
    clock = Clock()
    rec, _ = recorder(clock, per_key=3)
    for _ in range(50):
        deny(rec, principal="User:noisy")
    deny(rec, principal="User:quiet")
    rec.denial_log.flush()
    lines = messages(caplog)
    assert sum("User:noisy is Denied" in line for line in lines) == 3
    assert sum("User:quiet is Denied" in line for line in lines) == 1
    assert suppressed_in(lines) == 47 and "Principal = User:noisy operation" in lines[-1]


def test_allowed_decisions_are_not_limited(caplog):
    caplog.set_level(logging.DEBUG, logger="aclgate.authorizer")
    rec, _ = recorder(Clock(), per_key=1)
    for _ in range(20):
        rec.decided(
            decision_record(
                Decision(True, "ACL", None), operation=AclOperation.READ, api_key=1, api_version=12
            )
        )
    assert len(messages(caplog)) == 20 and rec.denial_log.suppressed == 0


def test_pipelined_denied_produce_through_the_proxy(tansu, proxy_factory, tmp_path, caplog):
    """One client pipelines 3,000 denied Produce requests: every one is answered, a few lines
    are written, the rest are summed up in summary lines (written by a timer, with no further
    denial needed) and counted in aclgate_denial_log_suppressed_total."""
    caplog.set_level(logging.INFO, logger="aclgate.authorizer")
    acls = tmp_path / "acls.json"
    acls.write_text('{"version": 1, "acls": []}')
    proxy = proxy_factory(tansu.bootstrap, acl_file=acls, allow_everyone_if_no_acl_found=False)
    n = 3000
    with RawClient(proxy.bootstrap, timeout=30) as client:
        frames = b"".join(encode_request(i, denied_produce("secret"), "flood") for i in range(n))
        sender = threading.Thread(target=client.send_raw, args=(frames,))
        sender.start()
        answers = [client.recv_frame() for _ in range(n)]
        sender.join()
    assert all(answers)
    wait_until(lambda: suppressed_in(messages(caplog)) + len(denials(caplog)) == n, 5)
    written = denials(caplog)
    assert 10 <= len(written) <= 100, len(written)
    assert proxy.metric("aclgate_denial_log_suppressed_total") == n - len(written)


def denials(caplog) -> list[str]:
    return [m for m in messages(caplog) if m.startswith("Principal = User:ANONYMOUS is Denied")]
