"""The aggregates beyond COUNT / SUM / AVG, each a self-contained unit.

Every unit has the same three parts, so that it can later become a "mechanism" object:

* ``plan(...)``: the noise of its releases for a given per-release cost, fixed before any data is read
  (sensitivities from :mod:`dpmagic.noise.sensitivity`, derived in each module's docstring and checked by brute
  force in ``tests/test_aggregate_sensitivity.py``);
* ``exact(...)``: the exact per-cell inputs, computed by the backend after the charge over every row of the
  table (rows outside the WHERE filter go to a discarded bin);
* ``release(...)``: the noisy answer (and its 95% interval, or NaN when none is stated).

Units: :mod:`.distinct` (COUNT(DISTINCT col)), :mod:`.variance` (VAR / STDDEV), :mod:`.quantile`
(MEDIAN / PERCENTILE_CONT / QUANTILE).  :mod:`.common` holds the shared calibration rules.
"""

from dpmagic.aggregates.common import CellCalibration, calibration, effective_bounds
from dpmagic.aggregates.units import exact_extended, plan_extended, release_extended

__all__ = [
    "CellCalibration",
    "calibration",
    "effective_bounds",
    "exact_extended",
    "plan_extended",
    "release_extended",
]
