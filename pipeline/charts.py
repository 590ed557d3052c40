"""Inline SVG charts for report.html: no JavaScript library, no network, no fonts to fetch.

Each function returns an `<svg>` string; hovering a bar shows its exact value (SVG <title>).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

ALLOWED = "#3b8f5a"
DENIED = "#c8423b"
DRY_RUN = "#e9a23b"
NEUTRAL = "#4a6fa5"
MUTED = "#9aa5b1"
FONT = 'font-family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif"'


def human(n: float) -> str:
    """1234 -> 1.2k, 5600000 -> 5.6M: labels that fit next to a bar."""
    n = float(n)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= limit:
            value = n / limit
            return f"{value:.1f}{suffix}" if value < 100 else f"{value:.0f}{suffix}"
    return f"{n:.0f}"


def nice_ceiling(value: float) -> float:
    """The next 1/2/5 x 10^k at or above value, for a y axis that reads well."""
    if value <= 0:
        return 1
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        top = step * 10**exponent
        if top >= value:
            return top
    return 10 ** (exponent + 1)


def _truncate(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def hbar_chart(
    items: Sequence[tuple[str, float]],
    color: str = NEUTRAL,
    width: int = 560,
    label_chars: int = 34,
    empty: str = "nothing to show",
) -> str:
    """Horizontal bars, largest first as given: (label, value)."""
    if not items:
        return f'<p class="empty">{escape(empty)}</p>'
    bar_h, gap, label_w, value_w = 18, 6, 8 * label_chars // 1.25, 56
    label_w = int(label_w)
    height = len(items) * (bar_h + gap) + gap
    top = max(v for _, v in items) or 1
    plot_w = width - label_w - value_w
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" '
        f'style="max-width:100%;height:auto" role="img" xmlns="http://www.w3.org/2000/svg" {FONT} font-size="12">'
    ]
    for i, (label, value) in enumerate(items):
        y = gap + i * (bar_h + gap)
        w = max(1.0, plot_w * value / top) if value else 0
        text = escape(_truncate(str(label), label_chars))
        parts.append(
            f"<g><title>{escape(str(label))}: {value:,.0f}</title>"
            f'<text x="{label_w - 6}" y="{y + bar_h - 5}" text-anchor="end" fill="#222">{text}</text>'
            f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" rx="2" fill="{color}"/>'
            f'<text x="{label_w + w + 4:.1f}" y="{y + bar_h - 5}" fill="#444">{human(value)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def stacked_timeline(
    points: Sequence[dict],
    series: Sequence[tuple[str, str, str]],
    width: int = 1120,
    height: int = 260,
) -> str:
    """Stacked bars over time. points: {"start": iso, key: value...}; series: (key, label, color)."""
    if not points:
        return '<p class="empty">no events in the window</p>'
    left, right, top_pad, bottom = 56, 12, 28, 36
    plot_w, plot_h = width - left - right, height - top_pad - bottom
    totals = [sum(p.get(key, 0) for key, _, _ in series) for p in points]
    y_max = nice_ceiling(max(totals) or 1)
    slot = plot_w / len(points)
    bar_w = max(1.0, slot * 0.85)
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" style="max-width:100%;height:auto" role="img" '
        f'xmlns="http://www.w3.org/2000/svg" {FONT} font-size="11">'
    ]
    for i in range(5):  # horizontal grid with labels
        value = y_max * i / 4
        y = top_pad + plot_h - plot_h * i / 4
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e3e7eb"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#666">{human(value)}</text>'
        )
    for i, point in enumerate(points):
        x = left + i * slot + (slot - bar_w) / 2
        base = top_pad + plot_h
        tip = [f"{point['start']}"]
        for key, label, color in series:
            value = point.get(key, 0)
            tip.append(f"{label}: {value:,}")
            if not value:
                continue
            h = plot_h * value / y_max
            base -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{base:.1f}" width="{bar_w:.1f}" height="{h:.1f}" fill="{color}"/>'
            )
        parts.append(
            f'<rect x="{x:.1f}" y="{top_pad}" width="{bar_w:.1f}" height="{plot_h}" '
            f'fill="transparent"><title>{escape(chr(10).join(tip))}</title></rect>'
        )
    ticks = min(6, len(points))
    for t in range(ticks):
        i = round(t * (len(points) - 1) / max(1, ticks - 1))
        x = left + i * slot + slot / 2
        label = points[i]["start"][:16].replace("T", " ")
        anchor = "start" if t == 0 else "end" if t == ticks - 1 else "middle"
        x = left if anchor == "start" else width - right if anchor == "end" else x
        parts.append(
            f'<text x="{x:.1f}" y="{height - bottom + 16}" text-anchor="{anchor}" fill="#666">'
            f"{escape(label)}</text>"
        )
    lx = left
    for _, label, color in series:
        parts.append(
            f'<rect x="{lx}" y="6" width="12" height="12" fill="{color}"/>'
            f'<text x="{lx + 16}" y="16" fill="#333">{escape(label)}</text>'
        )
        lx += 24 + 7 * len(label)
    parts.append("</svg>")
    return "".join(parts)


def split_bar(parts: Sequence[tuple[str, float, str]], width: int = 1120) -> str:
    """One 100% bar split into (label, value, color) shares, e.g. allowed vs denied."""
    total = sum(v for _, v, _ in parts)
    if not total:
        return ""
    out = [
        f'<svg class="chart" viewBox="0 0 {width} 26" width="{width}" style="max-width:100%;height:auto" role="img" '
        f'xmlns="http://www.w3.org/2000/svg" {FONT} font-size="12">'
    ]
    x = 0.0
    for label, value, color in parts:
        if not value:
            continue
        w = width * value / total
        share = f"{100 * value / total:.1f}%"
        out.append(
            f"<g><title>{escape(label)}: {value:,.0f} ({share})</title>"
            f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="26" fill="{color}"/>'
        )
        if w > 110:
            out.append(f'<text x="{x + 8:.1f}" y="17" fill="#fff">{escape(label)} {share}</text>')
        out.append("</g>")
        x += w
    out.append("</svg>")
    return "".join(out)
