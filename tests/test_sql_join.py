"""A JOIN with a public lookup table declared in the schema (issue 29) is the single-table query it equals.

Checked here: the rewritten query has exactly the coverage, groups and aggregates of the single-table query written
by hand (hence its sensitivity and charge); its exact aggregates equal SQLite's on the JOIN SQL itself (at a huge ε)
and are identical on pandas, DuckDB and Spark; every release's calibration covers the brute-force change over all
neighbouring pairs of data sets of ≤ 2 rows of a tiny domain (both relations, three definitions); the schema's
``public_tables`` is validated strictly and is part of the schema's fingerprint; every refusal names its reason;
and ``%%dpquery`` answers a join in a real IPython shell.
"""

from __future__ import annotations

import itertools
import math
import sqlite3
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest
from conformance import assert_same_cells
from conformance import plan_query as _plan
from tests_support import assert_covered
from tests_support import run_cell as run

from dpmagic.accountant.currency import CURRENCIES
from dpmagic.backends.bind import backend_for
from dpmagic.backends.duckdb import DuckDBBackend
from dpmagic.backends.pandas import PandasBackend
from dpmagic.domain.schema import Schema
from dpmagic.errors import QueryError, SchemaError, UnsupportedQueryError
from dpmagic.query.sql import parse_query
from dpmagic.releases.plan import plan_noise, units_of
from dpmagic.session.session import Session

REGIONS = [
    {"code": 1, "name": "North", "zone": "A"},
    {"code": 2, "name": "North", "zone": "B"},
    {"code": 3, "name": "South", "zone": "A"},
    {"code": 4, "name": "East", "zone": "B"},
    {"code": 5, "name": None, "zone": "A"},
    {"code": 9, "name": "Far", "zone": "C"},  # not a declared code of t.region: no private row joins it
]
SPEC: dict[str, Any] = {
    "table": "t",
    "columns": {
        "region": {"type": "int", "lower": 1, "upper": 6},  # 6 is missing from the lookup
        "age": {"type": "int", "lower": 0, "upper": 10},
        "sex": {"type": "categorical", "values": ["F", "M"]},
    },
    "public_tables": {
        "regions": {"key": "code", "rows": REGIONS},
        "sexes": {"key": "s", "rows": [{"s": "F", "label": "female"}, {"s": "M", "label": "male"}]},
        "areas": {"key": "region", "rows": [{"region": r, "area": "low" if r < 3 else "high"} for r in (1, 2, 3, 4)]},
    },
}
SCHEMA = Schema.from_dict(SPEC)


def _frame(n: int = 500, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "region": rng.integers(1, 7, n),
            "age": rng.integers(0, 11, n),
            "sex": pd.Categorical(rng.choice(["F", "M"], n), categories=["F", "M"]),
        }
    )


FRAME = _frame()

#: (JOIN query, the single-table query written by hand)
EQUIVALENT = [
    (
        "SELECT r.name, COUNT(*) AS n, SUM(t.age) AS s FROM t JOIN regions r ON t.region = r.code "
        "WHERE r.zone = 'A' GROUP BY r.name",
        "SELECT CASE WHEN region IN (1, 2) THEN 'North' WHEN region IN (3) THEN 'South' WHEN region IN (4) THEN 'East' "
        "END AS name, COUNT(*) AS n, SUM(age) AS s FROM t WHERE region IN (1, 3, 5) AND region <= 5 GROUP BY 1",
    ),
    (
        "SELECT COUNT(*) AS n FROM t LEFT JOIN regions AS r ON r.code = t.region WHERE t.age > 3",
        "SELECT COUNT(*) AS n FROM t WHERE age > 3",
    ),
    ("SELECT COUNT(*) AS n FROM t JOIN regions r ON t.region = r.code", "SELECT COUNT(*) AS n FROM t WHERE region < 6"),
    ("SELECT AVG(age) AS a FROM t JOIN areas USING (region)", "SELECT AVG(age) AS a FROM t WHERE region <= 4"),
    (
        "SELECT label, COUNT(*) AS n FROM t x JOIN sexes ON x.sex = sexes.s GROUP BY label",
        "SELECT CASE WHEN sex = 'F' THEN 'female' WHEN sex = 'M' THEN 'male' END AS label, COUNT(*) AS n FROM t "
        "GROUP BY 1",
    ),
]


