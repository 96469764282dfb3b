"""Scalar subqueries (issue 29): ``WHERE age > (SELECT AVG(age) FROM t)`` is two releases in sequence — the inner
one released and charged first through the session's one release path, then its noisy value a public constant
of the outer one (whose coverage is computed with it).

Checked: the outer query is exactly the query written with that constant (same box, so the same coverage,
sensitivity and release); the ledger holds the inner charge before the outer one; the answer's note states the
threshold is noisy, with its interval; what cannot be answered is refused before anything is charged; an outer
failure after the inner charge leaves the inner charged and released and says so; a dry run shows both and
spends nothing.  The outer's release for any threshold (inside, between and outside the declared values) is
brute-forced on a tiny domain under both relations and the three definitions; pandas and DuckDB give identical
exact aggregates for it.
"""

from __future__ import annotations

import itertools

import duckdb
import numpy as np
import pandas as pd
import pytest
from conformance import assert_same_cells
from conformance import plan_query as _plan
from tests_support import assert_covered, load_table

from dpmagic import Session
from dpmagic.accountant.currency import CURRENCIES
from dpmagic.backends.duckdb import DuckDBBackend
from dpmagic.backends.pandas import PandasBackend
from dpmagic.domain.schema import Schema
from dpmagic.errors import BudgetExceededError, DPMagicError, UnsupportedQueryError
from dpmagic.query.scalar import scalar_subquery
from dpmagic.query.sql import parse_query
from dpmagic.releases.plan import plan_noise, units_of
from dpmagic.session.results import QueryResult, ScalarPreview

SQL = "SELECT sex, COUNT(*) AS n FROM pums WHERE age > (SELECT AVG(age) FROM pums) AND educ > 8 GROUP BY sex"


def _session(budget: float = 5.0) -> Session:
    df, schema = load_table("pums")
    return Session(df, schema, budget=budget)


# ---- parsing (no data, no budget) -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [45.089447236180904, 46.0, -3.5, 0.0, 1e20])
def test_the_outer_query_is_the_query_written_with_the_constant(value: float) -> None:
    df, schema = load_table("pums")
    sq = scalar_subquery(SQL)
    assert sq is not None and sq.inner == "SELECT AVG(age) FROM pums"
    outer = parse_query(sq.outer(value), schema)
    direct = parse_query(f"SELECT sex, COUNT(*) AS n FROM pums WHERE age > {value!r} AND educ > 8 GROUP BY sex", schema)
    assert outer.where == direct.where and outer.aggregates == direct.aggregates and outer.groups == direct.groups
    widest = parse_query(sq.outer(None), schema)
    assert widest.where == parse_query("SELECT sex, COUNT(*) AS n FROM pums WHERE educ > 8 GROUP BY sex", schema).where


def test_the_subquery_may_be_on_either_side_and_among_other_conditions() -> None:
    sq = scalar_subquery("SELECT SUM(income) FROM pums WHERE sex = 1 AND (SELECT MEDIAN(age) FROM pums) <= age")
    assert sq is not None and sq.inner == "SELECT MEDIAN(age) FROM pums"
    assert sq.outer(40.0) == "SELECT SUM(income) FROM pums WHERE sex = 1 AND 40 <= age"
    assert scalar_subquery("SELECT COUNT(*) FROM pums WHERE age > 40") is None


@pytest.mark.parametrize(
    "sql, match",
    [
        ("SELECT COUNT(*) FROM pums WHERE age > (SELECT AVG(age) FROM pums) OR sex = 1", "AND-ed condition"),
        ("SELECT COUNT(*) FROM pums WHERE NOT (age > (SELECT AVG(age) FROM pums))", "AND-ed condition"),
        ("SELECT COUNT(*) FROM pums WHERE age > (SELECT AVG(age) FROM pums) + 5", "compared directly"),
        ("SELECT COUNT(*) FROM pums WHERE age IN (SELECT age FROM pums)", "IN \\(SELECT"),
        ("SELECT COUNT(*) FROM pums WHERE age > (SELECT sex, AVG(age) FROM pums GROUP BY sex)", "one value"),
        (
            "SELECT COUNT(*) FROM pums WHERE age > (SELECT AVG(age) FROM pums) AND educ < (SELECT AVG(educ) FROM pums)",
            "one scalar subquery",
        ),
        ("SELECT COUNT(*) FROM pums WHERE age > (SELECT AVG(age) FROM other)", "other tables"),
        ("SELECT COUNT(*) FROM pums WHERE age > (SELECT educ FROM pums GROUP BY educ)", "one value|one aggregate"),
        ("SELECT COUNT(*) FROM pums WHERE sex > (SELECT AVG(agee) FROM pums)", "unknown column"),
    ],
)
def test_what_is_refused_charges_nothing(sql: str, match: str) -> None:
    s = _session()
    with pytest.raises(DPMagicError, match=match):
        s.query(sql, epsilon=0.5)
    assert s.spent == 0 and len(s.accountant) == 0


