"""Post-processing of a released answer: SELECT expressions, HAVING, ORDER BY, LIMIT (free of charge).

Everything here reads only the *released* (noisy) frame — the group keys, which are public declared values,
and the noisy aggregates — so by the post-processing property of differential privacy it costs nothing.
HAVING does not reduce the cost: every cell was computed, noised and charged before it filters.  Output
expressions that are a bare aggregate under parentheses or CAST keep a 95% interval (the same transformation
applied to its ends; both are monotone); other computed outputs get one from the intervals of the aggregates they
read, by a union bound and interval arithmetic (:mod:`dpmagic.query.intervals`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import sqlglot
from sqlglot import exp

from dpmagic.query.evaluate import _truth, columns_of, evaluate
from dpmagic.query.intervals import Unsupported, aggregates_read, interval_of, level_column, ratio_interval
from dpmagic.query.model import Aggregate, GroupKey, Output, Query

__all__ = ["finish", "hidden_label", "in_region", "order_rows", "selection_only", "stand_in_env"]

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
    # the region's keys are every combination of its labels (:meth:`Query.region_keys`): a row's key is one of
    # them exactly when each of its values is among its own column's region labels, so the columns are checked
    # one by one (the same set membership, without building the product of the labels)
    mask = np.full(len(df), not query.where.is_empty(), dtype=bool)
    for name, labels in zip(query.group_by, query.region_labels(), strict=True):
        keep = set(labels)
        # the NULL group (a CASE key's rows in no branch, a LEFT JOIN's unmatched rows) is None in the region and
        # may be None or NaN in the frame
        mask &= np.fromiter(
            ((None if isinstance(v, float) and math.isnan(v) else v) in keep for v in df[name].tolist()),
            dtype=bool,
            count=len(df),
        )
    if mask.all():  # every key inside (the WHERE leaves the GROUP BY columns free): no row selection to copy
        return df.reset_index(drop=True)
    return df.loc[mask].reset_index(drop=True)


def finish(query: Query, df: pd.DataFrame) -> pd.DataFrame:
    """Apply the query's post-processing to the released frame (identity for simple queries)."""
    if not query.is_postprocessed or query.outputs is None:
        return df
    n = len(df)
    env = {str(c): _column(df[c]) for c in df.columns}
    out: dict[str, object] = {}
    notes: list[str] = list(df.attrs.get("dp_notes", []))  # the release's own notes (clamped AVGs) come first
    aliases = {a.alias for a in query.aggregates}
    for o in query.outputs:
        out[o.name] = _ev(o.expr, env, n)
        if o.source is None:
            notes += _computed_interval(o, aliases, env, n, out)
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
    shown = {str(k) for k in out}
    for agg in selection_only(query):  # an aggregate used only in HAVING / ORDER BY is shown, with its interval
        if agg.alias in df.columns:
            label = hidden_label(agg)
            if label in shown:
                continue
            out[label] = env[agg.alias]
            for end in ("ci_low", "ci_high"):
                if f"{agg.alias}_{end}" in env:
                    out[f"{label}_{end}"] = env[f"{agg.alias}_{end}"]
    frame = pd.DataFrame(out)
    keep = np.ones(n, dtype=bool)
    labels = _row_labels(query, df)
    if query.having is not None:
        keep = _truth(_ev(query.having, env, n))
        notes += _having_notes(query, env, n, keep, labels)
    if query.order_by:
        # an ORDER BY key that is a shown output's expression reads that output (one draw of RAND(), as SQL does)
        by_expr = {o.expr: out[o.name] for o in query.outputs}
        keys = [np.asarray(by_expr[sql]) if sql in by_expr else _ev(sql, env, n) for sql, _ in query.order_by]
        order = order_rows(keys, [desc for _, desc in query.order_by], np.flatnonzero(keep))
    else:
        order = np.flatnonzero(keep)
    if query.limit is not None:
        if query.order_by:
            notes += _limit_notes(query, env, n, order, labels)
        order = order[: query.limit]
    result = frame.iloc[order].reset_index(drop=True)
    result.attrs["dp_notes"] = notes
    return result


