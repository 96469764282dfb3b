"""The quantile unit (MEDIAN, PERCENTILE_CONT, QUANTILE, MIN, MAX): its registry entry and its inputs on every
backend — each cell's histogram over the public candidate grid (:mod:`dpmagic.aggregates.quantile`, which holds
the calibration and the release), computed by pandas with ``searchsorted`` / ``bincount``
(:func:`quantile_histograms`) and by an engine per row in SQL (:func:`quantile_bin`, :func:`grid_index`,
:func:`bin_sql`) in one more aggregate over every row grouped by the cell keys and the bin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlglot import exp

from dpmagic.aggregates import quantile
from dpmagic.aggregates.common import effective_bounds
from dpmagic.aggregates.quantile import Grid, histogram_bins
from dpmagic.aggregates.registry import AggregateUnit, PlanContext, SqlInputs, SqlResults, UnitPlan, register
from dpmagic.aggregates.sqlexpr import as_double, case, clip, col, lit
from dpmagic.domain.schema import NumericColumn

if TYPE_CHECKING:
    from dpmagic.query.model import Aggregate

__all__ = ["Binned", "QuantileUnit", "bin_sql", "grid_index", "quantile_bin", "quantile_histograms"]


@dataclass(frozen=True)
class Binned:
    """A per-row bin on a quantile's public candidate grid (:func:`dpmagic.aggregates.quantile.bins`): ``y`` =
    the value as a double clamped into [lo, hi], computed once per row in the first projection of
    :meth:`Compiler.rows`; on an affine grid a = ⌊(y − lo)·inv⌋ in the second; the bin (:func:`bin_sql`) in the
    third."""

    y: exp.Expr
    grid: Grid


def quantile_bin(x: exp.Expr, lo: float, hi: float, grid: Grid) -> Binned:
    """The bin of ``x`` (a column of the normalised view) on ``grid``, its value first converted to a double and
    clamped into [lo, hi] — the values OpenDP's scorer sees (the pandas path's ``np.clip(values.astype(float),
    lo, hi)``)."""
    return Binned(clip(as_double(x), float(lo), float(hi)), grid)


def grid_index(y: exp.Expr, g: Grid) -> exp.Expr:
    """a = ⌊(y − lo)·inv⌋ as BIGINT (:class:`~dpmagic.aggregates.quantile.Grid`, the affine grid)."""
    t = exp.Mul(this=exp.paren(exp.Sub(this=y, expression=lit(g.lo))), expression=lit(g.inv))
    return exp.cast(exp.Floor(this=t), "BIGINT")


def bin_sql(y: exp.Expr, a: exp.Expr | None, g: Grid) -> exp.Expr:
    """#{c < y} + #{c ≤ y} of the double ``y`` over the grid's candidates, exactly (as numpy's ``searchsorted``;
    :class:`~dpmagic.aggregates.quantile.Grid`): 2·(y − base) + 1 on an integer grid; on an affine grid, from
    the approximate index ``a`` and the seven candidates around it, each recomputed by the grid's formula."""
    if g.k == 1:
        c = lit(g.lo)
        return case(
            [(exp.LT(this=y.copy(), expression=c), lit(0)), (exp.GT(this=y.copy(), expression=c.copy()), lit(2))],
            lit(1),
        )
    if g.base is not None:
        j = exp.paren(exp.Sub(this=exp.cast(y.copy(), "BIGINT"), expression=lit(g.base)))
        return exp.Add(this=exp.Mul(this=lit(2), expression=j), expression=lit(1))
    assert a is not None

    def point(d: int) -> tuple[exp.Expr, exp.Expression]:  # (the index a + d, c_{a+d} by the formula)
        j = exp.paren(exp.Add(this=a.copy(), expression=lit(d))) if d else a.copy()
        w = exp.paren(exp.Mul(this=lit(g.width), expression=as_double(j.copy())))
        return j, exp.paren(exp.Add(this=lit(g.lo), expression=exp.Div(this=w, expression=lit(float(g.k - 1)))))

    def below(d: int, strict: bool) -> exp.Expr:  # [c_{a+d} < y] (strict) or [c_{a+d} ≤ y], 0 or 1
        j, c = point(d)
        cmp = (exp.LT if strict else exp.LTE)(this=c, expression=y.copy())
        whens = [
            (exp.LT(this=j, expression=lit(0)), lit(1)),
            (exp.GT(this=j.copy(), expression=lit(g.k - 1)), lit(0)),
            (cmp, lit(1)),
        ]
        return exp.paren(case(whens, lit(0)))

    terms: list[exp.Expr] = [exp.paren(exp.Sub(this=exp.Mul(this=lit(2), expression=a.copy()), expression=lit(3)))]
    terms += [below(d, False) for d in (-1, 0, 1)] + [below(d, True) for d in (-2, -1, 0, 1)]
    out = terms[0]
    for t in terms[1:]:
        out = exp.Add(this=out, expression=t)
    return out


