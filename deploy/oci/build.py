"""Build aclgate's OCI image without a container registry or a container runtime.

The recipe: a Debian root filesystem from Debian's own packages (debootstrap, minbase variant,
plus python3), aclgate's wheel and its dependencies' wheels from PyPI installed into a venv at
/opt/aclgate inside it (by the root filesystem's own Python, in a chroot), then everything a
build needs removed again (pip, setuptools, python3-venv, apt), a non-root user (10001), and a
default configuration. The result is written as an OCI image layout (index.json, a manifest, a
config and one gzip'd tar layer), which `podman pull oci:DIR`, `skopeo copy oci:DIR ...` or any
registry client can take from there; --docker-archive also writes it for `docker load`.

Run as root (debootstrap and chroot need it), on Linux, with debootstrap installed:

    python3 deploy/oci/build.py --out build/oci            # or: make oci-image

The base root filesystem and the dependency wheels are cached under --cache (first build about
2-3 minutes, mostly debootstrap; later builds reuse them). docs/deploy.md says what is tested.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any, BinaryIO

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# python3-venv (and its pip and setuptools wheels) is only needed to make the venv; it is
# purged again before the layer is written, with apt.
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
BUILD_ONLY_PACKAGES = (
    "python3-venv",
    "python3.11-venv",
    "python3-pip-whl",
    "python3-setuptools-whl",
    "apt",
)
BUILD_ONLY_PATHS = (
    "tmp/wheels",
    "var/cache/apt",
    "var/lib/apt/lists",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/python-wheels",
)
# The Python of Debian bookworm: the ABI the dependency wheels are downloaded for.
PYTHON_VERSION = "3.11"
UID = GID = 10001
USER = "aclgate"
VENV = "/opt/aclgate"
# The image's default settings (deploy/oci/aclgate.toml) serve the health endpoints here;
# the health check asks it.
METRICS_PORT = 9404
PORTS = (9092, METRICS_PORT)
ARCHITECTURES = {"x86_64": ("amd64", "x86_64"), "aarch64": ("arm64", "aarch64")}


def run(*cmd: str, **kwargs: Any) -> None:
    """A command, echoed (a build is long: say what it is doing)."""
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kwargs)


def digest_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def base_rootfs(cache: Path, mirror: str) -> Path:
    """Debian minbase with python3, made once per package list and kept in the cache
    (renamed into place when complete, so an interrupted build is not reused)."""
    key = digest_of(f"{SUITE} {' '.join(BASE_PACKAGES)} {platform.machine()}")
    path = cache / f"base-{SUITE}-{key}"
    if (path / "usr/bin/python3").exists():
        return path
    if shutil.which("debootstrap") is None:
        raise SystemExit("deploy/oci/build.py needs debootstrap (apt-get install debootstrap)")
    partial = cache / f"{path.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    run(
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(BASE_PACKAGES)}",
        SUITE,
        str(partial),
        mirror,
    )
    partial.rename(path)
    return path


def dependency_wheels(cache: Path, pip_platform: str) -> Path:
    """Binary wheels of aclgate's dependencies (pyproject.toml) for the image's Python,
    whatever Python runs this script; cached per dependency list."""
    with open(ROOT / "pyproject.toml", "rb") as fh:
        deps = tomllib.load(fh)["project"]["dependencies"]
    path = cache / f"wheels-{digest_of(PYTHON_VERSION + pip_platform + repr(deps))}"
    if (path / ".complete").exists():
        return path
    path.mkdir(parents=True, exist_ok=True)
    platforms = [f"manylinux_2_{v}_{pip_platform}" for v in (36, 28, 17, 5)]
    platforms += [f"manylinux2014_{pip_platform}", "any"]
    abi = "cp" + PYTHON_VERSION.replace(".", "")
    run(
        sys.executable,
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "-q",
        "--only-binary=:all:",
        "--implementation",
        "cp",
        "--python-version",
        PYTHON_VERSION,
        *[arg for a in (abi, "abi3", "none") for arg in ("--abi", a)],
        *[arg for p in platforms for arg in ("--platform", p)],
        "-d",
        str(path),
        *deps,
    )
    (path / ".complete").touch()
    return path


def aclgate_wheel(into: Path, compiled: bool = True) -> Path:
    """aclgate's own wheel, from a copy of what it is made of (an in-tree build would leave
    build/ in the checkout, whose leftovers get packaged). `compiled`: with the hot path
    compiled by mypyc (setup.py, aclgate/native.py), built by this Python against the image's
    Python's minor version (the full C ABI holds within one: 3.11 here and in bookworm);
    else pure Python."""
    with open(ROOT / "pyproject.toml", "rb") as fh:
        packages = tomllib.load(fh)["tool"]["setuptools"]["packages"]
    folders = sorted({name.split(".")[1] for name in packages if "." in name})
    source = into / "source"
    source.mkdir(parents=True)
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    for folder in ("aclgate", *folders):
        shutil.copytree(
            ROOT / folder,
            source / folder,
            symlinks=True,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    # the setuptools pyproject.toml asks for, else pip fetches it (build isolation)
    try:
        from importlib.metadata import version

        recent = int(version("setuptools").split(".")[0]) >= 77
    except Exception:
        recent = False
    if compiled:
        if sys.version_info[:2] != tuple(int(p) for p in PYTHON_VERSION.split(".")[:2]):
            raise SystemExit(
                f"a compiled wheel needs Python {PYTHON_VERSION} to build it (this is "
                f"{platform.python_version()}); or build with --pure"
            )
        try:
            import mypyc  # noqa: F401  (mypy's compiler; the `dev` extra)
        except ImportError:
            raise SystemExit(
                "a compiled wheel needs mypy (pip install 'aclgate[dev]'); or build with --pure"
            ) from None
        recent = True  # mypyc type-checks against the installed dependencies: no isolation
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--disable-pip-version-check",
        "-q",
        "--no-deps",
        *(["--no-build-isolation"] if recent else []),
        "-w",
        str(into),
        str(source),
        env={**os.environ, "ACLGATE_MYPYC": "1" if compiled else "0"},
    )
    (wheel,) = into.glob("aclgate-*.whl")
    return wheel


def install(rootfs: Path, wheels: Path, wheel: Path) -> None:
    """aclgate into a venv inside the root filesystem, by its own Python; then the build's
    tools out again."""
    staged = rootfs / "tmp/wheels"
    shutil.copytree(wheels, staged, dirs_exist_ok=True)
    shutil.copy2(wheel, staged)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8", "HOME": "/root"}

    def chroot(*cmd: str) -> None:
        run("chroot", str(rootfs), *cmd, env=env)

    chroot("python3", "-m", "venv", VENV)
    chroot(
        f"{VENV}/bin/pip",
        "install",
        "--disable-pip-version-check",
        "-q",
        "--no-index",
        "--find-links",
        "/tmp/wheels",
        f"/tmp/wheels/{wheel.name}",
    )
    chroot(
        f"{VENV}/bin/pip",
        "uninstall",
        "--disable-pip-version-check",
        "-q",
        "-y",
        "pip",
        "setuptools",
    )
    installed = [
        p for p in BUILD_ONLY_PACKAGES if (rootfs / f"var/lib/dpkg/info/{p}.list").exists()
    ]
    installed += [
        p
        for p in BUILD_ONLY_PACKAGES
        if list((rootfs / "var/lib/dpkg/info").glob(f"{p}:*.list")) and p not in installed
    ]
    chroot("dpkg", "--purge", "--force-remove-essential", *installed)
    for rel in BUILD_ONLY_PATHS:
        target = rootfs / rel
        if target.is_dir():
            shutil.rmtree(target)
            if rel.startswith("var/"):
                target.mkdir()


def add_user_and_settings(rootfs: Path) -> None:
    """The non-root user, its writable directory and the image's default settings."""
    with open(rootfs / "etc/passwd", "a") as fh:
        fh.write(f"{USER}:x:{UID}:{GID}:aclgate:/var/lib/aclgate:/usr/sbin/nologin\n")
    with open(rootfs / "etc/group", "a") as fh:
        fh.write(f"{USER}:x:{GID}:\n")
    state = rootfs / "var/lib/aclgate"
    state.mkdir(parents=True, exist_ok=True)
    os.chown(state, UID, GID)
    state.chmod(0o750)
    (rootfs / "etc/aclgate").mkdir(exist_ok=True)
    shutil.copy(HERE / "aclgate.toml", rootfs / "etc/aclgate/aclgate.toml")


