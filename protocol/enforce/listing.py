"""APIs that list what the broker holds (ListGroups, ListTransactions): the request names
nothing, so it is forwarded as it came; the broker answers with everything the proxy's
identity may see, and the entries the client's principal may not see are dropped from the
answer, never an error (Kafka's filter on the answer, in the client's name: the broker saw
the proxy).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from aclgate.protocol.enforce.base import (
    ApiHandler,
    Check,
    KioBody,
    forward,
    merged_response,
)
from aclgate.protocol.enforce.context import AuthContext
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import RequestHeader
from aclgate.protocol.session import ProxySession, Slot, WithState


@dataclass(frozen=True)
class FilteredAnswer(ApiHandler):
    """Forwarded whole; the answer's `array` keeps the entries whose `name_field` passes
    `check`, unless `shortcut` (a cluster check) lets the whole answer through."""

    #: the answer's array of listed entries
    array: str
    #: each entry's field holding the resource name `check` is made on
    name_field: str
    check: Check
    shortcut: Check | None = None

    granularity = "silent filtering"

    def describe(self) -> str:
        each = f"{self.check.describe()} per listed entry, denied ones dropped; never an error"
        if self.shortcut is None:
            return each
        return f"{self.shortcut.describe()} lists all, else {each}"

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: KioBody,  # not read: it names nothing
    ) -> None:
        shortcut = self.shortcut
        if shortcut is not None and ctx.check(
            header, shortcut.operation, shortcut.resource_type, shortcut.resource(None),
            shortcut.log_if_denied,
        ):  # fmt: skip
            forward(session, header, frame)
            return
        forward(session, header, frame, WithState(self._filtered, header))

    def _filtered(
        self, session: ProxySession, slot: Slot, frame: Frame, header: RequestHeader
    ) -> bytes:
        ctx, check, name = session.context, self.check, self.name_field

        def merge(body: KioBody) -> KioBody:
            kept = tuple(
                entry
                for entry in getattr(body, self.array)
                if ctx.check(
                    header, check.operation, check.resource_type, getattr(entry, name),
                    check.log_if_denied,
                )
            )  # fmt: skip
            return dataclasses.replace(body, **{self.array: kept})

        return merged_response(frame, slot, merge)
