"""SUM / AVG of a linear row expression, answered as the same linear combination of released aggregates.

``SUM(age + hours_per_week)`` is ``SUM(age) + SUM(hours_per_week)``, ``SUM(2 * age - 1)`` is ``2 * SUM(age) -
COUNT(*)``, ``AVG(a + b)`` is ``(SUM(a) + SUM(b)) / COUNT(*)``: exact identities of the sums over the rows (real
arithmetic; each term may be clamped, ``SUM(CLAMP(a, 0, 10) + b)``).  The parser then releases the base
aggregates it already knows — each with its own, brute-force-tested sensitivity, the query's cost split over
them as for any query with several aggregates — and the combination is free post-processing of released values
(a computed output, whose 95% interval combines the base intervals by a union bound: :mod:`dpmagic.query.intervals`).
Nothing is read.

Only sums, differences, negation and multiplication by a number literal distribute.  A linear expression of plain
columns and numbers (``SUM(a + b)``, ``AVG(2 * a - 1)``) is *not* distributed: it is one release of the
expression's value (:mod:`dpmagic.query.derived`), whose sensitivity is that of the expression's range — never
worse and usually much narrower than the sum of the terms' releases with a union-bound interval (measured:
``benchmarks/bench_rowexpr.md``: the same or smaller sd, a 95% half-width 1.6–4.9× narrower, both relations, three
definitions).  Only an expression with a clamped term (``SUM(CLAMP(x, 0, 2) - y)``) is distributed here.  A
product of two columns (``AVG(price * quantity)``), ABS, LEAST, GREATEST and CASE are row expressions as well; a
division (``SUM(age / 2)`` truncates per row on int columns) stays refused, with its message.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

from sqlglot import exp

from dpmagic.query.evaluate import columns_of

__all__ = ["distribute_linear", "linear_range"]

Terms = list[tuple[Fraction, exp.Expr | None]]  # (coefficient, atom); None: the constant term (COUNT(*))


def _number(node: exp.Expr) -> Fraction | None:
    """A number literal (possibly negated / parenthesised) as an exact fraction; None otherwise."""
    neg = False
    while isinstance(node, (exp.Paren, exp.Neg)):
        if isinstance(node, exp.Neg):
            neg = not neg
        node = node.this
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            v = Fraction(node.this)
        except ValueError:
            return None
        return -v if neg else v
    return None


def _terms(node: exp.Expr) -> Terms | None:
    """The linear terms of ``node``; None when it is not a linear expression of at least two parts (a plain atom
    is left to the aggregate parser as it is)."""
    while isinstance(node, exp.Paren):
        node = node.this
    k = _number(node)
    if k is not None:
        return [(k, None)]
    if isinstance(node, exp.Neg):
        inner = _terms(node.this)
        return None if inner is None else [(-c, a) for c, a in inner]
    if isinstance(node, (exp.Add, exp.Sub)):
        left, right = _terms(node.this), _terms(node.expression)
        if left is None or right is None:
            return None
        sign = -1 if isinstance(node, exp.Sub) else 1
        return left + [(sign * c, a) for c, a in right]
    if isinstance(node, exp.Mul):
        for const, other in ((node.this, node.expression), (node.expression, node.this)):
            k = _number(const)
            if k is not None:
                inner = _terms(other)
                return None if inner is None else [(k * c, a) for c, a in inner]
        return None
    if len(columns_of(node)) == 1 and not isinstance(node, (exp.Div, exp.IntDiv, exp.Mod)):
        return [(Fraction(1), node)]  # an atom: a column, or a clamp of one (checked by the aggregate parser)
    return None


def _plain_column(atom: exp.Expr) -> bool:
    while isinstance(atom, exp.Paren):
        atom = atom.this
    return isinstance(atom, exp.Column)


def _literal(k: Fraction) -> exp.Expr:
    """A non-negative coefficient as a number literal (a whole number exactly, else its double)."""
    return exp.Literal.number(str(k.numerator) if k.denominator == 1 else repr(float(k)))


def _combination(terms: Terms) -> exp.Expr:
    """Σ k · SUM(atom) + k₀ · COUNT(*), like atoms merged (their SQL text), zero terms dropped."""
    merged: dict[str, tuple[Fraction, exp.Expr | None]] = {}
    for k, atom in terms:
        key = "" if atom is None else atom.sql()
        c, _ = merged.get(key, (Fraction(0), atom))
        merged[key] = (c + k, atom)
    out: exp.Expr | None = None
    for k, atom in merged.values():
        if k == 0:
            continue
        agg: exp.Expr = exp.Count(this=exp.Star()) if atom is None else exp.Sum(this=atom.copy())
        term = agg if abs(k) == 1 else exp.Mul(this=_literal(abs(k)), expression=agg)
        if out is None:
            out = exp.Neg(this=term) if k < 0 else term
        else:
            out = (exp.Sub if k < 0 else exp.Add)(this=out, expression=term)
    return exp.Mul(this=exp.Literal.number(0), expression=exp.Count(this=exp.Star())) if out is None else out


def distribute_linear(tree: exp.Select) -> exp.Select:
    """``tree`` with every SUM / AVG of a linear expression (two or more terms, or a multiple of one) replaced by
    the linear combination of SUMs and COUNT(*) it equals (AVG: divided by COUNT(*) as a double).  Reads nothing.
    Rewrites ``tree`` in place and returns it (the parser owns its freshly parsed tree: no defensive copy)."""

    def rewrite(node: exp.Expr) -> exp.Expr:
        if not isinstance(node, (exp.Sum, exp.Avg)) or isinstance(node.parent, exp.Filter):
            return node
        arg = node.this
        terms = _terms(arg) if arg is not None else None
        if terms is None or (len(terms) == 1 and terms[0][0] == 1) or all(a is None for _, a in terms):
            return node  # a plain atom, a constant, or not linear: the aggregate parser's own business
        if all(a is None or _plain_column(a) for _, a in terms):
            return node  # columns and numbers only: ONE release of the expression (dpmagic.query.derived) is better
        total = _combination(terms)
        if isinstance(node, exp.Sum):
            return exp.Paren(this=total)
        count = exp.Cast(this=exp.Count(this=exp.Star()), to=exp.DataType.build("DOUBLE"))
        out = exp.Paren(this=exp.Div(this=exp.Paren(this=total), expression=count))
        out.meta["linear_avg"] = terms  # its range over the declared box bounds the answer (query.sql)
        return out

    out = tree.transform(rewrite, copy=False)
    assert isinstance(out, exp.Select)
    return out


def linear_range(terms: Terms, bounds_of: Callable[[exp.Expr], tuple[float, float]]) -> tuple[float, float]:
    """The range of Σ k · atom + k₀ over the box of the atoms' bounds (``bounds_of``: an atom's declared or clamped
    bounds): each term's end chosen by the sign of its coefficient, summed exactly (fractions) and rounded
    outwards to floats (interval arithmetic, exact for a sum of independent terms; an atom repeated is merged
    first by the caller's combination only in the SQL, so the range here may be wider, never narrower)."""
    lo, hi = Fraction(0), Fraction(0)
    for k, atom in terms:
        if atom is None:
            lo, hi = lo + k, hi + k
            continue
        a, b = (Fraction(v) for v in bounds_of(atom))
        lo, hi = lo + min(k * a, k * b), hi + max(k * a, k * b)
    return outward(lo, hi)


def outward(lo: Fraction, hi: Fraction) -> tuple[float, float]:
    """The exact interval [lo, hi] rounded outwards to doubles (a double end never excludes a value)."""
    flo, fhi = float(lo), float(hi)
    if Fraction(flo) > lo:
        flo = math.nextafter(flo, -math.inf)
    if Fraction(fhi) < hi:
        fhi = math.nextafter(fhi, math.inf)
    return flo, fhi
