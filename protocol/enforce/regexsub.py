"""Broker-side regex subscriptions (KIP-848 `SubscribedTopicRegex`), resolved for the client.

Kafka's group coordinator resolves a member's RE2J regex over every topic of the cluster and
keeps the topics the member's principal may DESCRIBE (TopicRegexResolver). Behind aclgate the
coordinator sees the proxy's identity, so aclgate resolves the regex itself, for the client's
principal, and sends the broker the resolved topic names instead; the regex travels wrapped in
a form that matches nothing (`wrap`), so the broker keeps it for describe answers, where
aclgate shows the member's own regex again (`unwrap`). docs/design.md, "Regex subscriptions",
gives the reasoning.

Matching uses RE2 (google-re2, the binding Google maintains beside RE2), whose syntax is the
one RE2J (Kafka's) ports, less `\\C`, which RE2J refuses and RE2 accepts.
"""

from __future__ import annotations

import functools
import re as _re
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import re2

from aclgate.protocol.effects import TopicNames
from aclgate.protocol.shapes.requests import ConsumerGroupHeartbeatRequest

#: the longest regex a member may subscribe with (Kafka sets none; 1 MiB requests allow
#: 1 MiB regexes, each compiled and kept per connection): docs/operations.md, "Bounds"
MAX_REGEX_CHARS = 16_384
#: regex members remembered per connection (one per group a client consumes in, in practice)
MEMBERS_PER_CONNECTION = 16
#: compiled regexes shared by all connections of a worker
COMPILED_CACHE = 256
#: RE2's memory budget for one compiled regex (its default is 8 MiB)
RE2_MAX_MEM = 1 << 20

#: `wrap(r)` = "(?:" + r + WRAP_SUFFIX: `\z` then more text can never match, in RE2 and RE2J
WRAP_PREFIX = "(?:"
WRAP_SUFFIX = r")\z(?:aclgate)"

#: RE2's error texts -> RE2J's `PatternSyntaxException.getDescription()` for the same error,
#: which Kafka puts in its INVALID_REGULAR_EXPRESSION message
_RE2J_DESCRIPTIONS = {
    "missing )": "missing closing )",
    "missing ]": "missing closing ]",
    "unexpected )": "regexp/syntax: internal error",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid repetition size": "invalid repeat count",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "trailing \\": "trailing backslash at end of expression",
    "invalid named capture group": "invalid named capture",
    "duplicate capture group name": "duplicate capture group name",
    "invalid escape sequence": "invalid escape sequence",
    "invalid character class range": "invalid character class range",
    "invalid character class": "invalid character class",
    "invalid UTF-8": "invalid UTF-8",
    "pattern too large - compile failed": "expression too large",
}


class InvalidRegex(Exception):
    """A regex Kafka's coordinator refuses (INVALID_REGULAR_EXPRESSION, 128): the message
    is Kafka's (`Utils.throwIfRegularExpressionIsInvalid`)."""

    def __init__(self, regex: str, description: str):
        super().__init__(
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {description}."
        )


_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # refusals are answered to the client, not written to stderr
_OPTIONS.max_mem = RE2_MAX_MEM


@functools.lru_cache(maxsize=COMPILED_CACHE)
def compiled(regex: str) -> re2._Regexp:
    """The regex compiled as RE2J would accept it; raises InvalidRegex."""
    if len(regex) > MAX_REGEX_CHARS:
        raise InvalidRegex(
            regex[:100] + "...", f"longer than aclgate's bound of {MAX_REGEX_CHARS} characters"
        )
    try:
        pattern = re2.compile(regex, options=_OPTIONS)
    except re2.error as exc:
        text = exc.args[0].decode("utf-8", "replace") if exc.args else "invalid"
        kind = text.split(": ", 1)[0]
        raise InvalidRegex(regex, _RE2J_DESCRIPTIONS.get(kind, kind)) from None
    refused = _refused_by_re2j_only(regex)
    if refused is not None:
        raise InvalidRegex(regex, refused)
    return pattern


#: a repetition `{n}`, `{n,}` or `{n,m}`; any other `{` is a literal
_REPEAT = _re.compile(r"\{[0-9]+(?:,[0-9]*)?\}")


def _refused_by_re2j_only(regex: str) -> str | None:
    """RE2J's description of what it refuses in a regex RE2 takes (tests/kafka/
    test_re2j_agreement.py compares the two): `\\C` (any byte), and a repetition right after
    a literal `{` (`{{2}`, `x{*`), which RE2J's parser counts as a repetition of a repetition."""
    i, end = 0, len(regex)
    after_brace = False
    while i < end:
        c = regex[i]
        brace_before, after_brace = after_brace, False
        if c == "\\":
            nxt = regex[i + 1 : i + 2]
            if nxt == "C":
                return "invalid escape sequence"
            if nxt == "Q":  # quoted to \E or the end
                close = regex.find("\\E", i + 2)
                i = end if close < 0 else close + 2
            elif nxt in ("p", "P", "x") and regex[i + 2 : i + 3] == "{":
                close = regex.find("}", i + 3)
                i = end if close < 0 else close + 1
            else:
                i += 2
        elif c == "[":
            i = _class_end(regex, i)
        elif c in "*+?" or (c == "{" and _REPEAT.match(regex, i)):
            if brace_before:
                return "invalid nested repetition operator"
            repeat = _REPEAT.match(regex, i)
            i = repeat.end() if repeat else i + 1
        else:
            after_brace = c == "{"
            i += 1
    return None


