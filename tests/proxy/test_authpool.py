"""The password-hashing pool: sources take turns, queues are bounded, errors come back."""

from __future__ import annotations

import asyncio
import threading

import pytest

from aclgate.proxy.security.authpool import FairHashPool, default_workers


async def _run(pool: FairHashPool, jobs: list[tuple[str, object]]) -> tuple[list, list[bool]]:
    """Submit (source, value) jobs while the only worker is held; return the order in
    which they ran and what submit() answered."""
    loop = asyncio.get_running_loop()
    gate = threading.Event()
    ran: list = []
    pending: list[asyncio.Future] = []

    def job(value):
        def run():
            gate.wait(5)
            ran.append(value)
            return value

        return run

    accepted = []
    for source, value in [("blocker", "first"), *jobs]:
        done = loop.create_future()
        ok = pool.submit(source, job(value), done.set_result)
        accepted.append(ok)
        if ok:
            pending.append(done)
    gate.set()
    await asyncio.wait_for(asyncio.gather(*pending), 5)
    return ran, accepted[1:]


@pytest.mark.asyncio
async def test_sources_take_turns():
    pool = FairHashPool(workers=1)
    try:
        jobs = [("guesser", f"g{i}") for i in range(5)] + [("legit", "L")]
        ran, accepted = await _run(pool, jobs)
    finally:
        pool.shutdown()
    assert all(accepted)
    # the legitimate job waited for one guess, not for all five
    assert ran[:3] == ["first", "g0", "L"], ran
    assert ran[3:] == ["g1", "g2", "g3", "g4"]


@pytest.mark.asyncio
async def test_queues_are_bounded_per_source_and_in_total():
    pool = FairHashPool(workers=1, per_source=2, total=3)
    try:
        jobs = [("a", "a1"), ("a", "a2"), ("a", "a3"), ("b", "b1"), ("c", "c1")]
        ran, accepted = await _run(pool, jobs)
    finally:
        pool.shutdown()
    # a3: a's queue is full; c1: three jobs wait in all
    assert accepted == [True, True, False, True, False]
    assert sorted(ran) == ["a1", "a2", "b1", "first"]
    assert pool.refused == 2
    assert pool.waiting == 0 and pool.running == 0


@pytest.mark.asyncio
async def test_an_exception_comes_back_as_the_result():
    pool = FairHashPool(workers=1)
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def boom():
        raise RuntimeError("bug")

    try:
        assert pool.submit(None, boom, done.set_result)
        result = await asyncio.wait_for(done, 5)
    finally:
        pool.shutdown()
    assert isinstance(result, RuntimeError)
    assert pool.running == 0


def test_a_core_is_left_to_the_event_loop():
    assert 1 <= default_workers() <= 4
