"""The live budget panel (ipywidgets): one panel per session that updates after every query.

The panel subscribes to its :class:`~dpmagic.session.session.Session`'s events, so it changes in place after every
``%%dpquery`` in any cell, without being displayed again.  It shows the total budget, what is charged (the
session's bound) and what remains as a progress bar; the four bounds side by side with the saving versus
sequential composition; the (ε, δ) equivalent for zCDP and GDP sessions; the current worst-case row; and
the queries, newest first, in a scrolling table that stays usable at hundreds of queries.  It turns amber at
80% of the budget, and red — saying "budget exhausted" — when nothing is left or a query was refused.
Amounts are rounded for display only (float leftovers such as ``1.5e-14`` show as 0); queries are numbered
1..n as everywhere else; the bounds carry plain labels with the technical name as a tooltip.

In JupyterLab (with the ``sidecar`` package) the magics put the panel in the right side bar, where it stays in
sight however far the notebook scrolls; in Notebook 7 (no side panel) and elsewhere it stays under the cell that
bound the session (:func:`dpmagic.presentation.magics.budget.panel_place`).  Every part fits the panel's width
and scrolls sideways where the side bar is narrow, so nothing is cut.  :class:`PanelView` shows a text panel
where widgets cannot render (terminal IPython).

CSS classes (a contract for the browser test): ``dpmagic-budget`` (the panel), ``dpmagic-progress`` (the bar),
``dpmagic-numbers``, ``dpmagic-bounds``, ``dpmagic-approx``, ``dpmagic-worst``, ``dpmagic-status``,
``dpmagic-queries``.
"""

from __future__ import annotations

import html
import time
from typing import Any

import ipywidgets as w

from dpmagic.session.rendering import (
    NEARLY_SPENT,
    bounds_html,
    bounds_text,
    budget_state,
    fmt,
    plural,
    query_numbers,
    row_text,
)
from dpmagic.session.session import Session

__all__ = ["BudgetWidget", "NEARLY_SPENT", "PanelView", "panel_text"]

_MAX_ROWS = 500  # rows rendered in the query table (the newest); the ledger keeps all of them


