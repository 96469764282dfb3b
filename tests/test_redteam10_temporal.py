"""Red team (session 10): a TIMESTAMP WITH TIME ZONE source is read at its wall-clock time on every backend.

docs/the temporal module promise: timezone-aware values at their wall-clock time (pandas: the column's own zone;
DuckDB: a TIMESTAMPTZ has no zone of its own, so its wall-clock time is the connection's TimeZone).  Hole (fixed):
DuckDB took the microseconds as the difference with a zone-less epoch, computed with the epoch's offset in the
session zone — an hour off for every summer time (EXTRACT(HOUR) 22 instead of 23:30's 23, 23:30 moved to the
previous day), so the same rows gave other keys, regions and answers on DuckDB than on pandas.  A per-row public
function either way (no privacy loss), but the released answer was not the query's (invariant 6).
"""

from __future__ import annotations

import warnings

import duckdb
import pandas as pd
import pytest

from dpmagic.session.session import Session

SCHEMA = {
    "table": "t",
    "columns": {"ts": {"type": "timestamp", "lower": "2024-01-01 00:00:00", "upper": "2024-12-31 23:59:59"}},
}
#: New York wall-clock times on both sides of the daylight-saving changes (EDT = UTC−4, EST = UTC−5)
WALL = [
    "2024-01-15 23:30:00",
    "2024-03-10 23:30:00",
    "2024-06-01 01:30:00",
    "2024-11-03 00:30:00",
    "2024-12-31 23:00:00",
]
QUERIES = [
    "SELECT EXTRACT(HOUR FROM ts) AS k, COUNT(*) AS n FROM t GROUP BY k",
    "SELECT EXTRACT(DAY FROM ts) AS k, COUNT(*) AS n FROM t GROUP BY k",
    "SELECT DATE_TRUNC('day', ts) AS k, COUNT(*) AS n FROM t WHERE ts >= '2024-03-01 00:00:00' GROUP BY k",
    "SELECT COUNT(*) AS n FROM t WHERE ts < '2024-06-01 01:00:00'",
]


def _answers(data: object, sql: str) -> list[tuple[object, ...]]:
    s = Session(data, SCHEMA, "epsilon=1e9")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = s.query(sql, 1e8).df  # exact counts: the 95% noise interval at ε = 1e8 is far below 0.5
    df = df[df["n"] > 0.5]
    return [tuple(str(v) for v in row) for row in df[[c for c in df.columns if c in ("k", "n")]].to_numpy()]


@pytest.mark.parametrize("sql", QUERIES)
def test_a_timestamptz_is_read_at_its_wall_clock_time_on_duckdb_as_on_pandas(sql: str) -> None:
    frame = pd.DataFrame({"ts": pd.to_datetime(WALL).tz_localize("America/New_York")})
    con = duckdb.connect()
    con.execute("SET TimeZone = 'America/New_York'")
    values = ", ".join(f"(TIMESTAMPTZ '{w}')" for w in WALL)  # read in the connection's zone: New York
    relation = con.sql(f"SELECT * FROM (VALUES {values}) v(ts)")
    assert _answers(relation, sql) == _answers(frame, sql)
