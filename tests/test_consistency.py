"""Consistent estimates across a session (dpmagic.releases.consistency, Session.consistent, %dpconsistent; issue 32).

Exactness against brute force on small enumerated domains: the null space found from the compressed-domain Gram
matrix is exactly the dependency space of the explicit measurement matrix, and the estimate is numpy's weighted
least squares on that matrix.  Unbiasedness and the covariance are checked exactly (A t = t, Cov = A D); the
Chernoff intervals' coverage is checked against the exact distribution of integer combinations of discrete
Laplace noises (truncated convolution: the neglected tail mass is bounded and added).  No randomness is asserted on
except one fixed-seed simulation (deterministic: it cannot flake).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from IPython.core.interactiveshell import InteractiveShell
from tests_support import TINY_SCHEMA as SCHEMA
from tests_support import linear_coeffs as _coeffs
from tests_support import run_cell as run
from tests_support import tiny_box as _box

import dpmagic
from dpmagic.noise.calibration import Noise
from dpmagic.releases.consistency import (
    Consistent,
    Measurement,
    chernoff_halfwidth,
    gram,
    log_mgf,
    null_space,
    null_space_fractions,
)

A_VALUES, B_VALUES, V_VALUES = ["x", "y", "z"], ["u", "v"], [0, 1, 2, 3]
CELLS = list(itertools.product(A_VALUES, B_VALUES, V_VALUES))
COMPONENTS = ["n", "sum:v", "sumsq:v"]


def _noise(b: float) -> Noise:
    return Noise("discrete_laplace", b, 1.0)


def _explicit_row(m: Measurement) -> list[Fraction]:
    """The measurement's row over (domain cell, component): brute force on the enumerated domain."""
    row = []
    for a, b, v in CELLS:
        inside = m.region.contains_row({"a": a, "b": b, "v": v})
        for comp in COMPONENTS:
            row.append(m.coeffs.get(comp, Fraction(0)) if inside else Fraction(0))
    return row


def _rank(rows: list[list[Fraction]]) -> int:
    """Exact rank (Fraction Gaussian elimination, independent of the module's)."""
    m = [list(r) for r in rows]
    rank, ncols = 0, len(m[0]) if m else 0
    for col in range(ncols):
        piv = next((i for i in range(rank, len(m)) if m[i][col] != 0), None)
        if piv is None:
            continue
        m[rank], m[piv] = m[piv], m[rank]
        for i in range(len(m)):
            if i != rank and m[i][col] != 0:
                f = m[i][col] / m[rank][col]
                m[i] = [x - f * y for x, y in zip(m[i], m[rank], strict=True)]
        rank += 1
    return rank


sets_a = st.one_of(st.none(), st.lists(st.sampled_from(A_VALUES), min_size=1, max_size=3, unique=True))
sets_b = st.one_of(st.none(), st.lists(st.sampled_from(B_VALUES), min_size=1, max_size=2, unique=True))
ranges_v = st.one_of(st.none(), st.tuples(st.integers(0, 3), st.integers(0, 3)).map(lambda t: (min(t), max(t))))
measurement = st.tuples(sets_a, sets_b, ranges_v, st.sampled_from(["count", "sum", "s", "q"]), st.integers(0, 3))


