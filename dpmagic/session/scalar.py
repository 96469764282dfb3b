"""A query with a scalar subquery (``WHERE age > (SELECT AVG(age) FROM t)``): two releases in sequence.

1. Before anything is charged, both parts are checked with public information only: the inner statement parses
   as a query of one value, and the outer parses and plans with the subquery's condition dropped (its widest
   region, which covers the region of every possible threshold) and with a placeholder constant in it.
2. The inner query is answered by :meth:`dpmagic.Session.query` — the one release path: checked against the
   budget, charged and recorded before its rows are read — and its *noisy* value is taken as a public constant.
3. The outer query, with that constant written in, is answered the same way; its coverage is computed with the
   constant, like any literal's.

The query's cost c is split over the two releases by sequential composition (each gets half of c's weight: ε/2,
ρ/2, μ/√2), so the whole costs c, as for conditional aggregates of different conditions; ``max`` and ``ci=`` are
refused (a number, or the session's default).  If the outer release fails after the inner was charged, the inner stays charged
and released (it *was* released: its value is public from then on) and the error says so; nothing of the
outer is released.  A dry run (:func:`scalar_preview`) shows both: the inner's, and the outer's over its widest
region (the charge of the actual outer depends on the noisy threshold and can only be lower or equal there, as
computed before the inner's charge).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from dpmagic.errors import BudgetExceededError, DPMagicError, UnsupportedQueryError
from dpmagic.query.scalar import ScalarSubquery
from dpmagic.releases.postprocess import tidy
from dpmagic.session.costs import CostSpec, parse_cost, session_cost
from dpmagic.session.results import Preview, PublicResult, QueryResult, ScalarPreview

if TYPE_CHECKING:
    from dpmagic.session.session import Session

__all__ = ["scalar_query", "scalar_preview", "threshold_of"]


def _check(session: Session, sq: ScalarSubquery, spec: CostSpec, ci: float | None, min_rows: int | None) -> float:
    """Everything that can be refused before the inner charge, from public information only; returns the cost of
    each of the two releases (half the weight of the query's cost: ε/2, ρ/2, μ/√2)."""
    if spec == "max" or ci is not None:
        raise UnsupportedQueryError(
            "a scalar subquery takes a number as its cost (split over its two releases), not "
            + ("'max'" if spec == "max" else "ci="),
            hint="give e.g. --epsilon 1: the threshold and the outer query get half of it each",
        )
    inner = session.parse(sq.inner)
    if inner.is_public or inner.groups or inner.n_cells != 1:
        raise UnsupportedQueryError(f"({sq.inner}): a scalar subquery returns one aggregate value, without GROUP BY")
    widest = session.parse(sq.outer(None))
    session.parse(sq.outer(0.0))  # the comparison itself, with a number in place of the subquery
    if widest.is_public:
        raise UnsupportedQueryError("the outer query of a scalar subquery needs an aggregate")
    cur = session.currency
    total = session_cost(session, widest, spec, ci=None, min_rows=min_rows)  # the cost given, or the default
    each = cur.cost(cur.weight(total) / 2)
    session._mechanism(inner, each)
    session._mechanism(widest, each)  # planning refusals (a quantile under μ-GDP …) now, before any charge
    # both releases must fit: the inner's charge can take what the outer needs on its region (sequential
    # composition adds weights), so refuse now rather than release a threshold that no outer query can use
    room = session.affordable(widest)
    if cur.weight(total) > cur.weight(room) * (1 + 1e-12):
        raise BudgetExceededError(
            f"refused: the threshold ({sq.inner}) and then the outer query cost {cur.format(total)} together "
            f"({cur.format(each)} each), more than the {cur.format(room)} affordable on the outer query's region; "
            "nothing was charged",
            hint="give the query a smaller cost",
        )
    return each


def threshold_of(result: QueryResult) -> tuple[float, float | None, float | None, str]:
    """The released value of a one-value query, its 95% interval (None when it states none) and its name."""
    df = result.df
    names = [c for c in df.columns if not (str(c).endswith("_ci_low") or str(c).endswith("_ci_high"))]
    name = str(names[0])
    value = float(df[name].iloc[0])
    lo = float(df[f"{name}_ci_low"].iloc[0]) if f"{name}_ci_low" in df.columns else None
    hi = float(df[f"{name}_ci_high"].iloc[0]) if f"{name}_ci_high" in df.columns else None
    return value, lo, hi, name


def _note(sq: ScalarSubquery, inner: QueryResult, value: float, lo: float | None, hi: float | None) -> str:
    interval = f" (95% interval {lo:.6g} to {hi:.6g})" if lo is not None and hi is not None else " (no interval stated)"
    number = f"query #{inner.number}" if inner.number else "its own query"
    how = "re-used from the stored answer, free" if inner.cached else f"released and charged first as {number}"
    return (
        f"the threshold ({sq.inner}) is itself a noisy value: {value:.6g}{interval}, {how}; this answer is about "
        f"the rows with {sq.shown.replace('(' + sq.inner + ')', repr(value))}, a public constant, not the true "
        "aggregate"
    )


def scalar_query(
    session: Session,
    sq: ScalarSubquery,
    cost: CostSpec,
    named: dict[str, CostSpec],
    *,
    ci: float | None,
    min_rows: int | None,
    fresh: bool,
    postprocess: tuple[str, ...] | list[str],
) -> QueryResult:
    spec = parse_cost(session.currency, cost, named)
    each = _check(session, sq, spec, ci, min_rows)
    tidy(pd.DataFrame(), session.parse(sq.outer(None)), session.schema, postprocess)  # unknown options: now
    inner = session.query(sq.inner, each, min_rows=min_rows, fresh=fresh)
    assert isinstance(inner, QueryResult)
    value, lo, hi, _ = threshold_of(inner)
    released = f"query #{inner.number}" if inner.number else "the inner query"
    if not math.isfinite(value):
        raise DPMagicError(
            f"the threshold ({sq.inner}) was released and charged as {released}, but its noisy value is not a "
            "number (an AVG over too few rows is not shown); the outer query was not run and charged nothing",
            hint="widen the inner query's WHERE or give it more budget",
        )
    try:
        outer = session.query(sq.outer(value), each, min_rows=min_rows, fresh=fresh, postprocess=postprocess)
    except DPMagicError as exc:
        exc.args = (
            f"{exc} — the threshold ({sq.inner}) was released and charged first as {released} (value {value:.6g}); "
            "it stays charged and released",
        )
        exc.threshold = inner  # type: ignore[attr-defined]
        raise
    assert isinstance(outer, QueryResult)
    outer.threshold = inner
    outer.extra_notes = (*outer.extra_notes, _note(sq, inner, value, lo, hi))
    return outer


def scalar_preview(session: Session, sq: ScalarSubquery, **kwargs: Any) -> ScalarPreview:
    """Both dry runs: the inner query's, and the outer's over its widest region (the condition on the threshold
    dropped).  Reads no data, spends nothing."""
    spec = parse_cost(session.currency, kwargs.get("cost"), {k: kwargs.get(k) for k in ("epsilon", "rho", "mu")})
    each = _check(session, sq, spec, kwargs.get("ci"), kwargs.get("min_rows"))
    inner = session.preview(sq.inner, each, min_rows=kwargs.get("min_rows"))
    outer = session.preview(sq.outer(None), each, min_rows=kwargs.get("min_rows"))
    assert isinstance(inner, Preview) and not isinstance(outer, PublicResult)
    return ScalarPreview(inner=inner, outer=outer, shown=sq.shown)
