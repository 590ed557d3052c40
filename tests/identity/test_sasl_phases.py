"""The SASL state machine is the table in protocol/identity/saslgate.py, and only it."""

from __future__ import annotations

import pytest

from aclgate.protocol.identity import saslgate
from aclgate.protocol.identity.saslgate import (
    API_VERSIONS,
    REQUESTS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    TRANSITIONS,
    Event,
    Phase,
    SaslListenerConfig,
    SaslState,
)


def _state() -> SaslState:
    return SaslState(SaslListenerConfig((), lambda name: None, lambda: 0))  # type: ignore[arg-type,return-value]


def test_every_phase_is_reachable_and_every_phase_can_be_refused() -> None:
    reached, frontier = {Phase.AWAITING_HANDSHAKE}, [Phase.AWAITING_HANDSHAKE]
    while frontier:
        phase = frontier.pop()
        for (source, _event), target in TRANSITIONS.items():
            if source is phase and target not in reached:
                reached.add(target)
                frontier.append(target)
    assert reached == set(Phase)
    assert all(TRANSITIONS[(phase, Event.REFUSED)] is Phase.CLOSING for phase in Phase)
    assert set(REQUESTS) == set(Phase)


def test_a_full_life_with_a_reauthentication() -> None:
    state = _state()
    for event, phase in [
        (Event.HANDSHAKE, Phase.AUTHENTICATING),
        (Event.COMPLETED, Phase.AUTHENTICATED),
        (Event.HANDSHAKE, Phase.REAUTHENTICATING),
        (Event.COMPLETED, Phase.AUTHENTICATED),
        (Event.HANDSHAKE_V0, Phase.TOKENS_V0),  # Kafka re-authenticates with bare tokens too
        (Event.COMPLETED, Phase.AUTHENTICATED),
        (Event.REFUSED, Phase.CLOSING),
    ]:
        state.advance(event)
        assert state.phase is phase


@pytest.mark.parametrize(
    ("events", "illegal"),
    [
        ([], Event.COMPLETED),  # no exchange finishes before a handshake chose a mechanism
        ([Event.HANDSHAKE], Event.HANDSHAKE),  # the handler refuses it first; the table too
        ([Event.HANDSHAKE_V0], Event.HANDSHAKE),  # bare tokens follow a v0 handshake
        ([Event.REFUSED], Event.HANDSHAKE),  # nothing moves a closing connection
    ],
)
def test_a_move_outside_the_table_is_a_bug_not_a_state(events: list[Event], illegal: Event) -> None:
    state = _state()
    for event in events:
        state.advance(event)
    before = state.phase
    with pytest.raises(AssertionError, match="SASL: no move"):
        state.advance(illegal)
    assert state.phase is before


def test_before_authentication_only_the_sasl_requests_are_read() -> None:
    assert REQUESTS[Phase.AWAITING_HANDSHAKE] == {API_VERSIONS, SASL_HANDSHAKE}
    # during the exchange every request is read, to be answered with its error as Kafka does
    # (tests/listeners/test_sasl_edges_kafka.py)
    assert REQUESTS[Phase.AUTHENTICATING] is None
    assert REQUESTS[Phase.AUTHENTICATED] is None and REQUESTS[Phase.CLOSING] == frozenset()


def test_during_the_exchange_only_sasl_authenticate_is_served() -> None:
    """Every API the listener parses is read between SaslHandshake v1 and the end of the
    exchange, and all but SaslAuthenticate get the refusal that answers with their error."""
    config = SaslListenerConfig(
        (),
        lambda name: None,  # type: ignore[arg-type,return-value]
        lambda: 0,
        versions_after={0: (3, 12), 3: (0, 12), API_VERSIONS: (0, 4), SASL_HANDSHAKE: (0, 1)},
    )
    handlers = config.exchange_handlers
    assert set(handlers) == {0, 3, API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE}
    assert handlers[SASL_AUTHENTICATE] is saslgate._authenticate
    assert {handlers[key] for key in (0, 3, API_VERSIONS, SASL_HANDSHAKE)} == {saslgate._unexpected}
