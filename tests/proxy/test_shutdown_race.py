"""Shutdown never hangs on a cancellation lost in a race.

Python 3.11's `asyncio.wait_for` returns the inner result instead of raising CancelledError
when the inner awaitable finishes in the same loop iteration as the cancel (CPython issue
86296, fixed in 3.12). The upstream checker waits on an event with wait_for, and every
client that finds no bootstrap server sets that event: a client failing just as the proxy
stopped made the checker swallow close()'s cancel and loop on, and close() waited for it
forever (a CI teardown timeout of test_upstream_ca_file_reloads; a SIGTERM that never ends
in production). Setting the event and closing in the same step reproduces it every time.
"""

from __future__ import annotations

import asyncio

from aclgate.proxy.demo.embedded_broker import free_port
from aclgate.proxy.listen.server import ProxyServer
from tests.fixtures.proxy import RunningProxy, make_config


def test_close_right_after_a_client_found_no_upstream_ends():
    # nothing listens upstream: the proxy starts (not ready) and its checker keeps looking
    proxy = RunningProxy(ProxyServer(make_config(f"127.0.0.1:{free_port()}")))
    try:

        async def fail_then_close() -> None:
            proxy.server.upstream_unreachable("a client found no bootstrap server")
            await proxy.server.close()  # its first step cancels the checker, in this step

        proxy.call(asyncio.wait_for(fail_then_close(), 8), timeout=10)
    finally:
        proxy.loop.call_soon_threadsafe(proxy.loop.stop)
        proxy._thread.join(10)


def test_close_names_a_task_that_ignores_its_cancel_and_goes_on(monkeypatch, caplog):
    """Whatever swallows a cancel next, close() still ends, and says which task it was."""
    from aclgate.proxy.listen import server as server_module

    monkeypatch.setattr(server_module, "TASK_STOP_TIMEOUT", 0.5)
    proxy = RunningProxy(ProxyServer(make_config(f"127.0.0.1:{free_port()}")))
    stubborn: list[asyncio.Task] = []
    try:

        async def ignores_one_cancel() -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                await asyncio.sleep(3600)  # cancelled again below, after the check

        async def spawn_then_close() -> None:
            proxy.server._spawn(ignores_one_cancel())
            stubborn.append(proxy.server._tasks[-1])
            await asyncio.sleep(0)  # let it start
            await proxy.server.close()

        proxy.call(spawn_then_close(), timeout=10)
        assert not stubborn[0].done()
        assert "ignored its cancellation" in caplog.text
        assert "ignores_one_cancel" in caplog.text
        proxy.run(stubborn[0].cancel)
    finally:
        proxy.loop.call_soon_threadsafe(proxy.loop.stop)
        proxy._thread.join(10)
