"""The `kafka` ACL store's record format and log state, without a broker (the store itself is
proven against Apache Kafka in test_kafka_store.py)."""

from __future__ import annotations

import json
import uuid

import pytest

from aclgate.authz.acllog import AclLogState
from aclgate.authz.aclrecords import (
    CHANGE_HEADER,
    COUNT_HEADER,
    AclRecord,
    RecordDecodeError,
    decode,
    encode_change,
    encode_value,
)
from aclgate.authz.fingerprint import acl_fingerprint
from aclgate.authz.model import AclBinding


def acl(
    name: str = "orders", principal: str = "User:alice", permission: str = "ALLOW"
) -> AclBinding:
    return AclBinding.from_dict(
        {
            "resource_type": "TOPIC",
            "resource_name": name,
            "pattern_type": "LITERAL",
            "principal": principal,
            "host": "*",
            "operation": "READ",
            "permission_type": permission,
        }
    )


def test_a_change_round_trips_with_its_headers():
    a, b = acl("a"), acl("b", permission="DENY")
    ua, ub, gone = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    change_id, records = encode_change([(ua, a), (ub, b)], [gone])
    decoded = [decode(k, v, h, i) for i, (k, v, h) in enumerate(records)]
    assert decoded == [
        AclRecord(str(gone), None, change_id, 3),
        AclRecord(str(ua), a, change_id, 3),
        AclRecord(str(ub), b, change_id, 3),
    ]
    # KIP-801's AccessControlEntryRecord fields, enums as Kafka's wire codes
    value = json.loads(records[1][1] or b"")
    assert value == {
        "v": 1,
        "id": str(ua),
        "resourceType": 2,
        "resourceName": "a",
        "patternType": 3,
        "principal": "User:alice",
        "host": "*",
        "operation": 3,
        "permissionType": 3,
    }


def test_a_record_without_headers_is_a_change_of_its_own():
    u = uuid.uuid4()
    record = decode(str(u).encode(), None, None, 7)
    assert (record.acl_id, record.binding, record.count) == (str(u), None, 1)


ID = uuid.UUID("aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee")


def _value(**override) -> bytes:
    u = ID
    data = json.loads(encode_value(u, acl()))
    data.update(override)
    return json.dumps(data).encode()


KEY = str(ID).encode()


@pytest.mark.parametrize(
    ("key", "value", "headers", "problem"),
    [
        (None, _value(), None, "no key"),
        (b"not-a-uuid", _value(), None, "not a UUID"),
        (str(ID).upper().encode(), _value(), None, "canonical"),
        (KEY, b"{not json", None, "not JSON"),
        (KEY, b"[]", None, "fields"),
        (KEY, _value(extra=1), None, "fields"),
        (KEY, _value(v=2), None, "version"),
        (KEY, _value(v=True), None, "version"),
        (KEY, _value(id=str(uuid.UUID(int=2))), None, "is not the key"),
        (KEY, _value(resourceType=1), None, "valid ACL"),  # ANY: a filter, never stored
        (KEY, _value(resourceType=99), None, "not a ResourceType code"),
        (KEY, _value(operation="READ"), None, "not a AclOperation code"),
        (KEY, _value(patternType=2), None, "valid ACL"),  # MATCH
        (KEY, _value(permissionType=1), None, "valid ACL"),  # ANY
        (KEY, _value(resourceName=""), None, "valid ACL"),
        (KEY, _value(principal=7), None, "expected a string"),
        (KEY, _value(), [(CHANGE_HEADER, b"x")], "headers"),
        (KEY, _value(), [(CHANGE_HEADER, b"nope"), (COUNT_HEADER, b"1")], "malformed"),
        (
            KEY,
            _value(),
            [(CHANGE_HEADER, str(uuid.uuid4()).encode()), (COUNT_HEADER, b"0")],
            "1 or more",
        ),
    ],
)
def test_anything_else_does_not_decode(key, value, headers, problem):
    with pytest.raises(RecordDecodeError, match=problem):
        decode(key, value, headers, 0)


def _feed(state: AclLogState, offset: int, records) -> int:
    for k, v, h in records:
        state.feed(offset, decode(k, v, h, offset))
        offset += 1
    return offset