class BudgetWidget:
    """A live view of one session's budget; ``display(panel.widget)`` or just ``panel`` in a notebook."""

    def __init__(self, session: Session) -> None:
        self.session = session
        cur = session.currency
        self.title = w.HTML(f"<b>dpmagic budget</b> — {html.escape(session.schema.table)}, {cur.definition}")
        self.progress = w.FloatProgress(
            value=0.0,
            min=0.0,
            max=session.budget.total,
            description=f"{cur.symbol} charged",
            bar_style="success",
            layout=w.Layout(width="auto", max_width="100%"),  # as wide as the panel, never wider (a narrow side bar)
        )
        self.numbers = w.HTML(layout=_fits())
        self.bounds = w.HTML(layout=_fits())
        self.approx = w.HTML(layout=_fits())
        self.worst = w.HTML(layout=_fits())
        self.status = w.HTML(layout=_fits())
        # elapsed accounting time against the time limit; shown only while the accountant works > 0.5 s
        self.working = w.FloatProgress(value=0.0, min=0.0, max=1.0, bar_style="info", layout=w.Layout(display="none"))
        self.queries = w.HTML(layout=_fits())
        self.widget = w.VBox(
            [
                self.title,
                self.progress,
                self.numbers,
                self.bounds,
                self.approx,
                self.worst,
                self.status,
                self.working,
                self.queries,
            ],
            layout=w.Layout(border="1px solid #ccc", padding="6px", width="100%", max_width="100%", overflow="auto"),
        )
        for widget, cls in [
            (self.widget, "dpmagic-budget"),
            (self.progress, "dpmagic-progress"),
            (self.numbers, "dpmagic-numbers"),
            (self.bounds, "dpmagic-bounds"),
            (self.approx, "dpmagic-approx"),
            (self.worst, "dpmagic-worst"),
            (self.status, "dpmagic-status"),
            (self.working, "dpmagic-working"),
            (self.queries, "dpmagic-queries"),
        ]:
            widget.add_class(cls)
        self.refresh()
        session.subscribe(self.on_event)

    # -- events -------------------------------------------------------------------------------------------
    def on_event(self, kind: str, info: dict[str, Any]) -> None:
        """Session callback: ``computing`` / ``charged`` / ``cached`` / ``refused`` / ``failed``."""
        if kind == "computing":
            self.status.value = _status("… " + info.get("message", "computing the maximum overlap…"), "#555")
            return
        if kind == "progress":  # the accountant has worked > 0.5 s: elapsed time against its time limit
            elapsed, limit = float(info.get("elapsed", 0.0)), float(info.get("limit", 0.0) or 0.0)
            self.working.max = max(limit, elapsed, 1e-9)
            self.working.value = elapsed
            self.working.description = f"{elapsed:.1f} s"
            self.working.layout.display = None
            msg = info.get("message", "computing the maximum overlap")
            self.status.value = _status(
                f"… {msg}… {elapsed:.1f} s" + (f" (limit {limit:g} s)" if limit else ""), "#555"
            )
            return
        self.working.layout.display = "none"
        self.refresh()
        number = query_numbers(self.session).get(info.get("entry", -1), info.get("entry"))
        if kind == "refused":
            self.progress.bar_style = "danger"
            self.status.value = _status("✗ refused: " + _without_prefix(info.get("message", ""), "refused"), "#b00020")
        elif kind == "cached":
            self.status.value = _status(f"↺ re-run of query #{number}: stored answer, charged nothing", "#555")
        elif kind == "charged":
            self.status.value = _status(f"✓ query #{number} answered in {info.get('seconds', 0.0):.2f} s", "#2e7d32")
        elif kind == "failed":
            self.status.value = _status("✗ error: " + _without_prefix(info.get("message", ""), "error"), "#b00020")

    def refresh(self) -> None:
        """Redraw every part from the session's current state."""
        s = self.session
        cur = s.currency
        spent, total = s.spent, s.budget.total
        state, frac = budget_state(spent, total)
        self.progress.max = total
        self.progress.value = min(spent, total)
        self.progress.bar_style = {"ok": "success", "nearly": "warning", "exhausted": "danger"}[state]
        flag = {
            "ok": "",
            "nearly": " — <b style='color:#b26a00'>nearly spent</b>",
            "exhausted": " — <b style='color:#b00020'>budget exhausted: a query on a fully charged region is refused</b>",
        }[state]
        self.numbers.value = (
            f"<span class='dpmagic-state' data-state='{state}'>charged {fmt(spent, total, '.2f')} of "
            f"{fmt(total, total, '.2f')} {cur.symbol} ({100 * frac:.0f}%), remaining {fmt(s.remaining, total, '.2f')} "
            f"{cur.symbol} · {plural(len(s.accountant), 'query', 'queries')} · bound: "
            f"{html.escape(s.accountant.charged_as)}{flag}</span>"
        )
        b = s.bounds()
        # a narrow side bar scrolls the bounds table sideways rather than cutting its last columns
        self.bounds.value = f"<div style='overflow-x:auto;max-width:100%'>{bounds_html(b, total, '.3g')}</div>"
        if cur.definition == "pure":
            self.approx.value = ""
        else:
            eps, delta = s.approx_dp()
            self.approx.value = f"equivalent to ({eps:.3g}, {delta:.0e})-DP"
        unit = "" if b.person is None else f" (privacy unit: {html.escape(b.unit)})"
        self.worst.value = f"{b.worst_label}: " + html.escape(row_text(b.witness)) + unit
        self.queries.value = _query_table(s)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


def _fits() -> w.Layout:
    """A part of the panel that is never wider than the panel (JupyterLab's side bar may be narrow): what does not
    fit scrolls sideways inside the panel instead of being cut at its edge."""
    return w.Layout(max_width="100%", overflow="auto")


