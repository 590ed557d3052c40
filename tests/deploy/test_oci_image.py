"""deploy/oci/build.py: the image is built here, from Debian's packages and the wheel, without
a registry, then inspected and run.

No container runtime runs on the test machine (docs/deploy.md, "OCI image":
there is no Docker daemon, and podman's crun may not set the container's rlimits), so
the image's own root filesystem is run with chroot, as its user (10001), with its entry point
and arguments, in front of a tansu broker, and the image's health check command is run the
same way: it passes once /readyz is 200 and fails before. The build needs root (debootstrap,
chroot); the base root filesystem and the dependency wheels are cached in .cache/deploy/oci
(first build about 3 minutes, then about 30 s).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.tools import REPO, require, unavailable
from tests.fixtures.ports import free_port_block
from tests.fixtures.wait import wait_until

BUILD = REPO / "deploy" / "oci" / "build.py"
#: what a build leaves behind if it is not cleaned out: compilers, make, pip, apt
BUILD_TOOLS = (
    "usr/bin/gcc",
    "usr/bin/cc",
    "usr/bin/make",
    "usr/bin/pip",
    "usr/bin/pip3",
    "usr/bin/apt",
    "usr/bin/apt-get",
    "opt/aclgate/bin/pip",
    "opt/aclgate/bin/pip3",
    "usr/share/python-wheels",
    "usr/lib/python3/dist-packages/pip",
)


class Image:
    """A built image: its OCI layout and the root filesystem its layer was made from."""

    def __init__(self, layout: Path, rootfs: Path) -> None:
        self.layout = layout
        self.rootfs = rootfs
        blobs = layout / "blobs" / "sha256"
        (entry,) = json.loads((layout / "index.json").read_text())["manifests"]
        self.manifest = json.loads((blobs / entry["digest"].split(":")[1]).read_text())
        self.config = json.loads(
            (blobs / self.manifest["config"]["digest"].split(":")[1]).read_text()
        )
        (layer,) = self.manifest["layers"]
        self.layer = blobs / layer["digest"].split(":")[1]
        self.ref = entry["annotations"]["org.opencontainers.image.ref.name"]


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    if os.geteuid() != 0:
        unavailable("deploy/oci/build.py needs root (debootstrap and chroot)")
    require("debootstrap")
    out = tmp_path_factory.mktemp("oci")
    done = subprocess.run(
        [sys.executable, str(BUILD), "--out", str(out / "layout"), "--compress-level", "1",
         "--keep-rootfs", str(out / "rootfs")],
        capture_output=True, text=True, timeout=1200, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return Image(out / "layout", out / "rootfs")


def test_the_layout_is_a_valid_oci_image(image: Image) -> None:
    assert json.loads((image.layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    data = image.layer.read_bytes()
    assert hashlib.sha256(data).hexdigest() == image.layer.name
    diff_id = "sha256:" + hashlib.sha256(gzip.decompress(data)).hexdigest()
    assert image.config["rootfs"]["diff_ids"] == [diff_id]
    assert image.manifest["layers"][0]["size"] == len(data)
    assert image.ref.startswith("aclgate:")


def _settings(image: Image) -> dict[str, Any]:
    with open(image.rootfs / "etc/aclgate/aclgate.toml", "rb") as fh:
        return tomllib.load(fh)


def test_the_config_runs_aclgate_as_a_user_with_a_readyz_health_check(image: Image) -> None:
    config = image.config["config"]
    uid = int(config["User"].split(":")[0])
    assert uid != 0
    assert f"aclgate:x:{uid}:" in (image.rootfs / "etc/passwd").read_text()
    assert (image.rootfs / "var/lib/aclgate").stat().st_uid == uid
    assert config["Entrypoint"] == ["/opt/aclgate/bin/aclgate"]
    assert config["Cmd"] == ["serve", "--config", "/etc/aclgate/aclgate.toml"]
    settings = _settings(image)
    metrics_port = settings["metrics_listen"].rsplit(":", 1)[1]
    listen_port = settings["listen"].rsplit(":", 1)[1]
    check = " ".join(config["Healthcheck"]["Test"])
    assert f"http://127.0.0.1:{metrics_port}/readyz" in check
    assert {f"{metrics_port}/tcp", f"{listen_port}/tcp"} <= set(config["ExposedPorts"])


def test_no_build_tools_in_the_layer(image: Image) -> None:
    with tarfile.open(image.layer) as tar:
        names = set(tar.getnames())
    assert "opt/aclgate/bin/aclgate" in names and "usr/bin/python3.11" in names
    left = [tool for tool in BUILD_TOOLS if tool in names]
    assert left == []
    assert not [n for n in names if "/site-packages/pip/" in n or "/site-packages/setuptools/" in n]
    assert not [n for n in names if n.startswith(("dev/", "proc/", "sys/"))]


def _chroot(image: Image, *args: str, **kwargs: Any) -> subprocess.Popen[str]:
    """A command in the image's root filesystem, as the image's user, with its environment."""
    config = image.config["config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    return subprocess.Popen(
        ["chroot", f"--userspec={config['User']}", str(image.rootfs), *args],
        env=env, text=True, **kwargs,
    )  # fmt: skip


def test_the_image_serves_and_its_health_check_follows_readyz(
    image: Image, tansu: Any, tmp_path: Path
) -> None:
    config = image.config["config"]
    port = free_port_block(3)
    image_port = _settings(image)["metrics_listen"].rsplit(":", 1)[1]
    check = [
        a.replace(f":{image_port}/", f":{port + 1}/") for a in config["Healthcheck"]["Test"][1:]
    ]
    assert check != config["Healthcheck"]["Test"][1:]

    def healthy() -> bool:
        with _chroot(image, *check, stderr=subprocess.DEVNULL) as probe:
            return probe.wait(timeout=10) == 0

    assert not healthy()  # nothing serves yet
    flags = ["--listen", f"127.0.0.1:{port}", "--metrics-listen", f"127.0.0.1:{port + 1}",
             "--broker-ports", f"{port + 2}-{port + 2}", "--upstream", tansu.bootstrap]  # fmt: skip
    log = (tmp_path / "serve.log").open("w")
    with _chroot(
        image, *config["Entrypoint"], *config["Cmd"], *flags, stdout=log, stderr=log
    ) as proc:
        try:
            wait_until(healthy, timeout=30, what="the image's health check")
        finally:
            proc.terminate()
            assert proc.wait(timeout=30) == 0, (tmp_path / "serve.log").read_text()
    assert "listening on 127.0.0.1" in (tmp_path / "serve.log").read_text()
