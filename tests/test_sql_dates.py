"""Dates and timestamps (issue 29): a ``date`` / ``timestamp`` column type with ISO bounds, ISO and typed literals
in WHERE, and ``EXTRACT`` / ``DATE_TRUNC`` GROUP BY keys over the declared range.

A date is held as its day number and a timestamp as its microseconds (exact integers), so coverage and
sensitivity are those of an int column with binned GROUP BY cells.  Checked here:

* the keys are every calendar period of the declared bounds inside the WHERE region (public), written as Python's
  :mod:`datetime` computes them;
* the exact per-cell aggregates of pandas, DuckDB and Spark are identical and equal to a count written out with
  :mod:`datetime` on the rows (integer day numbers and microseconds, no float);
* every release's calibration covers the brute-force change over all neighbouring pairs of data sets of ≤ 2 rows
  of a tiny date domain, both relations, all three definitions;
* what stays refused says so, before anything is charged.
"""

from __future__ import annotations

import datetime as dt
import itertools

import duckdb
import numpy as np
import pandas as pd
import pytest
from conformance import assert_same_cells
from conformance import plan_query as _plan
from tests_support import assert_covered

from dpmagic.accountant.currency import CURRENCIES
from dpmagic.backends.bind import backend_for
from dpmagic.backends.duckdb import DuckDBBackend
from dpmagic.backends.pandas import PandasBackend
from dpmagic.domain.schema import Schema
from dpmagic.errors import DataValidationError, QueryTypeError, SchemaError, UnsupportedQueryError
from dpmagic.query.sql import parse_query
from dpmagic.releases.plan import plan_noise, units_of

SCHEMA = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "d": {"type": "date", "lower": "2023-11-25", "upper": "2024-03-10"},
            "ts": {"type": "timestamp", "lower": "2024-02-28 22:00:00", "upper": "2024-03-01 02:59:59.999999"},
            "x": {"type": "int", "lower": 0, "upper": 9},
        },
    }
)
D0, D1 = dt.date(2023, 11, 25), dt.date(2024, 3, 10)
T0 = dt.datetime(2024, 2, 28, 22)
T1 = dt.datetime(2024, 3, 1, 2, 59, 59, 999999)