def _computed_interval(
    o: Output, aliases: set[str], env: dict[str, np.ndarray], n: int, out: dict[str, object]
) -> list[str]:
    """A computed output's interval (``out[name_ci_low]``, ``out[name_ci_high]``) from the intervals of the k
    aggregates it reads at level 1 − α/k (:mod:`dpmagic.query.intervals`: union bound, interval arithmetic); the
    AVG of a linear expression as a ratio within its declared range.  Returns notes for the answer."""
    read = aggregates_read(o.expr, aliases)
    if not read:
        return []  # group keys and constants only: public, exact
    k = len(read)
    cols = {a: (level_column(a, "ci_low", k), level_column(a, "ci_high", k)) for a in read}
    if not all(c in env for pair in cols.values() for c in pair):
        return [f"{o.name}: no interval is stated (it reads an aggregate whose interval is not combined here)"]
    bases = {a: (env[lo], env[hi]) for a, (lo, hi) in cols.items()}
    tree = sqlglot.parse_one(o.expr)
    try:
        with np.errstate(all="ignore"):
            if o.bounds is not None:
                est, low, high = ratio_interval(tree, bases, env, n, o.bounds)
                out[o.name] = est
            else:
                low, high = interval_of(tree, bases, env, n)
    except Unsupported as exc:
        return [f"{o.name}: no interval is stated ({exc} is not combined by interval arithmetic)"]
    out[f"{o.name}_ci_low"], out[f"{o.name}_ci_high"] = low, high
    if o.bounds is not None and np.isnan(est).any():
        m = int(np.isnan(est).sum())
        return [
            f"{o.name}: not shown (NaN) for {m} group{'s' if m != 1 else ''}: the noisy count is too small (its "
            "interval reaches below one row), so the average would be meaningless; the interval is the whole "
            "range of the expression over the declared domain"
        ]
    return []


def selection_only(query: Query) -> list[Aggregate]:
    """The hidden aggregates (released but not selected) that HAVING or ORDER BY reads and no SELECT output
    does: the answer shows them, with their intervals, so that a selection on noisy values shows what it read."""
    if query.outputs is None:
        return []
    read: set[str] = set()
    for sql in [query.having, *(o for o, _ in query.order_by)]:
        if sql is not None:
            read |= columns_of(sqlglot.parse_one(sql))
    used: set[str] = set()
    for o in query.outputs:
        used |= columns_of(sqlglot.parse_one(o.expr))
    return [a for a in query.aggregates if a.alias in query.hidden and a.alias in read and a.alias not in used]


def hidden_label(agg: Aggregate) -> str:
    """The column an aggregate used only in HAVING / ORDER BY is shown under: its SQL, lower case (``avg(age)``)."""
    return str(agg).replace('"', "").lower()


def _row_labels(query: Query, df: pd.DataFrame) -> list[str]:
    cols = [g for g in query.group_by if g in df.columns]
    if not cols:
        return ["the answer"] * len(df)
    return ["/".join(str(v) for v in row) for row in df[cols].itertuples(index=False)]


def _corners(sql: str, env: dict[str, np.ndarray], n: int) -> tuple[list[np.ndarray], np.ndarray, list[str]] | None:
    """``sql`` evaluated at every corner of the 95% intervals of the released aggregates it reads (at most 4:
    16 corners), the rows where some interval is missing (NaN), and those aggregates' names; None when it reads no
    aggregate with an interval column."""
    tree = sqlglot.parse_one(sql)
    used = sorted(c for c in columns_of(tree) if f"{c}_ci_low" in env and f"{c}_ci_high" in env)
    if not used or len(used) > 4:
        return None
    missing = np.zeros(n, dtype=bool)
    for a in used:
        missing |= np.isnan(env[f"{a}_ci_low"].astype(float)) | np.isnan(env[f"{a}_ci_high"].astype(float))
    values = []
    for corner in itertools.product(("ci_low", "ci_high"), repeat=len(used)):
        moved = dict(env)
        for a, end in zip(used, corner, strict=True):
            moved[a] = env[f"{a}_{end}"]
        values.append(evaluate(tree, moved, n, lambda c: c.name))
    return values, missing, used