@pytest.mark.parametrize("joined, direct", EQUIVALENT)
def test_a_lookup_join_is_the_single_table_query(joined: str, direct: str) -> None:
    a, b = parse_query(joined, SCHEMA, tables=("t",)), parse_query(direct, SCHEMA, tables=("t",))
    assert a.coverage == b.coverage
    assert [(g.name, g.column, g.labels, g.sets) for g in a.groups] == [
        (g.name, g.column, g.labels, g.sets) for g in b.groups
    ]
    assert [x.identity() for x in a.aggregates] == [x.identity() for x in b.aggregates]
    assert a.region_keys() == b.region_keys() and a.filter == b.filter
    for definition, replace_one in itertools.product(("pure", "zcdp", "gdp"), (False, True)):
        pa = plan_noise(a, SCHEMA, CURRENCIES[definition], 0.5, replace_one=replace_one)
        pb = plan_noise(b, SCHEMA, CURRENCIES[definition], 0.5, replace_one=replace_one)
        assert repr(pa) == repr(pb)


# ---- exact aggregates: SQLite on the JOIN SQL itself, pandas, DuckDB, Spark --------------------------------------

SQLITE_QUERIES = [
    "SELECT r.name AS name, COUNT(*) AS n, SUM(t.age) AS s FROM t JOIN regions r ON t.region = r.code "
    "WHERE r.zone = 'A' GROUP BY r.name",
    "SELECT r.name AS name, COUNT(*) AS n, SUM(age) AS s FROM t LEFT JOIN regions r ON t.region = r.code "
    "GROUP BY r.name",
    "SELECT COUNT(*) AS n, SUM(age) AS s FROM t INNER JOIN areas USING (region)",
    "SELECT zone, COUNT(*) AS n, SUM(age) AS s FROM t AS x JOIN regions AS r ON r.code = x.region "
    "WHERE x.sex = 'F' GROUP BY zone",
    "SELECT s.label AS label, r.zone AS zone, COUNT(*) AS n, SUM(t.age) AS s FROM t JOIN regions r "
    "ON t.region = r.code JOIN sexes s ON t.sex = s.s GROUP BY s.label, r.zone",
    "SELECT COUNT(*) AS n, SUM(age) AS s FROM t JOIN regions r ON t.region = r.code "
    "WHERE r.name = 'North' OR t.age > 8",
    "SELECT area, COUNT(*) AS n, SUM(age) AS s FROM t LEFT JOIN areas a ON a.region = t.region "
    "WHERE t.region >= 3 GROUP BY area",
    "SELECT COUNT(*) AS n, SUM(age) AS s FROM t LEFT JOIN regions r ON t.region = r.code WHERE r.code IS NULL",
    "WITH a AS (SELECT * FROM t WHERE age > 3) SELECT r.zone AS zone, COUNT(*) AS n, SUM(a.age) AS s FROM a "
    "JOIN regions r ON a.region = r.code GROUP BY r.zone",
    "SELECT r.zone, COUNT(*) AS n, SUM(age) AS s FROM t JOIN regions r ON t.region = r.code GROUP BY r.zone "
    "HAVING COUNT(*) > 5 ORDER BY r.zone DESC",
]


def _sqlite(sql: str) -> dict[tuple, tuple[int, int]]:
    con = sqlite3.connect(":memory:")
    FRAME.assign(sex=FRAME["sex"].astype(str)).to_sql("t", con, index=False)
    for name, spec in SPEC["public_tables"].items():
        pd.DataFrame(spec["rows"]).to_sql(name, con, index=False)
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    out = {}
    for row in cur.fetchall():
        rec = dict(zip(names, row, strict=True))
        key = tuple(rec[k] for k in names if k not in ("n", "s"))
        out[key] = (int(rec["n"]), int(rec.get("s") or 0))
    return out


def _nan_none(v: Any) -> Any:
    return None if isinstance(v, float) and math.isnan(v) else v


