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

__all__ = ["BudgetWidget", "NEARLY_SPENT", "PanelView", "RemoteBudgetWidget", "panel_text", "remote_panel_text"]

_MAX_ROWS = 500  # rows rendered in the query table (the newest); the ledger keeps all of them


def _panel(parts: list[tuple[Any, str | None]]) -> Any:
    """The panel's box (class ``dpmagic-budget``) of ``parts`` in order, each given its CSS class (the browser
    test and the JupyterLab theme find them by it)."""
    for widget, cls in parts:
        if cls is not None:
            widget.add_class(cls)
    box = w.VBox(
        [widget for widget, _ in parts],
        layout=w.Layout(border="1px solid #ccc", padding="6px", width="100%", max_width="100%", overflow="auto"),
    )
    box.add_class("dpmagic-budget")
    return box


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
        self.widget = _panel(
            [
                (self.title, None),
                (self.progress, "dpmagic-progress"),
                (self.numbers, "dpmagic-numbers"),
                (self.bounds, "dpmagic-bounds"),
                (self.approx, "dpmagic-approx"),
                (self.worst, "dpmagic-worst"),
                (self.status, "dpmagic-status"),
                (self.working, "dpmagic-working"),
                (self.queries, "dpmagic-queries"),
            ]
        )
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

    def text(self) -> str:
        """The panel as plain text (:func:`panel_text`)."""
        return panel_text(self.session)


_STATE_FLAG = {
    "ok": "",
    "nearly": " — <b style='color:#b26a00'>nearly spent</b>",
    "exhausted": " — <b style='color:#b00020'>exhausted: a query on a fully charged region is refused</b>",
}


