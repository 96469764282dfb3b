"""Statistical privacy against differential privacy at the same (ε, δ) and the same per-query accuracy.

Accuracy (Breutigam & Reischuk, Example 2 and Sec. 6): a query asks for the proportion of rows with a property.
SP answers it exactly on a part of s rows; its error against the full-data proportion has standard deviation

    σ_SP = sqrt(p (1 − p) (1/s − 1/n))

(the s sampled rows versus the n − s others, i.i.d. rows).  A DP mechanism matches this accuracy when it answers
the full-data count with noise of standard deviation n·σ_SP.  Counting queries have sensitivity 1 under both
neighbouring relations (add/remove one row; replace one row — SP's relation is the replacement of the critical
row), so the Gaussian mechanism with that noise is μ-GDP with μ = 1/(n σ_SP) and ρ-zCDP with ρ = μ²/2.

Numbers of queries allowed at (ε, δ):

* ``paper_dp_queries`` — the paper's column "#DP": ⌊n² σ² ε² / (8 ln(e + ε/δ))⌋.  The paper attributes it to
  Theorem 15 of Kairouz, Oh & Viswanath (ICML 2015): advanced composition ε = 2 ε₀ sqrt(k ln(e + ε/δ)) with
  ε₀ = sqrt(2)/(n σ) — the ε₀ of a Laplace mechanism of standard deviation nσ, not of a Gaussian.  Loose.
* ``gdp_sequential_queries`` — k Gaussian answers compose exactly to sqrt(k)·μ-GDP (Dong, Roth & Su, JRSS-B 2022,
  Cor. 3.3); the largest k with δ_GDP(ε; sqrt(k)·μ) ≤ δ (Cor. 2.13 conversion, exact for the Gaussian mechanism).
* ``zcdp_sequential_queries`` — k ρ-zCDP answers compose to kρ (Bun & Steinke, TCC 2016); converted with
  ε = ρ + 2 sqrt(ρ ln(1/δ)) (their Prop. 1.3) or the tighter Canonne, Kamath & Steinke (NeurIPS 2020, Cor. 13)
  δ = inf_{α>1} exp((α−1)(αρ−ε)) / (α−1) · (1 − 1/α)^α.
* ``gdp_parallel_partition_queries`` — DP run on the same partition scheme with a *public* split: query k is the
  count of part k plus Gaussian noise; the parts are disjoint, so with parallel composition (dpmagic's overlap
  accounting: disjoint queries cost as one) all of them cost one μ-GDP release.  Its error is the subsampling
  error plus the rescaled noise, σ² = p(1−p)(1/s′ − 1/n) + (τ/s′)², τ = 1/μ_max; the largest m′ with parts
  s′ = ⌊n/m′⌋ whose σ is at most σ_SP.

Every count returned here is checked directly (the conversion at the returned k holds; at k + 1 it fails).
"""

from __future__ import annotations

import math

from dpmagic.accountant.currency import gdp_delta
from dpmagic.errors import ConfigurationError
from dpmagic.statistical.curves import _check_size

__all__ = [
    "sp_sigma",
    "paper_dp_value",
    "paper_dp_queries",
    "gdp_mu_for",
    "gdp_sequential_queries",
    "zcdp_delta",
    "zcdp_rho_for",
    "zcdp_sequential_queries",
    "dp_partition_sigma",
    "gdp_parallel_partition_queries",
]


def _check_eps_delta(eps: float, delta: float) -> None:
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps > 0):
        raise ConfigurationError(f"ε must be a finite number above 0, got {eps!r}")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise ConfigurationError(f"δ must be a number in (0, 1), got {delta!r}")


def sp_sigma(n: int, s: int, p: float) -> float:
    """Standard deviation of SP's answer (a proportion) against the full-data proportion: sqrt(p(1−p)(1/s − 1/n))."""
    n = _check_size(n, "n")
    s = _check_size(s)
    if s > n:
        raise ConfigurationError(f"the part size {s} exceeds n = {n}")
    return math.sqrt(p * (1.0 - p) * (1.0 / s - 1.0 / n))


def paper_dp_value(n: int, sigma: float, eps: float, delta: float) -> float:
    """The paper's DP side before rounding: n² σ² ε² / (8 ln(e + ε/δ))."""
    _check_eps_delta(eps, delta)
    return n * n * sigma * sigma * eps * eps / (8.0 * math.log(math.e + eps / delta))


def paper_dp_queries(n: int, sigma: float, eps: float, delta: float) -> int:
    """The paper's "#DP": ⌊n² σ² ε² / (8 ln(e + ε/δ))⌋."""
    return math.floor(paper_dp_value(n, sigma, eps, delta))


