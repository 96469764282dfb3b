"""Intervals of computed outputs (issue 29, invariant 6): a linear combination of released aggregates (``SUM(a + b)``,
``SUM(2 * a - 1)``), the AVG of a linear expression (``AVG(a + 0.5 * b)``) and arithmetic across aggregates of one
release (``SUM(x) * 1.0 / COUNT(*)``, ``100.0 * COUNT(*) / SUM(y)``) carry a 95% interval built by a union bound
over the k bases (each at 1 − 0.05/k) and interval arithmetic (:mod:`dpmagic.query.intervals`).

Checked: interval arithmetic encloses the range over the box (brute force on corners and random points), exactly
for a linear combination; the base intervals are taken at 1 − 0.05/k; the AVG of a linear expression is NaN with
a note and the whole declared range where the count's interval reaches below one row; a construct interval
arithmetic does not cover gets a note instead of an interval; and the coverage of the released intervals is
measured on real releases.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmagic.accountant.currency import CURRENCIES
from dpmagic.backends.pandas import PandasBackend
from dpmagic.domain.schema import Schema
from dpmagic.query.intervals import Unsupported, interval_of, ratio_interval
from dpmagic.query.outputs import finish
from dpmagic.query.sql import parse_query
from dpmagic.releases.query import QueryMechanism

TINY = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "g": {"type": "categorical", "values": ["a", "b"]},
            "x": {"type": "int", "lower": -2, "upper": 3},
            "y": {"type": "int", "lower": 0, "upper": 4},
        },
    }
)

#: expressions over three released aggregates A, B, C (and the numeric group key k)
EXPRESSIONS = [
    "A + B",
    "2 * A - 3 * B + C - 1",
    "-(A - 0.5 * C)",
    "A * B",
    "(A - B) * (C + 1)",
    "A / B",
    "100.0 * A / (B + C)",
    "A * 1.0 / B - C",
    "ROUND(A / B, 2)",
    "FLOOR(A) + CEIL(B)",
    "ABS(A - B)",
    "k * A + B",
    "CAST(A AS DOUBLE) / k",
    "POWER(A, 2)",
    "POWER(A - B, 3) + C",
    "SQUARE(A - B)",
    "SQRT(A)",
    "EXP(A / 10)",
    "LN(A)",
    "LOG10(ABS(A) + 1)",
    "LOG(2, B)",
    "LN(A * B) - C",
    "SIGN(A - B)",
]


def _box(draw_ends: list[float]) -> tuple[np.ndarray, np.ndarray]:
    a, b = sorted(draw_ends)
    return np.array([a]), np.array([b])


ends = st.floats(-50, 50, allow_nan=False).map(lambda v: round(v, 3) + 0.0)  # no -0.0


@settings(max_examples=80, deadline=None)
@given(
    sql=st.sampled_from(EXPRESSIONS),
    a=st.lists(ends, min_size=2, max_size=2),
    b=st.lists(ends, min_size=2, max_size=2),
    c=st.lists(ends, min_size=2, max_size=2),
    k=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
)
def test_interval_arithmetic_encloses_the_range_over_the_box(sql, a, b, c, k, seed) -> None:
    """Every corner of the box and 200 random points of it evaluate inside the interval (a division by an
    interval containing 0 gives (−∞, ∞))."""
    from dpmagic.query.evaluate import evaluate

    bases = {"A": _box(a), "B": _box(b), "C": _box(c)}
    env = {"k": np.array([k])}
    lo, hi = interval_of(sqlglot.parse_one(sql), bases, env, 1)
    rng = np.random.default_rng(seed)
    corners = np.array(list(itertools.product(*[(bx[0][0], bx[1][0]) for bx in bases.values()])))
    inner = np.column_stack([rng.uniform(bx[0][0], bx[1][0], 200) for bx in bases.values()])
    points = np.vstack([corners, inner])
    at = {"k": np.full(len(points), k), **{name: points[:, i] for i, name in enumerate(bases)}}
    with np.errstate(all="ignore"):
        v = np.asarray(evaluate(sqlglot.parse_one(sql), at, len(points), lambda col: col.name), dtype=float)
    ok = np.isfinite(v)  # a division by 0 at a point: no value to enclose there
    tol = 1e-9 * np.maximum(1.0, np.abs(v[ok]))
    assert np.all(lo[0] - tol <= v[ok]) and np.all(v[ok] <= hi[0] + tol), (sql, lo, hi)


@settings(max_examples=100, deadline=None)
@given(
    coefs=st.lists(st.integers(-4, 4), min_size=3, max_size=3),
    a=st.lists(ends, min_size=2, max_size=2),
    b=st.lists(ends, min_size=2, max_size=2),
    c=st.lists(ends, min_size=2, max_size=2),
)
def test_a_linear_combination_gets_exactly_its_range(coefs, a, b, c) -> None:
    """Σ cᵢ·Aᵢ: the interval is the min and max over the corners of the box (the end chosen by the sign)."""
    bases = {"A": _box(a), "B": _box(b), "C": _box(c)}
    sql = " + ".join(f"({k}) * {n}" for k, n in zip(coefs, bases, strict=True))
    lo, hi = interval_of(sqlglot.parse_one(sql), bases, {}, 1)
    values = [
        sum(k * v for k, v in zip(coefs, p, strict=True))
        for p in itertools.product(*[(bx[0][0], bx[1][0]) for bx in bases.values()])
    ]
    assert lo[0] == pytest.approx(min(values), abs=1e-9) and hi[0] == pytest.approx(max(values), abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(a=st.floats(-1e9, 1e9), b=st.floats(1e-3, 1e9), c=st.floats(-1e3, 1e3))
def test_a_point_box_gives_exactly_the_evaluators_value(a, b, c) -> None:
    """At a zero-width box (an answer at a huge ε) the interval is the value itself, bit for bit: a rate is never
    shown outside its own interval by a rounding."""
    from dpmagic.query.evaluate import evaluate

    for sql in ("A * 1.0 / B", "100.0 * A / B", "A / B - C", "(A + C) / CAST(B AS DOUBLE)"):
        env = {"A": np.array([a]), "B": np.array([b]), "C": np.array([c])}
        v = float(evaluate(sqlglot.parse_one(sql), env, 1, lambda col: col.name)[0])
        lo, hi = interval_of(sqlglot.parse_one(sql), {n: (x, x) for n, x in env.items()}, {}, 1)
        assert lo[0] <= v <= hi[0], (sql, v, lo, hi)


def test_a_construct_outside_interval_arithmetic_is_unsupported() -> None:
    with pytest.raises(Unsupported):
        interval_of(sqlglot.parse_one("CASE WHEN A > 1 THEN 1 ELSE 0 END"), {"A": _box([0, 2])}, {}, 1)
    for sql in ("POWER(A, 0.5)", "POWER(A, -1)", "POWER(A, B)"):  # undefined or unbounded inside the box
        with pytest.raises(Unsupported):
            interval_of(sqlglot.parse_one(sql), {"A": _box([-1, 2]), "B": _box([1, 2])}, {}, 1)


def test_a_logarithm_of_an_interval_reaching_zero_is_unbounded_below() -> None:
    """LN over [−1, 4]: the value can be any number up to ln 4 (−∞ below), never an end that excludes a value;
    over [−3, −1] it is undefined: no interval (NaN)."""
    lo, hi = interval_of(sqlglot.parse_one("LN(A)"), {"A": (np.array([-1.0, -3.0]), np.array([4.0, -1.0]))}, {}, 2)
    assert lo[0] == -np.inf and hi[0] == pytest.approx(np.log(4.0))
    assert np.isnan(lo[1]) and np.isnan(hi[1])


def test_a_power_of_an_average_is_released_with_an_interval() -> None:
    """POWER(AVG(x), 2) (a peer corpus shape): the square of the mean's interval, 0 inside it when it spans 0."""
    m = _mechanism("SELECT POWER(AVG(x), 2) AS a2, SQRT(SUM(y)) AS r FROM t", 1.0)
    df = m.release(PandasBackend(_frame(300, 3), TINY))
    for name in ("a2", "r"):
        assert df[f"{name}_ci_low"][0] <= df[name][0] <= df[f"{name}_ci_high"][0]
    assert not any("no interval is stated" in note for note in df.attrs.get("dp_notes", []))


