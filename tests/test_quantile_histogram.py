"""A quantile's exact input is a fixed-size histogram over its public candidate grid (issue 24, finding 4).

MEDIAN / PERCENTILE / MIN / MAX used to build each cell's list of values after the charge (work, and on
DuckDB a result set, growing with the rows in the box).  Now every backend computes, in one pass over every row,
each cell's histogram over the 2K + 1 bins of the candidates (:func:`dpmagic.aggregates.quantile.bins`), and
the release computes OpenDP's score from it.  Checked here: the histogram score equals OpenDP's own scorer on
the raw values (so the released distribution is unchanged), the bins agree with a brute-force count on pandas,
DuckDB and Spark (exact, also at the doubles next to every candidate), and the work does not depend on the box.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest
from conformance import plan_query as _plan
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from dpmagic import Session
from dpmagic.aggregates import quantile, units
from dpmagic.aggregates.common import calibration
from dpmagic.aggregates.quantile import (
    MAX_HISTOGRAM_BINS,
    _score_transformation,
    bins,
    candidates,
    extreme_scores_of,
    grid_of,
    scores,
)
from dpmagic.aggregates.quantile_unit import bin_sql, grid_index
from dpmagic.backends.bind import backend_for
from dpmagic.domain.schema import Schema
from dpmagic.errors import UnsupportedQueryError

ALPHAS = [0.5, 0.25, 0.75, 0.1, 0.9, 1 / 3, 0.999, 0.05]
RANGES = [(0, 20, True), (-7, 7, True), (0.0, 1.0, False), (-5.0, 5.0, False), (0.1, 0.7, False), (0, 50_000, True)]


def _brute_bin(x: float, cands: tuple[float, ...]) -> int:
    return sum(c < x for c in cands) + sum(c <= x for c in cands)


def _brute_hist(values, cands) -> np.ndarray:
    h = np.zeros(2 * len(cands) + 1, dtype=np.int64)
    for x in values:
        h[_brute_bin(float(x), cands)] += 1
    return h


def _adversarial(cands: tuple[float, ...], lo: float, hi: float) -> np.ndarray:
    """Every candidate, the doubles next to it, midpoints and the range's ends (clamped into [lo, hi])."""
    c = np.asarray(cands, dtype=float)
    xs = np.concatenate(
        [c, np.nextafter(c, -np.inf), np.nextafter(c, np.inf), (c[:-1] + c[1:]) / 2, [lo, hi, lo - 1, hi + 1]]
    )
    return np.clip(xs, lo, hi)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    st.sampled_from(RANGES[:5]),
    st.sampled_from(ALPHAS),
    st.lists(st.floats(-30, 30, allow_nan=False), max_size=25),
    st.lists(st.integers(0, 10**6), max_size=8),
)
def test_histogram_score_is_opendps_score(rng, alpha, floats, picks) -> None:
    """The score computed from the histogram equals OpenDP's ``make_quantile_score_candidates`` on the values:
    the same input to the same report-noisy-max, so the same distribution of the release."""
    lo, hi, is_int = rng
    cands = candidates(lo, hi, is_int)
    values = np.clip(np.asarray(floats + [cands[p % len(cands)] for p in picks], dtype=float), lo, hi)
    hist = np.bincount(bins(values, cands), minlength=2 * len(cands) + 1)
    assert hist.tolist() == _brute_hist(values, cands).tolist()
    theirs = [int(v) for v in _score_transformation(cands, alpha)([float(v) for v in values])]
    assert scores(hist, alpha) == theirs


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(st.floats(-1, 12, allow_nan=False), max_size=12), st.sampled_from([0.0, 1.0]))
def test_extreme_scores_from_the_histogram_match_the_sorted_values(values, alpha) -> None:
    """MIN / MAX: #{x < c} and #{x > c} from the histogram equal the counts over the sorted values."""
    cands = candidates(0, 9, True)
    x = np.clip(np.asarray(values, dtype=float), 0, 9)
    hist = np.bincount(bins(x, cands), minlength=2 * len(cands) + 1)
    k = len(cands)
    below = np.array([sum(v < c for v in x) for c in cands])
    above = np.array([sum(v > c for v in x) for c in cands])
    i = np.arange(k, dtype=float)
    want = -below + i / (2 * k) if alpha == 0.0 else -above + (k - 1 - i) / (2 * k)
    assert extreme_scores_of(hist, alpha) == want.tolist()


