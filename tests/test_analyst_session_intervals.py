"""A held-out-style check (issue 27): an analyst's 60-cell session on Adult — medians, maxima, minima, rankings,
HAVING, tiny groups, several ε — run once through the Session API (pandas backend).

* Coverage, pooled over the session: every shown cell whose exact value is defined is one trial (independent
  noise across cells and releases); the misses must stay within the 1e-6 upper quantile of Binomial(trials, 0.05),
  i.e. "5% ± sampling error" with a false-failure probability below 1e-6 for intervals that do cover at ≥ 95%.
  HAVING and ORDER BY … LIMIT show marginal intervals after a selection on noisy values; the session's thresholds
  are an analyst's, so a few of their cells are selected near the threshold (and labelled, below).
* No impossible value without a note: a negative count, a value outside the declared range, a COUNT(DISTINCT)
  above the declared categories, or a NaN (a group that may be empty) must be named in the answer's notes.
* Every uncertain selection labelled: a HAVING row whose interval reaches the threshold, or shown rows of an
  ORDER BY … LIMIT whose intervals overlap, come with a note saying the membership / order is uncertain.
* No group outside the WHERE region is shown.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import binom
from tests_support import DATA

from dpmagic import Session

BOUNDS = {"age": (17, 90), "hours-per-week": (1, 99), "capital-loss": (0, 4356), "education-num": (1, 16)}
TINY = ("Honduras", "Scotland", "Holand-Netherlands", "Hungary", "Cambodia", "Mexico")
EDU = ("Bachelors", "Masters", "Doctorate", "HS-grad")


def _order_stats(v: np.ndarray, p: float) -> list[float]:
    s = np.sort(v)
    r = p * (len(s) - 1)
    return [float(s[math.floor(r)]), float(np.percentile(s, 100 * p)), float(s[math.ceil(r)])]


AGGS: dict[str, tuple[str, Any]] = {
    "median": ("MEDIAN({c})", lambda v: _order_stats(v, 0.5) if len(v) else None),
    "p90": ("PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY {c})", lambda v: _order_stats(v, 0.9) if len(v) else None),
    "max": ("MAX({c})", lambda v: [float(v.max())] if len(v) else None),
    "min": ("MIN({c})", lambda v: [float(v.min())] if len(v) else None),
    "avg": ("AVG({c})", lambda v: [float(v.mean())] if len(v) else None),
    "count": ("COUNT(*)", lambda v: [float(len(v))]),
    "sum": ("SUM({c})", lambda v: [float(v.sum())]),
    "var": ("VAR({c})", lambda v: [float(np.var(v, ddof=1))] if len(v) > 1 else None),
    "stddev": ("STDDEV({c})", lambda v: [float(np.std(v, ddof=1))] if len(v) > 1 else None),
    "distinct": ("COUNT(DISTINCT {c})", lambda v: [float(len(np.unique(v)))]),
}


def _cells() -> list[tuple[str, str, str, tuple[str, ...] | None, str, float]]:
    """(key, aggregate, column, WHERE key IN (...) or None, tail, ε): the analyst's 60 cells."""
    cells = []
    for eps in (0.1, 0.5, 1.0, 2.0):
        cells += [
            ("education", "median", "age", EDU, "", eps),
            ("race", "max", "age", None, "", eps),
            ("native-country", "median", "age", TINY, "", eps),
            ("native-country", "max", "age", TINY, "", eps),
            ("native-country", "avg", "age", TINY, "", eps),
            ("native-country", "count", "age", TINY, "", eps),
            ("occupation", "avg", "hours-per-week", None, "ORDER BY v DESC LIMIT 3", eps),
            ("race", "avg", "age", None, "HAVING v > 38", eps),
            ("education", "count", "age", None, "HAVING v > 1000", eps),
            ("sex", "min", "age", None, "", eps),
            ("marital-status", "p90", "hours-per-week", None, "", eps),
            ("relationship", "var", "age", None, "", eps),
            ("workclass", "stddev", "hours-per-week", None, "", eps),
            ("race", "distinct", "education-num", None, "", eps),
            ("sex", "sum", "capital-loss", None, "", eps),
        ]
    assert len(cells) == 60
    return cells


def _sql(key: str, agg: str, column: str, where: tuple[str, ...] | None, tail: str) -> str:
    expr = AGGS[agg][0].format(c=f'"{column}"')
    clause = "" if where is None else f' WHERE "{key}" IN (' + ", ".join(f"'{w}'" for w in where) + ")"
    return f'SELECT "{key}", {expr} AS v FROM adult{clause} GROUP BY "{key}" {tail}'.strip()


def test_an_analysts_session_tells_the_truth_about_its_uncertainty() -> None:
    df = pd.read_csv(DATA / "adult.csv")
    s = Session(df, DATA / "adult.schema.json", budget=1e6, bound="sequential")
    trials = misses = 0
    for key, agg, column, where, tail, eps in _cells():
        sql = _sql(key, agg, column, where, tail)
        r = s.query(sql, epsilon=eps)
        out, notes = r.df, " ".join(r.notes)
        if where is not None:
            assert set(out[key]) <= set(where), sql
        lo, hi = BOUNDS[column]
        for _, row in out.iterrows():
            v, low, high = row["v"], row["v_ci_low"], row["v_ci_high"]
            assert low <= high, (sql, row.to_dict())
            # an impossible value is named in the notes
            if math.isnan(v):
                assert "v: not shown (NaN)" in notes, (sql, r.notes)
            elif agg == "count" and v < 0:
                assert "v: negative" in notes, (sql, r.notes)
            elif agg in ("median", "p90", "max", "min", "avg"):
                assert lo <= v <= hi, (sql, v)
            elif agg == "distinct":
                assert 0 <= v <= hi - lo + 1, (sql, v)
            exact = AGGS[agg][1](df.loc[df[key] == row[key], column].to_numpy(dtype=float))
            if exact is None:
                continue
            trials += 1
            misses += not all(low <= e <= high for e in exact)
        # every uncertain selection is labelled
        if tail.startswith("HAVING"):
            threshold = float(tail.split(">")[1])
            if (out["v_ci_low"] <= threshold).any():
                assert "membership is uncertain" in notes, (sql, r.notes)
        if tail.startswith("ORDER BY") and len(out) > 1:
            lows, highs = out["v_ci_low"].to_numpy(), out["v_ci_high"].to_numpy()
            if any(lows[i] <= highs[i + 1] for i in range(len(out) - 1)):
                assert "uncertain" in notes, (sql, r.notes)
    print(f"{trials} cells with an exact value, {misses} missed")
    assert trials >= 300
    assert misses <= binom.isf(1e-6, trials, 0.05), (misses, trials)
