"""Several conditional aggregates in one SELECT (:mod:`dpmagic.query.composed`): one release per condition,
composed sequentially, joined on the GROUP BY keys.

The query's cost c is split over its K parts by sequential composition — each part gets the cost whose weight
is 1/K of c's (ε/K, ρ/K; μ/√K under μ-GDP) — so the whole answer costs c, as any query with several
aggregates.  Before anything is charged every part is parsed and planned and the K costs together are checked
against what is affordable on the WHERE region (every part's region lies inside it).  Each part is then answered
by :meth:`dpmagic.Session.query` (the one release path: charged and recorded before its rows are read); if a
part fails after earlier ones were charged, those stay charged and released and the error says which.  A key
outside a part's region (its condition excludes it, known from the schema) holds 0 for a COUNT or SUM, with the
interval [0, 0]; NaN for another aggregate.  Arithmetic across the parts' aggregates (a rate
``COUNT(*) FILTER (WHERE c) * 1.0 / COUNT(*)``) is evaluated on the joined answer, with an interval from the k
aggregates' intervals at level 1 − 0.05/k (a union bound over the parts' releases, interval arithmetic:
:mod:`dpmagic.query.intervals`); the hidden aggregates it reads are shown in the parts' answers only.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import sqlglot

from dpmagic.aggregates.basic import integer_interval
from dpmagic.errors import BudgetExceededError, DPMagicError, UnsupportedQueryError
from dpmagic.query.composed import Composed
from dpmagic.query.evaluate import evaluate
from dpmagic.query.intervals import Unsupported, aggregates_read, interval_of, level_column, union_level
from dpmagic.query.outputs import stand_in_env
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
    for q in queries:
        for a in q.aggregates:
            if a.alias in comp.hidden and a.func not in ("count", "sum"):
                raise UnsupportedQueryError(
                    f"arithmetic across conditional aggregates reads COUNT and SUM only, not {a.func.upper()} "
                    f"({a}): its interval is combined from theirs",
                    hint="write an average as SUM(x) FILTER (WHERE c) * 1.0 / COUNT(*) FILTER (WHERE c)",
                )
    for name, sql in comp.computed:  # evaluable on any released answer (stand-in values), before any charge
        env, n = stand_in_env(list(comp.hidden), [])
        try:
            with np.errstate(all="ignore"):
                evaluate(sqlglot.parse_one(sql), env, n, lambda c: c.name)
        except Exception as exc:
            raise UnsupportedQueryError(
                f"the SELECT list: {name} cannot be computed from the released values ({exc})"
            ) from None
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
    if comp.computed and postprocess:
        raise UnsupportedQueryError(
            "post-processing options (--nonneg, --integer) are not supported with arithmetic across conditional "
            "aggregates: the combined interval is computed from the released values as drawn",
            hint="ask without the option, or select the aggregates bare",
        )
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
    sizes = sorted({len(_read(sql, comp.hidden)) for _, sql in comp.computed} - {0, 1})
    for r in results:
        df = _union_columns(r, comp.hidden, sizes)
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
            name = re.sub(r"_ci_(low|high)(@\d+)?$", "", str(c))
            if kinds.get(name) in ("count", "sum"):
                values[outside] = 0.0  # the condition excludes the key: its true value is 0 (public)
            out[c] = values
    notes: list[str] = []
    for name, sql in comp.computed:
        read = _read(sql, comp.hidden)
        k = len(read)
        env = {str(c): out[c].to_numpy() for c in out.columns}
        n = len(out)
        with np.errstate(all="ignore"):
            out[name] = np.asarray(evaluate(sqlglot.parse_one(sql), env, n, lambda c: c.name), dtype=float)
            bases = {a: (env[level_column(a, "ci_low", k)], env[level_column(a, "ci_high", k)]) for a in read}
            try:
                out[f"{name}_ci_low"], out[f"{name}_ci_high"] = interval_of(sqlglot.parse_one(sql), bases, env, n)
            except Unsupported as exc:
                notes.append(f"{name}: no interval is stated ({exc} is not combined by interval arithmetic)")
    ordered = []
    for name in comp.order:
        ordered += [c for c in (name, f"{name}_ci_low", f"{name}_ci_high") if c in out.columns]
    frame = out[ordered].reset_index(drop=True)
    frame.attrs["dp_notes"] = notes
    return frame


def _read(sql: str, hidden: tuple[str, ...]) -> list[str]:
    return aggregates_read(sql, set(hidden))


def _union_columns(r: QueryResult, hidden: tuple[str, ...], sizes: list[int]) -> pd.DataFrame:
    """The part's answer with, for each hidden COUNT / SUM it releases, its interval at the union-bound level
    1 − 0.05/k for each k in ``sizes`` (:func:`dpmagic.aggregates.basic.integer_interval` on the released noisy
    value and its public noise: post-processing, nothing drawn again)."""
    df = r.df.reset_index(drop=True).copy()
    for a in r.query.aggregates:
        if a.alias not in hidden or a.alias not in df.columns:
            continue
        noise = r.noise["count"] if a.func == "count" else r.noise[f"sum({a.sum_key})"]
        values = df[a.alias].to_numpy(dtype=float)
        for k in sizes:
            lo, hi, _ = integer_interval(values, noise, union_level(0.95, k))
            df[level_column(a.alias, "ci_low", k)], df[level_column(a.alias, "ci_high", k)] = lo, hi
    return df


def composed_preview(
    session: Session, comp: Composed, cost: CostSpec, named: dict[str, CostSpec], *, min_rows: int | None
) -> ComposedPreview:
    each = _plan(session, comp, cost, named, min_rows)
    parts = [session.preview(p.sql, each, min_rows=min_rows) for p in comp.parts]
    assert all(isinstance(p, Preview) for p in parts)
    return ComposedPreview(parts=parts, conditions=[p.condition for p in comp.parts])  # type: ignore[arg-type]
