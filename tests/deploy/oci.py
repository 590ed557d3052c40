"""The OCI image (deploy/oci/build.py) built once per test session, and podman with it loaded,
for every test of tests/deploy/ that runs it (the fixtures `image` and `podman` in
tests/deploy/conftest.py): test_oci_image.py (the image's own settings, a tansu broker) and
test_example_toml.py (examples/aclgate.toml, a SASL_SSL Apache Kafka).

Which `podman run` flags start a container here is found by trying them in turn (docs/deploy.md,
"OCI image": on the test machine podman's defaults do not, crun refuses the cgroup layout and
podman asks for more open files than the machine allows, so it takes `--runtime runc` and
limits within the machine's); `Podman.flags` is None where none does, and `Podman.failed` says
why for each.

The build needs root (debootstrap, chroot); the base root filesystem and the dependency wheels
are cached in .cache/deploy/oci (first build about 3 minutes, then about 30 s).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.deploy.tools import REPO, Unavailable, install, require, unavailable

BUILD = REPO / "deploy" / "oci" / "build.py"


class Image:
    """A built image: its OCI layout and the root filesystem its layer was made from."""

    def __init__(self, layout: Path, rootfs: Path, archive: Path) -> None:
        self.layout = layout
        self.rootfs = rootfs
        self.archive = archive  # the same image for `docker load`/`podman load`
        blobs = layout / "blobs" / "sha256"
        (entry,) = json.loads((layout / "index.json").read_text())["manifests"]
        self.manifest = json.loads((blobs / entry["digest"].split(":")[1]).read_text())
        self.config = json.loads(
            (blobs / self.manifest["config"]["digest"].split(":")[1]).read_text()
        )
        (layer,) = self.manifest["layers"]
        self.layer = blobs / layer["digest"].split(":")[1]
        self.ref = entry["annotations"]["org.opencontainers.image.ref.name"]

    @property
    def uid(self) -> int:
        """The user the image runs as (its config's User, uid:gid)."""
        return int(self.config["config"]["User"].split(":")[0])


def build_image(out: Path) -> Image:
    """deploy/oci/build.py into `out` (level-1 compression, the root filesystem kept, and the
    docker archive); fails (CI) or skips where it cannot run."""
    if os.geteuid() != 0:
        unavailable("deploy/oci/build.py needs root (debootstrap and chroot)")
    require("debootstrap")
    done = subprocess.run(
        [sys.executable, str(BUILD), "--out", str(out / "layout"), "--compress-level", "1",
         "--keep-rootfs", str(out / "rootfs"), "--docker-archive", str(out / "image.tar")],
        capture_output=True, text=True, timeout=1200, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return Image(out / "layout", out / "rootfs", out / "image.tar")


def _hard_limit(kind: int, most: int) -> int:
    """This process's hard limit, at most `most`: what a container may be given here."""
    hard = resource.getrlimit(kind)[1]
    return most if hard == resource.RLIM_INFINITY or hard > most else hard


@dataclass
class Podman:
    """podman with its own image store in the test's temporary directory (the machine's is left
    alone) and the image loaded into it; `flags` start a container here, None when none did
    (`failed` says how each attempt failed)."""

    command: list[str]
    image: str = ""
    flags: list[str] | None = None
    #: the host's address as the containers see it (host.containers.internal)
    host_address: str = ""
    failed: list[str] = field(default_factory=list)

    def __call__(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.command, *args], capture_output=True, text=True, timeout=timeout
        )

    def candidates(self, runc: str) -> list[list[str]]:
        """`podman run` flags to try, the plainest first. podman asks for 1,048,576 open files
        (and, once any --ulimit is given, as many processes) whatever the machine allows, and
        may not raise a limit where the machine is itself a container; crun (podman's default
        runtime) refuses cgroup v1 with controllers on the v2 hierarchy, runc does not."""
        files = _hard_limit(resource.RLIMIT_NOFILE, int(Path("/proc/sys/fs/nr_open").read_text()))
        procs = _hard_limit(
            resource.RLIMIT_NPROC, int(Path("/proc/sys/kernel/pid_max").read_text())
        )
        limits = ["--ulimit", f"nofile={files}:{files}", "--ulimit", f"nproc={procs}:{procs}"]
        return [[], limits, ["--runtime", runc, *limits]]

    def describe(self) -> str:
        assert self.flags is not None
        return " ".join(["podman run", *self.flags])


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip() and "level=" not in line]
    return lines[-1] if lines else text.strip()[-300:]


def podman_with(image: Image, store: Path) -> Iterator[Podman]:
    """podman and runc (installed when missing: a failed install fails the test under CI),
    the image loaded from its docker archive (which keeps its health check), and the first
    `podman run` flags with which a container from it starts here (`cat /etc/hosts`, which
    also tells the host's address as the containers see it). Everything is removed after."""
    # podman refuses a runroot path over 50 characters (pytest-xdist's temporary directories
    # are longer): a short one of its own
    runroot = Path(tempfile.mkdtemp(prefix="aclgate-podman-"))
    try:
        found = Podman([install("podman"), "--root", str(store / "root"),
                        "--runroot", str(runroot)])  # fmt: skip
        runc = install("runc")
    except (Unavailable, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(runroot, ignore_errors=True)
        if os.environ.get("CI") == "true":
            pytest.fail(f"podman or runc is not available: {exc}")
        yield Podman([], failed=[f"podman or runc is not available: {exc}"])
        return
    try:
        loaded = found("load", "-q", "-i", str(image.archive), timeout=600)
        assert loaded.returncode == 0, loaded.stderr
        found.image = loaded.stdout.strip().rsplit(" ", 1)[-1]  # Loaded image: localhost/...
        for flags in found.candidates(runc):
            tried = found("run", "--rm", *flags, "--entrypoint", "/bin/cat", found.image,
                          "/etc/hosts")  # fmt: skip
            if tried.returncode == 0:
                hosts = [line.split() for line in tried.stdout.splitlines()]
                (found.host_address,) = [h[0] for h in hosts if "host.containers.internal" in h]
                found.flags = flags
                break
            found.failed.append(f"{' '.join(['podman run', *flags])}: {_last_line(tried.stderr)}")
        yield found
    finally:
        found("rm", "--all", "--force")
        found("rmi", "--all", "--force")
        shutil.rmtree(store, ignore_errors=True)
        shutil.rmtree(runroot, ignore_errors=True)


def say(capsys: pytest.CaptureFixture[str], who: str, text: str) -> None:
    """A line in the test run's output whatever its capture (which way the image ran)."""
    with capsys.disabled():
        print(f"\n[{who}] {text}", flush=True)


def http_status(url: str) -> int:
    """The HTTP status `url` answers with, 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=3) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0