def _measurements(specs: list[tuple]) -> list[Measurement]:
    out = []
    for i, (a, b, v, kind, c) in enumerate(specs):
        region = _box(a, b, v)
        out.append(Measurement(i, kind, 0, (), region, _coeffs(kind, c), 0.0, _noise(1.0 + i % 3)))
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(measurement, min_size=1, max_size=9))
def test_null_space_is_exactly_the_dependency_space_of_the_explicit_matrix(specs: list[tuple]) -> None:
    ms = _measurements(specs)
    explicit = [_explicit_row(m) for m in ms]
    basis = null_space(gram(ms, SCHEMA))
    # every vector found is a true dependency: vᵀ M = 0 exactly
    for v in basis:
        for j in range(len(explicit[0])):
            assert sum((v[i] * explicit[i][j] for i in range(len(ms))), Fraction(0)) == 0
    # and they span all of them: dim = (number of measurements) − rank M, the basis independent
    assert len(basis) == len(ms) - _rank(explicit)
    assert _rank(basis) == len(basis) if basis else True


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 7).flatmap(
        lambda n: st.lists(
            st.lists(st.fractions(min_value=-50, max_value=50, max_denominator=7), min_size=n, max_size=n),
            min_size=1,
            max_size=7,
        )
    ),
    st.integers(0, 3),
)
def test_multimodular_null_space_equals_rational_elimination(rows: list[list[Fraction]], dup: int) -> None:
    """Including rank-deficient matrices (a row repeated as a combination of others) and large entries."""
    rows = rows + [[a * 3 - b * Fraction(5, 7) * 10**12 for a, b in zip(rows[0], rows[-1], strict=True)]] * dup
    assert null_space(rows) == null_space_fractions(rows)


def test_float_tolerance_would_invent_a_dependency_exact_elimination_does_not() -> None:
    # a count and a centred sum with a huge centre over the same region are independent; in float64 their Gram
    # matrix is singular (1 + c² rounds to c²)
    c = 10**9
    region = _box(None, None, None)
    ms = [
        Measurement(0, "count", 0, (), region, {"n": Fraction(1)}, 0.0, _noise(1.0)),
        Measurement(1, "s", 0, (), region, {"sum:v": Fraction(1), "n": Fraction(-c)}, 0.0, _noise(1.0)),
    ]
    g = gram(ms, SCHEMA)
    assert np.linalg.matrix_rank(np.array([[float(x) for x in r] for r in g])) == 1  # float: "dependent"
    assert null_space(g) == []  # exact: independent


def _explicit_float(ms: list[Measurement]) -> np.ndarray:
    return np.array([[float(x) for x in _explicit_row(m)] for m in ms])


@settings(max_examples=40, deadline=None)
@given(st.lists(measurement, min_size=2, max_size=8), st.integers(0, 2**32 - 1))
def test_estimate_is_weighted_least_squares_on_the_explicit_matrix(specs: list[tuple], seed: int) -> None:
    ms0 = _measurements(specs)
    rng = np.random.default_rng(seed)
    y = rng.normal(0.0, 10.0, size=len(ms0))
    ms = [Measurement(m.release, m.name, 0, (), m.region, m.coeffs, float(y[i]), m.noise) for i, m in enumerate(ms0)]
    est = Consistent(ms, SCHEMA)
    mm = _explicit_float(ms)
    w = 1.0 / np.sqrt([m.variance for m in ms])
    x, *_ = np.linalg.lstsq(mm * w[:, None], y * w, rcond=None)
    assert np.allclose(est.estimate, mm @ x, rtol=1e-7, atol=1e-7 * (1.0 + np.abs(y).max()))


@settings(max_examples=40, deadline=None)
@given(st.lists(measurement, min_size=2, max_size=8), st.integers(0, 2**32 - 1))
def test_unbiased_and_covariance_exactly(specs: list[tuple], seed: int) -> None:
    """E ŷ = A t = t for every true table t (A fixes the consistent answers), and Cov ŷ = A D A ᵀ = A D."""
    ms = _measurements(specs)
    est = Consistent(ms, SCHEMA)
    mm = _explicit_float(ms)
    rng = np.random.default_rng(seed)
    table = rng.integers(0, 5, size=mm.shape[1]).astype(float)
    t = mm @ table
    assert np.allclose(est.a @ t, t, atol=1e-7 * (1.0 + np.abs(t).max()))
    d = np.diag([m.variance for m in ms])
    assert np.allclose(est.a @ d @ est.a.T, est.covariance, atol=1e-9)
    # never worse than the raw release, for every single measurement
    assert np.all(np.diag(est.covariance) <= np.diag(d) * (1 + 1e-9))