class RemoteBudgetWidget:
    """The live panel of a server session (:class:`~dpmagic.presentation.remote.RemoteSession`): your quota and
    the data set's global budget as the server reports them (``GET /budget/view``: your own queries only), with
    your queries newest first.  Refreshed after every request you make that may charge (the session's events) and
    on demand (:meth:`refresh`, the panel's "refresh" button: someone else's queries move the global budget).

    The parts and CSS classes of :class:`BudgetWidget`, and ``dpmagic-global`` (the global budget's bar).  What
    only the server knows is not drawn here: the bounds of everyone's queries and the worst-case row stay there
    (``%dpbudget --map`` replays your own charges)."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.view: dict[str, Any] = {}
        cur = session.currency
        self.title = w.HTML(
            f"<b>dpmagic budget</b> — data set {html.escape(session.dataset)} on {html.escape(session.url)}, "
            f"{cur.definition}"
        )

        def bar(description: str) -> w.FloatProgress:
            layout = w.Layout(width="auto", max_width="100%")
            return w.FloatProgress(value=0.0, min=0.0, max=1.0, description=description, layout=layout)

        self.progress = bar(f"your {cur.symbol}")
        self.numbers = w.HTML(layout=_fits())
        self.global_progress = bar(f"global {cur.symbol}")
        self.global_numbers = w.HTML(layout=_fits())
        self.status = w.HTML(layout=_fits())
        self.button = w.Button(description="refresh", tooltip="ask the server for the budgets now")
        self.button.on_click(lambda _: self.refresh())
        self.queries = w.HTML(layout=_fits())
        self.widget = _panel(
            [
                (self.title, None),
                (self.progress, "dpmagic-progress"),
                (self.numbers, "dpmagic-numbers"),
                (self.global_progress, "dpmagic-global"),
                (self.global_numbers, "dpmagic-global-numbers"),
                (self.status, "dpmagic-status"),
                (self.button, "dpmagic-refresh"),
                (self.queries, "dpmagic-queries"),
            ]
        )
        self.refresh()
        session.subscribe(self.on_event)

    def on_event(self, kind: str, info: dict[str, Any]) -> None:
        """Session callback after a request that may charge: ``charged`` / ``cached`` / ``refused`` / ``failed``."""
        if kind not in ("charged", "cached", "refused", "failed") or not self.refresh():
            return
        number = next((e["number"] for e in self.view["entries"] if e["entry"] == info.get("entry")), None)
        query = f"query #{number}" if number is not None else "the query"
        if kind == "refused":
            self.progress.bar_style = "danger"
            message = _without_prefix(info.get("message", ""), "refused")
            said = message if message.lower().startswith("refused") else "refused: " + message  # "refused by …"
            self.status.value = _status("✗ " + said, "#b00020")
        elif kind == "cached":
            self.status.value = _status(f"↺ re-run of {query}: stored answer, charged nothing", "#555")
        elif kind == "charged":
            self.status.value = _status(f"✓ {query} answered", "#2e7d32")
        elif kind == "failed":
            self.status.value = _status("✗ error: " + _without_prefix(info.get("message", ""), "error"), "#b00020")

    def refresh(self) -> bool:
        """Ask the server for your budget view and redraw every part; False (said in the status line, the last
        view kept) when the server cannot be asked."""
        from dpmagic.errors import DPMagicError

        try:
            self.view = self.session.budget_view()
        except DPMagicError as exc:
            self.status.value = _status(f"✗ could not refresh from the server: {exc}", "#b00020")
            return False
        v, cur = self.view, self.session.currency
        q, g = v["quota"], v["global"]
        for progress, part in ((self.progress, q), (self.global_progress, g)):
            state, _ = budget_state(part["spent"], part["budget"])
            progress.max = part["budget"]
            progress.value = min(part["spent"], part["budget"])
            progress.bar_style = {"ok": "success", "nearly": "warning", "exhausted": "danger"}[state]
        state, frac = budget_state(q["spent"], q["budget"])
        total = q["budget"]
        self.numbers.value = (
            f"<span class='dpmagic-state' data-state='{state}'>your quota: charged {fmt(q['spent'], total, '.2f')} "
            f"of {fmt(total, total, '.2f')} {cur.symbol} ({100 * frac:.0f}%), remaining "
            f"{fmt(q['remaining'], total, '.2f')} {cur.symbol} · {plural(q['queries'], 'query', 'queries')} · "
            f"bound: exact{_STATE_FLAG[state]}</span>"
        )
        gstate, gfrac = budget_state(g["spent"], g["budget"])
        gt = g["budget"]
        self.global_numbers.value = (
            f"<span class='dpmagic-global-state' data-state='{gstate}'>global budget (everyone's queries, by their "
            f"maximum overlap): charged {fmt(g['spent'], gt, '.2f')} of {fmt(gt, gt, '.2f')} {cur.symbol} "
            f"({100 * gfrac:.0f}%), remaining {fmt(g['remaining'], gt, '.2f')} {cur.symbol}{_STATE_FLAG[gstate]}"
            "</span>"
        )
        self.queries.value = _remote_query_table(v["entries"], q["queries"], total)
        return True

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def text(self) -> str:
        """The panel as plain text (:func:`remote_panel_text`)."""
        return remote_panel_text(self.session, self.view)


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


def _remote_query_table(entries: list[dict[str, Any]], count: int, total: float) -> str:
    """A server session's own queries, newest first (the local table's columns)."""
    rows = []
    for e in list(reversed(entries))[:_MAX_ROWS]:
        sql = " ".join(str(e["sql"]).split())
        short = sql if len(sql) <= 160 else sql[:159] + "…"
        rows.append(
            f"<tr><td>{int(e['number'])}</td><td class='dpmagic-sql' title='{html.escape(sql, quote=True)}' "
            f"style='font-family:monospace;word-break:normal;overflow-wrap:normal;white-space:normal;min-width:14em'>"
            f"{html.escape(short)}</td><td>{fmt(e['cost'], total, '.3g')}</td>"
            f"<td>{fmt(e['charged_after'], total, '.3g')}</td><td>{html.escape(str(e['bound']))}</td>"
            f"<td>{time.strftime('%H:%M:%S', time.localtime(e['time']))}</td></tr>"
        )
    shown = min(len(entries), _MAX_ROWS)
    more = f"<div>… {count - shown} older queries in the ledger</div>" if count > shown else ""
    return (
        "<div style='max-height:420px;overflow-y:auto;overflow-x:auto;border-top:1px solid #eee'>"
        "<table style='font-size:0.85em;width:100%;word-break:normal;line-height:1.25'><tr style='white-space:nowrap'><th>#</th>"
        "<th style='text-align:left'>SQL</th><th>cost</th><th>charged after</th><th>bound</th><th>time</th></tr>"
        f"{''.join(rows)}</table></div>{more}"
    )


def remote_panel_text(session: Any, view: dict[str, Any]) -> str:
    """A server session's panel as plain text: your quota, the global budget, your last ten queries."""
    from dpmagic.session.rendering import budget_line_text

    cur = session.currency
    if not view:
        return (
            f"dpmagic budget — data set {session.dataset} on {session.url}: not known yet (the server did not answer)"
        )
    q, g = view["quota"], view["global"]
    lines = [
        f"dpmagic budget — data set {session.dataset} on {session.url}, {cur.definition}",
        "your quota: " + budget_line_text(q["spent"], q["budget"], cur),
        f"{plural(q['queries'], 'query', 'queries')} of yours",
        "global (everyone's queries): " + budget_line_text(g["spent"], g["budget"], cur),
    ]
    entries = view["entries"]
    for e in entries[-10:][::-1]:
        sql = " ".join(str(e["sql"]).split())[:90]
        lines.append(f"  #{int(e['number']):<3} {fmt(e['cost'], q['budget'], '.3g'):>7} {cur.symbol}  {sql}")
    if q["queries"] > 10:
        lines.append(f"  … {q['queries'] - 10} older queries (the session's ledger_frame() lists them all)")
    return "\n".join(lines)


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

    def __init__(self, panel: BudgetWidget | RemoteBudgetWidget) -> None:
        self.panel = panel

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = dict(self.panel.widget._repr_mimebundle_(**kwargs) or {})
        bundle["text/plain"] = self.panel.text()
        return bundle

    def __repr__(self) -> str:
        return self.panel.text()
