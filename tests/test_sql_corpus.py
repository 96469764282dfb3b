"""Table-driven check of the SQL subset against an exact SQL engine (SQLite).

Every query runs through :class:`dpmagic.Session` at a negligible noise (ε = 1e9 per query, pure DP) and
its answer is compared with SQLite running the equivalent exact SQL: groups SQLite returns must match
(keys, values within a tolerance relative to the declared bounds), groups only dpmagic returns (zero-filled
declared values) must be ~0 for counts and sums, and ORDER BY must give the same sequence.  Quantiles are
checked to lie between SQLite's lower and upper empirical quantile (the mechanism returns a candidate value).
"""

from __future__ import annotations

import math
import sqlite3

import numpy as np
import pandas as pd
import pytest
from sql_corpus import CASES
from tests_support import DATA

import dpmagic
from dpmagic.query.outputs import hidden_label, selection_only

EPS = 1e9


class _Var:
    def __init__(self, ddof: int = 1, sqrt: bool = False) -> None:
        self.x: list[float] = []
        self.ddof, self.sqrt = ddof, sqrt

    def step(self, v: float) -> None:
        self.x.append(float(v))

    def finalize(self) -> float | None:
        if len(self.x) <= self.ddof:
            return None
        v = float(np.var(self.x, ddof=self.ddof))
        return math.sqrt(v) if self.sqrt else v


def _agg(ddof: int, sqrt: bool) -> type:
    return type("A", (_Var,), {"__init__": lambda self: _Var.__init__(self, ddof, sqrt)})


class _Q:
    method = "lower"

    def __init__(self) -> None:
        self.x: list[float] = []
        self.p = 0.5

    def step(self, v: float, p: float) -> None:
        self.x.append(float(v))
        self.p = float(p)

    def finalize(self) -> float:
        return float(np.quantile(self.x, self.p, method=self.method))


class _QHi(_Q):
    method = "higher"


def _width_bucket(x: float, lo: float, hi: float, k: int) -> int:
    if x < lo:
        return 0
    if x >= hi:
        return int(k) + 1
    return int(math.floor((x - lo) / (hi - lo) * k)) + 1


def _connect(df: pd.DataFrame, table: str) -> sqlite3.Connection:
    con = sqlite3.connect(":memory:")
    if table == "pums":
        con.execute("ATTACH ':memory:' AS PUMS")
        df.to_sql("tmp", con, index=False)  # FROM PUMS.PUMS and FROM PUMS both resolve to the attached table
        con.execute("CREATE TABLE PUMS.PUMS AS SELECT * FROM main.tmp")
        con.execute("DROP TABLE main.tmp")
    else:
        df.to_sql(table, con, index=False)
    for name, (ddof, sq) in {
        "VAR": (1, False),
        "VARIANCE": (1, False),
        "VAR_POP": (0, False),
        "STDDEV": (1, True),
        "STDEV": (1, True),
        "STDDEV_POP": (0, True),
    }.items():
        con.create_aggregate(name, 1, _agg(ddof, sq))
    con.create_aggregate("QLO", 2, _Q)
    con.create_aggregate("QHI", 2, _QHi)
    con.create_function("WIDTH_BUCKET", 4, _width_bucket)
    con.create_function("CLAMP", 3, lambda x, a, b: min(max(x, a), b))
    return con


@pytest.fixture(scope="module")
def engines() -> dict[str, tuple[dpmagic.Session, sqlite3.Connection]]:
    out = {}
    for table in ("pums", "adult"):
        df = pd.read_csv(DATA / f"{table}.csv")
        s = dpmagic.Session(df, DATA / f"{table}.schema.json", "epsilon=1e15")
        out[table] = (s, _connect(s.data.copy(), table))
    return out


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 120


def _is_num(v: object) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


@pytest.mark.parametrize("table, sql, lite", CASES, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(CASES)])
def test_against_sqlite(engines, table: str, sql: str, lite: str | None) -> None:
    session, con = engines[table]
    result = session.query(sql, epsilon=EPS, fresh=True)
    q = result.query
    shown_extra = {hidden_label(a) for a in selection_only(q)}  # what HAVING / ORDER BY read, shown (issue 27)
    df = result.df[
        [c for c in result.df.columns if not str(c).endswith(("_ci_low", "_ci_high")) and c not in shown_extra]
    ]
    exact = con.execute(lite or sql).fetchall()
    if any(a.func == "quantile" and a.param not in (0.0, 1.0) for a in q.aggregates):  # MIN / MAX: exact below
        ((lo, hi),) = exact
        v = float(df.iloc[0, 0])
        assert lo - 1e-9 - 1 <= v <= hi + 1e-9 + 1, (v, lo, hi)
        return
    keys = [i for i, c in enumerate(df.columns) if c in q.group_by]
    assert all(len(r) == df.shape[1] for r in exact), (df.columns, exact[:2])
    dp_rows = [tuple(r) for r in df.itertuples(index=False)]

    def key(r: tuple) -> tuple:
        return tuple(None if r[i] is None else (float(r[i]) if _is_num(r[i]) else r[i]) for i in keys)

    index = {key(r): r for r in dp_rows}
    seen = []
    for r in exact:
        k = key(r)
        assert k in index, f"group {k} missing from dpmagic's answer"
        seen.append(k)
        got = index[k]
        for i, (a, b) in enumerate(zip(got, r, strict=True)):
            if i in keys:
                continue
            if b is None:
                continue
            if _is_num(b):
                tol = 1e-6 * max(1.0, abs(float(b))) + 1e-3
                assert abs(float(a) - float(b)) <= tol, (df.columns[i], k, a, b)
            else:
                assert a == b
    if q.order_by:
        order = [key(r) for r in dp_rows if key(r) in set(seen)]
        assert order == seen
    if q.limit is None and q.having is None:
        for r in dp_rows:
            if key(r) not in set(seen):
                for i, v in enumerate(r):
                    if i not in keys and _is_num(v) and q.outputs is None:
                        assert abs(float(v)) < 1e-3
