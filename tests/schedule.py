"""How `make test` spreads the suite over its two workers (pytest-xdist, `-n 2 --dist loadfile`).

Each test file is one unit of work (its module fixtures stay in one process), except the Spark
files (tests/pipeline/), which are one unit together: run back to back on one worker, they
share that worker's Spark session and never compete with each other for the cores and memory
two Spark JVMs at once would need. The scheduler is xdist's own load-scope scheduler with
these units as its scopes (`pytest_xdist_make_scheduler`). The units are handed out heaviest
first (longest processing time first, with `--no-loadscope-reorder`, as xdist would otherwise
order them by test count), so the two workers finish close together. The seconds are each file's setup + calls +
teardowns in one sequential `pytest -m "not faults" --durations=0` run on the 2-core machine
(2026-11-26); files not listed are shorter and keep their order. The table only orders: a
stale figure costs minutes, never a test.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

SECONDS = {
    "tests/faults/test_faults.py": 150,
    "tests/pipeline/test_cluster.py": 126,
    "tests/outside/test_franz_go_suite.py": 115,  # measured alone 2026-11-29, Kafka start incl.
    "tests/equivalence/test_equivalence.py": 110,
    "tests/kafka/test_share_streams.py": 78,
    "tests/enforce/test_clients_enforced.py": 67,
    "tests/pipeline/test_stream_restart.py": 66,
    "tests/kafka/test_java_clients.py": 52,
    "tests/aclstore/test_kafka_store.py": 48,
    # measured alone 2026-11-29 with .cache/deploy filled (first run: + helm's Go build
    # 2 min 46 s, debootstrap 2 min 4 s)
    "tests/deploy/test_oci_image.py": 57,
    "tests/aclstore/test_kafka_store_faults.py": 44,
    "tests/pipeline/test_stream.py": 42,
    "tests/stall/test_loop_stall.py": 45,
    "tests/cli/test_no_traceback.py": 60,  # kafka-python's 30 s bootstrap timeout, in parallel
    "tests/proxy/test_log_flood_serve.py": 14,
    "tests/proxy/test_clients.py": 40,
    "tests/compiled/test_compiled.py": 200,  # estimate: the mypyc build + its own suites
    "tests/bench/test_instruction_guard.py": 37,  # measured alone 2026-11-29, load 6
    "tests/kafka/test_regex_subscription.py": 40,
    "tests/proxy/test_workers.py": 34,
    "tests/pipeline/test_acl_redundancy.py": 34,
    "tests/acladmin/test_kafka_acls_tool.py": 32,
    "tests/bench/test_soak_smoke.py": 30,
    "tests/proxy/test_cli_ops.py": 26,
    "tests/listeners/test_sasl_flows.py": 25,
    "tests/aclstore/test_kafka_store_fleet.py": 25,
    "tests/listeners/test_upstream_reauth.py": 23,
    "tests/authz/test_cli_acls.py": 23,
    "tests/acladmin/test_cli_kafka_store.py": 23,
    "tests/deploy/test_helm_chart.py": 24,  # measured alone 2026-11-29, helm cached
    "tests/proxy/test_connection_timeouts.py": 22,
    "tests/test_packaging.py": 21,
    "tests/bench/test_throughput_smoke.py": 21,
    "tests/acladmin/test_cli_bootstrap.py": 21,
    "tests/kafka/test_tools.py": 20,
    "tests/pipeline/test_report.py": 19,
    "tests/fuzz/test_tcp_fuzz.py": 19,
    "tests/pipeline/test_proxy_log.py": 16,
    "tests/pipeline/test_formats.py": 60,  # measured 2026-11-29 under load 3, Spark start incl.
    "tests/pipeline/test_cli.py": 11,
    "tests/pipeline/test_reader.py": 11,
    "tests/pipeline/test_advisor.py": 10,
    "tests/ldap/test_serve.py": 12,  # measured alone 2026-11-29, slapd cached
}
SPARK_UNIT = "tests/pipeline/"


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or the Spark unit."""
    path = nodeid.split("::", 1)[0]
    return SPARK_UNIT if path.startswith(SPARK_UNIT) else path


def heaviest_units_first(items: list[pytest.Item]) -> None:
    """Sort the units heaviest first, in place (stable: a unit's tests keep their order,
    unlisted files theirs)."""
    weight = {unit_of(item.nodeid): 0 for item in items}
    for path, seconds in SECONDS.items():
        unit = unit_of(path)
        if unit in weight:
            weight[unit] += seconds
    items.sort(key=lambda item: -weight[unit_of(item.nodeid)])


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's load-scope scheduler, a scope being a unit (unit_of)."""
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return UnitScheduling(config, log)


def under_xdist() -> bool:
    """In an xdist worker (where the collection is ordered)."""
    return "PYTEST_XDIST_WORKER" in os.environ
