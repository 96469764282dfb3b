"""Exact statistical-privacy curves of property queries (Breutigam & Reischuk, Breutigam & Reischuk) against brute force."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmagic.errors import ConfigurationError
from dpmagic.statistical import (
    BernoulliPrior,
    CategoricalPrior,
    check_prior,
    property_delta,
    property_delta_known_rows,
    property_epsilon,
    property_probability,
)


def brute_delta(s: int, p: Fraction, eps: float, direction: str = "max") -> Fraction:
    """Σ_x max(0, P(x) − e^ε Q(x)) with exact binomial pmfs (Fractions) and e^ε as the exact value of the float."""
    b = [Fraction(math.comb(s - 1, k)) * p**k * (1 - p) ** (s - 1 - k) for k in range(s)]
    plus = [Fraction(0)] + b  # B + 1 on 0..s
    zero = b + [Fraction(0)]  # B on 0..s
    e = Fraction(math.exp(eps))
    up = sum((max(Fraction(0), a - e * c) for a, c in zip(plus, zero)), Fraction(0))
    down = sum((max(Fraction(0), c - e * a) for a, c in zip(plus, zero)), Fraction(0))
    return {"max": max(up, down), "one_vs_zero": up, "zero_vs_one": down}[direction]


@pytest.mark.parametrize(
    ("s", "p", "eps", "expected"),
    [(1024, 0.5, 0.005, 0.022574), (32, 0.5, 0.05, 0.121490), (8, 0.5, 0.2, 0.223276), (64, 0.05, 1.0, 0.0631)],
)
def test_paper_test_vectors(s: int, p: float, eps: float, expected: float) -> None:
    digits = len(str(expected).split(".")[1].lstrip("0"))
    assert float(f"{property_delta(s, p, eps):.{max(digits, 3)}g}") == pytest.approx(expected, rel=1e-12)


def test_test_vector_1024_matches_exact_integer_sum() -> None:
    got = property_delta(1024, 0.5, 0.005)
    exact = float(brute_delta(1024, Fraction(1, 2), 0.005))
    assert got == pytest.approx(exact, rel=1e-11)
    assert round(got, 6) == 0.022574


def test_directions_differ_for_skewed_prior_and_max_is_the_larger() -> None:
    up = property_delta(64, 0.05, 1.0, direction="one_vs_zero")
    down = property_delta(64, 0.05, 1.0, direction="zero_vs_one")
    assert up == pytest.approx(float(brute_delta(64, Fraction(5, 100), 1.0, "one_vs_zero")), rel=1e-10)
    assert down == pytest.approx(float(brute_delta(64, Fraction(5, 100), 1.0, "zero_vs_one")), rel=1e-10)
    assert up < 0.01 < down
    assert property_delta(64, 0.05, 1.0) == max(up, down)
    # symmetric prior: both directions agree
    assert property_delta(100, 0.5, 0.3, direction="one_vs_zero") == pytest.approx(
        property_delta(100, 0.5, 0.3, direction="zero_vs_one"), rel=1e-12
    )


@settings(max_examples=150, derandomize=True, deadline=None)
@given(
    s=st.integers(1, 40),
    num=st.integers(0, 20),
    eps=st.floats(0.0, 4.0, allow_nan=False),
    direction=st.sampled_from(["max", "one_vs_zero", "zero_vs_one"]),
)
def test_matches_exact_fraction_sum_for_small_s(s: int, num: int, eps: float, direction: str) -> None:
    p = Fraction(num, 20)
    got = property_delta(s, float(p), eps, direction=direction)
    exact = float(brute_delta(s, p, eps, direction))
    assert 0.0 <= got <= 1.0
    assert got == pytest.approx(exact, rel=1e-10, abs=1e-14)


@settings(max_examples=80, derandomize=True, deadline=None)
@given(
    s=st.integers(1, 3000),
    p=st.floats(0.0, 1.0, allow_nan=False),
    e1=st.floats(0.0, 3.0, allow_nan=False),
    e2=st.floats(0.0, 3.0, allow_nan=False),
)
def test_in_unit_interval_and_non_increasing_in_eps(s: int, p: float, e1: float, e2: float) -> None:
    lo, hi = min(e1, e2), max(e1, e2)
    d_lo, d_hi = property_delta(s, p, lo), property_delta(s, p, hi)
    assert 0.0 <= d_hi <= 1.0 and 0.0 <= d_lo <= 1.0
    assert d_hi <= d_lo * (1 + 1e-12) + 1e-15


def test_large_s_is_finite_and_consistent() -> None:
    # 2^20 rows: runs in well under a second, agrees with a 2^16-row curve scaled like 1/sqrt(s) at ε → 0
    d20 = property_delta(2**20, 0.5, 0.0)
    d16 = property_delta(2**16, 0.5, 0.0)
    assert 0 < d20 < d16 < 1
    assert d16 / d20 == pytest.approx(4.0, rel=1e-3)
    # total variation distance of Bin(s−1, ½) + 1 and Bin(s−1, ½) is the central pmf: C(s−1, ⌊(s−1)/2⌋)/2^(s−1)
    s = 2**15
    tv = float(Fraction(math.comb(s - 1, (s - 1) // 2), 2 ** (s - 1)))
    assert property_delta(s, 0.5, 0.0) == pytest.approx(tv, rel=1e-9)


def test_degenerate_priors_and_single_row() -> None:
    assert property_delta(10, 0.0, 1.0) == 1.0
    assert property_delta(10, 1.0, 1.0) == 1.0
    assert property_delta(1, 0.3, 5.0) == 1.0  # one row: its count is its value


def test_epsilon_inverse() -> None:
    eps = property_epsilon(1024, 0.5, 0.022574)
    assert property_delta(1024, 0.5, eps) <= 0.022574
    assert property_delta(1024, 0.5, eps * 0.999) > 0.022574
    assert eps == pytest.approx(0.005, rel=1e-3)
    assert property_epsilon(8, 0.5, 1.0) == 0.0
    assert property_epsilon(8, 0.5, 0.5**8) == math.inf  # below the all-others-agree floor (½)^7


def test_known_rows_example_1() -> None:
    assert property_delta_known_rows(100, 0, 20, 0.5, 0.1) == pytest.approx(property_delta(20, 0.5, 0.1), rel=1e-12)
    values = [property_delta_known_rows(100, v, 20, 0.5, 0.1) for v in (0, 10, 50, 99)]
    assert values == sorted(values)
    # all other rows known: the part's other rows are all known, the count reveals the critical row
    assert property_delta_known_rows(100, 99, 20, 0.5, 0.1) == pytest.approx(1.0)


def test_priors_and_property_probability() -> None:
    cat = CategoricalPrior({"a": 0.5, "b": 0.3, "c": 0.2})
    assert property_probability(cat, {"a", "c"}) == pytest.approx(0.7)
    assert property_probability(BernoulliPrior(0.25), {1}) == 0.25
    assert property_probability(BernoulliPrior(0.25), [0, 1]) == 1.0


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: check_prior({"kind": "bounded-sum", "lower": 0, "upper": 1}), "only for i.i.d. Bernoulli"),
        (lambda: check_prior("normal(0,1)"), "only for i.i.d. Bernoulli"),
        (lambda: BernoulliPrior(1.5), "must be a number in"),
        (lambda: CategoricalPrior({"a": 0.5, "b": 0.4}), "sum to"),
        (lambda: CategoricalPrior({}), "non-empty"),
        (lambda: property_probability(BernoulliPrior(0.5), {2}), "not in the prior's domain"),
        (lambda: property_probability(BernoulliPrior(0.5), "1"), "collection of domain values"),
        (lambda: property_delta(0, 0.5, 0.1), "whole number"),
        (lambda: property_delta(8, float("nan"), 0.1), "must be a number in"),
        (lambda: property_delta(8, 0.5, -1.0), "finite number"),
        (lambda: property_delta(8, 0.5, float("inf")), "finite number"),
        (lambda: property_delta(8, 0.5, 0.1, direction="up"), "unknown direction"),
        (lambda: property_delta_known_rows(10, 10, 5, 0.5, 0.1), "known rows"),
    ],
)
def test_bad_input_is_refused_with_one_clear_error(call, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        call()