def test_simulated_mean_and_variance_fixed_seed() -> None:
    """A total and its three parts with equal noise variances D: one identity, each refined value of variance
    (3/4)·D; checked exactly, and by a fixed-seed simulation with continuous Laplace noise of variance 8
    (deterministic; 20,000 draws: the tolerances are > 8 standard errors, so a correct estimator passes)."""
    parts = [_box([a], None, None) for a in A_VALUES]
    ms = [Measurement(0, "count", 0, (), _box(None, None, None), {"n": Fraction(1)}, 0.0, _noise(2.0))]
    ms += [Measurement(i + 1, "count", 0, (), p, {"n": Fraction(1)}, 0.0, _noise(2.0)) for i, p in enumerate(parts)]
    est = Consistent(ms, SCHEMA)
    truth = np.array([60.0, 10.0, 20.0, 30.0])
    rng = np.random.default_rng(12345)
    noise = rng.laplace(0.0, 2.0, size=(20000, 4))
    refined = (truth + noise) @ est.a.T
    assert np.allclose(refined.mean(axis=0), truth, atol=0.2)  # se ≈ 2.45/√20000 = 0.017
    assert np.allclose(np.diag(est.covariance), 0.75 * ms[0].variance)
    assert np.allclose(refined.var(axis=0), 6.0, rtol=0.1)  # se of a variance ≈ 6·√(5/20000) ≈ 0.095


def _dlap_pmf(b: float, support: int) -> np.ndarray:
    k = np.arange(-support, support + 1)
    p = math.exp(-1.0 / b)
    return (1 - p) / (1 + p) * p ** np.abs(k)


@pytest.mark.parametrize(
    ("coeffs", "scales", "level"),
    [
        ([1, 1], [3.0, 3.0], 0.95),
        ([1, -2, 1], [2.0, 1.0, 2.0], 0.95),
        ([1, 1, 1, 1, 1, 1], [4.0] * 6, 0.95),
        ([3, 1], [1.0, 5.0], 0.9),
        ([1], [10.0], 0.95),
        ([2, 1, 1, 1], [1.5, 2.5, 2.5, 2.5], 0.99),
    ],
)
def test_chernoff_interval_covers_laplace_sums_exactly(coeffs: list[int], scales: list[float], level: float) -> None:
    """P(|Σ a_j e_j| > h) ≤ 1 − level for the exact distribution (integer a_j: a lattice convolution)."""
    noises = [_noise(b) for b in scales]
    h = chernoff_halfwidth([float(a) for a in coeffs], noises, level)
    support = 400
    dist = np.array([1.0])
    tail_lost = 0.0
    for a, b in zip(coeffs, scales, strict=True):
        pmf = _dlap_pmf(b, support)
        tail_lost += 1.0 - pmf.sum()
        spread = np.zeros(2 * support * abs(a) + 1)
        spread[:: abs(a)] = pmf
        dist = np.convolve(dist, spread)
    centre = (len(dist) - 1) // 2
    k = np.arange(len(dist)) - centre
    miss = dist[np.abs(k) > h].sum() + tail_lost
    assert miss <= 1.0 - level
    # and not absurdly loose: the exact two-sided quantile is at least 40% of it
    exact_q = np.abs(k)[np.argsort(np.abs(k))][np.searchsorted(np.cumsum(dist[np.argsort(np.abs(k))]), level)]
    assert exact_q >= 0.4 * h


def test_log_mgf_matches_the_discrete_laplace_series() -> None:
    nz = _noise(2.5)
    pmf = _dlap_pmf(2.5, 2000)
    k = np.arange(-2000, 2001)
    for s in (0.01, 0.1, 0.3):
        assert log_mgf(nz, s) == pytest.approx(math.log(float(np.sum(pmf * np.exp(s * k)))), rel=1e-9)
    assert log_mgf(nz, 0.41) == math.inf  # beyond 1/b


# ---------------------------------------------------------------------------------------------------------------
# through the session


@pytest.fixture
def session() -> dpmagic.Session:
    df, schema = dpmagic.load_adult()
    return dpmagic.Session(df, schema, "epsilon=1.0")


