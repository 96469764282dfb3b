"""The live budget panel (ipywidgets): one panel per session that updates after every query.

The panel subscribes to its :class:`~dpmagic.session.Session`'s events, so it changes in place after every
``%%dpquery`` in any cell, without being displayed again.  It shows the total budget, what is charged (the
session's bound) and what remains as a progress bar; the four bounds side by side with the saving versus
sequential composition; the (ε, δ) equivalent for zCDP and GDP sessions; the current worst-case row; and
the queries, newest first, in a scrolling table that stays usable at hundreds of queries.  It turns amber at
80% of the budget and red when a query was refused.

CSS classes (a contract for the browser test): ``dpmagic-budget`` (the panel), ``dpmagic-progress`` (the bar),
``dpmagic-numbers``, ``dpmagic-bounds``, ``dpmagic-approx``, ``dpmagic-worst``, ``dpmagic-status``,
``dpmagic-queries``.
"""

from __future__ import annotations

import html
import time
from typing import Any

import ipywidgets as w

from dpmagic.session import Session

__all__ = ["BudgetWidget", "NEARLY_SPENT"]

#: Fraction of the budget from which the panel shows the "nearly spent" state.
NEARLY_SPENT = 0.8
_MAX_ROWS = 500  # rows rendered in the query table (the newest); the ledger keeps all of them


class BudgetWidget:
    """A live view of one session's budget; ``display(panel.widget)`` or just ``panel`` in a notebook."""

    def __init__(self, session: Session) -> None:
        self.session = session
        cur = session.currency
        self.title = w.HTML(f"<b>dpmagic budget</b> — {html.escape(session.schema.table)}, {cur.definition}")
        self.progress = w.FloatProgress(
            value=0.0, min=0.0, max=session.budget.total, description=f"{cur.symbol} charged", bar_style="success"
        )
        self.numbers = w.HTML()
        self.bounds = w.HTML()
        self.approx = w.HTML()
        self.worst = w.HTML()
        self.status = w.HTML()
        self.queries = w.HTML()
        self.widget = w.VBox(
            [self.title, self.progress, self.numbers, self.bounds, self.approx, self.worst, self.status, self.queries],
            layout=w.Layout(border="1px solid #ccc", padding="6px", width="100%"),
        )
        for widget, cls in [
            (self.widget, "dpmagic-budget"),
            (self.progress, "dpmagic-progress"),
            (self.numbers, "dpmagic-numbers"),
            (self.bounds, "dpmagic-bounds"),
            (self.approx, "dpmagic-approx"),
            (self.worst, "dpmagic-worst"),
            (self.status, "dpmagic-status"),
            (self.queries, "dpmagic-queries"),
        ]:
            widget.add_class(cls)
        self.refresh()
        session.subscribe(self.on_event)

    # -- events -------------------------------------------------------------------------------------------
    def on_event(self, kind: str, info: dict[str, Any]) -> None:
        """Session callback: ``computing`` / ``charged`` / ``cached`` / ``refused`` / ``failed``."""
        if kind == "computing":
            self.status.value = _status("⏳ " + info.get("message", "computing the maximum overlap…"), "#555")
            return
        self.refresh()
        if kind == "refused":
            self.progress.bar_style = "danger"
            self.status.value = _status("⛔ refused: " + info.get("message", ""), "#b00020")
        elif kind == "cached":
            self.status.value = _status(
                f"↺ re-run of query #{info.get('entry')}: stored answer, charged nothing", "#555"
            )
        elif kind == "charged":
            self.status.value = _status(
                f"✓ query #{info.get('entry')} answered in {info.get('seconds', 0.0):.2f} s", "#2e7d32"
            )
        elif kind == "failed":
            self.status.value = _status("error: " + info.get("message", ""), "#b00020")

    def refresh(self) -> None:
        """Redraw every part from the session's current state."""
        s = self.session
        cur = s.currency
        spent, total = s.spent, s.budget.total
        frac = spent / total if total > 0 else 0.0
        self.progress.max = total
        self.progress.value = min(spent, total)
        self.progress.bar_style = "warning" if frac >= NEARLY_SPENT else "success"
        nearly = " — <b>nearly spent</b>" if frac >= NEARLY_SPENT else ""
        self.numbers.value = (
            f"charged {spent:.2f} of {total:.2f} {cur.symbol} ({100 * frac:.0f}%), remaining {s.remaining:.2f} "
            f"{cur.symbol} · {len(s.accountant)} queries · bound: {html.escape(s.accountant.charged_as)}{nearly}"
        )
        b = s.bounds_summary()
        exact = "exact" if b["overlap_exact"] else f"in [{b['overlap_lower']:.3g}, {b['overlap_upper']:.3g}]"
        cells = [
            ("sequential", f"{b['sequential']:.3g}"),
            ("colouring", f"{b['chromatic']:.3g}"),
            ("clique", f"{b['clique']:.3g}" + ("" if b["clique_exact"] else " (≤)")),
            ("max overlap", f"{b['overlap_upper']:.3g} ({exact})"),
            ("saving", f"{100 * b['saving']:.1f}%"),
        ]
        self.bounds.value = (
            "<table style='border-collapse:collapse'><tr>"
            + "".join(f"<th style='padding:0 10px;text-align:left'>{k}</th>" for k, _ in cells)
            + "</tr><tr>"
            + "".join(f"<td style='padding:0 10px'>{v}</td>" for _, v in cells)
            + "</tr></table>"
        )
        if cur.definition == "pure":
            self.approx.value = ""
        else:
            eps, delta = s.approx_dp()
            self.approx.value = f"equivalent to ({eps:.3g}, {delta:.0e})-DP"
        row = b["witness"]
        self.worst.value = "worst-case row: " + (
            html.escape(", ".join(f"{k}={v!r}" for k, v in row.items())) if row else "—"
        )
        self.queries.value = _query_table(s)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


def _status(text: str, color: str) -> str:
    return f"<span style='color:{color}'>{html.escape(text)}</span>"


def _query_table(s: Session) -> str:
    entries = s.accountant.entries()
    cur = s.currency
    rows = []
    for e in reversed(entries[-_MAX_ROWS:]):
        sql = " ".join(e.sql.split())
        rows.append(
            f"<tr><td>{e.id}</td><td style='font-family:monospace'>{html.escape(sql[:160])}</td>"
            f"<td>{e.cost:.3g}</td><td>{cur.cost(e.charged_after):.3g}</td><td>{html.escape(e.bound)}</td>"
            f"<td>{time.strftime('%H:%M:%S', time.localtime(e.created))}</td></tr>"
        )
    more = f"<div>… {len(entries) - _MAX_ROWS} older queries in the ledger</div>" if len(entries) > _MAX_ROWS else ""
    return (
        "<div style='max-height:220px;overflow-y:auto;border-top:1px solid #eee'>"
        "<table style='font-size:0.85em;width:100%'><tr style='white-space:nowrap'><th>#</th><th>SQL</th>"
        f"<th>cost</th><th>charged after</th><th>bound</th><th>time</th></tr>{''.join(rows)}</table></div>{more}"
    )
