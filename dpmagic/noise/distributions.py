"""Facts about the noise distributions dpmagic draws from: the exact μ-GDP calibration of OpenDP's discrete
Gaussian, and the variance, tails and confidence half-widths of each noise family (in grid units).

Pure mathematics, no sampling: :mod:`dpmagic.noise.calibration` calibrates and draws (OpenDP) with these.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy.stats import norm

__all__ = [
    "GDP_MAX_MU",
    "GDP_MIN_MU",
    "GRID_UNITS",
    "NoiseKind",
    "discrete_gaussian_gdp_excess",
    "discrete_gaussian_gdp_sigma",
    "noise_halfwidth",
    "noise_tail",
    "noise_variance",
]

NoiseKind = Literal["discrete_laplace", "laplace", "discrete_gaussian", "gaussian"]


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

GRID_UNITS = 200.0
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


# --------------------------------------------------------------------------------------------------
# distribution facts (for confidence intervals and accuracy planning), in grid units


#: Above this σ the discrete Gaussian's tails and half-widths use the continuous bound of CKS20 Prop. 25
#: (safe, and tight to one unit) instead of summing its ~24σ probabilities.
_DG_LARGE = 1000.0


def _dlap_alpha(scale: float) -> float:
    return math.exp(-1.0 / scale)


def noise_variance(kind: NoiseKind, scale: float) -> float:
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


def noise_tail(kind: NoiseKind, scale: float, h: float) -> float:
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


def noise_halfwidth(kind: NoiseKind, scale: float, level: float) -> float:
    miss = 1.0 - level
    if kind == "laplace":
        return scale * math.log(1.0 / miss)
    if kind == "gaussian":
        return float(scale * norm.ppf(1.0 - miss / 2.0))
    if kind == "discrete_laplace":
        a = _dlap_alpha(scale)
        if 1.0 - a < 1e-9:  # huge scale: the continuous Laplace's quantile, rounded up, is exact to 1e-9
            return float(math.ceil(scale * math.log(1.0 / miss)))
        if a <= 0.0 or noise_tail(kind, scale, 0) <= miss:
            return 0.0  # so little noise that 0 is already the 95% half-width (α underflows for tiny scales)
        # smallest integer h with 2 α^{h+1}/(1+α) ≤ miss
        h = math.ceil(math.log(miss * (1.0 + a) / 2.0) / math.log(a) - 1.0)
        h = max(h, 0)
        while h > 0 and noise_tail(kind, scale, h - 1) <= miss:
            h -= 1
        while noise_tail(kind, scale, h) > miss:
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