def image_config(arch: str, created: str, version: str) -> dict[str, Any]:
    """The OCI image config: non-root, aclgate as the entry point, the health check on
    /readyz (Docker's Healthcheck field, which podman and Docker read from an OCI config)."""
    probe = (
        "import sys, urllib.request\n"
        f"try: urllib.request.urlopen('http://127.0.0.1:{METRICS_PORT}/readyz', timeout=3)\n"
        "except Exception as e: sys.exit(f'not ready: {e}')"
    )
    second = 1_000_000_000
    return {
        "created": created,
        "architecture": arch,
        "os": "linux",
        "config": {
            "User": f"{UID}:{GID}",
            "Entrypoint": [f"{VENV}/bin/aclgate"],
            "Cmd": ["serve", "--config", "/etc/aclgate/aclgate.toml"],
            "Env": [f"PATH={VENV}/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C.UTF-8"],
            "WorkingDir": "/var/lib/aclgate",
            "ExposedPorts": {f"{p}/tcp": {} for p in PORTS},
            "StopSignal": "SIGTERM",
            "Healthcheck": {
                "Test": ["CMD", f"{VENV}/bin/python", "-c", probe],
                "Interval": 10 * second,
                "Timeout": 5 * second,
                "StartPeriod": 30 * second,
                "Retries": 3,
            },
            "Labels": {
                "org.opencontainers.image.title": "aclgate",
                "org.opencontainers.image.version": version,
                "org.opencontainers.image.licenses": "Apache-2.0",
            },
        },
        "rootfs": {"type": "layers", "diff_ids": []},
        "history": [{"created": created, "created_by": "deploy/oci/build.py"}],
    }


