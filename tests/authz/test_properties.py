"""Property tests: the indexed Authorizer against the brute-force authz.reference, and suite B
(Kafka's StandardAuthorizerPropertyTest, ported from jqwik to Hypothesis)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aclgate.authz import reference
from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import SUPPORTED_OPERATIONS, AclBinding, AclOperation
from tests.authz.helpers import ALLOW, DENY, LIT, PRE, C, G, Op, T, acl, loaded

# Short names over a tiny alphabet, so that names are often prefixes of each other, equal to
# `*`, or start with `*` (docs/authz.md, "The literal `*` ACL").
names = st.text(alphabet="ab*", max_size=4)
principals = st.sampled_from(["User:a", "User:b", "User:*", "Group:a", "Group:b", "Group:c"])
hosts = st.sampled_from(["h1", "h2", "*"])
operations = st.sampled_from([o for o in AclOperation if o > AclOperation.ANY])
types = st.sampled_from([T, G, C])
bindings = st.builds(
    AclBinding,
    types,
    names,
    st.sampled_from([LIT, PRE]),
    principals,
    hosts,
    operations,
    st.sampled_from([ALLOW, DENY]),
)
acl_sets = st.lists(bindings, max_size=25)
queries = st.tuples(
    st.sampled_from(["User:a", "User:b", "Group:a", "User:super"]),
    st.sampled_from(["h1", "h2"]),
    operations,
    types,
    names,
)
configs = st.tuples(st.sampled_from([(), ("User:super",), ("Group:c",)]), st.booleans())
#: the session's group principals (docs/authz.md, "Group principals"); Group:z has no ACLs
session_groups = st.frozensets(st.sampled_from(["Group:a", "Group:b", "Group:c", "Group:z"]))


def _check_decision(authz: Authorizer, acls, query, config, groups=frozenset(), cidr=False) -> None:
    principal, host, op, rtype, name = query
    expected = reference.authorize(acls, principal, host, op, rtype, name, *config, groups, cidr)
    got = authz.authorize(principal, host, op, rtype, name, groups)
    assert (got.allowed, got.rule) == expected, (query, got)
    if got.rule == "ACL":
        deciding = got.acl
        assert deciding in acls
        assert reference.covers(deciding, rtype, name)
        assert reference.applies(deciding, principal, host, groups, cidr)
        if got.allowed:
            assert deciding.permission_type == ALLOW and reference.grants(deciding, op)
        else:
            assert deciding.permission_type == DENY
            assert deciding.operation in (op, Op.ALL)
    else:
        assert got.acl is None


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(acl_sets, st.lists(queries, min_size=1, max_size=20), configs)
def test_authorize_matches_reference(acls, qs, config):
    authz = Authorizer(super_users=config[0], allow_everyone_if_no_acl_found=config[1])
    authz.load(acls)
    for query in qs:
        _check_decision(authz, acls, query, config)
        _check_decision(authz, acls, query, config)  # the cached answer too


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(acl_sets, st.lists(st.tuples(queries, session_groups), min_size=1, max_size=20), configs)
def test_authorize_with_session_groups_matches_reference(acls, qs, config):
    """A session's groups: their ACLs apply as its own, DENY anywhere wins, a group may be a
    super user, and the cache never hands one session's answer to another."""
    authz = Authorizer(super_users=config[0], allow_everyone_if_no_acl_found=config[1])
    authz.load(acls)
    for query, groups in qs:
        _check_decision(authz, acls, query, config, groups)
        _check_decision(authz, acls, query, config, groups)
        _check_decision(authz, acls, query, config)  # the same user without its groups


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(acl_sets, st.lists(st.tuples(queries, session_groups), min_size=1, max_size=10), configs)
def test_by_resource_type_with_session_groups_matches_reference(acls, qs, config):
    authz = Authorizer(super_users=config[0], allow_everyone_if_no_acl_found=config[1])
    authz.load(acls)
    for (principal, host, op, rtype, _), groups in qs:
        expected = reference.authorize_by_resource_type(
            acls, principal, host, op, rtype, *config, groups
        )
        got = authz.authorize_by_resource_type(principal, host, op, rtype, groups)
        assert got.allowed == expected


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(acl_sets, st.lists(queries, min_size=1, max_size=10), configs)
def test_by_resource_type_matches_reference(acls, qs, config):
    authz = Authorizer(super_users=config[0], allow_everyone_if_no_acl_found=config[1])
    authz.load(acls)
    for principal, host, op, rtype, _ in qs:
        expected = reference.authorize_by_resource_type(acls, principal, host, op, rtype, *config)
        assert authz.authorize_by_resource_type(principal, host, op, rtype).allowed == expected


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(acl_sets, st.lists(queries, min_size=1, max_size=10))
def test_authorized_operations_matches_reference(acls, qs):
    authz = loaded(acls)
    for principal, host, _, rtype, name in qs:
        expected = sum(
            1 << o
            for o in SUPPORTED_OPERATIONS[rtype]
            if reference.authorize(acls, principal, host, o, rtype, name)[0]
        )
        assert authz.authorized_operations(principal, host, rtype, name) == expected


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    acl_sets,
    st.lists(st.tuples(st.lists(bindings, max_size=6), st.lists(bindings, max_size=6)), max_size=6),
    st.lists(queries, min_size=1, max_size=10),
)
def test_incremental_updates_equal_a_fresh_load(initial, batches, qs):
    """Copy-on-write updates must give exactly the decisions of loading the final set."""
    authz = loaded(initial)
    current = set(initial)
    for add, remove in batches:
        # half the removals target ACLs that exist, as deletes usually do
        remove = remove + sorted(current, key=repr)[: len(remove)]
        version = authz.version
        authz.update(add=add, remove=remove)
        current = (current - set(remove)) | set(add)
        assert authz.version >= version
        assert set(authz.acls()) == current and authz.acl_count() == len(current)
    final = sorted(current, key=repr)
    for query in qs:
        _check_decision(authz, final, query, ((), False))
        # the group principals the snapshot matches sessions against follow every update
        _check_decision(authz, final, query, ((), False), frozenset({"Group:a", "Group:b"}))


