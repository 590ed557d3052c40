"""The LDAP membership cache and its rules (proxy/security/ldapgroups.py), on a fake clock and
a fake directory: fresh answers used as they are, stale ones used while asked again in the
background, none past --ldap-max-stale (fail closed); one lookup per user at a time; open
sessions kept in step (a dropped membership, an answer gone too old); the directory's state
for /readyz and the metrics; the bound on the cache."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

import pytest
from prometheus_client import CollectorRegistry

from aclgate.proxy.security.ldapgroups import (
    DirectoryError,
    Freshness,
    LdapGroups,
    LdapSettings,
    Membership,
    MembershipCache,
)

TTL, MAX_STALE = 10.0, 60.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeDirectory:
    """groups_of answers from `groups` (a missing user: not_found), or raises while `down`;
    `gate`, when set, holds every lookup until it is set."""

    groups: dict[str, set[str]] = field(default_factory=dict)
    down: bool = False
    asked: list[str] = field(default_factory=list)
    gate: threading.Event | None = None

    def groups_of(self, user: str) -> Membership:
        self.asked.append(user)
        if self.gate is not None:
            self.gate.wait(10)
        if self.down:
            raise DirectoryError("connection refused")
        if user not in self.groups:
            return Membership(frozenset(), "not_found")
        return Membership(frozenset(self.groups[user]), "found")

    def probe(self) -> None:
        if self.down:
            raise DirectoryError("connection refused")


@dataclass(eq=False)
class Subscriber:
    closed: bool = False
    seen: list[frozenset[str]] = field(default_factory=list)

    def directory_groups_changed(self, names: frozenset[str]) -> None:
        self.seen.append(names)


def _service(
    directory: FakeDirectory, clock: Clock, **overrides
) -> tuple[LdapGroups, CollectorRegistry]:
    registry = CollectorRegistry()
    settings = LdapSettings(
        urls=("ldap://directory.test",),
        user_search_base="ou=people",
        group_search_base="ou=groups",
        cache_ttl=TTL,
        max_stale=MAX_STALE,
        **overrides,
    )
    return LdapGroups(settings, registry, clock=clock, directory=directory, workers=2), registry


async def _look_up(
    groups: LdapGroups, user: str, subscriber: Subscriber | None = None
) -> frozenset[str]:
    done: asyncio.Future[frozenset[str]] = asyncio.get_running_loop().create_future()
    groups.look_up(user, done.set_result, subscriber)
    return await asyncio.wait_for(done, 10)


async def _settle(groups: LdapGroups) -> None:
    """Until no lookup is under way (the background ones included)."""
    for _ in range(500):
        if not groups._running and not groups._probing:
            await asyncio.sleep(0)
            return
        await asyncio.sleep(0.01)
    raise AssertionError("lookups still running")


def _sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def test_the_cache_ages_answers_fresh_stale_expired():
    cache = MembershipCache(TTL, MAX_STALE, max_entries=10)
    assert cache.get("alice", 0.0) == (Freshness.MISS, frozenset())
    cache.store("alice", frozenset({"payments"}), 100.0)
    assert cache.get("alice", 109.9) == (Freshness.FRESH, {"payments"})
    assert cache.get("alice", 110.0) == (Freshness.STALE, {"payments"})
    assert cache.get("alice", 160.0) == (Freshness.STALE, {"payments"})
    assert cache.usable("alice", 160.0) == {"payments"}
    assert cache.get("alice", 160.1) == (Freshness.EXPIRED, frozenset())
    assert cache.usable("alice", 160.1) == frozenset()  # fail closed
    assert cache.age("alice", 130.0) == 30.0 and cache.age("bob", 130.0) is None


def test_the_cache_is_bounded_least_recently_used_first():
    cache = MembershipCache(TTL, MAX_STALE, max_entries=3)
    for i, user in enumerate(["a", "b", "c"]):
        cache.store(user, frozenset({user}), float(i))
    cache.get("a", 5.0)  # used: now the most recent
    cache.store("d", frozenset({"d"}), 6.0)
    assert len(cache) == 3
    assert cache.get("b", 6.0)[0] is Freshness.MISS  # the least recently used went
    assert {u for u in "acd" if cache.get(u, 6.0)[0] is Freshness.FRESH} == {"a", "c", "d"}


@pytest.mark.asyncio
async def test_fresh_answers_come_from_the_cache_and_stale_ones_are_asked_again_behind():
    clock, directory = Clock(), FakeDirectory({"alice": {"payments"}})
    groups, registry = _service(directory, clock)
    try:
        assert await _look_up(groups, "alice") == {"payments"}  # a miss: asked
        assert directory.asked == ["alice"]
        clock.now += TTL - 1
        assert await _look_up(groups, "alice") == {"payments"}  # fresh: not asked
        assert directory.asked == ["alice"]
        directory.groups["alice"] = {"payments", "ops"}
        clock.now += 2  # stale: the old answer at once, the directory asked behind it
        assert await _look_up(groups, "alice") == {"payments"}
        await _settle(groups)
        assert directory.asked == ["alice", "alice"]
        assert await _look_up(groups, "alice") == {"payments", "ops"}
        assert await _look_up(groups, "nobody") == frozenset()  # not_found: no groups
        for result, count in (("fresh", 2), ("stale", 1), ("miss", 2)):
            assert _sample(registry, "aclgate_ldap_cache_total", result=result) == count
        assert _sample(registry, "aclgate_ldap_lookups_total", outcome="found") == 2
        assert _sample(registry, "aclgate_ldap_lookups_total", outcome="not_found") == 1
        assert _sample(registry, "aclgate_ldap_up") == 1
        assert _sample(registry, "aclgate_ldap_cache_entries") == 2
    finally:
        groups.close()


@pytest.mark.asyncio
async def test_one_lookup_per_user_at_a_time():
    clock, directory = Clock(), FakeDirectory({"alice": {"payments"}}, gate=threading.Event())
    groups, _ = _service(directory, clock)
    try:
        loop = asyncio.get_running_loop()
        answers = [loop.create_future() for _ in range(5)]
        for answer in answers:
            groups.look_up("alice", answer.set_result)
        await asyncio.sleep(0.05)
        assert directory.gate is not None
        directory.gate.set()
        assert await asyncio.gather(*answers) == [{"payments"}] * 5
        assert directory.asked == ["alice"]
    finally:
        groups.close()


@pytest.mark.asyncio
async def test_a_down_directory_keeps_the_last_answer_until_max_stale_then_none():
    clock, directory = Clock(), FakeDirectory({"alice": {"payments"}})
    groups, registry = _service(directory, clock)
    session = Subscriber()
    try:
        assert await _look_up(groups, "alice", session) == {"payments"}
        directory.down = True
        clock.now += TTL + 1  # stale, the directory down: the last answer still holds
        groups.refresh_pass()
        await _settle(groups)
        assert groups.up is False and "connection refused" in (groups.last_error or "")
        assert session.seen == []  # nothing taken away yet
        assert await _look_up(groups, "alice") == {"payments"}
        assert groups.not_ready() is None
        assert _sample(registry, "aclgate_ldap_up") == 0
        assert _sample(registry, "aclgate_ldap_stale_seconds") == TTL + 1
        # while it backs off, lookups are answered from the cache without asking
        asked = len(directory.asked)
        assert await _look_up(groups, "alice") == {"payments"}
        assert len(directory.asked) == asked
        assert _sample(registry, "aclgate_ldap_lookups_total", outcome="skipped") >= 1

        clock.now += MAX_STALE  # past max-stale: the session loses the directory's groups
        groups.refresh_pass()
        await _settle(groups)
        assert session.seen == [frozenset()]
        assert await _look_up(groups, "alice") == frozenset()  # and new sessions get none
        assert "has not answered" in (groups.not_ready() or "")
        assert groups.status()["not_ready"] is not None
        assert _sample(registry, "aclgate_ldap_stale_seconds") > MAX_STALE

        directory.down = False  # back: the next pass asks again and gives the groups back
        clock.now += 31  # past the longest backoff
        groups.refresh_pass()
        await _settle(groups)
        assert groups.up is True and groups.not_ready() is None
        assert session.seen == [frozenset(), {"payments"}]
        assert _sample(registry, "aclgate_ldap_stale_seconds") == 0
    finally:
        groups.close()


@pytest.mark.asyncio
async def test_a_first_lookup_that_fails_gives_no_groups():
    clock, directory = Clock(), FakeDirectory({"alice": {"payments"}}, down=True)
    groups, registry = _service(directory, clock)
    try:
        assert await _look_up(groups, "alice") == frozenset()
        assert _sample(registry, "aclgate_ldap_lookups_total", outcome="failed") == 1
    finally:
        groups.close()


@pytest.mark.asyncio
async def test_open_sessions_follow_the_directory():
    clock, directory = Clock(), FakeDirectory({"alice": {"payments", "ops"}})
    groups, _ = _service(directory, clock)
    first, second, closed = Subscriber(), Subscriber(), Subscriber()
    try:
        for session in (first, second, closed):
            assert await _look_up(groups, "alice", session) == {"payments", "ops"}
        closed.closed = True
        groups.forget("alice", second)
        directory.groups["alice"] = {"ops"}  # dropped from payments
        clock.now += TTL
        groups.refresh_pass()  # a user with open sessions is asked again after the TTL
        await _settle(groups)
        assert first.seen == [{"ops"}]
        assert second.seen == [] and closed.seen == []
        groups.refresh_pass()  # fresh again: not asked, nothing pushed
        await _settle(groups)
        assert first.seen == [{"ops"}] and directory.asked.count("alice") == 2
        groups.forget("alice", first)
        groups.forget("alice", closed)
        assert groups.status()["users_with_connections"] == 0
    finally:
        groups.close()


@pytest.mark.asyncio
async def test_a_down_directory_is_probed_until_it_answers():
    clock, directory = Clock(), FakeDirectory(down=True)
    groups, _ = _service(directory, clock)
    try:
        await groups.start()
        assert groups.up is False
        directory.down = False
        clock.now += 1
        groups.refresh_pass()  # no user asks: the pass probes it
        await _settle(groups)
        assert groups.up is True
    finally:
        groups.close()


@pytest.mark.asyncio
async def test_a_user_the_cache_dropped_keeps_its_groups_only_while_the_directory_answers():
    clock, directory = Clock(), FakeDirectory({"a": {"x"}, "b": {"y"}, "c": {"z"}})
    groups, _ = _service(directory, clock, cache_max_entries=1)
    session = Subscriber()
    try:
        assert await _look_up(groups, "a", session) == {"x"}
        assert await _look_up(groups, "b") == {"y"}  # "a" dropped from the cache
        groups.refresh_pass()  # asked again, the same answer: nothing taken away meanwhile
        await _settle(groups)
        assert session.seen == []
        assert await _look_up(groups, "c") == {"z"}  # dropped again
        directory.down = True
        groups.refresh_pass()  # the directory fails and the age is unknown: fail closed
        await _settle(groups)
        assert session.seen == [frozenset()]
    finally:
        groups.close()
