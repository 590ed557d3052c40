"""Dry-run for chosen principals and resources while the rest is enforced (issue 14 item 6):
real clients through the proxy, the audit's `enforced` flag, and the scope reloaded from its
file while the proxy runs."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import KafkaError

from aclgate.authz.model import ResourceType
from aclgate.protocol.enforce.dryrun import DryRunScope
from aclgate.proxy.config import ConfigError
from tests.enforce.conftest import Enforced, unique, wait_until
from tests.enforce.test_clients_enforced import create_topics, produce
from tests.fixtures.proxy import make_config

DENIED = KafkaError.TOPIC_AUTHORIZATION_FAILED


def codes(result: dict[str, list]) -> dict[str, list]:
    return {t: [e.code() if e is not None else None for e in errs] for t, errs in result.items()}


@pytest.fixture
def scoped(tansu, proxy_factory, users_file, tmp_path):
    acl_file = tmp_path / "acls.json"
    acl_file.write_text('{"version": 1, "acls": []}\n')
    scope_file = tmp_path / "dry-run.json"
    scope_file.write_text(json.dumps({"principals": ["User:bob"]}))
    proxy = proxy_factory(
        tansu.bootstrap,
        listener_security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms="PLAIN",
        users_file=users_file,
        acl_file=acl_file,
        allow_everyone_if_no_acl_found=False,
        super_user=["User:admin"],
        audit_file=tmp_path / "audit.jsonl",
        dry_run_resource=["TOPIC:PREFIXED:payments."],
        dry_run_file=scope_file,
    )
    return Enforced(proxy, acl_file, tmp_path / "audit.jsonl"), scope_file


def test_only_the_chosen_principal_and_resources_are_observed(scoped):
    gate, _ = scoped
    orders, payments = unique("orders"), unique("payments.eu")
    create_topics(gate, orders, payments)
    # bob (principal in the file) and payments.* (resource flag) get through; alice on orders not
    assert codes(produce(gate, "bob", [(orders, b"b")])) == {orders: [None]}
    assert codes(produce(gate, "alice", [(orders, b"a")])) == {orders: [DENIED]}
    assert codes(produce(gate, "alice", [(payments, b"p")])) == {payments: [None]}

    events = [e for e in gate.audit() if e["resource_name"] in (orders, payments)]
    # (alice's producer never gets to WRITE orders: its DESCRIBE is denied, the topic hidden)
    denied = {(e["principal"], e["resource_name"], e["enforced"]) for e in events
              if e["decision"] == "DENIED"}  # fmt: skip
    assert denied == {
        ("User:bob", orders, False),
        ("User:alice", orders, True),
        ("User:alice", payments, False),
    }
    # enforced=false exactly for denials in the scope; every other decision says true
    for e in events:
        in_scope = e["principal"] == "User:bob" or e["resource_name"] == payments
        assert e["enforced"] is not (e["decision"] == "DENIED" and in_scope), e
    ready = gate.proxy.server.readiness()[1]["dry_run"]
    assert ready["selectors"] == ["User:bob", "TOPIC:PREFIXED:payments."]
    assert ready["file_error"] is None


def test_the_scope_file_is_reloaded_while_the_proxy_runs(scoped):
    gate, scope_file = scoped
    server = gate.proxy.server
    orders = unique("orders")
    create_topics(gate, orders)
    assert codes(produce(gate, "bob", [(orders, b"1")])) == {orders: [None]}

    scope_file.write_text(json.dumps({"principals": ["User:alice"]}))  # bob out, alice in
    # picked up by the proxy's own poller (once a second), no reload asked for
    wait_until(lambda: server.policy.dry_run.principals == {"User:alice"}, timeout=10)
    assert codes(produce(gate, "bob", [(orders, b"2")])) == {orders: [DENIED]}
    assert codes(produce(gate, "alice", [(orders, b"3")])) == {orders: [None]}

    scope_file.write_text('{"principals": ["alice"]}')  # broken: alice's scope stays
    assert not gate.proxy.run(server.dry_run.reload_once)
    assert "principalType:principalName" in server.readiness()[1]["dry_run"]["file_error"]
    assert codes(produce(gate, "alice", [(orders, b"4")])) == {orders: [None]}

    scope_file.unlink()  # only the flag's payments.* remains
    gate.proxy.run(server.dry_run.reload_once)  # now, or the poller did it already
    assert server.readiness()[1]["dry_run"]["selectors"] == ["TOPIC:PREFIXED:payments."]
    assert codes(produce(gate, "alice", [(orders, b"5")])) == {orders: [DENIED]}


def test_a_dry_run_scope_never_opens_a_protected_topic():
    from aclgate.authz.authorizer import Authorizer
    from aclgate.authz.model import AclOperation
    from aclgate.protocol.enforce.context import AuthContext, Policy
    from aclgate.protocol.header import RequestHeader

    authorizer = Authorizer()
    authorizer.load([])
    scope = DryRunScope.parse(["User:bob"], ["TOPIC:LITERAL:*"])
    policy = Policy(authorizer, dry_run=scope, protected_topics=frozenset({"__aclgate_acls"}))
    header = RequestHeader(0, 9, 1, "c", False, 0)

    def passes(principal: str, rtype: ResourceType, name: str) -> bool:
        ctx = AuthContext(policy, principal, "10.0.0.1", "PLAINTEXT")
        return ctx.check(header, AclOperation.WRITE, rtype, name)

    assert passes("User:bob", ResourceType.TOPIC, "orders")  # denied, observed only
    assert passes("User:carol", ResourceType.TOPIC, "orders")  # TOPIC:LITERAL:* covers it
    assert not passes("User:carol", ResourceType.GROUP, "orders")
    assert not passes("User:bob", ResourceType.TOPIC, "__aclgate_acls")
    assert not passes("User:carol", ResourceType.TOPIC, "__aclgate_acls")


def test_selectors():
    scope = DryRunScope.parse(
        ["User:team-a"], ["TOPIC:PREFIXED:payments.", "group:literal:billing", "TOPIC:LITERAL:x"]
    )
    T, G = ResourceType.TOPIC, ResourceType.GROUP
    assert scope.covers("User:team-a", G, "anything")
    assert scope.covers("User:b", T, "payments.eu") and not scope.covers("User:b", T, "payments")
    assert scope.covers("User:b", G, "billing") and not scope.covers("User:b", G, "billing-2")
    assert not scope.covers("User:b", G, "payments.eu") and not scope.covers("User:b", T, "y")
    assert not DryRunScope.parse([], [])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"dry_run_principal": ["team-a"]}, "dry-run principal 'team-a'"),
        ({"dry_run_resource": ["TOPIC:payments."]}, "is not TYPE:PATTERN:NAME"),
        ({"dry_run_resource": ["TOPIC:MATCH:x"]}, "pattern must be LITERAL or PREFIXED"),
        ({"dry_run_resource": ["TABLE:LITERAL:x"]}, "unknown ResourceType 'TABLE'"),
    ],
)
def test_bad_selectors_are_refused_at_start(overrides, message):
    with pytest.raises(ConfigError, match=message):
        make_config("127.0.0.1:9092", **overrides)