# --- CIDR hosts (KIP-1276, opt-in; docs/authz.md, "CIDR hosts (KIP-1276, opt-in)") --------

#: networks that nest and overlap, one with host bits set, /0 and /32, IPv6, a malformed one
#: (a literal string), and plain addresses and `*` among them
cidr_acl_hosts = st.sampled_from(
    [
        "10.0.0.0/8",
        "10.1.0.0/16",
        "10.1.2.3/8",
        "10.1.2.3/32",
        "0.0.0.0/0",
        "192.168.1.128/25",
        "2001:db8::/32",
        "2001:db8:0:0:0:0:0:1/128",
        "::/0",
        "10.0.0.0/33",
        "10.1.2.3",
        "2001:db8:0:0:0:0:0:1",
        "*",
    ]
)
#: client hosts as Java prints them, one outside every network, 0.0.0.0 (in no IPv4 network,
#: as commons-net has it), and a query host equal to a CIDR string
cidr_client_hosts = st.sampled_from(
    [
        "10.1.2.3",
        "10.200.0.1",
        "192.168.1.200",
        "192.168.1.7",
        "172.16.0.1",
        "0.0.0.0",
        "2001:db8:0:0:0:0:0:1",
        "2001:db8:0:0:0:0:0:2",
        "2001:db9:0:0:0:0:0:1",
        "0:0:0:0:0:0:0:1",
        "10.0.0.0/8",
    ]
)
# a small universe of names, principals and operations, so that most queries meet ACLs that
# apply to them but for the host: the host decides
cidr_names = st.sampled_from(["a", "ab", "b", "*"])
cidr_operations = st.sampled_from([Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALL])
cidr_bindings = st.builds(
    AclBinding,
    st.sampled_from([T, G]),
    cidr_names,
    st.sampled_from([LIT, PRE]),
    st.sampled_from(["User:a", "User:*", "Group:a"]),
    cidr_acl_hosts,
    cidr_operations,
    st.sampled_from([ALLOW, DENY]),
)
cidr_acl_sets = st.lists(cidr_bindings, max_size=25)
cidr_queries = st.tuples(
    st.sampled_from(["User:a", "User:b", "User:super"]),
    cidr_client_hosts,
    cidr_operations,
    st.sampled_from([T, G]),
    cidr_names,
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    cidr_acl_sets,
    st.lists(st.tuples(cidr_queries, session_groups), min_size=1, max_size=20),
    configs,
    st.booleans(),
)
def test_cidr_authorize_matches_reference(acls, qs, config, cidr):
    """With the option a host with `/` is a network, without it a string; either way the
    indexed authorizer decides as the reference does, and names an ACL that applies."""
    authz = Authorizer(
        super_users=config[0], allow_everyone_if_no_acl_found=config[1], cidr_hosts=cidr
    )
    authz.load(acls)
    for query, groups in qs:
        _check_decision(authz, acls, query, config, groups, cidr)
        _check_decision(authz, acls, query, config, groups, cidr)  # cached
        _check_decision(authz, acls, query, config, frozenset(), cidr)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    cidr_acl_sets,
    st.lists(st.tuples(cidr_queries, session_groups), min_size=1, max_size=10),
    configs,
    st.booleans(),
)
def test_cidr_by_resource_type_matches_reference(acls, qs, config, cidr):
    authz = Authorizer(
        super_users=config[0], allow_everyone_if_no_acl_found=config[1], cidr_hosts=cidr
    )
    authz.load(acls)
    for (principal, host, op, rtype, _), groups in qs:
        expected = reference.authorize_by_resource_type(
            acls, principal, host, op, rtype, *config, groups, cidr
        )
        got = authz.authorize_by_resource_type(principal, host, op, rtype, groups)
        assert got.allowed == expected, (principal, host, op, rtype, groups)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    cidr_acl_sets,
    st.lists(
        st.tuples(st.lists(cidr_bindings, max_size=6), st.lists(cidr_bindings, max_size=6)),
        max_size=6,
    ),
    st.lists(cidr_queries, min_size=1, max_size=10),
)
def test_cidr_incremental_updates_equal_a_fresh_load(initial, batches, qs):
    """The per-type CIDR tables follow copy-on-write updates (counted per host string)."""
    authz = Authorizer(cidr_hosts=True)
    authz.load(initial)
    current = set(initial)
    for add, remove in batches:
        remove = remove + sorted(current, key=repr)[: len(remove)]
        authz.update(add=add, remove=remove)
        current = (current - set(remove)) | set(add)
    fresh = Authorizer(cidr_hosts=True)
    fresh.load(current)
    for rtype, index in authz._snap.types.items():
        assert index.cidr_counts == fresh._snap.types[rtype].cidr_counts
    final = sorted(current, key=repr)
    for query in qs:
        _check_decision(authz, final, query, ((), False), cidr=True)
        principal, host, op, rtype, _ = query
        assert authz.authorize_by_resource_type(principal, host, op, rtype).allowed == (
            reference.authorize_by_resource_type(final, principal, host, op, rtype, cidr=True)
        )


