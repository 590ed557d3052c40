"""The package layering holds: no import cycles, protocol/ and authz/ never import proxy/,
every module imports on its own in a fresh interpreter (no hidden import-order needs), and
only as `aclgate.<folder>...`: no top-level `proxy`, `protocol`, ... is ever imported."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("proxy", "protocol", "authz", "certs", "pipeline")
PACKAGES = tuple(f"aclgate.{folder}" for folder in FOLDERS)
PURE = ("aclgate.protocol", "aclgate.authz")  # sans-IO: never the IO layer


def _package(module: str) -> str:
    """`aclgate.protocol.session` -> `aclgate.protocol`."""
    return ".".join(module.split(".")[:2])


def _modules() -> dict[str, Path]:
    out = {}
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = ["aclgate", *path.relative_to(REPO).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    """Modules of ours that `path` imports, at any depth (lazy imports too), except those
    only imported for type checking."""
    tree = ast.parse(path.read_text())
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            typing_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.ImportFrom):
            raise AssertionError(f"{path}: relative import; aclgate imports `aclgate.` names")
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


GRAPH = {module: _imports(path) - {module} for module, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert _cycles() == []


def test_the_cycle_check_can_fail():
    GRAPH["aclgate.authz.model"].add("aclgate.authz.authorizer")  # authorizer imports model
    try:
        assert _cycles()
    finally:
        GRAPH["aclgate.authz.model"].discard("aclgate.authz.authorizer")


def test_protocol_and_authz_never_import_the_io_layer():
    offenders = {
        module: sorted(i for i in imports if _package(i) == "aclgate.proxy")
        for module, imports in GRAPH.items()
        if _package(module) in PURE
    }
    assert {m: i for m, i in offenders.items() if i} == {}


def test_every_module_imports_alone_in_a_fresh_interpreter():
    """One interpreter, our packages forgotten before each import: a module that only
    imports after another one was imported first fails here."""
    script = (
        "import importlib, sys, traceback\n"
        f"folders = {FOLDERS!r}\n"
        "failed = []\n"
        "for name in sys.argv[1:]:\n"
        "    for loaded in [m for m in sys.modules if m.startswith('aclgate.')]:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception:\n"
        "        failed.append(name + ': ' + traceback.format_exc(limit=3))\n"
        "    bare = sorted(m for m in sys.modules if m.split('.')[0] in folders)\n"
        "    if bare:\n"
        "        failed.append(f'{name}: imported top-level {bare}, not aclgate.*')\n"
        "print('\\n'.join(failed))\n"
        "sys.exit(1 if failed else 0)\n"
    )
    names = [m for m in MODULES if not m.endswith("__main__")]
    result = subprocess.run(
        [sys.executable, "-c", script, *names],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
