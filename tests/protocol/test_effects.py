"""The session's contract with the IO layer (protocol/effects.py), driven without a socket.

Every wait a request can make is an effect handed to `SessionIO.perform(token, effect)` and
continued by `session.resume(token, result)`; these tests play the IO layer.
"""

from __future__ import annotations

import struct
import uuid
from datetime import timedelta
from typing import Any

import pytest
from kio.static.primitive import i32Timedelta

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from aclgate.protocol import codec
from aclgate.protocol.apiversions import unsupported_version_response
from aclgate.protocol.effects import (
    NO_RESUME,
    DroppedApiKeys,
    LookUpPartitionCounts,
    LookUpTopicIds,
)
from aclgate.protocol.enforce import base
from aclgate.protocol.enforce.context import AuthContext, Policy
from aclgate.protocol.enforce.table import advertised_versions, handlers
from aclgate.protocol.session import ProxySession, SessionConfig
from tests.fixtures.rawclient import module, request_entity
from tests.protocol.test_session import FakeIO, split_frames

ALLOWED = advertised_versions()
CONFIG = SessionConfig(
    handlers=handlers(),
    allowed_versions=ALLOWED,
    unsupported_api_versions=lambda corr: unsupported_version_response(corr, ALLOWED[18][1]),
)
API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 99, -1)


def _session(acls: list[AclBinding] | None = None) -> tuple[ProxySession, FakeIO, Policy]:
    authorizer = Authorizer(allow_everyone_if_no_acl_found=acls is None)
    authorizer.load(acls or [])
    policy = Policy(authorizer=authorizer)
    io = FakeIO()
    ctx = AuthContext(policy, "User:ANONYMOUS", "127.0.0.1", "PLAINTEXT")
    return ProxySession(CONFIG, io, context=ctx), io, policy


#: everything on topic "orders", nothing on the cluster (so DeleteTopics checks per topic)
ORDERS = [
    AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:*", "*",
               AclOperation.ALL, AclPermissionType.ALLOW),
]  # fmt: skip


def _delete_topics_by_id(topic_id: uuid.UUID, corr: int = 7) -> bytes:
    m = module(20, 6)
    body = request_entity(
        20,
        6,
        topics=(m.DeleteTopicState(name=None, topic_id=topic_id),),
        timeout=i32Timedelta.parse(timedelta(seconds=1)),
    )
    return codec.encode_request(corr, body, "t")


def _correlations(data: bytes | bytearray) -> list[int]:
    """Correlation ids of the responses in `data`."""
    return [struct.unpack_from(">i", f, 4)[0] for f in split_frames(bytes(data))]


def _request_correlations(data: bytes | bytearray) -> list[int]:
    """Correlation ids of the requests in `data` (after api key and version)."""
    return [struct.unpack_from(">i", f, 8)[0] for f in split_frames(bytes(data))]


class TestLookUpTopicIds:
    def test_request_waits_and_later_requests_wait_behind_it(self):
        session, io, _ = _session(ORDERS)
        topic_id = uuid.uuid4()
        session.client_data(_delete_topics_by_id(topic_id) + API_VERSIONS_V0)
        ((token, effect),) = io.effects
        assert effect == LookUpTopicIds(frozenset({topic_id}))
        assert not io.upstream, "nothing may pass a request that waits"
        session.resume(token, {topic_id: "orders"})  # the lookup's result, as a value
        assert _request_correlations(io.upstream) == [7, 99]  # in the client's order
        assert len(io.effects) == 1

    @pytest.mark.pure_python  # counts calls through base.decode_request
    def test_a_waiting_request_is_parsed_once(self, monkeypatch):
        decoded: list[int] = []
        real = base.decode_request
        monkeypatch.setattr(
            base, "decode_request", lambda f, h: decoded.append(h.api_key) or real(f, h)
        )
        session, io, _ = _session(ORDERS)
        topic_id = uuid.uuid4()
        session.client_data(_delete_topics_by_id(topic_id) + API_VERSIONS_V0)
        ((token, _),) = io.effects
        session.resume(token, {topic_id: "orders"})
        assert _request_correlations(io.upstream) == [7, 99]
        assert decoded.count(20) == 1, "the waiting request was parsed again"

    def test_the_handler_runs_once_after_the_lookup_each_check_reported_once(self):
        """Ids are looked up before the handler runs, never by running it again: DeleteTopics
        by id checks DELETE on the cluster first, which reaches the sink once."""
        seen: list[tuple[AclOperation, ResourceType, str]] = []

        class Sink:
            def decided(self, record: Any) -> None:
                seen.append((record.operation, record.resource_type, record.resource_name))

        session, io, policy = _session(ORDERS)
        policy.sink = Sink()
        topic_id = uuid.uuid4()
        session.client_data(_delete_topics_by_id(topic_id))
        ((token, _),) = io.effects
        assert seen == [], "nothing is decided before the ids are known"
        session.resume(token, {topic_id: "orders"})
        assert seen.count((AclOperation.DELETE, ResourceType.CLUSTER, "kafka-cluster")) == 1
        assert (AclOperation.DELETE, ResourceType.TOPIC, "orders") in seen

    def test_an_id_still_unknown_after_the_lookup_is_answered_not_looked_up_again(self):
        session, io, _ = _session(ORDERS)
        session.client_data(_delete_topics_by_id(uuid.uuid4()))
        ((token, _),) = io.effects
        session.resume(token, {})
        assert len(io.effects) == 1 and not io.upstream
        (answer,) = split_frames(bytes(io.client))
        body = codec.decode_response(answer, 20, 6)
        assert [r.error_code for r in body.responses] == [100]  # UNKNOWN_TOPIC_ID

    def test_the_connection_context_keeps_no_state_of_the_request(self):
        session, io, _ = _session(ORDERS)
        session.client_data(_delete_topics_by_id(uuid.uuid4()))
        session.resume(io.effects[0][0], {})
        assert session.context.looked_up == frozenset()

    def test_resume_after_close_and_unknown_tokens_do_nothing(self):
        session, io, _ = _session(ORDERS)
        session.client_data(_delete_topics_by_id(uuid.uuid4()))
        token = io.effects[0][0]
        session.fail("gone", "test")
        session.resume(token)
        session.resume(12345)
        assert not io.upstream and not io.client