# --- Suite B: StandardAuthorizerPropertyTest ------------------------------------------------

TOPIC_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
topics = st.text(alphabet=TOPIC_CHARS, min_size=1, max_size=30)
suffix_sets = st.lists(st.text(alphabet=TOPIC_CHARS, max_size=8), max_size=10)


def _prefix_rules(topic: str, suffixes: list[str]) -> set[str]:
    return {topic[:i] + s for i in range(len(topic)) for s in suffixes if topic[:i] + s}


def _write(name, pattern, perm):
    return acl(T, name, pattern, "User:*", "*", Op.WRITE, perm)


def _decide_write(acls, topic):
    decision = loaded(acls).authorize("User:user", "10.0.0.1", Op.WRITE, T, topic)
    return "ALLOW" if decision.allowed else "DENY"


@settings(max_examples=300, deadline=None)
@given(topics, suffix_sets, st.data())
def test_b1_matching_prefix_deny_overrides_all_allow_rules(topic, suffixes, data):
    k = data.draw(st.integers(0, len(topic) - 1))  # k = 0: the empty prefix, added directly
    acls = [_write(topic[:k], PRE, DENY)]
    acls += [_write(p, PRE, ALLOW) for p in _prefix_rules(topic, suffixes)]
    assert _decide_write(acls, topic) == "DENY"


@settings(max_examples=300, deadline=None)
@given(topics, suffix_sets)
def test_b2_matching_literal_deny_overrides_all_allow_rules(topic, suffixes):
    acls = [_write(topic, LIT, DENY)]
    acls += [_write(p, PRE, ALLOW) for p in _prefix_rules(topic, suffixes)]
    assert _decide_write(acls, topic) == "DENY"


def _non_matching_denies(topic, suffixes):
    return [_write(p, PRE, DENY) for p in _prefix_rules(topic, suffixes) if not topic.startswith(p)]


@settings(max_examples=300, deadline=None)
@given(topics, suffix_sets, st.data())
def test_b3_matching_prefix_allow_with_no_matching_deny_rules(topic, suffixes, data):
    k = data.draw(st.integers(0, len(topic) - 1))
    acls = [_write(topic[:k], PRE, ALLOW), *_non_matching_denies(topic, suffixes)]
    assert _decide_write(acls, topic) == "ALLOW"


@settings(max_examples=300, deadline=None)
@given(topics, suffix_sets)
def test_b4_matching_literal_allow_with_no_matching_deny_rules(topic, suffixes):
    acls = [_write(topic, LIT, ALLOW), *_non_matching_denies(topic, suffixes)]
    assert _decide_write(acls, topic) == "ALLOW"
