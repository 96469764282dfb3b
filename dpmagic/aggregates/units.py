"""The non-basic aggregates of a query through the registry (plan → exact → release), by alias.

Each step asks the kind's unit (:func:`dpmagic.aggregates.registry.unit_for`); an unknown kind raises
:class:`~dpmagic.aggregates.registry.UnknownAggregateError` before any charge (the plan is made first).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dpmagic.accountant.currency import Definition
from dpmagic.aggregates.common import calibration
from dpmagic.aggregates.quantile_unit import quantile_histograms
from dpmagic.aggregates.registry import PlanContext, UnitPlan, unit_for
from dpmagic.domain.schema import Schema
from dpmagic.noise.sensitivity import coverage_of
from dpmagic.query.model import Query

__all__ = ["UnitPlan", "plan_extended", "exact_extended", "quantile_histograms", "release_extended"]


def plan_extended(
    query: Query, schema: Schema, definition: Definition, share: float, *, replace_one: bool
) -> dict[str, UnitPlan]:
    """Plans of the query's aggregates with releases of their own (quantiles, COUNT(DISTINCT)), each release
    calibrated at ``share`` (no data read)."""
    cov = coverage_of(query, schema)
    cal = calibration(
        definition,
        share,
        replace_one=replace_one,
        grouped=bool(query.groups),
        contribution=cov.contribution,
        cells=cov.cells,
    )
    ctx = PlanContext(query, schema, definition, share, replace_one, cal, cov)
    out: dict[str, UnitPlan] = {}
    for a in query.aggregates:
        unit = unit_for(a.func)
        if not unit.basic and not unit.quantities:  # the shared quantities are planned by plan_noise (moments)
            out[a.alias] = unit.plan(a, ctx)
    return out


def exact_extended(units: Mapping[str, UnitPlan], column_values: Any, cell: np.ndarray, n_cells: int) -> dict[str, Any]:
    """Exact inputs of each unit on the pandas backend.

    ``column_values(name)`` gives a column's values on *every* row of the table and ``cell`` each row's cell,
    ``n_cells`` for rows outside the WHERE filter (the discarded bin): every unit works on every row alike.
    """
    return {alias: u.unit.exact(u, column_values(str(u.agg.column)), cell, n_cells) for alias, u in units.items()}


def release_extended(
    units: Mapping[str, UnitPlan], inputs: Mapping[str, Any], level: float = 0.95
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(value, ci_low, ci_high) per unit."""
    return {alias: u.unit.release(u, inputs[alias], level) for alias, u in units.items()}
