"""The dry-run scope in force: the --dry-run-principal/--dry-run-resource flags plus a file that
is followed while the proxy runs (protocol/enforce/dryrun.py says what the scope does).

The file sits next to the ACL file and changes with it during a rollout: put a team in, watch
its would-be denials in the audit, fix the ACLs, take it out. It is polled once a second, like
the ACL file (it is small, so its content is simply read and compared); a new scope replaces
the old one as a whole, so a decision sees the one or the other. A file that cannot be read or parsed keeps the scope in force (one
ERROR names the problem, /readyz shows it), as a broken ACL file keeps the policy; a missing
file adds nothing, so deleting it ends the file's part of the dry-run.

    {"principals": ["User:team-a"], "resources": ["TOPIC:PREFIXED:payments."]}
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from pathlib import Path
from typing import Any

from aclgate.protocol.enforce.context import Policy
from aclgate.protocol.enforce.dryrun import DryRunScope
from aclgate.proxy.config import ConfigError, ProxyConfig

log = logging.getLogger("aclgate.dryrun")

FIELDS = ("principals", "resources")


def parse_dry_run_file(data: bytes, source: str) -> tuple[list[str], list[str]]:
    """(principals, resources) of the file; ValueError naming the problem."""
    try:
        doc = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{source}: not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{source}: expected a JSON object")
    unknown = set(doc) - set(FIELDS)
    if unknown:
        raise ValueError(f"{source}: unknown field(s) {', '.join(sorted(unknown))}")
    lists = []
    for name in FIELDS:
        value = doc.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{source}: {name!r} must be a list of strings")
        lists.append(value)
    principals, resources = lists
    try:
        DryRunScope.parse(principals, resources)
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None
    return principals, resources


class DryRunSettings:
    """Keeps `policy.dry_run` equal to the flags' selectors plus the file's."""

    def __init__(self, config: ProxyConfig, policy: Policy, interval: float = 1.0) -> None:
        self.flags = (list(config.dry_run_principal), list(config.dry_run_resource))
        self.path: Path | None = config.dry_run_file
        self.policy = policy
        self.interval = interval
        self.last_error: str | None = None
        self.reloads = 0
        self._data: bytes | None = None  # the content in force (a small file: read each poll)
        self._file: tuple[list[str], list[str]] = ([], [])
        #: the poller's worker thread and a reload asked for on the loop take turns
        self._lock = threading.Lock()
        try:
            self.reload_once(strict=True)
        except ValueError as exc:
            raise ConfigError(f"dry_run_file: {exc}") from None
        if not self.path:
            self._publish()

    def _publish(self) -> None:
        (fp, fr), (pp, pr) = self.flags, self._file
        scope = DryRunScope.parse(dict.fromkeys(fp + pp), dict.fromkeys(fr + pr))
        if scope != self.policy.dry_run:
            self.policy.dry_run = scope
            if scope:
                log.warning("dry-run (not enforced) for: %s", ", ".join(scope.described))
            else:
                log.warning("dry-run scope is empty: every decision is enforced")

    def reload_once(self, *, strict: bool = False) -> bool:
        """Read the file if it changed; True when the scope was replaced."""
        if self.path is None:
            return False
        with self._lock:
            return self._reload(self.path, strict)

    def _reload(self, path: Path, strict: bool) -> bool:
        try:
            data: bytes | None = path.read_bytes()
        except FileNotFoundError:
            data = None
        except OSError as exc:
            return self._failed(f"{path}: {exc.strerror}", strict)
        if data == self._data and self.reloads:
            return False
        try:
            found = parse_dry_run_file(data, str(path)) if data is not None else ([], [])
        except ValueError as exc:
            return self._failed(str(exc), strict)
        self._data = data
        self.reloads += 1
        if self.last_error is not None:
            log.info("dry-run file %s is valid again", path)
        self.last_error = None
        changed = found != self._file
        self._file = found
        self._publish()
        return changed

    def _failed(self, message: str, strict: bool) -> bool:
        if strict:
            raise ValueError(message)
        if message != self.last_error:
            self.last_error = message
            log.error("dry-run file not loaded, keeping the previous scope: %s", message)
        return False

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await asyncio.to_thread(self.reload_once)
            except Exception:  # a bug must not end following the file for the process's life
                log.exception("dry-run file: unexpected error; will retry")

    def start(self) -> list[asyncio.Task[None]]:
        """The polling task, if there is a file to follow."""
        if self.path is None:
            return []
        return [asyncio.get_running_loop().create_task(self.run(), name="dry-run-file")]

    def describe(self) -> dict[str, Any]:
        """For /readyz."""
        return {
            "selectors": list(self.policy.dry_run.described),
            "file": str(self.path) if self.path else None,
            "file_error": self.last_error,
        }
