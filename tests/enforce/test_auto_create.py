"""Metadata auto-creation when one request mixes topics the principal may and may not create:
forwarded with auto-creation off, then the creatable missing ones are created by a separate
auto-creating request (the equivalence scenario metadata-missing-topics proves the outcome
against Apache Kafka; this one shows the requests the cluster sees, and a refusal)."""

from __future__ import annotations

import logging
import sys

import pytest
from kio.schema.errors import ErrorCode

from aclgate.authz.aclfile import dump_acl_file
from aclgate.authz.model import AclBinding
from aclgate.protocol.codec import encode_response
from aclgate.protocol.versions import response_class
from tests.fixtures.rawclient import RawClient, module, request_entity
from tests.fixtures.scripted_broker import ScriptedCluster, _defaults
from tests.fixtures.wait import wait_until


def allow(name: str, op: str) -> AclBinding:
    return AclBinding.from_dict(
        {
            "resource_type": "TOPIC",
            "resource_name": name,
            "pattern_type": "LITERAL",
            "principal": "User:ANONYMOUS",
            "host": "*",
            "operation": op,
            "permission_type": "ALLOW",
        }
    )


def metadata(seen: list, auto_create_answer: ErrorCode):
    """Every topic is missing; an auto-creating request gets `auto_create_answer` per topic."""

    def answer(node, header, request):
        auto = bool(getattr(request, "allow_auto_topic_creation", False))
        names = tuple(t.name for t in request.topics or ())
        seen.append((names, auto))
        cls = response_class(3, header.api_version)
        mod = sys.modules[cls.__module__]
        code = auto_create_answer if auto else ErrorCode.unknown_topic_or_partition
        topics = tuple(_defaults(mod.MetadataResponseTopic, error_code=code, name=n) for n in names)
        body = _defaults(
            cls, brokers=node.brokers(mod.MetadataResponseBroker), cluster_id="c", topics=topics
        )
        return encode_response(header.correlation_id, body)

    return answer


@pytest.fixture
def scripted(tmp_path, proxy_factory):
    def start(auto_create_answer: ErrorCode):
        cluster = ScriptedCluster([1]).__enter__()
        seen: list = []
        cluster.nodes[0].script[3] = metadata(seen, auto_create_answer)
        acls = tmp_path / "acls.json"
        acls.write_text(
            dump_acl_file(
                [
                    allow("mix-ok", "CREATE"),
                    allow("mix-ok", "DESCRIBE"),
                    allow("mix-no", "DESCRIBE"),
                ]
            )
        )
        started.append(cluster)
        proxy = proxy_factory(
            cluster.bootstrap, acl_file=acls, allow_everyone_if_no_acl_found=False
        )
        return proxy, seen

    started: list = []
    yield start
    for cluster in started:
        cluster.__exit__(None, None, None)


def ask(proxy, names) -> dict:
    m = module(3, 12)
    req = request_entity(
        3,
        12,
        topics=tuple(m.MetadataRequestTopic(name=n, topic_id=None) for n in names),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    with RawClient(proxy.bootstrap) as raw:
        return {t.name: t.error_code for t in raw.request(req).topics}


def test_the_creatable_topic_is_created_aside(scripted):
    proxy, seen = scripted(ErrorCode.unknown_topic_or_partition)
    answer = ask(proxy, ["mix-ok", "mix-no"])
    assert answer == {
        "mix-ok": ErrorCode.unknown_topic_or_partition,  # as a KRaft broker answers it
        "mix-no": ErrorCode.topic_authorization_failed,
    }
    assert (("mix-ok", "mix-no"), False) in seen  # the client's request, auto-creation off
    wait_until(lambda: (("mix-ok",), True) in seen)  # then mix-ok alone, auto-creating
    assert not any(auto and "mix-no" in names for names, auto in seen)


def test_a_cluster_refusal_is_logged(scripted, caplog):
    proxy, _ = scripted(ErrorCode.topic_authorization_failed)
    with caplog.at_level(logging.WARNING, logger="aclgate"):
        ask(proxy, ["mix-ok", "mix-no"])
        wait_until(lambda: "refused to auto-create" in caplog.text)
    assert "'mix-ok': 'topic_authorization_failed'" in caplog.text
