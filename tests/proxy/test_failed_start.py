"""A proxy that fails to start leaves nothing listening: its health endpoint, opened before
the policy loads (so probes answer during a long ACL replay), closes again whatever step
failed, here the client listener's port being taken."""

from __future__ import annotations

import socket

import pytest

from aclgate.proxy.demo.embedded_broker import free_port
from aclgate.proxy.listen.server import ProxyServer
from tests.fixtures.proxy import make_config


@pytest.mark.asyncio
async def test_a_taken_listen_port_closes_the_health_endpoint_again():
    metrics_port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = ProxyServer(
            make_config(
                f"127.0.0.1:{free_port()}",
                listen=taken.getsockname(),
                metrics_listen=("127.0.0.1", metrics_port),
            )
        )
        with pytest.raises(OSError):
            await server.start()
    assert server.health is None
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", metrics_port)) != 0
