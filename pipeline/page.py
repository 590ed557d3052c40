"""report.html: one self-contained page built from the job summaries.

Everything is inline (CSS and SVG, no scripts), so the file can be mailed, attached to a
ticket or opened from an air-gapped box and still show its charts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from html import escape
from typing import Any

from aclgate.pipeline.charts import (
    ALLOWED,
    DENIED,
    DRY_RUN,
    NEUTRAL,
    hbar_chart,
    human,
    split_bar,
    stacked_timeline,
)

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#f4f6f8;color:#1d2733}
header{background:#1d2733;color:#fff;padding:20px 32px}
header h1{margin:0 0 4px;font-size:22px}
header p{margin:2px 0;color:#c5ced8;font-size:13px}
main{padding:16px 32px 40px;max-width:1200px}
section{background:#fff;border-radius:8px;padding:16px 20px;margin:16px 0;box-shadow:0 1px 2px rgba(0,0,0,.08)}
h2{font-size:17px;margin:0 0 12px}
h3{font-size:14px;margin:8px 0;color:#44505c}
.tiles{display:flex;flex-wrap:wrap;gap:12px}
.tile{flex:1 1 140px;background:#f7f9fb;border-radius:6px;padding:10px 14px;border-left:4px solid #4a6fa5}
.tile b{display:block;font-size:22px}
.tile span{font-size:12px;color:#5b6875}
.tile.allowed{border-color:#3b8f5a}.tile.denied{border-color:#c8423b}.tile.dry{border-color:#e9a23b}.tile.muted{border-color:#9aa5b1}
.cols{display:flex;gap:24px;flex-wrap:wrap}.cols>div{flex:1 1 480px;min-width:0}
table{border-collapse:collapse;width:100%;font-size:12px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #e6e9ed;vertical-align:top}
th{background:#f7f9fb;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:12px}
.empty{color:#7a8793;font-style:italic}
.note{font-size:12px;color:#5b6875}
"""


def _tile(label: str, value: Any, kind: str = "") -> str:
    shown = human(value) if isinstance(value, int | float) else escape(str(value))
    title = f"{value:,}" if isinstance(value, int) else escape(str(value))
    return (
        f'<div class="tile {kind}" title="{title}"><b>{shown}</b><span>{escape(label)}</span></div>'
    )


def _tiles(items: Iterable[tuple[str, Any, str]]) -> str:
    return '<div class="tiles">' + "".join(_tile(*item) for item in items) + "</div>"


