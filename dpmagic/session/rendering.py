"""Formatting for people: answers, the compact budget line, plain labels, rounding for display.

Nothing here changes what is charged: amounts are rounded *for display only* (:func:`clean`, :func:`fmt`: the
one formatting helper of every amount shown — answers, panel, ``%dpbudget``, previews, ledger reports), the
charge itself is always the unrounded value kept by the accountant.  Query numbers shown to the analyst are one
numbering, 1..n in the order the queries were charged (:func:`query_numbers`), everywhere: the answers'
cost lines, the panel, ``%dpbudget``, the plots and ``dpmagic ledger show`` (ledger event ids are an
implementation detail).  Times are shown to the second (:func:`when`), counts with their noun (:func:`plural`).
pandas is imported on use: the ledger commands format amounts without it.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpmagic.accountant.accountant import PersonBounds
    from dpmagic.accountant.bounds import BoundsSummary
    from dpmagic.accountant.currency import Currency
    from dpmagic.session.results import QueryResult
    from dpmagic.session.session import Session

__all__ = [
    "BOUND_LABELS",
    "bounds_html",
    "bounds_rows",
    "bounds_text",
    "row_text",
    "person_charged_by",
    "person_note",
    "person_rows",
    "NEARLY_SPENT",
    "budget_line_html",
    "budget_line_text",
    "budget_state",
    "clean",
    "fmt",
    "numbered",
    "plural",
    "query_numbers",
    "when",
]

#: Fraction of the budget from which the panel and the budget line show the "nearly spent" state.
NEARLY_SPENT = 0.8
#: Relative slack below which a leftover is float noise (shown as 0; the charge keeps the exact value).
_DISPLAY_RTOL = 1e-9

#: Plain labels of the four bounds, with the technical name (for tooltips and docs).
BOUND_LABELS: dict[str, tuple[str, str]] = {
    "sequential": ("all added up", "sequential composition: the sum of every query's cost"),
    "chromatic": (
        "disjoint groups",
        "colouring (chromatic) bound: queries split into groups of mutually disjoint ones; each group costs "
        "its most expensive query",
    ),
    "clique": (
        "overlapping set",
        "clique bound: the costliest set of queries that pairwise share a row of the domain",
    ),
    "overlap": (
        "one person's worst case",
        "maximum overlap: the most that the queries covering any single row of the domain add up to "
        "(what dpmagic charges with the exact bound)",
    ),
}


def clean(x: float, scale: float = 1.0) -> float:
    """``x`` with float leftovers removed, for display only: rounded to 9 digits relative to ``scale``
    (``0.15000000000000002`` → ``0.15``, ``0.9999999999999999`` → ``1``)."""
    digits = 9
    if scale > 0 and math.isfinite(scale):
        digits = max(0, 9 - int(math.floor(math.log10(scale))))
    if not math.isfinite(float(x)):
        return float(x)
    v = round(float(x), digits)
    return v + 0.0  # no "-0"


def fmt(x: float, scale: float = 1.0, spec: str = ".4g") -> str:
    """Display form of an amount of budget (float leftovers rounded away)."""
    return format(clean(x, scale), spec)


def plural(n: int, one: str, many: str | None = None) -> str:
    """``1 query``, ``2 queries``, ``0 queries``."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def when(created: float) -> str:
    """A ledger time for display: local date and time to the second (never nanoseconds)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(created))


def budget_state(spent: float, total: float) -> tuple[str, float]:
    """``("ok" | "nearly" | "exhausted", fraction charged)`` for display (exhausted = nothing left to show)."""
    frac = clean(spent / total) if total > 0 else 0.0
    if clean(total - spent, total) <= 0:
        return "exhausted", min(frac, 1.0)
    return ("nearly" if frac >= NEARLY_SPENT else "ok"), frac


_STATE_COLOR = {"ok": "#2e7d32", "nearly": "#b26a00", "exhausted": "#b00020"}
_STATE_WORDS = {
    "ok": "",
    "nearly": "nearly spent",
    "exhausted": "budget exhausted: a query on a fully charged region is refused",
}


def budget_line_text(spent: float, total: float, currency: Currency, *, width: int = 20) -> str:
    """``budget ▕██████░░░░▏ 0.65 of 1 ε charged (65%), 0.35 left`` (one line)."""
    state, frac = budget_state(spent, total)
    filled = round(width * min(max(frac, 0.0), 1.0))
    bar = "█" * filled + "░" * (width - filled)
    left = max(0.0, total - spent)
    words = f" — {_STATE_WORDS[state]}" if _STATE_WORDS[state] else ""
    return (
        f"budget ▕{bar}▏ {fmt(spent, total)} of {fmt(total, total)} {currency.symbol} charged "
        f"({100 * frac:.0f}%), {fmt(left, total)} left{words}"
    )


def budget_line_html(spent: float, total: float, currency: Currency) -> str:
    """The compact budget line under every answer (CSS class ``dpmagic-budget-line``, ``data-state``)."""
    state, frac = budget_state(spent, total)
    color = _STATE_COLOR[state]
    left = max(0.0, total - spent)
    words = f" — <b>{html.escape(_STATE_WORDS[state])}</b>" if _STATE_WORDS[state] else ""
    pct = 100 * min(max(frac, 0.0), 1.0)
    return (
        f"<div class='dpmagic-budget-line' data-state='{state}' style='display:flex;align-items:center;gap:8px;"
        f"font-size:0.85em;color:{color};margin-top:2px'>"
        "<span style='display:inline-block;width:120px;height:8px;background:#e0e0e0;border-radius:4px;"
        f"overflow:hidden'><span style='display:block;height:100%;width:{pct:.1f}%;background:{color}'></span></span>"
        f"<span>budget: {fmt(spent, total)} of {fmt(total, total)} {html.escape(currency.symbol)} charged "
        f"({pct:.0f}%), {fmt(left, total)} left{words}</span></div>"
    )


def query_numbers(session: Session) -> dict[int, int]:
    """Ledger entry id → the query's number as the analyst sees it (1..n, in charging order)."""
    return {e.id: i for i, e in enumerate(session.accountant.entries(), 1)}