@pytest.mark.parametrize("sql", SQLITE_QUERIES)
def test_exact_aggregates_equal_sqlite_on_the_join_sql(sql: str) -> None:
    session = Session(FRAME, SCHEMA, "epsilon=1e12", ledger=None)
    df = session.query(sql, epsilon=1e11).df
    keys = [c for c in df.columns if c not in ("n", "s") and not c.endswith(("_ci_low", "_ci_high"))]
    got = {
        tuple(_nan_none(v) for v in row[keys]): (round(row["n"]), round(row["s"]))
        for _, row in df.iterrows()
        if round(row["n"]) != 0  # a declared key no row falls in: SQLite shows no row for it
    }
    assert got == _sqlite(sql)


def test_duckdb_equals_pandas_exactly() -> None:
    con = duckdb.connect()
    con.register("t", FRAME.assign(sex=FRAME["sex"].astype(str)))
    db = DuckDBBackend(con.table("t"), SCHEMA)
    pb = backend_for(FRAME, SCHEMA)
    for sql in SQLITE_QUERIES:
        q, units, extra = _plan(sql, SCHEMA)
        assert_same_cells(pb.evaluate(q, units, extended=extra), db.evaluate(q, units, extended=extra))


@pytest.mark.slow
@pytest.mark.spark
def test_spark_equals_pandas_exactly(spark) -> None:
    sb = backend_for(spark.createDataFrame(FRAME.assign(sex=FRAME["sex"].astype(str))), SCHEMA)
    pb = backend_for(FRAME, SCHEMA)
    for sql in SQLITE_QUERIES:
        q, units, extra = _plan(sql, SCHEMA)
        assert_same_cells(pb.evaluate(q, units, extended=extra), sb.evaluate(q, units, extended=extra))


# ---- sensitivity: brute force over a tiny domain ----------------------------------------------------------------

TINY = Schema.from_dict(
    {
        "table": "t",
        "columns": {"g": {"type": "int", "lower": 1, "upper": 3}, "x": {"type": "int", "lower": -1, "upper": 2}},
        # code 3 is missing from the lookup; codes 1 and 2 share one name
        "public_tables": {"lk": {"key": "k", "rows": [{"k": 1, "name": "a", "z": 1}, {"k": 2, "name": "a", "z": 0}]}},
    }
)
TINY_ROWS = [{"g": g, "x": x} for g, x in itertools.product(range(1, 4), range(-1, 3))]
TINY_FRAME = pd.DataFrame(TINY_ROWS)
LOOK = {1: ("a", 1), 2: ("a", 0)}
TINY_JOINS = {  # FROM … clause → row → (joined?, lookup name, lookup z)
    "JOIN lk ON t.g = lk.k": lambda r: (r["g"] in LOOK, *LOOK.get(r["g"], (None, None))),
    "LEFT JOIN lk ON t.g = lk.k": lambda r: (True, *LOOK.get(r["g"], (None, None))),
}
TINY_WHERES = {
    "": lambda r, name, z: True,
    "WHERE lk.z = 1": lambda r, name, z: z == 1,
    "WHERE lk.name = 'a' OR t.x = 2": lambda r, name, z: name == "a" or r["x"] == 2,
}
TINY_GROUPS = {"": None, "lk.name": lambda r, name, z: name, "lk.z": lambda r, name, z: z}
COST = {"pure": 0.7, "zcdp": 0.3, "gdp": 0.9}


