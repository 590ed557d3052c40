"""Log lines built from client input cannot be forged: control characters are escaped."""

from __future__ import annotations

import logging
from datetime import timedelta

from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from aclgate.authz.decision import Decision
from aclgate.proxy.audit.decisions import kafka_log_line
from aclgate.proxy.ops.logs import log_safe
from tests.fixtures.decisions import decision_record
from tests.fixtures.rawclient import RawClient, module, request_entity
from tests.fixtures.wait import wait_until

FORGED = "Principal = User:admin is Allowed operation = WRITE from host = 10.0.0.1"


def denied_produce(topic: str) -> object:
    """A Produce v9 (acks=1, no records) for `topic`: answered by the proxy when denied."""
    mod = module(0, 9)
    return request_entity(
        0,
        9,
        transactional_id=None,
        acks=i16(1),
        timeout=i32Timedelta.parse(timedelta(seconds=1)),
        topic_data=(
            mod.TopicProduceData(
                name=TopicName(topic),
                partition_data=(mod.PartitionProduceData(index=i32(0), records=None),),
            ),
        ),
    )


def test_log_safe_escapes_control_characters_and_keeps_the_rest():
    assert log_safe("a\nb\rc\td") == "a\\nb\\rc\\td"
    assert log_safe("\x00\x1b[31m\x7f\x85\x9f") == "\\x00\\x1b[31m\\x7f\\x85\\x9f"
    assert log_safe("line\u2028sep\u2029") == "line\\u2028sep\\u2029"
    # printable text, non-ASCII letters, no-break spaces and backslashes stay as they are
    for kept in ("orders.v1-x_y", "CN=Jürgen,O=Bücher\\, GmbH", "名前", "a\xa0b", ""):
        assert log_safe(kept) == kept
    text = "orders-" + "x" * 100
    assert log_safe(text) is text  # the common case costs no copy


def test_a_topic_name_with_a_newline_cannot_forge_a_denial_line():
    line = kafka_log_line(
        decision_record(
            Decision(False, "NO_MATCH", None), f"t\n{FORGED}", "User:bob\r", "127.0.0.1"
        )
    )
    assert "\n" not in line and "\r" not in line
    assert line.startswith("Principal = User:bob\\r is Denied operation = WRITE")
    assert f"Topic:LITERAL:t\\n{FORGED} for request = Produce" in line


def test_the_running_proxy_logs_a_forged_topic_name_on_one_line(
    tansu, proxy_factory, tmp_path, caplog
):
    """Through the proxy: a denied Produce for a topic named with a newline and a fake
    'Allowed' line gives one denial log line, with the newline escaped."""
    caplog.set_level(logging.INFO, logger="aclgate.authorizer")
    acls = tmp_path / "acls.json"
    acls.write_text('{"version": 1, "acls": []}')
    proxy = proxy_factory(tansu.bootstrap, acl_file=acls, allow_everyone_if_no_acl_found=False)
    with RawClient(proxy.bootstrap) as client:
        answer = client.request(denied_produce(f"x\n{FORGED}\x1b[2J"))
    assert answer.responses[0].partition_responses[0].error_code == 29  # TOPIC_AUTHORIZATION_FAILED

    def denial_lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "aclgate.authorizer"]

    wait_until(lambda: denial_lines(), 5)
    (line,) = denial_lines()
    assert "\n" not in line and "\x1b" not in line
    assert line.startswith("Principal = User:ANONYMOUS is Denied operation = WRITE")
    assert f"Topic:LITERAL:x\\n{FORGED}\\x1b[2J for request = Produce" in line
