"""Protected topics (protocol/enforce/protected.py): denied to everyone but super users whatever
the ACLs say, in the one call every topic decision goes through. Through a real proxy and
Kafka: tests/aclstore/test_kafka_store_fleet.py."""

from __future__ import annotations

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.index import held_by
from aclgate.authz.model import AclBinding, AclOperation, ResourceType
from aclgate.protocol.enforce.context import DRY_RUN, AuthContext, Policy
from aclgate.protocol.enforce.dryrun import DryRunScope
from aclgate.protocol.enforce.protected import (
    PROTECTED,
    cluster_grant_excludes,
    guard,
    is_protected,
)
from aclgate.protocol.header import RequestHeader

STORE = "__aclgate_acls"


def allow_all(resource_type: str, name: str, pattern: str = "LITERAL") -> AclBinding:
    return AclBinding.from_dict(
        {
            "resource_type": resource_type,
            "resource_name": name,
            "pattern_type": pattern,
            "principal": "User:*",
            "host": "*",
            "operation": "ALL",
            "permission_type": "ALLOW",
        }
    )


def authorizer() -> Authorizer:
    a = Authorizer(super_users=["User:admin"])
    a.load([allow_all("TOPIC", "*"), allow_all("TOPIC", "__", "PREFIXED"), allow_all("GROUP", "*")])
    return a


def test_a_protected_topic_is_denied_whatever_the_acls_say():
    a = authorizer()
    decide = guard(a.authorize, frozenset({STORE}), a.super_users)
    for op in (AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE):
        denied = decide("User:alice", "10.0.0.1", op, ResourceType.TOPIC, STORE, frozenset())
        assert denied is PROTECTED and denied.rule == "DEFAULT_DENY" and denied.acl is None
        assert decide("User:admin", "10.0.0.1", op, ResourceType.TOPIC, STORE, frozenset()).allowed
        assert decide(
            "User:alice", "10.0.0.1", op, ResourceType.TOPIC, "orders", frozenset()
        ).allowed
    # the name protects a topic, not a group of the same name
    assert decide(
        "User:alice", "10.0.0.1", AclOperation.READ, ResourceType.GROUP, STORE, frozenset()
    ).allowed


def test_nothing_protected_costs_nothing():
    a = authorizer()
    assert guard(a.authorize, frozenset(), a.super_users) == a.authorize


def test_the_connection_context_uses_the_guard_and_hides_the_operations():
    a = authorizer()
    policy = Policy(authorizer=a, protected_topics=frozenset({STORE}))
    alice = AuthContext(policy, "User:alice", "10.0.0.1", "PLAINTEXT")
    admin = AuthContext(policy, "User:admin", "10.0.0.1", "PLAINTEXT")
    assert not alice.decide(AclOperation.DESCRIBE, ResourceType.TOPIC, STORE).allowed
    assert alice.authorized_operations(ResourceType.TOPIC, STORE) == 0
    assert alice.authorized_operations(ResourceType.TOPIC, "orders") != 0
    assert admin.authorized_operations(ResourceType.TOPIC, STORE) != 0
    # a copy made for a resumed request keeps the guard
    resumed = alice.with_looked_up(frozenset(), {})
    assert not resumed.decide(AclOperation.READ, ResourceType.TOPIC, STORE).allowed


def test_a_cluster_wide_grant_does_not_reach_a_protected_topic_or_an_id():
    protected, supers = frozenset({STORE}), frozenset({"User:admin"})
    assert not cluster_grant_excludes(protected, supers, "User:alice", ["orders", "payments"])
    assert cluster_grant_excludes(protected, supers, "User:alice", ["orders", STORE])
    # a topic named by id may be the protected one: checked per topic once resolved
    assert cluster_grant_excludes(protected, supers, "User:alice", ["orders", None])
    assert not cluster_grant_excludes(protected, supers, "User:admin", [STORE, None])
    assert not cluster_grant_excludes(frozenset(), supers, "User:alice", [STORE, None])