def _mechanism(sql: str, eps: float) -> QueryMechanism:
    return QueryMechanism(parse_query(sql, TINY), TINY, CURRENCIES["pure"], eps, replace_one=False)


def _frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"g": rng.choice(["a", "b"], n), "x": rng.integers(-2, 4, n), "y": rng.integers(0, 5, n)})


def test_base_intervals_are_taken_at_the_union_bound_level() -> None:
    """SUM(x) + SUM(y): its interval is the sum of the two 97.5% half-widths around the value (the sums are far
    from the noise's clamp, so no side is infinite).  (SUM(x + y) is one release of x + y: query.derived.)"""
    m = _mechanism("SELECT SUM(x) + SUM(y) AS s FROM t", 1.0)
    df = m.release(PandasBackend(_frame(200, 1), TINY))
    h = sum(noise.ci_halfwidth(0.975) for noise in m.plan.sums.values())
    assert df["s_ci_low"][0] == pytest.approx(df["s"][0] - h) and df["s_ci_high"][0] == pytest.approx(df["s"][0] + h)


def test_avg_of_a_linear_expression_is_nan_with_a_note_where_the_count_is_too_small() -> None:
    """The released frame is built by hand (a noisy count whose interval reaches below one row in group b):
    group b's estimate is NaN, its interval the expression's range over the declared box [-2, 5], and a note
    says so; group a gets the ratio's interval (as ratio_estimate), inside [-2, 5].  (A clamped term keeps the
    linear path; AVG(x + 0.5 * y) is one centred release of x + 0.5 * y: query.derived.)"""
    q = parse_query("SELECT g, AVG(CLAMP(x, -2, 3) + 0.5 * y) AS a FROM t GROUP BY g", TINY)
    assert [o.bounds for o in q.outputs if o.name == "a"] == [(-2.0, 5.0)]
    sx, sy, n = (a.alias for a in q.aggregates)
    frame = {"g": np.array(["a", "b"], dtype=object)}
    for alias, vals, h in ((sx, [100.0, 3.0], 10.0), (sy, [150.0, 2.0], 10.0), (n, [100.0, 1.0], 4.0)):
        v = np.array(vals)
        frame[alias] = v
        frame[f"{alias}_ci_low"], frame[f"{alias}_ci_high"] = v - h / 2, v + h / 2
        frame[f"{alias}_ci_low@3"], frame[f"{alias}_ci_high@3"] = v - h, v + h
    out = finish(q, pd.DataFrame(frame))
    assert np.isnan(out["a"][1]) and (out["a_ci_low"][1], out["a_ci_high"][1]) == (-2.0, 5.0)
    assert any("not shown (NaN) for 1 group" in note for note in out.attrs["dp_notes"])
    assert out["a"][0] == pytest.approx(1.75)
    lo, hi = (100 + 75 - 15) / 104, (100 + 75 + 15) / 96
    assert out["a_ci_low"][0] == pytest.approx(lo) and out["a_ci_high"][0] == pytest.approx(hi)


