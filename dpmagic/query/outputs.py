"""Post-processing of a released answer: SELECT expressions, HAVING, ORDER BY, LIMIT (free of charge).

Everything here reads only the *released* (noisy) frame — the group keys, which are public declared values,
and the noisy aggregates — so by the post-processing property of differential privacy it costs nothing.
HAVING does not reduce the cost: every cell was computed, noised and charged before it filters.  Output
expressions that are a bare aggregate under parentheses or CAST keep a 95% interval (the same transformation
applied to its ends; both are monotone); other computed outputs have none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import sqlglot
from sqlglot import exp

from dpmagic.query.evaluate import _truth, evaluate
from dpmagic.query.model import GroupKey, Query

__all__ = ["finish", "in_region", "order_rows", "stand_in_env"]

#: values a released aggregate column may hold: noisy values of either sign, 0, a fraction, an empty cell's NaN
#: average, an interval end clipped to ±inf (the stand-in frame of :func:`stand_in_env`)
STAND_IN_VALUES = (1.0, 0.0, -2.5, 1e6 + 0.5, math.nan, math.inf, -math.inf)


def _ev(sql: str, env: dict[str, np.ndarray], n: int) -> np.ndarray:
    return evaluate(sqlglot.parse_one(sql), env, n, lambda c: c.name)


def in_region(query: Query, df: pd.DataFrame) -> pd.DataFrame:
    """The rows of a released frame whose GROUP BY key lies inside the query's WHERE region
    (:meth:`Query.region_keys`: public, from the query and the schema).  A key outside it holds no row by the
    analyst's own WHERE clause, so showing its noise would show noise as a finding (issue 27); dropping it is
    post-processing and changes nothing of the cost.  Identity without GROUP BY."""
    if not query.groups:
        return df
    keep = set(query.region_keys())
    cols = list(query.group_by)
    mask = [tuple(row) in keep for row in df[cols].itertuples(index=False)]
    return df.loc[mask].reset_index(drop=True)


def finish(query: Query, df: pd.DataFrame) -> pd.DataFrame:
    """Apply the query's post-processing to the released frame (identity for simple queries)."""
    if not query.is_postprocessed or query.outputs is None:
        return df
    n = len(df)
    env = {str(c): _column(df[c]) for c in df.columns}
    out: dict[str, object] = {}
    for o in query.outputs:
        out[o.name] = _ev(o.expr, env, n)
        if o.source is not None and f"{o.source}_ci_low" in df.columns:
            tree = sqlglot.parse_one(o.expr)
            for end in ("ci_low", "ci_high"):
                moved = tree.transform(
                    lambda e, end=end, src=o.source: (
                        exp.column(exp.to_identifier(f"{src}_{end}", quoted=True))
                        if isinstance(e, exp.Column) and e.name == src
                        else e
                    )
                )
                out[f"{o.name}_{end}"] = evaluate(moved, env, n, lambda c: c.name)
    frame = pd.DataFrame(out)
    keep = np.ones(n, dtype=bool)
    if query.having is not None:
        keep = _truth(_ev(query.having, env, n))
    if query.order_by:
        keys = [_ev(sql, env, n) for sql, _ in query.order_by]
        order = order_rows(keys, [desc for _, desc in query.order_by], np.flatnonzero(keep))
    else:
        order = np.flatnonzero(keep)
    if query.limit is not None:
        order = order[: query.limit]
    return frame.iloc[order].reset_index(drop=True)


def order_rows(keys: Sequence[np.ndarray], descending: Sequence[bool], positions: np.ndarray) -> np.ndarray:
    """ORDER BY: ``positions`` (rows of the released frame) sorted by ``keys`` (stable, NULLs last)."""
    sort = pd.DataFrame({f"k{i}": np.asarray(k)[positions] for i, k in enumerate(keys)})
    sort["__pos"] = positions
    return sort.sort_values(
        [f"k{i}" for i in range(len(keys))],
        ascending=[not d for d in descending],
        kind="stable",
        na_position="last",
    )["__pos"].to_numpy()


def stand_in_env(names: Sequence[str], groups: Sequence[GroupKey]) -> tuple[dict[str, np.ndarray], int]:
    """A stand-in for the released frame's columns ``names``, built from public information only.

    A group key's column holds its declared labels (every one, typed as :func:`finish` types the released
    frame's column); any other column is a released aggregate (or an interval end) and holds
    :data:`STAND_IN_VALUES`.  Each column is repeated to a common length ``n``; returns ``(env, n)``.  Used to
    refuse, before any charge, post-processing that could not be evaluated on a released answer.
    """
    by_name = {g.name: list(g.labels) for g in groups}
    cols = {c: by_name.get(c, list(STAND_IN_VALUES)) for c in names}
    n = max([len(STAND_IN_VALUES)] + [len(v) for v in cols.values()])
    env = {}
    for c, vals in cols.items():
        rep = [vals[i % len(vals)] for i in range(n)] if vals else [None] * n
        env[c] = _column(pd.Series(rep)) if c in by_name else np.array(rep, dtype=float)
    return env, n


def _column(s: pd.Series) -> np.ndarray:
    a = s.to_numpy()
    if a.dtype.kind == "O":
        vals = a.tolist()
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in vals):
            return np.array(vals, dtype=np.int64)
        if all(isinstance(v, (int, float, np.integer, np.floating)) or v is None for v in vals) and any(
            v is not None for v in vals
        ):
            return np.array([np.nan if v is None else v for v in vals], dtype=float)
    return a
