"""Run fuzz cases in batches against running proxies and check each batch (tests/fuzz/checks.py).

Settings come from the environment so that `make fuzz` can run long and any failure replays:

    FUZZ_SEED   the run's seed (default "1" in `make test`); every failure message prints it
    FUZZ_CASES  cases over the whole TCP fuzz (default 4000), shared out by the tests
    FUZZ_CASE   replay this one case index only (the failure message names it and its test)
    FUZZ_BATCH  cases between two checks (default 2000)
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import ssl
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvloop

from tests.fixtures.wait import wait_until

from . import checks
from .client import Batch, Outcome, Target, connect, request, run_cases, sasl_login
from .corpus import Case
from .recorder import RecordingUpstream

#: most problems shown in one failure message
SHOWN = 12


@dataclass
class Settings:
    seed: str = "1"
    cases: int = 4000
    only: int | None = None
    batch: int = 2000
    concurrency: int = 24

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ
        only = env.get("FUZZ_CASE")
        return cls(
            seed=env.get("FUZZ_SEED", "1") or "1",
            cases=int(env.get("FUZZ_CASES", "4000") or 4000),
            only=int(only) if only else None,
            batch=int(env.get("FUZZ_BATCH", "2000") or 2000),
        )

    def share(self, fraction: float) -> int:
        return max(1, round(self.cases * fraction))


@dataclass
class Stats:
    cases: int = 0
    seconds: float = 0.0
    targets: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    timeouts: Counter = field(default_factory=Counter)
    closes: Counter = field(default_factory=Counter)
    client: Counter = field(default_factory=Counter)
    forwarded: int = 0
    reencoded: int = 0
    forwarded_apis: Counter = field(default_factory=Counter)

    def line(self, name: str, seed: str) -> str:
        rate = self.cases / self.seconds if self.seconds else 0.0
        return (
            f"tcp fuzz {name}: {self.cases} cases in {self.seconds:.1f} s ({rate:.0f}/s), "
            f"seed {seed}; targets {dict(self.targets)}; proxy closes {dict(self.errors)}, "
            f"timeouts {dict(self.timeouts)}, normal {dict(self.closes)}; client "
            f"{dict(self.client)}; forwarded {self.forwarded} frames of "
            f"{len(self.forwarded_apis)} APIs ({self.reencoded} re-encoded by the proxy)"
        )


class Runner:
    """Owns an event loop (uvloop) in the test thread for the fuzz clients."""

    def __init__(self) -> None:
        self._runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)

    def run(self, coro: Any) -> Any:
        return self._runner.run(coro)

    def close(self) -> None:
        self._runner.close()


def fuzz(
    name: str,
    settings: Settings,
    plan: Callable[[int], Case],
    targets: Mapping[str, Target],
    proxies: Sequence[Any],
    upstream: RecordingUpstream,
    advertised: Mapping[str, Mapping[int, tuple[int, int]]],
    forwardable: Mapping[int, tuple[int, int]],
    cases: int,
    runner: Runner,
    *,
    expect_served: bool = True,
    allowed_names: Mapping[str, set[str]] | None = None,
) -> Stats:
    """Run `cases` cases (`plan(index)`), in batches, checking after each; returns figures.

    Runs every batch, then fails with the seed, the problems and the way to replay them."""
    stats = Stats()
    found: list[str] = []
    indices = [settings.only] if settings.only is not None else list(range(cases))
    quiet = lambda: (  # noqa: E731
        checks.snapshot(proxies).active == 0
        and upstream.open_connections(checks.CONTROL_CLIENT_IDS) == 0
    )
    wait_until(quiet, timeout=60, what="the set-up connections closed")
    upstream.take()  # the set-up's own requests (ApiVersions) are not part of the run
    started = time.monotonic()
    with checks.CloseLog() as log:
        for at in range(0, len(indices), settings.batch):
            batch_cases = [plan(i) for i in indices[at : at + settings.batch]]
            before = checks.snapshot(proxies)
            log.take()
            batch: Batch = runner.run(
                run_cases(targets, batch_cases, concurrency=settings.concurrency)
            )
            wait_until(quiet, timeout=60, what="every fuzz connection closed, here and upstream")
            connected = sum(1 for o in batch.outcomes if o.connected)
            deadline = time.monotonic() + 10
            while (
                not checks.balanced(checks.snapshot(proxies) - before, log.peek(), connected)
                and time.monotonic() < deadline
            ):
                time.sleep(0.05)
            delta = checks.snapshot(proxies) - before
            closes, uncounted = log.take()
            frames, partial = upstream.take()
            problems, report = _check_batch(
                batch.outcomes,
                frames,
                partial,
                advertised,
                forwardable,
                expect_served,
                allowed_names,
            )
            batch_problems = checks.check_accounting(delta, closes, uncounted, connected)
            if log.internal:
                batch_problems += [f"internal error logged: {line}" for line in log.internal[:3]]
                log.internal.clear()
            first, last = batch_cases[0].index, batch_cases[-1].index
            where = f"case {first}" if first == last else f"in cases {first}..{last}"
            problems += [
                f"{p}; {where} (FUZZ_BATCH=1 checks one case at a time)" for p in batch_problems
            ]
            _add(stats, batch, report, delta, closes)
            found += problems
    stats.seconds = time.monotonic() - started
    print("\n" + stats.line(name, settings.seed))
    if found:
        raise AssertionError(_failure(name, settings, stats, found, log.samples))
    return stats


def _check_batch(
    outcomes: Sequence[Outcome],
    frames: list[tuple[int, bytes]],
    partial: Mapping[int, bytes],
    advertised: Mapping[str, Mapping[int, tuple[int, int]]],
    forwardable: Mapping[int, tuple[int, int]],
    expect_served: bool,
    allowed_names: Mapping[str, set[str]] | None,
) -> tuple[list[str], checks.UpstreamReport]:
    report = checks.check_upstream(
        frames, partial, outcomes, forwardable, advertised, allowed_names
    )
    problems = list(report.problems)
    for outcome in outcomes:
        problems += checks.check_responses(outcome, expect_served)
    return problems, report


def _add(
    stats: Stats,
    batch: Batch,
    report: checks.UpstreamReport,
    delta: checks.Snapshot,
    closes: Counter,
) -> None:
    stats.cases += len(batch.outcomes)
    stats.targets.update(o.case.target for o in batch.outcomes)
    stats.errors.update(delta.errors)
    stats.timeouts.update(delta.timeouts)
    stats.closes.update(closes)
    stats.forwarded += report.forwarded
    stats.reencoded += report.reencoded
    stats.forwarded_apis.update(report.by_api)
    for o in batch.outcomes:
        stats.client[
            "answered"
            if o.sentinel_answered
            else "closed"
            if o.proxy_closed
            else "waited"
            if o.timed_out
            else "left"
        ] += 1


def _signature(problem: str) -> str:
    """A problem with its particulars (hex, numbers, the case) removed: one line per kind."""
    text = problem.split("; case ")[0].split("; upstream connection")[0]
    return re.sub(r"[0-9a-f]{16,}|\d+", "N", text)[:160]


def _failure(
    name: str, settings: Settings, stats: Stats, problems: list[str], log_lines: list[str]
) -> str:
    distinct: dict[str, list[str]] = {}
    for p in problems:
        distinct.setdefault(_signature(p), []).append(p)
    lines = [
        f"TCP fuzz {name} failed: FUZZ_SEED={settings.seed}, {len(problems)} problem(s) of "
        f"{len(distinct)} kind(s) in {stats.cases} cases",
        f"replay one case: FUZZ_SEED={settings.seed} FUZZ_CASE=<index> .venv/bin/pytest "
        f"tests/fuzz/test_tcp_fuzz.py -k {name} -s  (the index follows 'case' below)",
    ]
    for examples in list(distinct.values())[:SHOWN]:
        lines.append(f"  - ({len(examples)}x) {examples[0]}")
    if len(distinct) > SHOWN:
        lines.append(f"  ... and {len(distinct) - SHOWN} more kinds")
    if log_lines:
        lines.append("first proxy warnings: " + " | ".join(log_lines[:5]))
    return "\n".join(lines)


# ------------------------------------------------------------ a normal client afterwards


async def api_versions(target: Target, login: bool = False) -> dict[int, tuple[int, int]]:
    """What the proxy advertises on `target` (after a SASL login when `login`)."""
    from tests.fixtures.rawclient import request_entity

    reader, writer = await connect(target)
    try:
        if login:
            await sasl_login(reader, writer, *target.credentials)
        answer = await request(
            reader,
            writer,
            request_entity(18, 3, client_software_name="fuzz", client_software_version="1.0"),
        )
        assert answer.error_code == 0, answer
        return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}
    finally:
        writer.close()


async def roundtrip(target: Target, proxy_port: int, login: bool = False) -> None:
    """A real ApiVersions + Metadata exchange: the proxy still serves, and rewrites the
    cluster's broker addresses to its own."""
    from tests.fixtures.rawclient import module, request_entity

    reader, writer = await connect(target)
    try:
        if login:
            await sasl_login(reader, writer, *target.credentials)
        versions = await request(
            reader,
            writer,
            request_entity(18, 3, client_software_name="fuzz", client_software_version="1.0"),
        )
        assert versions.error_code == 0, versions
        mod = module(3, 12)
        metadata = await request(
            reader,
            writer,
            request_entity(
                3,
                12,
                topics=(mod.MetadataRequestTopic(name="fuzz-check", topic_id=None),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )
        assert metadata.brokers, metadata
        for broker in metadata.brokers:
            assert broker.host == "127.0.0.1" and int(broker.port) != 0, broker
        assert [t.name for t in metadata.topics] == ["fuzz-check"], metadata.topics
    finally:
        writer.close()


def client_context(cafile: str) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=cafile)


def pick(seed: str, index: int, weighted: Sequence[tuple[str, float]]) -> str:
    """The target of case `index`: deterministic in (seed, index), like the case itself."""
    rng = random.Random(f"{seed}/{index}/target")
    names, weights = zip(*weighted, strict=True)
    return rng.choices(names, weights)[0]