def numbered(frame: Any, numbers: dict[int, int]) -> Any:
    """``frame`` (with ledger entry ids in ``id``) with the queries' numbers as the analyst sees them in ``#``."""
    frame.insert(0, "#", [numbers.get(int(i), 0) for i in frame["id"]])
    return frame


def _is_count(col: str, result: QueryResult) -> bool:
    counts = {a.alias for a in result.query.aggregates if a.func == "count"}
    return any(col == a or col in (f"{a}_ci_low", f"{a}_ci_high") for a in counts)


def formatters(result: QueryResult) -> dict[str, Any]:
    """Per-column display formats: counts as whole numbers (display only), other numbers with 2 decimals."""
    import pandas as pd

    out: dict[str, Any] = {}
    aliases = {a.alias for a in result.query.aggregates}
    for col in result.df.columns:
        base = col.removesuffix("_ci_low").removesuffix("_ci_high")
        if base not in aliases or not pd.api.types.is_numeric_dtype(result.df[col]):
            continue  # GROUP BY keys are shown as they are
        if _is_count(col, result):
            out[col] = lambda x: "NaN" if pd.isna(x) else f"{round(x):,}"
        else:
            out[col] = lambda x: "NaN" if pd.isna(x) else f"{x:,.2f}"
    return out


def result_html(result: QueryResult) -> str:
    table = result.df.to_html(index=False, formatters=formatters(result), na_rep="NaN")
    notes = "".join(
        f"<div class='dpmagic-note' style='color:#8a4b00'>⚠ note: {html.escape(n)}</div>" for n in result.notes
    )
    noise = result.noise_description()
    noise_line = f"<br>noise: {html.escape(noise)}; " if noise else "<br>"
    return (
        f"{table}{notes}<div class='dpmagic-cost' style='color:#555;font-size:0.9em;margin-top:4px'>"
        f"{html.escape(result.summary())}{noise_line}95% intervals in *_ci_low / *_ci_high</div>"
        f"{budget_line_html(result.spent, result.budget, result.currency)}"
    )