def _frame(n: int = 400, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    days = rng.integers(0, (D1 - D0).days + 1, n)
    micros = rng.integers(0, int((T1 - T0) / dt.timedelta(microseconds=1)) + 1, n)
    d = [D0 + dt.timedelta(days=int(k)) for k in days]
    d[:2] = [D0, D1]  # the bounds themselves
    ts = [T0 + dt.timedelta(microseconds=int(k)) for k in micros]
    ts[:2] = [T0, T1]
    return pd.DataFrame({"d": pd.to_datetime(d), "ts": pd.to_datetime(ts), "x": rng.integers(0, 10, n)})


FRAME = _frame()


def _monday(day: dt.date) -> dt.date:
    return day - dt.timedelta(days=day.weekday())


#: query → (row → its GROUP BY key, or None when the WHERE drops it), written with datetime, not the parser
QUERIES = {
    "SELECT COUNT(*) AS n, SUM(x) AS s FROM t WHERE d BETWEEN '2024-01-01' AND '2024-01-31'": lambda r: (
        () if dt.date(2024, 1, 1) <= r.d <= dt.date(2024, 1, 31) else None
    ),
    "SELECT COUNT(*) AS n, SUM(x) AS s FROM t WHERE d >= DATE '2024-02-29' OR x = 0": lambda r: (
        () if r.d >= dt.date(2024, 2, 29) or r.x == 0 else None
    ),
    "SELECT EXTRACT(YEAR FROM d) AS y, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY y": lambda r: (r.d.year,),
    "SELECT EXTRACT(MONTH FROM d) AS m, COUNT(*) AS n FROM t WHERE d < '2024-03-01' GROUP BY m": lambda r: (
        (r.d.month,) if r.d < dt.date(2024, 3, 1) else None
    ),
    "SELECT DATE_TRUNC('month', d) AS m, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY 1": lambda r: (
        r.d.replace(day=1).isoformat(),
    ),
    "SELECT DATE_TRUNC('week', d) AS w, COUNT(*) AS n FROM t WHERE x > 3 GROUP BY w": lambda r: (
        (_monday(r.d).isoformat(),) if r.x > 3 else None
    ),
    "SELECT EXTRACT(DOW FROM d) AS w, COUNT(*) AS n FROM t GROUP BY w": lambda r: ((r.d.weekday() + 1) % 7,),
    "SELECT QUARTER(d) AS q, DATE_TRUNC('year', d) AS y, COUNT(*) AS n FROM t GROUP BY q, y": lambda r: (
        (r.d.month - 1) // 3 + 1,
        f"{r.d.year}-01-01",
    ),
    "SELECT COUNT(*) AS n FROM t WHERE EXTRACT(YEAR FROM d) = 2024 AND MONTH(d) IN (1, 3)": lambda r: (
        () if r.d.year == 2024 and r.d.month in (1, 3) else None
    ),
    "SELECT DATE_TRUNC('hour', ts) AS h, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY h": lambda r: (
        r.ts.replace(minute=0, second=0, microsecond=0).isoformat(sep=" "),
    ),
    "SELECT EXTRACT(DAY FROM ts) AS dd, COUNT(*) AS n FROM t "
    "WHERE ts >= TIMESTAMP '2024-02-29 23:59:59.999999' GROUP BY dd": lambda r: (
        (r.ts.day,) if r.ts >= dt.datetime(2024, 2, 29, 23, 59, 59, 999999) else None
    ),
    "SELECT d, COUNT(*) AS n FROM t WHERE d <= '2023-11-30' GROUP BY d": lambda r: (
        (r.d.isoformat(),) if r.d <= dt.date(2023, 11, 30) else None
    ),
}


def _expected(sql: str, frame: pd.DataFrame) -> dict[tuple, tuple[int, int]]:
    key_of = QUERIES[sql]
    out: dict[tuple, list[int]] = {}
    for r in frame.itertuples():
        row = type("R", (), {"d": r.d.date(), "ts": r.ts.to_pydatetime(), "x": int(r.x)})
        k = key_of(row)
        if k is not None:
            cell = out.setdefault(k, [0, 0])
            cell[0] += 1
            cell[1] += row.x
    return {k: (v[0], v[1]) for k, v in out.items()}


# ---- schema ----------------------------------------------------------------------------------------------------


def test_schema_bounds_are_iso_and_round_trip() -> None:
    d, ts = SCHEMA["d"], SCHEMA["ts"]
    assert (d.lower, d.upper) == ((D0 - dt.date(1970, 1, 1)).days, (D1 - dt.date(1970, 1, 1)).days)
    assert ts.upper == (T1 - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)  # exact integer arithmetic
    assert isinstance(ts.upper, int)
    assert Schema.from_dict(SCHEMA.to_dict()) == SCHEMA
    assert SCHEMA.to_dict()["columns"]["ts"]["upper"] == "2024-03-01 02:59:59.999999"
    # a date column is not the int column of the same numbers: another domain, another budget
    as_int = Schema.from_dict(
        {
            "table": "t",
            "columns": {**SCHEMA.to_dict()["columns"], "d": {"type": "int", "lower": d.lower, "upper": d.upper}},
        }
    )
    assert as_int.domain_fingerprint() != SCHEMA.domain_fingerprint()


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"type": "date", "lower": 19000, "upper": "2024-01-01"}, "ISO string"),
        ({"type": "date", "lower": "2024-02-30", "upper": "2024-03-01"}, "not an ISO date"),
        ({"type": "date", "lower": "2024-01-01 10:00:00", "upper": "2024-03-01"}, "time of day"),
        ({"type": "timestamp", "lower": "2024-01-01T00:00:00+02:00", "upper": "2024-03-01"}, "time zone"),
        ({"type": "date", "lower": "2024-03-02", "upper": "2024-03-01"}, "above upper"),
        ({"type": "date", "lower": "2024-03-02"}, "needs inclusive"),
    ],
)
def test_bad_temporal_bounds_are_one_clear_error(spec, match) -> None:
    with pytest.raises(SchemaError, match=match):
        Schema.from_dict({"columns": {"d": spec}})


