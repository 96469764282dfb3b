"""VAR / VARIANCE / VAR_SAMP / VAR_POP and STDDEV / STD / STDEV / STDDEV_POP.

Three noisy releases per cell, the cost split equally over them (as AVG splits its two): a COUNT n, a SUM
S = Σ (x − c) and a sum of squares Q = Σ (x − c)², where x is clamped to the public bounds [lo, hi] (declared,
or the analyst's clamp) and c is their midpoint (an integer for int columns).  Centring makes the squares'
range [0, max((lo − c)², (hi − c)²)] ≈ (hi − lo)²/4 instead of max(lo², hi²).  Sensitivities, per cell (the
rules of :func:`dpmagic.aggregates.common.sum_sensitivity` on the releases' value ranges):

* n: 1 (2 / √2 across two cells under replace-one);
* S: values in [lo − c, hi − c];
* Q: values in [0, q] with q = max((lo − c)², (hi − c)²): add/remove q, replace q (one square changes
  within [0, q]), replace across cells max(q, spread·q).

Float columns use OpenDP's ``make_sum`` sensitivity (with its rounding allowance) for S and Q.  The variance
is post-processing: var = (Q − S²/n) / (n − ddof) with n = max(noisy n, ddof + 1), clipped into
[0, (hi − lo)²/4] (the largest variance of values in [lo, hi]); STDDEV is its square root.  No interval is
stated (the ``_ci_low`` / ``_ci_high`` columns are NaN).
"""

from __future__ import annotations

import math

import numpy as np

from dpmagic.aggregates.common import CellCalibration, sum_sensitivity
from dpmagic.mechanisms import Noise, float_sum_noise, noise_for, release_float_sum, release_integer

__all__ = ["VariancePlan", "plan", "exact", "release", "center"]


class VariancePlan:
    def __init__(
        self, count: Noise, total: Noise, squares: Noise, lo: float, hi: float, c: float, is_int: bool
    ) -> None:
        self.count, self.total, self.squares = count, total, squares
        self.lo, self.hi, self.c, self.is_int = lo, hi, c, is_int

    @property
    def q(self) -> float:
        return max((self.lo - self.c) ** 2, (self.hi - self.c) ** 2)


def center(lo: float, hi: float, is_int: bool) -> float:
    c = (lo + hi) / 2.0
    return float(math.floor(c)) if is_int else c


def plan(lo: float, hi: float, is_int: bool, cal: CellCalibration) -> VariancePlan:
    c = center(lo, hi, is_int)
    q = max((lo - c) ** 2, (hi - c) ** 2)
    count = noise_for(cal.definition, cal.cell_cost, cal.spread * 1.0, integer=True)
    if is_int:
        s_sens = sum_sensitivity(lo - c, hi - c, cal) or 1.0
        q_sens = sum_sensitivity(0.0, q, cal) or 1.0
        total = noise_for(cal.definition, cal.cell_cost, s_sens, integer=True)
        squares = noise_for(cal.definition, cal.cell_cost, q_sens, integer=True)
    else:
        d_in = 2 if cal.replace_one else 1
        total = float_sum_noise(cal.definition, cal.cell_cost, lo - c, hi - c, d_in=d_in)
        squares = float_sum_noise(cal.definition, cal.cell_cost, 0.0, max(q, 1e-300), d_in=d_in)
    return VariancePlan(count, total, squares, lo, hi, c, is_int)


def exact(values: np.ndarray, cell: np.ndarray, n_cells: int, p: VariancePlan) -> dict[str, object]:
    """Per cell: n, and the clamped, centred values (exact integer sums for int columns)."""
    x = np.clip(values.astype(float), p.lo, p.hi) - p.c
    counts = np.bincount(cell, minlength=n_cells).astype(np.int64)
    if p.is_int:
        xi = x.astype(np.int64).astype(object)
        s = np.zeros(n_cells, dtype=object)
        q = np.zeros(n_cells, dtype=object)
        np.add.at(s, cell, xi)
        np.add.at(q, cell, xi * xi)
        return {"n": counts, "s": s, "q": q}
    order = np.argsort(cell, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(counts)])
    xs = x[order]
    groups = [xs[bounds[i] : bounds[i + 1]] for i in range(n_cells)]
    return {"n": counts, "groups": groups}


def release(
    inputs: dict[str, object], p: VariancePlan, ddof: float, sqrt: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = release_integer(np.asarray(inputs["n"]), p.count).astype(float)
    if p.is_int:
        s = release_integer(np.asarray(inputs["s"]), p.total).astype(float)
        q = release_integer(np.asarray(inputs["q"]), p.squares).astype(float)
    else:
        groups = inputs["groups"]
        assert isinstance(groups, list)
        s = release_float_sum(groups, p.total, p.lo - p.c, p.hi - p.c)
        q = release_float_sum([g * g for g in groups], p.squares, 0.0, max(p.q, 1e-300))
    nn = np.maximum(n, ddof + 1.0)
    var = (q - s * s / nn) / (nn - ddof)
    var = np.clip(var, 0.0, (p.hi - p.lo) ** 2 / 4.0)
    out = np.sqrt(var) if sqrt else var
    nan = np.full(len(out), np.nan)
    return out, nan, nan.copy()
