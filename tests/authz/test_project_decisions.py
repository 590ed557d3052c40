"""Suite P: aclgate's own decisions, not Kafka's tests (docs/authz.md, "Tests ported from
Kafka").

P2 is ported for the authorizer's half only (exact host-string matching); turning a socket
address into Java's host string is the proxy's job and is tested there.
"""

from __future__ import annotations

import pytest

from tests.authz.helpers import ALLOW, DENY, LIT, PRE, TX, C, G, Op, T, acl, decide, loaded

ALICE = "User:alice@10.0.0.1"


# P1 — docs/authz.md, "The literal `*` ACL": a LITERAL `*` ACL matches every name, also names
# starting with `*` (KRaft does not).
@pytest.mark.parametrize(
    ("acls", "allow_everyone", "op", "rtype", "name", "expected"),
    [
        ([acl(G, "*", LIT, "User:*", "*", Op.READ, ALLOW)], False, Op.READ, G, "*foo", "ALLOW"),
        ([acl(G, "*", LIT, "User:*", "*", Op.READ, ALLOW)], False, Op.READ, G, "*", "ALLOW"),
        ([acl(G, "*", LIT, "User:*", "*", Op.READ, DENY)], True, Op.READ, G, "*foo", "DENY"),
        (
            [acl(G, "*", LIT, "User:*", "*", Op.READ, DENY),
             acl(G, "*foo", LIT, "User:alice", "*", Op.READ, ALLOW)],
            False, Op.READ, G, "*foo", "DENY",
        ),
        ([acl(TX, "*", LIT, "User:*", "*", Op.WRITE, ALLOW)], False, Op.WRITE, TX, "**", "ALLOW"),
        ([acl(G, "*", PRE, "User:*", "*", Op.READ, ALLOW)], False, Op.READ, G, "*foo", "ALLOW"),
        ([acl(G, "*", PRE, "User:*", "*", Op.READ, ALLOW)], False, Op.READ, G, "foo", "DENY"),
    ],
)  # fmt: skip
def test_p1_literal_wildcard_matches_names_starting_with_star(
    acls, allow_everyone, op, rtype, name, expected
):
    assert decide(loaded(acls, allow_everyone=allow_everyone), ALICE, op, rtype, name) == expected


def test_p1_literal_wildcard_counts_as_an_acl_on_the_resource():
    authz = loaded([acl(G, "*", LIT, "User:bob", "*", Op.READ, ALLOW)], allow_everyone=True)
    decision = authz.authorize("User:alice", "10.0.0.1", Op.READ, G, "*foo")
    assert (decision.allowed, decision.rule) == (False, "DEFAULT_DENY")


# P2 — exact host strings, Java's formatting (docs/authz.md, "Hosts")
@pytest.mark.parametrize(
    ("acl_host", "query_host", "expected"),
    [
        ("0:0:0:0:0:0:0:1", "0:0:0:0:0:0:0:1", "ALLOW"),
        ("::1", "0:0:0:0:0:0:0:1", "DENY"),
        ("2001:db8:0:0:0:0:0:1", "2001:db8:0:0:0:0:0:1", "ALLOW"),
        ("2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8:0:0:0:0:0:1", "DENY"),
        ("10.1.2.3", "10.1.2.3", "ALLOW"),
    ],
)
def test_p2_hosts_compare_as_exact_strings(acl_host, query_host, expected):
    authz = loaded([acl(T, "t", LIT, "User:alice", acl_host, Op.READ, ALLOW)])
    assert decide(authz, f"User:alice@{query_host}", Op.READ, T, "t") == expected


# P3 — allow.everyone.if.no.acl.found applies only when no ACL at all covers the name
# (docs/authz.md, "How a decision is made", rule 3)
@pytest.mark.parametrize(
    ("binding", "name", "expected"),
    [
        (acl(T, "t1", LIT, "User:bob", "*", Op.READ, ALLOW), "t1", "DENY"),
        (acl(T, "t1", LIT, "User:bob", "*", Op.READ, ALLOW), "t2", "ALLOW"),
        (acl(T, "t", PRE, "User:bob", "*", Op.READ, ALLOW), "t2", "DENY"),
    ],
)
def test_p3_allow_everyone_scope(binding, name, expected):
    assert decide(loaded([binding], allow_everyone=True), ALICE, Op.WRITE, T, name) == expected


def test_user_wildcard_matches_every_principal_type():
    authz = loaded([acl(T, "t", LIT, "User:*", "*", Op.READ, ALLOW)])
    assert decide(authz, "Group:ops@1.2.3.4", Op.READ, T, "t") == "ALLOW"


def test_other_principal_types_have_no_wildcard():
    authz = loaded([acl(T, "t", LIT, "Group:*", "*", Op.READ, ALLOW)])
    assert decide(authz, "Group:ops@1.2.3.4", Op.READ, T, "t") == "DENY"


def test_names_and_principals_are_case_sensitive():
    authz = loaded([acl(T, "Orders", LIT, "User:Alice", "*", Op.READ, ALLOW)])
    assert decide(authz, "User:Alice@1.2.3.4", Op.READ, T, "Orders") == "ALLOW"
    assert decide(authz, "User:alice@1.2.3.4", Op.READ, T, "Orders") == "DENY"
    assert decide(authz, "User:Alice@1.2.3.4", Op.READ, T, "orders") == "DENY"
    assert decide(authz, "user:Alice@1.2.3.4", Op.READ, T, "Orders") == "DENY"


def test_authorize_does_not_restrict_operations_per_type():
    # docs/authz.md, "How a decision is made": ALLOW READ on CLUSTER is legal and effective
    authz = loaded([acl(C, "kafka-cluster", LIT, "User:a", "*", Op.READ, ALLOW)])
    assert decide(authz, "User:a@1.1.1.1", Op.READ, C, "kafka-cluster") == "ALLOW"
    assert decide(authz, "User:a@1.1.1.1", Op.DESCRIBE, C, "kafka-cluster") == "ALLOW"
