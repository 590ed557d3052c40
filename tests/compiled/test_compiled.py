"""The compiled hot path (aclgate/native.py, docs/design.md "The compiled hot path"): every hot
module compiles with mypyc, and the compiled build passes the sans-IO suites and real clients
through a running proxy, as the pure-Python modules do in the rest of `make test`.

The build is a copy of this checkout (bench/compiled.py; ~45 s, cached in .cache/compiled by
the sources' content), so the checkout's own .py files stay what the rest of the suite imports.
In it, the suites run in their own pytest process, less the tests marked `pure_python` (they
patch module constants or methods, which compiled code binds at compile time; they run in
the pure-Python suite).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aclgate.native import HOT_MODULES
from bench.compiled import compiled_tree, tree_env

pytestmark = pytest.mark.slow

#: what runs again on the compiled build: the sans-IO session, handlers and authorizer
#: (tests/protocol, tests/enforce, tests/authz; real clients against tansu among them), and
#: real clients of every library through `aclgate serve` (tests/proxy/test_clients.py)
SUITES = ("tests/protocol", "tests/enforce", "tests/authz", "tests/proxy/test_clients.py")


def _env() -> dict[str, str]:
    # tests/conftest.py fails the run unless the hot path it imports is the compiled one
    env = tree_env(PYTHONDONTWRITEBYTECODE="1", ACLGATE_EXPECT_COMPILED="1")
    return {k: v for k, v in env.items() if not k.startswith("PYTEST_")}


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compiled_tree(tmp_path_factory.mktemp("compiled") / "tree")


def test_every_hot_module_loads_compiled(tree: Path) -> None:
    script = (
        "import importlib, json\n"
        "from aclgate.native import HOT_MODULES, describe\n"
        "print(json.dumps([describe()] + [importlib.import_module(m).__file__ for m in HOT_MODULES]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tree, env=_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    described, *files = json.loads(done.stdout)
    assert described == f"compiled hot path (mypyc, {len(HOT_MODULES)} modules)"
    for name, file in zip(HOT_MODULES, files, strict=True):
        assert file.startswith(str(tree)) and file.endswith(".so"), (name, file)
    version = subprocess.run(
        [sys.executable, "-m", "aclgate", "--version"],
        cwd=tree, env=_env(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "compiled hot path (mypyc" in version.stdout


def test_the_suites_pass_on_the_compiled_build(tree: Path) -> None:
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
            "-m", "not kafka and not spark and not pure_python and not faults",
            *SUITES,
        ],
        cwd=tree, env=_env(), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    tail = done.stdout[-6000:]
    assert done.returncode == 0, tail
    summary = tail.strip().splitlines()[-1]
    assert "failed" not in summary and "error" not in summary, summary
    # all of them ran (1,900 and more when this was written), not a stray few
    passed = int(summary.split(" passed")[0].split()[-1])
    assert passed > 1500, summary
