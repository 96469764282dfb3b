"""Noise mechanisms: OpenDP's exact samplers, calibrated to a cost in the session's currency.

* Counts and sums over ``int`` columns are integers: pure ε-DP uses the **discrete Laplace** mechanism
  (scale b = Δ/ε), zCDP and GDP use the **discrete Gaussian** (σ = Δ/√(2ρ), resp. σ = Δ/μ).
* Sums over ``float`` columns go through OpenDP's ``make_sum`` (which accounts for floating-point rounding
  in its sensitivity) chained with OpenDP's exact float Laplace / Gaussian samplers.
* Sensitivities under add/remove-one neighbours: COUNT 1; SUM over a column declared ``[lower, upper]``
  (values clamped to it) max(|lower|, |upper|).

Every release carries its noise scale and a 95% confidence interval computed from the noise distribution
itself (exact tail sums for the discrete distributions).  No numpy random generator is ever used for noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
import opendp.prelude as dp
from scipy.stats import norm

from dpmagic.accountant.currency import Definition

dp.enable_features("contrib")

__all__ = [
    "Noise",
    "NoiseKind",
    "discrete_gaussian_gdp_excess",
    "discrete_gaussian_gdp_sigma",
    "float_sum_noise",
    "gdp_noise",
    "noise_for",
    "release_float_sum",
    "release_integer",
]

NoiseKind = Literal["discrete_laplace", "laplace", "discrete_gaussian", "gaussian"]


@dataclass(frozen=True)
class Noise:
    """A calibrated noise distribution: its family, scale (b or σ) and the sensitivity it covers."""

    kind: NoiseKind
    scale: float
    sensitivity: float
    #: GDP releases on a grid: the value is rounded to a multiple of ``granularity`` before integer noise
    #: (in grid units) is added, so the released error is granularity · noise + a rounding error ≤ granularity/2.
    granularity: float = 1.0

    @property
    def is_discrete(self) -> bool:
        return self.kind.startswith("discrete")

    @property
    def _rounding(self) -> float:
        return 0.0 if self.granularity == 1.0 else self.granularity / 2.0

    @property
    def variance(self) -> float:
        """Variance of the noise (in the answer's units; the grid rounding is a bounded bias, not included)."""
        return self.granularity**2 * _variance(self.kind, self.scale)

    @property
    def std(self) -> float:
        return math.sqrt(self.variance)

    def ci_halfwidth(self, level: float = 0.95) -> float:
        """Smallest h with P(|error| ≤ h) ≥ level (exact for the discrete distributions; grid rounding added)."""
        return self.granularity * _halfwidth(self.kind, self.scale, level) + self._rounding

    def tail(self, h: float) -> float:
        """P(|error| > h) (an upper bound when a grid rounding is involved)."""
        return _tail(self.kind, self.scale, (h - self._rounding) / self.granularity)

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


def noise_for(definition: Definition, cost: float, sensitivity: float, *, integer: bool) -> Noise:
    """The noise that makes a query of ``sensitivity`` cost ``cost`` (ε, ρ or μ) under ``definition``."""
    if sensitivity <= 0:
        raise ValueError("sensitivity must be positive")
    if definition == "pure":
        noise = Noise("discrete_laplace" if integer else "laplace", sensitivity / cost, sensitivity)
    elif definition == "zcdp":
        noise = Noise("discrete_gaussian" if integer else "gaussian", sensitivity / math.sqrt(2.0 * cost), sensitivity)
    else:
        noise = gdp_noise(cost, sensitivity, integer_values=integer)
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


def release_integer(values: np.ndarray, noise: Noise) -> np.ndarray:
    """Add OpenDP discrete Laplace / Gaussian noise to each exact integer in ``values``.

    With a grid (GDP releases of large sums), each value is first rounded to the nearest multiple of the
    granularity g, integer noise is added in grid units, and the result is scaled back by g.
    """
    meas = _integer_measurement(noise.kind, noise.scale)
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    g = noise.granularity
    if g == 1.0:
        return np.asarray(meas([int(v) for v in values]), dtype=np.int64)
    gi = int(g)
    lattice = [(2 * int(v) + gi) // (2 * gi) for v in values]  # exact round-half-up of v / g
    return np.asarray(meas(lattice), dtype=np.float64) * g


@lru_cache(maxsize=128)
def _float_sum_measurement(kind: NoiseKind, scale: float, lower: float, upper: float) -> dp.Measurement:
    domain = dp.vector_domain(dp.atom_domain(bounds=(float(lower), float(upper))))
    summed = dp.t.make_sum(domain, dp.symmetric_distance())
    if kind == "laplace":
        return summed >> dp.m.then_laplace(scale=scale)
    if kind == "gaussian":
        return summed >> dp.m.then_gaussian(scale=scale)
    raise ValueError(f"{kind} is not a float mechanism")


def float_sum_noise(definition: Definition, cost: float, lower: float, upper: float, *, d_in: int = 1) -> Noise:
    """Noise for a float SUM, using OpenDP's own sensitivity of ``make_sum`` (it includes rounding error).

    ``d_in`` is the symmetric distance between neighbours: 1 for add/remove-one, 2 for replace-one.
    """
    domain = dp.vector_domain(dp.atom_domain(bounds=(float(lower), float(upper))))
    sens = float(dp.t.make_sum(domain, dp.symmetric_distance()).map(d_in))
    if definition == "gdp":
        return _check_scale(gdp_noise(cost, sens, integer_values=False), cost)
    noise = noise_for(definition, cost, sens, integer=False)  # refuses scales beyond MAX_SCALE
    # Make sure OpenDP's own privacy map agrees that the chain costs at most `cost`.
    meas = _float_sum_measurement(noise.kind, noise.scale, lower, upper)
    target = cost
    scale = noise.scale
    for _ in range(60):
        if float(meas.map(d_in)) <= target:
            break
        scale *= 1.0 + 1e-9
        meas = _float_sum_measurement(noise.kind, scale, lower, upper)
    return Noise(noise.kind, scale, sens)


def release_float_sum(groups: list[np.ndarray], noise: Noise, lower: float, upper: float) -> np.ndarray:
    """OpenDP's float ``make_sum`` followed by its exact float Laplace / Gaussian, one release per group.

    GDP releases (``discrete_gaussian`` noise on a grid): OpenDP's ``make_sum`` computes the sum, which is
    rounded to the grid and perturbed with OpenDP's discrete Gaussian in grid units.
    """
    if noise.kind == "discrete_gaussian":
        domain = dp.vector_domain(dp.atom_domain(bounds=(float(lower), float(upper))))
        summed = dp.t.make_sum(domain, dp.symmetric_distance())
        meas = _integer_measurement(noise.kind, noise.scale)
        g = noise.granularity
        lattice = [math.floor(float(summed([float(x) for x in grp])) / g + 0.5) for grp in groups]
        return np.asarray(meas(lattice), dtype=np.float64) * g if groups else np.zeros(0)
    meas = _float_sum_measurement(noise.kind, noise.scale, lower, upper)
    return np.array([float(meas([float(x) for x in g])) for g in groups], dtype=float)


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
# data-independent post-processing of the exact sum whose sensitivity becomes ⌈Δ/g⌉ + 1 grid units), with g
# chosen so that about 200 grid units make one standard deviation: the rounding error g/2 is then < 1% of σ.

_GRID_UNITS = 200.0
#: Smallest μ per release: below it σ > 10⁴·Δ and the exact calibration's lattice (≈ 80/μ points) grows large.
GDP_MIN_MU = 1e-4


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


def gdp_noise(mu: float, sensitivity: float, *, integer_values: bool) -> Noise:
    """μ-GDP noise for a release of ``sensitivity``: OpenDP's discrete Gaussian, exactly calibrated.

    Integer values with σ_continuous = Δ/μ ≤ 300 are perturbed directly; larger (or float) values are first
    rounded to a grid g ≈ σ_continuous / 200, where the sensitivity is ⌈Δ/g⌉ + 1 grid units.
    """
    if not mu >= GDP_MIN_MU:
        from dpmagic.errors import BudgetError

        raise BudgetError(
            f"a μ of {mu:.3g} per release is too small to be useful (below {GDP_MIN_MU:g}: noise of more than "
            f"{1 / GDP_MIN_MU:.0e} times the sensitivity)"
        )
    cont = sensitivity / mu
    if integer_values and cont <= 300.0 and float(sensitivity).is_integer():
        return Noise("discrete_gaussian", discrete_gaussian_gdp_sigma(float(mu), int(sensitivity)), sensitivity)
    g = float(max(1, math.ceil(cont / _GRID_UNITS))) if integer_values else cont / _GRID_UNITS
    units = int(math.ceil(sensitivity / g * (1.0 + 1e-12))) + 1
    return Noise("discrete_gaussian", discrete_gaussian_gdp_sigma(float(mu), units), sensitivity, g)


# --------------------------------------------------------------------------------------------------
# distribution facts (for confidence intervals and accuracy planning)


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
    k, p = _dgauss_pmf(scale)
    center = len(k) // 2
    cum = p[center] + 2.0 * np.cumsum(p[center + 1 :])
    if p[center] >= level:
        return 0.0
    return float(int(np.searchsorted(cum, level - 1e-15)) + 1)