@pytest.mark.parametrize(
    "definition, replace_one, join, where, group",
    list(itertools.product(["pure", "zcdp", "gdp"], [False, True], TINY_JOINS, TINY_WHERES, TINY_GROUPS)),
)
def test_count_and_sum_sensitivity_brute_force(definition, replace_one, join, where, group) -> None:
    gb = f" GROUP BY {group}" if group else ""
    key = f"{group} AS k, " if group else ""
    q = parse_query(f"SELECT {key}COUNT(*) AS n, SUM(x) AS s FROM t {join} {where}{gb}", TINY)
    plan = plan_noise(q, TINY, CURRENCIES[definition], COST[definition], replace_one=replace_one)
    labels = list(q.groups[0].labels) if group else [None]
    n_cells = len(labels)
    cell = []
    for r in TINY_ROWS:
        joined, name, z = TINY_JOINS[join](r)
        kept = joined and TINY_WHERES[where](r, name, z)
        cell.append((labels.index(TINY_GROUPS[group](r, name, z)) if group else 0) if kept else n_cells)
    exact = PandasBackend(TINY.validate(TINY_FRAME), TINY).evaluate(q, units_of(plan))
    for noise, values, backend in (
        (plan.count, [1] * len(TINY_ROWS), exact.counts.tolist()),
        (plan.sums["x"], [r["x"] for r in TINY_ROWS], list(exact.sums["x"])),
    ):
        contrib = np.zeros((len(TINY_ROWS), n_cells), dtype=np.int64)
        for i, (c, v) in enumerate(zip(cell, values, strict=True)):
            if c < n_cells:
                contrib[i, c] = v
        assert contrib.sum(axis=0).tolist() == backend  # the backend sums exactly these contributions
        assert_covered(noise, contrib, definition, replace_one)


# ---- refusals -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql, says",
    [
        ("SELECT COUNT(*) FROM t JOIN t s ON t.region = s.region", "another private table.*self-join"),
        ("SELECT COUNT(*) FROM t JOIN other o ON t.region = o.region", "not a public table.*privacy unit"),
        ("SELECT COUNT(*) FROM t JOIN regions r ON t.region = r.zone", "not unique.*one-to-many"),
        ("SELECT COUNT(*) FROM t RIGHT JOIN regions r ON t.region = r.code", "RIGHT JOIN"),
        ("SELECT COUNT(*) FROM t FULL OUTER JOIN regions r ON t.region = r.code", "FULL"),
        ("SELECT COUNT(*) FROM t CROSS JOIN regions r", "CROSS"),
        ("SELECT COUNT(*) FROM t, regions r WHERE t.region = r.code", "without a condition"),
        ("SELECT COUNT(*) FROM t JOIN regions r ON t.region > r.code", "ON <bound table column> = <lookup column>"),
        # SUM / AVG of a numeric lookup column is answered (tests/test_sql_rowexpr_wired.py)
        ("SELECT MIN(r.code) FROM t JOIN regions r ON t.region = r.code", "MIN of a lookup column is not supported"),
        ("SELECT AVG(zone) FROM t JOIN regions r ON t.region = r.code", "holds non-numbers"),
        ("SELECT COUNT(*) FROM t JOIN regions r ON t.region = r.code WHERE r.nope = 1", "no column 'nope'"),
        ("SELECT COUNT(*) FROM t JOIN regions r ON t.age = r.code JOIN areas a USING (region)", None),
        ("SELECT COUNT(*) FROM t JOIN (SELECT * FROM regions) r ON t.region = r.code", "subquery"),
        ("SELECT COUNT(*) FROM t JOIN sexes ON t.sex = sexes.s JOIN sexes ON t.sex = sexes.s", "share a name"),
    ],
)
def test_refusals_name_their_reason(sql: str, says: str | None) -> None:
    if says is None:  # two lookups on two private columns: answered
        parse_query(sql, SCHEMA, tables=("t",))
        return
    with pytest.raises((UnsupportedQueryError, QueryError), match=says):
        parse_query(sql, SCHEMA, tables=("t",))


def test_a_join_without_public_tables_says_how_to_declare_one() -> None:
    plain = Schema.from_dict({k: v for k, v in SPEC.items() if k != "public_tables"})
    with pytest.raises(UnsupportedQueryError) as e:
        parse_query("SELECT COUNT(*) FROM t JOIN regions r ON t.region = r.code", plain, tables=("t",))
    assert "privacy unit" in str(e.value) and "public_tables" in (e.value.hint or "")


def test_a_refused_join_spends_nothing() -> None:
    session = Session(FRAME, SCHEMA, "epsilon=1", ledger=None)
    with pytest.raises(UnsupportedQueryError):
        session.query("SELECT COUNT(*) FROM t JOIN regions r ON t.region = r.zone", epsilon=0.5)
    assert session.spent == 0


# ---- the schema's public tables -----------------------------------------------------------------------------------


