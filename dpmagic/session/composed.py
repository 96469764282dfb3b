"""Several conditional aggregates in one SELECT (:mod:`dpmagic.query.composed`): one release per condition,
composed sequentially, joined on the GROUP BY keys.

The query's cost c is split over its K parts by sequential composition — each part gets the cost whose weight
is 1/K of c's (ε/K, ρ/K; μ/√K under μ-GDP) — so the whole answer costs c, as any query with several
aggregates.  Before anything is charged every part is parsed and planned and the K costs together are checked
against what is affordable on the WHERE region (every part's region lies inside it).  Each part is then answered
by :meth:`dpmagic.Session.query` (the one release path: charged and recorded before its rows are read); if a
part fails after earlier ones were charged, those stay charged and released and the error says which.  A key
outside a part's region (its condition excludes it, known from the schema) holds 0 for a COUNT or SUM, with the
interval [0, 0]; NaN for another aggregate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from dpmagic.errors import BudgetExceededError, DPMagicError, UnsupportedQueryError
from dpmagic.query.composed import Composed
from dpmagic.releases.postprocess import tidy
from dpmagic.session.costs import CostSpec, parse_cost, session_cost
from dpmagic.session.results import ComposedPreview, ComposedResult, Preview, QueryResult

if TYPE_CHECKING:
    from dpmagic.session.session import Session

__all__ = ["composed_query", "composed_preview"]


def _plan(session: Session, comp: Composed, cost: CostSpec, named: dict[str, CostSpec], min_rows: int | None) -> float:
    """Check every part (public information only) and return each part's cost."""
    spec = parse_cost(session.currency, cost, named)
    if spec == "max":
        raise UnsupportedQueryError(
            "cost 'max' is not supported with conditional aggregates of different conditions (several releases)",
            hint="give a number: it is split over the releases",
        )
    queries = [session.parse(p.sql) for p in comp.parts]
    widest = session.parse(comp.widest)
    total = session_cost(session, widest, spec, ci=None, min_rows=min_rows)  # the cost given, or the default
    cur = session.currency
    each = cur.cost(cur.weight(total) / len(comp.parts))
    for q in queries:
        session._mechanism(q, each)  # planning refusals (a quantile under μ-GDP …) now, before any charge
    room = session.affordable(widest)
    if cur.weight(total) > cur.weight(room) * (1 + 1e-12):
        raise BudgetExceededError(
            f"refused: the {len(comp.parts)} releases of this query cost {cur.format(total)} together, more than the "
            f"{cur.format(room)} affordable on its region; nothing was charged"
        )
    return each


def composed_query(
    session: Session,
    comp: Composed,
    cost: CostSpec,
    named: dict[str, CostSpec],
    *,
    ci: float | None,
    min_rows: int | None,
    fresh: bool,
    postprocess: tuple[str, ...] | list[str],
) -> ComposedResult:
    if ci is not None:
        raise UnsupportedQueryError("ci= is not supported with conditional aggregates of different conditions")
    each = _plan(session, comp, cost, named, min_rows)
    for p in comp.parts:
        tidy(pd.DataFrame(), session.parse(p.sql), session.schema, postprocess)
    results: list[QueryResult] = []
    for p in comp.parts:
        try:
            r = session.query(p.sql, each, min_rows=min_rows, fresh=fresh, postprocess=postprocess)
        except DPMagicError as exc:
            if results:
                done = ", ".join(f"#{r.number}" for r in results)
                exc.args = (f"{exc} — the releases before it ({done}) were charged and released; they stay so",)
                exc.released = results  # type: ignore[attr-defined]
            raise
        assert isinstance(r, QueryResult)
        results.append(r)
    return ComposedResult(df=_join(session, comp, results), parts=results, cost=_total(session, each, comp))


def _total(session: Session, each: float, comp: Composed) -> float:
    cur = session.currency
    return cur.cost(cur.weight(each) * len(comp.parts))


def _join(session: Session, comp: Composed, results: list[QueryResult]) -> pd.DataFrame:
    keys = list(comp.keys)
    widest = session.parse(comp.widest)
    base = pd.DataFrame(widest.region_keys(), columns=list(widest.group_by)) if keys else pd.DataFrame(index=[0])
    if keys:
        base.columns = keys
    out = base.copy()
    for r in results:
        df = r.df.reset_index(drop=True)
        kinds = {a.alias: a.func for a in r.query.aggregates}
        cols = [c for c in df.columns if c not in keys]
        if keys:
            present = df[keys].assign(__in=True)
            merged = base.merge(df, on=keys, how="left").merge(present, on=keys, how="left")
            outside = merged["__in"].isna().to_numpy()
        else:
            merged, outside = df, np.zeros(1, dtype=bool)
        for c in cols:
            values = merged[c].to_numpy(dtype=float, copy=True)
            name = str(c).removesuffix("_ci_low").removesuffix("_ci_high")
            if kinds.get(name) in ("count", "sum"):
                values[outside] = 0.0  # the condition excludes the key: its true value is 0 (public)
            out[c] = values
    ordered = []
    for name in comp.order:
        ordered += [c for c in (name, f"{name}_ci_low", f"{name}_ci_high") if c in out.columns]
    return out[ordered].reset_index(drop=True)


def composed_preview(
    session: Session, comp: Composed, cost: CostSpec, named: dict[str, CostSpec], *, min_rows: int | None
) -> ComposedPreview:
    each = _plan(session, comp, cost, named, min_rows)
    parts = [session.preview(p.sql, each, min_rows=min_rows) for p in comp.parts]
    assert all(isinstance(p, Preview) for p in parts)
    return ComposedPreview(parts=parts, conditions=[p.condition for p in comp.parts])  # type: ignore[arg-type]
