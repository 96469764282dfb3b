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

MIN and MAX are the 0- and 1-quantiles, but OpenDP's quantile score ties on every candidate below the minimum
(above the maximum), so the exponential mechanism would pick uniformly among them.  They use their own score
instead, with OpenDP's ``make_noisy_max`` over it: for MIN, candidate c_i (i = 0..K−1, ascending) scores
−#{x < c_i} + i/(2K) — the count changes by at most 1 for every candidate when one row is added, removed or
replaced (L∞ sensitivity 1, also under replace-one), and the tie-break term is public and below ½, so it
never outweighs a count; the best score is the largest candidate ≤ the minimum (exact on an int column whose
every value is a candidate).  MAX mirrors it: −#{x > c_i} + (K−1−i)/(2K).  Across two GROUP BY cells under
replace-one each cell's scores move by 1, so each cell is calibrated at half the cost.
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


@lru_cache(maxsize=64)
def _extreme_chain(k: int, measure: str, scale: float) -> dp.Measurement:
    """OpenDP's report-noisy-max over ``k`` float scores (L∞ distance), for MIN / MAX."""
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=k)
    m = dp.max_divergence() if measure == "pure" else dp.zero_concentrated_divergence()
    return dp.m.make_noisy_max(domain, dp.linf_distance(T=float), m, scale=scale)


def _is_extreme(alpha: float) -> bool:
    return alpha in (0.0, 1.0)


def extreme_scores(values: np.ndarray, cands: tuple[float, ...], alpha: float) -> list[float]:
    """The MIN (``alpha = 0``) or MAX (``alpha = 1``) score of every candidate (see the module docstring)."""
    c = np.asarray(cands, dtype=float)
    v = np.sort(np.asarray(values, dtype=float))
    k = len(c)
    i = np.arange(k, dtype=float)
    if alpha == 0.0:
        below = np.searchsorted(v, c, side="left")  # #{x < c_i}
        return (-below + i / (2 * k)).tolist()
    above = len(v) - np.searchsorted(v, c, side="right")  # #{x > c_i}
    return (-above + (k - 1 - i) / (2 * k)).tolist()


def plan(lo: float, hi: float, is_int: bool, alpha: float, cal: CellCalibration) -> QuantilePlan:
    if cal.definition == "gdp":
        raise UnsupportedQueryError(
            "quantiles (MEDIAN, PERCENTILE_CONT, QUANTILE, MIN, MAX) are not available under μ-GDP: the exponential "
            "mechanism has no GDP conversion in dpmagic",
            hint="bind the data under epsilon (pure DP) or rho (zCDP) to ask quantiles",
        )
    cands = candidates(lo, hi, is_int)
    target = cal.cell_cost
    if _is_extreme(alpha):
        # L∞ sensitivity 1 under both relations; a replace-one change across two cells moves both: half each
        if cal.replace_one and cal.grouped:
            target = target / 2.0
        if not (target > 0 and math.isfinite(target)):
            raise BudgetError("the cost of a MIN / MAX must be positive")
        try:
            scale = dp.binary_search_param(
                lambda s: _extreme_chain(len(cands), cal.definition, s), d_in=1.0, d_out=target
            )
        except Exception:
            raise BudgetError(f"no noise scale makes this MIN / MAX cost {target:g}") from None
        if float(_extreme_chain(len(cands), cal.definition, scale).map(1.0)) > target:
            raise BudgetError(f"no noise scale makes this MIN / MAX cost {target:g}")
        return QuantilePlan(cands, alpha, scale, cal.definition, is_int)
    d_in = 2 if cal.replace_one else 1
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
    if _is_extreme(p.alpha):
        ext = _extreme_chain(len(p.candidates), p.measure, p.scale)
        picks = [int(ext(extreme_scores(np.clip(g, lo, hi), p.candidates, p.alpha))) for g in groups]
        out = np.array([p.candidates[i] for i in picks], dtype=float)
        nan = np.full(len(out), np.nan)
        return out, nan, nan.copy()
    meas = _chain(p.candidates, p.alpha, p.measure, p.scale)
    out = np.array([p.candidates[int(meas([float(v) for v in np.clip(g, lo, hi)]))] for g in groups], dtype=float)
    nan = np.full(len(out), np.nan)
    return out, nan, nan.copy()
