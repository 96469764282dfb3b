"""Reports of a ledger for people: CSV, JSON and a self-contained HTML page (the custodian's exports), (the session's tables of its
charges are :mod:`dpmagic.accountant.tables`).

Presentation only: it reads a :class:`~dpmagic.accountant.ledger.Ledger` or an
:class:`~dpmagic.accountant.accountant.Accountant` through their public methods and never writes to them.  Nothing here shows a function of the rows: the ledger holds none (see docs/threat-model.md).
"""

from __future__ import annotations

import csv
import html
import io
import json
import time
from typing import Any

from dpmagic.accountant.ledger import Ledger, entries_from_events, verify
from dpmagic.session.rendering import fmt, plural

__all__ = ["export_ledger", "dataset_label", "EXPORT_FORMATS"]

#: the formats of :func:`export_ledger`
EXPORT_FORMATS = ("csv", "json", "html")


def export_ledger(ledger: Ledger, fmt: str) -> str:
    """All charges of every key as ``csv``, ``json`` or a self-contained ``html`` report."""
    rows = []
    for key in ledger.ledger_keys():
        opening = ledger.opening(key) or {}
        number = 0
        for e in entries_from_events(ledger.events(key), keep_reset=True):
            counted = not e.extra.get("reset", False)
            number += counted
            rows.append(
                {
                    "ledger_key": key,
                    "dataset": dataset_label(opening),
                    "definition": opening.get("definition", ""),
                    # the query's number as the notebook shows it (1..n among this key's counted charges)
                    "number": number if counted else None,
                    "id": e.id,
                    "time": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e.created)),
                    "sql": " ".join(e.sql.split()),
                    "predicates": _coverage_text(e.coverage),
                    "cost": e.cost,
                    "weight": e.weight,
                    "bound": e.bound,
                    "charged_after": e.charged_after,
                    "noise": _noise_text(e.details),
                    "status": e.status,
                    "counted": not e.extra.get("reset", False),
                }
            )
    if fmt == "json":
        return json.dumps(rows, indent=2)
    if fmt == "csv":
        buf = io.StringIO()
        fields = list(rows[0]) if rows else ["ledger_key", "id", "sql", "cost"]
        w = csv.DictWriter(buf, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
        return buf.getvalue()
    if fmt == "html":
        return _html_report(ledger, rows)
    raise ValueError(f"unknown export format {fmt!r}: use csv, json or html")


def _coverage_text(coverage: dict[str, Any]) -> str:
    if not coverage:
        return "whole domain"
    parts = []
    for c, spec in sorted(coverage.items()):
        if "values" in spec:
            parts.append(f"{c} ∈ {{{', '.join(map(str, spec['values']))}}}")
        else:
            ivs = [f"{'[' if lc else '('}{lo:g}, {hi:g}{']' if hc else ')'}" for lo, hi, lc, hc in spec["intervals"]]
            parts.append(f"{c} ∈ {' ∪ '.join(ivs) or '∅'}")
    return " AND ".join(parts)


def _noise_text(details: dict[str, Any]) -> str:
    parts = []
    if "count_noise" in details:
        n = details["count_noise"]
        parts.append(f"count: {n['kind']} scale {n['scale']:.4g}")
    for col, n in details.get("sum_noise", {}).items():
        parts.append(f"sum({col}): {n['kind']} scale {n['scale']:.4g}")
    return "; ".join(parts)


def dataset_label(opening: dict[str, Any]) -> str:
    """How a key's data set is named in reports: its declared id, else its table and domain (no row data)."""
    if opening.get("dataset"):
        return str(opening["dataset"])
    return f"(no id) table {opening.get('table', '?')}, domain {str(opening.get('domain', ''))[:12]}"


def _amount(x: float | None) -> str:
    return "—" if x is None else fmt(x, x or 1.0)


def _shown(row: dict[str, Any], scale: float) -> dict[str, str]:
    """A report row for display: amounts rounded for display only (the CSV and JSON keep the exact values), the
    query numbered as in the notebook (``—`` for a charge a reset no longer counts)."""
    out = {k: str(v) for k, v in row.items()}
    out["#"] = "—" if row["number"] is None else str(row["number"])
    for k in ("cost", "weight", "charged_after"):
        out[k] = fmt(row[k], scale)
    return out


def _html_report(ledger: Ledger, rows: list[dict[str, Any]]) -> str:
    note = ""
    if ledger.path is None:
        ok = "intact"
    elif ledger.keyed:
        if ledger._key is None:
            ok, note = "not checked", " (a keyed ledger: verify it with the custodian key)"
        else:
            ok = "intact" if verify(ledger.path, ledger._key)[0] else "BROKEN"
            note = " (HMAC chain checked with the custodian key)"
    else:
        ok = "intact" if verify(ledger.path)[0] else "BROKEN"
        note = " (unkeyed SHA-256 chain: detects accidents, not tampering)"
    head = ["#", "time", "sql", "predicates", "cost", "bound", "charged_after", "noise", "status", "counted"]
    scales = {k: ledger.budget_of(k) or 1.0 for k in ledger.ledger_keys()}
    shown = [_shown(r, scales.get(r["ledger_key"], 1.0)) for r in rows]
    body = "\n".join("<tr>" + "".join(f"<td>{html.escape(s[h])}</td>" for h in head) + "</tr>" for s in shown)
    keys = "".join(
        f"<li><code>{html.escape(k)}</code>: {html.escape(dataset_label(ledger.opening(k) or {}))}, "
        f"{html.escape(str((ledger.opening(k) or {}).get('definition', '')))} budget {_amount(ledger.budget_of(k))}</li>"
        for k in ledger.ledger_keys()
    )
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>dpmagic ledger report</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;font-size:0.9em}}th{{background:#f0f0f0}}</style></head>
<body><h1>dpmagic ledger report</h1>
<p>File: <code>{html.escape(str(ledger.path or ":memory:"))}</code>; hash chain: <b>{ok}</b>{html.escape(note)}; {plural(len(rows), "charged query", "charged queries")}.</p>
<ul>{keys}</ul>
<table><tr>{"".join(f"<th>{h}</th>" for h in head)}</tr>
{body}
</table></body></html>
"""
