"""The shared releases of COUNT / SUM / AVG / VAR / STDDEV (issue 32, issue 27 item 5): one release per distinct
quantity per SELECT, the error-minimising split of the weight over them, the centred AVG and its interval, and the
consistency of the outputs derived from one draw (:mod:`dpmagic.aggregates.moments`).

The sensitivities of the centred sums are brute-forced in ``tests/test_conformance.py`` (AVG and VAR / STDDEV at
row and person level, both relations, all three definitions), ``tests/test_sensitivity.py`` (tight, per release
share) and ``tests/test_aggregate_sensitivity.py`` (clamps, bins, filters).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from dpmagic.accountant.currency import CURRENCIES
from dpmagic.aggregates.moments import Quantities, split_weights
from dpmagic.aggregates.registry import unit_for
from dpmagic.backends.pandas import PandasBackend
from dpmagic.domain.schema import Schema
from dpmagic.noise.sensitivity import coverage_of
from dpmagic.query.sql import parse_query
from dpmagic.releases.plan import plan_noise, release, units_of
from dpmagic.releases.query import QueryMechanism

SCHEMA = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "g": {"type": "categorical", "values": ["a", "b", "c"]},
            "x": {"type": "int", "lower": 0, "upper": 100},
            "f": {"type": "float", "lower": 0.0, "upper": 10.0},
        },
    }
)


def _frame(seed: int = 7, n: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "g": rng.choice(["a", "b", "c"], size=n),
            "x": rng.integers(20, 40, size=n),  # a mean far below the midpoint 50: AVG is not symmetric
            "f": np.round(rng.uniform(0.0, 10.0, size=n), 3),
        }
    )


def _q(sql: str):
    return parse_query(sql, SCHEMA)


# ---- the distinct releases --------------------------------------------------------------------------------------
def test_count_and_avg_spend_their_weight_on_two_releases() -> None:
    """``SELECT COUNT(*), AVG(x)`` draws two releases (the count, shared, and the centred sum): its weight is split
    in two, not three (before issue 32 a third of it went to a release never drawn)."""
    q = _q("SELECT COUNT(*) AS n, AVG(x) AS a FROM t")
    assert q.releases_per_cell == 2
    for definition, cost in (("pure", 0.5), ("zcdp", 0.2), ("gdp", 0.7)):
        currency = CURRENCIES[definition]
        plan = plan_noise(q, SCHEMA, currency, cost)
        assert plan.releases_per_cell == 2 and set(plan.shares) == {"count", "s(x)"}
        assert math.fsum(currency.weight(v) for v in plan.shares.values()) == pytest.approx(currency.weight(cost))
        if definition == "pure":  # discrete Laplace scales: 1/ε_n and 50/ε_s with ε_n + ε_s = ε
            assert plan.count is not None
            eps_n = 1.0 / plan.count.scale
            eps_s = plan.moments["x"].plan.total.noise.calibrated / plan.moments["x"].plan.total.noise.scale
            assert eps_n + eps_s == pytest.approx(cost, rel=1e-12)
    assert QueryMechanism(q, SCHEMA, CURRENCIES["pure"], 0.5, replace_one=False).describe()["releases_per_cell"] == 2


@pytest.mark.parametrize(
    "sql, names",
    [
        ("SELECT COUNT(*) AS n, AVG(x) AS a FROM t", ["count", "s(x)"]),
        ("SELECT SUM(x) AS s, AVG(x) AS a FROM t", ["count", "s(x)"]),  # SUM = S + c·n: no raw sum
        ("SELECT SUM(x) AS s FROM t", ["sum(x)"]),
        ("SELECT SUM(x) AS s, COUNT(*) AS n FROM t", ["count", "sum(x)"]),
        ("SELECT VAR(x) AS v, STDDEV(x) AS s, VAR_POP(x) AS p FROM t", ["count", "s(x)", "q(x)"]),
        ("SELECT COUNT(*) AS n, AVG(x) AS a, VAR(x) AS v FROM t", ["count", "s(x)", "q(x)"]),
        ("SELECT AVG(x) AS a, AVG(CLAMP(x, 0, 50)) AS b FROM t", ["count", "s(x)", "s(x[0:50])"]),
        ("SELECT AVG(f) AS a, MEDIAN(x) AS m FROM t", ["count", "s(f)"]),
    ],
)
def test_distinct_releases(sql: str, names: list[str]) -> None:
    q = _q(sql)
    own = sum(unit_for(a.func).releases for a in q.aggregates if a.func in ("quantile", "count_distinct"))
    assert Quantities.of(q).names() == names
    assert q.releases_per_cell == len(names) + own
    plan = plan_noise(q, SCHEMA, CURRENCIES["pure"], 1.0)
    assert plan.releases_per_cell == len(names) + own
    # the other units' releases keep the equal share; the shared ones take the rest
    assert math.fsum(plan.shares.values()) + own * plan.share_cost == pytest.approx(1.0)


# ---- the split --------------------------------------------------------------------------------------------------
def test_avg_split_is_the_documented_optimum() -> None:
    """AVG alone: A_S = D_S²/h², A_n = D_n²/3 (h = 50, D_S = 50, D_n = 1 add/remove); weights ∝ A^(1/3) under pure
    DP, ∝ √A under zCDP and GDP — and they minimise Σ A_r / w_r^p on a fine grid of splits."""
    q = _q("SELECT AVG(x) AS a FROM t")
    cov = coverage_of(q, SCHEMA)
    a_s, a_n = 1.0, 1.0 / 3.0
    for definition, p in (("pure", 2), ("zcdp", 1), ("gdp", 1)):
        w = split_weights(q, SCHEMA, definition, 1.0, replace_one=False, cov=cov)
        root = 1.0 / (p + 1)
        want = a_s**root / (a_s**root + a_n**root)
        assert w["s(x)"] == pytest.approx(want, rel=1e-12) and w["count"] == pytest.approx(1.0 - want, rel=1e-12)

        def objective(ws: float, p: int = p) -> float:
            return a_s / ws**p + a_n / (1.0 - ws) ** p

        grid = min(objective(t / 1000.0) for t in range(1, 1000))
        assert objective(w["s(x)"]) <= grid * (1 + 1e-12)
    assert split_weights(q, SCHEMA, "pure", 1.0, replace_one=False, cov=cov)["s(x)"] == pytest.approx(0.5906, abs=1e-4)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    lo=st.integers(-50, 50),
    width=st.integers(0, 200),
    definition=st.sampled_from(["pure", "zcdp", "gdp"]),
    replace_one=st.booleans(),
    select=st.sampled_from(
        ["COUNT(*) AS n, AVG(x) AS a", "SUM(x) AS s, AVG(x) AS a, VAR(x) AS v", "STDDEV(x) AS s", "SUM(x) AS s"]
    ),
)
def test_split_spends_exactly_the_weight(lo: int, width: int, definition: str, replace_one: bool, select: str) -> None:
    """Positive weights summing to the weight given, from public quantities only, for any range (also h = 0)."""
    schema = Schema.from_dict(
        {"table": "t", "columns": {"x": {"type": "int", "lower": lo, "upper": lo + width}, "g": SCHEMA["g"].to_dict()}}
    )
    q = parse_query(f"SELECT g, {select} FROM t GROUP BY g", schema)
    w = split_weights(q, schema, definition, 0.8, replace_one=replace_one, cov=coverage_of(q, schema))
    assert set(w) == set(Quantities.of(q).names())
    assert all(v > 0 for v in w.values()) and math.fsum(w.values()) == pytest.approx(0.8, rel=1e-12)


# ---- consistency ------------------------------------------------------------------------------------------------
def _released(sql: str, cost: float = 2.0, frame: pd.DataFrame | None = None, definition: str = "pure"):
    q = _q(sql)
    plan = plan_noise(q, SCHEMA, CURRENCIES[definition], cost)
    df = frame if frame is not None else _frame()
    cells = PandasBackend(SCHEMA.validate(df), SCHEMA).evaluate(q, units_of(plan), extended=plan.extra)
    return q, plan, cells, release(q, cells, plan, SCHEMA)


def test_var_and_stddev_share_one_draw() -> None:
    """VAR and STDDEV of a column read one draw of n, S, Q: sd = √var exactly, its interval the square roots of
    VAR's (before issue 32 each drew its own three releases, and sd² ≠ var)."""
    for definition in ("pure", "zcdp", "gdp"):
        q, plan, _, df = _released(
            "SELECT g, VAR(x) AS v, STDDEV(x) AS s, VAR_POP(x) AS vp, STDDEV_POP(x) AS sp FROM t GROUP BY g",
            cost=0.5,
            definition=definition,
        )
        assert list(plan.moments) == ["x"] and plan.releases_per_cell == 3
        for var, sd in (("v", "s"), ("vp", "sp")):
            for end in ("", "_ci_low", "_ci_high"):
                assert np.array_equal(np.sqrt(df[var + end].to_numpy()), df[sd + end].to_numpy())


