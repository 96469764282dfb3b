"""Conditional aggregates with different conditions in one SELECT (issue 29): one release per condition, the
query's cost split over them by sequential composition, joined on the GROUP BY keys
(:mod:`dpmagic.query.composed`, :mod:`dpmagic.session.composed`).

Checked: each part is the query written with its condition ANDed to WHERE; the parts' costs compose to the cost
given (ε, ρ and μ); every part's releases cover the brute-force change over all neighbouring pairs of data sets of
≤ 2 rows of a tiny domain (both relations, three definitions); end to end at a negligible noise the joined answer
equals SQLite on the conditional SQL, keys a condition excludes holding 0 with [0, 0]; pandas and DuckDB compute
identical exact aggregates; refusals charge nothing; a failure after a first charged part says it stays charged.
"""

from __future__ import annotations

import itertools
import sqlite3

import duckdb
import numpy as np
import pandas as pd
import pytest
from conformance import assert_same_cells
from conformance import plan_query as _plan
from tests_support import assert_covered, load_table, run_cell

from dpmagic import Session
from dpmagic.accountant.currency import CURRENCIES
from dpmagic.backends.bind import backend_for
from dpmagic.backends.duckdb import DuckDBBackend
from dpmagic.backends.pandas import PandasBackend
from dpmagic.domain.schema import Schema
from dpmagic.errors import BudgetExceededError, DPMagicError, UnsupportedQueryError
from dpmagic.query.composed import split_conditions
from dpmagic.query.sql import parse_query
from dpmagic.releases.plan import plan_noise, units_of
from dpmagic.session.results import ComposedPreview, ComposedResult

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
ROWS = [{"g": g, "x": x, "y": y} for g, x, y in itertools.product("ab", range(-2, 4), range(0, 5))]
FRAME = pd.DataFrame(ROWS)

SQL = (
    "SELECT g, COUNT(*) FILTER (WHERE x > 0) AS pos, SUM(CASE WHEN y >= 3 THEN x ELSE 0 END) AS sx, "
    "COUNT(*) AS n FROM t WHERE y > 0 GROUP BY g"
)
PARTS = [
    "SELECT g, COUNT(*) AS pos FROM t WHERE (y > 0) AND (x > 0) GROUP BY g",
    "SELECT g, SUM(x) AS sx FROM t WHERE (y > 0) AND (y >= 3) GROUP BY g",
    "SELECT g, COUNT(*) AS n FROM t WHERE y > 0 GROUP BY g",
]
KEEP = [
    lambda r: r["y"] > 0 and r["x"] > 0,
    lambda r: r["y"] > 0 and r["y"] >= 3,
    lambda r: r["y"] > 0,
]


def test_each_part_is_the_query_written_with_its_condition() -> None:
    comp = split_conditions(SQL)
    assert comp is not None and len(comp.parts) == 3 and comp.keys == ("g",) and comp.order == ("g", "pos", "sx", "n")
    for part, direct in zip(comp.parts, PARTS, strict=True):
        a, b = parse_query(part.sql, TINY), parse_query(direct, TINY)
        assert a.where == b.where and a.aggregates == b.aggregates and a.groups == b.groups
    # one condition for every aggregate stays the parser's (folded into WHERE), none is not conditional
    assert split_conditions("SELECT COUNT(*) FILTER (WHERE x > 0) AS a, SUM(y) FILTER (WHERE x > 0) FROM t") is None
    assert split_conditions("SELECT COUNT(*) FROM t") is None


COST = {"pure": 0.7, "zcdp": 0.3, "gdp": 0.9}