def test_ratio_interval_gives_the_whole_range_where_a_side_is_infinite() -> None:
    node = sqlglot.parse_one("(A + B) / CAST(C AS DOUBLE)")
    bases = {"A": (np.array([-np.inf]), np.array([10.0])), "B": _box([0, 2]), "C": _box([50, 60])}
    env = {"A": np.array([5.0]), "B": np.array([1.0]), "C": np.array([55.0])}
    _, lo, hi = ratio_interval(node, bases, env, 1, (-2.0, 5.0))
    assert (lo[0], hi[0]) == (-2.0, 5.0)


def test_an_output_outside_interval_arithmetic_gets_a_note() -> None:
    m = _mechanism("SELECT CASE WHEN COUNT(*) > 5 THEN 1 ELSE 0 END AS big, SUM(x) - SUM(y) AS d FROM t", 1.0)
    df = m.release(PandasBackend(_frame(50, 2), TINY))
    assert "big_ci_low" not in df.columns and {"d_ci_low", "d_ci_high"} <= set(df.columns)
    assert any("big: no interval is stated" in note for note in df.attrs["dp_notes"])


#: outputs whose coverage is measured, and the exact value of each from the frame (per group)
COVERED = {
    "s1": ("SUM(x + y)", lambda d: (d.x + d.y).sum()),
    "s2": ("SUM(2 * x - 1)", lambda d: (2 * d.x - 1).sum()),
    "av": ("AVG(x + 0.5 * y)", lambda d: (d.x + 0.5 * d.y).mean()),
    "r": ("SUM(x) * 1.0 / COUNT(*)", lambda d: d.x.sum() / len(d)),
    "p": ("100.0 * COUNT(*) / SUM(y)", lambda d: 100.0 * len(d) / d.y.sum()),
}


def test_released_intervals_cover_the_true_values() -> None:
    """200 releases of 2 groups: 400 independent trials per output (independent noise per cell and per run), each
    missing with probability ≤ 0.05 by the union-bound proof (:mod:`dpmagic.query.intervals`).  The test fails
    when an output misses 46 times or more (coverage below 88.5%): P(Binomial(400, 0.05) ≥ 46) ≤ 1.9·10⁻⁷, so
    over the 5 outputs the false-failure probability is ≤ 10⁻⁶."""
    data = _frame(120, 5)
    sql = "SELECT g, " + ", ".join(f"{e} AS {name}" for name, (e, _) in COVERED.items()) + " FROM t GROUP BY g"
    m = _mechanism(sql, 0.5)
    backend = PandasBackend(data, TINY)
    truth = {name: [f(data[data.g == g]) for g in ("a", "b")] for name, (_, f) in COVERED.items()}
    misses = dict.fromkeys(COVERED, 0)
    for _ in range(200):
        df = m.release(backend)
        for name in COVERED:
            for i in range(2):
                if not df[f"{name}_ci_low"][i] <= truth[name][i] <= df[f"{name}_ci_high"][i]:
                    misses[name] += 1
    assert all(v < 46 for v in misses.values()), misses
