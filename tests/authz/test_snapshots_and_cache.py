"""Decision cache invalidation, bounded cache size, and KIP-801 snapshot atomicity under
concurrent readers and writers."""

from __future__ import annotations

import threading

import pytest

from aclgate.authz.authorizer import Authorizer
from tests.authz.helpers import ALLOW, DENY, LIT, PRE, G, Op, T, acl, loaded

READ_T = acl(T, "t", LIT, "User:x", "*", Op.READ, ALLOW)
DENY_T = acl(T, "t", PRE, "User:*", "*", Op.READ, DENY)


def test_cached_decision_is_dropped_when_acls_change():
    authz = loaded([READ_T])
    first = authz.authorize("User:x", "1.1.1.1", Op.READ, T, "t")
    assert first.allowed
    assert authz.authorize("User:x", "1.1.1.1", Op.READ, T, "t") is first  # served from cache
    version = authz.version
    authz.update(add=[DENY_T])
    assert authz.version == version + 1
    after = authz.authorize("User:x", "1.1.1.1", Op.READ, T, "t")
    assert (after.allowed, after.acl) == (False, DENY_T)
    authz.load([READ_T])
    assert authz.authorize("User:x", "1.1.1.1", Op.READ, T, "t").allowed


def test_by_resource_type_cache_is_dropped_too():
    authz = loaded([READ_T])
    assert authz.authorize_by_resource_type("User:x", "1.1.1.1", Op.READ, T).allowed
    authz.update(add=[acl(T, "*", LIT, "User:x", "*", Op.READ, DENY)])
    assert not authz.authorize_by_resource_type("User:x", "1.1.1.1", Op.READ, T).allowed


def test_version_only_moves_on_change():
    authz = Authorizer()
    assert (authz.ready, authz.version, authz.acl_count()) == (False, 0, 0)
    authz.load([READ_T])
    assert (authz.ready, authz.version, authz.acl_count()) == (True, 1, 1)
    authz.load([READ_T, READ_T])  # same set: nothing to publish, the cache stays warm
    authz.update(add=[READ_T], remove=[DENY_T])
    assert authz.version == 1
    authz.update(remove=[READ_T])
    assert (authz.version, authz.acl_count()) == (2, 0)


def test_update_removes_before_adding():
    authz = loaded([READ_T])
    authz.update(add=[READ_T], remove=[READ_T])
    assert authz.acls() == [READ_T]


def test_cache_is_bounded():
    authz = Authorizer(cache_size=10)
    authz.load([READ_T])
    for i in range(1000):
        authz.authorize("User:x", "1.1.1.1", Op.READ, T, f"t{i}")
    assert len(authz._snap.cache) <= 10
    assert authz.authorize("User:x", "1.1.1.1", Op.READ, T, "t").allowed


def test_cache_can_be_disabled():
    authz = Authorizer(cache_size=0)
    authz.load([READ_T])
    assert authz.authorize("User:x", "1.1.1.1", Op.READ, T, "t").allowed
    assert len(authz._snap.cache) == 0


def _batch(tag: str, n: int = 40):
    return {acl(G, f"{tag}{i}", PRE, f"User:{tag}", "*", Op.READ, ALLOW) for i in range(n)}


def test_readers_never_see_half_a_batch():
    """A writer flips between two ACL sets with one update each; concurrent readers must only
    ever observe one whole set or the other (KIP-801)."""
    state_a, state_b = (
        _batch("a") | {READ_T},
        _batch("b") | {acl(T, "t", PRE, "User:x", "*", Op.READ, ALLOW)},
    )
    authz = loaded(state_a)
    decisions = {
        frozenset(state_a): authz.authorize("User:x", "1.1.1.1", Op.READ, T, "t"),
        frozenset(state_b): loaded(state_b).authorize("User:x", "1.1.1.1", Op.READ, T, "t"),
    }
    stop = threading.Event()
    problems: list[str] = []

    def reader():
        while not stop.is_set():
            seen = frozenset(authz.acls())
            if seen not in decisions:
                problems.append(f"listing saw {len(seen)} ACLs")
            d = authz.authorize("User:x", "1.1.1.1", Op.READ, T, "t")
            if d not in decisions.values():
                problems.append(f"decision {d}")
            if authz.acl_count() not in (len(state_a), len(state_b)):
                problems.append(f"count {authz.acl_count()}")

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        current, other = state_a, state_b
        for _ in range(300):
            authz.update(add=other, remove=current)
            current, other = other, current
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert problems == []
    assert set(authz.acls()) == current


def test_concurrent_writers_lose_nothing():
    authz = loaded()

    def writer(w: int):
        for i in range(50):
            authz.update(add=[acl(T, f"w{w}-{i}", LIT, "User:x", "*", Op.READ, ALLOW)])

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert authz.acl_count() == 400
    assert authz.version == 401  # the initial load, then one per batch


@pytest.mark.pure_python  # counts calls through byresourcetype.build
def test_prebuilt_by_resource_type_view_is_ready_when_published(monkeypatch):
    """The proxy's authorizer builds the KIP-679 TOPIC view in the writer (off the event
    loop), so the first InitProducerId after a reload never builds it in a request."""
    from aclgate.authz import byresourcetype

    authz = Authorizer(prebuild_by_resource_type=(T,))
    authz.load([READ_T])
    authz.update(add=[DENY_T])
    built = []
    monkeypatch.setattr(byresourcetype, "build", lambda bindings: built.append(1))
    assert not authz.authorize_by_resource_type("User:x", "1.1.1.1", Op.READ, T).allowed
    assert authz.authorize_by_resource_type("User:x", "1.1.1.1", Op.WRITE, T).allowed is False
    assert built == []  # nothing built on the request path
    lazy = loaded([READ_T])
    monkeypatch.setattr(byresourcetype, "build", lambda bindings: built.append(1) or {})
    lazy.authorize_by_resource_type("User:y", "1.1.1.1", Op.READ, T)
    assert built == [1]  # without prebuild the view is built on first use