@pytest.mark.parametrize("definition, replace_one", list(itertools.product(["pure", "zcdp", "gdp"], [False, True])))
def test_every_part_covers_the_brute_force_change_and_the_parts_compose_to_the_cost(definition, replace_one) -> None:
    cur = CURRENCIES[definition]
    each = cur.cost(cur.weight(COST[definition]) / len(PARTS))
    assert cur.weight(each) * len(PARTS) == pytest.approx(cur.weight(COST[definition]))
    for sql, keep in zip(PARTS, KEEP, strict=True):
        q = parse_query(sql, TINY)
        plan = plan_noise(q, TINY, cur, each, replace_one=replace_one)
        exact = PandasBackend(FRAME, TINY).evaluate(q, units_of(plan))
        labels = list(q.groups[0].labels)
        cell = [labels.index(r["g"]) if keep(r) else len(labels) for r in ROWS]
        agg = q.aggregates[0]
        noise, values, backend = (
            (plan.count, [1] * len(ROWS), exact.counts.tolist())
            if agg.func == "count"
            else (plan.sums["x"], [r["x"] for r in ROWS], list(exact.sums["x"]))
        )
        contrib = np.zeros((len(ROWS), len(labels)), dtype=np.int64)
        for i, (c, v) in enumerate(zip(cell, values, strict=True)):
            if c < len(labels):
                contrib[i, c] = v
        assert contrib.sum(axis=0).tolist() == backend
        assert_covered(noise, contrib, definition, replace_one)


def _sqlite(df: pd.DataFrame, sql: str) -> list[tuple]:
    con = sqlite3.connect(":memory:")
    df.to_sql("t", con, index=False)
    return con.execute(sql).fetchall()


def test_end_to_end_equals_sqlite_and_excluded_keys_hold_zero() -> None:
    """At ε = 10⁶ per part the discrete noise is 0 except with probability < 10⁻¹⁰⁰⁰⁰ per release (the test's
    false-failure probability)."""
    rng = np.random.default_rng(5)
    df = pd.DataFrame({"g": rng.choice(["a", "b"], 200), "x": rng.integers(-2, 4, 200), "y": rng.integers(0, 5, 200)})
    s = Session(df, TINY, budget="epsilon=1e8")
    r = s.query(SQL, epsilon=3e6)
    assert isinstance(r, ComposedResult) and [p.number for p in r.parts] == [1, 2, 3]
    assert s.spent == pytest.approx(3e6) and all(p.cost == pytest.approx(1e6) for p in r.parts)
    ref = _sqlite(df, SQL.replace(" FILTER (WHERE x > 0)", "").replace("COUNT(*) AS pos", "SUM(x > 0) AS pos"))
    got = [tuple(v) for v in r.df[["g", "pos", "sx", "n"]].itertuples(index=False)]
    assert got == [(g, float(a), float(b), float(c)) for g, a, b, c in ref]
    # a key its condition excludes (public: from the schema) holds 0 with the interval [0, 0]
    r = s.query("SELECT g, COUNT(*) FILTER (WHERE g = 'a') AS only_a, COUNT(*) AS n FROM t GROUP BY g", epsilon=2e6)
    row_b = r.df[r.df["g"] == "b"].iloc[0]
    assert (row_b["only_a"], row_b["only_a_ci_low"], row_b["only_a_ci_high"]) == (0.0, 0.0, 0.0)


def test_dry_run_shows_every_part_and_spends_nothing() -> None:
    s = Session(FRAME, TINY, budget="epsilon=1")
    p = s.preview(SQL, epsilon=0.9)
    assert isinstance(p, ComposedPreview) and len(p.parts) == 3 and p.admissible
    assert all(x.cost == pytest.approx(0.3) for x in p.parts)
    assert s.spent == 0 and len(s.accountant) == 0


@pytest.mark.parametrize(
    "sql, match",
    [
        ("SELECT SUM(COUNT(*) FILTER (WHERE x > 0)) AS r, COUNT(*) AS n FROM t", "nests aggregates"),
        ("SELECT AVG(x) FILTER (WHERE y > 2) - AVG(x) AS d FROM t", "COUNT and SUM only, not AVG"),
        ("SELECT g, COUNT(*) FILTER (WHERE x > 0) * 1.0 / COUNT(*) + y AS r FROM t GROUP BY g", "outside an aggregate"),
        ("SELECT g, COUNT(*) FILTER (WHERE x > 0) AS a, COUNT(*) AS n FROM t GROUP BY g HAVING n > 1", "HAVING"),
        ("SELECT g, COUNT(*) FILTER (WHERE x > 0) AS a, COUNT(*) AS n FROM t GROUP BY g ORDER BY a", "ORDER BY"),
        ("SELECT COUNT(*) FILTER (WHERE x > 0) AS a, COUNT(*) FILTER (WHERE z > 0) AS b FROM t", "unknown column"),
    ],
)
def test_what_is_refused_charges_nothing(sql: str, match: str) -> None:
    s = Session(FRAME, TINY, budget="epsilon=1")
    with pytest.raises(DPMagicError, match=match):
        s.query(sql, epsilon=0.5)
    assert s.spent == 0 and len(s.accountant) == 0


