"""Equivalence scenarios for principals from client certificates (mTLS), issue 13.

Both sides map the certificate subject with the same `ssl.principal.mapping.rules`
(`RULE:^CN=([^,]+),OU=eng,.*$/$1/L,DEFAULT`): "CN=Alice,OU=eng,O=example" becomes User:alice
(the rule lower-cases), "CN=bob,OU=eng,O=example" User:bob, and carol's
"CN=carol,OU=ops,O=example" matches no rule, so DEFAULT keeps the whole subject as the name
(Kafka's RFC 2253 form). ACLs name these principals; the steps are the same as over SASL.
"""

from __future__ import annotations

from tests.equivalence.harness import CLUSTER, Run, Scenario, allow, deny

ALICE, BOB = "User:alice", "User:bob"
CAROL = "User:CN=carol,OU=ops,O=example"
PRINCIPALS = (ALICE, BOB, CAROL)


def _who(p: str) -> str:
    return {ALICE: "alice", BOB: "bob", CAROL: "carol"}[p]


def mtls_roles(r: Run) -> None:
    r.observer.create_topic("orders", records=["o0"])
    for p in PRINCIPALS:
        r.step(f"produce orders as {_who(p)}", p, lambda c, p=p: c.produce("orders", [_who(p)]))
    for p in PRINCIPALS:
        r.step(
            "consume orders in readers",
            p,
            lambda c, p=p: c.consume("orders", f"readers-{_who(p)}", 2),
        )
        r.step("fetch orders (one request)", p, lambda c: c.raw_fetch(["orders"]))
        r.step("metadata orders, secret", p, lambda c: c.raw_metadata(["orders", "secret"]))
    r.observe("records in orders", lambda o: o.records("orders"))


def mtls_admin(r: Run) -> None:
    for p in PRINCIPALS:
        r.step("create own topic", p, lambda c, p=p: c.create_topics([f"{_who(p)}-t"]))
        r.step("list_topics", p, lambda c: c.list_topics())
        r.step("describe cluster", p, lambda c: c.describe_cluster())
        r.step(
            "InitProducerId, transactional id of one's own",
            p,
            lambda c, p=p: c.raw_init_producer_id(f"{_who(p)}-tx"),
        )
    r.step("carol deletes alice-t", CAROL, lambda c: c.delete_topics(["alice-t"]))
    r.step("alice deletes alice-t", ALICE, lambda c: c.delete_topics(["alice-t"]))


MTLS_SCENARIOS: list[Scenario] = [
    Scenario(
        "mtls-roles",
        "alice writes, bob and carol (a DEFAULT-mapped subject) read in their groups, a "
        "DENY for carol on the group",
        mtls_roles,
        principals=PRINCIPALS,
        acls=(
            allow(ALICE, "WRITE", "TOPIC", "orders"),
            allow(BOB, "READ", "TOPIC", "orders"),
            allow(CAROL, "READ", "TOPIC", "orders"),
            allow("User:*", "READ", "GROUP", "readers-", pattern="PREFIXED"),
            deny(CAROL, "READ", "GROUP", "readers-carol"),
            allow(CAROL, "DESCRIBE", "TOPIC", "secret"),
        ),
    ),
    Scenario(
        "mtls-admin",
        "create topics and transactional ids in one's own prefix, cluster DESCRIBE for the "
        "DEFAULT-mapped subject, DELETE across principals",
        mtls_admin,
        principals=PRINCIPALS,
        acls=(
            *(
                allow(p, "ALL", kind, f"{_who(p)}-", pattern="PREFIXED")
                for p in PRINCIPALS
                for kind in ("TOPIC", "TRANSACTIONAL_ID")
            ),
            allow(CAROL, "DESCRIBE", "CLUSTER", CLUSTER),
            allow(CAROL, "DELETE", "TOPIC", "alice-", pattern="PREFIXED"),
            deny(BOB, "DESCRIBE", "CLUSTER", CLUSTER),
        ),
    ),
]
