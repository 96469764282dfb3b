"""diffprivlib adapter (IBM diffprivlib, ``tools.count_nonzero`` / ``tools.sum`` / ``tools.histogram``).

Run by the diffprivlib venv's python: ``diffprivlib_adapter.py JOB.json OUT.json`` (see ``_adapter_common``).
diffprivlib's tools treat the length of the array they are given as public (bounded DP, replace-one neighbours):
``tools.sum`` adds noise of sensitivity ``upper - lower`` and truncates to ``[lower·n, upper·n]``; ``tools.mean``
uses sensitivity ``(upper - lower) / n``.  On a WHERE slice n is the slice's size, which is not public, so slices
are never passed: every statistic is computed over the whole table's column (n = the table's size), with rows
outside the slice zeroed (a COUNT counts the mask, a SUM sums ``value·mask`` with bounds ``[min(0, lo), max(0, hi)]``)
and AVG is that SUM over that COUNT, ε split equally (``tools.mean`` on a slice is not used: it would treat the
slice's size as public).  GROUP BY: each declared key's slice at the query's ε (parallel composition, by hand).
"""

from __future__ import annotations

import sys
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _adapter_common import main, mask  # noqa: E402
from diffprivlib import tools  # noqa: E402
from diffprivlib.accountant import BudgetAccountant  # noqa: E402

warnings.filterwarnings("ignore")
BOUNDS: dict[str, tuple[int, int]] = {}
SEED = [0]


def _seed(*parts: Any) -> int:
    return zlib.crc32("|".join(map(str, (SEED[0], *parts))).encode()) & 0x7FFFFFFF


def _setup(df: pd.DataFrame, job: dict[str, Any]) -> None:
    BOUNDS.update({c: (int(lo), int(hi)) for c, (lo, hi) in job["bounds"].items()})
    SEED[0] = int(job.get("seed", 0))


def _stat(df: pd.DataFrame, agg: str, col: str | None, m: pd.Series, eps: float, seed: int) -> float:
    acc = BudgetAccountant()  # a fresh unlimited accountant per statistic; the job fixes each ε
    ind = m.to_numpy()
    if agg == "COUNT":
        return float(tools.count_nonzero(ind, epsilon=eps, random_state=seed, accountant=acc))
    lo, hi = BOUNDS[col]
    vals = np.where(ind, np.clip(df[col].to_numpy(), lo, hi), 0)
    b = (min(0, lo), max(0, hi))
    if agg == "SUM":
        return float(tools.sum(vals, epsilon=eps, bounds=b, dtype=int, random_state=seed, accountant=acc))
    s = float(tools.sum(vals, epsilon=eps / 2, bounds=b, dtype=int, random_state=seed, accountant=acc))
    n = float(tools.count_nonzero(ind, epsilon=eps / 2, random_state=seed + 1, accountant=acc))
    return float(np.clip(s / max(n, 1.0), lo, hi))


def answer(df: pd.DataFrame, q: dict[str, Any], eps: float, rep: int) -> dict[str, float]:
    base = mask(df, q["where"])
    g = q.get("group")
    if not g:
        return {q["stat_id"]: _stat(df, q["agg"], q.get("col"), base, eps, _seed(rep, q["qid"]))}
    out = {}
    for key, sid in zip(g["keys"], g["stat_ids"]):
        out[sid] = _stat(df, q["agg"], q.get("col"), base & (df[g["col"]] == key), eps, _seed(rep, q["qid"], key))
    return out


def histogram(df: pd.DataFrame, col: str, n: int, eps: float, rep: int) -> np.ndarray:
    h, _ = tools.histogram(
        df[col].to_numpy(),
        epsilon=eps,
        bins=n,
        range=(-0.5, n - 0.5),
        random_state=_seed("hist", rep),
        accountant=BudgetAccountant(),
    )
    return np.asarray(h, dtype=float)


if __name__ == "__main__":
    main(
        "diffprivlib",
        answer,
        histogram,
        distributions=("diffprivlib", "scikit-learn"),
        accounting="sequential: the job's ε per query (diffprivlib's BudgetAccountant would add them up); "
        "replace-one neighbours over the whole table (n public), forced by the tools; integer SUM and COUNT "
        "by its truncated geometric mechanism (GeometricTruncated), AVG = SUM/COUNT at ε/2 each",
        notes=[
            "seeded (random_state from the job seed, repetition and query)",
            "tools.mean not used: on a WHERE slice it treats the slice's size as public",
        ],
        setup=_setup,
    )
