"""A copy of this checkout with the hot path compiled by mypyc (aclgate/native.py), for the
tests that run the compiled modules (tests/compiled) and the benchmarks that measure them
(`bench.latency --compiled`, `bench.instructions --compiled`).

    python -m bench.compiled DEST      # the copy at DEST; prints how long the build took

The checkout itself is never compiled in place: its .py files must stay what `make test`
imports (an extension module next to a .py file wins the import). The extension modules are
built once per content of the sources mypyc reads (every module of aclgate, setup.py, the
Python and mypy versions) and kept in .cache/compiled/<digest>; a build takes 40-60 s here.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib.machinery
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mypy.version

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "compiled"
#: what setup.py's mypyc build reads: aclgate's packages (mypyc type-checks the hot modules
#: against everything they import) and the build files
SOURCES = ("aclgate", "protocol", "authz", "proxy", "certs", "pipeline")
BUILD_FILES = ("setup.py", "pyproject.toml", "README.md", "LICENSE")
SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)


def _checkout_files() -> list[str]:
    """The checkout's files as git sees them, uncommitted changes and new files included."""
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout  # fmt: skip
    return [name for name in out.decode().split("\0") if name and (ROOT / name).exists()]


def _digest(files: list[str]) -> str:
    h = hashlib.sha256()
    h.update(f"{sys.version} {mypy.version.__version__}".encode())
    for name in sorted(files):
        if name in BUILD_FILES or (name.split("/")[0] in SOURCES and name.endswith(".py")):
            h.update(name.encode() + b"\0" + (ROOT / name).read_bytes() + b"\0")
    return h.hexdigest()[:20]


def _copy(files: list[str], dest: Path) -> None:
    for name in files:
        src, out = ROOT / name, dest / name
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            out.symlink_to(src.readlink())
        else:
            shutil.copy2(src, out)


def build_extensions(files: list[str] | None = None) -> Path:
    """The compiled extension modules for the checkout as it is, laid out by their path in
    the tree (protocol/session.*.so, aclgate/native__mypyc.*.so): built, or from the cache."""
    files = files if files is not None else _checkout_files()
    cached = CACHE / _digest(files)
    CACHE.mkdir(parents=True, exist_ok=True)
    # one build at a time (make test's two workers may both want it): the second waits, then
    # finds the first one's build
    with (CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (cached / "done").exists():
            _build(files, cached)
            _prune(keep=cached)
    return cached


def _prune(keep: Path, most: int = 4) -> None:
    """The cache holds the newest `most` builds (a few MB each): every edit makes one."""
    builds = sorted(
        (p for p in CACHE.iterdir() if p.is_dir() and p != keep),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in builds[most - 1 :]:
        shutil.rmtree(old, ignore_errors=True)


def _build(files: list[str], cached: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="aclgate-mypyc-") as tmp:
        work = Path(tmp)
        _copy([f for f in files if f in BUILD_FILES or f.split("/")[0] in SOURCES], work)
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
            cwd=work, env=tree_env(ACLGATE_MYPYC="1"), capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(
                f"the mypyc build failed:\n{done.stdout[-4000:]}{done.stderr[-4000:]}"
            )
        shutil.rmtree(cached, ignore_errors=True)
        for so in work.rglob("*"):
            rel = so.relative_to(work)
            if so.name.endswith(SUFFIXES) and rel.parts[0] != "build":
                (cached / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(so, cached / rel)
        (cached / "done").write_text(f"{time.monotonic() - started:.0f} s\n")


def tree_env(**extra: str) -> dict[str, str]:
    """The environment of a process that runs the code of the tree it is started in (its
    working directory, first on sys.path): this one's, without PYTHONPATH, plus `extra`."""
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **extra}


def compiled_tree(dest: Path) -> Path:
    """A copy of the checkout (as it is now) at `dest`, with the hot path compiled in it."""
    files = _checkout_files()
    built = build_extensions(files)
    _copy(files, dest)
    for so in built.rglob("*"):
        if so.name.endswith(SUFFIXES):
            rel = so.relative_to(built)
            shutil.copy2(so, dest / rel)
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dest", type=Path, help="an empty or new directory")
    args = parser.parse_args()
    started = time.monotonic()
    compiled_tree(args.dest)
    done = subprocess.run(
        [sys.executable, "-c", "from aclgate.native import describe; print(describe())"],
        cwd=args.dest, env=tree_env(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    print(f"{args.dest}: {done.stdout.strip()} ({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
