"""How a benchmark records its results: the provenance line and the files in bench/results/.

Every benchmark writes `<stem>.json` (the figures) and `<stem>.md` (the same, for people),
and says which code it measured: the commit, and whether proxy/ or protocol/ had uncommitted
changes when it started (bench.latency.environment()).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def measured_code(env: dict[str, Any]) -> str:
    """ "at commit abc1234" (+ a warning when the measured code was not committed)."""
    commit = (env.get("git_commit") or "?")[:7]
    dirty = (
        " (proxy/ or protocol/ had uncommitted changes)"
        if env.get("git_dirty_measured_code")
        else ""
    )
    return f"at commit {commit}{dirty}"


def write_results(
    out: Path, stem: str, data: dict[str, Any], markdown: str, indent: int = 2
) -> None:
    """bench/results/<stem>.json and .md (or wherever `out` is)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(data, indent=indent) + "\n")
    (out / f"{stem}.md").write_text(markdown)


@contextlib.contextmanager
def commit_worktree(rev: str, path: Path) -> Iterator[Path]:
    """A git worktree of this checkout at `rev`, at `path`, removed on the way out: the code a
    benchmark's `--before REV` measures beside today's (its aclgate package imported first
    through PYTHONPATH; bench.latency, bench.fetch_timing, bench.groups)."""
    subprocess.run(
        ["git", "worktree", "add", "-f", "--detach", str(path), rev],
        cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip
    try:
        yield path
    finally:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(path)],
            cwd=ROOT, check=False, capture_output=True,
        )  # fmt: skip