class TestAnswerLater:
    def test_answer_keeps_its_place_while_later_requests_go_on(self):
        """AddPartitionsToTxn v3 with a denied topic asks which partitions exist; the next
        request is forwarded meanwhile, but its answer waits for the earlier one."""
        allow = [
            AclBinding(ResourceType.TRANSACTIONAL_ID, "t", PatternType.LITERAL, "User:*", "*",
                       AclOperation.ALL, AclPermissionType.ALLOW),
            AclBinding(ResourceType.TOPIC, "ok", PatternType.LITERAL, "User:*", "*",
                       AclOperation.ALL, AclPermissionType.ALLOW),
        ]  # fmt: skip
        session, io, _ = _session(allow)
        m = module(24, 3)
        add = request_entity(
            24,
            3,
            v3_and_below_transactional_id="t",
            v3_and_below_producer_id=1,
            v3_and_below_producer_epoch=0,
            v3_and_below_topics=(
                m.AddPartitionsToTxnTopic(name="ok", partitions=(0, 5)),
                m.AddPartitionsToTxnTopic(name="no", partitions=(0,)),
            ),
        )
        session.client_data(codec.encode_request(7, add, "t") + API_VERSIONS_V0)
        ((token, effect),) = io.effects
        assert effect == LookUpPartitionCounts(frozenset({"ok"}))
        assert _request_correlations(io.upstream) == [99], "a later request is not held"
        session.upstream_data(struct.pack(">iihi", 10, 99, 0, 0))  # ApiVersions answer
        assert not io.client, "an answer overtook one still owed"
        session.resume(token, {"ok": 1})  # "ok" has one partition: 5 does not exist
        first, second = split_frames(bytes(io.client))
        assert _correlations(first + second) == [7, 99]
        body = codec.decode_response(first, 24, 3)
        codes = {
            (t.name, p.partition_index): int(p.partition_error_code)
            for t in body.results_by_topic_v3_and_below
            for p in t.results_by_partition
        }
        assert codes == {("ok", 0): 55, ("ok", 5): 3, ("no", 0): 29}


class TestNotifications:
    def test_dropped_api_keys_are_a_notification(self):
        session, io, _ = _session()
        session.client_data(API_VERSIONS_V0)
        # the cluster announces key 10000, which the proxy does not serve
        entries = struct.pack(">hhh", 18, 0, 4) + struct.pack(">hhh", 10000, 0, 1)
        payload = struct.pack(">ihi", 99, 0, 2) + entries
        session.upstream_data(struct.pack(">i", len(payload)) + payload)
        assert (NO_RESUME, DroppedApiKeys(frozenset({10000}))) in io.effects


@pytest.mark.parametrize("hold", [True, False])
def test_wait_holds_later_requests_only_when_asked(hold: bool):
    session, io, _ = _session()
    tokens: list[Any] = []

    def waiting_handler(session, header, frame):
        session.wait(
            LookUpTopicIds(frozenset()),
            lambda _: session.respond(header, struct.pack(">ii", 4, header.correlation_id)),
            hold=hold,
        )
        tokens.append(io.effects[-1][0])

    session._handlers = {**session._handlers, 32: waiting_handler}
    session.client_data(struct.pack(">ihhih", 10, 32, 1, 7, -1))  # DescribeConfigs v1
    session.client_data(API_VERSIONS_V0)
    assert bool(io.upstream) is not hold


def test_every_effect_that_is_resumed_is_in_the_wait_union():
    """session.wait() hands any `Waits` to SessionIO.perform, typed as the `Wait` union."""
    import typing

    from aclgate.protocol import effects

    # by name: dataclass(slots=True) replaces each class, and the first one lingers as a subclass
    resumed = {cls.__name__ for cls in effects.Waits.__subclasses__()}
    assert resumed == {cls.__name__ for cls in typing.get_args(effects.Wait)}
    assert "StoreAclChange" in resumed


def _module_level(x: int) -> int:
    return x + 1


def test_run_blocking_carries_a_named_function_and_its_arguments_not_a_closure():
    """Effects are data: what a RunBlocking computes is a named function and its arguments,
    never a closure over a request's state."""
    from aclgate.protocol.effects import RunBlocking

    effect = RunBlocking(_module_level, (1,), "10.0.0.1")
    assert effect == RunBlocking(_module_level, (1,), "10.0.0.1")  # compared as a value
    RunBlocking(Authorizer().match_filters, ([],))  # a bound method names its object
    captured = 1

    def local() -> int:
        return captured

    for job in (lambda: 1, local):
        with pytest.raises(TypeError, match="named function"):
            RunBlocking(job)
