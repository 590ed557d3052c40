"""Faults lose nothing through aclgate: an idempotent producer (acks=all) through aclgate in front
of a 3-node Kafka while a partition leader is SIGKILLed, aclgate itself is restarted, and the
whole cluster stops and returns (and, in `make test-faults`, aclgate is SIGKILLed); every
acknowledged message is read back exactly once, the same counts as the same run directly
against Kafka (the control).

Scenario, counts and bounds: tests/faults/harness.py. `make test-faults` runs them all and
writes bench/results/faults.md.
"""

from __future__ import annotations

import pytest

from tests.faults.harness import FAULTS, RunResult, run_scenario

pytestmark = pytest.mark.kafka

# In `make test` (CI): the three faults of issue 15 with librdkafka, about 2 minutes on 2 cores
# (bench/results/faults.md). The rest is marked `faults`: `make test-faults` runs everything.
DEFAULT = ("leader_killed", "aclgate_restarted", "all_brokers_restarted")
LIBRDKAFKA = [f if f in DEFAULT else pytest.param(f, marks=pytest.mark.faults) for f in FAULTS]

# Delivery failures a producer may report for its own timeout; none is expected (the timeout
# outlasts every fault) and any other would be a non-retriable error.
OWN_TIMEOUT = {"_MSG_TIMED_OUT", "org.apache.kafka.common.errors.TimeoutException"}


def check_run(r: RunResult) -> None:
    """What must hold for every run, whatever the side: no fatal error, no hang."""
    where = f"{r.fault}/{r.side}/{r.producer}"
    assert not r.fatal, f"{where}: fatal producer errors {r.fatal}"
    assert r.unreported == 0, f"{where}: {r.unreported} messages without a delivery report"
    assert set(r.delivery_errors) <= OWN_TIMEOUT, f"{where}: delivery errors {r.delivery_errors}"
    assert r.acked + r.failed == r.produced, where
    if r.side == "aclgate":
        assert r.proxy_log.get("traceback", 0) == 0, f"{where}: traceback in aclgate's log"


def run_both(cluster, fault, tmp_path, record_run, producer) -> tuple[RunResult, RunResult]:
    control = run_scenario(cluster, fault, "direct", tmp_path, producer)
    record_run(control)
    proxied = run_scenario(cluster, fault, "aclgate", tmp_path, producer)
    record_run(proxied)
    check_run(control)
    check_run(proxied)
    assert (control.lost, control.duplicated) == (0, 0), (
        f"the control run directly against Kafka lost {control.lost} / duplicated "
        f"{control.duplicated}: the scenario itself is unsound, not aclgate"
    )
    assert (proxied.lost, proxied.duplicated) == (control.lost, control.duplicated), (
        f"through aclgate: {proxied.lost} acknowledged messages lost, {proxied.duplicated} "
        f"duplicated (control: {control.lost} / {control.duplicated})"
    )
    return control, proxied


@pytest.mark.parametrize("fault", LIBRDKAFKA)
def test_librdkafka_idempotent_producer(cluster, tmp_path, record_run, fault):
    _, proxied = run_both(cluster, fault, tmp_path, record_run, "librdkafka")
    if fault == "all_brokers_restarted":
        details = proxied.fault_details
        # B4 (issue 15): /readyz must say "not ready" while no broker can be reached...
        assert details["readyz_first_unready_s"] is not None, (
            f"/readyz stayed 200 for the whole {details['down_s']} s outage: "
            f"{details['readyz_while_down']}"
        )
        # ...and ready again once the cluster is back.
        assert details["readyz_ready_after_return_s"] is not None, "/readyz never ready again"


@pytest.mark.faults
@pytest.mark.parametrize("fault", FAULTS)
def test_java_verifiable_producer(cluster, tmp_path, record_run, fault):
    run_both(cluster, fault, tmp_path, record_run, "java")
