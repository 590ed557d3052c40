"""The IO layer handles every effect: `ClientConnection.perform`'s `match` ends in
`assert_never`, so an effect added to protocol/effects.py and not handled there fails
`make lint` (mypy). Proved by type-checking perform's own match against the effect union
plus one new effect: mypy must reject it, and accept it without the new one."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from aclgate.proxy.listen import connection

REPO = Path(__file__).resolve().parents[2]

HEADER = """\
from __future__ import annotations
from dataclasses import dataclass
from typing import Any, assert_never
from aclgate.protocol.effects import *  # noqa: F403
from aclgate.protocol.effects import Effect

@dataclass(frozen=True, slots=True)
class NewEffect:
    what: str

"""


def _checked(union: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    method = textwrap.dedent(inspect.getsource(connection.ClientConnection.perform))
    body = method.replace("def perform(self, token: int, effect: Effect)", f"def perform(self: Any, token: int, effect: {union}, BUSY: Any = None, asyncio: Any = None, functools: Any = None, log: Any = None, log_safe: Any = None)")  # fmt: skip
    assert body != method, "perform's signature changed: update this test"
    module = tmp_path / "perform_copy.py"
    module.write_text(HEADER + body)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent",
         "--ignore-missing-imports", str(module)],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip


@pytest.mark.slow
def test_a_new_effect_fails_the_type_check_until_handled(tmp_path):
    unhandled = _checked("Effect | NewEffect", tmp_path)
    assert unhandled.returncode != 0
    assert "assert_never" in unhandled.stdout and "NewEffect" in unhandled.stdout, unhandled.stdout
    handled = _checked("Effect", tmp_path)
    assert handled.returncode == 0, handled.stdout
