"""A self-contained HTML page for an audit report: inline SVG plots, inline CSS, no JS."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

_COLOURS = ("#2f6fb0", "#4f9d69", "#e0a030", "#d0603f", "#8a5fb0", "#999999")
_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222;max-width:70em}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.8em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;
text-align:left;font-variant-numeric:tabular-nums}th{background:#f3f3f3}
.bad{color:#b00020;font-weight:bold}.ok{color:#2e7d32}svg{display:block;margin:.5em 0}
svg text{font:12px system-ui,sans-serif}.muted{color:#777}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _when(ms: Any) -> str:
    if not ms:
        return ""
    try:
        return datetime.fromtimestamp(int(ms) / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (ValueError, OverflowError, OSError):  # a JMS timestamp no date holds
        return f"{int(ms)} ms since 1970"


def _duration(ms: Any) -> str:
    if ms is None:
        return ""
    s = int(ms) / 1000
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if abs(s) >= size:
            return f"{s / size:.1f} {unit}"
    return f"{s:.1f} s"


def figure(value: float) -> str:
    """``value`` written out in full (``:g`` made 1234567 into 1.23457e+06), to the ms for
    seconds."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.3f}".rstrip("0").rstrip(".")


def bar_chart(title: str, labels: Sequence[str], series: Mapping[str, Sequence[float]]) -> str:
    """Horizontal (stacked when several series) bars as an inline SVG element."""
    label_w, bar_w, row_h = 260.0, 420.0, 22
    totals = [sum(vals[i] for vals in series.values()) for i in range(len(labels))]
    top = max(totals, default=0) or 1
    legend_h = 20 if len(series) > 1 else 0
    height = 30 + legend_h + row_h * max(len(labels), 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" class="plot"'
        f' width="{label_w + bar_w + 80}" height="{height}" aria-label="{_e(title)}">'
        f"<title>{_e(title)}</title>"
        f'<text x="0" y="16" font-weight="bold">{_e(title)}</text>'
    ]
    if legend_h:
        for k, name in enumerate(series):
            x = label_w + k * 80
            parts.append(
                f'<rect x="{x}" y="24" width="10" height="10" fill="{_COLOURS[k % 6]}"/>'
                f'<text x="{x + 14}" y="33">{_e(name)}</text>'
            )
    if not labels:
        parts.append(f'<text x="0" y="{30 + legend_h + 14}" class="muted">no data</text>')
    for i, label in enumerate(labels):
        y = 30 + legend_h + i * row_h
        parts.append(f'<text x="0" y="{y + 15}">{_e(label[:40])}</text>')
        x = float(label_w)
        for k, vals in enumerate(series.values()):
            w = bar_w * float(vals[i]) / top
            if w > 0:
                parts.append(
                    f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}"'
                    f' fill="{_COLOURS[k % 6]}"><title>{_e(label)}: {figure(vals[i])}</title>'
                    "</rect>"
                )
            x += w
        parts.append(f'<text x="{x + 6:.1f}" y="{y + 15}">{figure(totals[i])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str], empty: str = "none") -> str:
    if not rows:
        return f'<p class="muted">{_e(empty)}</p>'
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{_e(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _backlog_rule(rule: dict[str, Any] | None) -> str:
    """One line on how the backlogs were counted (``backlog_rule`` of the report)."""
    if not rule:
        return ""
    return (
        f'<p class="muted">Backlog counted as a {_e(rule["mode"])} store '
        f"(prioritizedMessages {'on' if rule['prioritized_messages'] else 'off'}): "
        f"{_e(rule['description'])}.</p>"
    )


#: How the XA sections name a row: a MSGS row by its id, an ACKS row by its key.
_XA_ROW_KEY = ("table", "destination", "id", "client_id", "sub_name", "priority")


def _malformed_xids(rows: Sequence[dict[str, Any]], advice: str) -> str:
    """The rows whose XID XA recovery refuses, after what to do about them."""
    table = _table(rows, [*_XA_ROW_KEY, "xid", "problem"])
    return f'<p class="bad">{_e(advice)}.</p>{table}' if rows else table


def render(report: dict[str, Any]) -> str:
    """The HTML page of ``report`` (as built by :func:`spark_etl.audit.build_report`)."""
    dests = [dict(d) for d in report["destinations"]]
    subs = [dict(s) for s in report["subscriptions"]]
    names = [d["destination"] for d in dests]
    buckets = report["age_buckets"]
    age_series = {b: [d.get(f"age{b}") or 0 for d in dests] for b in buckets}
    age_series = {k: v for k, v in age_series.items() if any(v)} or {"<1m": [0] * len(dests)}
    sub_names = [f"{s['client_id']}/{s['sub_name']}" for s in subs]
    hours: dict[str, int] = {}
    for h in report["history_per_hour"]:
        hours[h["hour"]] = hours.get(h["hour"], 0) + int(h["count"])
    violations = report["violations"]
    lock = report["lock"]
    status = (
        "".join(f'<li class="bad">{_e(v)}</li>' for v in violations)
        or '<li class="ok">no threshold crossed</li>'
    )
    for d in dests:
        d["oldest"] = _when(d["oldest_timestamp"])
        d["p50 age"], d["p90 age"], d["max age"] = (
            _duration(d["age_p50_ms"]),
            _duration(d["age_p90_ms"]),
            _duration(d["age_max_ms"]),
        )
    for s in subs:
        s["oldest pending"] = _duration(s["oldest_pending_age_ms"])
    counts = report["counts"]
    sections = [
        f"<h1>mqstore audit</h1><p>Generated {_e(_when(report['generated_at']))}"
        f" &middot; prefix <code>{_e(report.get('prefix') or '(none)')}</code>"
        f" &middot; {counts['messages']} messages</p><ul>{status}</ul>",
        "<h2>Destinations</h2>",
        bar_chart("Depth per destination", names, {"messages": [d["depth"] for d in dests]}),
        bar_chart("Age distribution per destination", names, age_series),
        _table(
            dests,
            ["destination", "depth", "prepared", "oldest", "p50 age", "p90 age", "max age"],
        ),
        "<h2>Durable subscriptions</h2>",
        _backlog_rule(report.get("backlog_rule")),
        bar_chart("Backlog per subscription", sub_names, {"pending": [s["backlog"] for s in subs]}),
        _table(
            subs,
            ["container", "client_id", "sub_name", "last_acked_id", "backlog", "oldest pending"],
        ),
        "<h2>History throughput per hour</h2>",
        bar_chart("Removals per hour", list(hours), {"removed": list(hours.values())}),
        "<h2>Lock</h2>",
        _table(
            [{**lock, "lease": _when(lock.get("lease_time"))}],
            ["state", "present", "holder", "lease", "lease_age_ms", "row_lock_error"],
        ),
        f"<h2>Expired but still stored ({counts['expired']})</h2>",
        _table(report["expired"], ["id", "destination", "expiration", "jms_message_id"]),
        f"<h2>In-doubt XA rows ({counts['in_doubt']})</h2>",
        _table(report["in_doubt"], [*_XA_ROW_KEY, "last_acked_id", "xid"]),
        f"<h2>Malformed XIDs ({counts['malformed_xids']})</h2>",
        _malformed_xids(report["malformed_xids"], report["malformed_xids_advice"]),
        f"<h2>Subscriptions without messages ({counts['orphan_subscriptions']})</h2>",
        _table(report["orphan_subscriptions"], ["container", "client_id", "sub_name"]),
        f"<h2>Duplicate JMS message ids ({counts['duplicate_message_ids']})</h2>",
        _table(report["duplicate_message_ids"], ["jms_message_id", "rows", "ids"]),
        f"<h2>Undecodable messages ({counts['undecodable']})</h2>",
        _table(report["undecodable"], ["id", "destination", "decode_error"]),
        f"<h2>PRIORITY outside 0 to 9 ({counts['priority_out_of_range']})</h2>",
        _table(report["priority_out_of_range"], ["id", "destination", "priority"]),
        f"<h2>CONTAINER differing from MSG's destination ({counts['container_mismatches']})</h2>",
        _table(report["container_mismatches"], ["id", "destination", "msg_container"]),
        f"<h2>MSGID_PROD/MSGID_SEQ differing from MSG's id ({counts['msgid_mismatches']})</h2>",
        _table(
            report["msgid_mismatches"],
            ["id", "destination", "msgid_prod", "msgid_seq", "msg_msgid_prod", "msg_msgid_seq"],
        ),
        "<h2>Thresholds</h2>",
        f"<pre>{_e(json.dumps(report['thresholds'], indent=1))}</pre>",
    ]
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>mqstore audit</title><style>{_CSS}</style></head><body>"
        + "\n".join(sections)
        + "</body></html>\n"
    )


__all__ = ["bar_chart", "figure", "render"]
