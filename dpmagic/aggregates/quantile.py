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
the within-cell change, so each of the two costs at most half (pure; a quarter under zCDP).  At person level
(a schema's person unit) one person moves up to c rows in each of up to n cells: the map is taken at
:func:`dpmagic.noise.sensitivity.person_distance` (docs/people.md §2).  Candidates
(public, from the declared or clamped range): every integer when an int range has ≤ 10,001 values, otherwise
1,001 evenly spaced points.  Values are clamped into the range.

**The interval** (a second release, in the same charge: the unit has two releases per cell, each at the query's
per-release share).  With the pick, each cell's histogram over B ≤ :data:`INTERVAL_BINS` coarse bins of the
candidates (:func:`interval_edges`: bin i holds the values in (c_{e_{i−1}}, c_{e_i}]) is released with OpenDP's
integer noise (:func:`interval_noise`: a COUNT over the finer cells cell × bin, its sensitivity that of a sum of
per-row values in [0, 1], brute-force checked by the conformance suite).  The interval is post-processing of that
noisy histogram alone (:func:`interval`), proven as follows.  Let P_j = #{x ≤ c_{e_j}}, Q_j = n − P_j,
r = p·(n − 1) + 1 and v the exact p-quantile by linear interpolation (PERCENTILE_CONT), which lies between the
order statistics x_(⌊r⌋) ≤ v ≤ x_(⌈r⌉) (both of which it is for MIN, MAX and an integral r).  For n ≥ 1 and
D_j = (1 − p)·P_j − p·Q_j:

* D_j ≥ 1 − p ⟺ P_j ≥ r ⟺ P_j ≥ ⌈r⌉ ⟹ x_(⌈r⌉) ≤ c_{e_j}, so v ≤ c_{e_j};
* D_j ≤ −p ⟺ P_j ≤ r − 1 ⟺ P_j < ⌊r⌋ ⟹ x_(⌊r⌋) > c_{e_j}, so v > c_{e_j}.

The noisy D̂_j − D_j = Σ_i w_i Z_i is a fixed weighting of the bins' independent noises Z_i (w_i = 1 − p for
i ≤ j, −p beyond).  Each of these B sums exceeds its bound E_j in absolute value with probability ≤ β/B,
β = 1 − level (:func:`weighted_tail_bound`: a Chernoff bound with the exact moment generating function of the
discrete Laplace; for the discrete Gaussian its sub-Gaussian bound E[e^{tZ}] ≤ e^{t²σ²/2}, Canonne, Kamath &
Steinke 2020, "The discrete Gaussian for differential privacy", NeurIPS, Cor. 9).  By the union bound, with
probability ≥ level all B bounds hold at once, and then U = c_{e_j} at the first j with D̂_j − E_j ≥ 1 − p
(else hi) has v ≤ U, and L = c_{e_j} at the last j with D̂_j + E_j ≤ −p (else lo) has v > L.  So [L, U] covers v
(and both order statistics) with probability ≥ level, whatever the data: the interval depends on the rows only
through the noisy histogram.  The pick is clipped into [L, U] (post-processing; coverage unchanged).