def test_max_cost_and_an_unaffordable_total_are_refused_before_any_charge() -> None:
    s = Session(FRAME, TINY, budget="epsilon=1")
    with pytest.raises(UnsupportedQueryError, match="max"):
        s.query(SQL, epsilon="max")
    with pytest.raises(BudgetExceededError, match="nothing was charged"):
        s.query(SQL, epsilon=1.5)
    assert s.spent == 0 and len(s.accountant) == 0


def test_a_failure_after_a_charged_part_says_it_stays(monkeypatch) -> None:
    s = Session(FRAME, TINY, budget="epsilon=1")
    real = Session.query
    calls = []

    def failing(self, sql, *args, **kwargs):
        calls.append(sql)
        if len(calls) == 3:  # the statement, its first part, then the second part fails
            raise BudgetExceededError("refused: over budget")
        return real(self, sql, *args, **kwargs)

    monkeypatch.setattr(Session, "query", failing)
    with pytest.raises(BudgetExceededError, match="#1.*stay so"):
        s.query(SQL, epsilon=0.9)
    assert s.spent == pytest.approx(0.3) and len(s.accountant) == 1


def test_pandas_and_duckdb_compute_the_same_parts() -> None:
    con = duckdb.connect()
    con.register("t", FRAME)
    db = DuckDBBackend(con.table("t"), TINY)
    pb = backend_for(FRAME, TINY)
    comp = split_conditions(SQL)
    assert comp is not None
    for part in comp.parts:
        q, units, extra = _plan(part.sql, TINY)
        assert_same_cells(pb.evaluate(q, units, extended=extra), db.evaluate(q, units, extended=extra))


def test_composed_query_through_the_magic(ip) -> None:
    from tests_support import DATA

    df, _ = load_table("pums")
    ip.user_ns.update(pums=df, pums_schema=str(DATA / "pums.schema.json"))
    res, cap = run_cell(ip, "%dpsession pums --schema pums_schema --budget epsilon=2.0 --ledger memory")
    assert res.success, cap.stderr
    sql = "SELECT sex, COUNT(*) FILTER (WHERE age > 40) AS older, COUNT(*) AS n FROM pums GROUP BY sex"
    res, cap = run_cell(ip, f"%%dpquery --epsilon 0.5\n{sql}")
    assert res.success and isinstance(res.result, ComposedResult), cap.stderr
    assert list(res.result.df.columns[:2]) == ["sex", "older"]


def test_a_cte_that_shapes_the_table_is_kept_in_every_part() -> None:
    sql = (
        "WITH pos AS (SELECT * FROM t WHERE y > 0) "
        "SELECT g, COUNT(*) FILTER (WHERE x > 0) AS pos, SUM(CASE WHEN y >= 3 THEN x ELSE 0 END) AS sx, COUNT(*) AS n "
        "FROM pos GROUP BY g"
    )
    comp = split_conditions(sql)
    assert comp is not None
    for part, direct in zip(comp.parts, PARTS, strict=True):
        a, b = parse_query(part.sql, TINY, tables=("t",)), parse_query(direct, TINY)
        assert a.where == b.where and a.aggregates == b.aggregates


#: rates and differences across conditional aggregates (issue 29, item 2): evaluated on the joined answer
RATES = (
    "SELECT g, COUNT(*) FILTER (WHERE x > 0) * 1.0 / COUNT(*) AS rate, "
    "100.0 * SUM(CASE WHEN y >= 3 THEN 1 ELSE 0 END) / COUNT(*) AS pct, "
    "SUM(x) FILTER (WHERE y >= 3) - SUM(x) FILTER (WHERE y < 3) AS d FROM t WHERE y > 0 GROUP BY g"
)
RATES_SQLITE = (
    "SELECT g, SUM(x > 0) * 1.0 / COUNT(*) AS rate, 100.0 * SUM(CASE WHEN y >= 3 THEN 1 ELSE 0 END) / COUNT(*) "
    "AS pct, SUM(CASE WHEN y >= 3 THEN x ELSE 0 END) - SUM(CASE WHEN y < 3 THEN x ELSE 0 END) AS d FROM t "
    "WHERE y > 0 GROUP BY g ORDER BY g"
)