def _class_end(regex: str, start: int) -> int:
    """Where the character class opening at `start` ends (a `]` first in it is a member)."""
    i = start + 1
    if regex[i : i + 1] == "^":
        i += 1
    if regex[i : i + 1] == "]":
        i += 1
    while i < len(regex):
        if regex[i] == "\\":
            i += 2
        elif regex.startswith("[:", i) and regex.find(":]", i + 2) >= 0:
            i = regex.find(":]", i + 2) + 2
        elif regex[i] == "]":
            return i + 1
        else:
            i += 1
    return i


def wrap(regex: str) -> str:
    """The regex as the broker gets it: valid when `regex` is, matching no topic, and read
    back by `unwrap`."""
    return WRAP_PREFIX + regex + WRAP_SUFFIX


def unwrap(regex: str | None) -> str | None:
    """The member's own regex from what the broker stored, or None if aclgate did not wrap it."""
    if regex and regex.startswith(WRAP_PREFIX) and regex.endswith(WRAP_SUFFIX):
        return regex[len(WRAP_PREFIX) : -len(WRAP_SUFFIX)]
    return None


def matching(regex: str, topics: Iterable[str]) -> list[str]:
    """The topics the whole regex matches (RE2J's `matcher(topic).matches()`), sorted."""
    fullmatch = compiled(regex).fullmatch
    return sorted(t for t in topics if fullmatch(t) is not None)


@dataclass
class RegexMember:
    """What aclgate last sent the broker for one regex member of a group."""

    regex: str
    #: the names the member subscribed to itself (the protocol allows both; Java sends none)
    explicit: tuple[str, ...]
    #: the names sent: explicit + the regex's topics the principal may DESCRIBE
    sent: tuple[str, ...] | None = None
    #: (topic list version, ACL version...) the resolution was made at
    resolved_at: tuple[int, ...] | None = None


class RegexMembers:
    """The regex members whose heartbeats come over one connection, most recent last: a
    heartbeat sends its regex only when it changes (or after an error, when the client
    sends every field again), so the later ones are resolved from what is kept here."""

    __slots__ = ("_members",)

    def __init__(self) -> None:
        self._members: OrderedDict[tuple[str, str], RegexMember] = OrderedDict()

    def get(self, group_id: str, member_id: str) -> RegexMember | None:
        return self._members.get((group_id, member_id))

    def put(self, group_id: str, member_id: str, member: RegexMember) -> None:
        key = (group_id, member_id)
        self._members[key] = member
        self._members.move_to_end(key)
        while len(self._members) > MEMBERS_PER_CONNECTION:
            self._members.popitem(last=False)

    def forget(self, group_id: str, member_id: str) -> None:
        self._members.pop((group_id, member_id), None)

    def __len__(self) -> int:
        return len(self._members)


#: how old the topic list a regex is resolved over may be: a topic created later is assigned
#: within this plus one heartbeat interval (Kafka's coordinator: within about 10 s)
REGEX_TOPICS_MAX_AGE = 5.0


#: what ConsumerGroupHeartbeatHandler and the regex steps read of a heartbeat: its member and
#: its subscription (v1's `subscribed_topic_regex` read by name)
Heartbeat = ConsumerGroupHeartbeatRequest


def regex_step(
    members: RegexMembers, request: Heartbeat
) -> RegexMember | InvalidRegex | tuple[str, ...] | None:
    """What one heartbeat needs: the regex member to resolve for it; the refusal of its new
    regex; the names to send instead of the client's (the member dropped its regex and did
    not resend its names, which the broker would otherwise keep as aclgate resolved them);
    or None, to forward it as it is."""
    regex: str | None = getattr(request, "subscribed_topic_regex", None)  # v1+
    group, member_id = request.group_id, request.member_id
    names = request.subscribed_topic_names
    known = members.get(group, member_id)
    if request.member_epoch < 0:  # leaving (-1), or a static member leaving (-2)
        members.forget(group, member_id)
        return None
    if regex:  # a new regex, or every field again after an error or a reconnection
        try:
            compiled(regex)
        except InvalidRegex as exc:
            return exc
        explicit = tuple(names) if names is not None else known.explicit if known else ()
        member = RegexMember(regex, explicit)
        members.put(group, member_id, member)
        return member
    if known is None:
        return None
    if regex == "":  # the member dropped its regex
        members.forget(group, member_id)
        return None if names is not None else known.explicit
    if names is not None:  # new names beside the regex: resolved again with them
        known.explicit, known.resolved_at = tuple(names), None
    return known


def resolve_member(
    member: RegexMember,
    topics: TopicNames,
    acl_version: tuple[int, ...],
    may_describe: Callable[[str], bool],
) -> bool:
    """Resolve the member's regex again if the topics or the ACLs changed since it last was
    (Kafka's TopicRegexResolver: the matching topics the principal may DESCRIBE), and set the
    names to send; whether they changed."""
    at = (topics.version, *acl_version)
    if member.resolved_at == at and member.sent is not None:
        return False
    allowed = [t for t in matching(member.regex, topics.names) if may_describe(t)]
    names = tuple(sorted(set(member.explicit).union(allowed)))
    changed = names != member.sent
    member.sent, member.resolved_at = names, at
    return changed
