"""COUNT(DISTINCT col): the number of distinct values of a column in each cell.

Sensitivity: COUNT(DISTINCT) is not a sum of per-row values, but it moves like a sum of values in [0, 1]:

* add/remove one row: the row's value is either new to its cell (+1) or already present (0): Δ ≤ 1;
* replace one row x → y in the same cell: removing x lowers the count by at most 1, adding y raises it by at
  most 1, and the two cannot both happen in the same direction: |Δ| ≤ 1;
* replace one row leaving (or entering) the box: one cell by −1 or 0 (+1 or 0);
* replace one row across two GROUP BY cells: one cell −1 or 0, the other +1 or 0.

These are exactly the change patterns of a sum of values in [0, 1] (M = W = 1), so the release's
:class:`~dpmagic.noise.sensitivity.Sensitivity` is :func:`dpmagic.noise.sensitivity.patterns` (0, 1) over the query's
coverage, calibrated by :func:`dpmagic.noise.calibration.calibrate` (brute-force tested in
``tests/test_aggregate_sensitivity.py``).

The release is OpenDP's integer noise (discrete Laplace / discrete Gaussian) on the exact distinct count,
clipped at 0 (post-processing).  Its 95% interval is the noise's (before the clip).  Cost: one release.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from sqlglot import exp

from dpmagic.accountant.currency import Definition
from dpmagic.aggregates.registry import AggregateUnit, PlanContext, SqlInputs, SqlResults, UnitPlan, register
from dpmagic.aggregates.sqlexpr import col
from dpmagic.domain.schema import CategoricalColumn, NumericColumn, Schema
from dpmagic.domain.sets import CategorySet, IntervalSet
from dpmagic.noise.calibration import Noise, calibrate, release_integer
from dpmagic.noise.sensitivity import Coverage, distinct_sensitivity, patterns

if TYPE_CHECKING:
    from dpmagic.query.model import Aggregate, Query

__all__ = ["CountDistinctUnit", "distinct_cap", "plan", "exact", "release"]


def plan(definition: Definition, share: float, cov: Coverage, *, replace_one: bool, column: str | None = None) -> Noise:
    """The noise of COUNT(DISTINCT ``column``): :func:`dpmagic.noise.sensitivity.distinct_sensitivity` (at person
    level, COUNT(DISTINCT id) counts persons: 1 per cell a person is in)."""
    if column is None:
        return calibrate(definition, share, patterns(0, 1, cov, replace_one=replace_one))
    return calibrate(definition, share, distinct_sensitivity(cov, column, replace_one=replace_one))


def exact(values: np.ndarray, cell: np.ndarray, n_cells: int) -> np.ndarray:
    """Distinct values per cell (exact).  ``values`` and ``cell`` cover every row of the table; ``cell ==
    n_cells`` is the discarded bin (rows outside the WHERE filter), so the work does not depend on the box.
    O(rows log rows)."""
    out = np.zeros(n_cells + 1, dtype=np.int64)
    if len(values):
        frame = pd.DataFrame({"c": cell, "v": values})
        counts = frame.drop_duplicates().groupby("c").size()
        out[counts.index.to_numpy(dtype=np.int64)] = counts.to_numpy(dtype=np.int64)
    return out[:n_cells]


def release(
    counts: np.ndarray, noise: Noise, level: float = 0.95, cap: float = math.inf
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The noisy distinct counts, clipped into [0, ``cap``] — ``cap`` is the number of declared values of the
    column inside the WHERE box (:func:`distinct_cap`, public), which no exact count can exceed — and their
    interval intersected with the same range (it holds the exact value, so coverage is kept; where the noise
    pushed the whole interval past an end, the interval is the whole range).  Post-processing only."""
    noisy = release_integer(counts, noise)
    h = noise.ci_halfwidth(level)
    clipped_high = noisy + h >= noise.clamp  # the overflow guard may have clamped the exact value (never, here)
    raw_low, raw_high = noisy - h, np.where(clipped_high, np.inf, noisy + h)
    low, high = np.clip(raw_low, 0.0, cap), np.clip(raw_high, 0.0, cap)
    past = (high < low) | ((high == low) & (raw_high > raw_low))
    low, high = np.where(past, 0.0, low), np.where(past, cap, high)
    return np.clip(noisy, 0.0, cap), low, high


def distinct_cap(query: Query, schema: Schema, column: str) -> float:
    """The most distinct values ``column`` can take inside the query's WHERE box (its covering box): the declared
    categories in the box's set, or the integers in an int column's set; ∞ for a float column.  Public."""
    c = schema[column]
    s = query.where.get(column)
    if query.where.is_empty():
        return 0.0
    if isinstance(c, CategoricalColumn):
        return float(len(s) if isinstance(s, CategorySet) else c.size)
    assert isinstance(c, NumericColumn)
    if not c.is_int:
        return math.inf
    if isinstance(s, IntervalSet):
        return float(sum(int(iv.hi) - int(iv.lo) + 1 for iv in s.intervals))
    return float(int(c.upper) - int(c.lower) + 1)


class CountDistinctUnit(AggregateUnit):
    """COUNT(DISTINCT col): one integer release per cell."""

    kind = "count_distinct"
    releases = 1

    def plan(self, agg: Aggregate, ctx: PlanContext) -> UnitPlan:
        noise = plan(ctx.definition, ctx.share, ctx.coverage, replace_one=ctx.replace_one, column=str(agg.column))
        return UnitPlan(agg, noise, lo=0.0, hi=distinct_cap(ctx.query, ctx.schema, str(agg.column)))

    def describe(self, u: UnitPlan) -> dict[str, str]:
        return {f"count_distinct({u.agg.column})": str(u.plan)}

    def exact(self, u: UnitPlan, values: np.ndarray, cell: np.ndarray, n_cells: int) -> Any:
        return exact(values, cell, n_cells)

    def sql(self, u: UnitPlan, alias: str, b: SqlInputs) -> Any:
        k = b.value(col(str(u.agg.column)))
        b.aggregate(f"d_{alias}", exp.Count(this=exp.Distinct(expressions=[exp.column(k)])))
        return None

    def read(self, u: UnitPlan, alias: str, handle: Any, r: SqlResults) -> Any:
        return np.asarray(r.per_cell(f"d_{alias}"), dtype=np.int64)

    def release(self, u: UnitPlan, inputs: Any, level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return release(inputs, u.plan, level, u.hi)

    def halfwidth(self, u: UnitPlan, level: float = 0.95) -> float:
        return float(u.plan.ci_halfwidth(level))

    def sensitivities(self, u: UnitPlan) -> dict[str, Any]:
        return {"count_distinct": u.plan}

    def integer_releases(self, u: UnitPlan, inputs: Any) -> dict[str, list[int]]:
        return {"count_distinct": [int(v) for v in inputs]}


register(CountDistinctUnit())