**Empty groups.**  The derivation needs n ≥ 1, and a quantile of no row is undefined.  On an empty cell every
D_j = 0, so (on the same event) an upper bound found for p < 1 (D_j ≥ 1 − p > 0) or a lower bound found for
p > 0 (D_j ≤ −p < 0) proves n ≥ 1.  A cell where neither is found may be empty: its value is NaN (the answer's
notes say so) and its interval the whole range [lo, hi].  Where the two bounds cross (only outside the level
event) the interval is also [lo, hi].  B is kept small (:data:`INTERVAL_BINS`) because E_j grows like √B: a
cell needs roughly 2·E_j / min(p, 1 − p) rows (MIN and MAX: E_j of one bin's noise) before a value is shown.

MIN and MAX are the 0- and 1-quantiles, but OpenDP's quantile score ties on every candidate below the minimum
(above the maximum), so the exponential mechanism would pick uniformly among them.  They use their own score
instead, with OpenDP's ``make_noisy_max`` over it: for MIN, candidate c_i (i = 0..K−1, ascending) scores
−#{x < c_i} + i/(2K) — the count changes by at most 1 for every candidate when one row is added, removed or
replaced (L∞ sensitivity 1, also under replace-one), and the tie-break term is public and below ½, so it
never outweighs a count; the best score is the largest candidate ≤ the minimum (exact on an int column whose
every value is a candidate).  MAX mirrors it: −#{x > c_i} + (K−1−i)/(2K).  Across two GROUP BY cells under
replace-one each cell's scores move by 1, so each cell is calibrated at half the cost.

**The work after the charge does not depend on the rows in the box.**  Both scores depend on a cell's values
only through #{x < c} and #{x > c} for every candidate c, i.e. through the cell's *histogram over the candidate
grid*: 2K + 1 bins, bin(x) = #{c < x} + #{c ≤ x} (bin 2j + 1 holds the values equal to c_j, bin 2j those strictly
between c_{j−1} and c_j).  The grid is public (the declared or clamped range), so the histogram has a fixed
size, n_cells × (2K + 1), known before the charge.  The backend computes it in one pass over *every* row
(:func:`bins`; rows outside the WHERE filter go to a discarded cell, as for every other aggregate), and
:func:`release` computes OpenDP's score from it (:func:`scores`) and applies OpenDP's own report-noisy-max
measurement — the second half of the very chain whose privacy map is charged (:func:`_chain`) — so the released
distribution is unchanged.  OpenDP's score, −|(1 − α)·#{x < c} − α·#{x > c}| in integers
(α = α_num/α_den, OpenDP's rational of α), is reproduced exactly: :func:`score_constants` reads α_num and
α_den from OpenDP's own transformation on two public one-row data sets, and :func:`plan` checks, before any
charge, that the histogram score equals OpenDP's on a public probe data set (a mismatch, e.g. a changed OpenDP,
refuses the query).  No per-row list is built after the charge; the remaining work is O(n_cells × K), plus
OpenDP's sampler, whose running time depends on the noise and the scores, not on the number of rows.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import opendp.prelude as dp

from dpmagic.aggregates.common import CellCalibration
from dpmagic.errors import BudgetError, UnsupportedQueryError
from dpmagic.noise.calibration import MAX_ROWS, Noise, calibrate, release_integer
from dpmagic.noise.sensitivity import Coverage, patterns, person_distance

dp.enable_features("contrib")

__all__ = [
    "INTERVAL_BINS",
    "MAX_HISTOGRAM_BINS",
    "QuantilePlan",
    "bins",
    "candidates",
    "histogram_bins",
    "interval",
    "interval_edges",
    "interval_noise",
    "plan",
    "release",
    "scores",
    "weighted_tail_bound",
]

MAX_INT_CANDIDATES = 10_001
GRID = 1_001
#: the most bins (GROUP BY cells × (2K + 1)) one quantile's histogram may have: 2^24 int64 counts (128 MB in
#: the kernel), refused before the charge beyond (the grid and the cells are public)
MAX_HISTOGRAM_BINS = 1 << 24
#: the most coarse bins per cell of a quantile's interval histogram (:func:`interval_edges`)
INTERVAL_BINS = 32


@dataclass(frozen=True)
class Grid:
    """How an engine finds a value's bin (:func:`bins`) with a few IEEE operations per row, exactly (public: a
    function of the candidates alone, fixed before the charge).

    * ``base`` set: the candidates are every integer base .. base + k − 1, each an exact double, and the values
      are integral doubles (an int column): the bin of y is 2·(y − base) + 1;
    * otherwise the candidates are ``c_j = lo + (width · j) / (k − 1)`` in double arithmetic (:func:`candidates`'
      own formula, checked bit for bit), and a = ⌊(y − lo) · inv⌋ is within 1 of j for y = c_j and of K at
      y = hi (checked at every candidate: :func:`grid_of`).  As a is non-decreasing in y (each IEEE operation
      is), for c_{t−1} ≤ y < c_t it lies in [t − 2, t + 1], so #{c ≤ y} = (a − 1) + Σ_{j=a−1}^{a+1} [c_j ≤ y]
      and #{c < y} = (a − 2) + Σ_{j=a−2}^{a+1} [c_j < y] (c_j = −∞ below 0, +∞ from k): seven candidates, each
      recomputed by the formula, per row.  The operations (−, ×, ÷, +, FLOOR of doubles, none fusable into an
      FMA) are IEEE-754's correctly rounded ones, so every engine computes the same a and c_j as numpy.
    """

    k: int
    base: int | None = None
    lo: float = 0.0
    width: float = 0.0
    inv: float = 0.0

    def point(self, j: np.ndarray) -> np.ndarray:
        """c_j by :func:`candidates`' formula (the affine grid)."""
        return self.lo + (self.width * np.asarray(j, dtype=float)) / float(self.k - 1)

    def approx(self, y: np.ndarray) -> np.ndarray:
        """a = ⌊(y − lo) · inv⌋ (the affine grid)."""
        return np.floor((np.asarray(y, dtype=float) - self.lo) * self.inv)