def test_arithmetic_across_conditions_equals_sqlite_on_pandas_and_duckdb() -> None:
    """Each hidden aggregate is a part's release (its own brute-force-tested query); the item is evaluated on the
    joined answer.  At ε = 10⁶ per part the noise is 0 except with probability < 10⁻¹⁰⁰⁰⁰ per release."""
    rng = np.random.default_rng(8)
    df = pd.DataFrame({"g": rng.choice(["a", "b"], 200), "x": rng.integers(-2, 4, 200), "y": rng.integers(0, 5, 200)})
    comp = split_conditions(RATES)
    assert comp is not None and [n for n, _ in comp.computed] == ["rate", "pct", "d"] and len(comp.parts) == 4
    ref = _sqlite(df, RATES_SQLITE)
    con = duckdb.connect()
    con.register("t", df)
    for data in (df, con.table("t")):
        s = Session(data, TINY, budget="epsilon=1e8")
        r = s.query(RATES, epsilon=4e6)
        assert isinstance(r, ComposedResult) and list(r.df.columns) == [
            "g",
            *(f"{n}{e}" for n in ("rate", "pct", "d") for e in ("", "_ci_low", "_ci_high")),
        ]
        got = [tuple(v) for v in r.df[["g", "rate", "pct", "d"]].itertuples(index=False)]
        assert [g for g, *_ in got] == [g for g, *_ in ref]
        for row, want in zip(got, ref, strict=True):
            assert row[1:] == pytest.approx(want[1:])
        for n in ("rate", "pct", "d"):
            assert (r.df[f"{n}_ci_low"] <= r.df[n]).all() and (r.df[n] <= r.df[f"{n}_ci_high"]).all()
        # a key a condition excludes (public, from the schema): its share is 0, with the interval [0, 0]
        r = s.query(
            "SELECT g, COUNT(*) FILTER (WHERE g = 'a') * 1.0 / COUNT(*) AS share FROM t GROUP BY g", epsilon=1.0
        )
        row_b = r.df[r.df["g"] == "b"].iloc[0]
        assert (row_b["share"], row_b["share_ci_low"], row_b["share_ci_high"]) == (0.0, 0.0, 0.0)


@pytest.mark.slow  # 200 composed releases through the session (about 40 s)
def test_rates_across_conditions_cover_the_true_values() -> None:
    """200 releases of 2 groups: 400 independent trials per output, each missing with probability ≤ 0.05 (each
    of the k hidden aggregates at 1 − 0.05/k, a union bound: dpmagic.query.intervals).  Fails when an output
    misses 46 times or more: P(Binomial(400, 0.05) ≥ 46) ≤ 1.9·10⁻⁷, over the 3 outputs ≤ 10⁻⁶."""
    rng = np.random.default_rng(9)
    df = pd.DataFrame({"g": rng.choice(["a", "b"], 150), "x": rng.integers(-2, 4, 150), "y": rng.integers(0, 5, 150)})
    truth = {}
    for g in ("a", "b"):
        d = df[(df.g == g) & (df.y > 0)]
        truth[g] = {
            "rate": (d.x > 0).sum() / len(d),
            "pct": 100.0 * (d.y >= 3).sum() / len(d),
            "d": d.x[d.y >= 3].sum() - d.x[d.y < 3].sum(),
        }
    s = Session(df, TINY, budget="epsilon=1e6")
    misses = dict.fromkeys(("rate", "pct", "d"), 0)
    for _ in range(200):
        r = s.query(RATES, epsilon=2.0, fresh=True)
        for _, row in r.df.iterrows():
            for n in misses:
                if not row[f"{n}_ci_low"] <= truth[row["g"]][n] <= row[f"{n}_ci_high"]:
                    misses[n] += 1
    assert all(v < 46 for v in misses.values()), misses


