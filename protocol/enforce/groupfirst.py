"""Group APIs decided on the group id read in place, before the body is decoded (issue 20).

JoinGroup, SyncGroup, Heartbeat and LeaveGroup are checked by Kafka on their group alone
(READ GROUP, KafkaApis.handleJoinGroupRequest and its neighbours), and the group id is the
first field of each at every version. Decoding the whole body with kio before that check held
the event loop 1.2 s for a denied 8 MiB JoinGroup and 3.8 s for a 32 MiB SyncGroup (which keeps
the 100 MiB frame limit: a big group's assignments are tens of MiB). Here the group id is
read from the body's first bytes (peek.peek_first_string) and decided at once: an allowed
request is decoded (a malformed one closed, as before) and forwarded without a second check;
a denied one is answered at once, its body never read: the answer names nothing of the body
(Kafka's getErrorResponse of these four is an error code and defaults; LeaveGroup's members
are left out), so it is `Whole`'s answer, built once per version
(tests/protocol/test_group_first.py compares them at every version). Walking the rest to
close a malformed one as Kafka does would cost 0.5 µs per entry (350 ms at 8 MiB): a denied
request whose body is malformed past its group id is answered, not closed (docs/design.md).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from aclgate.authz.model import ResourceType
from aclgate.protocol.codec import decode_request
from aclgate.protocol.enforce.base import KioBody, Whole, answer, forward, refuse_not_ready
from aclgate.protocol.enforce.build import build
from aclgate.protocol.enforce.context import NotReady
from aclgate.protocol.enforce.peek import peek_first_string
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import RequestHeader
from aclgate.protocol.session import ProxySession
from aclgate.protocol.versions import response_class


@dataclass
class GroupFirst(Whole):
    """`Whole` of one group check, decided on the group id the request starts with."""

    def __post_init__(self) -> None:
        (check,) = self.checks
        assert check.resource_type is ResourceType.GROUP and check.when is None, check

    @functools.cached_property
    def _denied(self) -> dict[tuple[int, int], KioBody]:
        """(api_key, version) -> the denied answer's body, built on first use."""
        return {}

    def denied_body(self, header: RequestHeader) -> KioBody:
        """`Whole`'s denied answer, which takes nothing from the request but its version."""
        key = (header.api_key, header.api_version)
        body = self._denied.get(key)
        if body is None:
            cls = response_class(*key)
            body = self._denied[key] = build(
                cls, self.checks[0].error, None, self.aliases, self.overrides or None
            )
        return body

    def __call__(self, session: ProxySession, header: RequestHeader, frame: Frame) -> None:
        group_id = peek_first_string(frame, header)
        if group_id is None:  # null, cut short, not UTF-8: kio's decoder decides
            super().__call__(session, header, frame)
            return
        check = self.checks[0]
        try:
            allowed = session.context.check(
                header, check.operation, check.resource_type, group_id, check.log_if_denied
            )
        except NotReady:  # refused as `ApiHandler.dispatch` refuses it
            refuse_not_ready(session)
            return
        if allowed:
            decode_request(frame, header)  # a body kio refuses is closed, as before
            forward(session, header, frame)
        else:
            answer(session, header, self.denied_body(header))


__all__ = ["GroupFirst"]
