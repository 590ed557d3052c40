"""The compiled hot path (issue 24; docs/design.md, "The compiled hot path").

What aclgate adds over a bare relay is Python executing Python (docs/bench.md, "Per-request
profile"), so the modules every Produce, Fetch and Metadata request runs through can be
compiled to C extension modules with mypyc: the same source, already strictly typed, with no
second implementation to keep in step. The pure-Python modules stay the fallback: a build
without a C compiler or without `ACLGATE_MYPYC=1` installs them alone, and `make test` tests
both (tests/compiled).

    ACLGATE_MYPYC=1 pip install --no-build-isolation .   # setup.py compiles HOT_MODULES

Only the hot modules are compiled: the others run a few times per connection or per admin
request, where compiling buys nothing and costs build time. This module is read by setup.py
at build time, so it imports nothing of aclgate's.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util

#: the modules a Produce, Fetch or Metadata request and its answer run through (the
#: callgrind profile of bench/hotpath_cost.py), compiled together by mypyc (calls between
#: them become C calls). Of proxy/'s observers only the counters of every request are
#: (proxy/ops/hotcounts.py, strictly typed for it); the rest of the metrics module and the
#: decision sink are not: compiled, they ran *more* instructions (their loosely typed code
#: becomes generic C-API calls), and AuthContext.check counts most decisions itself.
HOT_MODULES: tuple[str, ...] = (
    "aclgate.protocol.session",
    "aclgate.protocol.framing",
    "aclgate.protocol.header",
    "aclgate.protocol.codec",
    "aclgate.protocol.answerwalk",
    "aclgate.protocol.routing",
    "aclgate.protocol.enforce.peek",
    "aclgate.protocol.enforce.data",
    "aclgate.protocol.enforce.base",
    "aclgate.protocol.enforce.context",
    "aclgate.protocol.enforce.fetchpeek",
    "aclgate.protocol.enforce.fetchsessions",
    "aclgate.protocol.enforce.metadata",
    "aclgate.protocol.enforce.topics",
    "aclgate.authz.authorizer",
    "aclgate.authz.index",
    "aclgate.authz.cache",
    "aclgate.authz.byresourcetype",
    "aclgate.authz.snapshot",
    "aclgate.proxy.ops.hotcounts",
)

#: the shared library mypyc builds the group into (inside the package: aclgate claims no
#: top-level module name, compiled or not)
GROUP = "aclgate.native"


def source_paths() -> list[str]:
    """HOT_MODULES as paths relative to the repository root (through the `aclgate/` links)."""
    return [name.replace(".", "/") + ".py" for name in HOT_MODULES]


def compiled_modules() -> dict[str, bool]:
    """Per hot module, whether it would load as a compiled extension (without importing it)."""
    out = {}
    for name in HOT_MODULES:
        spec = importlib.util.find_spec(name)
        origin = (spec.origin or "") if spec else ""
        out[name] = origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    return out


def describe() -> str:
    """One line for logs and `aclgate version`: which hot path this installation runs."""
    status = compiled_modules()
    done = sum(status.values())
    if done == len(status):
        return f"compiled hot path (mypyc, {done} modules)"
    if done == 0:
        return "pure-Python hot path (not compiled)"
    missing = ", ".join(name for name, ok in status.items() if not ok)
    return f"partly compiled hot path ({done} of {len(status)} modules; pure Python: {missing})"
