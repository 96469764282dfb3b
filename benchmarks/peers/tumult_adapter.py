"""Tumult Analytics adapter (``Session`` + ``QueryBuilder`` on Spark ``local[2]``, PureDP, ``AddOneRow``).

Run by the Tumult venv's python: ``tumult_adapter.py JOB.json OUT.json`` (see ``_adapter_common``).  One Session per
run over the whole job (``PureDPBudget(inf)``: the job fixes each query's ε, evaluated with
``session.evaluate(query, PureDPBudget(ε))``; the Session's accountant adds them up), protected change
``AddOneRow()`` (add/remove one row).  Each query is ``QueryBuilder("adult").filter(<WHERE>)``, then, for a
GROUP BY, ``.groupby(KeySet.from_dict({col: declared keys}))`` (public keys, no partition selection), then
``count()``, ``sum(col, low, high)`` or ``average(col, low, high)`` with the declared bounds and
``mechanism="laplace"`` (integers: Tumult's geometric / discrete Laplace).  Tumult's average is its own (a sum and
a count with its internal split).  Not seedable.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _adapter_common import main, sql_where  # noqa: E402

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
import tmlt.analytics as ta  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

BOUNDS: dict[str, tuple[int, int]] = {}
STATE: dict[str, Any] = {}


def _setup(df: pd.DataFrame, job: dict[str, Any]) -> None:
    BOUNDS.update({c: (int(lo), int(hi)) for c, (lo, hi) in job["bounds"].items()})
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    sdf = spark.createDataFrame(df).cache()
    sdf.count()
    STATE["session"] = ta.Session.from_dataframe(
        privacy_budget=ta.PureDPBudget(float("inf")),
        source_id="adult",
        dataframe=sdf,
        protected_change=ta.AddOneRow(),
    )


def _query(q: dict[str, Any]) -> Any:
    qb = ta.QueryBuilder("adult")
    where = sql_where(q["where"])
    if where:
        qb = qb.filter(where)
    g = q.get("group")
    if g:
        qb = qb.groupby(ta.KeySet.from_dict({g["col"]: list(g["keys"])}))
    if q["agg"] == "COUNT":
        return qb.count(name="v", mechanism="laplace")
    lo, hi = BOUNDS[q["col"]]
    if q["agg"] == "SUM":
        return qb.sum(q["col"], lo, hi, name="v", mechanism="laplace")
    return qb.average(q["col"], lo, hi, name="v", mechanism="laplace")


def answer(df: pd.DataFrame, q: dict[str, Any], eps: float, rep: int) -> dict[str, float]:
    out = STATE["session"].evaluate(_query(q), ta.PureDPBudget(eps)).toPandas()
    g = q.get("group")
    if not g:
        return {q["stat_id"]: float(out["v"].iloc[0])}
    got = {str(k): float(v) for k, v in zip(out[g["col"]], out["v"])}
    return {sid: got[str(k)] for k, sid in zip(g["keys"], g["stat_ids"])}


def histogram(df: pd.DataFrame, col: str, n: int, eps: float, rep: int) -> np.ndarray:
    qb = ta.QueryBuilder("adult").groupby(ta.KeySet.from_dict({col: list(range(n))}))
    out = STATE["session"].evaluate(qb.count(name="v", mechanism="laplace"), ta.PureDPBudget(eps)).toPandas()
    h = np.zeros(n)
    h[out[col].to_numpy(dtype=int)] = out["v"].to_numpy(dtype=float)
    return h


if __name__ == "__main__":
    main(
        "tumult",
        answer,
        histogram,
        distributions=("tmlt.analytics", "tmlt.core", "pyspark"),
        accounting="sequential: Session accountant (PureDPBudget), each query evaluated at the job's ε, the ε adding "
        "up; AddOneRow (add/remove-one); Laplace (geometric on integers); GROUP BY over a KeySet of declared keys; "
        "average by Tumult's own construction",
        notes=["not seedable", "Spark local[2]"],
        setup=_setup,
    )