def _table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric: AbstractSet[int] = frozenset()
) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            text = f"{cell:,}" if isinstance(cell, int) and not isinstance(cell, bool) else cell
            cls = ' class="num"' if i in numeric else ""
            cells.append(f"<td{cls}>{escape('' if text is None else str(text))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    if not body:
        return '<p class="empty">none</p>'
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def acl_label(acl: dict[str, Any]) -> str:
    """`ALLOW READ TOPIC:orders* User:alice@*` (a trailing * marks a PREFIXED pattern)."""
    star = "*" if acl.get("pattern_type") == "PREFIXED" else ""
    return (
        f"{acl.get('permission_type')} {acl.get('operation')} "
        f"{acl.get('resource_type')}:{acl.get('resource_name')}{star} "
        f"{acl.get('principal')}@{acl.get('host')}"
    )


def _resource(row: dict[str, Any]) -> str:
    return f"{row['resource_type']}:{row['resource_name']}"


def _overview(s: dict[str, Any]) -> str:
    decisions = s.get("decisions", {})
    inputs = s.get("inputs", {})
    tiles = _tiles(
        [
            ("events", s.get("events", 0), ""),
            ("allowed", decisions.get("ALLOWED", 0), "allowed"),
            ("denied, enforced", s.get("denied_enforced", 0), "denied"),
            ("denied in dry-run (forwarded)", s.get("denied_dry_run", 0), "dry"),
            ("principals", s.get("distinct", {}).get("principals", 0), ""),
            ("resources", s.get("distinct", {}).get("resources", 0), ""),
            ("malformed lines", inputs.get("malformed", {}).get("count", 0), "muted"),
        ]
    )
    share = split_bar(
        [
            ("allowed", decisions.get("ALLOWED", 0), ALLOWED),
            ("denied", s.get("denied_enforced", 0), DENIED),
            ("denied, dry-run", s.get("denied_dry_run", 0), DRY_RUN),
        ]
    )
    return f"<section><h2>Overview</h2>{tiles}<div style='margin-top:12px'>{share}</div></section>"


def _timeline(s: dict[str, Any]) -> str:
    timeline = s.get("timeline") or {}
    chart = stacked_timeline(
        timeline.get("points", []),
        [
            ("allowed", "allowed", ALLOWED),
            ("denied_enforced", "denied (enforced)", DENIED),
            ("denied_dry_run", "denied (dry-run)", DRY_RUN),
        ],
    )
    denials = stacked_timeline(
        timeline.get("points", []),
        [
            ("denied_enforced", "denied (enforced)", DENIED),
            ("denied_dry_run", "denied (dry-run, forwarded)", DRY_RUN),
        ],
        height=180,
    )
    bucket = timeline.get("bucket_seconds")
    note = f'<p class="note">one bar per {bucket} s (UTC)</p>' if bucket else ""
    return (
        f"<section><h2>Decisions over time</h2>{chart}<h3>Denials only</h3>{denials}{note}"
        "</section>"
    )


def _tops(s: dict[str, Any]) -> str:
    top = s.get("top", {})

    def bars(key: str, label_of: Any, color: str, empty: str) -> str:
        return hbar_chart(
            [(label_of(r), r["events"]) for r in top.get(key, [])], color, empty=empty
        )

    return (
        "<section><h2>Denials</h2><div class='cols'>"
        f"<div><h3>Top denied principals</h3>{bars('principals_by_denials', lambda r: r['principal'], DENIED, 'no denials')}</div>"
        f"<div><h3>Top denied resources</h3>{bars('resources_by_denials', _resource, DENIED, 'no denials')}</div>"
        "</div></section>"
        "<section><h2>Traffic</h2><div class='cols'>"
        f"<div><h3>Top principals</h3>{bars('principals_by_volume', lambda r: r['principal'], NEUTRAL, 'no events')}</div>"
        f"<div><h3>Top resources</h3>{bars('resources_by_volume', _resource, NEUTRAL, 'no events')}</div>"
        f"<div><h3>Top APIs</h3>{bars('apis_by_volume', lambda r: r['api'] or '(none)', NEUTRAL, 'no events')}</div>"
        f"<div><h3>APIs with most denials</h3>{bars('apis_by_denials', lambda r: r['api'] or '(none)', DENIED, 'no denials')}</div>"
        "</div></section>"
    )


def _acl_usage(usage: dict[str, Any] | None) -> str:
    if not usage:
        return ""
    tiles = _tiles(
        [
            ("ACLs in the file", usage["acls"], ""),
            ("used", usage["used"], "allowed"),
            ("redundant (covered by another)", usage.get("redundant", 0), "dry"),
            ("unused in the window", usage["unused"], "dry"),
            ("deciding ACLs not in the file", usage["not_in_acl_file"], "muted"),
        ]
    )
    used = hbar_chart(
        [(acl_label(r), r["decisions"]) for r in usage.get("most_used", [])[:15]],
        NEUTRAL,
        width=1120,
        label_chars=70,
        empty="no ACL decided anything",
    )
    unused = _table(
        ["permission", "operation", "resource", "pattern", "principal", "host"],
        [
            (
                r["permission_type"],
                r["operation"],
                f"{r['resource_type']}:{r['resource_name']}",
                r["pattern_type"],
                r["principal"],
                r["host"],
            )
            for r in usage.get("unused_acls", [])
        ],
    )
    redundant = _table(
        ["ACL", "named decisions", "decides", "also decided by"],
        [
            (
                acl_label(r),
                r["decisions"],
                r["would_decide"],
                ", ".join(acl_label(c) for c in r["covered_by"][:2]),
            )
            for r in usage.get("redundant_acls", [])
        ],
        {1, 2},
    )
    removable = _table(
        ["ACL", "status", "still decided by"],
        [
            (acl_label(r), r["status"], acl_label(r["covered_by"]) if r["covered_by"] else "")
            for r in usage.get("removable", [])
        ],
    )
    missing = ""
    if usage.get("not_in_acl_file_acls"):
        missing = "<h3>ACLs that decided but are not in the file</h3>" + _table(
            ["ACL", "decisions"],
            [(acl_label(r), r["decisions"]) for r in usage["not_in_acl_file_acls"]],
            {1},
        )
    return (
        "<section><h2>ACL usage</h2>"
        f"{tiles}<h3>Most used ACLs (decisions)</h3>{used}"
        f"<h3>Unused ACLs (decided nothing in the window)</h3>{unused}"
        f"<h3>Redundant ACLs (every request they decide, another ACL decides the same way)</h3>"
        f"{redundant}<h3>Can be removed together (no decision of the window changes)</h3>"
        f"{removable}{missing}"
        '<p class="note">The audit names one deciding ACL per decision; every request is asked '
        "again for all the ACLs that decide it. A redundant ACL can go alone, not with the ACL "
        "that covers it: the removal list never holds both.</p></section>"
    )


def _flip_table(rows: list[dict[str, Any]]) -> str:
    """The largest flips; a `groups` column (the session's groups, part of the key: an ACL of
    one of them may be what allowed the request) when any of them has groups."""
    shown = rows[:50]
    groups = any(r.get("groups") for r in shown)
    return _table(
        [
            "principal",
            *(["groups"] if groups else []),
            "host",
            "operation",
            "resource",
            "events",
            "recorded",
            "candidate rule",
            "clients",
            "APIs",
        ],
        [
            (
                r["principal"],
                *([", ".join(r.get("groups") or [])] if groups else []),
                r["host"],
                r["operation"],
                _resource(r),
                r["count"],
                r["recorded_decision"] + ("" if r["enforced"] else " (dry-run)"),
                r["candidate_rule"],
                " ".join(c for c in r["client_ids"] if c),
                " ".join(r["apis"]),
            )
            for r in shown
        ],
        {5 if groups else 4},
    )


def _whatif(w: dict[str, Any] | None) -> str:
    if not w:
        return ""
    tiles = _tiles(
        [
            ("events that would be DENIED", w["to_denied"]["events"], "denied"),
            ("request shapes breaking", w["to_denied"]["keys"], "denied"),
            ("events newly ALLOWED", w["to_allowed"]["events"], "allowed"),
            ("dry-run denials still denied", w["dry_run_still_denied"]["events"], "dry"),
            ("events unchanged", w["unchanged"]["events"], "muted"),
        ]
    )
    breaking = hbar_chart(
        [(r["principal"], r["events"]) for r in w.get("to_denied_by_principal", [])[:15]],
        DENIED,
        empty="no client would break",
    )
    opened = hbar_chart(
        [(r["principal"], r["events"]) for r in w.get("to_allowed_by_principal", [])[:15]],
        ALLOWED,
        empty="nothing newly allowed",
    )
    still = hbar_chart(
        [
            (r["principal"], r["events"])
            for r in w.get("dry_run_still_denied_by_principal", [])[:15]
        ],
        DRY_RUN,
        empty="none",
    )
    source = escape(str(w.get("candidate_acl_file", "")))
    return (
        f"<section><h2>What-if: candidate policy <code>{source}</code></h2>{tiles}"
        "<div class='cols'>"
        f"<div><h3>Principals that would break (events flipping to DENIED)</h3>{breaking}</div>"
        f"<div><h3>Principals newly allowed</h3>{opened}</div>"
        f"<div><h3>Dry-run denials that stay denied (break once enforced)</h3>{still}</div>"
        "</div>"
        f"<h3>Flips to DENIED</h3>{_flip_table(w.get('to_denied_list', []))}"
        f"<h3>Flips to ALLOWED</h3>{_flip_table(w.get('to_allowed_list', []))}</section>"
    )


def _malformed(inputs: dict[str, Any]) -> str:
    bad = inputs.get("malformed") or {}
    if not bad.get("count"):
        return ""
    shown = len(bad.get("sample", []))
    table = _table(
        ["file", "line", "reason", "text"],
        [
            (r["file"], r["line"], r["reason"], (r["text"] or "")[:120])
            for r in bad.get("sample", [])
        ],
        {1},
    )
    return f"<section><h2>Malformed lines: {bad['count']:,} (first {shown} shown)</h2>{table}</section>"


def render_page(title: str, summary: dict[str, Any], whatif: dict[str, Any] | None = None) -> str:
    """The whole page; sections appear when their data is in the summaries."""
    inputs = summary.get("inputs", {})
    files = inputs.get("files", {})
    nfiles = len(files.get("jsonl", [])) + len(files.get("parquet", []))
    rng = summary.get("time_range") or {}
    window = inputs.get("window") or {}
    lines = [
        f"generated {escape(str(summary.get('generated_at', '')))} · {nfiles} input file(s) · "
        f"{inputs.get('lines', 0):,} lines",
        f"events from {escape(str(rng.get('first') or '—'))} to {escape(str(rng.get('last') or '—'))}"
        + (
            f" · window {escape(str(window.get('since') or '…'))} – {escape(str(window.get('until') or '…'))}"
            if window.get("since") or window.get("until")
            else ""
        ),
    ]
    body = []
    if "events" in summary:
        if not summary["events"]:
            body.append(
                "<section><h2>No events</h2><p class='empty'>The input holds no audit "
                "events in the window.</p></section>"
            )
        body += [
            _overview(summary),
            _timeline(summary),
            _tops(summary),
            _acl_usage(summary.get("acl_usage")),
        ]
    body += [_whatif(whatif), _malformed(inputs)]
    header = "".join(f"<p>{line}</p>" for line in lines)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{escape(title)}</title>"
        f"<style>{CSS}</style></head><body><header><h1>{escape(title)}</h1>{header}</header>"
        f"<main>{''.join(body)}</main></body></html>\n"
    )
