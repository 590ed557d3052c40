"""The tools the deploy/ artefacts are checked with, installed when missing.

systemd-analyze, promtool, debootstrap, podman and runc come from Debian's packages (systemd,
prometheus, debootstrap, podman, runc: apt-get, as root or through sudo); helm is built from its Go module into
.cache/deploy/bin (Go 1.26+, /usr/local/go/bin or PATH). Installs are serialised by a lock
file, as the two test workers may ask at once. A tool that cannot be had fails the test under
CI=true (never a skip), and skips it with the reason elsewhere.

    python -m tests.deploy.tools          install all of them (make deploy-tools)
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "deploy"
HELM_VERSION = "v3.19.0"
HELM = CACHE / "bin" / "helm"
#: tool -> the Debian package that has it
DEBIAN = {
    "systemd-analyze": "systemd",
    "promtool": "prometheus",
    "debootstrap": "debootstrap",
    # the OCI image's container runtime: podman, with runc where crun cannot start a container
    # (docs/deploy.md, "OCI image")
    "podman": "podman",
    "runc": "runc",
}


class Unavailable(Exception):
    """The tool could not be installed here (the message says why)."""


def _locked() -> int:
    CACHE.mkdir(parents=True, exist_ok=True)
    fd = os.open(CACHE / ".install.lock", os.O_CREAT | os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _as_root(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return cmd
    sudo = shutil.which("sudo")
    if sudo is None:
        raise Unavailable(f"not root and no sudo to run {' '.join(cmd)}")
    return [sudo, "-n", *cmd]


def _apt_install(package: str) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", package],
    ):
        done = subprocess.run(_as_root(cmd), capture_output=True, text=True, env=env, timeout=600)
        if done.returncode != 0:
            raise Unavailable(f"{' '.join(cmd)} failed: {done.stderr.strip()[-500:]}")


def _go() -> str:
    for candidate in (shutil.which("go"), "/usr/local/go/bin/go"):
        if candidate and Path(candidate).exists():
            return candidate
    raise Unavailable("helm is built from its Go module and Go is not installed (/usr/local/go)")


def _build_helm() -> None:
    env = {
        **os.environ,
        "GOBIN": str(HELM.parent),
        "GOPATH": str(CACHE / "go"),
        "GOMODCACHE": str(CACHE / "go" / "mod"),
        "GOFLAGS": "-modcacherw",
    }
    done = subprocess.run(
        [_go(), "install", f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    if done.returncode != 0:
        raise Unavailable(f"go install helm {HELM_VERSION} failed: {done.stderr.strip()[-500:]}")


def install(name: str) -> str:
    """The tool's path, installed first when missing; Unavailable when it cannot be."""
    if name == "helm":
        if not HELM.exists():
            fd = _locked()
            try:
                if not HELM.exists():
                    _build_helm()
            finally:
                os.close(fd)
        return str(HELM)
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if found:
        return found
    fd = _locked()
    try:
        found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
        if not found:
            _apt_install(DEBIAN[name])
            found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    finally:
        os.close(fd)
    if not found:
        raise Unavailable(f"{DEBIAN[name]} installed but {name} not found")
    return found


def unavailable(message: str) -> None:
    """Fail under CI (a missing tool must not pass as a skip), skip elsewhere."""
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def require(name: str) -> str:
    """install(name) for a test: its path, or the test fails (CI) or skips with why."""
    try:
        return install(name)
    except (Unavailable, subprocess.TimeoutExpired) as exc:
        unavailable(f"{name} is not available: {exc}")
        raise AssertionError("unreachable") from exc


def main() -> int:
    for name in ("systemd-analyze", "promtool", "debootstrap", "podman", "runc", "helm"):
        print(f"{name}: {install(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