def test_session_consistent_adds_up_reads_nothing_and_charges_nothing(
    session: dpmagic.Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = session
    s.query("SELECT COUNT(*) FROM adult", epsilon=0.1)
    s.query("SELECT sex, COUNT(*) FROM adult GROUP BY sex", epsilon=0.1)
    s.query("SELECT AVG(age) FROM adult WHERE sex = 'Male'", epsilon=0.1)
    s.query("SELECT SUM(age), AVG(age) FROM adult WHERE sex = 'Female'", epsilon=0.1)
    s.query("SELECT COUNT(*) FROM adult", epsilon=0.1)  # a cached re-run: the same release, counted once
    s.query("SELECT sex, COUNT(*) FROM adult GROUP BY sex HAVING COUNT(*) > 10", epsilon=0.1)  # not included
    ledger = s.ledger_frame()
    spent = s.spent

    def no_read(*a: object, **k: object) -> None:
        raise AssertionError("the data was read")

    monkeypatch.setattr(s.backend, "evaluate", no_read)
    table = s.consistent()
    assert s.spent == spent and s.ledger_frame().equals(ledger)
    assert table.attrs["dependencies"] >= 3
    assert any("HAVING" in n for n in table.attrs["dp_notes"])
    assert list(table["query"]).count(1) == 1
    total = table[(table["query"] == 1)]["consistent"].iloc[0]
    by_sex = table[(table["query"] == 2)]["consistent"].to_numpy()
    assert total == pytest.approx(by_sex.sum(), rel=1e-12)  # parts add up to the whole
    for _, r in table.iterrows():
        assert r["ci_low"] <= r["consistent"] <= r["ci_high"] or r["interval"] != "consistent"
        assert r["ci_high"] - r["ci_low"] <= r["raw_ci_high"] - r["raw_ci_low"] + 1e-9 or "AVG" in r["statistic"]
    # the AVG inside query 3 and SUM/AVG of query 4 are there, the AVG within the declared range
    avg = table[table["statistic"].str.startswith("AVG")]
    assert len(avg) == 2 and ((avg["consistent"] >= 17) & (avg["consistent"] <= 90)).all()


def test_session_consistent_refuses_a_bad_level(session: dpmagic.Session) -> None:
    session.query("SELECT COUNT(*) FROM adult", epsilon=0.1)
    for bad in (0.0, 1.0, -1, "0.9", True, float("nan")):
        with pytest.raises(dpmagic.errors.ConfigurationError, match="confidence level"):
            session.consistent(bad)  # type: ignore[arg-type]


def test_dpconsistent_magic(ip: InteractiveShell) -> None:
    df, schema = dpmagic.load_adult()
    ip.user_ns.update(adult=df, schema=schema)
    result, cap = run(ip, "%dpsession adult --schema schema --budget epsilon=1.0 --ledger memory")
    assert result.success, cap.stderr
    run(ip, "%%dpquery --epsilon 0.1\nSELECT COUNT(*) FROM adult\n")
    run(ip, "%%dpquery --epsilon 0.1\nSELECT sex, COUNT(*) FROM adult GROUP BY sex\n")
    from dpmagic.presentation.magics import current_session

    s = current_session()
    before = (s.spent, len(s.ledger_frame()))
    result, cap = run(ip, "t = %dpconsistent")
    assert result.success, cap.stderr
    t = ip.user_ns["t"]
    assert len(t) == 3 and (s.spent, len(s.ledger_frame())) == before
    assert t["consistent"].iloc[0] == pytest.approx(t["consistent"].iloc[1:].sum())
    result, cap = run(ip, "%dpconsistent --level 2")
    assert "confidence level" in (cap.stderr + cap.stdout) and (s.spent, len(s.ledger_frame())) == before


@pytest.mark.parametrize("budget", ["epsilon=1.0", "rho=0.5", "mu=3.0"])
@pytest.mark.parametrize("neighbors", ["add-remove", "replace"])
def test_every_definition_and_relation(budget: str, neighbors: str) -> None:
    df, schema = dpmagic.load_adult()
    s = dpmagic.Session(df, schema, budget, neighbors=neighbors)
    cost = {"epsilon": 0.1, "rho": 0.05, "mu": 1.0}[budget.split("=")[0]]
    s.query("SELECT COUNT(*) FROM adult", cost)
    s.query('SELECT race, COUNT(*), AVG("hours-per-week") FROM adult GROUP BY race', cost)
    s.query("""SELECT AVG("hours-per-week") FROM adult WHERE race = 'White'""", cost)
    spent = s.spent
    t = s.consistent()
    assert s.spent == spent and t.attrs["dp_notes"] == []
    assert t.attrs["dependencies"] == 3  # total = Σ race; the White count and centred sum, released twice
    counts = t[t["statistic"] == "COUNT(*)"]
    assert counts["consistent"].iloc[0] == pytest.approx(counts["consistent"].iloc[1:].sum(), rel=1e-12)
    white = t[t["statistic"].str.startswith("AVG") & (t["group"].isin([("White",), None]))]
    assert white["consistent"].nunique() == 1 or np.ptp(white["consistent"].to_numpy()) < 1e-9
    assert (t["ci_low"] <= t["ci_high"]).all()


def test_inexact_releases_are_left_out_with_the_reason() -> None:
    """A centred sum on a coarse grid (μ-GDP, σ > 300 units) is rounded before noise: not an exact linear
    functional, so left out (its AVG is not in the table); the counts are still refined."""
    df, schema = dpmagic.load_adult()
    s = dpmagic.Session(df, schema, "mu=1.0", neighbors="replace")
    s.query("SELECT COUNT(*) FROM adult", 0.3)
    s.query('SELECT race, COUNT(*), AVG("hours-per-week") FROM adult GROUP BY race', 0.3)
    t = s.consistent()
    assert any("coarse grid" in n for n in t.attrs["dp_notes"])
    assert not t["statistic"].str.startswith("AVG").any()
    counts = t[t["statistic"] == "COUNT(*)"]
    assert len(counts) == 6 and t.attrs["dependencies"] == 1
    assert counts["consistent"].iloc[0] == pytest.approx(counts["consistent"].iloc[1:].sum(), rel=1e-12)


@pytest.mark.parametrize(("coeffs", "sigmas"), [([1, 1], [2.0, 3.0]), ([1, -2, 1, 1], [1.0, 1.5, 4.0, 0.7])])
def test_chernoff_interval_covers_discrete_gaussian_sums_exactly(coeffs: list[int], sigmas: list[float]) -> None:
    """The discrete Gaussian's MGF is bounded by the continuous one's (σ²-subgaussian): coverage checked on the
    exact distribution (truncated lattice convolution; the neglected mass is < 1e-30)."""
    noises = [Noise("discrete_gaussian", s, 1.0) for s in sigmas]
    h = chernoff_halfwidth([float(a) for a in coeffs], noises, 0.95)
    support = 200
    dist = np.array([1.0])
    k0 = np.arange(-support, support + 1)
    for a, s in zip(coeffs, sigmas, strict=True):
        pmf = np.exp(-(k0**2) / (2 * s * s))
        pmf /= pmf.sum()
        spread = np.zeros(2 * support * abs(a) + 1)
        spread[:: abs(a)] = pmf
        dist = np.convolve(dist, spread)
    k = np.arange(len(dist)) - (len(dist) - 1) // 2
    assert dist[np.abs(k) > h].sum() <= 0.05


def test_the_value_shown_is_inside_its_interval() -> None:
    """The raw interval, when it is the narrower, is widened to hold the consistent value shown beside it."""
    from dpmagic.releases.consistency import _pick

    assert _pick((10.0, 9.0, 11.0), (12.0, 5.0)) == (9.0, 12.0, "raw")
    assert _pick((10.0, 9.0, 11.0), (8.5, 5.0)) == (8.5, 11.0, "raw")
    assert _pick((10.0, 9.0, 11.0), (10.5, 0.5)) == (10.0, 11.0, "consistent")
