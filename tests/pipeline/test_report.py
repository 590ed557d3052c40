"""`aclgate report` on a small log with known answers (and on empty input)."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from aclgate.pipeline.report import ReportOptions, run_report
from aclgate.pipeline.spark import Progress
from tests.pipeline.helpers import (
    ALICE_READ_SECRET,
    BOB_WRITE_ORDERS,
    CANDIDATE,
    POLICY,
    small_log,
    write_acl_file,
    write_jsonl,
)

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def report(spark, tmp_path_factory):
    """One report (with ACL usage and a what-if) that the tests below read."""
    root = tmp_path_factory.mktemp("report")
    events = small_log()
    write_jsonl(root / "audit" / "a.jsonl", events[:8])
    write_jsonl(root / "audit" / "b.jsonl.gz", [events[8], "{oops", ""])
    opts = ReportOptions(
        audit=[str(root / "audit")],
        out=str(root / "out"),
        acl_file=str(write_acl_file(root / "acls.json", POLICY)),
        candidate_acl_file=str(write_acl_file(root / "candidate.json", CANDIDATE)),
        super_users=["User:admin"],
    )
    summary = run_report(spark, opts, Progress("report", opts.stages(), io.StringIO()))
    return summary, root / "out"


def test_totals_honour_count(report):
    summary, _ = report
    assert summary["events"] == 15
    assert summary["lines"] == 9
    assert summary["decisions"] == {"ALLOWED": 11, "DENIED": 4}
    assert (summary["denied_enforced"], summary["denied_dry_run"]) == (3, 1)
    assert summary["rules"] == {"ACL": 11, "DEFAULT_DENY": 2, "NO_ACL_DEFAULT": 1, "SUPER_USER": 1}
    assert summary["distinct"] == {"principals": 4, "resources": 5, "decision_keys": 7}
    assert summary["time_range"] == {
        "first": "2026-11-21T12:00:00.000000Z",
        "last": "2026-11-21T12:08:00.000000Z",
    }
    assert summary["inputs"]["malformed"]["count"] == 1
    assert summary["inputs"]["malformed"]["sample"][0]["line"] == 2
    assert summary["inputs"]["blank"] == 1


def test_top_lists(report):
    top = report[0]["top"]
    assert top["principals_by_volume"][0] == {"principal": "User:alice", "events": 11}
    assert top["principals_by_denials"] == [
        {"principal": "User:mallory", "events": 2},
        {"principal": "User:alice", "events": 1},
        {"principal": "User:carol", "events": 1},
    ]
    assert top["resources_by_denials"][0] == {
        "resource_type": "TOPIC",
        "resource_name": "orders",
        "events": 2,
    }
    assert top["apis_by_volume"][0] == {"api": "Fetch", "events": 9}


def test_access_table(spark, report):
    _, out = report
    rows = {
        (r.principal, r.operation, r.resource_name, r.decision): r
        for r in spark.read.parquet(str(out / "access")).collect()
    }
    assert len(rows) == 7
    alice = rows[("User:alice", "READ", "orders", "ALLOWED")]
    assert alice["count"] == 6
    assert alice.first_seen.isoformat().startswith("2026-11-21T12:00:00")
    assert alice.last_seen.isoformat().startswith("2026-11-21T12:01:00")
    assert rows[("User:mallory", "READ", "orders", "DENIED")]["count"] == 2


def test_denied_parquet_and_csv(spark, report):
    _, out = report
    denied = spark.read.parquet(str(out / "denied" / "parquet")).collect()
    assert sorted((r.principal, r.enforced, r["count"]) for r in denied) == [
        ("User:alice", True, 1),
        ("User:carol", False, 1),
        ("User:mallory", True, 2),
    ]
    (csv_file,) = (out / "denied" / "csv").glob("part-*.csv")
    rows = list(csv.DictReader(csv_file.read_text().splitlines()))
    assert {r["principal"] for r in rows} == {"User:alice", "User:carol", "User:mallory"}
    assert rows[0]["first_seen"].endswith("Z")


def test_acl_usage_finds_unused(spark, report):
    summary, out = report
    usage = summary["acl_usage"]
    assert (usage["acls"], usage["used"], usage["unused"], usage["not_in_acl_file"]) == (5, 3, 2, 0)
    unused = [{k: r[k] for k in BOB_WRITE_ORDERS} for r in usage["unused_acls"]]
    assert sorted(unused, key=str) == sorted([BOB_WRITE_ORDERS, ALICE_READ_SECRET], key=str)
    most = {r["principal"] + r["resource_name"]: r["decisions"] for r in usage["most_used"]}
    assert most == {"User:aliceorders": 7, "User:alicealice-group": 3, "User:*secret": 1}
    assert spark.read.parquet(str(out / "acl_usage")).count() == 5


def test_whatif_in_the_report(report):
    summary, out = report
    w = summary["whatif"]
    assert w["to_denied"] == {"events": 7, "keys": 2}
    assert w["to_allowed"] == {"events": 1, "keys": 1}
    assert w["dry_run_still_denied"] == {"events": 0, "keys": 0}
    detail = json.loads((out / "whatif" / "summary.json").read_text())
    assert {r["operation"] for r in detail["to_denied_list"]} == {"READ", "DESCRIBE"}
    assert detail["to_allowed_list"][0]["principal"] == "User:carol"


def test_html_is_self_contained(report):
    summary, out = report
    page = (out / "report.html").read_text()
    assert page.count("<svg") >= 8
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<script" not in page
    for text in (
        "Decisions over time",
        "Top denied principals",
        "ACL usage",
        "What-if",
        "User:mallory",
    ):
        assert text in page
    assert json.loads((out / "summary.json").read_text())["events"] == summary["events"]


def test_empty_input_gives_an_empty_report(spark, tmp_path):
    (tmp_path / "audit").mkdir()
    write_jsonl(tmp_path / "audit" / "empty.jsonl", [])
    for source in ("audit", "audit/empty.jsonl"):
        opts = ReportOptions(
            audit=[str(tmp_path / source)],
            out=str(tmp_path / "out"),
            acl_file=str(write_acl_file(tmp_path / "acls.json", POLICY)),
        )
        summary = run_report(spark, opts, Progress("report", opts.stages(), io.StringIO()))
        assert summary["events"] == 0
        assert summary["decisions"] == {"ALLOWED": 0, "DENIED": 0}
        assert summary["timeline"]["points"] == []
        assert summary["acl_usage"]["unused"] == 5
        assert spark.read.parquet(str(tmp_path / "out" / "access")).count() == 0
        assert "No events" in (tmp_path / "out" / "report.html").read_text()