def grid_of(cands: tuple[float, ...], lo: float, hi: float, is_int: bool) -> Grid | None:
    """The :class:`Grid` of ``cands`` (:func:`candidates` of [lo, hi]), or None when neither form is exact
    (ranges of subnormal width, int ranges beyond 2⁵³ with few values, a width beyond the double range)."""
    k = len(cands)
    if k == 1:
        return Grid(1, lo=float(cands[0]))
    c0 = cands[0]
    if is_int and float(c0).is_integer():
        base = int(c0)
        if max(abs(base), abs(base + k - 1)) <= 2**53 and all(c == base + i for i, c in enumerate(cands)):
            return Grid(k, base=base)
    lo, hi = float(lo), float(hi)
    width = hi - lo
    if not (math.isfinite(width) and width > 0):
        return None
    with np.errstate(all="ignore"):
        g = Grid(k, lo=lo, width=width, inv=(k - 1) / width)
        j = np.arange(k, dtype=float)
        if not np.array_equal(g.point(j), np.asarray(cands, dtype=float)):
            return None
        a = g.approx(np.asarray(cands, dtype=float))
        top = g.approx(np.asarray([hi]))
    if not (np.all(np.isfinite(a)) and np.all(np.abs(a - j) <= 1) and math.isfinite(top[0]) and top[0] <= k + 1):
        return None
    return g


class QuantilePlan:
    def __init__(
        self,
        cands: tuple[float, ...],
        alpha: float,
        scale: float,
        measure: str,
        is_int: bool,
        grid: Grid,
        hist: Noise | None = None,
    ) -> None:
        self.candidates, self.alpha, self.scale, self.measure, self.is_int = cands, alpha, scale, measure, is_int
        #: how an engine bins a value on the candidates (:class:`Grid`)
        self.grid = grid
        #: the noise of the interval's coarse histogram (:func:`interval_noise`; None: no interval)
        self.hist = hist
        #: the candidates' indices ending the coarse bins (:func:`interval_edges`)
        self.edges = interval_edges(len(cands))

    def __str__(self) -> str:
        pick = f"exponential mechanism (Gumbel scale {self.scale:.4g}) over {len(self.candidates)} candidates"
        if self.hist is None:
            return pick
        return f"{pick}; interval from a {len(self.edges)}-bin histogram with {self.hist}"


def candidates(lo: float, hi: float, is_int: bool) -> tuple[float, ...]:
    if is_int and hi - lo + 1 <= MAX_INT_CANDIDATES:
        return tuple(float(v) for v in range(int(lo), int(hi) + 1))
    if hi <= lo:
        return (float(lo),)
    return tuple(lo + (hi - lo) * i / (GRID - 1) for i in range(GRID))


def histogram_bins(k: int) -> int:
    """The number of bins of the histogram over ``k`` candidates: 2k + 1."""
    return 2 * k + 1


def bins(x: np.ndarray, cands: tuple[float, ...]) -> np.ndarray:
    """Each value's bin on the candidate grid, #{c < x} + #{c ≤ x} ∈ [0, 2K] (vectorised, every row alike).

    ``x`` holds doubles already clamped into the range (as OpenDP's scorer sees them)."""
    c = np.asarray(cands, dtype=float)
    return np.searchsorted(c, x, side="left") + np.searchsorted(c, x, side="right")


