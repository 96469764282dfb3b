"""What ``%dpbudget`` displays (HTML in notebooks, text elsewhere) and the live panel the magics show.

Presentation only, through the session's public API: the bounds are rendered by
:func:`dpmagic.session.rendering.bounds_html` / :func:`~dpmagic.session.rendering.bounds_text` from :meth:`dpmagic.Session.bounds`.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from dpmagic.accountant.bounds import BoundsSummary
from dpmagic.session.rendering import (
    bounds_html,
    bounds_text,
    budget_line_html,
    budget_line_text,
    clean,
    fmt,
    plural,
    row_text,
    when,
)

if TYPE_CHECKING:  # imported on use: %load_ext stays light (benchmarks/bench_load_ext.py)
    from dpmagic.session.session import Session

__all__ = [
    "BudgetReport",
    "SPBudgetReport",
    "budget_html",
    "budget_summary",
    "numbered_frame",
    "panel_of",
    "panel_view",
]


def budget_summary(session: Session) -> dict[str, Any]:
    """Spent, remaining, the four bounds and the (ε, δ) equivalent, in the session's parameter."""
    cur = session.currency
    eps, delta = session.approx_dp()
    total = session.budget.total
    bounds = session.bounds().rounded(lambda v: clean(v, total)).to_dict()
    return {  # rounded for display (float leftovers such as 1e-14 dropped); the charge keeps the exact values
        "definition": cur.definition,
        "parameter": cur.parameter,
        "budget": total,
        "spent": clean(session.spent, total),
        "remaining": clean(session.remaining, total),
        "bound": session.bound,
        "queries": len(session.accountant),
        "approx_dp": {"epsilon": clean(eps, total), "delta": delta},
        "bounds": bounds,
    }


class BudgetReport:
    """What ``%dpbudget`` displays: HTML in notebooks, a text table elsewhere."""

    def __init__(self, session: Session, summary: dict[str, Any]) -> None:
        self.session, self.summary = session, summary

    def _repr_html_(self) -> str:
        return budget_html(self.session, self.summary)

    def __repr__(self) -> str:
        s = self.summary
        head = (
            f"dpmagic {budget_line_text(s['spent'], s['budget'], self.session.currency)}; "
            f"{plural(s['queries'], 'query', 'queries')} ({s['bound']} bound)\n"
            + bounds_text(BoundsSummary.from_dict(s["bounds"]), s["budget"])
        )
        frame = numbered_frame(self.session)
        return head + ("\n" + frame.drop(columns=["time"]).to_string(index=False) if len(frame) else "")


#: the query table's cells: numbers and words never wrap; the SQL wraps between words, never inside one, and
#: keeps a readable width (a narrow output area scrolls sideways instead of one word per line)
_ROW_STYLE = "white-space:nowrap;vertical-align:top"
_SQL_STYLE = (
    "font-family:monospace;text-align:left;white-space:normal;word-break:normal;overflow-wrap:normal;"
    "min-width:32ch;max-width:90ch"
)


def budget_html(session: Session, summary: dict[str, Any]) -> str:
    cur = session.currency
    total = summary["budget"]
    rows = numbered_frame(session)
    bounds = f"<div class='dpmagic-bounds'>{bounds_html(BoundsSummary.from_dict(summary['bounds']), total)}</div>"
    shown = BoundsSummary.from_dict(summary["bounds"])
    worst = row_text(shown.witness)
    unit = "" if shown.person is None else f" (privacy unit: {html.escape(shown.unit)})"
    head = (
        f"<div><b>dpmagic budget</b> ({html.escape(summary['bound'])} bound, "
        f"{plural(summary['queries'], 'query', 'queries')}, in {html.escape(cur.parameter)})"
        f"{budget_line_html(summary['spent'], total, cur)}{bounds}"
        f"<div class='dpmagic-worst'>{shown.worst_label}: {html.escape(worst)}{unit}</div></div>"
    )
    if not len(rows):
        return head + "<p>no queries yet</p>"
    header = "".join(
        f"<th style='text-align:{'left' if c == 'sql' else 'right'}'>{html.escape(c)}</th>" for c in rows.columns
    )
    body = "".join(
        f"<tr style='{_ROW_STYLE}'>"
        + "".join(
            f"<td style='{_SQL_STYLE}'>{html.escape(str(v))}</td>" if c == "sql" else f"<td>{html.escape(str(v))}</td>"
            for c, v in zip(rows.columns, r, strict=True)
        )
        + "</tr>"
        for r in rows.iloc[::-1].itertuples(index=False)  # newest first, as in the panel
    )
    return (
        f"{head}<div class='dpmagic-queries' style='overflow-x:auto'>"
        f"<table class='dataframe' style='border-collapse:collapse'><tr>{header}</tr>{body}</table></div>"
    )


def numbered_frame(session: Session) -> Any:
    """The ledger frame for display: the queries numbered 1..n (as in the answers, the panel and the plots), the
    SQL on one line, amounts rounded for display (:func:`~dpmagic.session.rendering.fmt`), times to the second.
    :meth:`Session.ledger_frame` keeps the exact values."""
    frame = session.ledger_frame()
    total = session.budget.total
    frame = frame.drop(columns=["id"])
    frame.insert(0, "#", range(1, len(frame) + 1))
    frame["sql"] = [" ".join(str(s).split()) for s in frame["sql"]]
    for col in ("cost", "charged after"):
        frame[col] = [fmt(v, total) for v in frame[col]]
    frame["time"] = [when(ts.timestamp()) for ts in frame["time"]]  # the frame's times are UTC instants
    return frame


class SPBudgetReport:
    """What ``%dpbudget`` displays for a statistical-privacy session (labelled: NOT differential privacy)."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def __repr__(self) -> str:
        frame = self.session.ledger_frame()
        head = f"dpmagic {self.session.budget_line()}"
        return head + ("\n" + frame.to_string(index=False) if len(frame) else "\nno SP charges yet")

    def _repr_html_(self) -> str:
        from dpmagic.statistical.sp_session import SP_LABEL

        frame = self.session.ledger_frame()
        table = frame.to_html(index=False) if len(frame) else "<p>no SP charges yet</p>"
        return (
            f"<div><b>dpmagic budget</b> — <b style='color:#b00020'>{html.escape(SP_LABEL)}</b><br>"
            f"{html.escape(self.session.budget_line())}</div>{table}"
        )


def panel_of(session: Session) -> Any:
    """The session's one live budget panel widget (created on first use)."""
    from dpmagic.presentation.widgets import BudgetWidget, RemoteBudgetWidget

    if session.panel is None:  # a server session's panel: the budgets as the server reports them
        remote = type(session).__name__ == "RemoteSession"
        session.panel = RemoteBudgetWidget(session) if remote else BudgetWidget(session)
    return session.panel.widget


def panel_view(session: Session) -> Any:
    """The panel to display: the live widget, with a text panel as its ``text/plain`` (terminal IPython)."""
    from dpmagic.presentation.widgets import PanelView

    panel_of(session)
    return PanelView(session.panel)
