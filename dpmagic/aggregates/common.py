"""Shared helpers of the aggregate units: the public bounds of an aggregate, and the per-cell calibration of
the quantile unit (whose cost comes from OpenDP's privacy map of the exponential mechanism, not from a
sensitivity: the integer releases — COUNT(DISTINCT), VAR / STDDEV — take theirs from
:mod:`dpmagic.noise.sensitivity`, as :func:`dpmagic.releases.plan.plan_noise` does).

A query's per-release cost ``share`` is spent on every GROUP BY cell in parallel (cells are disjoint).  Under
replace-one neighbours a changed row may leave one cell and enter another, so two cells move:

* pure ε: each cell's release is calibrated at ``share`` for an L1 change ``spread = 2`` × the per-cell change;
* zCDP: the L2 change across the two cells is √2 × the per-cell change (``spread = √2``);
* μ-GDP: each cell is a μ/√2-GDP release of the per-cell change (two compose to μ: Dong, Roth & Su 2019,
  Cor. 3.3), so ``cell_cost = share/√2`` and ``spread = 1``.

At person level (``contribution`` set: the schema's person unit, docs/people.md §2) a step moves up to
min(C, 2n) cells by up to c rows each: the quantile unit calibrates OpenDP's map at the distance
:func:`dpmagic.noise.sensitivity.person_distance` gives, from ``contribution`` and the ``cells`` meeting the box.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dpmagic.accountant.currency import Definition
from dpmagic.aggregates.exactsum import exact_cell_sums  # re-exported (the helpers' old home)
from dpmagic.domain.schema import NumericColumn, Schema
from dpmagic.domain.unit import Contribution
from dpmagic.noise.sensitivity import clamp_bounds
from dpmagic.query.model import Aggregate

__all__ = ["CellCalibration", "calibration", "effective_bounds", "exact_cell_sums"]


@dataclass(frozen=True)
class CellCalibration:
    """Per-cell calibration: the cost each cell's release is calibrated at, and the cross-cell spread."""

    definition: Definition
    cell_cost: float
    spread: float
    replace_one: bool
    grouped: bool  # replace-one and a GROUP BY: a change can move two cells
    #: person level: one person's contribution bounds over the query's cells (None: one row is the unit)
    contribution: Contribution | None = None
    #: the GROUP BY cells meeting the box (person level: how many cells a replacement can move)
    cells: int = 1


def calibration(
    definition: Definition,
    share: float,
    *,
    replace_one: bool,
    grouped: bool,
    contribution: Contribution | None = None,
    cells: int = 1,
) -> CellCalibration:
    two_cells = grouped and replace_one
    if two_cells and definition == "gdp":
        return CellCalibration(definition, share / math.sqrt(2.0), 1.0, replace_one, True, contribution, cells)
    spread = (2.0 if definition == "pure" else math.sqrt(2.0)) if two_cells else 1.0
    return CellCalibration(definition, share, spread, replace_one, two_cells, contribution, cells)


def effective_bounds(agg: Aggregate, schema: Schema) -> tuple[float, float]:
    """The public bounds of an aggregate's values: the declared bounds, tightened by the analyst's clamp
    (:func:`dpmagic.noise.sensitivity.clamp_bounds`, as floats)."""
    col = schema[str(agg.column)]
    assert isinstance(col, NumericColumn)
    lo, hi = clamp_bounds(col, agg.clamp)
    return float(lo), float(hi)