# ---- the session: two releases in sequence -------------------------------------------------------------------


def test_inner_charged_first_then_the_outer_with_its_noisy_value() -> None:
    s = _session()
    r = s.query(SQL, epsilon=0.5)
    assert isinstance(r, QueryResult) and isinstance(r.threshold, QueryResult)
    inner = r.threshold
    value = float(inner.df.iloc[0, 0])
    lo, hi = float(inner.df.iloc[0, 1]), float(inner.df.iloc[0, 2])
    assert lo <= value <= hi
    # the outer query's region is the one the noisy constant gives
    direct = s.parse(f"SELECT sex, COUNT(*) AS n FROM pums WHERE age > {value!r} AND educ > 8 GROUP BY sex")
    assert r.query.where == direct.where
    # two ledger entries, the inner one first; the cost given split over them
    entries = s.ledger_frame()
    assert len(entries) == 2 and inner.number == 1 and r.number == 2
    assert inner.cost == pytest.approx(0.25) and r.cost == pytest.approx(0.25) and s.spent == pytest.approx(0.5)
    note = r.notes[0]
    assert "is itself a noisy value" in note and f"{lo:.6g} to {hi:.6g}" in note and "query #1" in note
    # re-running the same statement re-uses both stored answers: nothing more is charged
    again = s.query(SQL, epsilon=0.5)
    assert again.cached and s.spent == pytest.approx(0.5)


def test_dry_run_shows_both_and_spends_nothing() -> None:
    s = _session()
    p = s.preview(SQL, epsilon=0.5)
    assert isinstance(p, ScalarPreview) and p.cost == (0.25, 0.25) and p.admissible
    assert "two releases in sequence" in p.summary() and "widest region" in p.summary()
    assert s.spent == 0 and len(s.accountant) == 0


def test_both_releases_must_fit_before_the_first_is_charged() -> None:
    s = _session(budget=1.0)
    with pytest.raises(BudgetExceededError, match="nothing was charged"):
        s.query(SQL, epsilon=1.2)
    for bad in ({"epsilon": "max"}, {"ci": 1.0}):
        with pytest.raises(UnsupportedQueryError, match="split over its two releases"):
            s.query(SQL, **bad)
    assert s.spent == 0 and len(s.accountant) == 0


@pytest.mark.parametrize("budget, cost", [("rho=1", {"rho": 0.5}), ("mu=1", {"mu": 0.8})])
def test_the_two_releases_compose_to_the_cost_given(budget: str, cost: dict) -> None:
    """Each release gets half the weight of the cost (ρ/2; μ/√2 under μ-GDP): the whole costs what was asked."""
    df, schema = load_table("pums")
    s = Session(df, schema, budget=budget)
    r = s.query(SQL, **cost)
    c, cur = next(iter(cost.values())), s.currency
    assert cur.weight(r.cost) + cur.weight(r.threshold.cost) == pytest.approx(cur.weight(c))
    assert s.spent == pytest.approx(c)


def test_an_outer_failure_after_the_inner_charge_says_the_inner_stays(monkeypatch) -> None:
    s = _session()
    real = Session.query
    calls = []

    def failing_outer(self, sql, *args, **kwargs):
        calls.append(sql)
        if len(calls) == 3:  # the scalar statement, the inner, then the outer: refused
            raise BudgetExceededError("refused: over budget")
        return real(self, sql, *args, **kwargs)

    monkeypatch.setattr(Session, "query", failing_outer)
    with pytest.raises(BudgetExceededError, match="stays charged and released") as e:
        s.query(SQL, epsilon=0.5)
    assert "query #1" in str(e.value)
    assert isinstance(e.value.threshold, QueryResult)  # the released threshold, for the analyst
    assert s.spent == pytest.approx(0.25) and len(s.accountant) == 1


def test_a_threshold_that_is_not_a_number_stops_before_the_outer(monkeypatch) -> None:
    from dpmagic.session import scalar

    monkeypatch.setattr(scalar, "threshold_of", lambda r: (float("nan"), None, None, "a"))
    s = _session()
    with pytest.raises(DPMagicError, match="not a number.*charged nothing"):
        s.query(SQL, epsilon=0.5)
    assert len(s.accountant) == 1  # the inner only


