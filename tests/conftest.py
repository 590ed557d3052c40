"""Suite-wide pytest configuration.

Every asyncio test and fixture runs on uvloop, the loop the proxy runs on in production.
Shared fixtures live in tests/fixtures/ and are registered here as plugins.
"""

import uvloop

pytest_plugins = [
    "tests.fixtures.tansu",
    "tests.fixtures.proxy",
    "tests.fixtures.kafka",
    "tests.fixtures.proxyprocess",
]


def pytest_asyncio_loop_factories(config, item):
    return {"uvloop": uvloop.new_event_loop}
