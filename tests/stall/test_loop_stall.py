"""The loop-stall budget (issue 20): no single client's input stalls the others.

Each hostile input of bench/loop_stall.py (issue 20's breaks B5-B9 and a slice of the TCP fuzz
corpus) runs against a real `aclgate serve` in front of tansu while a pinger in its own process
measures the round trip of ApiVersions on another connection of the same event loop. The
worst round trip during the input must stay within the input's budget (100 ms; docs/
operations.md, "Bounds"), best of up to 5 runs so that a hiccup of this shared machine does not
fail the suite while a real stall, which repeats, does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aclgate.proxy.demo.embedded_broker import TansuBroker
from bench.loop_stall import (
    KAFKA_PROFILES,
    KINDS,
    PROFILES,
    InputKind,
    Profile,
    measure_within_budget,
    running,
)

MEASURED: list[str] = []


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[TansuBroker]:
    with TansuBroker(log_path=tmp_path_factory.mktemp("stall") / "tansu.log") as b:
        yield b


@pytest.fixture(scope="module")
def profiles(broker, tmp_path_factory) -> Iterator[Callable[[str, Any], Profile]]:
    """One proxy (and its pinger) per profile, started when a test (its `request`) first asks
    for it; the KAFKA_PROFILES in front of the session's `kafka_single`."""
    started: dict[str, Profile] = {}
    stack = []
    workdir: Path = tmp_path_factory.mktemp("stall-proxies")

    def get(name: str, request: Any) -> Profile:
        if name not in started:
            upstream = (
                request.getfixturevalue("kafka_single").bootstrap
                if name in KAFKA_PROFILES
                else broker.bootstrap
            )
            context = running(name, upstream, workdir)
            started[name] = context.__enter__()
            stack.append(context)
        return started[name]

    yield get
    for context in reversed(stack):
        context.__exit__(None, None, None)


def _param(kind: InputKind) -> Any:
    """An input known to be over its budget runs as xfail(strict=True): its budget is never
    raised to pass, and the test fails once the input is within it. Inputs of a profile in
    front of Kafka are marked `kafka` (their cluster comes through getfixturevalue)."""
    marks = [pytest.mark.kafka] if kind.profile in KAFKA_PROFILES else []
    if kind.over_budget is not None:
        marks.append(pytest.mark.xfail(strict=True, reason=kind.over_budget))
    return pytest.param(kind, marks=marks)


@pytest.mark.parametrize("kind", [_param(k) for k in KINDS], ids=[k.name for k in KINDS])
def test_input_stalls_other_clients_within_budget(kind, profiles, request) -> None:
    assert kind.profile in PROFILES
    profile = profiles(kind.profile, request)
    m = measure_within_budget(profile, kind)
    MEASURED.append(f"{m.kind}: {m.stall_ms} ms in {m.seconds} s, {m.figures}")
    print(MEASURED[-1])
    assert m.stall_ms <= kind.budget_ms, (
        f"{kind.what}: the other clients waited {m.stall_ms} ms (budget {kind.budget_ms:g} ms, "
        f"best of {m.tries} runs); figures {m.figures}"
    )
    assert not kind.over_limits(m.figures), f"{kind.what}: {kind.over_limits(m.figures)}"
    assert profile.target.proxy.proc.poll() is None, "the proxy died"