class _Hashing(io.RawIOBase):
    """A write-through file that hashes what passes (the layer's two digests in one pass)."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.sha.update(data)
        self.size += len(data)
        self.out.write(data)
        return len(data)


def write_layer(rootfs: Path, blobs: Path, level: int) -> tuple[str, str, int]:
    """The root filesystem as one gzip'd tar: (diff_id, digest, size). /dev, /proc, /sys are
    kept empty (the runtime provides them)."""
    tmp = blobs / "layer.tmp"
    with open(tmp, "wb") as raw:
        compressed = _Hashing(raw)
        with gzip.GzipFile(fileobj=compressed, mode="wb", compresslevel=level, mtime=0) as gz:
            plain = _Hashing(gz)  # type: ignore[arg-type]
            with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                for dirpath, dirnames, filenames in os.walk(rootfs):
                    dirnames.sort()
                    rel = os.path.relpath(dirpath, rootfs)
                    for name in sorted(dirnames) + sorted(filenames):
                        path = os.path.join(dirpath, name)
                        arc = name if rel == "." else f"{rel}/{name}"
                        if rel.split("/")[0] in ("dev", "proc", "sys") and rel != ".":
                            continue
                        tar.add(path, arcname=arc, recursive=False)
    digest = compressed.sha.hexdigest()
    tmp.rename(blobs / digest)
    return "sha256:" + plain.sha.hexdigest(), "sha256:" + digest, compressed.size


def write_blob(blobs: Path, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return "sha256:" + digest, len(data)


def write_layout(rootfs: Path, out: Path, tag: str, version: str, level: int) -> None:
    """An OCI image layout at `out`: oci-layout, index.json and blobs/sha256/."""
    if out.exists():
        shutil.rmtree(out)
    blobs = out / "blobs/sha256"
    blobs.mkdir(parents=True)
    arch = ARCHITECTURES[platform.machine()][0]
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    diff_id, layer_digest, layer_size = write_layer(rootfs, blobs, level)
    config = image_config(arch, created, version)
    config["rootfs"]["diff_ids"] = [diff_id]
    config_digest, config_size = write_blob(blobs, json.dumps(config, indent=1).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": layer_digest,
                "size": layer_size,
            }
        ],
    }
    manifest_digest, manifest_size = write_blob(blobs, json.dumps(manifest, indent=1).encode())
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": manifest_size,
                "platform": {"architecture": arch, "os": "linux"},
                "annotations": {"org.opencontainers.image.ref.name": tag},
            }
        ],
    }
    (out / "index.json").write_text(json.dumps(index, indent=1))
    (out / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))


def docker_archive(layout: Path, path: Path) -> None:
    """The image as a docker-archive tar (`docker load -i`, `podman load -i`): the same config
    and layer, with Docker's manifest.json. Runtimes keep the health check from this format;
    from an OCI layout podman drops it (it is not in the OCI image spec)."""
    index = json.loads((layout / "index.json").read_text())
    (entry,) = index["manifests"]
    blobs = layout / "blobs/sha256"
    manifest = json.loads((blobs / entry["digest"].split(":")[1]).read_text())
    config = manifest["config"]["digest"].split(":")[1]
    layers = [layer["digest"].split(":")[1] for layer in manifest["layers"]]
    listing = [
        {
            "Config": f"{config}.json",
            "RepoTags": [entry["annotations"]["org.opencontainers.image.ref.name"]],
            "Layers": [f"{digest}/layer.tar" for digest in layers],
        }
    ]
    with tarfile.open(path, "w") as tar:
        tar.add(blobs / config, arcname=f"{config}.json")
        for digest in layers:
            tar.add(blobs / digest, arcname=f"{digest}/layer.tar")
        data = json.dumps(listing).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def build(
    out: Path,
    cache: Path,
    mirror: str,
    level: int,
    keep_rootfs: Path | None,
    compiled: bool = True,
) -> Path:
    """Build the image; returns the layout's path."""
    if os.geteuid() != 0:
        raise SystemExit("deploy/oci/build.py must run as root (debootstrap and chroot)")
    machine = platform.machine()
    if machine not in ARCHITECTURES:
        raise SystemExit(f"deploy/oci/build.py: no Debian architecture known for {machine}")
    cache.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    base = base_rootfs(cache, mirror)
    wheels = dependency_wheels(cache, ARCHITECTURES[machine][1])
    from aclgate import __version__ as version

    with tempfile.TemporaryDirectory(prefix="aclgate-oci-", dir=cache) as tmp:
        work = Path(tmp)
        wheel = aclgate_wheel(work / "dist", compiled)
        rootfs = work / "rootfs"
        run("cp", "-a", str(base), str(rootfs))
        install(rootfs, wheels, wheel)
        add_user_and_settings(rootfs)
        write_layout(rootfs, out, f"aclgate:{version}", version, level)
        if keep_rootfs is not None:
            shutil.rmtree(keep_rootfs, ignore_errors=True)
            shutil.move(str(rootfs), keep_rootfs)
    print(f"OCI image layout in {out} ({time.monotonic() - started:.0f} s)", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / "build/oci", help="the OCI layout directory"
    )
    parser.add_argument(
        "--docker-archive",
        type=Path,
        help="also write the image as a docker-archive tar here (docker/podman load)",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=ROOT / ".cache/deploy/oci",
        help="base root filesystem and wheels",
    )
    parser.add_argument("--mirror", default=MIRROR, help=f"Debian mirror (default {MIRROR})")
    parser.add_argument(
        "--compress-level", type=int, default=6, help="gzip level of the layer (1-9)"
    )
    parser.add_argument(
        "--keep-rootfs", type=Path, help="keep the image's root filesystem here (for inspection)"
    )
    parser.add_argument(
        "--pure",
        action="store_true",
        help="a pure-Python aclgate (no mypy or C compiler needed to build; slower per "
        "request); default: the hot path compiled by mypyc (docs/design.md)",
    )
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    layout = build(
        args.out, args.cache, args.mirror, args.compress_level, args.keep_rootfs, not args.pure
    )
    if args.docker_archive:
        docker_archive(layout, args.docker_archive)
    return 0


if __name__ == "__main__":
    sys.exit(main())
