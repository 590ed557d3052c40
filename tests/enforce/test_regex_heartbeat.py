"""KIP-848 regex subscriptions through a real aclgate, byte by byte, in front of a scripted
broker: what reaches the broker for each heartbeat of a regex member (the topics the client's
principal may DESCRIBE, as names; its regex wrapped so it matches nothing), the re-resolution
when a topic appears or an ACL changes, and the describe answer showing the member's own
regex. The same against Apache Kafka, through real clients: tests/kafka/test_regex_subscription.py.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta

from aclgate.authz.aclfile import dump_acl_file
from aclgate.authz.model import AclBinding, AclOperation, AclPermissionType, PatternType
from aclgate.authz.model import ResourceType as RT
from aclgate.protocol.codec import encode_response
from aclgate.protocol.enforce import groups, regexsub
from aclgate.protocol.versions import (
    request_class,
    request_module,
    response_class,
    response_module,
)
from aclgate.proxy.listen.server import ProxyServer
from tests.fixtures.proxy import RunningProxy, make_config
from tests.fixtures.rawclient import RawClient
from tests.fixtures.scripted_broker import ScriptedCluster, _defaults, answer_metadata

ANON = "User:ANONYMOUS"


def allow(rtype: RT, name: str, op: AclOperation, pattern: PatternType = PatternType.LITERAL):
    return AclBinding(rtype, name, pattern, ANON, "*", op, AclPermissionType.ALLOW)


BASE_ACLS = [
    allow(RT.GROUP, "g", AclOperation.READ),
    allow(RT.TOPIC, "pub", AclOperation.DESCRIBE, PatternType.PREFIXED),
]


class Cluster:
    """A scripted broker whose topic list the test changes, recording each heartbeat."""

    def __init__(self, scripted: ScriptedCluster):
        self.scripted = scripted
        self.topics = ["pub", "secret", "other", "__consumer_offsets"]
        for node in scripted.nodes:
            node.script[3] = self._metadata
            node.script[68] = self._heartbeat
            node.script[69] = self._describe
        self.heartbeats: list[Any] = []
        #: what the scripted coordinator stored of each member: its names and regex
        self.members: dict[str, tuple[tuple[str, ...] | None, str | None]] = {}

    def _metadata(self, node, header, request):
        if request.topics is None:  # the proxy listing every topic
            cls = request_module(3, header.api_version).MetadataRequestTopic
            topics = tuple(_defaults(cls, name=t) for t in self.topics)
            request = dataclasses.replace(request, topics=topics)
        return answer_metadata(node, header, request)

    def _heartbeat(self, node, header, request):
        self.heartbeats.append(request)
        names, regex = self.members.get(request.member_id, (None, None))
        if request.subscribed_topic_names is not None:
            names = tuple(request.subscribed_topic_names)
        if request.subscribed_topic_regex is not None:
            regex = request.subscribed_topic_regex
        self.members[request.member_id] = (names, regex)
        body = _defaults(
            response_class(68, header.api_version),
            member_id=request.member_id,
            member_epoch=i32(1),
            heartbeat_interval=i32Timedelta.parse(timedelta(seconds=5)),
        )
        return encode_response(header.correlation_id, body)

    def _describe(self, node, header, request):
        mod = response_module(69, header.api_version)
        members = tuple(
            _defaults(
                mod.Member,
                member_id=m,
                subscribed_topic_names=names or (),
                subscribed_topic_regex=regex,
                assignment=_defaults(mod.Assignment),
                target_assignment=_defaults(mod.Assignment),
            )
            for m, (names, regex) in self.members.items()
        )
        groups_ = tuple(
            _defaults(mod.DescribedGroup, group_id=g, members=members) for g in request.group_ids
        )
        body = _defaults(response_class(69, header.api_version), groups=groups_)
        return encode_response(header.correlation_id, body)


@pytest.fixture(scope="module")
def scripted():
    with ScriptedCluster([1]) as c:
        yield c


@pytest.fixture
def setup(scripted, tmp_path, monkeypatch):
    # list the topics again for every heartbeat: a new topic shows at once, not in 5 s
    monkeypatch.setattr(groups, "REGEX_TOPICS_MAX_AGE", -1.0)
    cluster = Cluster(scripted)
    acl_file = tmp_path / "acls.json"
    acl_file.write_text(dump_acl_file(BASE_ACLS))
    proxy = RunningProxy(
        ProxyServer(
            make_config(scripted.bootstrap, acl_file=acl_file, allow_everyone_if_no_acl_found=False)
        )
    )
    yield cluster, proxy, acl_file
    proxy.stop()


def set_acls(proxy: RunningProxy, path: Path, acls: list[AclBinding]) -> None:
    path.write_text(dump_acl_file(acls))
    proxy.run(proxy.server.watcher.reload_once)


def heartbeat(
    member: str = "m1",
    epoch: int = 0,
    regex: str | None = None,
    names: tuple[str, ...] | None = None,
    version: int = 1,
) -> Any:
    fields: dict[str, Any] = {
        "group_id": "g",
        "member_id": member,
        "member_epoch": i32(epoch),
        "subscribed_topic_names": names,
        "topic_partitions": () if epoch == 0 else None,
        "rebalance_timeout": i32Timedelta.parse(timedelta(seconds=30 if epoch == 0 else 0))
        if epoch == 0
        else i32Timedelta.parse(timedelta(milliseconds=-1)),
    }
    if version >= 1:
        fields["subscribed_topic_regex"] = regex
    return _defaults(request_class(68, version), **fields)


def test_the_broker_gets_the_topics_the_principal_may_describe(setup):
    cluster, proxy, _ = setup
    with RawClient(proxy.bootstrap) as client:
        got = client.request(heartbeat(regex="pub.*|secret", names=()))
    assert got.error_code == ErrorCode.none
    sent = cluster.heartbeats[-1]
    assert sent.subscribed_topic_names == ("pub",)
    assert sent.subscribed_topic_regex == regexsub.wrap("pub.*|secret")
    assert regexsub.compiled(sent.subscribed_topic_regex).fullmatch("pub") is None


def test_a_new_topic_and_a_new_acl_are_sent_on_the_next_heartbeat(setup):
    cluster, proxy, acl_file = setup
    with RawClient(proxy.bootstrap) as client:
        client.request(heartbeat(regex="pub.*|secret", names=()))
        client.request(heartbeat(epoch=1))  # nothing new: forwarded as it is
        assert cluster.heartbeats[-1].subscribed_topic_names is None
        assert cluster.heartbeats[-1].subscribed_topic_regex is None

        cluster.topics.append("pub2")  # created later, covered by the PREFIXED ACL
        client.request(heartbeat(epoch=1))
        assert cluster.heartbeats[-1].subscribed_topic_names == ("pub", "pub2")
        assert cluster.heartbeats[-1].subscribed_topic_regex is None  # the broker keeps it

        set_acls(proxy, acl_file, [*BASE_ACLS, allow(RT.TOPIC, "secret", AclOperation.DESCRIBE)])
        client.request(heartbeat(epoch=1))
        assert cluster.heartbeats[-1].subscribed_topic_names == ("pub", "pub2", "secret")

        set_acls(proxy, acl_file, BASE_ACLS)  # revoked again: taken out
        client.request(heartbeat(epoch=1))
        assert cluster.heartbeats[-1].subscribed_topic_names == ("pub", "pub2")


def test_dropping_the_regex_resets_the_names_aclgate_sent(setup):
    cluster, proxy, _ = setup
    with RawClient(proxy.bootstrap) as client:
        client.request(heartbeat(regex="pub|secret", names=()))
        client.request(heartbeat(epoch=1, regex=""))
    assert cluster.heartbeats[-1].subscribed_topic_regex == ""
    assert cluster.heartbeats[-1].subscribed_topic_names == ()


def test_explicit_names_are_kept_beside_the_regex(setup):
    cluster, proxy, acl_file = setup
    set_acls(proxy, acl_file, [*BASE_ACLS, allow(RT.TOPIC, "other", AclOperation.DESCRIBE)])
    with RawClient(proxy.bootstrap) as client:
        client.request(heartbeat(regex="pub", names=("other",)))
        assert cluster.heartbeats[-1].subscribed_topic_names == ("other", "pub")
        # a named topic the principal may not DESCRIBE is still 29, as Kafka answers it
        got = client.request(heartbeat(epoch=1, names=("secret",)))
        assert got.error_code == ErrorCode.topic_authorization_failed


@pytest.mark.parametrize(
    ("regex", "description"),
    [
        ("(", "missing closing )"),
        ("pub++", "invalid nested repetition operator"),
        ("(?=x)", "invalid or unsupported Perl syntax"),
        ("\\C", "invalid escape sequence"),  # RE2 takes it, RE2J refuses it
    ],
)
def test_an_invalid_regex_is_refused_as_kafka_refuses_it(setup, regex, description):
    cluster, proxy, _ = setup
    with RawClient(proxy.bootstrap) as client:
        got = client.request(heartbeat(regex=regex, names=()))
    assert got.error_code == ErrorCode.invalid_regular_expression
    assert got.error_message == (
        f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {description}."
    )
    assert cluster.heartbeats == []  # never reached the broker


def test_describe_shows_the_members_own_regex(setup):
    cluster, proxy, acl_file = setup
    set_acls(proxy, acl_file, [*BASE_ACLS, allow(RT.GROUP, "g", AclOperation.DESCRIBE)])
    with RawClient(proxy.bootstrap) as client:
        client.request(heartbeat(regex="pub.*|secret", names=()))
        client.request(heartbeat(member="m2", regex="nothing", names=("pub",)))
        body = _defaults(
            request_class(69, 1), group_ids=("g",), include_authorized_operations=False
        )
        got = client.request(body)
    shown = {
        m.member_id: (m.subscribed_topic_names, m.subscribed_topic_regex)
        for m in got.groups[0].members
    }
    assert shown == {"m1": ((), "pub.*|secret"), "m2": (("pub",), "nothing")}
    # what the broker holds is aclgate's form
    assert cluster.members["m1"] == (("pub",), regexsub.wrap("pub.*|secret"))


def test_a_leaving_member_is_forgotten(setup):
    cluster, proxy, _ = setup
    with RawClient(proxy.bootstrap) as client:
        client.request(heartbeat(regex="pub", names=()))
        client.request(heartbeat(epoch=-1))
        cluster.topics.append("pub3")
        client.request(heartbeat(epoch=1))  # unknown now: forwarded as it is
    assert cluster.heartbeats[-1].subscribed_topic_names is None
