"""report.html rendering without Spark: escaping, empty data, chart helpers."""

from __future__ import annotations

from aclgate.pipeline.charts import hbar_chart, human, nice_ceiling, stacked_timeline
from aclgate.pipeline.page import acl_label, render_page

EVIL = "User:<script>alert(1)</script>"


def test_untrusted_names_are_escaped():
    summary = {
        "events": 3,
        "decisions": {"ALLOWED": 1, "DENIED": 2},
        "denied_enforced": 2,
        "denied_dry_run": 0,
        "top": {"principals_by_denials": [{"principal": EVIL, "events": 2}]},
        "timeline": {
            "bucket_seconds": 60,
            "points": [{"start": "2026-11-21T12:00:00Z", "allowed": 1}],
        },
        "inputs": {
            "malformed": {
                "count": 1,
                "sample": [{"file": "f", "line": 3, "reason": "r", "text": "<b>x"}],
            }
        },
    }
    page = render_page("t", summary)
    assert "<script" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;x" in page


def test_empty_summary_renders():
    page = render_page("t", {"events": 0, "inputs": {}})
    assert "No events" in page and "no events in the window" in page


def test_chart_helpers():
    assert human(1234) == "1.2k" and human(5_600_000) == "5.6M" and human(12) == "12"
    assert nice_ceiling(37) == 50 and nice_ceiling(0) == 1 and nice_ceiling(100) == 100
    assert hbar_chart([]) == '<p class="empty">nothing to show</p>'
    svg = hbar_chart([("a", 10), ("b", 5)])
    assert svg.count("<rect") == 2 and "<title>a: 10</title>" in svg
    assert stacked_timeline([{"start": "s", "x": 1}], [("x", "X", "#000")]).count("<rect") >= 2
    acl = {"permission_type": "ALLOW", "operation": "READ", "resource_type": "TOPIC",
           "resource_name": "p.", "pattern_type": "PREFIXED", "principal": "User:a", "host": "*"}  # fmt: skip
    assert acl_label(acl) == "ALLOW READ TOPIC:p.* User:a@*"
