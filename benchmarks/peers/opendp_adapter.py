"""OpenDP adapter (``opendp.prelude``: measurement constructors, pure ε-DP, add/remove-one).

Run by the OpenDP venv's python: ``opendp_adapter.py JOB.json OUT.json`` (see ``_adapter_common``).  Each statistic
is a chain over the slice's column with the symmetric distance (add/remove one row): COUNT ``make_count >>
then_laplace(1/ε)``; SUM ``make_clamp(declared bounds) >> then_sum >> then_laplace(max(|lo|, |hi|)/ε)`` (integers:
discrete Laplace); AVG = that SUM over that COUNT at ε/2 each (OpenDP's ``make_mean`` needs a known size, i.e.
bounded DP).  A GROUP BY COUNT is ``make_count_by_categories`` over the declared keys (one measurement); a GROUP BY
SUM/AVG is one chain per declared key's slice at the query's ε (parallel composition argued by hand, OpenDP's
partition combinators not used).  Every measurement's ``map(1)`` is checked to be ≤ its ε.  Not seedable.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import opendp.prelude as dp  # noqa: E402
from _adapter_common import main, mask  # noqa: E402

dp.enable_features("contrib")
BOUNDS: dict[str, tuple[int, int]] = {}
INT = dp.vector_domain(dp.atom_domain(T="i64"))  # 64-bit: the capital-gain sums exceed 2^31
STR = dp.vector_domain(dp.atom_domain(T=str))
SD = dp.symmetric_distance()
_CACHE: dict[tuple, Any] = {}


def _checked(meas: Any, eps: float) -> Any:
    if meas.map(1) > eps * (1 + 1e-9):
        raise RuntimeError(f"OpenDP measurement costs {meas.map(1)} > {eps}")
    return meas


def _count(eps: float) -> Any:
    key = ("count", eps)
    if key not in _CACHE:
        _CACHE[key] = _checked(dp.t.make_count(INT, SD) >> dp.m.then_laplace(scale=1.0 / eps), eps)
    return _CACHE[key]


def _sum(col: str, eps: float) -> Any:
    key = ("sum", col, eps)
    if key not in _CACHE:
        lo, hi = BOUNDS[col]
        sens = max(abs(lo), abs(hi))
        chain = dp.t.make_clamp(INT, SD, bounds=(lo, hi)) >> dp.t.then_sum() >> dp.m.then_laplace(scale=sens / eps)
        _CACHE[key] = _checked(chain, eps)
    return _CACHE[key]


def _setup(df: pd.DataFrame, job: dict[str, Any]) -> None:
    BOUNDS.update({c: (int(lo), int(hi)) for c, (lo, hi) in job["bounds"].items()})


def _stat(df: pd.DataFrame, agg: str, col: str | None, m: pd.Series, eps: float) -> float:
    if agg == "COUNT":
        return float(_count(eps)(np.zeros(int(m.sum()), dtype=np.int64)))
    vals = df.loc[m, col].to_numpy(dtype=np.int64, copy=True)
    if agg == "SUM":
        return float(_sum(col, eps)(vals))
    lo, hi = BOUNDS[col]
    s = float(_sum(col, eps / 2)(vals))
    n = float(_count(eps / 2)(vals))
    return float(np.clip(s / max(n, 1.0), lo, hi))


def answer(df: pd.DataFrame, q: dict[str, Any], eps: float, rep: int) -> dict[str, float]:
    base = mask(df, q["where"])
    g = q.get("group")
    if not g:
        return {q["stat_id"]: _stat(df, q["agg"], q.get("col"), base, eps)}
    if q["agg"] == "COUNT":
        keys = [str(k) for k in g["keys"]]
        meas = _checked(
            dp.t.make_count_by_categories(STR, SD, categories=keys, null_category=False)
            >> dp.m.then_laplace(scale=1.0 / eps),
            eps,
        )
        noisy = meas([str(v) for v in df.loc[base, g["col"]].to_numpy()])
        return dict(zip(g["stat_ids"], map(float, noisy)))
    return {
        sid: _stat(df, q["agg"], q.get("col"), base & (df[g["col"]] == key), eps)
        for key, sid in zip(g["keys"], g["stat_ids"])
    }


def histogram(df: pd.DataFrame, col: str, n: int, eps: float, rep: int) -> np.ndarray:
    meas = _checked(
        dp.t.make_count_by_categories(INT, SD, categories=list(range(n)), null_category=False)
        >> dp.m.then_laplace(scale=1.0 / eps),
        eps,
    )
    return np.asarray(meas(df[col].to_numpy(dtype=np.int64, copy=True)), dtype=float)


if __name__ == "__main__":
    main(
        "opendp",
        answer,
        histogram,
        distributions=("opendp",),
        accounting="sequential: the job's ε per query (each measurement's map(1) checked ≤ its ε; OpenDP would "
        "compose them with make_sequential_composition, ε adding up); pure ε-DP, add/remove-one (symmetric "
        "distance), discrete Laplace on integers; AVG = SUM/COUNT at ε/2 each",
        notes=["not seedable", "GROUP BY SUM/AVG: one chain per declared key (parallel composition by hand)"],
        setup=_setup,
    )
