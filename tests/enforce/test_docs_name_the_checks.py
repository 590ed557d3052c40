"""docs/apis.md cannot drift from what a handler checks.

Every row's "Checks" text (the handler's `describe()`, generated into docs/apis.md) must name
every (operation, resource type) the handler really asks the authorizer about. The valid
request of every API key (tests/enforce/test_admin_apis.py) runs through a sans-IO session
with the real table, once with everything allowed (every check is reached) and once with
nothing allowed, and a sink records each decision; the text must name each one as
"OPERATION RESOURCE_TYPE" (CLUSTER for the cluster, authorizeByResourceType(OP, TYPE) for a
KIP-679 check). Checks made on an answer (ListGroups, ListTransactions filter what the broker
lists) are not reached here: no broker answers; test_admin_apis.py covers those rows.
"""

from __future__ import annotations

import pytest

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import AclOperation, ResourceType
from aclgate.protocol.codec import encode_request
from aclgate.protocol.enforce.context import AuthContext, DecisionRecord, Policy
from aclgate.protocol.enforce.table import TABLE
from aclgate.protocol.session import ProxySession
from tests.enforce.test_admin_apis import CASES, PROFILES
from tests.protocol.test_enforce_fuzz import CONFIG, HOST
from tests.protocol.test_session import FakeIO


class Recorder:
    def __init__(self) -> None:
        self.seen: set[tuple[AclOperation, ResourceType, bool]] = set()

    def decided(self, record: DecisionRecord) -> None:
        self.seen.add(
            (
                record.operation,
                record.resource_type,
                record.ref_count == 0 and record.resource_name == "*",
            )
        )


def _checks(key: int, profile: str) -> set[tuple[AclOperation, ResourceType, bool]]:
    acls = PROFILES[profile]
    authorizer = Authorizer(allow_everyone_if_no_acl_found=acls is None)
    authorizer.load(acls or [])
    recorder = Recorder()
    io = FakeIO()
    io.perform = lambda token, effect: None  # lookups never answer: what ran before counts
    session = ProxySession(
        CONFIG,
        io,
        context=AuthContext(Policy(authorizer=authorizer, sink=recorder), "User:ANONYMOUS",
                            HOST, "PLAINTEXT"),
    )  # fmt: skip
    session.client_data(encode_request(7, CASES[key].request()))
    return recorder.seen


def _named(text: str, operation: AclOperation, resource_type: ResourceType, by_type: bool) -> bool:
    if by_type:
        return f"authorizeByResourceType({operation.name}, {resource_type.name})" in text
    return f"{operation.name} {resource_type.name}" in text


@pytest.mark.parametrize("key", sorted(CASES))
def test_the_docs_name_every_check_a_handler_makes(key: int) -> None:
    text = TABLE[key].handler.describe()
    seen = _checks(key, "open") | _checks(key, "none")
    missing = sorted(
        f"{'authorizeByResourceType ' if t else ''}{o.name} {r.name}"
        for o, r, t in seen
        if not _named(text, o, r, t)
    )
    assert missing == [], f"docs/apis.md row {key} ({text!r}) does not name {missing}"


def test_the_drift_check_can_fail() -> None:
    assert not _named("`READ TOPIC[name]`", AclOperation.WRITE, ResourceType.TOPIC, False)
    assert _checks(0, "open")  # Produce asks about its topics
