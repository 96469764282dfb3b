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

__all__ = ["Noise", "NoiseKind", "float_sum_noise", "noise_for", "release_float_sum", "release_integer"]

NoiseKind = Literal["discrete_laplace", "laplace", "discrete_gaussian", "gaussian"]


@dataclass(frozen=True)
class Noise:
    """A calibrated noise distribution: its family, scale (b or σ) and the sensitivity it covers."""

    kind: NoiseKind
    scale: float
    sensitivity: float

    @property
    def is_discrete(self) -> bool:
        return self.kind.startswith("discrete")

    @property
    def variance(self) -> float:
        return _variance(self.kind, self.scale)

    @property
    def std(self) -> float:
        return math.sqrt(self.variance)

    def ci_halfwidth(self, level: float = 0.95) -> float:
        """Smallest h with P(|noise| ≤ h) ≥ level (exact for the discrete distributions)."""
        return _halfwidth(self.kind, self.scale, level)

    def tail(self, h: float) -> float:
        """P(|noise| > h)."""
        return _tail(self.kind, self.scale, h)

    def __str__(self) -> str:
        name = {"discrete_laplace": "discrete Laplace", "laplace": "Laplace"}.get(
            self.kind, self.kind.replace("_", " ")
        )
        param = "b" if "laplace" in self.kind else "σ"
        return f"{name} ({param}={self.scale:.4g})"


def noise_for(definition: Definition, cost: float, sensitivity: float, *, integer: bool) -> Noise:
    """The noise that makes a query of ``sensitivity`` cost ``cost`` (ε, ρ or μ) under ``definition``."""
    if sensitivity <= 0:
        raise ValueError("sensitivity must be positive")
    if definition == "pure":
        return Noise("discrete_laplace" if integer else "laplace", sensitivity / cost, sensitivity)
    if definition == "zcdp":
        sigma = sensitivity / math.sqrt(2.0 * cost)
    else:  # gdp: σ = Δ/μ
        sigma = sensitivity / cost
    return Noise("discrete_gaussian" if integer else "gaussian", sigma, sensitivity)


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
    """Add OpenDP discrete Laplace / Gaussian noise to each exact integer in ``values``."""
    meas = _integer_measurement(noise.kind, noise.scale)
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.asarray(meas([int(v) for v in values]), dtype=np.int64)


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
    noise = noise_for(definition, cost, sens, integer=False)
    # Make sure OpenDP's own privacy map agrees that the chain costs at most `cost`.
    meas = _float_sum_measurement(noise.kind, noise.scale, lower, upper)
    target = cost if definition == "pure" else (cost if definition == "zcdp" else cost * cost / 2.0)
    scale = noise.scale
    for _ in range(60):
        if float(meas.map(d_in)) <= target:
            break
        scale *= 1.0 + 1e-9
        meas = _float_sum_measurement(noise.kind, scale, lower, upper)
    return Noise(noise.kind, scale, sens)


def release_float_sum(groups: list[np.ndarray], noise: Noise, lower: float, upper: float) -> np.ndarray:
    """OpenDP's float ``make_sum`` followed by its exact float Laplace / Gaussian, one release per group."""
    meas = _float_sum_measurement(noise.kind, noise.scale, lower, upper)
    return np.array([float(meas([float(x) for x in g])) for g in groups], dtype=float)


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
