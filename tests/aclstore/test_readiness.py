"""/readyz and the ACL store (issue 20): 503 with the reason while the store is degraded or has
not been in step with its source for longer than --acl-store-max-staleness-seconds.

Before: /readyz answered 200 while the store was degraded (an undecodable ACL record, an ACL
file that does not load) or stale for any length of time; only "not loaded yet" made it 503.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from aclgate.proxy.aclstore.backend import AclStoreStatus, unready_reason
from aclgate.proxy.aclstore.filewatch import AclFileStore
from aclgate.proxy.config import ConfigError
from tests.fixtures.proxy import RunningProxy, make_config
from tests.fixtures.wait import wait_until

IN_STEP = AclStoreStatus(backend="kafka", loaded=True, applied_offset=7, fingerprint="f")
DEGRADED = "degraded: the record at offset 8 of __aclgate_acls cannot be decoded (not a UUID)"


@pytest.mark.parametrize(
    ("status", "limit", "reason"),
    [
        (IN_STEP, 300, None),
        (dataclasses.replace(IN_STEP, seconds_stale=300.0), 300, None),
        (
            dataclasses.replace(IN_STEP, seconds_stale=300.4),
            300,
            "stale: not in step with its source for 300 s, more than "
            "acl_store_max_staleness_seconds (300)",
        ),
        (dataclasses.replace(IN_STEP, seconds_stale=10**6), 0, None),  # 0: never
        (dataclasses.replace(IN_STEP, error=DEGRADED, seconds_stale=1.0), 300, DEGRADED),
        (dataclasses.replace(IN_STEP, error=DEGRADED, seconds_stale=1.0), 0, DEGRADED),
        (
            dataclasses.replace(IN_STEP, loaded=False, records_replayed=42),
            300,
            "loading: 42 records replayed",
        ),
    ],
)
def test_unready_reason(status: AclStoreStatus, limit: float, reason: str | None) -> None:
    assert unready_reason(status, limit) == reason


def test_a_negative_or_nan_staleness_limit_is_refused() -> None:
    for value in (-1.0, float("nan")):
        with pytest.raises(ConfigError, match="acl_store_max_staleness_seconds must be 0"):
            make_config("127.0.0.1:9092", acl_store_max_staleness_seconds=value)


def readyz(proxy: RunningProxy) -> tuple[int, dict[str, Any]]:
    url = "http://{}:{}/readyz".format(*proxy.server.metrics_address)
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as answer:
        return answer.code, json.loads(answer.read())


def test_readyz_is_503_while_the_acl_file_does_not_load(tansu, proxy_factory, tmp_path) -> None:
    """A real proxy on the file store: its ACL file broken while it serves, then repaired."""
    path = tmp_path / "acls.json"
    AclFileStore(path).modify(lambda _: [], create=True)
    proxy = proxy_factory(tansu.bootstrap, acl_file=path, metrics_listen=("127.0.0.1", 0))
    wait_until(lambda: readyz(proxy)[0] == 200, timeout=10, what="ready")
    path.write_text('{"version": 1, "acls": [')
    proxy.run(proxy.server.watcher.reload_once)
    status, body = readyz(proxy)
    assert status == 503 and body["ready"] is False
    assert body["acl_store"]["not_ready"] == body["acl_store"]["error"] == body["acl_file_error"]
    assert str(path) in body["acl_store"]["not_ready"]
    path.write_text('{"version": 1, "acls": []}')
    proxy.run(proxy.server.watcher.reload_once)
    status, body = readyz(proxy)
    assert status == 200 and body["acl_store"]["not_ready"] is None


class StaleStore:
    """Stands in for a kafka store cut off from its ACL topic for `seconds_stale` seconds."""

    def __init__(self, seconds_stale: float) -> None:
        self.seconds_stale = seconds_stale

    def status(self) -> AclStoreStatus:
        return dataclasses.replace(IN_STEP, seconds_stale=self.seconds_stale)

    async def stop(self) -> None:
        """Nothing to stop (the proxy stops its store when it closes)."""


@pytest.mark.parametrize(("limit", "expected"), [(60.0, 503), (0.0, 200), (600.0, 200)])
def test_readyz_is_503_once_the_store_is_stale_past_the_limit(
    tansu, proxy_factory, limit: float, expected: int
) -> None:
    proxy = proxy_factory(
        tansu.bootstrap,
        metrics_listen=("127.0.0.1", 0),
        acl_store_max_staleness_seconds=limit,
    )
    wait_until(lambda: readyz(proxy)[0] == 200, timeout=10, what="ready")
    proxy.run(lambda: setattr(proxy.server, "acl_backend", StaleStore(61.0)))
    status, body = readyz(proxy)
    assert status == expected and body["acl_store"]["seconds_stale"] == 61.0
    if expected == 503:
        assert body["acl_store"]["not_ready"] == (
            "stale: not in step with its source for 61 s, more than "
            "acl_store_max_staleness_seconds (60)"
        )
    else:
        assert body["acl_store"]["not_ready"] is None


def test_a_missing_acl_file_allowed_missing_is_ready_until_it_breaks(
    tansu, proxy_factory, tmp_path
) -> None:
    """--acl-file-missing-ok: the empty policy asked for is not a degraded store (else the
    first ACLs could not be made through a load balancer); a broken file once it appears is."""
    path = tmp_path / "acls.json"
    proxy = proxy_factory(
        tansu.bootstrap, acl_file=path, acl_file_missing_ok=True, metrics_listen=("127.0.0.1", 0)
    )
    proxy.run(proxy.server.watcher.reload_once)
    wait_until(lambda: readyz(proxy)[0] == 200, timeout=10, what="ready")
    assert "does not exist" in readyz(proxy)[1]["acl_file_error"]
    path.write_text('{"version": 1, "acls": [')
    proxy.run(proxy.server.watcher.reload_once)
    status, body = readyz(proxy)
    assert status == 503 and "invalid JSON" in body["acl_store"]["not_ready"]
