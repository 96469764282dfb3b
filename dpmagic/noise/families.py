"""Noise families as variance models (per unit of sensitivity, with their sensitivity norm): the error formulas of the
matrix mechanism, and the analytic Gaussian.  The calibrated noise of a release is :class:`dpmagic.noise.calibration.Noise`.

The matrix mechanism (Li, Miklau, Hay, McGregor, Rastogi, "The matrix mechanism: optimizing linear counting
queries under differential privacy", VLDB J. 24(6), 2015, doi:10.1007/s00778-015-0398-x) measures A x + z with
i.i.d. noise z of variance ``unit_variance · Δ_p(A)²``, where Δ₁(A) is A's largest column L1 norm (Laplace, pure
ε) and Δ₂(A) its largest column L2 norm (Gaussian).  These objects only describe the *distribution* for the
error formulas; the release path samples noise with OpenDP (the session passes its own sampler to
:func:`dpmagic.batch.reconstruct.measure_and_reconstruct`).

Gaussian calibrations (σ is the standard deviation per unit L2 sensitivity):

* ρ-zCDP: σ = 1/√(2ρ) (Bun & Steinke, TCC 2016, doi:10.1007/978-3-662-53641-4_24, Prop. 1.6);
* μ-GDP: σ = 1/μ (Dong, Roth, Su, JRSS-B 84(1), 2022, doi:10.1111/rssb.12454, Thm 2.7);
* (ε, δ) analytic Gaussian: the smallest σ with Φ(1/(2σ) − εσ) − e^ε Φ(−1/(2σ) − εσ) ≤ δ (Balle & Wang,
  ICML 2018, "Improving the Gaussian mechanism for differential privacy", Thm 8), found by bisection on the
  exact condition.  At ε = 1, δ = 1e-6 this gives σ = 4.2256, HDMM Table 5's multiplier.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dpmagic.errors import ConfigurationError

__all__ = [
    "NoiseFamily",
    "laplace",
    "gaussian",
    "gaussian_zcdp",
    "gaussian_gdp",
    "analytic_gaussian",
    "analytic_gaussian_sigma",
]


@dataclass(frozen=True)
class NoiseFamily:
    """i.i.d. noise with variance ``unit_variance · Δ_p(A)²`` on each strategy answer."""

    kind: str  # "laplace" or "gaussian"
    p: int  # sensitivity norm: 1 (Laplace) or 2 (Gaussian)
    unit_variance: float
    label: str

    def variance(self, sensitivity: float) -> float:
        """Per-answer noise variance for a strategy of the given L_p sensitivity."""
        return self.unit_variance * sensitivity * sensitivity

    def scale(self, sensitivity: float) -> float:
        """The Laplace scale b (variance 2b²) or Gaussian standard deviation for that sensitivity."""
        if self.kind == "laplace":
            return math.sqrt(self.unit_variance / 2.0) * sensitivity
        return math.sqrt(self.unit_variance) * sensitivity


def _positive(x: float, name: str) -> float:
    x = float(x)
    if not math.isfinite(x) or x <= 0:
        raise ConfigurationError(f"{name} must be a positive finite number, got {x!r}")
    return x


def laplace(epsilon: float) -> NoiseFamily:
    """Laplace noise of scale Δ₁/ε (variance 2Δ₁²/ε²): ε-DP."""
    eps = _positive(epsilon, "epsilon")
    return NoiseFamily("laplace", 1, 2.0 / eps**2, f"Laplace(ε={eps:g})")


def gaussian(sigma: float, label: str | None = None) -> NoiseFamily:
    """Gaussian noise of standard deviation σ·Δ₂."""
    s = _positive(sigma, "sigma")
    return NoiseFamily("gaussian", 2, s * s, label or f"Gaussian(σ={s:g}·Δ₂)")


def gaussian_zcdp(rho: float) -> NoiseFamily:
    """ρ-zCDP Gaussian: σ = Δ₂/√(2ρ)."""
    r = _positive(rho, "rho")
    return gaussian(1.0 / math.sqrt(2.0 * r), f"Gaussian(ρ={r:g} zCDP)")


def gaussian_gdp(mu: float) -> NoiseFamily:
    """μ-GDP Gaussian: σ = Δ₂/μ."""
    mu = _positive(mu, "mu")
    return gaussian(1.0 / mu, f"Gaussian(μ={mu:g} GDP)")


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _ag_delta(sigma: float, eps: float) -> float:
    a = 1.0 / (2.0 * sigma)
    b = eps * sigma
    # e^ε Φ(−a − b) computed in log space to avoid overflow for large ε
    second = math.exp(eps + math.log(max(_phi(-a - b), 1e-320)))
    return _phi(a - b) - second


def analytic_gaussian_sigma(epsilon: float, delta: float) -> float:
    """Smallest σ (per unit L2 sensitivity) satisfying the exact (ε, δ) condition of Balle & Wang (bisection)."""
    eps = _positive(epsilon, "epsilon")
    dl = _positive(delta, "delta")
    if dl >= 1:
        raise ConfigurationError(f"delta must be below 1, got {dl!r}")
    lo, hi = 1e-6, 1.0
    while _ag_delta(hi, eps) > dl:
        hi *= 2.0
        if hi > 1e12:
            raise ConfigurationError(f"no Gaussian scale reaches δ = {dl:g} at ε = {eps:g}")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _ag_delta(mid, eps) > dl:
            lo = mid
        else:
            hi = mid
    return hi  # rounded up: hi always satisfies the condition


def analytic_gaussian(epsilon: float, delta: float) -> NoiseFamily:
    """(ε, δ)-DP analytic Gaussian mechanism (Balle & Wang 2018)."""
    s = analytic_gaussian_sigma(epsilon, delta)
    return gaussian(s, f"Gaussian(ε={epsilon:g}, δ={delta:g}, analytic σ={s:.4f})")