def test_a_change_is_applied_whole_or_held_back():
    state = AclLogState()
    a, b = acl("a"), acl("b")
    _, records = encode_change([(uuid.uuid4(), a), (uuid.uuid4(), b)], [])
    _feed(state, 0, records[:1])
    assert state.drain() == ([], [])  # half a change: nothing applied yet
    assert state.applied_offset == 0
    _feed(state, 1, records[1:])
    added, removed = state.drain()
    assert (set(added), removed, state.applied_offset) == ({a, b}, [], 2)


def test_at_the_end_of_the_log_an_incomplete_change_is_applied():
    """What is missing of it was compacted away: nothing more of it can come."""
    state = AclLogState()
    a = acl("a")
    _, records = encode_change([(uuid.uuid4(), a), (uuid.uuid4(), acl("b"))], [])
    _feed(state, 5, records[:1])
    assert state.drain(end=9) == ([a], [])
    assert state.applied_offset == 9


def test_a_binding_held_by_two_ids_stays_until_both_are_tombstoned():
    state = AclLogState()
    a = acl("a")
    u1, u2 = uuid.uuid4(), uuid.uuid4()
    offset = _feed(state, 0, encode_change([(u1, a)], [])[1])
    offset = _feed(state, offset, encode_change([(u2, a)], [])[1])
    assert state.drain() == ([a], [])
    assert state.holders([a]) == {a: sorted([str(u1), str(u2)])}
    offset = _feed(state, offset, encode_change([], [u1])[1])
    assert state.drain() == ([], [])  # u2 still holds it
    _feed(state, offset, encode_change([], [u2])[1])
    assert state.drain() == ([], [a])
    assert state.bindings() == []


def test_the_fingerprint_is_the_backends_canonical_one():
    state = AclLogState()
    bindings = [acl("a"), acl("b", "User:bob", "DENY"), acl('c "q" \\ é ☃ \n', "User:ü")]
    _feed(state, 0, encode_change([(uuid.uuid4(), b) for b in bindings], [])[1])
    state.drain()
    assert state.fingerprint() == acl_fingerprint(bindings)
    assert acl_fingerprint([]) != state.fingerprint()


def test_the_replay_applies_at_once_and_equals_feeding():
    records = []
    for i in range(6):
        u = uuid.uuid4()
        records += encode_change([(u, acl(f"r{i}"))], [])[1]
        if i % 2:
            records += encode_change([], [u])[1]
    fed, replayed = AclLogState(), AclLogState()
    _feed(fed, 0, records)
    fed.drain()
    for offset, (k, v, h) in enumerate(records):
        replayed.replay(offset, decode(k, v, h, offset))
    assert set(fed.bindings()) == set(replayed.bindings()) == {acl("r0"), acl("r2"), acl("r4")}
    assert fed.fingerprint() == replayed.fingerprint()
    assert fed.applied_offset == replayed.applied_offset == len(records)


def test_a_second_holder_takes_over_when_the_first_is_tombstoned():
    state = AclLogState()
    a = acl("a")
    u1, u2, u3 = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    for i, u in enumerate((u1, u2, u3)):
        state.replay(i, decode(*encode_change([(u, a)], [])[1][0], i))
    state.replay(3, decode(*encode_change([], [u1])[1][0], 3))
    assert state.holders([a]) == {a: sorted([str(u2), str(u3)])}
    state.replay(4, decode(*encode_change([], [u3])[1][0], 4))
    assert state.holders([a]) == {a: [str(u2)]}
    state.replay(5, decode(*encode_change([], [u2])[1][0], 5))
    assert state.bindings() == [] and state.holders([a]) == {a: []}


def test_the_canonical_line_is_acl_fingerprints_json_for_every_enum_value():
    import itertools

    from aclgate.authz.fingerprint import canonical_line
    from aclgate.authz.model import (
        CONCRETE_OPERATIONS,
        CONCRETE_RESOURCE_TYPES,
        AclPermissionType,
        PatternType,
    )

    for rt, op, pt, perm in itertools.product(
        CONCRETE_RESOURCE_TYPES,
        CONCRETE_OPERATIONS,
        (PatternType.LITERAL, PatternType.PREFIXED),
        (AclPermissionType.ALLOW, AclPermissionType.DENY),
    ):
        b = AclBinding(rt, 'n "\\ é', pt, "User:ü", "10.0.0.1", op, perm)
        assert canonical_line(b) == json.dumps(b.to_dict(), sort_keys=True, separators=(",", ":"))