def test_binding_reads_dates_strings_and_datetimes_exactly() -> None:
    as_text = pd.DataFrame(
        {"d": ["2023-11-25", "2024-03-10"], "ts": ["2024-02-28 22:00:00", "2024-03-01 02:59:59.999999"], "x": [1, 2]}
    )
    as_objects = pd.DataFrame({"d": [D0, D1], "ts": [T0, T1], "x": [1, 2]})
    a, b = SCHEMA.validate(as_text), SCHEMA.validate(as_objects)
    assert a.equals(b)
    assert a["d"].tolist() == [SCHEMA["d"].lower, SCHEMA["d"].upper]
    assert a["ts"].tolist() == [SCHEMA["ts"].lower, SCHEMA["ts"].upper]


@pytest.mark.parametrize(
    "column, values, match",
    [
        ("d", [1, 2], "declared date but holds (int64|bigint) values"),
        ("d", ["2024-01-01 10:00", "2024-01-01"], "times of day"),
        ("d", ["2023-11-24", "2024-01-01"], "outside its declared bounds \\[2023-11-25, 2024-03-10\\]"),
        ("ts", ["2024-03-01 03:00:00", "2024-03-01 00:00:00"], "outside its declared bounds"),
    ],
)
def test_bad_temporal_data_is_refused_the_same_on_pandas_and_duckdb(column, values, match) -> None:
    df = pd.DataFrame({"d": [D0, D1], "ts": [T0, T1], "x": [1, 2]})
    df[column] = pd.to_datetime(values, format="ISO8601") if isinstance(values[0], str) else values
    errors = []
    with pytest.raises(DataValidationError, match=match) as e:
        backend_for(df, SCHEMA)
    errors.append(str(e.value))
    con = duckdb.connect()
    con.register("t", df)
    with pytest.raises(DataValidationError, match=match) as e:
        DuckDBBackend(con.table("t"), SCHEMA)
    errors.append(str(e.value))
    if "holds (" not in match:  # a type error names the engine's type (int64 / bigint), as on int columns
        assert errors[0] == errors[1]


# ---- parsing ---------------------------------------------------------------------------------------------------


def test_literals_and_typed_literals_give_the_same_box() -> None:
    a = parse_query("SELECT COUNT(*) FROM t WHERE d BETWEEN '2024-01-01' AND '2024-03-31'", SCHEMA)
    b = parse_query("SELECT COUNT(*) FROM t WHERE d >= DATE '2024-01-01' AND d <= CAST('2024-03-31' AS DATE)", SCHEMA)
    c = parse_query("SELECT COUNT(*) FROM t WHERE d > '2023-12-31'", SCHEMA)
    assert a.where == b.where == c.where
    (iv,) = a.where.constraints["d"].intervals
    assert (iv.lo, iv.hi) == ((dt.date(2024, 1, 1) - dt.date(1970, 1, 1)).days, SCHEMA["d"].upper)


def test_keys_are_every_period_of_the_declared_range_inside_the_where_region() -> None:
    q = parse_query("SELECT DATE_TRUNC('month', d) AS m, COUNT(*) FROM t WHERE d >= '2024-01-15' GROUP BY m", SCHEMA)
    assert q.groups[0].labels == ("2023-11-01", "2023-12-01", "2024-01-01", "2024-02-01", "2024-03-01")
    assert q.region_keys() == [("2024-01-01",), ("2024-02-01",), ("2024-03-01",)]
    q = parse_query("SELECT EXTRACT(MONTH FROM d) AS m, COUNT(*) FROM t GROUP BY m", SCHEMA)
    assert q.groups[0].labels == (1, 2, 3, 11, 12)
    q = parse_query("SELECT DATE_TRUNC('hour', ts) AS h, COUNT(*) FROM t GROUP BY h", SCHEMA)
    assert q.groups[0].labels[0] == "2024-02-28 22:00:00" and q.groups[0].labels[-1] == "2024-03-01 02:00:00"
    assert len(q.groups[0].labels) == 29  # 22:00 on the 28th to 02:00 on March 1st (2024 is a leap year)