def _with(tables: Any) -> dict[str, Any]:
    return {**SPEC, "public_tables": tables}


@pytest.mark.parametrize(
    "tables, says",
    [
        ([1, 2], "must be an object"),
        ({"bad name": {"key": "k", "rows": [{"k": 1}]}}, "identifier"),
        ({"t": {"key": "k", "rows": [{"k": 1}]}}, "bound table"),
        ({"r": {"rows": [{"k": 1}]}}, "needs a 'key'"),
        ({"r": {"key": "k", "rows": []}}, "non-empty list"),
        ({"r": {"key": "k", "rows": [{"k": 1}], "extra": 1}}, "'key' and 'rows'"),
        ({"r": {"key": "z", "rows": [{"k": 1}]}}, "not one of its columns"),
        ({"r": {"key": "k", "rows": [{"k": 1, "a": 2}, {"k": 2}]}}, "row 2 does not have exactly"),
        ({"r": {"key": "k", "rows": [{"k": 1}, {"k": 1}]}}, "appears twice"),
        ({"r": {"key": "k", "rows": [{"k": None}]}}, "null key"),
        ({"r": {"key": "k", "rows": [{"k": 1, "a": [1]}]}}, "not a string, a number or null"),
        ({"r": {"key": "k", "rows": [{"k": 1, "a": True}]}}, "not a string, a number or null"),
        ({"r": {"key": "k", "rows": [{"k": 1, "a": float("nan")}]}}, "finite"),
        ({"r": {"key": "k", "rows": [{"k": 1, "K": 2}]}}, "differ only by case"),
    ],
)
def test_bad_public_tables_are_one_clear_schema_error(tables: Any, says: str) -> None:
    with pytest.raises(SchemaError, match=says):
        Schema.from_dict(_with(tables))


def test_public_tables_round_trip_and_are_in_the_fingerprint() -> None:
    again = Schema.from_dict(SCHEMA.to_dict())
    assert again.public_tables == SCHEMA.public_tables and again.fingerprint() == SCHEMA.fingerprint()
    changed = [dict(r) for r in REGIONS]
    changed[0]["name"] = "Norte"
    other = Schema.from_dict(_with({**SPEC["public_tables"], "regions": {"key": "code", "rows": changed}}))
    assert other.fingerprint() != SCHEMA.fingerprint()
    plain = Schema.from_dict({k: v for k, v in SPEC.items() if k != "public_tables"})
    assert plain.fingerprint() != SCHEMA.fingerprint() and "public_tables" not in plain.to_dict()


def test_the_null_group_of_a_left_join_is_released() -> None:
    """Unmatched rows of a LEFT JOIN (region 6) and a NULL lookup value (region 5) are SQL's NULL group."""
    session = Session(FRAME, SCHEMA, "epsilon=1e12", ledger=None)
    df = session.query(
        "SELECT r.name, COUNT(*) AS n FROM t LEFT JOIN regions r ON t.region = r.code GROUP BY r.name", epsilon=1e11
    ).df
    nulls = df[df["name"].isna()]
    assert len(nulls) == 1 and round(nulls["n"].iloc[0]) == int(FRAME["region"].isin([5, 6]).sum())


# ---- a real IPython shell ----------------------------------------------------------------------------------------


def test_dpquery_answers_a_join_in_ipython(ip) -> None:
    ip.user_ns.update(t=FRAME, jschema=SCHEMA)
    result, cap = run(ip, "%dpsession t --schema jschema --budget epsilon=1.0 --ledger memory")
    assert result.success, cap.stderr
    result, cap = run(
        ip,
        "%%dpquery by_name << --epsilon 0.2\n"
        "SELECT r.name, COUNT(*) AS n FROM t JOIN regions r ON t.region = r.code WHERE r.zone = 'A' GROUP BY r.name\n",
    )
    assert result.success, cap.stderr
    assert list(ip.user_ns["by_name"]["name"].fillna("NULL")) == ["North", "South", "NULL"]  # code 5: no name
    result, cap = run(ip, "%%dpquery --epsilon 0.2\nSELECT COUNT(*) FROM t JOIN t s ON t.region = s.region\n")
    assert "privacy unit" in cap.stdout + cap.stderr and "Traceback" not in cap.stdout + cap.stderr