def result_text(result: QueryResult) -> str:
    table = result.df.to_string(index=False, formatters=formatters(result), na_rep="NaN")
    lines = [table, *(f"note: {n}" for n in result.notes), result.summary()]
    noise = result.noise_description()
    if noise:
        lines.append(f"noise: {noise}; 95% intervals in *_ci_low / *_ci_high")
    lines.append(budget_line_text(result.spent, result.budget, result.currency))
    return "\n".join(lines)


def person_note(person: PersonBounds | None) -> str:
    """Person level: why this query is charged as it is, as a clause to append (``""`` at row level, or when the
    query composes in parallel for people as it does for rows)."""
    if person is None:
        return ""
    parts = []
    if person.note:
        parts.append(person.note)
    if person.which != "projection":
        parts.append("charged as " + person_charged_by(person.to_dict()))
    return "".join(f"; {p}" for p in parts)


def result_summary(result: QueryResult) -> str:
    """The one-line cost summary shown under a cell's result (query numbered 1..n)."""
    cur = result.currency
    total = result.budget
    used = f"{fmt(result.spent, total, '.2f')} of {fmt(total, total, '.2f')} {cur.symbol} used"
    number = result.number or result.entry_id
    if result.cached:
        return f"re-run: the stored answer of query #{number}, charged nothing; {used} (use --fresh for a new draw)"
    n = result.charge.overlaps
    overlaps = f"overlaps {n} quer{'y' if n == 1 else 'ies'}"
    charged = cur.cost(result.charge.after) - cur.cost(result.charge.before)
    default = (
        f" (no cost named: the session's default, {fmt(result.cost, total)} {cur.symbol}; name one with "
        f"--{cur.parameter})"
        if result.default_cost
        else ""
    )
    return (
        f"query #{number}: +{fmt(result.cost, total, '.2f')} {cur.symbol} asked{default}, "
        f"+{fmt(charged, total, '.2f')} charged ({result.charge.charged_as}); {overlaps}{person_note(result.charge.person)}"
        f"; {used}"
    )


def bound_header_html(key: str) -> str:
    label, tip = BOUND_LABELS[key]
    return (
        f"<th title='{html.escape(tip, quote=True)}' style='padding:0 10px;text-align:left'>{html.escape(label)}</th>"
    )


#: the technical symbol shown next to each plain label in the text rendering
_BOUND_SYMBOLS = {
    "sequential": "sequential Σ",
    "chromatic": "colouring χ",
    "clique": "clique ω",
    "overlap": "maximum overlap γ",
}


def row_text(row: dict[str, Any] | None, empty: str = "any row") -> str:
    """A domain row (a witness) as ``col=value, ...``; ``empty`` when every row is as loaded (``{}``), and
    ``none yet`` when nothing is charged (``None``)."""
    if row is None:
        return "none yet (no query charged)"
    return ", ".join(f"{k}={v!r}" for k, v in row.items()) if row else empty


def person_charged_by(person: dict[str, Any]) -> str:
    """Which of the three person-level bounds is charged, and why, in words (docs/people.md §4)."""
    k = person.get("kept_rows", 1)
    sep = ", ".join(repr(c) for c in person.get("separating", ()))
    which = person.get("charged_by")
    if which == "projection":
        return (
            f"the queries' regions on the columns constant within a person ({sep}): queries disjoint there "
            "compose in parallel"
        )
    if which == "exact":
        return (
            f"the exact worst case of one person: the most any {k} rows sharing their values of {sep} can be "
            "touched by (an integer program; a proven upper bound is charged)"
        )
    if which == "rows":
        return (
            f"{k} × one row's worst case: a person has at most {k} rows, and queries disjoint only on other "
            f"columns than {sep} may all touch one person"
        )
    return f"sequential composition: every query may touch one person (none is disjoint from another on {sep})"


def person_rows(b: BoundsSummary, scale: float = 1.0, spec: str = ".4g") -> list[tuple[str, str]]:
    """Person level: the unit and the three bounds of one person's worst case as (label, value) lines."""
    p = b.person
    if p is None:
        return []
    k = p.get("kept_rows", 1)
    return [
        ("privacy unit", b.unit),
        ("one person, by invariant columns", fmt(p["projected"], scale, spec)),
        (f"one person, {k} × one row", fmt(p["rows"], scale, spec)),
        ("one person, all added up", fmt(p["sequential"], scale, spec)),
        *([("one person, exactly", fmt(p["exact"], scale, spec))] if p.get("exact") is not None else []),
        ("one person's worst case charged by", person_charged_by(p)),
    ]