def test_sum_avg_count_are_consistent() -> None:
    """SUM = S + c·n̂ and AVG = c + S/n̂ from the same draws: AVG = SUM/COUNT wherever AVG is shown and not clamped."""
    for _ in range(20):
        q, plan, _, df = _released("SELECT g, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a FROM t GROUP BY g", cost=1.0)
        shown = df["a"].notna() & (df["a"] > 0) & (df["a"] < 100)
        ratio = df["s"] / df["n"]
        assert np.allclose(df.loc[shown, "a"], ratio[shown], rtol=1e-12, atol=0)
        assert "sum(x)" not in plan.shares  # the SUM has no release of its own


def test_clamped_avg_is_noted() -> None:
    """An AVG pushed outside its range by the noise is clamped, and the answer says so (df.attrs["dp_notes"])."""
    frame = pd.DataFrame({"g": ["a"] * 30, "x": [0] * 30, "f": [0.0] * 30})
    for _ in range(50):  # every row at the bound: c + S/n̂ < 0 with probability ≈ 1/2 (symmetric noise on S)
        q, plan, _, df = _released("SELECT COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a FROM t", cost=5.0, frame=frame)
        # clamped exactly when c + S/n̂ = SUM/COUNT (the derived SUM is S + c·n̂) is below 0; an AVG of exactly 0.0
        # can also be unclamped (S's noise = −c × the count's: ≈ 2.5% of draws at this cost), so test the ratio
        if df["a"].notna().all() and df["n"].iloc[0] > 0 and df["s"].iloc[0] / df["n"].iloc[0] < 0:
            assert df["a"].iloc[0] == 0.0
            notes = df.attrs["dp_notes"]
            assert any("a: clamped into its range [0, 100]" in n and "SUM/COUNT" in n for n in notes), notes
            return
    pytest.fail("no clamped AVG in 50 draws")  # SUM/COUNT < 0 w.p. (1 − P(= 0))/2 > 0.45 each: P ≤ 0.55^50 < 1e-12