def _listing(labels: list[str], rows: np.ndarray) -> str:
    names = [labels[i] for i in rows]
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def _having_notes(query: Query, env: dict[str, np.ndarray], n: int, keep: np.ndarray, labels: list[str]) -> list[str]:
    """HAVING on noisy values: the groups whose membership the 95% intervals do not settle (the condition is
    true at some corner of the intervals and false at another), kept or left out, and those it cannot assess."""
    assert query.having is not None
    got = _corners(query.having, env, n)
    if got is None:
        return []
    values, missing, _ = got
    truths = np.array([_truth(v) for v in values])
    crosses = (truths.any(axis=0) & ~truths.all(axis=0)) & ~missing
    notes = []
    if crosses.any():
        kept, out = np.flatnonzero(crosses & keep), np.flatnonzero(crosses & ~keep)
        parts = []
        if len(kept):
            parts.append(f"kept but uncertain: {_listing(labels, kept)}")
        if len(out):
            parts.append(f"left out but uncertain: {_listing(labels, out)}")
        notes.append(
            f"HAVING is applied to noisy values: membership is uncertain for {int(crosses.sum())} group"
            f"{'s' if crosses.sum() != 1 else ''}, whose 95% intervals cross the condition ({'; '.join(parts)}); "
            "for an answer with guaranteed error rates ask a decision query (--fnr / --fpr)"
        )
    if missing.any():
        notes.append(
            f"HAVING reads a value with no stated interval for {int(missing.sum())} group"
            f"{'s' if missing.sum() != 1 else ''}: whether it belongs is not assessed"
        )
    return notes


def _limit_notes(query: Query, env: dict[str, np.ndarray], n: int, order: np.ndarray, labels: list[str]) -> list[str]:
    """ORDER BY … LIMIT on noisy values: whether the rows kept are certainly ahead of those left out (their
    intervals of the first ORDER BY key do not overlap), and whether the order among the kept rows is."""
    assert query.limit is not None
    sql, desc = query.order_by[0]
    got = _corners(sql, env, n)
    if got is None:
        return []
    values, missing, _ = got
    stack = np.array([np.asarray(v, dtype=float) for v in values])
    low, high = np.nanmin(stack, axis=0), np.nanmax(stack, axis=0)
    kept, rest = order[: query.limit], order[query.limit :]
    notes = []
    if missing[kept].any() or (len(rest) and missing[rest].any()):
        return ["ORDER BY … LIMIT reads a value with no stated interval: which rows make the cut is not assessed"]
    if len(rest) and len(kept):
        if desc:
            crossing = rest[high[rest] >= low[kept].min()]
        else:
            crossing = rest[low[rest] <= high[kept].max()]
        if len(crossing):
            notes.append(
                f"ORDER BY … LIMIT {query.limit} is applied to noisy values: the cut is uncertain — the 95% intervals "
                f"of {_listing(labels, crossing)} (left out) overlap those of the rows shown; for a guaranteed "
                "answer ask a decision query (--fnr / --fpr)"
            )
    ties = [
        (a, b) for a, b in zip(kept[:-1], kept[1:], strict=True) if not (high[b] < low[a] if desc else low[b] > high[a])
    ]
    if ties:
        pairs = ", ".join(f"{labels[a]} / {labels[b]}" for a, b in ties[:4]) + (" …" if len(ties) > 4 else "")
        notes.append(f"the order of the rows shown is uncertain where their 95% intervals overlap: {pairs}")
    return notes


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
