"""Red team (session 10): SQL's three-valued NOT over NULLs that the declared domain can produce.

The declared domain has no NULLs, but an expression over it can be NULL: a public lookup's column under LEFT JOIN
(an unmatched code, or a null lookup value), a CASE without ELSE, a NULL in an IN list.  SQL's ``NOT p``
keeps the rows where p is FALSE — not those where it is NULL.  Hole (fixed): dpmagic complemented p's TRUE set, so
``WHERE NOT (r.name = 'North')`` also counted the rows whose name is NULL (333 where SQLite counts 177): the
released value and its interval were about another row set than the query's (invariant 6).  The coverage was the
same set as the rows read, so no privacy loss was under-charged.  Checked here against SQLite at a huge ε (the
answers are exact integers: the noise's 95% interval at ε = 1e8 is far below 0.5).
"""

from __future__ import annotations

import sqlite3
import warnings

import pandas as pd
import pytest
from test_sql_join import FRAME, REGIONS, SCHEMA

from dpmagic.session.session import Session

JOIN = "FROM t LEFT JOIN regions r ON t.region = r.code"
QUERIES = [
    f"SELECT COUNT(*) AS n {JOIN} WHERE NOT (r.name = 'North')",
    f"SELECT COUNT(*) AS n {JOIN} WHERE NOT (r.name = 'North' AND age > 5)",
    f"SELECT COUNT(*) AS n {JOIN} WHERE NOT (r.name = 'North' OR r.zone = 'B')",
    f"SELECT COUNT(*) AS n {JOIN} WHERE NOT (NOT (r.name = 'North'))",
    f"SELECT COUNT(*) AS n {JOIN} WHERE r.name NOT IN ('North', 'East')",
    f"SELECT COUNT(*) AS n {JOIN} WHERE NOT (r.name IS NULL)",
    f"SELECT COUNT(*) AS n {JOIN} WHERE r.name <> 'North' OR age > 5",
    f"SELECT COUNT(*) AS a, SUM(age) AS s {JOIN} WHERE NOT (r.zone = 'A')",
    "SELECT COUNT(*) AS n FROM t WHERE NOT (CASE WHEN age > 5 THEN 1 END = 1)",
    "SELECT COUNT(*) AS n FROM t WHERE NOT (CASE WHEN age = 3 THEN NULL ELSE age END = 4)",
    "SELECT COUNT(*) AS n FROM t WHERE NOT (age BETWEEN 2 AND CASE WHEN age <> 3 THEN age END)",
    "SELECT COUNT(*) AS n FROM t WHERE age NOT IN (1, NULL)",
    "SELECT COUNT(*) AS n FROM t WHERE NOT (age = 2)",  # no NULL possible: the plain complement
    # several conditions: one release each; CASE's first match treats a NULL condition as no match
    f"SELECT COUNT(*) FILTER (WHERE NOT (r.zone = 'A')) AS a, COUNT(*) AS n {JOIN}",
    f"SELECT SUM(CASE WHEN r.zone = 'A' THEN 1 WHEN r.zone = 'B' THEN 2 ELSE 5 END) AS v {JOIN}",
    f"SELECT SUM(CASE WHEN r.name = 'North' THEN age WHEN r.zone = 'A' THEN 2 ELSE 100 END) AS v {JOIN}",
]


@pytest.fixture(scope="module")
def sqlite() -> sqlite3.Connection:
    con = sqlite3.connect(":memory:")
    FRAME.assign(sex=FRAME["sex"].astype(str)).to_sql("t", con, index=False)
    pd.DataFrame(REGIONS).to_sql("regions", con, index=False)
    return con


def _sqlite_sql(sql: str) -> str:
    """SQLite has no FILTER clause: the same count as a SUM of CASE."""
    return sql.replace("COUNT(*) FILTER (WHERE NOT (r.zone = 'A'))", "SUM(CASE WHEN NOT (r.zone = 'A') THEN 1 END)")


@pytest.mark.parametrize("sql", QUERIES)
def test_not_follows_sqls_three_valued_logic(sql: str, sqlite: sqlite3.Connection) -> None:
    truth = [float(v or 0) for v in sqlite.execute(_sqlite_sql(sql)).fetchone()]
    s = Session(FRAME, SCHEMA, "epsilon=1e9")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an empty region's warning (age NOT IN (1, NULL) matches nothing)
        df = s.query(sql, 1e8).df
    got = [float(df[c].iloc[0]) for c in df.columns if not str(c).endswith(("_ci_low", "_ci_high"))]
    assert got == pytest.approx(truth, abs=0.5), (sql, got, truth)
