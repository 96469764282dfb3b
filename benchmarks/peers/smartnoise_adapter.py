"""SmartNoise SQL adapter (``snsql.from_df`` with metadata from the declared schema; censor_dims off, clamping on).

Run by the SmartNoise venv's python: ``smartnoise_adapter.py JOB.json OUT.json`` (see ``_adapter_common``).  Each
query is SQL over ``adult.adult`` (``row_privacy``, one row per person; int columns with the declared bounds,
``clamp_columns``; ``censor_dims`` and ``clamp_counts`` off).  snsql charges its ``Privacy.epsilon`` to every noisy
aggregate of a query (an AVG is a SUM and a COUNT: ``get_privacy_cost`` = 2ε), so each query's ``Privacy.epsilon``
is its ε divided by the cost ``get_privacy_cost`` reports at ε = 1; snsql's odometer still reports a δ ≈ 1e-15
although δ = 0 is asked.  Mechanisms: snsql's defaults (discrete Laplace for counts and integer sums).  SmartNoise
has no public keys: a GROUP BY releases the groups present in the rows (all declared keys of workload A occur in
Adult); the histogram's absent cells are read as 0, which favours SmartNoise (with censor_dims off the set of
non-empty cells is released without noise).  snsql calibrates every mechanism's scale by an OpenDP binary search on
each query; the search depends only on (ε, bounds, contribution), so the adapter memoises it (the noise is
unchanged).  Not seedable.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import snsql  # noqa: E402
from _adapter_common import main, sql_where  # noqa: E402
from snsql import Privacy  # noqa: E402
from snsql.sql._mechanisms import laplace as _lap  # noqa: E402

warnings.filterwarnings("ignore")
_SCALES: dict[tuple, float] = {}
_orig = _lap.Laplace._compute_noise_scale


def _memo_scale(self: Any) -> None:
    key = (self.mechanism, float(self.epsilon), float(self.lower), float(self.upper), float(self.max_contrib))
    if key in _SCALES and self.scale is None:
        self.scale = _SCALES[key]
        return
    _orig(self)
    _SCALES[key] = self.scale


_lap.Laplace._compute_noise_scale = _memo_scale
META: dict[str, Any] = {}
READERS: dict[float, Any] = {}
COSTS: dict[str, float] = {}
DF: list[pd.DataFrame] = []


def _setup(df: pd.DataFrame, job: dict[str, Any]) -> None:
    table: dict[str, Any] = {"row_privacy": True, "censor_dims": False, "clamp_counts": False, "clamp_columns": True}
    for c, (lo, hi) in job["bounds"].items():
        table[c] = {"type": "int", "lower": int(lo), "upper": int(hi)}
    for c in job["categories"]:
        table[c] = {"type": "string"}
    META.update({"adult": {"adult": {"adult": table}}})
    DF.append(df)


def _reader(eps: float) -> Any:
    if eps not in READERS:
        READERS[eps] = snsql.from_df(DF[0], privacy=Privacy(epsilon=eps, delta=0.0), metadata=META)
    return READERS[eps]


def _sql(q: dict[str, Any]) -> str:
    agg = "COUNT(*)" if q["agg"] == "COUNT" else f"{q['agg']}({q['col']})"
    g = q.get("group")
    sel = f"{g['col']}, {agg}" if g else agg
    where = sql_where(q["where"])
    return (
        f"SELECT {sel} FROM adult.adult" + (f" WHERE {where}" if where else "") + (f" GROUP BY {g['col']}" if g else "")
    )


def _run(sql: str, eps: float) -> list[list[Any]]:
    if sql not in COSTS:
        COSTS[sql] = float(_reader(1.0).get_privacy_cost(sql)[0])
    return _reader(eps / COSTS[sql]).execute(sql)[1:]


def answer(df: pd.DataFrame, q: dict[str, Any], eps: float, rep: int) -> dict[str, float]:
    rows = _run(_sql(q), eps)
    g = q.get("group")
    if not g:
        return {q["stat_id"]: float(rows[0][0])}
    got = {str(r[0]): float(r[1]) for r in rows}
    return {sid: got.get(str(k), 0.0) for k, sid in zip(g["keys"], g["stat_ids"])}


def histogram(df: pd.DataFrame, col: str, n: int, eps: float, rep: int) -> np.ndarray:
    rows = _run(f"SELECT {col}, COUNT(*) FROM adult.adult GROUP BY {col}", eps)
    h = np.zeros(n)
    for k, v in rows:
        h[int(k)] = float(v)
    return h


if __name__ == "__main__":
    main(
        "smartnoise",
        answer,
        histogram,
        distributions=("smartnoise-sql", "opendp"),
        accounting="sequential: each query at the job's ε (Privacy.epsilon = ε / get_privacy_cost at ε = 1: an AVG "
        "is charged 2 × Privacy.epsilon); snsql's odometer would add them up; pure ε-DP asked (delta = 0; snsql "
        "reports δ ≈ 1e-15), add/remove-one (row_privacy), discrete Laplace for counts and integer sums",
        notes=[
            "not seedable",
            "no public keys: GROUP BY releases the groups present (all present here); absent histogram cells read "
            "as 0, which favours SmartNoise",
        ],
        setup=_setup,
    )