def test_a_ledger_binding_notices_a_changed_lookup(tmp_path) -> None:
    """The lookup is recorded at the first binding (not in the ledger key: editing it gives no fresh budget)."""
    from dpmagic.accountant.binding import ledger_key
    from dpmagic.errors import ConfigurationError

    path = tmp_path / "l.sqlite"
    Session(FRAME, SCHEMA, "epsilon=1", ledger=path).query(
        "SELECT COUNT(*) FROM t JOIN regions r ON t.region = r.code", epsilon=0.25
    )
    assert Session(FRAME, Schema.from_dict(SCHEMA.to_dict()), "epsilon=1", ledger=path).spent == 0.25
    changed = [dict(r) for r in REGIONS]
    changed[2]["name"] = "North"
    other = Schema.from_dict(_with({**SPEC["public_tables"], "regions": {"key": "code", "rows": changed}}))
    assert ledger_key(other) == ledger_key(SCHEMA)
    with pytest.raises(ConfigurationError, match="public lookup tables"):
        Session(FRAME, other, "epsilon=1", ledger=path)


def test_an_unselected_lookup_key_is_named_by_its_column() -> None:
    """``GROUP BY r.name`` without selecting it: the answer lists the key first (as for any GROUP BY), as ``name``."""
    q = parse_query("SELECT COUNT(*) AS n FROM t JOIN regions r ON t.region = r.code GROUP BY r.name", SCHEMA)
    assert [g.name for g in q.groups] == ["name"] and q.groups[0].labels == ("East", "North", "South", None)


def test_a_join_on_a_huge_int_domain_never_enumerates_it() -> None:
    """A zip-code-like column declared over 10^12 values: the lookup's codes inside the domain, nothing else (a code
    of another type or outside the bounds joins no row)."""
    schema = Schema.from_dict(
        {
            "table": "t",
            "columns": {"zip": {"type": "int", "lower": 0, "upper": 10**12}},
            "public_tables": {
                "z": {"key": "k", "rows": [{"k": 1, "st": "NY"}, {"k": 2.0, "st": "CA"}, {"k": "3", "st": "X"}]}
            },
        }
    )
    q = parse_query("SELECT z.st, COUNT(*) AS n FROM t JOIN z ON t.zip = z.k GROUP BY z.st", schema)
    direct = parse_query("SELECT COUNT(*) AS n FROM t WHERE zip IN (1, 2)", schema)
    assert q.coverage == direct.coverage and q.region_keys() == [("NY",), ("CA",)]


def test_joins_compose_with_filters_scalar_subqueries_and_key_only_selects() -> None:
    """The rewrite happens before every other path: conditional aggregates on lookup columns (one release each,
    composed), a scalar subquery beside a lookup condition, and a SELECT of lookup keys alone (public, free)."""
    session = Session(FRAME, SCHEMA, "epsilon=1e12", ledger=None)
    zone_a, zone_b = FRAME["region"].isin([1, 3, 5]), FRAME["region"].isin([2, 4])
    df = session.query(
        "SELECT COUNT(*) FILTER (WHERE r.zone = 'A') AS a, COUNT(*) FILTER (WHERE r.zone = 'B') AS b "
        "FROM t JOIN regions r ON t.region = r.code",
        epsilon=1e11,
    ).df
    assert (round(df["a"].iloc[0]), round(df["b"].iloc[0])) == (zone_a.sum(), zone_b.sum())
    df = session.query(
        "SELECT COUNT(*) AS n FROM t JOIN regions r ON t.region = r.code "
        "WHERE t.age > (SELECT AVG(age) FROM t) AND r.zone = 'A'",
        epsilon=1e11,
    ).df
    assert round(df["n"].iloc[0]) == ((FRAME["age"] > FRAME["age"].mean()) & zone_a).sum()
    spent = session.spent
    keys = session.query("SELECT r.name FROM t JOIN regions r ON t.region = r.code GROUP BY r.name").df
    assert list(keys["name"].fillna("NULL")) == ["East", "North", "South", "NULL"] and session.spent == spent
