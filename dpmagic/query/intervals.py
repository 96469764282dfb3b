"""Honest intervals for computed outputs: arithmetic on released aggregates (``SUM(a + b)``, ``SUM(x) / COUNT(*)``,
``AVG(a + 0.5 * b)``, ``100.0 * COUNT(*) / …``), by a union bound and interval arithmetic.

A computed output ``f(A₁, …, A_k)`` reads k distinct released aggregates.  Each Aᵢ's interval is taken at level
1 − α/k (α = 1 − the answer's level, 0.05 for a 95% answer): post-processing of the noisy value and its public
noise scale, computed by the aggregate's own unit (:meth:`dpmagic.aggregates.basic.BasicUnit.answer`).

**Coverage.**  Let Eᵢ be the event that Aᵢ's true value lies in its 1 − α/k interval Iᵢ; P(not Eᵢ) ≤ α/k, so by
the union bound (Boole's inequality) P(E₁ ∧ … ∧ E_k) ≥ 1 − α, whatever the dependence between the releases (two
aggregates may even share a release).  On that event the true vector (a₁, …, a_k) lies in the box I₁ × … × I_k,
so f(a₁, …, a_k) lies in the range of f over the box.  Interval arithmetic (Moore, Kearfott & Cloud,
*Introduction to Interval Analysis*, SIAM, 2009, Thm. 5.1, the fundamental theorem of interval arithmetic)
returns a superset of that range for every expression built from +, −, ×, ÷ (by an interval not containing 0),
negation, ABS, the monotone ROUND / FLOOR / CEIL, numbers and public group keys: for a sum Σ cᵢ·Aᵢ it is exactly Σ over the terms of cᵢ·[loᵢ, hiᵢ] with
the end chosen by the sign of cᵢ.  Hence the stated interval covers the true value with probability ≥ 1 − α.
A division whose divisor's interval contains 0 has no finite range: the interval is (−∞, ∞).

AVG of a linear row expression, ``(Σ cᵢ·SUM(xᵢ) + c₀·COUNT(*)) / COUNT(*)``, is a ratio: its interval is that of
:func:`ratio_estimate` (the range of S/C over the rectangle of the numerator's interval,
from interval arithmetic, and the count's interval), NaN where the count's interval reaches below one row, and
intersected with the range of the row expression over the declared box (the average of values in [lo, hi] is in
[lo, hi]), which keeps the coverage.

Everything here reads only released values and public information (the noise scales, the schema), so by the
post-processing property (Dwork & Roth, *The Algorithmic Foundations of Differential Privacy*, Found. Trends Theor.
Comput. Sci. 9(3–4), 2014, Prop. 2.1) it costs nothing.  O(number of cells × size of the expression).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import sqlglot
from sqlglot import exp

from dpmagic.query.evaluate import columns_of, evaluate

if TYPE_CHECKING:
    from dpmagic.query.model import Query

__all__ = [
    "Unsupported",
    "aggregates_read",
    "union_sizes",
    "interval_of",
    "level_column",
    "ratio_estimate",
    "ratio_interval",
    "union_level",
]

Box = tuple[np.ndarray, np.ndarray]


class Unsupported(Exception):
    """The expression uses a construct interval arithmetic is not applied to here (no interval is stated)."""


def union_level(level: float, k: int) -> float:
    """The level of each of k base intervals whose union bound gives a ``level`` interval: 1 − (1 − level)/k."""
    return 1.0 - (1.0 - level) / k


def level_column(alias: str, end: str, k: int) -> str:
    """The released frame's column holding ``alias``'s interval end (``ci_low`` / ``ci_high``) at the union-bound
    level for k bases (:func:`union_level`); k = 1 is the aggregate's own interval column."""
    return f"{alias}_{end}" if k == 1 else f"{alias}_{end}@{k}"


def _mul(a: Box, b: Box) -> Box:
    """[a] × [b]: the min and max of the four end products (0 × ∞ taken as 0, the convention of extended interval
    arithmetic: the true values are finite); NaN where an end is missing."""
    missing = np.isnan(a[0]) | np.isnan(a[1]) | np.isnan(b[0]) | np.isnan(b[1])
    with np.errstate(invalid="ignore"):
        prods = np.stack([a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]])
    prods = np.where(np.isnan(prods), 0.0, prods)
    return np.where(missing, np.nan, prods.min(axis=0)), np.where(missing, np.nan, prods.max(axis=0))


