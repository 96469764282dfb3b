"""Noise: OpenDP samplers match their declared distributions; confidence intervals cover as stated."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpmagic.accountant.currency import CURRENCIES, gdp_delta, gdp_epsilon, parse_budget
from dpmagic.errors import BudgetError
from dpmagic.noise.calibration import Noise, noise_for, release_integer

N = 20_000


@pytest.mark.parametrize(
    "definition, cost, sens, kind, scale",
    [
        ("pure", 0.5, 1.0, "discrete_laplace", 2.0),
        ("pure", 2.0, 10.0, "discrete_laplace", 5.0),
        ("zcdp", 0.5, 1.0, "discrete_gaussian", 1.0),
        ("zcdp", 0.125, 3.0, "discrete_gaussian", 6.0),
    ],
)
def test_calibration(definition, cost, sens, kind, scale) -> None:
    n = noise_for(definition, cost, sens, integer=True)
    assert n.kind == kind
    assert n.scale == pytest.approx(scale)


def _dg_delta_brute(sigma: float, d: int, eps: np.ndarray) -> np.ndarray:
    """CKS20 Thm 7 evaluated directly from the probability mass function (independent of the package)."""
    k = np.arange(-int(60 * sigma) - 60, int(60 * sigma) + 61)
    p = np.exp(-0.5 * (k / sigma) ** 2)
    p /= p.sum()
    out = []
    for e in eps:
        # hockey stick: Σ_k max(0, p(k) − e^ε p(k − d))
        q = np.exp(-0.5 * ((k - d) / sigma) ** 2)
        q /= q.sum()
        out.append(np.clip(p - np.exp(e) * q, 0.0, None).sum())
    return np.array(out)


@pytest.mark.parametrize("mu, d", [(1.0, 1), (0.5, 1), (2.0, 1), (0.3, 2), (3.0, 1), (1.0, 3)])
def test_gdp_discrete_gaussian_is_calibrated_exactly(mu: float, d: int) -> None:
    from dpmagic.accountant.currency import gdp_delta
    from dpmagic.noise.calibration import discrete_gaussian_gdp_excess, discrete_gaussian_gdp_sigma

    sigma = discrete_gaussian_gdp_sigma(mu, d)
    assert sigma >= d / mu  # never less noise than the continuous Gaussian
    eps = np.linspace(0.0, 12.0, 241)
    brute = _dg_delta_brute(sigma, d, eps)
    cont = np.array([gdp_delta(mu, e) for e in eps])
    assert np.all(brute <= cont * (1 + 1e-6) + 1e-15)  # (ε, δ_μ(ε))-DP at every ε: μ-GDP
    naive = _dg_delta_brute(d / mu, d, eps)  # σ = Δ/μ, as for the continuous Gaussian, is NOT enough
    assert np.any(naive > cont * (1 + 1e-6) + 1e-15)
    assert discrete_gaussian_gdp_excess(sigma * 0.99, d, mu) > 0  # and the calibration is tight


def test_gdp_grid_release_for_large_sensitivity() -> None:
    n = noise_for("gdp", 0.5, 99999.0, integer=True)
    assert n.granularity > 1 and n.granularity * n.scale >= 99999 / 0.5
    draws = release_integer(np.full(4000, 10**9 + 7), n) - (10**9 + 7)
    h = n.ci_halfwidth()
    assert abs(np.mean(np.abs(draws) <= h) - 0.95) < 0.03


@pytest.mark.parametrize("noise", [Noise("discrete_laplace", 2.0, 1.0), Noise("discrete_gaussian", 3.0, 1.0)])
def test_integer_noise_moments_and_ci(noise: Noise) -> None:
    draws = release_integer(np.full(N, 1000), noise) - 1000
    sd = noise.std
    assert abs(draws.mean()) < 6 * sd / math.sqrt(N)
    assert draws.var() == pytest.approx(noise.variance, rel=0.12)
    h = noise.ci_halfwidth(0.95)
    covered = np.mean(np.abs(draws) <= h)
    expected = 1.0 - noise.tail(h)
    assert expected >= 0.95
    assert abs(covered - expected) < 6 * math.sqrt(expected * (1 - expected) / N)
    # h is the smallest such integer
    assert noise.tail(h - 1) > 0.05


def test_continuous_halfwidths() -> None:
    assert Noise("laplace", 2.0, 1.0).ci_halfwidth(0.95) == pytest.approx(2.0 * math.log(20))
    assert Noise("gaussian", 3.0, 1.0).ci_halfwidth(0.95) == pytest.approx(3.0 * 1.959964, rel=1e-5)


def test_tiny_scale_halfwidth_zero() -> None:
    assert Noise("discrete_laplace", 0.05, 1.0).ci_halfwidth() == 0.0
    assert Noise("discrete_gaussian", 0.1, 1.0).ci_halfwidth() == 0.0


def test_currencies() -> None:
    pure, zcdp, gdp = CURRENCIES["pure"], CURRENCIES["zcdp"], CURRENCIES["gdp"]
    assert pure.weight(0.3) == 0.3 and zcdp.weight(0.3) == 0.3
    assert gdp.weight(0.5) == 0.25 and gdp.cost(0.25) == 0.5
    assert pure.approx_dp(1.0, 1e-6) == 1.0
    rho = 0.5
    assert zcdp.approx_dp(rho, 1e-6) == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1e6)))
    eps = gdp.approx_dp(1.0, 1e-5)
    assert gdp_delta(1.0, eps) == pytest.approx(1e-5, rel=1e-6)
    assert 4.0 < eps < 5.0  # μ = 1 GDP is about (4.4, 1e-5)-DP
    assert gdp_epsilon(0.01, 0.5) == 0.0


@pytest.mark.parametrize(
    "spec, parameter, total",
    [("epsilon=1.0", "epsilon", 1.0), ("rho=0.5", "rho", 0.5), ("mu=2", "mu", 2.0), ({"eps": 3}, "epsilon", 3.0)],
)
def test_parse_budget(spec, parameter, total) -> None:
    b = parse_budget(spec)
    assert b.currency.parameter == parameter and b.total == total


@pytest.mark.parametrize(
    "spec",
    ["epsilon=-1", "epsilon=0", "epsilon=nan", "epsilon=inf", "eps", "epsilon=1 rho=1", "lambda=1", "epsilon=x", 5],
)
def test_parse_budget_errors(spec) -> None:
    with pytest.raises(BudgetError):
        parse_budget(spec)


def test_tiny_costs_are_refused_before_charging() -> None:
    """Found by the fuzz run: ε = 1e-89 gives a noise scale of 1e89."""
    from dpmagic.errors import BudgetError

    for definition in ("pure", "zcdp", "gdp"):
        with pytest.raises(BudgetError, match="too small to be useful"):
            noise_for(definition, 1e-89, 1.0, integer=True)
    for definition in ("pure", "gdp"):  # ε = 1e-17: b = 1e17; μ = 1e-17: below the GDP floor
        with pytest.raises(BudgetError, match="too small to be useful"):
            noise_for(definition, 1e-17, 1.0, integer=True)
    assert noise_for("zcdp", 1e-17, 1.0, integer=True).scale < 1e9  # ρ = 1e-17 is still a usable σ
    big = Noise("discrete_laplace", 1e12, 1.0)
    assert big.ci_halfwidth() == pytest.approx(1e12 * math.log(20), rel=1e-6)
    assert big.variance == pytest.approx(2e24, rel=1e-6)
