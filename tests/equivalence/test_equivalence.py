"""Equivalence: every scenario gives the same per-step outcomes on Apache Kafka and aclgate.

A failure prints the side-by-side diff (tests/equivalence/harness.py); docs/equivalence.md
explains the scenarios, the normalizations and the known differences.
"""

from __future__ import annotations

import faulthandler

import pytest

from tests.equivalence.harness import Scenario, run_scenario
from tests.equivalence.scenarios import ANON_SCENARIOS, OPEN, SASL_SCENARIOS
from tests.equivalence.scenarios_admin import ADMIN_SCENARIOS
from tests.equivalence.scenarios_cluster3 import CLUSTER3_SCENARIOS
from tests.equivalence.scenarios_groups import GROUP_SCENARIOS
from tests.equivalence.scenarios_mtls import MTLS_SCENARIOS
from tests.fixtures.kafka import older_than, since_kafka

pytestmark = pytest.mark.kafka
WATCHDOG_SECONDS = 300


def _marks(s: Scenario) -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.xfail(strict=True, reason=s.xfail)] if s.xfail else []
    if s.xfail_before:
        version, reason = s.xfail_before
        marks.append(
            pytest.mark.xfail(
                older_than(version), strict=True, reason=f"before Kafka {version}: {reason}"
            )
        )
    if s.since:
        marks.append(since_kafka(*s.since))
    return marks


def _params(scenarios: list[Scenario]):
    return [pytest.param(s, id=s.name, marks=_marks(s)) for s in scenarios]


def _check(scenario: Scenario, targets) -> None:
    # every step is bounded (STEP_TIMEOUT); should a client library still block, say where
    faulthandler.dump_traceback_later(WATCHDOG_SECONDS)
    try:
        comparison = run_scenario(scenario, *targets)
    finally:
        faulthandler.cancel_dump_traceback_later()
    report = comparison.render()
    print(report)
    assert comparison.equal, "\n" + report


@pytest.mark.parametrize("scenario", _params(OPEN))
def test_no_authorization(scenario, open_targets):
    """Issue 3: through the transparent proxy every step equals direct access to Kafka."""
    _check(scenario, open_targets)


@pytest.mark.parametrize("scenario", _params(ANON_SCENARIOS))
def test_anonymous_with_acls(scenario, anon_targets):
    """Issue 5: User:ANONYMOUS with the same ACLs, Kafka's StandardAuthorizer vs. aclgate."""
    _check(scenario, anon_targets)


@pytest.mark.parametrize("scenario", _params(ADMIN_SCENARIOS))
def test_admin_apis(scenario, anon_targets):
    """Issue 13: the admin APIs, User:ANONYMOUS, Kafka's StandardAuthorizer vs. aclgate."""
    _check(scenario, anon_targets)


@since_kafka("4.1", "Share groups (KIP-932) and streams groups (KIP-1071)")
@pytest.mark.parametrize("scenario", _params(GROUP_SCENARIOS))
def test_share_and_streams_groups(scenario, anon_targets):
    """Issue 13: share and streams groups, Kafka's StandardAuthorizer vs. aclgate."""
    _check(scenario, anon_targets)


@pytest.mark.parametrize("scenario", _params(SASL_SCENARIOS))
def test_sasl_principals(scenario, sasl_targets):
    """The multi-principal matrix: alice/bob/charlie over SASL on both sides."""
    _check(scenario, sasl_targets)


@pytest.mark.parametrize("scenario", _params(MTLS_SCENARIOS))
def test_mtls_principals(scenario, mtls_targets):
    """Issue 13: principals from client certificates, ssl.principal.mapping.rules on both
    sides."""
    _check(scenario, mtls_targets)


@pytest.mark.parametrize("scenario", _params(CLUSTER3_SCENARIOS))
def test_three_nodes(scenario, cluster3_targets):
    """Issue 13: aclgate in front of 3 nodes, leaders and coordinators off the bootstrap
    broker, vs. Kafka's StandardAuthorizer with the same ACLs."""
    _check(scenario, cluster3_targets)