GRIDS = [
    *RANGES,
    (-1e15, 1e15, False),
    (1e-300, 3e-300, False),
    (123.456, 123.4561, False),
    (-(2**53), -(2**53) + 100, True),
    (2**40, 2**40 + 5_000_000, True),
    (-3.0, -3.0, False),
]


@pytest.mark.parametrize("lo,hi,is_int", GRIDS)
def test_bins_in_sql_are_exact(lo, hi, is_int) -> None:
    """DuckDB's bin of every adversarial value (each candidate and the doubles next to it) is numpy's and the
    brute force's: the integer grid's 2(y − L) + 1 and the affine grid's seven-candidate correction."""
    cands = candidates(lo, hi, is_int)
    grid = grid_of(cands, lo, hi, is_int)
    assert grid is not None
    xs = _adversarial(cands, float(lo), float(hi))
    if is_int:
        xs = np.unique(np.round(xs))
    want = [_brute_bin(float(x), cands) for x in xs]
    assert bins(xs, cands).tolist() == want
    got = _sql_bins(duckdb.connect(), xs, grid, "duckdb")
    assert got == want


def _sql_bins(con, xs: np.ndarray, grid, dialect: str) -> list[int]:
    y = exp.column("y")
    a = grid_index(y.copy(), grid) if grid.k > 1 and grid.base is None else None
    inner = exp.select(exp.column("y"), *([exp.alias_(a, "a")] if a is not None else [])).from_("src")
    stmt = exp.select(exp.alias_(bin_sql(y, exp.column("a") if a is not None else None, grid), "b")).from_(
        exp.alias_(exp.Subquery(this=inner), "s")
    )
    frame = pd.DataFrame({"y": xs.astype(float)})
    if dialect == "duckdb":
        con.register("src", frame)
        return [int(b) for (b,) in con.execute(stmt.sql(dialect="duckdb")).fetchall()]
    con.createDataFrame(frame).createOrReplaceTempView("src")
    return [int(r[0]) for r in con.sql(stmt.sql(dialect="spark")).collect()]


def test_ungridable_ranges_are_refused_before_the_charge() -> None:
    """A range whose grid no engine can bin exactly (subnormal width) is refused when planned."""
    cal = calibration("pure", 1.0, replace_one=False, grouped=False)
    with pytest.raises(UnsupportedQueryError, match="not exact"):
        quantile.plan(0.0, 1e-320, False, 0.5, cal)
    quantile.plan(0.0, 1e-300, False, 0.5, cal)  # a tiny but normal width is fine


def test_too_large_histogram_is_refused_before_the_charge() -> None:
    schema = Schema.from_dict(
        {
            "table": "t",
            "columns": {
                "g": {"type": "categorical", "values": [f"v{i}" for i in range(1000)]},
                "x": {"type": "int", "lower": 0, "upper": 10_000},
            },
        }
    )
    df = pd.DataFrame({"g": ["v1", "v2"], "x": [1, 2]})
    s = Session(df, schema, "epsilon=1")
    assert MAX_HISTOGRAM_BINS < 1000 * 20_003
    with pytest.raises(UnsupportedQueryError, match="histogram"):
        s.query("SELECT g, MEDIAN(x) FROM t GROUP BY g", epsilon=0.5)
    assert s.spent == 0 and len(s.accountant) == 0


