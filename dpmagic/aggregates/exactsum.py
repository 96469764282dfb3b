"""Exact sums: per cell in numpy (:func:`exact_cell_sums`) and in SQL (:func:`exact_sum`, :func:`combine`).

Both split 64-bit values into limbs whose per-cell sums stay exact (below 2⁵³ in a float64 ``bincount``, below
2⁶³ in an engine's BIGINT SUM) and recombine them in Python ints, exact for 2³² rows × 2⁶³.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlglot import exp

from dpmagic.aggregates.sqlexpr import UNBOUNDED, lit
from dpmagic.noise.calibration import MAX_ROWS

__all__ = ["LIMB_SHIFTS", "combine", "exact_cell_sums", "exact_sum"]

assert MAX_ROWS <= 2**32, "exact_sum's limb widths assume at most 2^32 rows"

#: the limb shifts of an exact BIGINT sum on engines without a native 128-bit SUM, by the number of limbs
LIMB_SHIFTS: dict[int, tuple[int, ...]] = {1: (0,), 2: (0, 30), 3: (0, 21, 42)}


def _limb(x: exp.Expr, shift: int, width: int | None) -> exp.Expr:
    """``(x >> shift) & (2^width - 1)`` (``width`` None: the arithmetic shift alone, the signed top limb)."""
    y = x.copy() if shift == 0 else exp.paren(exp.BitwiseRightShift(this=x.copy(), expression=lit(shift)))
    return y if width is None else exp.BitwiseAnd(this=y, expression=lit((1 << width) - 1))


def exact_sum(x: exp.Expr, dialect: str, bound: int = UNBOUNDED) -> list[exp.Expr]:
    """The exact Σ of a BIGINT per-row value, as the aggregates whose values recombine into it (:func:`combine`).

    DuckDB sums BIGINT into a HUGEINT (int128) natively: one aggregate.  Other engines (Spark, whose
    DECIMAL(38, 0) aggregation costs twice a BIGINT one) sum BIGINT limbs of the value's two's complement, as few
    as its proven bound ``|v| ≤ bound`` allows, every limb's sum over at most 2³² rows
    (:data:`~dpmagic.noise.calibration.MAX_ROWS`, refused beyond at binding) staying inside BIGINT (< 2⁶³):

    * ``bound < 2³¹``: the value itself (|Σ| < 2³²·2³¹);
    * ``bound < 2⁶⁰``: v = h·2³⁰ + l with 0 ≤ l < 2³⁰ and |h| ≤ 2³⁰ (sums < 2⁶²);
    * otherwise v = h·2⁴² + m·2²¹ + l with 0 ≤ l, m < 2²¹ and |h| ≤ 2²¹ (sums < 2⁵³).

    The kernel recombines them exactly in Python ints (as :func:`dpmagic.aggregates.common.exact_cell_sums`)."""
    b = abs(int(bound))
    if dialect == "duckdb" or b < 1 << 31:
        return [exp.Sum(this=x)]
    if b < 1 << 60:
        return [exp.Sum(this=_limb(x, 0, 30)), exp.Sum(this=_limb(x, 30, None))]
    return [exp.Sum(this=_limb(x, 0, 21)), exp.Sum(this=_limb(x, 21, 21)), exp.Sum(this=_limb(x, 42, None))]


def combine(parts: Sequence[Any]) -> int:
    """The exact sum from the values of :func:`exact_sum`'s aggregates (one sum, or its limbs' sums)."""
    return sum(int(v or 0) << s for v, s in zip(parts, LIMB_SHIFTS[len(parts)], strict=True))


def exact_cell_sums(cell: np.ndarray, values: np.ndarray, n_bins: int, bound: int | None = None) -> list[int]:
    """Exact Σ of int64 ``values`` per bin of ``cell`` (vectorised, no overflow, at most 2³² rows).

    Each value is split into three 21-bit limbs of its two's complement, v = h·2⁴² + m·2²¹ + l with
    0 ≤ l, m < 2²¹ and |h| ≤ 2²¹; each limb is summed per bin with a float64 ``bincount``, exact because every
    partial sum is an integer below 2³²·2²¹ = 2⁵³.  O(rows + bins).

    ``bound``: a public bound of |v| (from the column's declared or clamped bounds).  When rows × bound < 2⁵³
    (most columns: Adult's largest, 99,999 × 32,561 rows, is below 2³²) every partial sum of the values themselves
    is such an integer, so one ``bincount`` of the values is exact and the limbs are skipped (issue 28).  The
    choice depends on the schema and the table's size only, never on the values (docs/threat-model.md); the values
    are checked against ``bound`` all the same, and one beyond it (impossible for validated data) takes the limbs.
    """
    v = np.asarray(values, dtype=np.int64)
    if bound is not None and len(v) > 0 and int(bound) * len(v) < 1 << 53:
        b = np.int64(bound)
        if bool(((v >= -b) & (v <= b)).all()):
            sums = np.bincount(cell, weights=v.astype(np.float64), minlength=n_bins)[:n_bins]
            return [int(a) for a in sums]
    mask = np.int64(0x1FFFFF)
    limbs = (v & mask, (v >> 21) & mask, v >> 42)
    lo, mid, hi = (np.bincount(cell, weights=w.astype(np.float64), minlength=n_bins)[:n_bins] for w in limbs)
    return [int(a) + (int(b) << 21) + (int(c) << 42) for a, b, c in zip(lo, mid, hi)]
