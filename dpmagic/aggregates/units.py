"""Dispatch of the non-basic aggregates of a query to their units (plan → exact → release)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpmagic.accountant.currency import Definition
from dpmagic.aggregates import distinct, quantile, variance
from dpmagic.aggregates.common import calibration, effective_bounds
from dpmagic.domain.schema import NumericColumn, Schema
from dpmagic.noise.sensitivity import coverage_of, value_range
from dpmagic.query.model import Aggregate, Query

__all__ = ["UnitPlan", "plan_extended", "exact_extended", "quantile_histograms", "release_extended"]


@dataclass(frozen=True)
class UnitPlan:
    """The fixed-before-data plan of one non-basic aggregate."""

    agg: Aggregate
    plan: Any
    lo: float = 0.0
    hi: float = 0.0

    def describe(self) -> dict[str, str]:
        """Noise descriptions by release name (shown with the answer)."""
        a = self.agg
        if a.func == "count_distinct":
            return {f"count_distinct({a.column})": str(self.plan)}
        if a.func in ("var", "stddev"):
            p = self.plan
            return {
                f"{a.func}({a.column}) count": str(p.count),
                f"{a.func}({a.column}) sum": str(p.total),
                f"{a.func}({a.column}) sum of squares": str(p.squares),
            }
        return {f"quantile({a.column}, {a.param:g})": str(self.plan)}


def plan_extended(
    query: Query, schema: Schema, definition: Definition, share: float, *, replace_one: bool
) -> dict[str, UnitPlan]:
    """Plans of the query's non-basic aggregates, each release calibrated at ``share`` (no data read)."""
    cal = calibration(definition, share, replace_one=replace_one, grouped=bool(query.groups))
    cov = coverage_of(query, schema)
    out: dict[str, UnitPlan] = {}
    for a in query.aggregates:
        if a.is_basic:
            continue
        if a.func == "count_distinct":
            out[a.alias] = UnitPlan(a, distinct.plan(definition, share, cov, replace_one=replace_one))
            continue
        col = schema[str(a.column)]
        assert isinstance(col, NumericColumn)
        if a.func in ("var", "stddev"):
            lo, hi = value_range(query, schema, str(a.column), a.clamp)  # the box's clamped value range
            p = variance.plan(lo, hi, col.is_int, definition, share, cov, replace_one=replace_one)
            out[a.alias] = UnitPlan(a, p, lo, hi)
        else:
            lo, hi = effective_bounds(a, schema)
            assert a.param is not None
            out[a.alias] = UnitPlan(a, quantile.plan(lo, hi, col.is_int, a.param, cal, n_cells=query.n_cells), lo, hi)
    return out


def exact_extended(units: Mapping[str, UnitPlan], column_values: Any, cell: np.ndarray, n_cells: int) -> dict[str, Any]:
    """Exact inputs of each unit.

    ``column_values(name)`` gives a column's values on *every* row of the table and ``cell`` each row's cell,
    ``n_cells`` for rows outside the WHERE filter (the discarded bin).  Every unit works on every row alike:
    COUNT(DISTINCT), VAR / STDDEV, and a quantile, whose input is each cell's histogram over the public candidate
    grid (:func:`quantile_histograms`), an ``n_cells × (2K + 1)`` array whatever the box holds.
    """
    out: dict[str, Any] = {}
    for alias, u in units.items():
        values = column_values(str(u.agg.column))
        if u.agg.func == "count_distinct":
            out[alias] = distinct.exact(values, cell, n_cells)
        elif u.agg.func in ("var", "stddev"):
            out[alias] = variance.exact(values, cell, n_cells, u.plan)
        else:
            out[alias] = quantile_histograms(values, cell, n_cells, u)
    return out


def quantile_histograms(values: np.ndarray, cell: np.ndarray, n_cells: int, u: UnitPlan) -> np.ndarray:
    """Each cell's histogram over the quantile's candidates (:func:`dpmagic.aggregates.quantile.bins`), as an
    ``n_cells × (2K + 1)`` int64 array: one vectorised pass over every row — clamped into [lo, hi] as doubles
    (what OpenDP's scorer saw), binned, and counted with the rows outside the filter (``cell == n_cells``) in a
    discarded row of the array, never filtered out."""
    width = quantile.histogram_bins(len(u.plan.candidates))
    x = np.clip(np.asarray(values).astype(float), u.lo, u.hi)
    flat = np.asarray(cell, dtype=np.int64) * width + quantile.bins(x, u.plan.candidates)
    counts = np.bincount(flat, minlength=(n_cells + 1) * width)
    return counts.reshape(n_cells + 1, width)[:n_cells].astype(np.int64)


def release_extended(
    units: Mapping[str, UnitPlan], inputs: Mapping[str, Any], level: float = 0.95
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(value, ci_low, ci_high) per unit."""
    out: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for alias, u in units.items():
        a = u.agg
        if a.func == "count_distinct":
            out[alias] = distinct.release(inputs[alias], u.plan, level)
        elif a.func in ("var", "stddev"):
            ddof = 1.0 if a.param is None else float(a.param)
            out[alias] = variance.release(inputs[alias], u.plan, ddof, a.func == "stddev")
        else:
            out[alias] = quantile.release(inputs[alias], u.plan, u.lo, u.hi)
    return out