def _counts(hist: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(#{x < c_i}, #{x > c_i}) for every candidate, from one cell's histogram (length 2K + 1)."""
    h = np.asarray(hist, dtype=np.int64)
    cum = np.cumsum(h)
    n = int(cum[-1])
    lt = cum[0:-1:2]  # bins 0 .. 2i: the values below c_i
    le = cum[1::2]  # bins 0 .. 2i + 1: the values ≤ c_i
    return lt, n - le


def _score_transformation(cands: tuple[float, ...], alpha: float) -> dp.Transformation:
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    return dp.t.make_quantile_score_candidates(domain, dp.symmetric_distance(), list(cands), alpha)


@lru_cache(maxsize=64)
def score_constants(alpha: float) -> tuple[int, int]:
    """OpenDP's (α_num, α_den) of ``alpha``, read from its own scorer on two public one-row data sets.

    With two candidates c_0 < c_1, OpenDP's score of c_i is |(α_den − α_num)·#{x < c_i} − α_num·#{x > c_i}|:
    the data set {c_1} scores c_0 at α_num, the data set {c_0} scores c_1 at α_den − α_num."""
    t = _score_transformation((0.0, 1.0), alpha)
    num = int(t([1.0])[0])
    den = num + int(t([0.0])[1])
    return num, den


def scores(hist: np.ndarray, alpha: float) -> list[int]:
    """OpenDP's quantile score (``make_quantile_score_candidates``) of every candidate, from a cell's histogram.

    |(α_den − α_num)·#{x < c} − α_num·#{x > c}|; OpenDP caps both counts at ⌊(2⁶⁴ − 1)/α_den⌋, never reached
    by a table of at most :data:`~dpmagic.noise.calibration.MAX_ROWS` rows (α_den < 2³⁰ is checked)."""
    num, den = score_constants(alpha)
    if den >= 1 << 30:
        raise UnsupportedQueryError(f"OpenDP's quantile score uses a denominator {den} beyond what dpmagic checks")
    assert MAX_ROWS <= 1 << 32 and MAX_ROWS <= ((1 << 64) - 1) // (1 << 30)
    lt, gt = _counts(hist)  # int64: each product is below α_den · 2³² < 2⁶², their difference fits
    return np.abs((den - num) * lt - num * gt).tolist()


def _histogram_of(values: np.ndarray, cands: tuple[float, ...]) -> np.ndarray:
    return np.bincount(bins(np.asarray(values, dtype=float), cands), minlength=histogram_bins(len(cands)))


@lru_cache(maxsize=64)
def _check_scores(cands: tuple[float, ...], alpha: float) -> None:
    """Refuse (before any charge) if the histogram score differs from OpenDP's own on a public probe data set:
    every candidate, every midpoint between two, and the range's ends, repeated unevenly."""
    c = np.asarray(cands, dtype=float)
    probe = np.concatenate([c, (c[:-1] + c[1:]) / 2.0, c[::3], [c[0], c[-1], c[-1]]])
    probe = probe[np.isfinite(probe)]
    ours = scores(_histogram_of(probe, cands), alpha)
    theirs = [int(v) for v in _score_transformation(cands, alpha)([float(v) for v in probe])]
    if ours != theirs:
        raise UnsupportedQueryError(
            "the installed OpenDP scores quantiles differently from dpmagic's histogram score",
            hint="install the OpenDP version dpmagic is tested with",
        )


@lru_cache(maxsize=64)
def _select(cands: tuple[float, ...], alpha: float, measure: str, scale: float) -> dp.Measurement:
    """The second half of :func:`_chain`: OpenDP's report-noisy-max (minimising) on the scorer's output space."""
    t = _score_transformation(cands, alpha)
    m = dp.max_divergence() if measure == "pure" else dp.zero_concentrated_divergence()
    return dp.m.make_noisy_max(t.output_domain, t.output_metric, m, scale=scale, negate=True)


@lru_cache(maxsize=64)
def _chain(cands: tuple[float, ...], alpha: float, measure: str, scale: float) -> dp.Measurement:
    """OpenDP's quantile measurement (scorer >> report-noisy-max): its privacy map is the one charged."""
    m = dp.max_divergence() if measure == "pure" else dp.zero_concentrated_divergence()
    return _score_transformation(cands, alpha) >> dp.m.then_noisy_max(m, scale=scale, negate=True)


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
    return extreme_scores_of(_histogram_of(values, cands), alpha)


def extreme_scores_of(hist: np.ndarray, alpha: float) -> list[float]:
    """:func:`extreme_scores` from a cell's histogram over the candidates (:func:`bins`)."""
    below, above = _counts(hist)  # #{x < c_i}, #{x > c_i}
    k = len(below)
    i = np.arange(k, dtype=float)
    if alpha == 0.0:
        return (-below + i / (2 * k)).tolist()
    return (-above + (k - 1 - i) / (2 * k)).tolist()


def interval_edges(k: int) -> np.ndarray:
    """The indices e_0 = 0 < … < e_{B−1} = k − 1 of the candidates that end the interval histogram's coarse bins
    (every candidate when k ≤ :data:`INTERVAL_BINS`, else B = :data:`INTERVAL_BINS` evenly spaced ones): public."""
    return np.unique(np.round(np.linspace(0, k - 1, min(k, INTERVAL_BINS))).astype(np.int64))


def coarse_histograms(hists: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Each cell's counts in the coarse bins (c_{e_{i−1}}, c_{e_i}] (the first: ≤ c_{e_0}), from its histogram over
    the 2K + 1 fine bins (:func:`bins`): ``n_cells × B`` int64.  The values are clamped into [lo, hi] = [c_0, c_{K−1}],
    so the bins hold every row of the cell."""
    h = np.asarray(hists, dtype=np.int64)
    le = np.cumsum(h, axis=1)[:, 2 * edges + 1]  # #{x ≤ c_{e_i}}
    return np.diff(le, axis=1, prepend=0)


def interval_noise(definition: str, share: float, cov: Coverage, *, replace_one: bool) -> Noise:
    """The noise of the interval histogram: a COUNT over the finer cells (GROUP BY cell × coarse bin) — a step
    adds or removes a row in one bin, and a replacement may move a row to another bin even within one cell — so its
    sensitivity is that of a sum of per-row values in [0, 1] over at least two cells
    (:func:`dpmagic.noise.sensitivity.patterns`, also at person level), calibrated at ``share``."""
    cells = dataclasses.replace(cov, cells=max(cov.cells, 2))
    return calibrate(definition, share, patterns(0, 1, cells, replace_one=replace_one))  # type: ignore[arg-type]


def _dlap_log_mgf(t: np.ndarray, scale: float) -> np.ndarray:
    """log E[e^{tZ}] of the discrete Laplace P(k) ∝ e^{−|k|/scale}, for |t| < 1/scale:
    (1 − q)² / ((1 − q e^t)(1 − q e^{−t})), q = e^{−1/scale}."""
    r = 1.0 / scale
    return 2.0 * math.log1p(-math.exp(-r)) - np.log1p(-np.exp(t - r)) - np.log1p(-np.exp(-t - r))


def weighted_tail_bound(noise: Noise, counts: list[tuple[int, float]], beta: float) -> float:
    """A proven E with P(|Σ_i w_i Z_i| ≥ E) ≤ ``beta`` for independent noises Z_i of ``noise`` (in its answer units),
    where ``counts`` lists (how many i, |w_i|).  Discrete Gaussian: sub-Gaussian with variance proxy σ²Σw²
    (Canonne, Kamath & Steinke 2020, Cor. 9), E = σ·√(2Σw²·ln(2/β)).  Discrete Laplace: Chernoff,
    P(S ≥ E) ≤ e^{−tE}·Π_i M(t·w_i) at any admissible t (symmetric: ×2), minimised over a grid of t.  The grid
    rounding of a coarse release adds Σ|w_i|·``noise.rounding``."""
    s1 = sum(m * w for m, w in counts)
    if s1 == 0:
        return 0.0
    g = noise.granularity
    slack = s1 * noise.rounding
    if noise.kind == "discrete_gaussian":
        s2 = sum(m * w * w for m, w in counts)
        return g * noise.scale * math.sqrt(2.0 * s2 * math.log(2.0 / beta)) + slack
    assert noise.kind == "discrete_laplace"
    wmax = max(w for m, w in counts if m)
    t = np.geomspace(1e-6, 0.999, 400) / (noise.scale * wmax)
    log_m = sum(m * _dlap_log_mgf(t * w, noise.scale) for m, w in counts if m and w)
    e = (log_m + math.log(2.0 / beta)) / t
    assert np.all(np.isfinite(e))
    return g * float(np.min(e)) + slack


def interval_bounds(p: QuantilePlan, level: float) -> np.ndarray:
    """E_j for every edge j of D̂_j, each exceeded with probability ≤ (1 − level)/B (module docstring).  Public:
    from the plan alone."""
    assert p.hist is not None
    b = len(p.edges)
    beta = (1.0 - level) / b
    a = p.alpha
    return np.array([weighted_tail_bound(p.hist, [(j + 1, 1.0 - a), (b - 1 - j, a)], beta) for j in range(b)])


def interval(
    noisy: np.ndarray, picks: np.ndarray, p: QuantilePlan, lo: float, hi: float, level: float = 0.95
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value, ci_low, ci_high) per cell from the noisy coarse histograms (``n_cells × B``) and the picks: the
    proven ``level`` interval of the module docstring, the pick clipped into it, NaN (and [lo, hi]) where the cell
    may be empty.  Post-processing of released values only."""
    ej = interval_bounds(p, level)
    a = p.alpha
    c = np.asarray(p.candidates, dtype=float)[p.edges]
    noisy = np.asarray(noisy, dtype=float).reshape(len(picks), len(p.edges))
    values, lows, highs = [], [], []
    for row, pick in zip(noisy, picks):
        pj = np.cumsum(row)
        d = (1.0 - a) * pj - a * (pj[-1] - pj)
        up = np.flatnonzero(d - ej >= 1.0 - a)
        down = np.flatnonzero(d + ej <= -a)
        nonempty = (a < 1.0 and len(up) > 0) or (a > 0.0 and len(down) > 0)
        u = float(c[up[0]]) if len(up) else float(hi)
        low = float(c[down[-1]]) if len(down) else float(lo)
        if not nonempty:  # the cell may be empty: no value
            values.append(math.nan)
            lows.append(float(lo))
            highs.append(float(hi))
            continue
        if (len(up) and len(down) and down[-1] >= up[0]) or low > u:  # only outside the level event
            low, u = float(lo), float(hi)
        values.append(min(max(float(pick), low), u))
        lows.append(low)
        highs.append(u)
    return np.array(values, dtype=float), np.array(lows, dtype=float), np.array(highs, dtype=float)


def plan(
    lo: float,
    hi: float,
    is_int: bool,
    alpha: float,
    cal: CellCalibration,
    *,
    n_cells: int = 1,
    hist: Noise | None = None,
) -> QuantilePlan:
    """The noise of one quantile's release in each of ``n_cells`` cells (no data read); ``hist`` the noise of its
    interval histogram (:func:`interval_noise`; None: the pick alone, no interval).

    Refuses a histogram larger than :data:`MAX_HISTOGRAM_BINS` (``n_cells`` × (2K + 1): public) and, for a
    quantile, an installed OpenDP whose score differs from :func:`scores` (:func:`_check_scores`)."""
    if cal.definition == "gdp":
        raise UnsupportedQueryError(
            "quantiles (MEDIAN, PERCENTILE_CONT, QUANTILE, MIN, MAX) are not available under μ-GDP: the exponential "
            "mechanism has no GDP conversion in dpmagic",
            hint="bind the data under epsilon (pure DP) or rho (zCDP) to ask quantiles",
        )
    cands = candidates(lo, hi, is_int)
    if any(b <= a for a, b in zip(cands, cands[1:])):  # e.g. an int range beyond 2⁵³: its values are not all doubles
        raise UnsupportedQueryError(
            f"the quantile's candidates over [{lo!r}, {hi!r}] are not distinct double values (integers beyond 2^53 "
            "round to the same double)",
            hint="clamp the column to a range within ±2^53 (CLAMP(col, lo, hi)) to ask a quantile",
        )
    size = n_cells * histogram_bins(len(cands))
    if size > MAX_HISTOGRAM_BINS:
        raise UnsupportedQueryError(
            f"a quantile over {n_cells:,} GROUP BY cells × {len(cands):,} candidates needs a histogram of "
            f"{size:,} bins, more than dpmagic's limit of {MAX_HISTOGRAM_BINS:,}",
            hint="group by fewer keys, or clamp the column to a narrower range (fewer candidates)",
        )
    grid = grid_of(cands, lo, hi, is_int)
    if grid is None:
        raise UnsupportedQueryError(
            f"the quantile's candidate grid over [{lo!r}, {hi!r}] is not exact in double arithmetic",
            hint="clamp the column to a range of ordinary width (e.g. CLAMP(col, lo, hi))",
        )
    target = cal.cell_cost
    person = cal.contribution is not None and cal.contribution.total > 1
    if _is_extreme(alpha):
        # L∞ sensitivity 1 under both relations; a replace-one change across two cells moves both: half each
        d_ext = 1.0
        if person:
            assert cal.contribution is not None
            d_ext = person_distance(
                cal.contribution, cal.cells, replace_one=cal.replace_one, definition=cal.definition, extreme=True
            )
        elif cal.replace_one and cal.grouped:
            target = target / 2.0
        if not (target > 0 and math.isfinite(target)):
            raise BudgetError("the cost of a MIN / MAX must be positive")
        try:
            scale = dp.binary_search_param(
                lambda s: _extreme_chain(len(cands), cal.definition, s), d_in=d_ext, d_out=target
            )
        except Exception:
            raise BudgetError(f"no noise scale makes this MIN / MAX cost {target:g}") from None
        if float(_extreme_chain(len(cands), cal.definition, scale).map(d_ext)) > target:
            raise BudgetError(f"no noise scale makes this MIN / MAX cost {target:g}")
        return QuantilePlan(cands, alpha, scale, cal.definition, is_int, grid, hist)
    d_in = 2 if cal.replace_one else 1
    if person:  # one person moves up to c rows per cell, over several cells (docs/people.md §2)
        assert cal.contribution is not None
        d_in = int(
            person_distance(
                cal.contribution, cal.cells, replace_one=cal.replace_one, definition=cal.definition, extreme=False
            )
        )
    if not (target > 0 and math.isfinite(target)):
        raise BudgetError("the cost of a quantile must be positive")
    if len(cands) > 1:
        _check_scores(cands, alpha)
    try:
        scale = dp.binary_search_param(lambda s: _chain(cands, alpha, cal.definition, s), d_in=d_in, d_out=target)
    except Exception:
        raise BudgetError(f"no noise scale makes this quantile cost {target:g}") from None
    meas = _chain(cands, alpha, cal.definition, scale)
    if float(meas.map(d_in)) > target:  # OpenDP's own map must agree
        raise BudgetError(f"no noise scale makes this quantile cost {target:g}")
    return QuantilePlan(cands, alpha, scale, cal.definition, is_int, grid, hist)


def release(
    hists: np.ndarray, p: QuantilePlan, lo: float, hi: float, level: float = 0.95
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The noisy quantile of every cell from its histogram over the candidates (``hists``: n_cells × (2K + 1),
    the values already clamped into [lo, hi] by the backend): OpenDP's report-noisy-max on the score computed
    from the histogram — the same measurement, on the same scores, as :func:`_chain` on the cell's values — and,
    when the plan has one, its interval from the noisy coarse histogram (:func:`interval`)."""
    hists = np.asarray(hists, dtype=np.int64).reshape(-1, histogram_bins(len(p.candidates)))
    if _is_extreme(p.alpha):
        ext = _extreme_chain(len(p.candidates), p.measure, p.scale)
        picks = [int(ext(extreme_scores_of(h, p.alpha))) for h in hists]
    elif len(p.candidates) == 1:
        picks = [0] * len(hists)
    else:
        select = _select(p.candidates, p.alpha, p.measure, p.scale)
        picks = [int(select(scores(h, p.alpha))) for h in hists]
    out = np.array([p.candidates[i] for i in picks], dtype=float)
    if p.hist is None:
        nan = np.full(len(out), np.nan)
        return out, nan, nan.copy()
    coarse = coarse_histograms(hists, p.edges)
    noisy = release_integer(coarse.reshape(-1), p.hist)
    return interval(noisy, out, p, lo, hi, level)