@pytest.mark.parametrize(
    "sql, error, match",
    [
        ("SELECT COUNT(*) FROM t WHERE d > 19000", QueryTypeError, "quoted ISO date"),
        ("SELECT COUNT(*) FROM t WHERE d > '2024-02-30'", QueryTypeError, "not an ISO date"),
        ("SELECT AVG(d) FROM t", UnsupportedQueryError, "AVG of the date column"),
        ("SELECT MAX(ts) FROM t", UnsupportedQueryError, "quantile"),
        ("SELECT ts, COUNT(*) FROM t GROUP BY ts", UnsupportedQueryError, "DATE_TRUNC"),
        ("SELECT DATE_TRUNC('hour', d), COUNT(*) FROM t GROUP BY 1", QueryTypeError, "no hours"),
        ("SELECT DATE_TRUNC('decade', d), COUNT(*) FROM t GROUP BY 1", QueryTypeError, "not supported"),
        ("SELECT EXTRACT(YEAR FROM x), COUNT(*) FROM t GROUP BY 1", QueryTypeError, "not a date"),
        ("SELECT DAYOFWEEK(d), COUNT(*) FROM t GROUP BY 1", UnsupportedQueryError, "EXTRACT\\(DOW"),
        ("SELECT d + 1, COUNT(*) FROM t GROUP BY 1", UnsupportedQueryError, "calendar field"),
        ("SELECT COUNT(*) FROM t WHERE d + 1 > '2024-01-01'", UnsupportedQueryError, "ISO literals"),
        ("SELECT COUNT(*) FROM t WHERE EXTRACT(YEAR FROM d) = '2024'", QueryTypeError, "no quotes"),
    ],
)
def test_what_stays_refused_says_why(sql, error, match) -> None:
    """The message or its hint names the problem or the form that works."""
    import re

    with pytest.raises(error) as e:
        parse_query(sql, SCHEMA)
    assert re.search(match, f"{e.value} {e.value.hint or ''}"), (str(e.value), e.value.hint)


# ---- exact aggregates: datetime on the rows, pandas, DuckDB, Spark ----------------------------------------------


def _cells_as_dict(q, cells) -> dict[tuple, tuple[int, int]]:
    sums = cells.sums.get("x", [0] * len(cells.keys))
    return {k: (int(c), int(s)) for k, c, s in zip(cells.keys, cells.counts, sums, strict=True) if c}


@pytest.mark.parametrize("sql", list(QUERIES))
def test_exact_aggregates_are_the_calendar_counts(sql: str) -> None:
    q, units, extra = _plan(sql, SCHEMA)
    cells = PandasBackend(SCHEMA.validate(FRAME), SCHEMA).evaluate(q, units, extended=extra)
    expected = _expected(sql, FRAME)
    got = _cells_as_dict(q, cells)
    if "SUM" not in sql:
        got = {k: (c, expected.get(k, (0, 0))[1]) for k, (c, _) in got.items()}
    assert got == expected
    assert set(expected) <= set(q.region_keys() if q.groups else [()])  # every key a declared, public one


def test_duckdb_equals_pandas_exactly() -> None:
    con = duckdb.connect()
    con.register("t", FRAME)
    db = DuckDBBackend(con.table("t"), SCHEMA)
    pb = backend_for(FRAME, SCHEMA)
    for sql in QUERIES:
        q, units, extra = _plan(sql, SCHEMA)
        assert_same_cells(pb.evaluate(q, units, extended=extra), db.evaluate(q, units, extended=extra))


