"""File descriptors: the proxy's open-files limit and how many client connections fit in it.

Running out of descriptors is worse than refusing a connection: uvloop (libuv) then accepts
and drops pending connections silently, and every other socket the proxy needs (upstream
connections, the two control connections, the metrics endpoint, the ACL file) fails too. So the
proxy raises its soft limit to the hard limit at start, and refuses client connections itself,
counted and logged, before the limit is reached.
"""

from __future__ import annotations

import os

try:
    import resource
except ImportError:  # pragma: no cover - not on Linux/macOS
    resource = None  # type: ignore[assignment]

#: descriptors a client connection may hold: its own socket and its upstream connection
PER_CONNECTION = 2


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns (before, after)."""
    if resource is None:
        return -1, -1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft, soft
        return soft, target
    return soft, soft


def open_files_limit() -> int:
    if resource is None:
        return -1
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def open_fd_count() -> int:
    """Descriptors this process holds now (Linux /proc, else /dev/fd; -1 if unknown)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder))
        except OSError:
            continue
    return -1


def connection_budget(limit: int, in_use: int) -> int:
    """Client connections that fit under `limit` descriptors with `in_use` already taken,
    keeping a reserve for listeners, the two control connections, the metrics endpoint and files.
    0 means no budget is known (no limit applied)."""
    if limit <= 0 or in_use < 0:
        return 0
    reserve = max(64, limit // 20)
    return max(1, (limit - in_use - reserve) // PER_CONNECTION)
