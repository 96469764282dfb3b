"""Engine-neutral SQL expression pieces (sqlglot trees), shared by the compiler (:mod:`dpmagic.backends.compiler`)
and the aggregate units' SQL inputs (:meth:`dpmagic.aggregates.registry.AggregateUnit.sql`).

They live below the backends because a unit declares the per-row values and aggregates it needs from an engine
(the import contract lets :mod:`dpmagic.backends` import :mod:`dpmagic.aggregates`, not the reverse).  Literals
are built from the schema and the parsed query, never from text pasted by the analyst: strings quoted by sqlglot,
ints exact, floats as ``CAST('<repr>' AS DOUBLE)``, which every engine parses to the same double.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlglot import exp

__all__ = [
    "UNBOUNDED",
    "Quantised",
    "and_",
    "as_double",
    "case",
    "clip",
    "col",
    "count_if",
    "double_bounds",
    "lit",
    "or_",
    "quantise_sql",
    "rint",
]

#: the per-row bound used when none is known (any BIGINT)
UNBOUNDED = 1 << 63


def col(name: str) -> exp.Column:
    return exp.column(exp.to_identifier(name, quoted=True))


def lit(v: Any) -> exp.Expr:
    """A literal: strings quoted by sqlglot, ints exact, floats as CAST('<repr>' AS DOUBLE) (exact round trip)."""
    if isinstance(v, str):
        return exp.Literal.string(v)
    if isinstance(v, (bool, np.bool_)):
        raise TypeError("boolean literals are not domain values")
    if isinstance(v, (int, np.integer)):
        return exp.Literal.number(int(v))
    f = float(v)
    if not math.isfinite(f):
        raise ValueError(f"non-finite literal {f!r}")
    return exp.cast(exp.Literal.string(repr(f)), "DOUBLE")


def and_(parts: Sequence[exp.Expr]) -> exp.Expr:
    parts = list(parts)
    if not parts:
        return exp.true()
    out = parts[0]
    for p in parts[1:]:
        out = exp.And(this=out, expression=p)
    return exp.paren(out) if len(parts) > 1 else out


def or_(parts: Sequence[exp.Expr]) -> exp.Expr:
    parts = list(parts)
    if not parts:
        return exp.false()
    out = parts[0]
    for p in parts[1:]:
        out = exp.Or(this=out, expression=p)
    return exp.paren(out) if len(parts) > 1 else out


def case(whens: Sequence[tuple[exp.Expr, exp.Expr]], default: exp.Expr) -> exp.Expr:
    c = exp.Case()
    for cond, then in whens:
        c = c.when(cond, then)
    return c.else_(default)


def clip(x: exp.Expr, lo: Any, hi: Any) -> exp.Expr:
    """``np.clip(x, lo, hi)`` as a CASE (no NULL or NaN reaches it: validated data; a CASE rather than
    GREATEST / LEAST, which some dialects wrap in NULL guards)."""
    return case(
        [(exp.LT(this=x, expression=lit(lo)), lit(lo)), (exp.GT(this=x.copy(), expression=lit(hi)), lit(hi))],
        x.copy(),
    )


def as_double(x: exp.Expr) -> exp.Expr:
    return exp.cast(x, "DOUBLE")


def double_bounds(lo: int, hi: int) -> tuple[float, float]:
    """The smallest double ≥ ``lo`` and the largest double ≤ ``hi`` (both whole numbers): for any double (or
    float) ``x``, ``x < lo`` exactly iff ``x < lo_d``, and ``x > hi`` iff ``x > hi_d``.  The engines compare a
    floating-point column with an integer bound in floating point, which rounds a bound beyond 2⁵³ (2⁵³ + 3 to
    2⁵³ + 4), so an integer column read from doubles is checked and clamped against these instead; and every
    double in [lo_d, hi_d] converts to BIGINT without overflow (float(2⁶³ − 1) is 2⁶³)."""
    lo_d, hi_d = float(lo), float(hi)
    if int(lo_d) < lo:
        lo_d = math.nextafter(lo_d, math.inf)
    if int(hi_d) > hi:
        hi_d = math.nextafter(hi_d, -math.inf)
    return lo_d, hi_d


@dataclass(frozen=True)
class Quantised:
    """A per-row value to be quantised: ``y`` = clip(x, lo, hi) / unit (a double), rounded by :func:`rint` in a
    later projection of :meth:`Compiler.rows` (so that ``y`` is computed once per row).  ``bound``: a proven
    bound of the rounded value's magnitude (``unit`` is a power of two, so ``|y| ≤ max(|lo|, |hi|) / unit``
    exactly, and rounding adds at most one)."""

    y: exp.Expr
    bound: int


def rint(y: exp.Expr, r: exp.Expr) -> exp.Expr:
    """numpy's ``rint`` (round half to even) of the double ``y`` as BIGINT, given r = CAST(FLOOR(y) AS BIGINT),
    in IEEE arithmetic every engine does alike: d = y − r is exact; r + 1 when d > ½, or d = ½ and r is odd."""
    d = exp.paren(exp.Sub(this=y, expression=as_double(r.copy())))
    half = lit(0.5)
    odd = exp.NEQ(this=exp.Mod(this=r.copy(), expression=lit(2)), expression=lit(0))
    up = exp.Or(
        this=exp.GT(this=d, expression=half),
        expression=exp.paren(exp.And(this=exp.EQ(this=d.copy(), expression=half.copy()), expression=odd)),
    )
    return exp.Add(this=r.copy(), expression=case([(up, lit(1))], lit(0)))


def quantise_sql(x: exp.Expr, unit: float, lo: float, hi: float) -> Quantised:
    """:func:`dpmagic.noise.calibration.quantise` of one row: rint(clip(x, lo, hi) / unit) (``unit`` a power of two)."""
    y = exp.Div(this=exp.paren(clip(as_double(x), float(lo), float(hi))), expression=lit(float(unit)))
    m = max(abs(float(lo)), abs(float(hi))) / float(unit)
    return Quantised(y, int(math.ceil(m)) + 1 if math.isfinite(m) else UNBOUNDED)


def count_if(cond: exp.Expr) -> exp.Expr:
    return exp.Sum(this=case([(cond, lit(1))], lit(0)))
