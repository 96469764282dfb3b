"""Conditional aggregation with one condition (issue 29): ``COUNT(*) FILTER (WHERE c)``, ``SUM(CASE WHEN c THEN 1
ELSE 0 END)``, ``AVG(CASE WHEN c THEN x END)`` … — every aggregate under the same condition is the query with c
ANDed to WHERE.  Checked two ways: the parsed query equals the one written directly (so coverage, sensitivity
and release are those of a query already brute-force tested), and the exact aggregates the backend computes for
it equal SQLite's evaluation of the conditional SQL itself."""

from __future__ import annotations

import sqlite3

import pandas as pd
import pytest
from tests_support import DATA

from dpmagic.backends.pandas import PandasBackend
from dpmagic.domain.schema import Schema
from dpmagic.errors import UnsupportedQueryError
from dpmagic.query.sql import parse_query

PUMS = Schema.from_json(DATA / "pums.schema.json")
FRAME = pd.read_csv(DATA / "pums.csv")

CASES = [
    ("SELECT COUNT(*) FILTER (WHERE age > 30) AS n FROM pums", "SELECT COUNT(*) AS n FROM pums WHERE age > 30"),
    (
        "SELECT SUM(CASE WHEN income > 100000 THEN 1 ELSE 0 END) AS n FROM pums",
        "SELECT COUNT(*) AS n FROM pums WHERE income > 100000",
    ),
    (
        "SELECT sex, COUNT(CASE WHEN married = 1 THEN 1 END) AS n FROM pums WHERE educ > 8 GROUP BY sex",
        "SELECT sex, COUNT(*) AS n FROM pums WHERE (educ > 8) AND (married = 1) GROUP BY sex",
    ),
    (
        "SELECT race, SUM(CASE WHEN age >= 40 THEN age ELSE 0 END) AS s FROM pums GROUP BY race",
        "SELECT race, SUM(age) AS s FROM pums WHERE age >= 40 GROUP BY race",
    ),
    (
        "SELECT SUM(age) FILTER (WHERE sex = 1) AS s, COUNT(*) FILTER (WHERE sex = 1) AS n FROM pums",
        "SELECT SUM(age) AS s, COUNT(*) AS n FROM pums WHERE sex = 1",
    ),
]


@pytest.mark.parametrize(("conditional", "direct"), CASES)
def test_one_condition_is_the_query_written_directly(conditional: str, direct: str) -> None:
    a, b = parse_query(conditional, PUMS), parse_query(direct, PUMS)
    assert a.where == b.where and a.aggregates == b.aggregates and a.groups == b.groups and a.filter == b.filter


@pytest.mark.parametrize(("conditional", "direct"), CASES)
def test_exact_aggregates_match_sqlite_on_the_conditional_sql(conditional: str, direct: str) -> None:
    q = parse_query(conditional, PUMS)
    cells = PandasBackend(PUMS.validate(FRAME), PUMS).evaluate(q, {})
    con = sqlite3.connect(":memory:")
    FRAME.to_sql("pums", con, index=False)
    rows = con.execute(conditional).fetchall()
    first = q.aggregates[0]
    got = dict(zip(cells.keys, cells.counts if first.func == "count" else cells.sums[first.sum_key], strict=True))
    for r in rows:
        key, value = tuple(r[: len(q.group_by)]), r[len(q.group_by)]
        assert got.get(key, 0) == (value or 0), (key, got.get(key), value)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FILTER (WHERE age > 30), COUNT(*) FROM pums",
        "SELECT COUNT(*) FILTER (WHERE age > 30), COUNT(*) FILTER (WHERE age > 40) FROM pums",
    ],
)
def test_several_conditions_are_refused_with_the_reason(sql: str) -> None:
    with pytest.raises(UnsupportedQueryError, match="same condition"):
        parse_query(sql, PUMS)


def test_a_sum_of_another_constant_is_not_folded() -> None:
    with pytest.raises(UnsupportedQueryError):
        parse_query("SELECT SUM(CASE WHEN age > 30 THEN 2 ELSE 0 END) FROM pums", PUMS)
