"""The package layering holds: no import cycles (typing-only imports included), each room
imports only the rooms `ROOMS` lets it (so protocol/ and authz/ never import proxy/, certs/
never does, and proxy/'s rooms form the layers docs/design.md draws), every module imports on
its own in a fresh interpreter (no hidden import-order needs), and only as
`aclgate.<folder>...`: no top-level `proxy`, `protocol`, ... is ever imported."""

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
    for path in sorted((REPO / "aclgate").glob("*.py")):  # the package's own modules
        out["aclgate" if path.stem == "__init__" else f"aclgate.{path.stem}"] = path
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = ["aclgate", *path.relative_to(REPO).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(path: Path, typing: bool = True) -> set[str]:
    """Modules of ours that `path` imports, at any depth (lazy imports too); with `typing`
    False, not those only imported for type checking."""
    tree = ast.parse(path.read_text())
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            typing_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found: set[str] = set()
    for node in ast.walk(tree):
        if not typing and id(node) in typing_only:
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


GRAPH = {module: _imports(path, typing=False) - {module} for module, path in MODULES.items()}


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


_CORE = {"aclgate.authz", "aclgate.protocol", "aclgate.files"}
#: room -> the rooms it may import (typing-only imports included). A room is a folder of
#: aclgate (authz, protocol, certs, pipeline), a folder of proxy/ (aclstore/, audit/, ...), or
#: proxy/'s own top modules (config, httpclient, rdkafka: "aclgate.proxy"), which any proxy
#: room may use. Layers, bottom up: the pure core; proxy's top; ops; security, upstream,
#: aclstore; audit; listen; process, demo; cli.
ROOMS: dict[str, set[str]] = {
    "aclgate": set(),  # the package's __init__: its version
    "aclgate.__main__": {"aclgate.proxy.cli"},  # `python -m aclgate`
    "aclgate.files": set(),
    "aclgate.native": set(),  # which hot modules are compiled (read by setup.py too)
    "aclgate.authz": set(),
    "aclgate.protocol": {"aclgate.authz"},
    "aclgate.certs": {"aclgate.files"},
    "aclgate.pipeline": {"aclgate.authz"},
    "aclgate.proxy": _CORE,
    "aclgate.proxy.ops": _CORE,
    "aclgate.proxy.security": _CORE | {"aclgate.proxy", "aclgate.proxy.ops"},
    "aclgate.proxy.upstream": _CORE | {"aclgate.proxy", "aclgate.proxy.ops", "aclgate.proxy.security"},
    "aclgate.proxy.aclstore": _CORE | {"aclgate.proxy", "aclgate.proxy.ops"},
    # "aclgate": its version, for OCSF lines' metadata.product.version
    "aclgate.proxy.audit": _CORE | {
        "aclgate", "aclgate.proxy", "aclgate.proxy.ops", "aclgate.proxy.aclstore",
    },
    "aclgate.proxy.listen": _CORE | {
        "aclgate.proxy", "aclgate.proxy.ops", "aclgate.proxy.security", "aclgate.proxy.upstream",
        "aclgate.proxy.aclstore", "aclgate.proxy.audit", "aclgate.native",
    },
    "aclgate.proxy.process": _CORE | {
        "aclgate.proxy", "aclgate.proxy.ops", "aclgate.proxy.security", "aclgate.proxy.aclstore",
        "aclgate.proxy.audit", "aclgate.proxy.listen",
    },
    "aclgate.proxy.demo": _CORE | {"aclgate.proxy", "aclgate.proxy.ops"},
    "aclgate.proxy.cli": _CORE | {
        "aclgate", "aclgate.certs", "aclgate.proxy", "aclgate.proxy.ops", "aclgate.proxy.security",
        "aclgate.proxy.upstream", "aclgate.proxy.aclstore", "aclgate.proxy.audit",
        "aclgate.proxy.listen", "aclgate.proxy.process", "aclgate.proxy.demo", "aclgate.native",
    },
}  # fmt: skip


def _room(module: str) -> str:
    """`aclgate.proxy.audit.kafka` -> `aclgate.proxy.audit`; `aclgate.proxy.config` ->
    `aclgate.proxy`; `aclgate.protocol.enforce.base` -> `aclgate.protocol`."""
    parts = module.split(".")
    if parts[:2] == ["aclgate", "proxy"] and len(parts) > 2:
        inner = ".".join(parts[:3])
        return inner if inner in ROOMS else "aclgate.proxy"
    if len(parts) == 2 and parts[1] not in FOLDERS:
        return module  # aclgate.files, aclgate.__main__
    return ".".join(parts[:2])


def _room_imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        room = _room(module)
        found.setdefault(room, set()).update(
            _room(i) for i in _imports(path, typing=True) if _room(i) != room
        )
    return found


def _violations(rooms: dict[str, set[str]]) -> dict[str, list[str]]:
    extra = {room: sorted(used - ROOMS.get(room, set())) for room, used in rooms.items()}
    return {room: used for room, used in extra.items() if used}


def test_every_room_imports_only_the_rooms_it_may():
    rooms = _room_imports()
    assert set(rooms) <= set(ROOMS), f"a room the rules do not name: {set(rooms) - set(ROOMS)}"
    assert _violations(rooms) == {}


def test_the_room_rules_are_layers():
    """The rules themselves allow no cycle between rooms."""
    seen: list[str] = []

    def visit(room: str, path: tuple[str, ...]) -> None:
        assert room not in path, f"the rules allow a cycle: {' -> '.join((*path, room))}"
        if room in seen:
            return
        for allowed in ROOMS[room]:
            visit(allowed, (*path, room))
        seen.append(room)

    for room in ROOMS:
        visit(room, ())


def test_the_room_check_can_fail():
    """ops/ importing listen/ (say, metrics reaching for the server) is a violation."""
    rooms = _room_imports()
    rooms["aclgate.proxy.ops"] = rooms["aclgate.proxy.ops"] | {"aclgate.proxy.listen"}
    assert _violations(rooms) == {"aclgate.proxy.ops": ["aclgate.proxy.listen"]}


def test_no_typing_only_cycles():
    """`if TYPE_CHECKING:` imports count too: a module may not name, even for its types, one
    that imports it."""
    full = {module: _imports(path, typing=True) - {module} for module, path in MODULES.items()}
    saved = dict(GRAPH)
    GRAPH.clear()
    GRAPH.update(full)
    try:
        assert _cycles() == []
    finally:
        GRAPH.clear()
        GRAPH.update(saved)


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
