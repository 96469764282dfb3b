"""Noise mechanisms: OpenDP's exact integer samplers, calibrated to a cost in the session's currency.

Every release is an exact **integer** vector (one entry per GROUP BY cell) perturbed by OpenDP's discrete
Laplace (pure ε-DP, scale b = Δ₁/ε) or discrete Gaussian (ρ-zCDP, σ = Δ₂/√(2ρ); μ-GDP, σ exactly calibrated
per cell by :func:`discrete_gaussian_gdp_sigma`).  The sensitivities Δ come from :mod:`dpmagic.sensitivity`.

* COUNT and SUM over ``int`` columns are integers already.
* SUM over a ``float`` column is computed on a public grid: each clamped value x is quantised to
  q(x) = rint(x / u) for a power of two u (:func:`float_unit`), and the integers q are summed exactly.  A power
  of two makes x / u exact in binary floating point and q monotone, so the values q of the rows in the box lie
  in [q(lo), q(hi)] and the float SUM becomes an integer SUM with the same sensitivity analysis (brute-force
  tested).  u is chosen from the declared bounds and the noise scale so that the quantisation error of up to
  :data:`MAX_ROWS` rows, MAX_ROWS·u/2 ≤ 2⁻²¹σ, is negligible; it is added to the reported interval.  Unlike
  OpenDP's unsized float ``make_sum`` (which keeps at most 2²⁰ rows) every row counts, and unlike a float
  accumulation the sum is exact, so the sensitivity needs no floating-point slack.
* Large sensitivities (≥ 2²¹ units under pure/zCDP; σ_continuous > 300 units under GDP, where the exact
  calibration's lattice would be huge) are released on a coarser grid of k units: the exact sum s is rounded
  to ⌊s/k + 1/2⌋ (a data-independent post-processing, sensitivity ⌈Δ/k⌉ per cell), noised in grid units and
  scaled back; the rounding error k·u/2 is added to the interval.
* The rounded exact sum is clamped to ±2⁶² grid units before noise: clamping to a public range is 1-Lipschitz
  (no more sensitivity), keeps OpenDP's i64 arithmetic total whatever the data, and an interval side whose
  true value may have been clamped is reported as infinite.

Every release carries its noise scale and a 95% confidence interval computed from the noise distribution
itself (exact tail sums for the discrete distributions).  No numpy random generator is ever used for noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
import opendp.prelude as dp
from scipy.stats import norm

from dpmagic.accountant.currency import Definition
from dpmagic.sensitivity import Sensitivity

dp.enable_features("contrib")

__all__ = [
    "MAX_ROWS",
    "SUM_CLAMP",
    "Noise",
    "NoiseKind",
    "calibrate",
    "discrete_gaussian_gdp_excess",
    "discrete_gaussian_gdp_sigma",
    "float_unit",
    "gdp_noise",
    "noise_for",
    "quantise",
    "release_integer",
]

NoiseKind = Literal["discrete_laplace", "laplace", "discrete_gaussian", "gaussian"]

#: Most rows a backend may hold: exact summation uses 21-bit limbs summed in float64 (exact below 2⁵³), and the
#: float quantisation error bound MAX_ROWS·u/2 relies on it.
MAX_ROWS = 2**32
#: The exact (rounded) sum is clamped to ±SUM_CLAMP grid units before noise (see the module docstring).
SUM_CLAMP = 2**62


@dataclass(frozen=True)
class Noise:
    """A calibrated noise distribution: its family, scale (b or σ, in grid units) and the sensitivity it covers.

    ``sensitivity`` is in the answer's units (L1 for Laplace, L2 for zCDP's Gaussian, per cell for GDP).  The
    exact sum is computed in units of ``unit`` (1, or a float column's quantum), rounded to a grid of
    ``factor`` units (``granularity`` = factor·unit in the answer's units), and noised in grid units;
    ``rounding`` bounds the deterministic error of quantisation and rounding (in the answer's units).
    """

    kind: NoiseKind
    scale: float
    sensitivity: float
    granularity: float = 1.0
    unit: float = 1.0
    factor: int = 1
    rounding: float = 0.0
    #: how many cells one neighbouring step can change, when GDP's μ is split over them (1 otherwise)
    cells: int = 1
    #: the sensitivity in grid units the scale is calibrated to (L1 / L2 / per cell; 0: ``sensitivity``)
    calibrated: float = 0.0

    @property
    def variance(self) -> float:
        """Variance of the noise (in the answer's units; the grid rounding is a bounded bias, not included)."""
        return self.granularity**2 * _variance(self.kind, self.scale)

    @property
    def std(self) -> float:
        return math.sqrt(self.variance)

    def ci_halfwidth(self, level: float = 0.95) -> float:
        """Smallest h with P(|error| ≤ h) ≥ level (exact for the discrete distributions; rounding added)."""
        return self.granularity * _halfwidth(self.kind, self.scale, level) + self.rounding

    def tail(self, h: float) -> float:
        """P(|error| > h) (an upper bound when a rounding is involved)."""
        return _tail(self.kind, self.scale, (h - self.rounding) / self.granularity)

    @property
    def clamp(self) -> float:
        """The public bound (answer units) the exact value is clamped to before noise."""
        return SUM_CLAMP * self.granularity

    def __str__(self) -> str:
        name = {"discrete_laplace": "discrete Laplace", "laplace": "Laplace"}.get(
            self.kind, self.kind.replace("_", " ")
        )
        param = "b" if "laplace" in self.kind else "σ"
        grid = "" if self.granularity == 1.0 else f" on a grid of {self.granularity:.4g}"
        return f"{name} ({param}={self.scale * self.granularity:.4g}{grid})"


#: Largest noise scale (in the answer's units) dpmagic releases: beyond it the noise exceeds double precision
#: and the answer carries no information; such tiny costs are refused before anything is charged.
MAX_SCALE = 1e15


def _check_scale(noise: Noise, cost: float) -> Noise:
    if not noise.scale * noise.granularity <= MAX_SCALE:
        from dpmagic.errors import BudgetError

        raise BudgetError(
            f"a cost of {cost:.3g} is too small to be useful: the noise scale would be "
            f"{noise.scale * noise.granularity:.3g}, beyond {MAX_SCALE:.0e}"
        )
    return noise


def _check_mu(mu: float) -> None:
    from dpmagic.errors import BudgetError

    if not mu >= GDP_MIN_MU:
        raise BudgetError(
            f"a μ of {mu:.3g} per release is too small to be useful (below {GDP_MIN_MU:g}: noise of more than "
            f"{1 / GDP_MIN_MU:.0e} times the sensitivity)"
        )
    if not mu <= GDP_MAX_MU:
        raise BudgetError(
            f"a μ of {mu:.3g} per release is too large: the exact calibration of the discrete Gaussian covers "
            f"μ ≤ {GDP_MAX_MU:g} (μ = {GDP_MAX_MU:g} is already ε > 100 at δ = 1e-6: no meaningful privacy)",
            hint=f"ask with a smaller μ (at most {GDP_MAX_MU:g} per release; AVG and GROUP BY under replace-one "
            "split a query's μ over several releases)",
        )


def _sigma_estimate(definition: Definition, cost: float, sens: Sensitivity) -> float:
    """The continuous noise scale for ``sens`` (in its units): a guide for choosing grids, not a calibration."""
    d = float(sens.or_one().delta(definition))
    if definition == "pure":
        return d / cost
    if definition == "zcdp":
        return d / math.sqrt(2.0 * cost)
    return d * math.sqrt(sens.or_one().max_cells) / cost


def float_unit(definition: Definition, cost: float, sens: Sensitivity, max_abs: float) -> float:
    """The quantum u (a power of two) of a float SUM whose sensitivity in the column's units is ``sens``.

    u ≈ σ·2⁻⁵², so that the quantisation error of up to MAX_ROWS = 2³² rows, 2³¹·u, is at most 2⁻²¹σ; and
    u ≥ max|value|·2⁻⁶², so that every quantised value fits an int64 (then the bound is reported as it is).
    """
    sigma = _sigma_estimate(definition, cost, sens)
    e = math.floor(math.log2(sigma)) - 52 if sigma > 0 and math.isfinite(sigma) else 0
    if max_abs > 0:
        e = max(e, math.ceil(math.log2(max_abs)) - 62)
    return math.ldexp(1.0, min(max(e, -1000), 1000))


def quantise(values: np.ndarray, unit: float, lower: float, upper: float) -> np.ndarray:
    """rint(clamp(x) / unit) as int64: exact (``unit`` is a power of two) and non-decreasing in x."""
    x = np.clip(np.asarray(values, dtype=np.float64), lower, upper)
    return np.rint(x / unit).astype(np.int64)


def _to_units(unit: float):  # type: ignore[no-untyped-def]
    return lambda v: int(np.rint(float(v) / unit))


def _grid_factor(definition: Definition, delta: float, cost: float, cells: int) -> int:
    """The coarse grid k (in units) a release of sensitivity ``delta`` (in units) is rounded to."""
    if definition == "gdp":
        cont = delta * math.sqrt(cells) / cost
        if cont <= 300.0 and float(delta).is_integer():
            return 1
        return max(1, math.ceil(cont / _GRID_UNITS))
    if delta < 2.0**21:
        return 1
    return 2 ** (math.floor(math.log2(delta)) - 20)


def calibrate(definition: Definition, cost: float, sens: Sensitivity, *, unit: float = 1.0, bias: float = 0.0) -> Noise:
    """The integer noise that makes a release of sensitivity ``sens`` (in units of ``unit``) cost ``cost``.

    ``cost`` is the release's ε, ρ or μ.  Pure: discrete Laplace, b = Δ₁/ε; zCDP: discrete Gaussian,
    σ = Δ₂/√(2ρ) (Canonne, Kamath & Steinke 2020, Thm. 14); GDP: each of the at most k cells one step changes
    gets an exactly calibrated discrete Gaussian for μ/√k at the largest single change Δ∞.  Large
    sensitivities are rounded to a grid first (:meth:`Sensitivity.coarsen`).  ``bias`` is a deterministic error
    bound of the exact value (float quantisation) added to the interval.
    """
    sens = sens.or_one()
    cells = sens.max_cells if definition == "gdp" else 1
    if definition == "gdp":
        _check_mu(cost / math.sqrt(cells))
    delta = sens.delta(definition)
    k = _grid_factor(definition, float(delta), cost, cells)
    dk = sens.coarsen(k).delta(definition)
    if definition == "pure":
        kind, scale = "discrete_laplace", dk / cost
    elif definition == "zcdp":
        kind, scale = "discrete_gaussian", dk / math.sqrt(2.0 * cost)
    else:
        kind, scale = "discrete_gaussian", discrete_gaussian_gdp_sigma(cost / math.sqrt(cells), int(dk))
    rounding = (k * unit / 2.0 if k > 1 else 0.0) + bias
    noise = Noise(kind, scale, float(delta) * unit, k * unit, unit, k, rounding, cells, float(dk))  # type: ignore[arg-type]
    return _check_scale(noise, cost)


def noise_for(definition: Definition, cost: float, sensitivity: float, *, integer: bool) -> Noise:
    """The noise that makes a one-cell query of ``sensitivity`` cost ``cost`` (ε, ρ or μ) under ``definition``.

    ``integer=False`` gives the continuous Laplace / Gaussian (for planning illustrations; releases are integer).
    """
    if sensitivity <= 0:
        raise ValueError("sensitivity must be positive")
    if integer:
        return calibrate(definition, cost, Sensitivity(((sensitivity,),)))
    if definition == "pure":
        noise = Noise("laplace", sensitivity / cost, sensitivity)
    elif definition == "zcdp":
        noise = Noise("gaussian", sensitivity / math.sqrt(2.0 * cost), sensitivity)
    else:
        _check_mu(cost)
        noise = Noise("gaussian", sensitivity / cost, sensitivity)
    return _check_scale(noise, cost)


# --------------------------------------------------------------------------------------------------
# releases


@lru_cache(maxsize=256)
def _integer_measurement(kind: NoiseKind, scale: float) -> dp.Measurement:
    domain = dp.vector_domain(dp.atom_domain(T="i64"))
    if kind == "discrete_laplace":
        return dp.m.make_laplace(domain, dp.l1_distance(T="i64"), scale=scale)
    if kind == "discrete_gaussian":
        return dp.m.make_gaussian(domain, dp.l2_distance(T="i64"), scale=scale)
    raise ValueError(f"{kind} is not an integer mechanism")


def _on_grid(values: Sequence[int] | np.ndarray, noise: Noise) -> list[int]:
    """Round exact integer values (in units) to the noise's grid, ⌊v/k + 1/2⌋, and clamp to ±SUM_CLAMP."""
    k = noise.factor
    out = []
    for v in values:
        r = int(v) if k == 1 else (2 * int(v) + k) // (2 * k)
        out.append(min(max(r, -SUM_CLAMP), SUM_CLAMP))
    return out


def release_integer(values: Sequence[int] | np.ndarray, noise: Noise) -> np.ndarray:
    """Add OpenDP discrete Laplace / Gaussian noise to each exact integer in ``values`` (in the noise's units).

    Each value is rounded to the grid of ``noise.factor`` units and clamped to ±SUM_CLAMP grid units, integer
    noise is added in grid units, and the result is scaled back to the answer's units (× granularity).  Total:
    no input makes it raise.
    """
    if len(values) == 0:
        return np.zeros(0, dtype=np.float64)
    meas = _integer_measurement(noise.kind, noise.scale)
    return np.asarray(meas(_on_grid(values, noise)), dtype=np.float64) * noise.granularity


# --------------------------------------------------------------------------------------------------
# μ-GDP of the discrete Gaussian
#
# OpenDP's discrete Gaussian N_Z(0, σ²) with integer sensitivity Δ is *not* exactly (Δ/σ)-GDP: its privacy
# curve is (Canonne, Kamath & Steinke 2020, Thm. 7; X ~ N_Z(0, σ²))
#     δ_DG(ε) = P[X > εσ²/Δ − Δ/2] − e^ε P[X > εσ²/Δ + Δ/2],
# which exceeds the continuous Gaussian's (e.g. σ = Δ = 1 at ε = 0: 0.399 > 0.383).  A mechanism is μ-GDP iff
# it is (ε, δ_μ(ε))-DP for every ε ≥ 0 (Dong, Roth & Su 2019, Cor. 2.13), so we calibrate σ until
# sup_{ε ≥ 0} δ_DG(ε) − δ_μ(ε) ≤ 0, computed exactly: between consecutive values of ε where a threshold
# crosses an integer, δ_DG(ε) = A − B e^ε with constant A, B, and since δ_μ'(ε) = −e^ε Φ(−ε/μ − μ/2) the
# difference increases then decreases, peaking at ε* = −μ (Φ⁻¹(B) + μ/2); so the supremum is the largest value
# at the interval ends and at ε*.  Tails beyond 40σ are below the smallest double and count as 0.
#
# Large sensitivities would make that lattice huge; such sums are rounded to a grid g first (a
# data-independent post-processing of the exact sum whose sensitivity becomes ⌈Δ/g⌉ grid units), with g
# chosen so that about 200 grid units make one standard deviation: the rounding error g/2 is then < 1% of σ.

_GRID_UNITS = 200.0
#: Smallest μ per release: below it σ > 10⁴·Δ and the exact calibration's lattice (≈ 80/μ points) grows large.
GDP_MIN_MU = 1e-4
#: Largest μ per release: beyond it the GDP curve's ε range leaves double precision (e^ε overflows) and the
#: exact calibration cannot be computed; μ = 16 is already (ε ≈ 200, δ = 1e-6)-DP.
GDP_MAX_MU = 16.0


def _gdp_delta(mu: float, eps: np.ndarray) -> np.ndarray:
    """δ_μ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), computed in logs for large ε."""
    a = norm.cdf(-eps / mu + mu / 2.0)
    b = np.exp(eps + norm.logcdf(-eps / mu - mu / 2.0))
    return a - b


@lru_cache(maxsize=64)
def _dgauss_survival(sigma: float) -> tuple[int, np.ndarray]:
    """(K, sf) with sf[j] = P[X ≥ j − K] for X ~ N_Z(0, σ²), j = 0 … 2K + 1 (sf[2K + 1] = 0)."""
    k_max = int(math.ceil(40.0 * sigma)) + 2
    k = np.arange(-k_max, k_max + 1, dtype=float)
    with np.errstate(over="ignore", divide="ignore"):
        w = np.exp(-0.5 * (k / sigma) ** 2)
    p = w / w.sum()
    sf = np.concatenate([np.cumsum(p[::-1])[::-1], [0.0]])
    return k_max, sf


def discrete_gaussian_gdp_excess(sigma: float, sensitivity: int, mu: float) -> float:
    """sup over ε of δ_DG(ε) / δ_μ(ε) − 1 for N_Z(0, σ²) with integer ``sensitivity``: ≤ 0 ⇔ μ-GDP.

    Taken over every ε ≥ 0 with δ_μ(ε) ≥ :data:`GDP_DELTA_FLOOR` (below it both curves are beyond double
    precision); :func:`discrete_gaussian_gdp_sigma` accepts σ when this is ≤ 1e-9 (floating-point slack).
    """
    d = float(sensitivity)
    k_max, sf = _dgauss_survival(sigma)

    def tail(t: np.ndarray) -> np.ndarray:  # P[X > t] = P[X ≥ floor(t) + 1]
        j = np.clip(np.floor(t).astype(np.int64) + 1 + k_max, 0, 2 * k_max + 1)
        return sf[j]

    s2 = sigma * sigma
    m = np.arange(-k_max - 1, k_max + 2, dtype=float)
    cuts = np.concatenate([(m + d / 2.0) * d / s2, (m - d / 2.0) * d / s2, [0.0]])
    e_max = min((k_max + 1 + d / 2.0) * d / s2, _gdp_eps_floor(mu))
    cuts = np.unique(cuts[(cuts >= 0.0) & (cuts < e_max)])
    lo, hi = cuts, np.append(cuts[1:], e_max)
    mid = (lo + hi) / 2.0
    a = tail(mid * s2 / d - d / 2.0)
    b = tail(mid * s2 / d + d / 2.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        star = np.where(b > 0.0, -mu * (norm.ppf(np.clip(b, 1e-300, 1.0)) + mu / 2.0), -1.0)
        logb = np.where(b > 0.0, np.log(np.maximum(b, 1e-320)), -np.inf)
    star = np.clip(star, lo, hi)
    best = -np.inf
    for e in (lo, hi, star):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            ref = _gdp_delta(mu, e)
            ratio = (a - np.exp(e + logb)) / ref - 1.0
        best = max(best, float(np.nanmax(ratio)))
    return best


#: δ below which the GDP curve comparison is not made (beyond double precision; no (ε, δ) claim goes there).
GDP_DELTA_FLOOR = 1e-100


@lru_cache(maxsize=256)
def _gdp_eps_floor(mu: float) -> float:
    """The ε at which δ_μ(ε) = GDP_DELTA_FLOOR."""
    from dpmagic.accountant.currency import gdp_epsilon

    return gdp_epsilon(mu, GDP_DELTA_FLOOR)


@lru_cache(maxsize=4096)
def discrete_gaussian_gdp_sigma(mu: float, sensitivity: int) -> float:
    """The smallest σ (to a relative 1e-6, on the safe side) with N_Z(0, σ²) μ-GDP at integer ``sensitivity``."""
    if mu <= 0 or sensitivity <= 0:
        raise ValueError("μ and the sensitivity must be positive")
    ok = 1e-9  # relative floating-point slack in comparing the two curves

    lo = sensitivity / mu  # the continuous Gaussian's σ: the discrete one never needs less
    hi = lo * 1.01
    while discrete_gaussian_gdp_excess(hi, sensitivity, mu) > ok:
        hi *= 1.25
    for _ in range(60):
        if hi / lo - 1.0 < 1e-6:
            break
        mid = math.sqrt(lo * hi)
        if discrete_gaussian_gdp_excess(mid, sensitivity, mu) > ok:
            lo = mid
        else:
            hi = mid
    return hi * (1.0 + 1e-6)


def gdp_noise(mu: float, sensitivity: float, *, integer_values: bool = True) -> Noise:
    """μ-GDP noise for a one-cell integer release of ``sensitivity``: OpenDP's discrete Gaussian, exactly
    calibrated (:func:`calibrate`; σ_continuous = Δ/μ > 300 is released on a grid g ≈ σ_continuous / 200)."""
    if not integer_values:
        raise ValueError("dpmagic releases integers: float sums are quantised first (dpmagic.release.plan_noise)")
    return calibrate("gdp", mu, Sensitivity(((sensitivity,),)))


# --------------------------------------------------------------------------------------------------
# distribution facts (for confidence intervals and accuracy planning)


#: Above this σ the discrete Gaussian's tails and half-widths use the continuous bound of CKS20 Prop. 25
#: (safe, and tight to one unit) instead of summing its ~24σ probabilities.
_DG_LARGE = 1000.0


def _dlap_alpha(scale: float) -> float:
    return math.exp(-1.0 / scale)


def _variance(kind: NoiseKind, scale: float) -> float:
    if kind == "laplace":
        return 2.0 * scale * scale
    if kind == "gaussian":
        return scale * scale
    if kind == "discrete_laplace":
        a = _dlap_alpha(scale)
        if 1.0 - a < 1e-9:
            return 2.0 * scale * scale
        return 2.0 * a / (1.0 - a) ** 2
    if scale > _DG_LARGE:  # Var ≤ σ² (Canonne, Kamath & Steinke 2020, Cor. 9), equal to within e^{-2π²σ²}
        return scale * scale
    # discrete Gaussian: Σ k² p(k) by direct summation over the effective support
    k, p = _dgauss_pmf(scale)
    return float(np.sum(k * k * p))


def _dgauss_pmf(sigma: float) -> tuple[np.ndarray, np.ndarray]:
    half = int(math.ceil(12.0 * sigma)) + 10
    k = np.arange(-half, half + 1, dtype=float)
    with np.errstate(over="ignore", divide="ignore"):
        w = np.exp(-0.5 * (k / sigma) ** 2)  # tiny σ: every k ≠ 0 gets weight 0
    return k, w / w.sum()


def _tail(kind: NoiseKind, scale: float, h: float) -> float:
    """P(|X| > h)."""
    if h < 0:
        return 1.0
    if kind == "laplace":
        return math.exp(-h / scale)
    if kind == "gaussian":
        return float(2.0 * norm.sf(h / scale))
    hk = math.floor(h)
    if kind == "discrete_laplace":
        a = _dlap_alpha(scale)
        # P(X > h) = α^{h+1} / (1 + α) for the discrete Laplace with P(k) ∝ α^|k|
        return 2.0 * a ** (hk + 1) / (1.0 + a)
    if scale > _DG_LARGE:  # P[X ≥ m] ≤ P[N(0, σ²) ≥ m − 1] for integers m ≥ 1 (CKS20, Prop. 25): an upper bound
        return min(1.0, float(2.0 * norm.sf(hk / scale)))
    k, p = _dgauss_pmf(scale)
    return float(p[np.abs(k) > hk].sum())


def _halfwidth(kind: NoiseKind, scale: float, level: float) -> float:
    miss = 1.0 - level
    if kind == "laplace":
        return scale * math.log(1.0 / miss)
    if kind == "gaussian":
        return float(scale * norm.ppf(1.0 - miss / 2.0))
    if kind == "discrete_laplace":
        a = _dlap_alpha(scale)
        if 1.0 - a < 1e-9:  # huge scale: the continuous Laplace's quantile, rounded up, is exact to 1e-9
            return float(math.ceil(scale * math.log(1.0 / miss)))
        if a <= 0.0 or _tail(kind, scale, 0) <= miss:
            return 0.0  # so little noise that 0 is already the 95% half-width (α underflows for tiny scales)
        # smallest integer h with 2 α^{h+1}/(1+α) ≤ miss
        h = math.ceil(math.log(miss * (1.0 + a) / 2.0) / math.log(a) - 1.0)
        h = max(h, 0)
        while h > 0 and _tail(kind, scale, h - 1) <= miss:
            h -= 1
        while _tail(kind, scale, h) > miss:
            h += 1
        return float(h)
    if scale > _DG_LARGE:  # the smallest integer h with the tail bound above ≤ miss (≥ the exact half-width)
        return float(math.ceil(scale * norm.ppf(1.0 - miss / 2.0)))
    k, p = _dgauss_pmf(scale)
    center = len(k) // 2
    cum = p[center] + 2.0 * np.cumsum(p[center + 1 :])
    if p[center] >= level:
        return 0.0
    return float(int(np.searchsorted(cum, level - 1e-15)) + 1)
