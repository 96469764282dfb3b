"""Free post-processing of released answers: it reads only the noisy values and public information.

Everything here is a function of the released (noised) values and of the declared schema — never of the
rows — so by the post-processing property of differential privacy (Dwork & Roth, *The Algorithmic
Foundations of Differential Privacy*, Found. Trends Theor. Comput. Sci. 9(3–4), 2014, Prop. 2.1) it costs
nothing and needs no charge.

* :func:`ratio_estimate` — the AVG of a cell from its noisy SUM and noisy COUNT.  When the count's 95%
  interval reaches below one row (the group may be empty, or is too small for the ratio to mean anything)
  the point estimate is ``NaN`` and the interval is the whole declared range; an interval that clamping
  would collapse to zero width is widened back to the declared range (a noisy value never gets a
  zero-width interval).
* :func:`answer_notes` — one plain-language line per thing the analyst should know about an answer
  (an AVG, quantile, MIN or MAX not shown because its group may be empty, a negative count, …).
* :func:`tidy` — optional, switched on by the analyst: counts as whole numbers, non-negative counts, SUMs
  and AVGs clipped into what the declared bounds allow (their intervals intersected with the same set, which
  keeps their coverage).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from dpmagic.aggregates.basic import ratio_estimate  # the AVG unit's interval; re-exported here
from dpmagic.domain.schema import NumericColumn, Schema
from dpmagic.query.derived import with_derived
from dpmagic.query.model import Query

__all__ = ["ratio_estimate", "answer_notes", "check_postprocess", "tidy", "POSTPROCESS_OPTIONS"]

#: The switches :func:`tidy` understands (``%config DPMagic.postprocess = "integer,nonnegative"``).
POSTPROCESS_OPTIONS = ("integer", "nonnegative")


def _avg_columns(query: Query) -> list[str]:
    return [a.alias for a in query.aggregates if a.func == "avg"]


def answer_notes(query: Query, df: pd.DataFrame) -> list[str]:
    """Plain-language notes on a released answer, computed from the released values only (free)."""
    notes: list[str] = list(query.notes)  # how the parser read a part that could be misread
    if query.is_empty:
        notes.append(
            "the WHERE clause matches no row of the declared domain: every true value is 0 (or undefined for "
            "AVG); the answer is pure noise"
        )
    groups = [g for g in query.group_by if g in df.columns]

    def where(mask: pd.Series) -> str:
        if not groups:
            return ""
        keys = df.loc[mask, groups].astype(str).agg("/".join, axis=1).tolist()
        shown = ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
        return f" ({shown})"

    for alias in _avg_columns(query):
        if alias not in df.columns:
            continue
        nan = df[alias].isna()
        if nan.any():
            n = int(nan.sum())
            notes.append(
                f"{alias}: not shown (NaN) for {n} group{'s' if n != 1 else ''}{where(nan)}: the noisy count "
                "is too small (its 95% interval reaches below one row), so the average would be meaningless; "
                "the interval is the whole declared range"
            )
    for agg in query.aggregates:
        if agg.func != "count" or agg.alias not in df.columns:
            continue
        neg = df[agg.alias] < 0
        if neg.any():
            n = int(neg.sum())
            notes.append(
                f"{agg.alias}: negative in {n} group{'s' if n != 1 else ''}{where(neg)} — noise on a small or "
                "empty group; switch on free post-processing with --nonneg (or %config DPMagic.postprocess)"
            )
    for agg in query.aggregates:
        if agg.func != "quantile" or agg.alias not in df.columns:
            continue
        nan = df[agg.alias].isna()
        if nan.any():
            n = int(nan.sum())
            notes.append(
                f"{agg.alias}: not shown (NaN) for {n} group{'s' if n != 1 else ''}{where(nan)}: the noisy "
                "histogram behind its interval cannot rule out that the group is empty, and a quantile, MIN or MAX "
                "of no row is undefined; the interval is the whole declared range"
            )
    notes.extend(df.attrs.get("dp_notes", []))  # HAVING / ORDER BY … LIMIT on noisy values (outputs.finish)
    return notes


def check_postprocess(options: Iterable[str]) -> set[str]:
    """The post-processing options as a set; :class:`~dpmagic.errors.ConfigurationError` naming any unknown one
    (a session checks them before it charges anything)."""
    opts = set(options)
    unknown = opts - set(POSTPROCESS_OPTIONS)
    if unknown:
        from dpmagic.errors import ConfigurationError

        raise ConfigurationError(
            f"unknown post-processing {sorted(unknown)!r}: choose from {', '.join(POSTPROCESS_OPTIONS)}"
        )
    return opts


def tidy(df: pd.DataFrame, query: Query, schema: Schema, options: Iterable[str]) -> pd.DataFrame:
    """Free, optional post-processing of a released answer (never touches the rows).

    ``integer``: counts (and their intervals) rounded to whole numbers — the interval outwards.
    ``nonnegative``: counts clipped at 0, SUMs of a column with a non-negative lower bound clipped at 0, and
    every interval intersected with the same set (the true value is in it, so coverage is kept).
    Without options ``df`` itself is returned (nothing to do: no copy).
    """
    opts = check_postprocess(options)
    if not opts:
        return df
    out = df.copy()
    for agg in query.aggregates:
        a = agg.alias
        if a not in out.columns:
            continue
        cols = [a, f"{a}_ci_low", f"{a}_ci_high"]
        cols = [c for c in cols if c in out.columns]
        floor: float | None = None
        if agg.func in ("count", "count_distinct"):
            floor = 0.0
        elif agg.func == "sum" and agg.column is not None:
            col = with_derived(schema, query)[agg.column]
            if isinstance(col, NumericColumn) and float(col.lower) >= 0:
                floor = 0.0
        if "nonnegative" in opts and floor is not None:
            for c in cols:
                out[c] = out[c].clip(lower=floor)
        if "integer" in opts and agg.func in ("count", "count_distinct"):
            out[a] = np.round(out[a].to_numpy(dtype=float))
            if f"{a}_ci_low" in out.columns:
                out[f"{a}_ci_low"] = np.floor(out[f"{a}_ci_low"].to_numpy(dtype=float))
                out[f"{a}_ci_high"] = np.ceil(out[f"{a}_ci_high"].to_numpy(dtype=float))
            for c in cols:
                out[c] = out[c].astype("int64")
    return out