def _without_prefix(message: str, word: str) -> str:
    """``message`` without a leading ``word:`` (the session's messages may start with it: never "refused: refused:")."""
    text = message.strip()
    if text.lower().startswith(word + ":"):
        text = text[len(word) + 1 :].lstrip()
    return text


def _status(text: str, color: str) -> str:
    # glyphs present in common fonts (DejaVu, Liberation): ✓ ✗ ↺ …; long words wrap, never break mid-word
    return f"<span style='color:{color};word-break:normal;overflow-wrap:anywhere'>{html.escape(text)}</span>"


def _query_table(s: Session) -> str:
    entries = s.accountant.entries()
    cur = s.currency
    total = s.budget.total
    rows = []
    first = max(0, len(entries) - _MAX_ROWS)
    for number, e in reversed(list(enumerate(entries[first:], first + 1))):
        sql = " ".join(e.sql.split())
        short = sql if len(sql) <= 160 else sql[:159] + "…"
        rows.append(
            f"<tr><td>{number}</td><td class='dpmagic-sql' title='{html.escape(sql, quote=True)}' "
            f"style='font-family:monospace;word-break:normal;overflow-wrap:normal;white-space:normal;min-width:14em'>"
            f"{html.escape(short)}</td><td>{fmt(e.cost, total, '.3g')}</td>"
            f"<td>{fmt(cur.cost(e.charged_after), total, '.3g')}</td><td>{html.escape(e.bound)}</td>"
            f"<td>{time.strftime('%H:%M:%S', time.localtime(e.created))}</td></tr>"
        )
    more = f"<div>… {len(entries) - _MAX_ROWS} older queries in the ledger</div>" if len(entries) > _MAX_ROWS else ""
    return (
        # ~15 rows in sight before scrolling; long SQL wraps between words, never inside an identifier, and never to
        # one word per line (min-width: a narrow side bar scrolls the table sideways instead)
        "<div style='max-height:420px;overflow-y:auto;overflow-x:auto;border-top:1px solid #eee'>"
        "<table style='font-size:0.85em;width:100%;word-break:normal;line-height:1.25'><tr style='white-space:nowrap'><th>#</th>"
        "<th style='text-align:left'>SQL</th><th>cost</th><th>charged after</th><th>bound</th><th>time</th></tr>"
        f"{''.join(rows)}</table></div>{more}"
    )


def panel_text(s: Session) -> str:
    """The budget panel as plain text (terminal IPython, logs): same numbers, plain labels."""
    from dpmagic.session.rendering import budget_line_text

    cur = s.currency
    total = s.budget.total
    lines = [
        f"dpmagic budget — {s.schema.table}, {cur.definition}",
        budget_line_text(s.spent, total, cur),
        f"{plural(len(s.accountant), 'query', 'queries')} · bound: {s.accountant.charged_as}",
        bounds_text(s.bounds(), total, ".3g"),
    ]
    if cur.definition != "pure":
        eps, delta = s.approx_dp()
        lines.append(f"equivalent to ({eps:.3g}, {delta:.0e})-DP")
    entries = s.accountant.entries()
    for number, e in list(enumerate(entries, 1))[-10:][::-1]:
        lines.append(f"  #{number:<3} {fmt(e.cost, total, '.3g'):>7} {cur.symbol}  {' '.join(e.sql.split())[:90]}")
    if len(entries) > 10:
        lines.append(f"  … {len(entries) - 10} older queries (%dpbudget lists them all)")
    return "\n".join(lines)


class PanelView:
    """What the magics display for the panel: the live widget in Jupyter, a text panel where widgets cannot
    render (its ``text/plain`` is :func:`panel_text`, never the widget's raw ``VBox(...)`` repr)."""

    def __init__(self, panel: BudgetWidget) -> None:
        self.panel = panel

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = dict(self.panel.widget._repr_mimebundle_(**kwargs) or {})
        bundle["text/plain"] = panel_text(self.panel.session)
        return bundle

    def __repr__(self) -> str:
        return panel_text(self.panel.session)