# ---- coverage of the centred AVG's interval -----------------------------------------------------------------------
TRIALS = 2000
FLOOR = 0.92


def test_centred_avg_interval_covers() -> None:
    """The 95% interval of AVG = c + S/n̂ covers the exact average in ≥ 95% of draws (union bound over the two
    97.5% intervals).  Statistical test: TRIALS draws × 3 groups (about 20 rows each, at costs where the interval is
    informative yet often clamped at a bound of the range) under each definition; each (draw, group) covers independently with
    probability ≥ 0.95, so the count of covers is stochastically ≥ Binomial(3·TRIALS, 0.95), and the test fails
    falsely (covered fraction < FLOOR) with probability ≤ binom.cdf(⌈FLOOR·3·TRIALS⌉ − 1, 3·TRIALS, 0.95)
    < 1e-12 (asserted below): it never flakes."""
    n_checks = 3 * TRIALS
    assert binom.cdf(math.ceil(FLOOR * n_checks) - 1, n_checks, 0.95) < 1e-12
    frame = _frame(seed=11)
    exact = frame.groupby("g")["x"].mean()
    for definition, cost in (("pure", 2.0), ("zcdp", 1.0), ("gdp", 1.5)):
        q = _q("SELECT g, AVG(x) AS a FROM t GROUP BY g")
        plan = plan_noise(q, SCHEMA, CURRENCIES[definition], cost)
        cells = PandasBackend(SCHEMA.validate(frame), SCHEMA).evaluate(q, units_of(plan), extended=plan.extra)
        covered = 0
        widths = []
        for _ in range(TRIALS):
            df = release(q, cells, plan, SCHEMA)
            for key, lo, hi in zip(df["g"], df["a_ci_low"], df["a_ci_high"], strict=True):
                covered += bool(lo <= exact[key] <= hi)
                widths.append(hi - lo)
        assert covered / n_checks >= FLOOR, (definition, covered / n_checks)
        assert np.median(widths) < 60  # informative: narrower than the whole range [0, 100]


def test_centred_avg_at_negligible_noise_is_exact() -> None:
    q, _, _, df = _released("SELECT g, AVG(x) AS a, AVG(f) AS b FROM t GROUP BY g", cost=1e7)
    frame = _frame()
    for key, a, b in zip(df["g"], df["a"], df["b"], strict=True):
        assert a == pytest.approx(frame.loc[frame["g"] == key, "x"].mean(), abs=1e-4)
        assert b == pytest.approx(frame.loc[frame["g"] == key, "f"].mean(), abs=1e-4)


def test_every_group_and_definition_plans_without_data() -> None:
    """Planning (and so the split) reads no row: the same plan for any data (shares, noise)."""
    for definition, replace_one, group in itertools.product(("pure", "zcdp", "gdp"), (False, True), ("", "g")):
        gb = " GROUP BY g" if group else ""
        q = _q(f"SELECT {'g, ' if group else ''}COUNT(*) AS n, AVG(x) AS a, VAR(f) AS v FROM t{gb}")
        a = plan_noise(q, SCHEMA, CURRENCIES[definition], 0.9, replace_one=replace_one)
        b = plan_noise(q, SCHEMA, CURRENCIES[definition], 0.9, replace_one=replace_one)
        assert a.shares == b.shares and a.count == b.count
        assert {k: m.plan for k, m in a.moments.items()} == {k: m.plan for k, m in b.moments.items()}


def test_accuracy_targets_use_the_centred_plan() -> None:
    """``--ci`` on AVG (with ``min_rows``) bounds the centred AVG's half-width; on VAR it is refused with the reason,
    never a crash (VAR has no plan of its own any more)."""
    from dpmagic.errors import ConfigurationError
    from dpmagic.releases.plan import cost_for_target, plan_halfwidth

    q = _q("SELECT COUNT(*) AS n, AVG(x) AS a FROM t")
    cost = cost_for_target(q, SCHEMA, CURRENCIES["pure"], 2.0, min_rows=100)
    plan = plan_noise(q, SCHEMA, CURRENCIES["pure"], cost)
    assert plan_halfwidth(plan, q, SCHEMA, min_rows=100) <= 2.0
    with pytest.raises(ConfigurationError, match="not available for VAR"):
        cost_for_target(_q("SELECT VAR(x) AS v FROM t"), SCHEMA, CURRENCIES["pure"], 2.0)
