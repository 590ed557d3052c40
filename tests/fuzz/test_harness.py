"""The fuzzer's checks can fail: a proxy broken on purpose is caught, and the checks
themselves on hand-made inputs."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from aclgate.protocol.codec import encode_request

from .checks import Snapshot, check_accounting, check_responses, check_upstream, stop_index
from .client import Outcome, Target
from .corpus import CLIENT_ID, Seed, blank, corpus_seeds, make_case, parse
from .harness import Settings, api_versions, fuzz


def _run(name, proxy, upstream, runner, seeds, cases=150, allowed_names=None):
    target = Target(name, "127.0.0.1", proxy.port)
    advertised = runner.run(api_versions(target))
    settings = Settings(seed="harness", cases=cases)
    return fuzz(
        name,
        settings,
        lambda i: make_case(settings.seed, i, name, seeds, advertised),
        {name: target},
        [proxy],
        upstream,
        {name: advertised},
        advertised,
        cases,
        runner,
        allowed_names=allowed_names,
    )


def _only(api_key: int) -> list[Seed]:
    return [s for s in corpus_seeds() if s.api_key == api_key]


def test_forwarded_garbage_is_caught(proxy_factory, upstream, runner):
    """A Produce handler that forwards whatever it gets, unparsed."""
    proxy = proxy_factory(upstream.bootstrap)

    def careless(session, header, frame):
        session.forward(header, bytes(frame))

    proxy.run(lambda: proxy.server.session_config.handlers.__setitem__(0, careless))
    with pytest.raises(AssertionError, match="forwarded a frame that does not parse"):
        _run("sabotaged", proxy, upstream, runner, _only(0))


def test_uncounted_close_is_caught(proxy_factory, upstream, runner):
    """A Metadata handler that closes the connection without a kind."""
    proxy = proxy_factory(upstream.bootstrap)

    def closes(session, header, frame):
        session.io.close("sabotage", None)

    proxy.run(lambda: proxy.server.session_config.handlers.__setitem__(3, closes))
    with pytest.raises(AssertionError, match="without an aclgate_errors_total kind"):
        _run("sabotaged", proxy, upstream, runner, _only(3), cases=40)


def test_denied_name_forwarded_is_caught(proxy_factory, upstream, runner):
    """A proxy without the ACLs the check expects (it lets everything through)."""
    proxy = proxy_factory(upstream.bootstrap)
    with pytest.raises(AssertionError, match="which the ACLs deny"):
        _run("sabotaged", proxy, upstream, runner, _only(0), 40, {"sabotaged": {"ok"}})


def test_unchanged_proxy_passes(proxy_factory, upstream, runner):
    """The control for the two above: the same runs against the proxy as it is."""
    proxy = proxy_factory(upstream.bootstrap)
    _run("control", proxy, upstream, runner, _only(0) + _only(3))


# ------------------------------------------------------------------- the checks, by hand

ADVERTISED = {0: (3, 13), 3: (0, 13), 18: (0, 4)}


def _frame(api_key: int, version: int, correlation_id: int) -> bytes:
    return encode_request(correlation_id, blank(api_key, version), CLIENT_ID)


def _outcome(frames: list[bytes], received: bytes = b"", **kw) -> Outcome:
    case = make_case("t", 0, "t", [Seed("m", frames[0], 3, 12, 0)], ADVERTISED)
    case = dataclasses.replace(case, data=b"".join(frames), cuts=[], clean=False, **kw)
    return Outcome(case, connected=True, sent=len(case.data), received=received)


def test_stop_index_allows_only_advertised_parsable_frames():
    good = parse(_frame(3, 12, 1))
    newer_api_versions = parse(_frame(18, 4, 2)[:4] + b"\x00\x12\x00\x63" + _frame(18, 4, 2)[8:])
    unadvertised = parse(_frame(3, 12, 3)[:6] + b"\x00\x0e" + _frame(3, 12, 3)[8:])
    assert stop_index([good, newer_api_versions, good], ADVERTISED) == 3
    assert stop_index([good, unadvertised, good], ADVERTISED) == 1


def test_stop_index_lets_a_denied_acl_change_go_on_unread():
    """CreateAcls' ALTER CLUSTER is decided on the header: denied, an unparsable body is
    answered unread and the connection goes on; allowed, it is closed as Kafka closes."""
    good = parse(_frame(3, 12, 1))
    broken = parse(_frame(30, 3, 2)[:-1] + b"\x05")  # 5 tagged fields, none there
    assert broken.error is not None and broken.error.startswith("body:"), broken
    advertised = {**ADVERTISED, 30: (0, 3)}
    assert stop_index([good, broken, good], advertised, cluster_denied=True) == 3
    assert stop_index([good, broken, good], advertised) == 1


def test_frames_after_a_refused_one_must_not_be_forwarded():
    first, bad, after = _frame(3, 12, 1), _frame(3, 12, 2)[:-3], _frame(3, 12, 3)
    bad = bad[:0] + (len(bad) - 4).to_bytes(4, "big") + bad[4:]
    outcome = _outcome([first, bad, after])
    ok = check_upstream([(1, first)], {}, [outcome], ADVERTISED, {"t": ADVERTISED})
    assert not ok.problems, ok.problems
    report = check_upstream([(1, after)], {}, [outcome], ADVERTISED, {"t": ADVERTISED})
    assert any("must have refused" in p for p in report.problems), report.problems
    stranger = check_upstream(
        [(1, _frame(3, 12, 99))], {}, [outcome], ADVERTISED, {"t": ADVERTISED}
    )
    assert any("no client sent" in p for p in stranger.problems), stranger.problems
    half = check_upstream([], {4: b"\x00\x00"}, [outcome], ADVERTISED, {"t": ADVERTISED})
    assert any("part of a frame" in p for p in half.problems), half.problems


def test_answers_must_follow_the_requests():
    requests = [_frame(3, 12, 1), _frame(3, 12, 2)]
    answer = lambda cid: (4).to_bytes(4, "big") + cid.to_bytes(4, "big")  # noqa: E731
    assert not check_responses(_outcome(requests, answer(1) + answer(2)))
    swapped = check_responses(_outcome(requests, answer(2) + answer(1)))
    assert any("correlation id 1" in p for p in swapped), swapped
    half = check_responses(
        dataclasses.replace(_outcome(requests, answer(1)[:6]), proxy_closed=True)
    )
    assert any("half an answer" in p for p in half), half


def test_accounting_adds_up():
    delta = Snapshot(connections=5, errors=Counter(malformed_request=2, tls_handshake=1))
    closes = Counter(disconnected=2, closed_normally=1)
    assert not check_accounting(delta, closes, Counter(), tcp_connections=6)
    lost = check_accounting(delta, Counter(disconnected=1), Counter(), tcp_connections=6)
    assert any("ends accounted for" in p for p in lost), lost
    internal = dataclasses.replace(delta, errors=Counter(internal_error=1, malformed_request=1))
    assert any("internal_error" in p for p in check_accounting(internal, closes, Counter(), 5))
    odd = dataclasses.replace(delta, errors=Counter(made_up=2, tls_handshake=1))
    assert any("does not list" in p for p in check_accounting(odd, closes, Counter(), 6))


def test_cases_replay_byte_for_byte():
    """A case depends on (seed, index) only, so FUZZ_CASE replays it; and every mutation
    copes with every seed (a generator crash would end a long run early)."""
    seeds = corpus_seeds()
    made = [make_case("replay", i, "t", seeds, ADVERTISED) for i in range(10000)]
    again = make_case("replay", 1234, "t", seeds, ADVERTISED)
    assert (again.data, again.cuts, again.story) == (
        made[1234].data,
        made[1234].cuts,
        made[1234].story,
    )
    assert len({c.data for c in made}) > 9500