def test_a_changed_opendp_score_is_refused_before_the_charge(monkeypatch) -> None:
    """If OpenDP's score ever differs from the histogram score (another version), the query is refused."""
    cal = calibration("pure", 1.0, replace_one=False, grouped=False)
    quantile._check_scores.cache_clear()
    monkeypatch.setattr(quantile, "score_constants", lambda alpha: (1, 3))
    with pytest.raises(UnsupportedQueryError, match="OpenDP"):
        quantile.plan(0, 10, True, 0.5, cal)
    quantile._check_scores.cache_clear()


# ---- exact agreement with a brute-force count on every backend ----
SCHEMA = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "g": {"type": "categorical", "values": ["a", "b", "c"]},
            "h": {"type": "categorical", "values": ["in", "out"]},
            "i": {"type": "int", "lower": -20, "upper": 20},
            "w": {"type": "int", "lower": 0, "upper": 1_000_000},
            "x": {"type": "float", "lower": -1.0, "upper": 1.0},
        },
    }
)
QUERY = (
    "SELECT g, MEDIAN(i) AS mi, PERCENTILE_CONT(0.25) WITHIN GROUP (ORDER BY x) AS px, MAX(w) AS mw, "
    "MIN(CLAMP(x, -0.5, 0.5)) AS nx FROM t WHERE h = 'in' AND i > -15 GROUP BY g"
)


