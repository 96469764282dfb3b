"""MEDIAN, PERCENTILE_CONT(p) WITHIN GROUP (ORDER BY col), QUANTILE(col, p): a private quantile.

OpenDP's ``make_quantile_score_candidates`` (Smith 2011, "Privacy-preserving statistical estimation with optimal
convergence rates", STOC) scores a public grid of candidates by how far each is from the p-quantile of the
cell's values, and ``make_noisy_max`` selects the best-scored one with Gumbel noise (the exponential
mechanism).  OpenDP's privacy maps give the cost:

* pure ε-DP: the exponential mechanism (``MaxDivergence``);
* ρ-zCDP: OpenDP's zCDP map of the same mechanism (``ZeroConcentratedDivergence``; the exponential
  mechanism with ε is ε²/8-zCDP, Cesar & Rogers 2021, "Bounding, concentrating, and truncating: unifying
  privacy loss composition for data analytics", ALT);
* μ-GDP: refused — dpmagic states no GDP conversion of the exponential mechanism.

The neighbouring relation enters as OpenDP's symmetric distance: 1 under add/remove, 2 under replace (a change
is a removal and an addition); across GROUP BY cells under replace-one each of the two cells moves by 1, half
the within-cell change, so each of the two costs at most half (pure; a quarter under zCDP).  Candidates
(public, from the declared or clamped range): every integer when an int range has ≤ 10,001 values, otherwise
1,001 evenly spaced points.  Values are clamped into the range.  No interval is stated (NaN).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import opendp.prelude as dp

from dpmagic.aggregates.common import CellCalibration
from dpmagic.errors import BudgetError, UnsupportedQueryError

dp.enable_features("contrib")

__all__ = ["QuantilePlan", "candidates", "plan", "release"]

MAX_INT_CANDIDATES = 10_001
GRID = 1_001


class QuantilePlan:
    def __init__(self, cands: tuple[float, ...], alpha: float, scale: float, measure: str, is_int: bool) -> None:
        self.candidates, self.alpha, self.scale, self.measure, self.is_int = cands, alpha, scale, measure, is_int

    def __str__(self) -> str:
        return f"exponential mechanism (Gumbel scale {self.scale:.4g}) over {len(self.candidates)} candidates"


def candidates(lo: float, hi: float, is_int: bool) -> tuple[float, ...]:
    if is_int and hi - lo + 1 <= MAX_INT_CANDIDATES:
        return tuple(float(v) for v in range(int(lo), int(hi) + 1))
    if hi <= lo:
        return (float(lo),)
    return tuple(lo + (hi - lo) * i / (GRID - 1) for i in range(GRID))


@lru_cache(maxsize=64)
def _chain(cands: tuple[float, ...], alpha: float, measure: str, scale: float) -> dp.Measurement:
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    score = dp.t.make_quantile_score_candidates(domain, dp.symmetric_distance(), list(cands), alpha)
    m = dp.max_divergence() if measure == "pure" else dp.zero_concentrated_divergence()
    return score >> dp.m.then_noisy_max(m, scale=scale, negate=True)


def plan(lo: float, hi: float, is_int: bool, alpha: float, cal: CellCalibration) -> QuantilePlan:
    if cal.definition == "gdp":
        raise UnsupportedQueryError(
            "quantiles (MEDIAN, PERCENTILE_CONT, QUANTILE) are not available under μ-GDP: the exponential "
            "mechanism has no GDP conversion in dpmagic",
            hint="bind the data under epsilon (pure DP) or rho (zCDP) to ask quantiles",
        )
    cands = candidates(lo, hi, is_int)
    d_in = 2 if cal.replace_one else 1
    target = cal.cell_cost
    if not (target > 0 and math.isfinite(target)):
        raise BudgetError("the cost of a quantile must be positive")
    try:
        scale = dp.binary_search_param(lambda s: _chain(cands, alpha, cal.definition, s), d_in=d_in, d_out=target)
    except Exception:
        raise BudgetError(f"no noise scale makes this quantile cost {target:g}") from None
    meas = _chain(cands, alpha, cal.definition, scale)
    if float(meas.map(d_in)) > target:  # OpenDP's own map must agree
        raise BudgetError(f"no noise scale makes this quantile cost {target:g}")
    return QuantilePlan(cands, alpha, scale, cal.definition, is_int)


def release(
    groups: list[np.ndarray], p: QuantilePlan, lo: float, hi: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    meas = _chain(p.candidates, p.alpha, p.measure, p.scale)
    out = np.array([p.candidates[int(meas([float(v) for v in np.clip(g, lo, hi)]))] for g in groups], dtype=float)
    nan = np.full(len(out), np.nan)
    return out, nan, nan.copy()
