"""The aggregate units: one typed class per aggregate kind, in a registry (:mod:`.registry`).

Units: :mod:`.basic` (COUNT, SUM, AVG: the shared counts-and-sums family), :mod:`.distinct` (COUNT(DISTINCT
col)), :mod:`.variance` (VAR / STDDEV), :mod:`.quantile_unit` (MEDIAN / PERCENTILE_CONT / QUANTILE / MIN / MAX,
calibrated in :mod:`.quantile`).  Each declares its releases, its plan (no data), its exact inputs on pandas and
on an engine (SQL pieces from :mod:`.sqlexpr` and :mod:`.exactsum`), its release with its interval, and its
sensitivity.  :mod:`.common` holds the shared calibration rules; :mod:`.units` runs the non-basic ones for a
query.  Importing this package registers the built-in units.
"""

from dpmagic.aggregates import basic, distinct, quantile_unit, variance  # noqa: F401  (registers the units)
from dpmagic.aggregates.common import CellCalibration, calibration, effective_bounds
from dpmagic.aggregates.registry import AggregateUnit, UnitPlan, UnknownAggregateError, register, unit_for
from dpmagic.aggregates.units import exact_extended, plan_extended, release_extended

__all__ = [
    "AggregateUnit",
    "CellCalibration",
    "UnitPlan",
    "UnknownAggregateError",
    "calibration",
    "effective_bounds",
    "exact_extended",
    "plan_extended",
    "register",
    "release_extended",
    "unit_for",
]