# ---- the outer release for any threshold: exact aggregates and sensitivity --------------------------------------


def test_outer_exact_aggregates_identical_on_pandas_and_duckdb() -> None:
    df, schema = load_table("pums")
    sq = scalar_subquery(
        "SELECT educ, COUNT(*) AS n, SUM(income) AS s FROM pums WHERE age >= (SELECT AVG(age) FROM pums) GROUP BY educ"
    )
    assert sq is not None
    con = duckdb.connect()
    con.register("pums", df)
    db = DuckDBBackend(con.table("pums"), schema)
    pb = PandasBackend(schema.validate(df), schema)
    for value in (17.0, 44.2, 44.9999999, 45.0, 90.5, -1.0):
        q, units, extra = _plan(sq.outer(value), schema)
        assert_same_cells(pb.evaluate(q, units, extended=extra), db.evaluate(q, units, extended=extra))


TINY = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "g": {"type": "categorical", "values": ["a", "b"]},
            "x": {"type": "int", "lower": -2, "upper": 3},
        },
    }
)
ROWS = [{"g": g, "x": x} for g, x in itertools.product("ab", range(-2, 4))]
FRAME = pd.DataFrame(ROWS)
THRESHOLDS = [-5.0, -2.0, -0.5, 0.0, 1.25, 3.0, 7.5]
COST = {"pure": 0.7, "zcdp": 0.3, "gdp": 0.9}


@pytest.mark.parametrize(
    "definition, replace_one, t, grouped",
    list(itertools.product(["pure", "zcdp", "gdp"], [False, True], THRESHOLDS, [False, True])),
)
def test_outer_release_sensitivity_brute_force(definition, replace_one, t, grouped) -> None:
    """For every threshold the inner can release, the outer (a query with that constant) is calibrated to cover
    the change of its releases over all neighbouring pairs of data sets of ≤ 2 rows (the inner's own release is
    a query like any other; the two compose sequentially, charged one after the other)."""
    sq = scalar_subquery(
        f"SELECT {'g, ' if grouped else ''}COUNT(*) AS n, SUM(x) AS s FROM t WHERE x > (SELECT AVG(x) FROM t)"
        + (" GROUP BY g" if grouped else "")
    )
    assert sq is not None
    q = parse_query(sq.outer(t), TINY)
    plan = plan_noise(q, TINY, CURRENCIES[definition], COST[definition], replace_one=replace_one)
    labels = list(q.groups[0].labels) if grouped else [None]
    n = len(labels)
    cell = [(labels.index(r["g"]) if grouped else 0) if r["x"] > t else n for r in ROWS]
    exact = PandasBackend(FRAME, TINY).evaluate(q, units_of(plan))
    for noise, values, backend in (
        (plan.count, [1] * len(ROWS), exact.counts.tolist()),
        (plan.sums["x"], [r["x"] for r in ROWS], list(exact.sums["x"])),
    ):
        contrib = np.zeros((len(ROWS), n), dtype=np.int64)
        for i, (c, v) in enumerate(zip(cell, values, strict=True)):
            if c < n:
                contrib[i, c] = v
        assert contrib.sum(axis=0).tolist() == backend
        assert_covered(noise, contrib, definition, replace_one)


def test_parse_query_alone_still_refuses_a_scalar_subquery() -> None:
    """Schema-only tools (``dpmagic overlap``) take one query per statement: the two releases are a session's."""
    _, schema = load_table("pums")
    with pytest.raises(UnsupportedQueryError, match="subquery"):
        parse_query(SQL, schema)


def test_scalar_subquery_through_the_magic(ip) -> None:
    from tests_support import DATA, run_cell

    df, _ = load_table("pums")
    ip.user_ns.update(pums=df, pums_schema=str(DATA / "pums.schema.json"))
    res, cap = run_cell(ip, "%dpsession pums --schema pums_schema --budget epsilon=2.0 --ledger memory")
    assert res.success, cap.stderr
    res, cap = run_cell(ip, f"%%dpquery --epsilon 0.25 --dry-run\n{SQL}")
    assert res.success and isinstance(res.result, ScalarPreview), cap.stderr
    res, cap = run_cell(ip, f"%%dpquery --epsilon 0.25\n{SQL}")
    assert res.success, cap.stderr
    assert isinstance(res.result, QueryResult) and "is itself a noisy value" in res.result.notes[0]
    assert res.result.number == 2
