"""TSLM mathematics: FNR bounds (analytic and with OpenDP's sampler), sensitivities, β split, conversions."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize
from scipy.stats import binom, norm

from dpmagic.decision.mechanism import (
    cost_of_epsilon,
    false_negative_bound,
    gdp_mu_of_pure_epsilon,
    optimal_beta_split,
    statistic_for,
    total_cost,
    tslm_epsilon,
    uniform_beta_split,
)
from dpmagic.decision.tree import avg, count, sum_
from dpmagic.errors import BudgetError, QueryError
from dpmagic.noise.samplers import vector_measurement

# ----------------------------------------------------------------------------------------------- FNR


@pytest.mark.parametrize("beta", [0.2, 0.05, 1e-3, 5e-6])
@pytest.mark.parametrize("u", [1.0, 7.0, 300.0])
def test_continuous_tslm_meets_beta_exactly(beta: float, u: float) -> None:
    eps = tslm_epsilon(1.0, beta, u)
    assert false_negative_bound("laplace", 1.0 / eps, u) == pytest.approx(beta, rel=1e-12)


@pytest.mark.parametrize("beta", [0.2, 0.05, 1e-3, 5e-6])
@pytest.mark.parametrize("u", [1, 2, 7, 300])
def test_discrete_tslm_with_integer_u_is_below_beta(beta: float, u: int) -> None:
    eps = tslm_epsilon(1.0, beta, u)
    b = 1.0 / eps
    bound = false_negative_bound("discrete_laplace", b, u)
    assert bound < beta
    # the bound is the exact tail: compare with the summed pmf P(η=k) = (1-q)/(1+q) q^|k|
    q = math.exp(-1 / b)
    ks = np.arange(u + 1, u + 1 + int(60 * b) + 200)
    tail = float(np.sum((1 - q) / (1 + q) * q**ks))
    assert bound == pytest.approx(tail, rel=1e-9)


@pytest.mark.parametrize("op", [">", "<"])
def test_worst_case_false_negatives_with_opendp_sampler(op: str) -> None:
    """Group value just on the true side of c (worst case); 20,000 OpenDP draws; P(spurious fail) < 1e-12."""
    beta, u, c = 0.05, 20, 100
    eps = tslm_epsilon(1.0, beta, u)
    g = c + 1 if op == ">" else c - 1
    meas = vector_measurement("discrete_laplace", 1.0 / eps)
    n = 20_000
    noisy = np.asarray(meas([g] * n))
    fn = int(np.sum(noisy <= c - u)) if op == ">" else int(np.sum(noisy >= c + u))
    assert fn <= binom.isf(1e-12, n, beta)
    # and it is not vacuous: the rate is near the analytic bound (lower tail, 1e-12)
    p = false_negative_bound("discrete_laplace", 1.0 / eps, u)
    assert fn >= binom.ppf(1e-12, n, p)


# ------------------------------------------------------------------------------------- sensitivities


def _h(values, cond, lo, hi) -> float:
    if cond.aggregate == "count":
        return float(len(values))
    shift = cond.threshold if cond.aggregate == "avg" else 0.0
    return float(sum(min(max(v, lo), hi) - shift for v in values))


@pytest.mark.parametrize(
    "cond",
    [count(">", 1), sum_("x", ">", 3), sum_("x", "<", -2), avg("x", ">", 2), avg("x", "<", -1), avg("x", ">", 7)],
)
@pytest.mark.parametrize("bounds", [(-3, 4), (0, 5), (-6, -1)])
def test_sensitivity_by_brute_force(cond, bounds) -> None:
    lo, hi = bounds
    stat = statistic_for(cond, {"x": bounds}, max_group_size=3, integer_columns={"x"})
    dom = range(lo, hi + 1)
    worst_ar = worst_rep = 0.0
    for size in range(0, 3):
        for rows in itertools.product(dom, repeat=size):
            base = _h(rows, cond, lo, hi)
            for x in dom:  # add / remove one row
                worst_ar = max(worst_ar, abs(_h(rows + (x,), cond, lo, hi) - base))
            for k in range(size):  # replace one row
                for x in dom:
                    new = rows[:k] + (x,) + rows[k + 1 :]
                    worst_rep = max(worst_rep, abs(_h(new, cond, lo, hi) - base))
            # the public range holds every reachable value, and the statistic decides the condition
            assert stat.range_lo <= base <= stat.range_hi
            if cond.aggregate == "avg" and rows:
                mean = sum(rows) / len(rows)
                truth = mean > cond.threshold if cond.op == ">" else mean < cond.threshold
                assert truth == (stat.sign * base > stat.sign * stat.threshold)
    assert worst_ar == stat.sensitivity  # exact, not just an upper bound
    assert worst_rep <= 2 * stat.sensitivity


def test_avg_of_an_empty_group_is_not_reported_true() -> None:
    stat = statistic_for(avg("x", "<", 3), {"x": (0, 10)}, max_group_size=5)
    assert not (stat.sign * 0.0 > stat.sign * stat.threshold)


def test_statistic_errors() -> None:
    with pytest.raises(QueryError, match="bounds"):
        statistic_for(sum_("y", ">", 1), {}, max_group_size=3)
    with pytest.raises(QueryError, match="max_group_size"):
        statistic_for(count(">", 1), {}, max_group_size=0)
    with pytest.raises(QueryError, match="single point"):
        statistic_for(sum_("y", ">", 1), {"y": (0, 0)}, max_group_size=3)
    with pytest.raises(BudgetError):
        tslm_epsilon(1.0, 0.5, 1.0)
    with pytest.raises(BudgetError):
        tslm_epsilon(1.0, 0.1, 0.0)


# ---------------------------------------------------------------------------------------- β split


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    st.lists(st.tuples(st.floats(0.5, 50.0), st.floats(1.0, 500.0), st.integers(1, 3)), min_size=1, max_size=5),
    st.floats(1e-4, 0.4),
)
def test_closed_form_split_is_the_numeric_optimum(items, beta: float) -> None:
    dg = np.array([x[0] for x in items])
    u = np.array([x[1] for x in items])
    o = np.array([x[2] for x in items])
    a = dg / u
    closed = optimal_beta_split(list(a), list(o), beta)
    assert math.fsum(k * b for k, b in zip(o, closed)) <= beta
    eps_closed = total_cost([tslm_epsilon(d, b, uu) for d, b, uu in zip(dg, closed, u)], list(o))

    # brute force: minimise Σ o a ln(1/(2β_i)) over the simplex Σ o β = β, parametrised by softmax weights
    def objective(z: np.ndarray) -> float:
        w = np.exp(z - z.max())
        b = beta * w / np.sum(o * w)
        return float(np.sum(o * a * np.log(1 / (2 * b))))

    best = min(
        minimize(objective, z0, method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20000}).fun
        for z0 in (np.zeros(len(a)), np.log(a), -np.log(a))
    )
    assert eps_closed <= best * (1 + 1e-9) + 1e-12
    # and it beats (or ties) the uniform split
    uni = uniform_beta_split(list(o), beta)
    assert eps_closed <= total_cost([tslm_epsilon(d, b, uu) for d, b, uu in zip(dg, uni, u)], list(o)) + 1e-12


def test_printed_theorem_4_5_is_wrong_for_three_conditions() -> None:
    dg, u, o, beta = [1.0, 2.0, 3.0], [10.0, 10.0, 10.0], [1, 1, 1], 0.05
    n = 3
    printed = [
        dg[i]
        * beta
        * math.prod(u[x] for x in range(n) if x != i)
        / sum(math.prod(u[x] * o[y] * dg[y] for x in range(n) if x != y) for y in range(n))
        for i in range(n)
    ]
    assert sum(printed) != pytest.approx(beta)  # the printed allocation does not even spend β
    ours = optimal_beta_split([d / uu for d, uu in zip(dg, u)], o, beta)
    assert sum(ours) == pytest.approx(beta)


# ------------------------------------------------------------------------------------ conversions


@pytest.mark.parametrize("eps", [1e-3, 0.05, 0.5, 1.0, 3.0, 10.0])
def test_pure_to_gdp_conversion_dominates_the_tradeoff_curve(eps: float) -> None:
    mu = gdp_mu_of_pure_epsilon(eps)
    x = np.concatenate([np.linspace(0, 1, 20001), np.logspace(-12, -1, 200), 1 - np.logspace(-12, -1, 200)])
    f = np.maximum.reduce([np.zeros_like(x), 1 - math.exp(eps) * x, math.exp(-eps) * (1 - x)])
    g = norm.cdf(norm.isf(x) - mu)
    assert np.all(g <= f + 1e-12)
    # minimal: a slightly smaller μ crosses f at the kink
    xs = 1 / (1 + math.exp(eps))
    assert norm.cdf(norm.isf(xs) - mu * (1 - 1e-6)) > xs
    if eps < 0.1:
        assert mu == pytest.approx(eps * math.sqrt(math.pi / 2), rel=1e-2)


def test_cost_of_epsilon_rounds_up() -> None:
    assert cost_of_epsilon(0.3, "pure") >= 0.3
    assert cost_of_epsilon(0.3, "zcdp") >= 0.045
    assert cost_of_epsilon(0.3, "gdp") == gdp_mu_of_pure_epsilon(0.3)
    with pytest.raises(BudgetError):
        cost_of_epsilon(0.3, "renyi")  # type: ignore[arg-type]
