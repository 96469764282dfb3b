"""Quantile, MEDIAN, PERCENTILE, MIN and MAX intervals (issue 27, item 1): proven from a noisy coarse histogram
released in the same charge (:mod:`dpmagic.aggregates.quantile`, "The interval").

Three checks: (1) the tail bound, against the exact distribution of weighted sums of discrete Laplace noise;
(2) the proof's algebra, deterministically — whenever every noisy D̂_j is within its bound E_j, the interval
covers the exact PERCENTILE_CONT value and both order statistics around it, and a value is shown only for a
non-empty cell; (3) the coverage, statistically — over repeated releases through the Session API, the intervals
miss the exact value at most as often as a 95% interval may (a one-sided binomial test whose false-failure
probability is below 1e-6 per test)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from dpmagic import Session
from dpmagic.aggregates import quantile
from dpmagic.aggregates.common import calibration
from dpmagic.domain.schema import Schema
from dpmagic.noise.calibration import Noise

SCHEMA = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "g": {"type": "categorical", "values": ["big", "mid", "small", "tiny", "none"]},
            "x": {"type": "int", "lower": 0, "upper": 60},
            "f": {"type": "float", "lower": 0.0, "upper": 10.0},
        },
    }
)


def _dlap_pmf(scale: float, half: int) -> np.ndarray:
    k = np.arange(-half, half + 1, dtype=float)
    w = np.exp(-np.abs(k) / scale)
    return w / w.sum()


@pytest.mark.parametrize("scale", [0.7, 2.0, 5.0])
@pytest.mark.parametrize("counts", [[(1, 1.0)], [(3, 0.5), (2, 0.5)], [(4, 0.9), (3, 0.1)], [(6, 1.0), (0, 0.0)]])
def test_the_tail_bound_holds_for_the_exact_distribution(scale: float, counts: list[tuple[int, float]]) -> None:
    """P(|Σ w_i Z_i| ≥ E) ≤ β for the exact distribution of the weighted sum of discrete Laplace noises (computed by
    convolution on a support holding all but < 1e-15 of the mass, which is counted as a miss)."""
    half = int(40 * scale) + 40
    pmf = _dlap_pmf(scale, half)
    lost = 2 * sum(math.exp(-k / scale) for k in range(half + 1, half + 2000)) * (1 - math.exp(-1 / scale))
    assert lost < 1e-15
    noise = Noise("discrete_laplace", scale, 1.0)
    for beta in (0.05, 1e-3):
        e = quantile.weighted_tail_bound(noise, counts, beta)
        values, probs = np.zeros(1), np.ones(1)
        for m, w in counts:
            part = np.ones(1)
            for _ in range(m):
                part = np.convolve(part, pmf)
            k = (np.arange(len(part)) - (len(part) - 1) // 2) * w
            values = (values[:, None] + k[None, :]).ravel()
            probs = (probs[:, None] * part[None, :]).ravel()
        miss = float(probs[np.abs(values) >= e - 1e-12].sum()) + 10 * lost
        assert miss <= beta, (counts, scale, beta, e, miss)


def _plan(alpha: float, lo: int, hi: int, scale: float) -> quantile.QuantilePlan:
    cal = calibration("pure", 1.0, replace_one=False, grouped=False)  # type: ignore[arg-type]
    return quantile.plan(lo, hi, True, alpha, cal, hist=Noise("discrete_laplace", scale, 1.0))


def _order_stats(xs: np.ndarray, alpha: float) -> tuple[float, float, float]:
    s = np.sort(xs)
    r = alpha * (len(s) - 1)
    return float(s[math.floor(r)]), float(np.percentile(s, 100 * alpha)), float(s[math.ceil(r)])


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    xs=st.lists(st.integers(0, 40), max_size=60),
    alpha=st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0]),
    hi=st.sampled_from([5, 40]),
    fractions=st.lists(st.floats(-1.0, 1.0), min_size=64, max_size=64),
    scale=st.sampled_from([0.3, 3.0]),
)
def test_the_interval_holds_whenever_every_bound_does(
    xs: list[int], alpha: float, hi: int, fractions: list[float], scale: float
) -> None:
    """Noise vectors drawn so that every |D̂_j − D_j| ≤ E_j (the 95% event): the interval covers the exact
    PERCENTILE_CONT value and the order statistics x_(⌊r⌋), x_(⌈r⌉); an empty cell shows no value."""
    p = _plan(alpha, 0, hi, scale)
    x = np.clip(np.asarray(xs, dtype=float), 0, hi)
    b = len(p.edges)
    ej = quantile.interval_bounds(p, 0.95)
    # integer noises small enough for every weighted sum to stay within its bound (max |w| ≤ 1, b terms)
    cap = math.floor(float(ej.min()) / b)
    z = np.round(np.asarray(fractions[:b]) * cap)
    exact = quantile.coarse_histograms(
        np.bincount(quantile.bins(x, p.candidates), minlength=2 * len(p.candidates) + 1)[None, :], p.edges
    )
    pick = np.array([p.candidates[len(p.candidates) // 2]])
    v, low, high = quantile.interval(exact + z, pick, p, 0.0, float(hi))
    assert low[0] <= high[0]
    if len(x) == 0:
        assert math.isnan(v[0]) and (low[0], high[0]) == (0.0, hi)
        return
    for truth in _order_stats(x, alpha):
        assert low[0] <= truth <= high[0], (truth, low, high, v)
    if not math.isnan(v[0]):
        assert low[0] <= v[0] <= high[0]


def _frame(seed: int = 5) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    sizes = {"big": 2000, "mid": 300, "small": 60, "tiny": 3}
    g = np.repeat(list(sizes), list(sizes.values()))
    x = np.concatenate([rng.binomial(60, pq, n) for pq, n in zip((0.4, 0.6, 0.3, 0.5), sizes.values())])
    return pd.DataFrame({"g": g, "x": x, "f": rng.uniform(1.0, 7.5, len(g)).round(3)})


#: one query per shape; each shown cell with an exact value is one trial
QUERIES = {
    "median": ("SELECT g, MEDIAN(x) AS v FROM t WHERE g IN ('big', 'mid', 'small', 'tiny') GROUP BY g", "x", 0.5),
    "p90": ("SELECT g, PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY f) AS v FROM t GROUP BY g", "f", 0.9),
    "min": ("SELECT g, MIN(x) AS v FROM t GROUP BY g", "x", 0.0),
    "max": ("SELECT g, MAX(f) AS v FROM t GROUP BY g", "f", 1.0),
    "plain_median": ("SELECT MEDIAN(f) AS v FROM t WHERE g = 'mid'", "f", 0.5),
}


def _exact(df: pd.DataFrame, column: str, alpha: float) -> dict[str, tuple[float, float, float]]:
    return {g: _order_stats(part[column].to_numpy(dtype=float), alpha) for g, part in df.groupby("g")}


@pytest.mark.parametrize("name", list(QUERIES))
def test_quantile_intervals_cover_at_their_nominal_rate(name: str) -> None:
    """200 releases at ε = 1 (realistic): the shown cells' intervals cover the exact value (and the order
    statistics around it) in at least the binomial 1e-6 lower tail of a 95% rate; no group outside the WHERE
    region is shown, the empty group never gets a value, and big groups are informative (not the whole range)."""
    sql, column, alpha = QUERIES[name]
    df = _frame()
    s = Session(df, SCHEMA, budget=1e9, bound="sequential")
    exact = _exact(df, column, alpha)
    trials = covered = 0
    for _ in range(200):
        r = s.query(sql, epsilon=1.0, fresh=True).df
        if "g" not in r.columns:
            r = r.assign(g="mid")
        if "IN (" in sql:
            assert set(r["g"]) <= {"big", "mid", "small", "tiny"}
        for _, row in r.iterrows():
            assert row["v_ci_low"] <= row["v_ci_high"]
            if row["g"] == "none":
                assert math.isnan(row["v"]) or row["v_ci_low"] > -1  # never checked against a value
                continue
            trials += 1
            covered += all(row["v_ci_low"] <= t <= row["v_ci_high"] for t in exact[row["g"]])
            if not math.isnan(row["v"]):
                assert row["v_ci_low"] <= row["v"] <= row["v_ci_high"]
        if name != "plain_median":
            big = r[r["g"] == "big"].iloc[0]
            assert big["v_ci_high"] - big["v_ci_low"] < 0.5 * (60 if column == "x" else 10)
    assert covered >= binom.ppf(1e-6, trials, 0.95), (covered, trials)