def _frame(n: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(24)
    x_cands = np.asarray(candidates(-1.0, 1.0, False))
    x = np.where(rng.random(n) < 0.4, rng.choice(x_cands, n), rng.uniform(-1, 1, n))
    x = np.where(rng.random(n) < 0.1, np.nextafter(x, np.inf), x).clip(-1, 1)
    return pd.DataFrame(
        {
            "g": rng.choice(["a", "b", "c"], n),
            "h": rng.choice(["in", "out"], n),
            "i": rng.integers(-20, 21, n),
            "w": rng.integers(0, 1_000_001, n),
            "x": x,
        }
    )


def _brute(df: pd.DataFrame, extra) -> dict[str, np.ndarray]:
    """Each cell's histogram by a Python loop over the rows in the box, per quantile."""
    out = {}
    for alias, u in extra.items():
        cands = u.plan.candidates
        rows = df[(df.h == "in") & (df.i > -15)]
        out[alias] = np.stack(
            [_brute_hist(np.clip(rows[rows.g == g][str(u.agg.column)].astype(float), u.lo, u.hi), cands) for g in "abc"]
        )
    return out


def _check_backend(backend, df: pd.DataFrame) -> None:
    q, unit_of, extra = _plan(QUERY, SCHEMA)
    got = backend.evaluate(q, unit_of, extended=extra).extra
    want = _brute(df, extra)
    assert set(got) == set(want)
    for alias, h in want.items():
        assert got[alias].shape == h.shape and got[alias].tolist() == h.tolist(), alias


def test_histograms_equal_the_brute_force_on_pandas_and_duckdb() -> None:
    df = _frame()
    _check_backend(backend_for(df, SCHEMA), df)
    _check_backend(backend_for(duckdb.connect().from_df(df), SCHEMA), df)


@pytest.mark.spark
def test_histograms_equal_the_brute_force_on_spark(spark) -> None:
    df = _frame()
    _check_backend(backend_for(spark.createDataFrame(df), SCHEMA), df)
    cands = candidates(-5.0, 5.0, False)
    grid = grid_of(cands, -5.0, 5.0, False)
    xs = _adversarial(cands, -5.0, 5.0)
    assert _sql_bins(spark, xs, grid, "spark") == [_brute_bin(float(v), cands) for v in xs]


# ---- the work after the charge does not depend on the box ----
def _everyone_in(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(h="in")


BOXES = ("SELECT g, MEDIAN(x) AS m, MIN(i) AS lo FROM t WHERE h = 'in' GROUP BY g", "'in'")


def _statements(backend, sql: str) -> list[tuple[str, int]]:
    """(SQL with the box's literal blanked, rows returned) of every statement one evaluation runs."""
    seen: list[tuple[str, int]] = []
    run = backend._run

    def spy(stmt):
        rows = run(stmt)
        seen.append((backend.sql(stmt).replace("'in'", "?").replace("'out'", "?"), len(rows)))
        return rows

    backend._run = spy
    q, unit_of, extra = _plan(sql, SCHEMA)
    backend.evaluate(q, unit_of, extended=extra)
    backend._run = run
    return seen


def test_duckdb_runs_the_same_statements_for_an_empty_and_a_full_box() -> None:
    """Every row is in the box 'in', none in the box 'out': the engine runs the same statements (up to the box's
    literal) and the quantile histograms return the same number of rows — nothing grows with the box."""
    b = backend_for(duckdb.connect().from_df(_everyone_in(_frame())), SCHEMA)
    full = _statements(b, BOXES[0])
    empty = _statements(b, BOXES[0].replace("'in'", "'out'"))
    assert full == empty
    assert len(full) == 3  # the main aggregate, one histogram per quantile


def test_pandas_bins_every_row_for_an_empty_and_a_full_box(monkeypatch) -> None:
    """pandas bins every row of the frame (rows outside the box masked, not filtered) and passes the release a
    cells × (2K + 1) array, whatever the box holds."""
    df = _everyone_in(_frame())
    b = backend_for(df, SCHEMA)
    sizes: list[int] = []
    real = quantile.bins
    monkeypatch.setattr(quantile, "bins", lambda x, c: sizes.append(len(x)) or real(x, c))
    shapes = []
    for sql in (BOXES[0], BOXES[0].replace("'in'", "'out'")):
        q, unit_of, extra = _plan(sql, SCHEMA)
        got = b.evaluate(q, unit_of, extended=extra).extra
        shapes.append({k: v.shape for k, v in got.items()})
    assert sizes == [len(df)] * 4  # two quantiles, two boxes: every row each time
    assert shapes[0] == shapes[1] == {"m": (3, 2 * 1001 + 1), "lo": (3, 2 * 41 + 1)}
    assert units.quantile_histograms is not None


def test_release_at_negligible_noise_is_the_quantile() -> None:
    """At a negligible noise the release is the candidate OpenDP's scorer ranks best (the exact quantile)."""
    df = pd.DataFrame({"g": ["a"] * 5, "h": ["in"] * 5, "i": [1, 2, 3, 4, 20], "w": [0] * 5, "x": [0.0] * 5})
    s = Session(df, SCHEMA, "epsilon=1e9")
    r = s.query("SELECT MEDIAN(i) AS m, MAX(i) AS hi, MIN(i) AS lo FROM t", epsilon=1e8).df
    assert (r["m"][0], r["hi"][0], r["lo"][0]) == (3.0, 20.0, 1.0)


def test_a_quantile_over_int_candidates_that_are_not_distinct_doubles_is_refused_before_the_charge() -> None:
    """An int range beyond 2⁵³ with few values has candidates that round to the same double: one clear refusal
    (was OpenDP's raw exception), nothing charged."""
    import pandas as pd

    from dpmagic.domain.schema import Schema
    from dpmagic.errors import UnsupportedQueryError
    from dpmagic.session.session import Session

    schema = Schema.from_dict(
        {"table": "t", "columns": {"j": {"type": "int", "lower": 2**53 - 3, "upper": 2**53 + 40}}}
    )
    s = Session(pd.DataFrame({"j": [2**53 - 3, 2**53 + 7]}), schema, "epsilon=1")
    for sql in ("SELECT MEDIAN(j) FROM t", "SELECT MAX(j) FROM t"):
        with pytest.raises(UnsupportedQueryError, match="not distinct double"):
            s.query(sql, epsilon=0.5)
    assert s.spent == 0.0 and len(s.accountant) == 0