def quantile_histograms(values: np.ndarray, cell: np.ndarray, n_cells: int, u: UnitPlan) -> np.ndarray:
    """Each cell's histogram over the quantile's candidates (:func:`dpmagic.aggregates.quantile.bins`), as an
    ``n_cells × (2K + 1)`` int64 array: one vectorised pass over every row — clamped into [lo, hi] as doubles
    (what OpenDP's scorer saw), binned, and counted with the rows outside the filter (``cell == n_cells``) in a
    discarded row of the array, never filtered out."""
    width = histogram_bins(len(u.plan.candidates))
    x = np.clip(np.asarray(values).astype(float), u.lo, u.hi)
    flat = np.asarray(cell, dtype=np.int64) * width + quantile.bins(x, u.plan.candidates)
    counts = np.bincount(flat, minlength=(n_cells + 1) * width)
    return counts.reshape(n_cells + 1, width)[:n_cells].astype(np.int64)


class QuantileUnit(AggregateUnit):
    """A quantile (``param`` = p in [0, 1]; MIN and MAX are p = 0 and 1): two releases per cell, each at the
    query's per-release share — OpenDP's exponential mechanism over the public candidate grid (its cost from
    OpenDP's privacy map), and a noisy coarse histogram of the same candidates (a COUNT's sensitivity, declared in
    :meth:`sensitivities`) from which the 95% interval is proven (:mod:`dpmagic.aggregates.quantile`)."""

    kind = "quantile"
    releases = 2

    def plan(self, agg: Aggregate, ctx: PlanContext) -> UnitPlan:
        c = ctx.schema[str(agg.column)]
        assert isinstance(c, NumericColumn) and agg.param is not None
        lo, hi = effective_bounds(agg, ctx.schema)
        if ctx.calibration.definition == "gdp":  # refused by the pick's plan, before the histogram's
            quantile.plan(lo, hi, c.is_int, agg.param, ctx.calibration, n_cells=ctx.query.n_cells)
        hist = quantile.interval_noise(ctx.definition, ctx.share, ctx.coverage, replace_one=ctx.replace_one)
        p = quantile.plan(lo, hi, c.is_int, agg.param, ctx.calibration, n_cells=ctx.query.n_cells, hist=hist)
        return UnitPlan(agg, p, lo, hi)

    def describe(self, u: UnitPlan) -> dict[str, str]:
        return {f"quantile({u.agg.column}, {u.agg.param:g})": str(u.plan)}

    def exact(self, u: UnitPlan, values: np.ndarray, cell: np.ndarray, n_cells: int) -> Any:
        return quantile_histograms(values, cell, n_cells, u)

    def sql(self, u: UnitPlan, alias: str, b: SqlInputs) -> Any:
        return b.value(quantile_bin(col(str(u.agg.column)), u.lo, u.hi, u.plan.grid))

    def read(self, u: UnitPlan, alias: str, handle: Any, r: SqlResults) -> Any:
        return r.histogram(handle, histogram_bins(len(u.plan.candidates)))

    def release(self, u: UnitPlan, inputs: Any, level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return quantile.release(inputs, u.plan, u.lo, u.hi, level)

    def sensitivities(self, u: UnitPlan) -> dict[str, Any]:
        return {} if u.plan.hist is None else {"histogram": u.plan.hist}

    def integer_releases(self, u: UnitPlan, inputs: Any) -> dict[str, list[int]]:
        """The interval's coarse histograms, cells × bins flattened (cell-major)."""
        if u.plan.hist is None:
            return {}
        return {"histogram": quantile.coarse_histograms(inputs, u.plan.edges).reshape(-1).tolist()}

    def engine_groups(self, u: UnitPlan, n_cells: int) -> int:
        return n_cells * histogram_bins(len(u.plan.candidates))


register(QuantileUnit())
