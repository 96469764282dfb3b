"""PipelineDP adapter (``pipeline_dp.DPEngine`` on ``LocalBackend``, public partitions, Laplace, pure ε-DP).

Run by the PipelineDP venv's python: ``pipelinedp_adapter.py JOB.json OUT.json`` (see ``_adapter_common``).  Each
query is one ``DPEngine.aggregate`` with its own ``NaiveBudgetAccountant(total_epsilon=ε, total_delta=0)``: metric
COUNT, SUM or MEAN, ``noise_kind=LAPLACE``, ``max_partitions_contributed=1``, ``max_contributions_per_partition=1``
(each row is its own privacy unit: ``contribution_bounds_already_enforced=True``, so no privacy-id extractor),
``min_value``/``max_value`` = the declared bounds, ``public_partitions`` = the declared keys (one partition ``all``
for a query without GROUP BY), so no partition selection.  The WHERE clause is a filter of the rows before the
engine (a stable transformation).  PipelineDP's MEAN is its own: a normalised (mid-point centred) sum and a count,
with its internal budget split.  Not seeded.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pipeline_dp  # noqa: E402
from _adapter_common import main, mask  # noqa: E402

BOUNDS: dict[str, tuple[int, int]] = {}
METRIC = {"COUNT": pipeline_dp.Metrics.COUNT, "SUM": pipeline_dp.Metrics.SUM, "AVG": pipeline_dp.Metrics.MEAN}
FIELD = {"COUNT": "count", "SUM": "sum", "AVG": "mean"}


def _setup(df: pd.DataFrame, job: dict[str, Any]) -> None:
    BOUNDS.update({c: (int(lo), int(hi)) for c, (lo, hi) in job["bounds"].items()})


def _aggregate(rows: list[tuple[Any, float]], agg: str, col: str | None, eps: float, parts: list[Any]) -> dict:
    acc = pipeline_dp.NaiveBudgetAccountant(total_epsilon=eps, total_delta=0)
    engine = pipeline_dp.DPEngine(acc, pipeline_dp.LocalBackend())
    lo, hi = BOUNDS[col] if col else (None, None)
    params = pipeline_dp.AggregateParams(
        metrics=[METRIC[agg]],
        noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        max_partitions_contributed=1,
        max_contributions_per_partition=1,
        min_value=lo,
        max_value=hi,
        contribution_bounds_already_enforced=True,
    )
    ext = pipeline_dp.DataExtractors(partition_extractor=lambda r: r[0], value_extractor=lambda r: r[1])
    res = engine.aggregate(rows, params, ext, public_partitions=parts)
    acc.compute_budgets()
    return {k: float(getattr(v, FIELD[agg])) for k, v in res}


def answer(df: pd.DataFrame, q: dict[str, Any], eps: float, rep: int) -> dict[str, float]:
    sub = df.loc[mask(df, q["where"])]
    col, g = q.get("col"), q.get("group")
    vals = sub[col].to_numpy(dtype=float) if col else np.zeros(len(sub))
    if not g:
        rows = [("all", v) for v in vals]
        return {q["stat_id"]: _aggregate(rows, q["agg"], col, eps, ["all"])["all"]}
    rows = list(zip(sub[g["col"]].tolist(), vals))
    got = _aggregate(rows, q["agg"], col, eps, list(g["keys"]))
    return {sid: got[k] for k, sid in zip(g["keys"], g["stat_ids"])}


def histogram(df: pd.DataFrame, col: str, n: int, eps: float, rep: int) -> np.ndarray:
    rows = [(int(v), 0.0) for v in df[col].to_numpy()]
    got = _aggregate(rows, "COUNT", None, eps, list(range(n)))
    return np.array([got[i] for i in range(n)], dtype=float)


if __name__ == "__main__":
    main(
        "pipelinedp",
        answer,
        histogram,
        distributions=("pipeline-dp", "pydp"),
        accounting="sequential: one NaiveBudgetAccountant per query at the job's ε (a shared accountant would split "
        "the total over the aggregations); pure ε-DP (total_delta = 0), Laplace, add/remove-one (one row = one "
        "privacy unit, 1 partition, 1 contribution); MEAN by PipelineDP's normalised sum and count",
        notes=["not seeded", "public partitions = declared keys"],
        setup=_setup,
    )
