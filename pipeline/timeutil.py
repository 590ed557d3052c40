"""Timestamps at the edges of the pipeline: `--since/--until` in, ISO-8601 UTC strings out.

Spark hands timestamps to Python as naive datetimes in the *Python process's* local zone,
so the jobs move them across as microseconds since the epoch and format them here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def parse_user_time(text: str) -> datetime:
    """`2026-11-21`, `2026-11-21T12:00`, `...Z` or `...+01:00` to an aware UTC datetime."""
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ValueError(f"not an ISO-8601 time: {text!r}") from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def iso(moment: datetime) -> str:
    """The audit log's own format: `2026-11-21T12:00:00.123456Z`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def from_micros(micros: int | None) -> str | None:
    if micros is None:
        return None
    return iso(datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros))


def to_micros(moment: datetime) -> int:
    delta = moment.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