def gdp_mu_for(eps: float, delta: float) -> float:
    """The largest μ with δ_μ-GDP(ε) ≤ δ (bisection on the increasing map μ ↦ δ(ε; μ), rounded down)."""
    _check_eps_delta(eps, delta)
    lo, hi = 0.0, 1.0
    while gdp_delta(hi, eps) <= delta:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if gdp_delta(mid, eps) <= delta:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * hi:
            break
    return lo


def _largest_k(ok, guess: float) -> int:
    """Largest k ≥ 0 with ok(k) for a monotone predicate (true then false), starting from a real guess."""
    k = max(0, int(math.floor(guess)))
    while k > 0 and not ok(k):
        k -= 1
    while ok(k + 1):
        k += 1
    return k


def gdp_sequential_queries(n: int, sigma: float, eps: float, delta: float) -> int:
    """Gaussian counts with noise std n·σ on the full data, composed sequentially under μ-GDP: largest k at (ε, δ)."""
    _check_eps_delta(eps, delta)
    mu1 = 1.0 / (n * sigma)
    mu_max = gdp_mu_for(eps, delta)
    return _largest_k(lambda k: k == 0 or gdp_delta(math.sqrt(k) * mu1, eps) <= delta, (mu_max / mu1) ** 2)


def zcdp_delta(rho: float, eps: float, *, conversion: str = "cks") -> float:
    """δ(ε) guaranteed by ρ-zCDP: ``"bs"`` inverts ε = ρ + 2 sqrt(ρ ln(1/δ)); ``"cks"`` is the tighter infimum."""
    if rho <= 0:
        return 0.0
    if conversion == "bs":
        if eps <= rho:
            return 1.0
        return min(1.0, math.exp(-((eps - rho) ** 2) / (4 * rho)))
    if conversion != "cks":
        raise ConfigurationError(f"unknown zCDP conversion {conversion!r}", hint="use 'bs' or 'cks'")
    from scipy.optimize import minimize_scalar

    def log_delta(log_am1: float) -> float:
        a = 1.0 + math.exp(log_am1)
        return (a - 1) * (a * rho - eps) - math.log(a - 1) + a * math.log1p(-1 / a)

    res = minimize_scalar(log_delta, bounds=(-30.0, 30.0), method="bounded", options={"xatol": 1e-10})
    return float(min(1.0, math.exp(min(res.fun, log_delta(-30.0), log_delta(30.0)))))


def zcdp_rho_for(eps: float, delta: float, *, conversion: str = "cks") -> float:
    """The largest ρ whose zCDP conversion gives δ(ε) ≤ δ (bisection, rounded down)."""
    _check_eps_delta(eps, delta)
    lo, hi = 0.0, max(eps, 1e-12)
    while zcdp_delta(hi, eps, conversion=conversion) <= delta:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if zcdp_delta(mid, eps, conversion=conversion) <= delta:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return lo


def zcdp_sequential_queries(n: int, sigma: float, eps: float, delta: float, *, conversion: str = "cks") -> int:
    """Gaussian counts with noise std n·σ (ρ = 1/(2 n² σ²) each) composed under zCDP: largest k at (ε, δ)."""
    rho1 = 1.0 / (2.0 * (n * sigma) ** 2)
    rho_max = zcdp_rho_for(eps, delta, conversion=conversion)
    return _largest_k(lambda k: k == 0 or zcdp_delta(k * rho1, eps, conversion=conversion) <= delta, rho_max / rho1)


def dp_partition_sigma(n: int, s: int, p: float, mu: float) -> float:
    """Error std (as a proportion) of the DP partition scheme: part count of s rows + N(0, 1/μ²), rescaled."""
    tau = 1.0 / mu
    return math.sqrt(p * (1.0 - p) * (1.0 / s - 1.0 / n) + (tau / s) ** 2)


def gdp_parallel_partition_queries(n: int, sigma: float, p: float, eps: float, delta: float) -> int:
    """Largest m′ such that m′ disjoint parts of ⌊n/m′⌋ rows, each answered with Gaussian noise, all together one
    μ-GDP release at (ε, δ) (parallel composition), have error std at most ``sigma``.  0 if none (σ below the
    noise alone).  O(n) evaluations at worst."""
    mu = gdp_mu_for(eps, delta)
    best = 0
    # σ of the scheme grows as the parts shrink, so the feasible m′ form a prefix 1..best
    for m in range(1, n + 1):
        if dp_partition_sigma(n, n // m, p, mu) > sigma:
            break
        best = m
    return best
