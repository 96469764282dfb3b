"""VAR / STDDEV intervals (issue 27, item 3): from the three releases' intervals by a union bound.

Two checks: (1) the algebra, deterministically — whenever n, S and Q each lie in their own interval (any
offsets within the half-widths), the exact variance lies in the stated interval; (2) the coverage, statistically —
over repeated releases on PUMS, each cell's interval misses the exact value at most as often as a 95% interval
may (false-failure probability below 1e-9 per test, by the binomial tail)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom
from tests_support import DATA

from dpmagic import Session
from dpmagic.accountant.currency import Definition
from dpmagic.aggregates.variance import interval, plan
from dpmagic.noise.sensitivity import Coverage


@settings(max_examples=300, deadline=None)
@given(
    xs=st.lists(st.integers(0, 10), min_size=0, max_size=30),
    offsets=st.tuples(*[st.floats(-1.0, 1.0)] * 3),
    ddof=st.sampled_from([0.0, 1.0]),
    definition=st.sampled_from([Definition.PURE, Definition.ZCDP]),
    share=st.sampled_from([0.05, 0.5, 5.0]),
)
def test_the_interval_holds_whenever_the_three_parts_do(
    xs: list[int], offsets: tuple[float, float, float], ddof: float, definition: Definition, share: float
) -> None:
    p = plan(0, 10, True, definition, share, Coverage(False, False, 1), replace_one=False)
    x = np.asarray(xs, dtype=float) - p.c
    n, s, q = float(len(xs)), float(x.sum()), float((x * x).sum())
    lvl = 1.0 - 0.05 / 3.0
    h = [v.ci_halfwidth(lvl) for v in (p.count, p.total.noise, p.squares.noise)]
    noisy = [np.array([e + o * hh]) for e, o, hh in zip((n, s, q), offsets, h, strict=True)]
    lo, hi = interval(*noisy, p, ddof)
    if n > ddof:
        truth = (q - s * s / n) / (n - ddof)
        assert lo[0] - 1e-9 * max(1.0, truth) <= truth <= hi[0] + 1e-9 * max(1.0, truth)
    assert 0.0 <= lo[0] <= hi[0]


@pytest.mark.parametrize("epsilon", [1.0, 20.0])
def test_var_and_stddev_intervals_cover_at_their_nominal_rate(epsilon: float) -> None:
    df = pd.read_csv(DATA / "pums.csv")
    s = Session(df, DATA / "pums.schema.json", budget=1e9)
    runs = 150
    sql = "SELECT sex, VAR(age) AS v, STDDEV(income) AS sd FROM pums WHERE educ >= 9 GROUP BY sex"
    sub = df[df["educ"] >= 9]
    exact_v = sub.groupby("sex")["age"].var(ddof=1)
    exact_sd = sub.groupby("sex")["income"].std(ddof=1)
    misses = {("v", 0): 0, ("v", 1): 0, ("sd", 0): 0, ("sd", 1): 0}
    for _ in range(runs):
        r = s.query(sql, epsilon=epsilon, fresh=True).df
        if epsilon > 10:  # informative, not the whole range: the check is not vacuous
            assert (r["v_ci_high"] - r["v_ci_low"] < 100).all() and (r["sd_ci_high"] - r["sd_ci_low"] < 50000).all()
        for _, row in r.iterrows():
            k = int(row["sex"])
            for name, truth in (("v", exact_v[k]), ("sd", exact_sd[k])):
                assert row[f"{name}_ci_low"] <= row[f"{name}_ci_high"]
                if not row[f"{name}_ci_low"] <= truth <= row[f"{name}_ci_high"]:
                    misses[(name, k)] += 1
    limit = binom.isf(1e-9, runs, 0.05)  # P(misses > limit) < 1e-9 per cell for a 95% interval
    assert all(m <= limit for m in misses.values()), misses
