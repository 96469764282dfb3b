"""A toy aggregate in one module: SUMSQ(x), the bounded sum of squares of an int column, per cell.

Each row adds y² with y = x clamped into the column's public bounds [lo, hi] (the analyst's clamp inside them),
so its value lies in [a, b] = [min y², max y²] (a = 0 when lo ≤ 0 ≤ hi).  It is a sum of per-row values in a
public range over the query's coverage, so its sensitivity is :func:`dpmagic.noise.sensitivity.patterns` (a, b)
— add/remove: max|v|; replace-one: the range, or max|v| when a row can leave the box, (M, M) across two cells —
checked against brute force by the conformance suite.  One release; OpenDP's integer noise; 95% interval of the
noise.  Registered by the test that uses it (``register(SumSquaresUnit())``), never by the package.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlglot import exp

from dpmagic.aggregates.exactsum import exact_cell_sums
from dpmagic.aggregates.registry import AggregateUnit, PlanContext, SqlInputs, SqlResults, UnitPlan
from dpmagic.aggregates.sqlexpr import clip, col
from dpmagic.domain.schema import NumericColumn
from dpmagic.errors import UnsupportedQueryError
from dpmagic.noise.calibration import calibrate, release_integer
from dpmagic.noise.sensitivity import clamp_bounds, patterns
from dpmagic.query.model import Aggregate


def _range(lo: int, hi: int) -> tuple[int, int]:
    a = 0 if lo <= 0 <= hi else min(lo * lo, hi * hi)
    return a, max(lo * lo, hi * hi)


class SumSquaresUnit(AggregateUnit):
    kind = "sumsq"
    releases = 1

    def plan(self, agg: Aggregate, ctx: PlanContext) -> UnitPlan:
        c = ctx.schema[str(agg.column)]
        if not (isinstance(c, NumericColumn) and c.is_int):
            raise UnsupportedQueryError("SUMSQ needs an int column")
        lo, hi = (int(v) for v in clamp_bounds(c, agg.clamp))
        if max(lo * lo, hi * hi) > 2**62:
            raise UnsupportedQueryError("SUMSQ: the squares must fit in 2^62")
        a, b = _range(lo, hi)
        noise = calibrate(ctx.definition, ctx.share, patterns(a, b, ctx.coverage, replace_one=ctx.replace_one))
        return UnitPlan(agg, noise, lo, hi)

    def exact(self, u: UnitPlan, values: np.ndarray, cell: np.ndarray, n_cells: int) -> Any:
        y = np.clip(np.asarray(values, dtype=np.int64), np.int64(u.lo), np.int64(u.hi))
        return exact_cell_sums(cell, y * y, n_cells)

    def sql(self, u: UnitPlan, alias: str, b: SqlInputs) -> Any:
        y = clip(col(str(u.agg.column)), int(u.lo), int(u.hi))
        k = b.value(exp.Mul(this=exp.paren(y), expression=exp.paren(y.copy())))
        b.exact_sum(f"sq_{alias}", k, _range(int(u.lo), int(u.hi))[1])
        return None

    def read(self, u: UnitPlan, alias: str, handle: Any, r: SqlResults) -> Any:
        return r.per_cell(f"sq_{alias}")

    def release(self, u: UnitPlan, inputs: Any, level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        noisy = release_integer(inputs, u.plan)
        h = u.plan.ci_halfwidth(level)
        return noisy, noisy - h, noisy + h

    def halfwidth(self, u: UnitPlan, level: float = 0.95) -> float:
        return float(u.plan.ci_halfwidth(level))

    def sensitivities(self, u: UnitPlan) -> dict[str, Any]:
        return {"sumsq": u.plan}

    def integer_releases(self, u: UnitPlan, inputs: Any) -> dict[str, list[int]]:
        return {"sumsq": [int(v) for v in inputs]}
