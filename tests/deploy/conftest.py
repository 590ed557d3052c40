"""Fixtures shared by the tests of tests/deploy/: the OCI image, built once per session (per
xdist worker), and podman with it loaded (tests/deploy/oci.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.deploy.oci import Image, Podman, build_image, podman_with


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    return build_image(tmp_path_factory.mktemp("oci"))


@pytest.fixture(scope="session")
def podman(image: Image, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podman]:
    yield from podman_with(image, tmp_path_factory.mktemp("podman"))
