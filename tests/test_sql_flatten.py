"""Subqueries and CTEs that only shape the bound table are answered as the one query they are (issue 29).

Each rewritten query must parse to exactly the query written directly — the same canonical form, coverage and
aggregates, hence the same sensitivity and charge — and anything that is not a shaping of the table (an inner
GROUP BY, aggregate, LIMIT, UNION, another table, a scalar subquery) is refused with its reason before any
charge.
"""

from __future__ import annotations

import pytest
from tests_support import load_table

from dpmagic.errors import QueryError, UnsupportedQueryError
from dpmagic.query.sql import parse_query
from dpmagic.session.session import Session

_, PUMS = load_table("pums")

EQUIVALENT = [
    ("SELECT COUNT(*) FROM (SELECT * FROM pums)", "SELECT COUNT(*) FROM pums"),
    ("SELECT COUNT(*) FROM (SELECT * FROM pums) AS t WHERE age < 30", "SELECT COUNT(*) FROM pums WHERE age < 30"),
    (
        "WITH adults AS (SELECT * FROM pums WHERE age >= 18) SELECT COUNT(*) FROM adults WHERE sex = 1",
        "SELECT COUNT(*) FROM pums WHERE age >= 18 AND sex = 1",
    ),
    (
        "SELECT sex, AVG(a) AS m FROM (SELECT age AS a, sex FROM pums WHERE educ > 3) t WHERE sex = 0 GROUP BY sex",
        "SELECT sex, AVG(age) AS m FROM pums WHERE educ > 3 AND sex = 0 GROUP BY sex",
    ),
    (
        "SELECT COUNT(*) AS n FROM (SELECT * FROM (SELECT * FROM pums WHERE age > 30) a WHERE sex = 1) b",
        "SELECT COUNT(*) AS n FROM pums WHERE age > 30 AND sex = 1",
    ),
    (
        "WITH a AS (SELECT * FROM pums WHERE educ IN (9, 10)), b AS (SELECT * FROM a WHERE married = 1) "
        "SELECT race, SUM(income) FROM b GROUP BY race",
        "SELECT race, SUM(income) FROM pums WHERE educ IN (9, 10) AND married = 1 GROUP BY race",
    ),
    (
        "SELECT decade, COUNT(*) FROM (SELECT FLOOR(age / 10) * 10 AS decade FROM pums) GROUP BY decade",
        "SELECT FLOOR(age / 10) * 10 AS decade, COUNT(*) FROM pums GROUP BY FLOOR(age / 10) * 10",
    ),
]


@pytest.mark.parametrize("nested, direct", EQUIVALENT)
def test_a_table_shaping_subquery_is_the_direct_query(nested: str, direct: str) -> None:
    a = parse_query(nested, PUMS, tables=("pums",))
    b = parse_query(direct, PUMS, tables=("pums",))
    assert a.coverage == b.coverage
    assert [(g.name, g.column, g.labels) for g in a.groups] == [(g.name, g.column, g.labels) for g in b.groups]
    assert [x.identity() for x in a.aggregates] == [x.identity() for x in b.aggregates]
    assert a.outputs == b.outputs and a.having == b.having and a.order_by == b.order_by


@pytest.mark.parametrize("nested, direct", EQUIVALENT[:4])
def test_a_session_charges_the_same_for_both(nested: str, direct: str) -> None:
    df, schema = load_table("pums")
    s1, s2 = Session(df, schema, "epsilon=1"), Session(df, schema, "epsilon=1")
    r1, r2 = s1.query(nested, epsilon=0.1), s2.query(direct, epsilon=0.1)
    assert r1.charge.after == r2.charge.after and list(r1.df.columns) == list(r2.df.columns)


@pytest.mark.parametrize(
    "sql, says",
    [
        ("SELECT COUNT(*) FROM (SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex) t", "groups, aggregates"),
        ("SELECT COUNT(*) FROM (SELECT * FROM pums LIMIT 10)", "limits"),
        ("SELECT COUNT(*) FROM (SELECT DISTINCT sex FROM pums)", "de-duplicates"),
        ("SELECT COUNT(*) FROM (SELECT * FROM pums UNION ALL SELECT * FROM pums)", "combines"),
        ("SELECT COUNT(*) FROM (SELECT * FROM other)", "other tables"),
        ("SELECT COUNT(*) FROM (SELECT nope FROM pums)", "nope"),
        # a scalar subquery as one AND-ed condition is two releases (tests/test_sql_scalar.py); under OR it is refused
        ("SELECT COUNT(*) FROM pums WHERE age > (SELECT AVG(age) FROM pums) OR sex = 1", "subquery"),
    ],
)
def test_what_is_not_a_shaping_of_the_table_is_refused_with_its_reason(sql: str, says: str) -> None:
    with pytest.raises((UnsupportedQueryError, QueryError), match=says):
        parse_query(sql, PUMS, tables=("pums",))
    df, schema = load_table("pums")
    s = Session(df, schema, "epsilon=1")
    with pytest.raises((UnsupportedQueryError, QueryError)):
        s.query(sql, epsilon=0.1)
    assert s.spent == 0.0 and len(s.accountant) == 0


def test_a_column_alias_list_on_a_subquery_is_refused() -> None:
    """Positional column names would follow the inner SELECT's order, which ``*`` leaves to the data."""
    with pytest.raises(UnsupportedQueryError, match="column alias list"):
        parse_query("SELECT COUNT(*) FROM (SELECT * FROM pums) AS s(income, age) WHERE income > 50", PUMS)
    with pytest.raises(UnsupportedQueryError, match="column alias list"):
        parse_query("WITH a(x) AS (SELECT age FROM pums) SELECT COUNT(*) FROM a WHERE x > 50", PUMS)
