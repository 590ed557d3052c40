"""The wheel installs aclgate as `aclgate.*` only: every module of the tree is in it, it
claims no top-level name but `aclgate`, and it imports and runs from a fresh venv: the
`aclgate` command on the venv's PATH, and the code samples of the docs that are meant to run
(README.md's "Install" says how)."""

from __future__ import annotations

import re
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


def test_the_extras_are_named_as_pyproject_names_them(wheel: Path) -> None:
    """`pip install 'aclgate[admin]'` (README.md, "Install") means what pyproject says."""
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(name).decode()
    extras = set(re.findall(r"^Provides-Extra: (\S+)$", metadata, re.MULTILINE))
    assert {"admin", "demo", "test", "pipeline", "dev", "bench"} <= extras, extras
    assert 'Requires-Dist: kafka-python==3.0.12; extra == "admin"' in metadata


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed (its dependencies: this environment's)."""
    env_dir = tmp_path_factory.mktemp("installed") / "venv"
    venv.create(env_dir, with_pip=True)
    subprocess.run(
        [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
         "--no-index", str(wheel)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return env_dir


def _outside_env(env_dir: Path) -> dict[str, str]:
    """The runtime dependencies come from this test environment's site-packages, put on the
    path without processing its .pth files (so the checkout's editable install stays out);
    PATH has the venv's bin first, as an activated venv or pipx's ~/.local/bin would."""
    return {
        "PYTHONPATH": sysconfig.get_paths()["purelib"],
        "PATH": f"{env_dir / 'bin'}:/usr/bin:/bin",
    }


def test_the_wheel_imports_and_runs_from_a_fresh_venv(installed: Path, tmp_path: Path) -> None:
    env_dir = installed
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
    )  # fmt: skip
    installed = {p.name for p in site.iterdir()}
    assert "aclgate" in installed
    assert installed.isdisjoint(FOLDERS), installed
    env = _outside_env(env_dir)
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
        ["aclgate", "--version"],  # found on PATH
    ):
        out = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0 and out.stdout.strip().startswith("aclgate "), out.stderr
    out = subprocess.run(
        ["aclgate", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert all(f"  {name} " in out.stdout for name in ("serve", "acls", "check", "demo"))
    # a user's mistake: one line, no traceback (tests/cli/test_no_traceback.py has them all)
    out = subprocess.run(
        ["aclgate", "chek"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert (out.returncode, out.stderr) == (
        2, "aclgate: error: unknown command 'chek'; did you mean check? (see `aclgate --help`)\n"
    )  # fmt: skip


#: the line before a ```python block of README.md or docs/ that is meant to run as it is
SAMPLE_MARK = "<!-- sample: runs"
SAMPLE = re.compile(r"^" + re.escape(SAMPLE_MARK) + r".*\n```python\n(.*?)^```$", re.M | re.S)


def doc_samples() -> list[tuple[str, str]]:
    """(document, code) of every marked sample."""
    found = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for n, match in enumerate(SAMPLE.finditer(doc.read_text()), 1):
            found.append((f"{doc.relative_to(REPO)}#{n}", match.group(1)))
    return found


def test_some_doc_samples_are_marked_to_run() -> None:
    """A mark left without its block (or a block without ```python) would run nothing."""
    marks = sum(
        doc.read_text().count(SAMPLE_MARK)
        for doc in [REPO / "README.md", *(REPO / "docs").glob("*.md")]
    )
    assert marks == len(doc_samples()) >= 1


@pytest.mark.parametrize(("doc", "code"), doc_samples(), ids=[d for d, _ in doc_samples()])
def test_a_doc_sample_runs_from_anywhere_with_the_installed_package(
    installed: Path, tmp_path: Path, doc: str, code: str
) -> None:
    """Run in an empty directory outside the checkout, next to an acls.json written by the
    installed `aclgate acls` (a sample may read one)."""
    env = _outside_env(installed)
    subprocess.run(
        ["aclgate", "acls", "--acl-file", "acls.json", "--add", "--allow-principal",
         "User:alice", "--operation", "Read", "--topic", "orders"],
        cwd=tmp_path, env=env, check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    (tmp_path / "sample.py").write_text(code)
    run = subprocess.run(
        [str(installed / "bin" / "python"), "sample.py"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, f"{doc}:\n{run.stderr}"