def test_a_dry_run_observes_the_policy_but_never_opens_a_protected_topic():
    a = authorizer()
    a.load([allow_all("GROUP", "*")])  # no topic ACL: every topic denied ...
    decided: list[tuple[str, bool]] = []

    class Sink:
        def decided(self, record):
            decided.append((record.resource_name, record.enforced))

    policy = Policy(authorizer=a, mode=DRY_RUN, sink=Sink(), protected_topics=frozenset({STORE}))
    alice = AuthContext(policy, "User:alice", "10.0.0.1", "PLAINTEXT")
    header = RequestHeader(0, 9, 1, "test", True, 0)
    # ... but in dry-run only observed, except on the protected topic
    assert alice.check(header, AclOperation.WRITE, ResourceType.TOPIC, "orders")
    assert not alice.check(header, AclOperation.WRITE, ResourceType.TOPIC, STORE)
    assert decided == [("orders", False), (STORE, True)]


def _follower_fetch(principal: str, topic: str) -> tuple[bytes, bytes]:
    """A Fetch v12 with a replica id (what a follower broker sends) through a sans-IO session
    with the real table: (what reached upstream, what the client got)."""
    from datetime import timedelta

    from kio.static.primitive import i32Timedelta

    from aclgate.protocol.codec import encode_request
    from aclgate.protocol.session import ProxySession
    from aclgate.protocol.versions import request_module
    from tests.protocol.test_enforce_fuzz import CONFIG
    from tests.protocol.test_session import FakeIO

    a = authorizer()
    a.update(add=[allow_all("CLUSTER", "kafka-cluster")])  # CLUSTER_ACTION for everyone
    policy = Policy(authorizer=a, protected_topics=frozenset({STORE}))
    mod = request_module(1, 12)
    partition = mod.FetchPartition(
        partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
        log_start_offset=-1, partition_max_bytes=1024,
    )  # fmt: skip
    request = mod.FetchRequest(
        replica_id=1, max_wait=i32Timedelta.parse(timedelta(0)), min_bytes=1, max_bytes=1024, isolation_level=0, session_id=0,
        session_epoch=-1, topics=(mod.FetchTopic(topic=topic, partitions=(partition,)),),
        forgotten_topics_data=(), rack_id="",
    )  # fmt: skip
    io = FakeIO()
    session = ProxySession(CONFIG, io, context=AuthContext(policy, principal, "10.0.0.1", "SSL"))
    session.client_data(encode_request(3, request))
    return bytes(io.upstream), bytes(io.client)


def test_a_follower_fetch_does_not_reach_a_protected_topic():
    """CLUSTER_ACTION lets a follower fetch any topic, but not the ACL store's."""
    upstream, client = _follower_fetch("User:alice", STORE)
    assert upstream == b"" and client  # answered by the proxy (29), nothing forwarded
    upstream, _ = _follower_fetch("User:alice", "orders")
    assert upstream  # any other topic: CLUSTER_ACTION covers it
    upstream, _ = _follower_fetch("User:admin", STORE)
    assert upstream  # a super user passes


def test_super_users_protected_topics_and_dry_run_principals_agree_on_groups():
    """The authorizer's super users, the protected topics' guard and a dry-run scope all ask
    index.held_by: the principal, or one of the session's groups, is in the set."""
    chosen = ["User:admin", "Group:platform-admins"]
    a = Authorizer(super_users=chosen)
    a.load([allow_all("TOPIC", "*")])
    scope = DryRunScope.parse(chosen, [])
    supers = a.super_users
    decide = guard(a.authorize, frozenset({STORE}), supers)
    topic = ResourceType.TOPIC
    for principal, groups, held in [
        ("User:admin", frozenset(), True),
        ("User:ops", frozenset({"Group:platform-admins", "Group:x"}), True),
        ("User:ops", frozenset({"Group:x"}), False),
        ("User:ops", frozenset(), False),
    ]:
        assert held_by(supers, principal, groups) is held
        assert a.is_super_user(principal, groups) is held
        assert scope.covers_principal(principal, groups) is held
        denied = decide(principal, "h", AclOperation.READ, topic, STORE, groups) is PROTECTED
        assert denied is not held
        assert is_protected(frozenset({STORE}), supers, principal, topic, STORE, groups) is not held
        assert cluster_grant_excludes(frozenset({STORE}), supers, principal, [STORE], groups) is (
            not held
        )
