"""deploy/oci/build.py: the image is built here, from Debian's packages and the wheel, without
a registry, then inspected and run.

The image is run as a container by podman (installed from Debian's packages when missing)
when a container starts on this machine: `podman load` of its docker archive, then `podman
run` with the image's entry point, user and health check, its ports published, in front of a
tansu broker. Which `podman run` flags start a container is found by trying them in turn
(docs/deploy.md, "OCI image": on the test machine podman's defaults do not, crun refuses the
cgroup layout and podman asks for more open files than the machine allows, so it takes
`--runtime runc` and limits within the machine's). Once one has started a container, the
image must serve in it or the test fails. Where none does, the image's root filesystem is run
with chroot instead, as its user (10001), with its entry point and arguments, and its health
check command the same way. The test prints which of the two ran, and why not the container.

The image and podman are the session's (tests/deploy/conftest.py, tests/deploy/oci.py), shared
with test_example_toml.py. The build needs root (debootstrap, chroot); the base root filesystem
and the dependency wheels are cached in .cache/deploy/oci (first build about 3 minutes, then
about 30 s).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import tarfile
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest

from aclgate.proxy.demo.embedded_broker import TansuBroker, api_versions_probe, free_port
from tests.deploy.oci import Image, Podman, http_status, say
from tests.fixtures.ports import free_port_block
from tests.fixtures.wait import wait_until

WHO = "test_oci_image"
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


def test_the_image_runs_the_compiled_hot_path(image: Image) -> None:
    """deploy/oci/build.py compiles the hot path by default (docs/design.md, "The compiled
    hot path"): every hot module is an extension module of the image's Python (3.11 of
    Debian), and aclgate says so (the serving tests below run it)."""
    from aclgate.native import HOT_MODULES

    site = next((image.rootfs / "opt/aclgate/lib").glob("python3*/site-packages"))
    for name in HOT_MODULES:
        *package, module = name.split(".")
        assert list(site.joinpath(*package).glob(f"{module}.cpython-311-*.so")), name
    proc = _chroot(image, "/opt/aclgate/bin/aclgate", "--version", stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert f"compiled hot path (mypyc, {len(HOT_MODULES)} modules)" in out, out


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
    image: Image,
    podman: Podman,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """In a container where one starts here (else from the root filesystem with chroot): the
    image's user, entry point and health check; /healthz and /readyz 200 once its cluster is
    up, the health check failing before and passing after."""
    if podman.flags is not None:
        request.node.user_properties.append(("ran", podman.describe()))
        say(capsys, WHO, f"the image ran as a container: {podman.describe()}"
             + "".join(f"\n  (failed first: {why})" for why in podman.failed))  # fmt: skip
        _serve_in_a_container(image, podman, tmp_path)
    else:
        request.node.user_properties.append(("ran", "chroot"))
        say(capsys, WHO, "no container starts here, the image's root filesystem ran with chroot:"
             + "".join(f"\n  {why}" for why in podman.failed))  # fmt: skip
        _serve_with_chroot(image, request.getfixturevalue("tansu"), tmp_path)


def _serve_in_a_container(image: Image, podman: Podman, tmp_path: Path) -> None:
    """The image's entry point and command (plus --upstream) in a container with the image's
    ports published on free loopback ports, its cluster started only once it serves."""
    assert podman.flags is not None
    settings = _settings(image)
    metrics_port = settings["metrics_listen"].rsplit(":", 1)[1]
    listen_port = settings["listen"].rsplit(":", 1)[1]
    port = free_port_block(2)
    upstream = free_port(podman.host_address)
    name = f"aclgate-test-{uuid.uuid4().hex[:8]}"
    started = podman(
        "run", "--detach", "--name", name, *podman.flags,
        "--publish", f"127.0.0.1:{port}:{listen_port}",
        "--publish", f"127.0.0.1:{port + 1}:{metrics_port}",
        podman.image, *image.config["config"]["Cmd"],
        "--upstream", f"{podman.host_address}:{upstream}", "--upstream-check-interval", "1",
    )  # fmt: skip
    assert started.returncode == 0, f"{podman.describe()} found working, yet: {started.stderr}"
    health = f"http://127.0.0.1:{port + 1}"

    def healthy() -> bool:
        return podman("healthcheck", "run", name, timeout=30).returncode == 0

    try:
        wait_until(lambda: http_status(f"{health}/healthz") == 200, timeout=60, what="/healthz")
        # serving, but no cluster yet: not ready, and the image's health check says so
        assert http_status(f"{health}/readyz") == 503
        assert not healthy()
        pid = podman("inspect", "--format", "{{.State.Pid}}", name).stdout.strip()
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        )
        uid = image.config["config"]["User"].split(":")[0]
        assert status["Uid"].split() == [uid] * 4 and uid != "0"
        assert status["NSpid"].split()[-1] == "1"  # the entry point is PID 1 of its namespace
        with TansuBroker(host=podman.host_address, port=upstream,
                         log_path=tmp_path / "tansu.log"):  # fmt: skip
            wait_until(healthy, timeout=60, interval=0.5, what="the image's health check")
            assert http_status(f"{health}/readyz") == 200
            assert http_status(f"{health}/healthz") == 200
            assert api_versions_probe("127.0.0.1", port, timeout=5)  # the client port
            stopped = podman("stop", "--time", "30", name, timeout=60)
            assert stopped.returncode == 0, stopped.stderr
        code = podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        logs = podman("logs", name)
        assert code == "0", logs.stdout + logs.stderr
        assert f"listening on 0.0.0.0:{listen_port}" in logs.stderr + logs.stdout
    finally:
        podman("rm", "--force", name)


def _serve_with_chroot(image: Image, tansu: Any, tmp_path: Path) -> None:
    """The image's root filesystem with chroot, as its user, its entry point and command (plus
    free ports and --upstream), and its health check command the same way."""
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
            assert http_status(f"http://127.0.0.1:{port + 1}/readyz") == 200
            assert http_status(f"http://127.0.0.1:{port + 1}/healthz") == 200
        finally:
            proc.terminate()
            assert proc.wait(timeout=30) == 0, (tmp_path / "serve.log").read_text()
    assert "listening on 127.0.0.1" in (tmp_path / "serve.log").read_text()
