"""Sealed DescribeTopicPartitions cursors (protocol/enforce/cursor.py): what a client holds
tells it nothing, and nothing it makes up or alters opens. The key comes from the IO layer
through `Policy.cursors`; without one, a hidden cursor closes the connection rather than leak."""

from __future__ import annotations

import base64

import pytest
from kio.static.primitive import i32

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from aclgate.protocol import codec
from aclgate.protocol.effects import AskCluster
from aclgate.protocol.enforce.context import AuthContext, Policy
from aclgate.protocol.enforce.cursor import KEY_SIZE, PREFIX, CursorSeal
from aclgate.protocol.enforce.partitions import EXTRA_PAGES
from aclgate.protocol.enforce.table import advertised_versions, handlers
from aclgate.protocol.session import ProxySession, SessionConfig
from aclgate.protocol.versions import response_class, response_module
from tests.fixtures.rawclient import module, request_entity
from tests.fixtures.scripted_broker import _defaults
from tests.protocol.test_session import FakeIO

KEY = bytes(range(KEY_SIZE))
OTHER_KEY = bytes(range(1, KEY_SIZE + 1))
SEAL = CursorSeal(KEY)


def test_round_trip_and_opaque():
    token = SEAL.seal("hidden-topic", 7)
    assert "hidden" not in token and token.startswith(PREFIX)
    assert SEAL.open(token) == ("hidden-topic", 7)
    assert CursorSeal(KEY).open(token) == ("hidden-topic", 7)  # same key, another instance
    assert SEAL.seal("hidden-topic", 7) == token  # deterministic: the same cursor, one token
    assert SEAL.seal("hidden-topic", 8) != token
    long_name = "t" * 249  # Kafka's longest topic name
    assert SEAL.open(SEAL.seal(long_name, 2**31 - 1)) == (long_name, 2**31 - 1)


def test_every_altered_character_is_rejected():
    token = SEAL.seal("hidden-topic", 7)
    for i in range(len(PREFIX), len(token)):
        for c in ("A", "B", "-", "_"):
            if token[i] != c:
                assert SEAL.open(token[:i] + c + token[i + 1 :]) is None, (i, c)
    # truncated, extended, re-padded, re-spelled with the standard alphabet
    body = token[len(PREFIX) :]
    for bad in (
        token[:-1],
        token + "A",
        token + "=" * (-len(body) % 4 or 4),
        PREFIX + base64.b64encode(base64.urlsafe_b64decode(body + "==")).decode(),
    ):
        assert bad != token and SEAL.open(bad) is None, bad


def test_a_cursor_sealed_with_another_key_is_rejected():
    assert CursorSeal(OTHER_KEY).open(SEAL.seal("hidden-topic", 7)) is None


@pytest.mark.parametrize(
    "token",
    [
        "plain-topic",
        "hidden-topic",
        PREFIX,
        PREFIX + "A",
        PREFIX + "!!!!",
        PREFIX + "é",
        PREFIX + base64.urlsafe_b64encode(b"\0" * 40).decode().rstrip("="),
    ],
)
def test_anything_not_sealed_is_rejected(token):
    assert SEAL.open(token) is None


@pytest.mark.parametrize("size", [0, 16, 32, 48, 63, 65])
def test_the_key_is_one_size(size):
    with pytest.raises(ValueError):
        CursorSeal(bytes(size))


# ------------------------------------------------- the seal in a session: the key comes in Policy

CONFIG = SessionConfig(handlers=handlers(), allowed_versions=advertised_versions())
#: the client may describe topic "ok" only
ACLS = [
    AclBinding(ResourceType.TOPIC, "ok", PatternType.LITERAL, "User:ANONYMOUS", "*",
               AclOperation.DESCRIBE, AclPermissionType.ALLOW),
]  # fmt: skip


def _session(cursors: CursorSeal | None) -> tuple[ProxySession, FakeIO]:
    authorizer = Authorizer()
    authorizer.load(ACLS)
    policy = Policy(authorizer=authorizer, cursors=cursors)
    io = FakeIO()
    ctx = AuthContext(policy, "User:ANONYMOUS", "127.0.0.1", "PLAINTEXT")
    return ProxySession(CONFIG, io, context=ctx), io


def _all_topics(corr: int, cursor: tuple[str, int] | None = None) -> bytes:
    m = module(75, 0)
    body = request_entity(
        75,
        0,
        topics=(),
        response_partition_limit=i32(1),
        cursor=None
        if cursor is None
        else m.Cursor(topic_name=cursor[0], partition_index=i32(cursor[1])),
    )
    return codec.encode_request(corr, body, "t")


def _page(session: ProxySession, io: FakeIO, corr: int, cursor, next_cursor: tuple[str, int]):
    """One all-topics request; every broker page it asks for on the control connection
    (AskCluster) is empty with `next_cursor`, so it stops at the bound with that cursor.
    Returns the cursor of the first page asked and the answer the client got (None if
    closed)."""
    io.effects.clear()
    session.client_data(_all_topics(corr, cursor))
    mod = response_module(75, 0)
    body = _defaults(
        response_class(75, 0),
        topics=(),
        next_cursor=_defaults(
            mod.Cursor, topic_name=next_cursor[0], partition_index=i32(next_cursor[1])
        ),
    )
    before = len(io.client)
    asked = []
    while io.effects:
        token, effect = io.effects.pop(0)
        assert isinstance(effect, AskCluster)
        asked.append(effect.request.cursor)
        session.resume(token, body)
    assert len(asked) == 1 + EXTRA_PAGES  # then sealed (or, without a key, closed)
    assert not io.upstream  # nothing went up the client's own connection
    got = bytes(io.client[before:])
    answer = codec.decode_response(got, 75, 0) if got else None
    first = asked[0]
    return (None if first is None else (first.topic_name, first.partition_index)), answer


def test_the_policy_key_seals_and_opens():
    session, io = _session(CursorSeal(KEY))
    asked, answer = _page(session, io, 1, None, ("secret", 3))
    token = answer.next_cursor.topic_name
    assert (
        asked is None
        and token == SEAL.seal("secret", 3)
        and answer.next_cursor.partition_index == 0
    )
    asked, _ = _page(session, io, 2, (token, 0), ("zz", 0))
    assert asked == ("secret", 3)  # opened for the broker
    other = CursorSeal(OTHER_KEY).seal("secret", 3)
    asked, _ = _page(session, io, 3, (other, 0), ("zz", 0))
    assert asked == (other, 0)  # another key's token: passed on as the name it is
    assert io.closed is None


def test_without_a_key_a_hidden_cursor_closes_the_connection():
    session, io = _session(None)
    _, answer = _page(session, io, 1, None, ("secret", 3))
    assert answer is None and b"secret" not in bytes(io.client)
    assert io.closed is not None and io.closed[1] == "internal_error"
