"""A collation cannot break disjointness (issue 24, finding 3).

A DuckDB column declared ``VARCHAR COLLATE NOCASE`` made ``c IN ('ab')`` match 'Ab', 'aB' and 'AB' too: four
queries charged in parallel all counted the same rows, GROUP BY moved rows across declared cells, and pandas and
DuckDB disagreed.  Now every generated comparison and GROUP BY key of a string column is ``COLLATE "binary"``
(exact, as pandas, whatever the source's collation), and a collated column is refused clearly — at binding,
before every charge (a table can be altered between statements) and before every statement.
"""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest
from conformance import plan_query as _plan

from dpmagic import Session
from dpmagic.backends.bind import backend_for
from dpmagic.backends.duckdb import DuckDBBackend
from dpmagic.domain.schema import Schema
from dpmagic.errors import ConfigurationError

SCHEMA = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "c": {"type": "categorical", "values": ["ab", "Ab", "aB", "AB", "é"]},
            "x": {"type": "int", "lower": 0, "upper": 9},
        },
    }
)
ROWS = [("ab", 1), ("Ab", 2), ("aB", 3), ("AB", 4), ("ab", 5), ("é", 6)]
FRAME = pd.DataFrame(ROWS, columns=["c", "x"])
QUERIES = [f"SELECT COUNT(*) AS n, SUM(x) AS s FROM t WHERE c IN ('{v}')" for v in ("ab", "Ab", "aB", "AB")]
GROUPED = "SELECT c, COUNT(*) AS n, SUM(x) AS s, MEDIAN(x) AS m FROM t GROUP BY c"
EXCLUDED = "SELECT COUNT(*) AS n FROM t WHERE NOT (c = 'ab')"


def _nocase_table() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TABLE t (c VARCHAR COLLATE NOCASE, x BIGINT)")
    con.executemany("INSERT INTO t VALUES (?, ?)", ROWS)
    return con


def _nocase_view() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TABLE base (c VARCHAR, x BIGINT)")
    con.executemany("INSERT INTO base VALUES (?, ?)", ROWS)
    con.execute("CREATE VIEW t AS SELECT c COLLATE NOCASE AS c, x FROM base")
    return con


def _exact(backend, sql: str):
    q, units, extra = _plan(sql, SCHEMA)
    cells = backend.evaluate(q, units, extended=extra)
    return cells.counts.tolist(), cells.sums, {k: v.tolist() for k, v in cells.extra.items()}


@pytest.mark.parametrize("make", [_nocase_table, _nocase_view], ids=["table", "view"])
def test_a_collated_column_is_refused_at_binding(make) -> None:
    con = make()
    with pytest.raises(ConfigurationError, match="column 'c' has a collation"):
        Session((con, "t"), SCHEMA, "epsilon=1")
    with pytest.raises(ConfigurationError, match="column 'c' has a collation"):  # an expression in a relation
        backend_for(con.sql("SELECT c COLLATE NOCASE AS c, x FROM t"), SCHEMA)
    # the same column made binary binds
    backend_for(con.sql('SELECT c COLLATE "binary" AS c, x FROM t'), SCHEMA)


@pytest.mark.parametrize("make", [_nocase_table, _nocase_view], ids=["table", "view"])
def test_comparisons_are_binary_whatever_the_collation(make, monkeypatch) -> None:
    """With the refusal switched off, the generated SQL alone keeps the answers exact: the four queries and the
    GROUP BY give pandas' exact aggregates, and the four disjoint boxes share no row."""
    monkeypatch.setattr(DuckDBBackend, "_check_collation", lambda self: None)
    engine = backend_for(make(), SCHEMA, table="t")
    pandas = backend_for(FRAME, SCHEMA)
    for sql in [*QUERIES, GROUPED, EXCLUDED]:
        assert _exact(engine, sql) == _exact(pandas, sql), sql
    assert [_exact(engine, sql)[0][0] for sql in QUERIES] == [2, 1, 1, 1]  # 5 rows, each counted once
    assert _exact(engine, GROUPED)[0] == [2, 1, 1, 1, 1]


def test_alter_between_statements_is_refused_before_the_charge() -> None:
    """A table bound binary and altered to NOCASE afterwards: the next query is refused before it is charged."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t (c VARCHAR, x BIGINT)")
    con.executemany("INSERT INTO t VALUES (?, ?)", ROWS)
    s = Session((con, "t"), SCHEMA, "epsilon=1")
    s.query(QUERIES[0], epsilon=0.1)
    spent, n = s.spent, len(s.accountant)
    con.execute("ALTER TABLE t ALTER c SET DATA TYPE VARCHAR COLLATE NOCASE")
    for sql in (QUERIES[1], GROUPED):
        with pytest.raises(ConfigurationError, match="column 'c' has a collation"):
            s.query(sql, epsilon=0.1)
    assert (s.spent, len(s.accountant)) == (spent, n)
    with pytest.raises(ConfigurationError, match="collation"):  # and before every statement
        s.backend.evaluate(*_plan(QUERIES[1], SCHEMA)[:2])
    con.execute("ALTER TABLE t ALTER c SET DATA TYPE VARCHAR")
    s.query(QUERIES[1], epsilon=0.1)  # binary again: answered


def test_generated_string_comparisons_name_the_binary_collation() -> None:
    """Every comparison and GROUP BY key of the string column in the statements of a query carries it."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t (c VARCHAR, x BIGINT)")
    con.executemany("INSERT INTO t VALUES (?, ?)", ROWS)
    b = backend_for(con, SCHEMA, table="t")
    seen: list[str] = []
    run = b._run
    b._run = lambda stmt: seen.append(b.sql(stmt)) or run(stmt)
    b.evaluate(*_plan("SELECT c, COUNT(*) FROM t WHERE NOT (c IN ('ab', 'AB')) GROUP BY c", SCHEMA)[:2])
    for sql in seen:
        bare = sql.replace('"c" COLLATE "binary"', "")
        assert '"c" IN' not in bare and '"c" =' not in bare, sql


@pytest.mark.spark
def test_spark_refuses_a_collated_string_column(spark) -> None:
    frame = spark.createDataFrame(FRAME)
    collated = spark.sql("SELECT c COLLATE UTF8_LCASE AS c, x FROM VALUES ('ab', 1), ('AB', 2) AS v(c, x)")
    with pytest.raises(ConfigurationError, match="column 'c' is a string collate"):
        Session(collated, SCHEMA, "epsilon=1")
    binary = spark.sql("SELECT c COLLATE UTF8_BINARY AS c, x FROM VALUES ('ab', 1), ('AB', 2) AS v(c, x)")
    assert _exact(backend_for(binary, SCHEMA), GROUPED)[0] == [1, 0, 0, 1, 0]
    assert _exact(backend_for(frame, SCHEMA), GROUPED)[0] == [2, 1, 1, 1, 1]
