"""setuptools' hook for the optional compiled hot path; everything else is in pyproject.toml.

    ACLGATE_MYPYC=1 pip install --no-build-isolation .    # or: make wheel-compiled

compiles aclgate/native.py's HOT_MODULES with mypyc (docs/design.md, "The compiled hot
path"). Without ACLGATE_MYPYC=1 the build is pure Python, as before. mypyc type-checks the
modules against aclgate's dependencies, so a compiled build runs without build isolation, in
an environment where the dependencies and mypy (the `dev` extra) are installed, with a C
compiler and Python's headers.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent


def _native() -> ModuleType:
    """aclgate/native.py, read without importing aclgate (not installed yet)."""
    spec = importlib.util.spec_from_file_location("_aclgate_native", HERE / "aclgate/native.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ext_modules() -> list[Extension]:
    if os.environ.get("ACLGATE_MYPYC", "") != "1":
        return []
    from mypyc.build import mypycify

    native = _native()
    os.chdir(HERE)  # mypyc names modules by their path from here (aclgate/...)
    return mypycify(
        ["--no-warn-unused-configs", *native.source_paths()],
        opt_level="3",
        group_name=native.GROUP,
    )


setup(ext_modules=ext_modules())