def test_duckdb_date_files_equal_pandas(tmp_path) -> None:
    """A Parquet file with DATE and TIMESTAMP columns (DuckDB's own types, not pandas' datetime64)."""
    path = tmp_path / "t.parquet"
    con = duckdb.connect()
    con.register("f", FRAME)
    con.execute(f"COPY (SELECT CAST(d AS DATE) AS d, ts, x FROM f) TO '{path}' (FORMAT parquet)")
    db = backend_for(str(path), SCHEMA)
    pb = backend_for(FRAME, SCHEMA)
    for sql in QUERIES:
        q, units, extra = _plan(sql, SCHEMA)
        assert_same_cells(pb.evaluate(q, units, extended=extra), db.evaluate(q, units, extended=extra))


@pytest.mark.spark
def test_spark_equals_pandas_exactly(spark) -> None:
    sdf = spark.createDataFrame(FRAME.assign(d=FRAME["d"].dt.date))
    assert dict(sdf.dtypes)["d"] == "date"
    sb = backend_for(sdf, SCHEMA)
    pb = backend_for(FRAME, SCHEMA)
    for sql in QUERIES:
        q, units, extra = _plan(sql, SCHEMA)
        assert_same_cells(pb.evaluate(q, units, extended=extra), sb.evaluate(q, units, extended=extra))


# ---- sensitivity: brute force over a tiny date domain ------------------------------------------------------------

TINY = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "d": {"type": "date", "lower": "2023-12-30", "upper": "2024-01-02"},
            "x": {"type": "int", "lower": -1, "upper": 2},
        },
    }
)
TINY_DAYS = [dt.date(2023, 12, 30) + dt.timedelta(days=k) for k in range(4)]
TINY_ROWS = [{"d": d, "x": x} for d, x in itertools.product(TINY_DAYS, range(-1, 3))]
TINY_FRAME = pd.DataFrame({"d": [r["d"] for r in TINY_ROWS], "x": [r["x"] for r in TINY_ROWS]})
TINY_WHERES = {
    "": lambda r: True,
    "WHERE d >= '2023-12-31'": lambda r: r["d"] >= dt.date(2023, 12, 31),
    "WHERE EXTRACT(YEAR FROM d) = 2024 OR x = 2": lambda r: r["d"].year == 2024 or r["x"] == 2,
}
TINY_GROUPS = {
    "": None,
    "EXTRACT(YEAR FROM d)": lambda r: r["d"].year,
    "DATE_TRUNC('month', d)": lambda r: r["d"].replace(day=1).isoformat(),
    "EXTRACT(DOW FROM d)": lambda r: (r["d"].weekday() + 1) % 7,
    "d": lambda r: r["d"].isoformat(),
}
COST = {"pure": 0.7, "zcdp": 0.3, "gdp": 0.9}


@pytest.mark.parametrize(
    "definition, replace_one, where, group",
    list(itertools.product(["pure", "zcdp", "gdp"], [False, True], TINY_WHERES, TINY_GROUPS)),
)
def test_count_and_sum_sensitivity_brute_force(definition, replace_one, where, group) -> None:
    gb = f" GROUP BY {group}" if group else ""
    key = f"{group} AS k, " if group else ""
    q = parse_query(f"SELECT {key}COUNT(*) AS n, SUM(x) AS s FROM t {where}{gb}", TINY)
    plan = plan_noise(q, TINY, CURRENCIES[definition], COST[definition], replace_one=replace_one)
    labels = [k[0] for k in itertools.product(*[g.labels for g in q.groups])] if group else [None]
    n_cells = len(labels)
    cell = [
        (labels.index(TINY_GROUPS[group](r)) if group else 0) if TINY_WHERES[where](r) else n_cells for r in TINY_ROWS
    ]
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


def test_schema_from_dataframe_declares_dates_and_timestamps_from_their_bounds() -> None:
    s = Schema.from_dataframe(
        FRAME,
        bounds={"d": (D0, D1), "ts": ("2024-02-28 22:00:00", "2024-03-01 02:59:59.999999"), "x": (0, 9)},
        table="t",
    )
    assert s == SCHEMA
    with pytest.raises(SchemaError, match="not an ISO"):
        Schema.from_dataframe(FRAME, bounds={"d": ("2024-13-01", "2024-12-31"), "ts": (T0, T1), "x": (0, 9)})
