"""Suite-wide pytest configuration.

Every asyncio test and fixture runs on uvloop, the loop the proxy runs on in production.
Shared fixtures live in tests/fixtures/ and are registered here as plugins.
"""

import os

import pytest
import uvloop

from tests.schedule import heaviest_units_first, make_scheduler, under_xdist

pytest_plugins = [
    "tests.fixtures.tansu",
    "tests.fixtures.proxy",
    "tests.fixtures.kafka",
    "tests.fixtures.proxyprocess",
]


def pytest_configure(config):
    # tests/compiled runs suites in a copy of the checkout with the hot path compiled: there,
    # a run on the pure-Python modules (the copy's .py files imported instead) is an error
    if os.environ.get("ACLGATE_EXPECT_COMPILED") == "1":
        from aclgate.native import describe

        if not describe().startswith("compiled hot path"):
            raise pytest.UsageError(f"ACLGATE_EXPECT_COMPILED=1, but this runs the {describe()}")


def pytest_asyncio_loop_factories(config, item):
    return {"uvloop": uvloop.new_event_loop}


def pytest_collection_modifyitems(config, items):
    # sequential runs keep the files' own order; `make test`'s workers: tests/schedule.py
    if under_xdist():
        heaviest_units_first(items)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's
def pytest_xdist_make_scheduler(config, log):
    return make_scheduler(config, log)
