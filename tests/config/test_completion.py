"""`aclgate completion bash|zsh`: scripts generated (shtab) from the same parsers the commands
use, so they offer every serve flag there is. The bash script is run in bash, as a shell would
on TAB."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aclgate.proxy.config import settings

REPO = Path(__file__).resolve().parents[2]


def script(shell: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "aclgate", "completion", shell],
        capture_output=True, text=True, check=True, cwd=REPO,
    ).stdout  # fmt: skip


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_the_script_names_every_serve_flag(shell):
    text = script(shell)
    for s in settings():
        assert s.flag in text, f"{s.flag} missing from the {shell} completion"
    assert "--config" in text


def complete(tmp_path: Path, line: str) -> list[str]:
    """What bash offers for TAB at the end of `line`, with the generated script loaded."""
    bash = shutil.which("bash")
    assert bash, "bash is needed to run the completion script"
    (tmp_path / "aclgate.bash").write_text(script("bash"))
    words = line.split(" ")
    program = f"""
source {tmp_path}/aclgate.bash
COMP_LINE={line!r}; COMP_POINT=${{#COMP_LINE}}
COMP_WORDS=({" ".join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}
_shtab_aclgate aclgate {words[-1]!r} {words[-2]!r}
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    out = subprocess.run([bash, "-c", program], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_bash_completes_commands_flags_and_choices(tmp_path):
    assert {"serve", "completion", "acls"} <= set(complete(tmp_path, "aclgate "))
    offered = complete(tmp_path, "aclgate serve --acl-s")
    assert {"--acl-store", "--acl-store-max-staleness-seconds"} <= set(offered)
    assert complete(tmp_path, "aclgate serve --acl-store ") == ["file", "kafka"]
    (tmp_path / "acls.json").write_text("{}")
    assert "acls.json" in complete(tmp_path, "aclgate serve --acl-file acl")