def _div(a: Box, b: Box) -> Box:
    """[a] ÷ [b]: the min and max of the four end quotients where [b] excludes 0 (∞/∞ dropped: the other corners
    bound the range), else (−∞, ∞); NaN where an end is missing.  Quotients, not a product with reciprocals, so
    that a point box gives exactly the evaluator's value."""
    lo_b, hi_b = b
    missing = np.isnan(a[0]) | np.isnan(a[1]) | np.isnan(lo_b) | np.isnan(hi_b)
    safe = ((lo_b > 0) | (hi_b < 0)) & ~missing
    den_lo, den_hi = np.where(safe, lo_b, 1.0), np.where(safe, hi_b, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.stack([a[0] / den_lo, a[0] / den_hi, a[1] / den_lo, a[1] / den_hi])
    lo = np.min(np.where(np.isnan(q), np.inf, q), axis=0)
    hi = np.max(np.where(np.isnan(q), -np.inf, q), axis=0)
    return (
        np.where(missing, np.nan, np.where(safe, lo, -np.inf)),
        np.where(missing, np.nan, np.where(safe, hi, np.inf)),
    )


def _constant(node: exp.Expr) -> float | None:
    """The value of a numeric constant (a literal, possibly negated or parenthesised), else None."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Neg):
        v = _constant(node.this)
        return None if v is None else -v
    if isinstance(node, exp.Literal) and not node.is_string:
        return float(node.this)
    return None


def _monotone(
    node: exp.Expr, slot: str, bases: Mapping[str, Box], env: Mapping[str, np.ndarray], n: int, *, log: bool = False
) -> Box:
    """A non-decreasing function f of the one argument in ``node.args[slot]``: [f(lo), f(hi)].  A logarithm
    (``log``) is defined on x > 0 only: where lo ≤ 0 the lower end is −∞ (the value may be as small as any), where
    hi ≤ 0 no interval (NaN) is stated; the evaluator's SQRT is √max(x, 0), non-decreasing on all reals."""
    arg = node.args[slot]
    lo, hi = interval_of(arg, bases, env, n)
    ends = {"__ia_lo": lo, "__ia_hi": hi}
    out = []
    for name in ends:
        moved = node.copy()
        moved.set(slot, exp.column(name))
        with np.errstate(divide="ignore", invalid="ignore"):
            out.append(np.asarray(evaluate(moved, {**env, **ends}, n, lambda c: c.name), dtype=float))
    flo, fhi = out
    if log:
        fhi = np.where(hi > 0, fhi, np.nan)
        flo = np.where(np.isnan(fhi), np.nan, np.where(lo > 0, flo, -np.inf))
    return flo, fhi


def _power(x: Box, p: float, text: str) -> Box:
    """x**p over x ∈ [lo, hi] for a constant p: an integer p ≥ 0 (even: 0 inside the interval is the minimum;
    odd: monotone), a non-integer p > 0 on lo ≥ 0, a negative p on lo > 0 (decreasing); otherwise
    :class:`Unsupported` (the power may be undefined or unbounded inside the interval)."""
    lo, hi = x
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        a, b = np.power(lo, p), np.power(hi, p)
        if float(p).is_integer() and p >= 0:
            if int(p) % 2 == 1:
                return a, b
            top = np.maximum(a, b)
            return np.where((lo <= 0) & (hi >= 0), 0.0, np.minimum(a, b)), top
        if p > 0 and bool(np.all((lo >= 0) | np.isnan(lo))):
            return a, b
        if p < 0 and bool(np.all((lo > 0) | np.isnan(lo))):
            return b, a
    raise Unsupported(text)


def interval_of(node: exp.Expr, bases: Mapping[str, Box], env: Mapping[str, np.ndarray], n: int) -> Box:
    """An enclosure of the range of ``node`` over the box of ``bases`` (alias → (lo, hi) per cell), the other
    columns of ``env`` (public group keys) fixed at their values.  NaN ends where a base interval is missing.

    Numbers, +, −, ×, ÷ (an integer division, as the evaluator truncates it, truncated at both ends: a monotone
    map), negation, parentheses, numeric CASTs, ABS, the monotone ROUND / FLOOR / CEIL / SQRT / EXP / LN / LOG /
    LOG10 / SIGN (applied to both ends; see :func:`_monotone` for the logarithms' domain) and POWER / SQUARE with
    a constant exponent (:func:`_power`) are handled; anything else raises :class:`Unsupported` (then no interval is stated)."""
    if isinstance(node, exp.Paren):
        return interval_of(node.this, bases, env, n)
    if isinstance(node, exp.Cast):
        if not node.to.is_type(*exp.DataType.NUMERIC_TYPES):
            raise Unsupported(node.sql())
        return interval_of(node.this, bases, env, n)
    if isinstance(node, exp.Literal) and not node.is_string:
        v = np.full(n, float(node.this))
        return v, v
    if isinstance(node, exp.Column):
        if node.name in bases:
            lo, hi = bases[node.name]
            return np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
        if node.name in env and np.asarray(env[node.name]).dtype.kind in "iuf":
            v = np.asarray(env[node.name], dtype=float)
            return v, v
        raise Unsupported(node.sql())
    if isinstance(node, exp.Neg):
        lo, hi = interval_of(node.this, bases, env, n)
        return -hi, -lo
    if isinstance(node, exp.Abs):
        lo, hi = interval_of(node.this, bases, env, n)
        top = np.maximum(np.abs(lo), np.abs(hi))
        return np.where((lo <= 0) & (hi >= 0), 0.0, np.minimum(np.abs(lo), np.abs(hi))), top
    if isinstance(node, (exp.Round, exp.Floor, exp.Ceil)):
        return _monotone(node, "this", bases, env, n)
    if isinstance(node, (exp.Sqrt, exp.Exp, exp.Sign)):
        return _monotone(node, "this", bases, env, n)
    if isinstance(node, exp.Ln) or (isinstance(node, exp.Log) and node.expression is None):
        return _monotone(node, "this", bases, env, n, log=True)
    if isinstance(node, exp.Log) and (_constant(node.this) or 0.0) > 1.0:  # LOG(b, x), LOG10(x) with b > 1
        return _monotone(node, "expression", bases, env, n, log=True)
    if isinstance(node, exp.Pow) or (
        isinstance(node, exp.Anonymous) and str(node.this).upper() == "SQUARE" and len(node.expressions) == 1
    ):
        base = node.this if isinstance(node, exp.Pow) else node.expressions[0]
        power = _constant(node.expression) if isinstance(node, exp.Pow) else 2.0
        if power is None:
            raise Unsupported(node.sql())
        return _power(interval_of(base, bases, env, n), power, node.sql())
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
        a = interval_of(node.this, bases, env, n)
        b = interval_of(node.expression, bases, env, n)
        if isinstance(node, exp.Add):
            return a[0] + b[0], a[1] + b[1]
        if isinstance(node, exp.Sub):
            return a[0] - b[1], a[1] - b[0]
        if isinstance(node, exp.Mul):
            return _mul(a, b)
        lo, hi = _div(a, b)
        typed = {**{a: np.asarray(lo) for a, (lo, _) in bases.items()}, **env}  # the released values' types
        kinds = {np.asarray(evaluate(x, typed, n, lambda c: c.name)).dtype.kind for x in (node.this, node.expression)}
        if kinds <= set("iub"):  # int / int truncates toward zero in the evaluator (SQLite): monotone
            return np.trunc(lo), np.trunc(hi)
        return lo, hi
    raise Unsupported(node.sql())


def aggregates_read(sql: str, aliases: set[str]) -> list[str]:
    """The released aggregates an output's SQL reads, sorted (its k for the union bound)."""
    return sorted(columns_of(sqlglot.parse_one(sql)) & aliases)


def ratio_interval(
    node: exp.Expr, bases: Mapping[str, Box], env: Mapping[str, np.ndarray], n: int, bounds: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """AVG of a linear row expression, ``(numerator) / CAST(count AS DOUBLE)``: (estimate, low, high) per cell by
    :func:`ratio_estimate` over the numerator's interval (:func:`interval_of`) and the
    count's, within ``bounds`` (the row expression's range over the declared box).  The estimate is NaN where
    the count's interval reaches below one row; a cell where an interval side is infinite (an exact value that
    may have been clamped before noise) gets the whole of ``bounds``."""
    while isinstance(node, exp.Paren):
        node = node.this
    if not isinstance(node, exp.Div):
        raise Unsupported(node.sql())
    num, den = node.this, node.expression
    while isinstance(den, (exp.Paren, exp.Cast)):
        den = den.this
    if not isinstance(den, exp.Column) or den.name not in bases:
        raise Unsupported(node.sql())
    s = np.asarray(evaluate(num, env, n, lambda c: c.name), dtype=float)
    s_lo, s_hi = interval_of(num, bases, env, n)
    c = np.asarray(env[den.name], dtype=float)
    c_lo, c_hi = (np.asarray(x, dtype=float) for x in bases[den.name])
    unsure = ~(np.isfinite(s_lo) & np.isfinite(s_hi) & np.isfinite(c_lo) & np.isfinite(c_hi))
    # the half-widths are public and the same in every cell (one noise scale per release); the largest is kept
    hs = float(np.max(np.maximum(s - s_lo, s_hi - s)[~unsure], initial=0.0))
    hc = float(np.max(np.maximum(c - c_lo, c_hi - c)[~unsure], initial=0.0))
    est, low, high = ratio_estimate(s, hs, c, hc, bounds[0], bounds[1])
    low[unsure], high[unsure] = bounds
    return est, low, high


def union_sizes(query: Query) -> list[int]:
    """The numbers k ≥ 2 of distinct aggregates read by the query's computed outputs (each needs its bases'
    intervals at level 1 − α/k), sorted."""
    if query.outputs is None:
        return []
    aliases = {a.alias for a in query.aggregates}
    ks = {len(aggregates_read(o.expr, aliases)) for o in query.outputs if o.source is None}
    return sorted(k for k in ks if k >= 2)


def ratio_estimate(
    s: np.ndarray, hs: float, c: np.ndarray, hc: float, lo: float, hi: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """AVG = noisy SUM / noisy COUNT per cell, with its interval (post-processing of the two noisy values).

    ``hs`` and ``hc`` are the half-widths of the SUM and COUNT intervals at level 1 − α/2 (a union bound makes
    the ratio's interval a 1 − α one).  Where ``c − hc < 1`` the count's interval admits an empty or
    one-row group: the ratio is meaningless there, so the estimate is ``NaN`` and the interval is the whole
    declared range ``[lo, hi]`` (which contains every possible average).  Elsewhere the estimate is S/C
    clamped into ``[lo, hi]`` and the interval is the range of S/C over the rectangle of the two intervals,
    intersected with ``[lo, hi]``; if that intersection is empty or a single bound (the noise pushed both
    ends past a bound), the interval is the whole declared range.  Only when both half-widths are 0 (the
    releases are exact at this level) is the interval the single value S/C.

    O(number of cells).
    """
    s = np.asarray(s, dtype=float)
    c = np.asarray(c, dtype=float)
    c_lo = c - hc
    ok = c_lo >= 1.0
    est = np.full(len(s), np.nan, dtype=float)
    low = np.full(len(s), lo, dtype=float)
    high = np.full(len(s), hi, dtype=float)
    if ok.any():
        est[ok] = np.clip(s[ok] / c[ok], lo, hi)
        corners = np.stack(
            [
                (s[ok] - hs) / c_lo[ok],
                (s[ok] - hs) / (c[ok] + hc),
                (s[ok] + hs) / c_lo[ok],
                (s[ok] + hs) / (c[ok] + hc),
            ]
        )
        raw_a, raw_b = corners.min(axis=0), corners.max(axis=0)
        a = np.clip(raw_a, lo, hi)
        b = np.clip(raw_b, lo, hi)
        # degenerate: the noise pushed the whole rectangle past a bound (the clipped interval is empty or a
        # bound alone).  A rectangle of zero width (both half-widths 0: the releases are exact at this level,
        # e.g. at a very large ε) is no such case: its point is the value (issue 27, item 8).
        degenerate = (b < a) | ((b == a) & (raw_b > raw_a))
        low[ok] = np.where(degenerate, lo, a)
        high[ok] = np.where(degenerate, hi, b)
    return est, low, high
