"""The wheel installs aclgate as `aclgate.*` only: every module of the tree is in it, it
claims no top-level name but `aclgate`, and it imports and runs from a fresh venv."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("proxy", "protocol", "authz", "certs", "pipeline")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # built from a copy of what the wheel is made of: an in-tree build would leave build/ in
    # the checkout, and files that linger there (a module since deleted) would be packaged
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, source / name)
    for folder in ("aclgate", *FOLDERS):
        shutil.copytree(REPO / folder, source / folder, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(out), str(source)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (found,) = out.glob("aclgate-*.whl")
    return found


def _tree_modules() -> set[str]:
    return {
        "/".join(("aclgate", *path.relative_to(REPO).parts))
        for folder in FOLDERS
        for path in (REPO / folder).rglob("*.py")
    } | {"aclgate/__init__.py", "aclgate/__main__.py"}


def test_the_wheel_holds_every_module_under_aclgate_and_nothing_else(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert archive.read(top_level).decode().split() == ["aclgate"]
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"aclgate"}
    modules = {name for name in names if name.endswith(".py")}
    assert _tree_modules() - modules == set(), "pyproject.toml [tool.setuptools] packages"
    assert "aclgate/protocol/py.typed" in names


def test_the_wheel_imports_and_runs_from_a_fresh_venv(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
    )  # fmt: skip
    installed = {p.name for p in site.iterdir()}
    assert "aclgate" in installed
    assert installed.isdisjoint(FOLDERS), installed
    # the runtime dependencies come from this test environment's site-packages, put on the
    # path without processing its .pth files (so the checkout's editable install stays out)
    env = {"PYTHONPATH": sysconfig.get_paths()["purelib"], "PATH": "/usr/bin:/bin"}
    probe = (
        "import importlib.util, aclgate.protocol.session, aclgate.proxy.cli; "
        "print(aclgate.protocol.session.__file__); "
        "print([n for n in ('proxy', 'protocol', 'authz', 'certs', 'pipeline') "
        "if importlib.util.find_spec(n)])"
    )
    run = subprocess.run(
        [str(python), "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    where, bare = run.stdout.splitlines()
    assert where.startswith(str(site)) and bare == "[]"
    for command in (
        [str(python), "-m", "aclgate", "--version"],
        [str(env_dir / "bin" / "aclgate"), "--version"],
    ):
        out = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0 and out.stdout.strip().startswith("aclgate "), out.stderr
