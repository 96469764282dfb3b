"""Shared plumbing of the peer adapters (run by each peer's own virtual environment, never by dpmagic's).

An adapter is ``<venv>/bin/python benchmarks/peers/<tool>_adapter.py JOB.json OUT.json``.  The job (written by
``benchmarks/bench_peers.py``) names a prepared CSV (public column renames and public binnings already applied),
the declared bounds and categories (from the schema, never the rows), the two sessions of workload A (queries with
their ε) and the histogram of workload B.  The adapter answers every query ``reps`` times with the tool's own
mechanisms and writes the noisy answers as JSON: ``{"answers": {session: {stat_id: [values]}}, "histogram":
[[counts]], "versions": {...}, "notes": [...], "seconds": {...}}``.  Only pandas, numpy and the peer are imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

Query = dict[str, Any]
#: answer(df, query, epsilon, rep) -> {stat_id: noisy value}
Answer = Callable[[pd.DataFrame, Query, float, int], dict[str, float]]
#: histogram(df, column, n, epsilon, rep) -> n noisy counts (cells 0..n-1)
Histogram = Callable[[pd.DataFrame, str, int, float, int], np.ndarray]


def mask(df: pd.DataFrame, where: list[list[Any]]) -> pd.Series:
    """The rows satisfying a conjunction of ``["eq", col, v]``, ``["between", col, lo, hi]``, ``["ge", col, v]``."""
    m = pd.Series(True, index=df.index)
    for p in where:
        op, col = p[0], p[1]
        if op == "eq":
            m &= df[col] == p[2]
        elif op == "between":
            m &= (df[col] >= p[2]) & (df[col] <= p[3])
        elif op == "ge":
            m &= df[col] >= p[2]
        else:
            raise ValueError(f"unknown predicate {p!r}")
    return m


def sql_where(where: list[list[Any]]) -> str:
    """The predicates as a SQL condition (column names are plain identifiers after the job's renames)."""
    parts = []
    for p in where:
        op, col = p[0], p[1]
        if op == "eq":
            parts.append(f"{col} = '{p[2]}'" if isinstance(p[2], str) else f"{col} = {p[2]}")
        elif op == "between":
            parts.append(f"{col} >= {p[2]} AND {col} <= {p[3]}")
        elif op == "ge":
            parts.append(f"{col} >= {p[2]}")
    return " AND ".join(parts)


def pip_versions(names: tuple[str, ...]) -> dict[str, str]:
    """The venv's ``pip freeze`` lines of the named distributions (and numpy, pandas)."""
    out = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True, text=True, check=False).stdout
    want = {n.lower().replace("_", "-") for n in (*names, "numpy", "pandas")}
    res: dict[str, str] = {}
    for line in out.splitlines():
        if "==" in line:
            name, ver = line.split("==", 1)
            if name.lower().replace("_", "-") in want:
                res[name] = ver
    return res


def main(
    tool: str,
    answer: Answer,
    histogram: Histogram,
    *,
    distributions: tuple[str, ...],
    accounting: str,
    notes: list[str],
    setup: Callable[[pd.DataFrame, dict[str, Any]], None] | None = None,
) -> None:
    """Read the job, answer every session ``reps`` times and the histogram ``hist_reps`` times, write the result."""
    job_path, out_path = sys.argv[1], sys.argv[2]
    with open(job_path) as f:
        job = json.load(f)
    df = pd.read_csv(job["data"])
    t0 = time.perf_counter()
    if setup is not None:
        setup(df, job)
    seconds: dict[str, float] = {"setup": time.perf_counter() - t0}
    answers: dict[str, dict[str, list[float]]] = {}
    for name, queries in job["sessions"].items():
        t = time.perf_counter()
        got: dict[str, list[float]] = {}
        for rep in range(int(job["reps"])):
            for q in queries:
                for sid, v in answer(df, q, float(q["epsilon"]), rep).items():
                    got.setdefault(sid, []).append(float(v))
        answers[name] = got
        seconds[name] = time.perf_counter() - t
    hist: list[list[float]] = []
    h = job.get("histogram")
    if h:
        t = time.perf_counter()
        for rep in range(int(h["reps"])):
            hist.append([float(x) for x in histogram(df, h["col"], int(h["n"]), float(h["epsilon"]), rep)])
        seconds["histogram"] = time.perf_counter() - t
    out = {
        "tool": tool,
        "versions": pip_versions(distributions),
        "accounting": accounting,
        "notes": notes,
        "answers": answers,
        "histogram": hist,
        "seconds": seconds,
    }
    with open(out_path, "w") as f:
        json.dump(out, f)