def bounds_rows(b: BoundsSummary, scale: float = 1.0, spec: str = ".4g") -> list[tuple[str, str]]:
    """The four bounds, the charged value, the saving and the worst-case row as (label, value) lines; at person
    level the four bounds are one row's and the unit and the three person-level bounds follow."""
    exact = (
        "exact" if b.overlap_exact else f"in [{fmt(b.overlap_lower, scale, spec)}, {fmt(b.overlap_upper, scale, spec)}]"
    )
    row = b.witness
    overlap_label = BOUND_LABELS["overlap"][0] if b.person is None else "one row's worst case"
    return [
        (f"{BOUND_LABELS['sequential'][0]} ({_BOUND_SYMBOLS['sequential']})", fmt(b.sequential, scale, spec)),
        (f"{BOUND_LABELS['chromatic'][0]} ({_BOUND_SYMBOLS['chromatic']})", fmt(b.chromatic, scale, spec)),
        (
            f"{BOUND_LABELS['clique'][0]} ({_BOUND_SYMBOLS['clique']})",
            fmt(b.clique, scale, spec) + ("" if b.clique_exact else "  (search timed out: an upper bound)"),
        ),
        (f"{overlap_label} ({_BOUND_SYMBOLS['overlap']})", f"{fmt(b.overlap_upper, scale, spec)}  ({exact})"),
        *person_rows(b, scale, spec),
        ("charged (upper bound)", fmt(b.charged, scale, spec)),
        ("saving vs adding up (utility gain)", f"{100 * b.saving:.1f}%"),
        (b.worst_label, row_text(row, "anyone" if b.person is not None else "any row")),
    ]


def bounds_text(
    b: BoundsSummary,
    scale: float = 1.0,
    spec: str = ".4g",
    *,
    before: Sequence[tuple[str, str]] = (),
    after: Sequence[tuple[str, str]] = (),
) -> str:
    """The one text rendering of the bounds: aligned ``label  value`` lines (``before`` / ``after``: extra lines)."""
    rows = [*before, *bounds_rows(b, scale, spec), *after]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def bounds_html(b: BoundsSummary, scale: float = 1.0, spec: str = ".4g") -> str:
    """The one HTML rendering of the bounds: plain labels with the technical name as a tooltip, and the saving."""
    exact = (
        "exact" if b.overlap_exact else f"in [{fmt(b.overlap_lower, scale, spec)}, {fmt(b.overlap_upper, scale, spec)}]"
    )
    cells = [
        (bound_header_html("sequential"), fmt(b.sequential, scale, spec)),
        (bound_header_html("chromatic"), fmt(b.chromatic, scale, spec)),
        (bound_header_html("clique"), fmt(b.clique, scale, spec) + ("" if b.clique_exact else " (upper bound)")),
        (
            bound_header_html("overlap")
            if b.person is None
            else "<th title='maximum overlap: the most the queries covering any single row add up to' "
            "style='padding:0 10px;text-align:left'>one row's worst case</th>",
            f"{fmt(b.overlap_upper, scale, spec)} ({exact})",
        ),
        (
            "<th title='how much less than adding every cost up' style='padding:0 10px;text-align:left'>saving</th>",
            f"{100 * b.saving:.1f}%",
        ),
    ]
    if b.person is not None:  # one person's worst case: what is charged, and by which bound
        tip = html.escape(person_charged_by(b.person), quote=True)
        head = f"<th title='{tip}' style='padding:0 10px;text-align:left'>one person's worst case</th>"
        cells.insert(4, (head, f"{fmt(b.charged, scale, spec)} ({html.escape(b.unit)})"))
    return (
        "<table style='border-collapse:collapse'><tr>"
        + "".join(k for k, _ in cells)
        + "</tr><tr>"
        + "".join(f"<td style='padding:0 10px'>{v}</td>" for _, v in cells)
        + "</tr></table>"
    )
