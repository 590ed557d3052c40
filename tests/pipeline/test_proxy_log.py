"""The pipeline on audit logs written by the proxy's own writer (proxy/audit/log.py).

The writer aggregates allowed decisions per window, writes denials one by one, rotates by
size and gzips rotated files: the report must count exactly what was recorded.
"""

from __future__ import annotations

import io
import random

import pytest

from aclgate.pipeline.report import ReportOptions, run_report
from aclgate.pipeline.sample_world import SUPER_USERS, api_fields, build_world
from aclgate.pipeline.spark import Progress
from tests.fixtures.decisions import decision_record
from tests.pipeline.helpers import write_acl_file

pytestmark = pytest.mark.spark


class Clock:
    def __init__(self) -> None:
        self.now = 1_795_000_000.0

    def __call__(self) -> float:
        return self.now


def record_decisions(path, n: int) -> dict[str, int]:
    """Record n decisions of the sample fleet, deciding them with authz as the proxy does."""
    audit = pytest.importorskip(
        "aclgate.proxy.audit.log", reason="the proxy's audit writer is not here yet"
    )
    from aclgate.authz.authorizer import Authorizer
    from aclgate.authz.model import AclBinding, AclOperation, ResourceType

    acls, acts = build_world()
    authorizer = Authorizer(super_users=SUPER_USERS)
    authorizer.load([AclBinding.from_dict(a) for a in acls])
    clock = Clock()
    log = audit.AuditLog(
        path / "audit.jsonl", "aclgate-test", max_bytes=40_000, keep=1000, window=5.0, clock=clock
    )
    rng = random.Random(1)
    totals = {"ALLOWED": 0, "DENIED": 0, "dry_run": 0}
    for i in range(n):
        a = rng.choice(acts)
        decision = authorizer.authorize(
            a.principal,
            a.host,
            AclOperation[a.operation],
            ResourceType[a.resource_type],
            a.resource_name,
        )
        enforced = i >= n // 2  # the first half in dry-run mode
        key, version = api_fields(a.api)
        log.record(
            decision_record(
                decision, a.resource_name, a.principal, a.host, operation=a.operation,
                resource_type=a.resource_type, listener=a.listener, client_id=a.client_id,
                api_key=key, api_version=version, enforced=enforced or decision.allowed,
            )
        )  # fmt: skip
        totals[decision.verdict] += 1
        totals["dry_run"] += not enforced and not decision.allowed
        clock.now += 0.05
        log.tick()
    log.close()
    return totals


def test_report_counts_what_the_proxy_recorded(spark, tmp_path):
    totals = record_decisions(tmp_path / "logs", 6000)
    files = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert any(f.endswith(".jsonl.gz") for f in files) and "audit.jsonl" in files
    acls, _ = build_world()
    opts = ReportOptions(
        audit=[str(tmp_path / "logs")],
        out=str(tmp_path / "out"),
        acl_file=str(write_acl_file(tmp_path / "acls.json", acls)),
    )
    summary = run_report(spark, opts, Progress("report", opts.stages(), io.StringIO()))
    assert summary["inputs"]["malformed"]["count"] == 0
    assert summary["events"] == 6000
    assert summary["lines"] < 6000  # allowed decisions were aggregated
    assert summary["decisions"] == {"ALLOWED": totals["ALLOWED"], "DENIED": totals["DENIED"]}
    assert summary["denied_dry_run"] == totals["dry_run"]
    assert summary["acl_usage"]["unused"] >= 2  # the retired reporting service's ACLs
