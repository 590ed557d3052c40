"""The order `make test` hands test files to its two workers (pytest-xdist, `--dist loadfile`).

The workers take whole files in collection order, so a long file collected last keeps one
worker busy while the other idles. Collected heaviest first instead (longest processing time
first), the two finish close together. The seconds are each file's setup + calls + teardowns
in one sequential `pytest -m "not faults" --durations=0` run on the 2-core machine
(2026-11-26); files not listed are shorter and keep their order. The table only orders:
a stale figure costs minutes, never a test.
"""

from __future__ import annotations

import os

import pytest

SECONDS = {
    "tests/faults/test_faults.py": 150,
    "tests/pipeline/test_cluster.py": 126,
    "tests/equivalence/test_equivalence.py": 110,
    "tests/kafka/test_share_streams.py": 78,
    "tests/enforce/test_clients_enforced.py": 67,
    "tests/pipeline/test_stream_restart.py": 66,
    "tests/kafka/test_java_clients.py": 52,
    "tests/aclstore/test_kafka_store.py": 48,
    "tests/aclstore/test_kafka_store_faults.py": 44,
    "tests/pipeline/test_stream.py": 42,
    "tests/proxy/test_clients.py": 40,
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
    "tests/proxy/test_connection_timeouts.py": 22,
    "tests/test_packaging.py": 21,
    "tests/bench/test_throughput_smoke.py": 21,
    "tests/acladmin/test_cli_bootstrap.py": 21,
    "tests/kafka/test_tools.py": 20,
    "tests/pipeline/test_report.py": 19,
    "tests/fuzz/test_tcp_fuzz.py": 19,
}


def heaviest_files_first(items: list[pytest.Item]) -> None:
    """Sort in place by the file's seconds, longest first (stable: a file's tests keep their
    order, unlisted files theirs)."""
    items.sort(key=lambda item: -SECONDS.get(item.nodeid.split("::", 1)[0], 0))


def under_xdist() -> bool:
    return "PYTEST_XDIST_WORKER" in os.environ
