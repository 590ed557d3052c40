"""Run the real `aclgate` console script in a subprocess, as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ACLGATE = str(Path(sys.executable).parent / "aclgate")


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`aclgate ARGS...`"""
    return subprocess.run(
        [ACLGATE, *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


def aclgate(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`aclgate acls ARGS...`"""
    return run("acls", *args, stdin=stdin)