def test_post_processing_options_are_refused_with_arithmetic_across_conditions() -> None:
    s = Session(FRAME, TINY, budget="epsilon=1")
    with pytest.raises(UnsupportedQueryError, match="post-processing options"):
        s.query(RATES, epsilon=0.5, postprocess=("nonnegative",))
    assert s.spent == 0 and len(s.accountant) == 0


#: SUM of a CASE with several branches (issue 29, item 4): one release per branch (the branch's own rows), composed
CASES = "SELECT g, SUM(CASE WHEN x > 1 THEN y WHEN y > 2 THEN x ELSE 0 END) AS v, SUM(CASE WHEN x > 1 THEN 1 WHEN y > 2 THEN 2 ELSE 0 END) AS score FROM t GROUP BY g"
CASE_PARTS = [  # (the part written directly, the rows it takes, the summed column or None for COUNT)
    ("SELECT g, SUM(y) AS p FROM t WHERE x > 1 GROUP BY g", lambda r: r["x"] > 1, "y"),
    ("SELECT g, SUM(x) AS p FROM t WHERE y > 2 AND NOT x > 1 GROUP BY g", lambda r: r["y"] > 2 and r["x"] <= 1, "x"),
    ("SELECT g, COUNT(*) AS p FROM t WHERE x > 1 GROUP BY g", lambda r: r["x"] > 1, None),
    ("SELECT g, COUNT(*) AS p FROM t WHERE y > 2 AND NOT x > 1 GROUP BY g", lambda r: r["y"] > 2 and r["x"] <= 1, None),
]


def test_a_multi_branch_case_is_one_release_per_branch() -> None:
    comp = split_conditions(CASES)
    assert comp is not None and len(comp.parts) == 2 and [n for n, _ in comp.computed] == ["v", "score"]
    got = sorted(p.sql for p in comp.parts)
    for part in comp.parts:
        a = parse_query(part.sql, TINY)
        direct = [parse_query(d, TINY) for d, _, _ in CASE_PARTS]
        for agg in a.aggregates:
            assert any(
                d.where == a.where and d.aggregates[0].func == agg.func and d.aggregates[0].column == agg.column
                for d in direct
            ), (part.sql, got)


@pytest.mark.parametrize("definition, replace_one", list(itertools.product(["pure", "zcdp", "gdp"], [False, True])))
def test_every_branch_covers_the_brute_force_change(definition, replace_one) -> None:
    cur = CURRENCIES[definition]
    for sql, keep, col in CASE_PARTS:
        q = parse_query(sql, TINY)
        plan = plan_noise(q, TINY, cur, COST[definition], replace_one=replace_one)
        exact = PandasBackend(FRAME, TINY).evaluate(q, units_of(plan))
        labels = list(q.groups[0].labels)
        contrib = np.zeros((len(ROWS), len(labels)), dtype=np.int64)
        for i, r in enumerate(ROWS):
            if keep(r):
                contrib[i, labels.index(r["g"])] = 1 if col is None else r[col]
        noise, backend = (plan.count, exact.counts.tolist()) if col is None else (plan.sums[col], list(exact.sums[col]))
        assert contrib.sum(axis=0).tolist() == backend
        assert_covered(noise, contrib, definition, replace_one)


def test_a_multi_branch_case_equals_sqlite_on_pandas_and_duckdb() -> None:
    """At ε = 10⁶ per part the noise is 0 except with probability < 10⁻¹⁰⁰⁰⁰ per release."""
    rng = np.random.default_rng(11)
    df = pd.DataFrame({"g": rng.choice(["a", "b"], 200), "x": rng.integers(-2, 4, 200), "y": rng.integers(0, 5, 200)})
    ref = _sqlite(df, CASES + " ORDER BY g")
    con = duckdb.connect()
    con.register("t", df)
    for data in (df, con.table("t")):
        r = Session(data, TINY, budget="epsilon=1e8").query(CASES, epsilon=4e6)
        assert [tuple(v) for v in r.df[["g", "v", "score"]].itertuples(index=False)] == [
            (g, float(v), float(s)) for g, v, s in ref
        ]
        for n in ("v", "score"):
            assert (r.df[f"{n}_ci_low"] <= r.df[n]).all() and (r.df[n] <= r.df[f"{n}_ci_high"]).all()
