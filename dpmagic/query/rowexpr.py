"""A general numeric row expression inside SUM / AVG (issue 29): its public range by interval arithmetic, and its
per-row value computed identically on every engine (numpy here, SQL for DuckDB / Spark).

``SUM(price * quantity)``, ``SUM(ABS(x - 40))``, ``AVG(CASE WHEN c = 'a' THEN x * 2 ELSE y END)`` are sums of a
per-row value v(x) = expr(x).  Released as ONE sum, its sensitivity is that of a sum of per-row values in a public
range [lo, hi] (:func:`dpmagic.noise.sensitivity.patterns`), provided every summed value is forced into [lo, hi]:
the value is clamped into [lo, hi] before summing, so the privacy proof does not rest on the enclosure being
tight, or even on floating-point evaluation matching real arithmetic — only on the clamp.

**The range** (:func:`enclosure`).  [lo, hi] is computed from the columns' public ranges in the query's WHERE
box (the declared bounds ∩ the box: invariant 1, never the rows) by interval arithmetic in exact rational
arithmetic (Moore, Kearfott & Cloud, *Introduction to Interval Analysis*, SIAM, 2009, Thm. 5.1, the fundamental
theorem of interval arithmetic: the natural interval extension of an expression built from +, −, ×, ABS,
LEAST, GREATEST encloses its range over the box), then rounded outwards to doubles.  A CASE encloses the union
of the enclosures of the branches whose condition can hold in the box (conditions that are constant over the
box are decided there, so CASE over declared values is exact when its branches are).  The enclosure may be
wider than the true range (a column appearing twice, ``x * x`` over [−1, 1] gives [−1, 1]), never narrower;
a wider range only costs accuracy.

**The per-row value** (:func:`dpmagic.aggregates.rowvalues.row_values`, :func:`~dpmagic.aggregates.rowvalues.row_sql`,
in the aggregates layer: they build engine SQL).  When every column read by the arithmetic is an
int column, every constant an integer, and every intermediate enclosure within ±2⁶², v is computed in exact
int64 arithmetic and summed exactly.  Otherwise the columns are read as doubles and v is computed in IEEE
double arithmetic, operation by operation in the tree's order (+, −, × are correctly rounded on every engine;
ABS, LEAST, GREATEST and CASE are exact), then clamped into [lo, hi] and quantised to the power-of-two quantum
u of the float SUM path (:func:`dpmagic.noise.calibration.quantise`, :func:`dpmagic.aggregates.sqlexpr.quantise_sql`):
the integer per-row values, hence the exact integer sums, are bit-identical on pandas, DuckDB and Spark.

Refused, with the reason: division and modulo (undefined at 0, and int division truncates differently across
engines), functions other than ABS / LEAST / GREATEST, CASTs to an integer type of a non-integer value (engines
round or truncate), string or non-numeric values, columns with infinite bounds, and conditions that are not
comparisons of a declared column with a constant or ``IN`` a list of constants (AND, OR, NOT of those).

Wired by the parser (:mod:`dpmagic.query.derived`): a SUM / AVG / VAR / STDDEV of such an expression is one release
of a derived column whose public bounds are :func:`row_expr`'s enclosure over the query's WHERE box.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from dpmagic.domain.columns import CategoricalColumn, NumericColumn
from dpmagic.domain.schema import Schema
from dpmagic.domain.sets import CategorySet, IntervalSet
from dpmagic.errors import UnsupportedQueryError
from dpmagic.query.linear import outward

if TYPE_CHECKING:
    from dpmagic.query.model import Query

__all__ = ["COMPARE", "RowExpr", "box_bounds", "enclosure", "in_values", "number", "row_expr", "strip"]

#: the largest magnitude an intermediate of an exact int64 expression may reach
INT_LIMIT = 1 << 62

Range = tuple[Fraction, Fraction]
#: a column's public range in the box (numeric columns) or its declared values in the box (categorical)
BoundsOf = Callable[[str], Any]

_INT_TYPES = {
    exp.DataType.Type.INT,
    exp.DataType.Type.BIGINT,
    exp.DataType.Type.SMALLINT,
    exp.DataType.Type.TINYINT,
}
_DOUBLE_TYPES = {exp.DataType.Type.DOUBLE, exp.DataType.Type.DECIMAL}
COMPARE: dict[type[exp.Expr], Callable[[Any, Any], Any]] = {
    exp.EQ: lambda a, b: a == b,
    exp.NEQ: lambda a, b: a != b,
    exp.LT: lambda a, b: a < b,
    exp.LTE: lambda a, b: a <= b,
    exp.GT: lambda a, b: a > b,
    exp.GTE: lambda a, b: a >= b,
}


def _refuse(node: exp.Expr, why: str) -> UnsupportedQueryError:
    return UnsupportedQueryError(f"the row expression {node.sql()!r} is not supported inside SUM / AVG: {why}")


def strip(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def number(node: exp.Expr) -> Fraction | None:
    node = strip(node)
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return Fraction(node.this)
        except ValueError:
            return None
    return None


@dataclass(frozen=True)
class RowExpr:
    """A validated row expression: its tree, canonical key (its SQL), the enclosure [lo, hi] of its values over
    the box (doubles, rounded outwards; exact ints when ``is_int``), and whether it is computed in exact int64."""

    node: exp.Expr
    key: str
    lo: float
    hi: float
    is_int: bool
    columns: frozenset[str]


class _Checker:
    """Validates a tree and computes its enclosure and integrality (one pass)."""

    def __init__(self, schema: Schema, bounds_of: BoundsOf) -> None:
        self.schema = schema
        self.bounds_of = bounds_of
        self.is_int = True
        self.columns: set[str] = set()

    def numeric(self, name: str, node: exp.Expr) -> NumericColumn:
        try:
            c = self.schema[name]
        except Exception as e:  # an unknown column: the schema's own message
            raise _refuse(node, f"unknown column {name!r}") from e
        if not isinstance(c, NumericColumn):
            raise _refuse(node, f"column {name!r} is not numeric")
        return c

    def range(self, node: exp.Expr) -> Range:
        node = strip(node)
        k = number(node)
        if k is not None:
            if k.denominator != 1:
                self.is_int = False
            return self.checked(k, k, node)
        if isinstance(node, exp.Literal):
            raise _refuse(node, "a string is not a number")
        if isinstance(node, exp.Column):
            c = self.numeric(node.name, node)
            lo, hi = self.bounds_of(node.name)
            if not (math.isfinite(lo) and math.isfinite(hi)):
                raise _refuse(node, f"column {node.name!r} has no finite declared bounds")
            self.columns.add(node.name)
            if not c.is_int:
                self.is_int = False
            return self.checked(Fraction(lo), Fraction(hi), node)
        if isinstance(node, exp.Neg):
            a, b = self.range(node.this)
            return -b, -a
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
            ra, rb = self.range(node.this), self.range(node.expression)
            if isinstance(node, exp.Add):
                return self.checked(ra[0] + rb[0], ra[1] + rb[1], node)
            if isinstance(node, exp.Sub):
                return self.checked(ra[0] - rb[1], ra[1] - rb[0], node)
            p = [ra[0] * rb[0], ra[0] * rb[1], ra[1] * rb[0], ra[1] * rb[1]]
            return self.checked(min(p), max(p), node)
        if isinstance(node, exp.Abs):
            a, b = self.range(node.this)
            top = max(abs(a), abs(b))
            return (Fraction(0) if a <= 0 <= b else min(abs(a), abs(b))), top
        if isinstance(node, (exp.Least, exp.Greatest)):
            args = [node.this, *node.expressions]
            rs = [self.range(x) for x in args]
            if isinstance(node, exp.Least):
                return min(r[0] for r in rs), min(r[1] for r in rs)
            return max(r[0] for r in rs), max(r[1] for r in rs)
        if isinstance(node, exp.Case):
            return self.case(node)
        if isinstance(node, exp.Cast):
            t = node.to.this
            before = self.is_int
            self.is_int = True
            r = self.range(node.this)
            inner_int, self.is_int = self.is_int, before
            if t in _INT_TYPES:
                if not inner_int:
                    raise _refuse(node, "a CAST of a non-integer value to an integer type (engines round or truncate)")
                self.is_int = self.is_int and inner_int
                return r
            if t in _DOUBLE_TYPES:
                self.is_int = False
                return r
            raise _refuse(node, f"CAST to {node.to.sql()} (only BIGINT / INT of an integer value, or DOUBLE)")
        if isinstance(node, (exp.Div, exp.IntDiv, exp.Mod)):
            raise _refuse(node, "division is undefined where the divisor is 0 and truncates differently by engine")
        if isinstance(node, exp.AggFunc):
            raise UnsupportedQueryError(
                f"an aggregate inside an aggregate ({node.sql()!r} inside another) is not supported: an aggregate "
                "reads rows, not other aggregates",
                hint="ask the inner aggregate (with GROUP BY) and post-process its released values",
            )
        raise _refuse(node, f"{type(node).__name__.upper()} is not one of + − × ABS LEAST GREATEST CASE CAST")

    def checked(self, lo: Fraction, hi: Fraction, node: exp.Expr) -> Range:
        """An intermediate's range: beyond ±2⁶² the expression is computed in doubles (the clamp into the final
        range still bounds every summed value); beyond 2¹⁰⁰⁰ it is refused (doubles would overflow)."""
        if max(abs(lo), abs(hi)) > INT_LIMIT:
            self.is_int = False
        if max(abs(lo), abs(hi)) > Fraction(2) ** 1000:
            raise _refuse(node, "its range exceeds ±2^1000")
        return lo, hi

    def case(self, node: exp.Case) -> Range:
        if node.this is not None:
            raise _refuse(node, "use the searched form CASE WHEN <condition> THEN … END")
        out: list[Range] = []
        possible = True  # no earlier condition is certainly true
        for when in node.args.get("ifs") or []:
            holds = self.condition(when.this)  # True: always, False: never, None: maybe
            r = self.range(when.args["true"])
            if possible and holds is not False:
                out.append(r)
            if holds is True:
                possible = False
        default = node.args.get("default")
        if default is None:
            raise _refuse(node, "a CASE needs an ELSE branch (a NULL is not summed)")
        r = self.range(default)
        if possible:
            out.append(r)
        return min(x[0] for x in out), max(x[1] for x in out)

    def condition(self, node: exp.Expr) -> bool | None:
        """Validates a condition; whether it holds on every row of the box (True), none (False), or unknown."""
        node = strip(node)
        if isinstance(node, exp.Not):
            v = self.condition(node.this)
            return None if v is None else not v
        if isinstance(node, (exp.And, exp.Or)):
            a, b = self.condition(node.this), self.condition(node.expression)
            if isinstance(node, exp.And):
                return False if False in (a, b) else (True if a is True and b is True else None)
            return True if True in (a, b) else (False if a is False and b is False else None)
        if isinstance(node, exp.In):
            return self.membership(node)
        if type(node) in COMPARE:
            left, right = strip(node.this), strip(node.expression)
            if not isinstance(left, exp.Column):
                raise _refuse(node, "a CASE condition compares a declared column with a constant")
            name = left.name
            try:
                c = self.schema[name]
            except Exception as e:
                raise _refuse(node, f"unknown column {name!r}") from e
            op = COMPARE[type(node)]
            if isinstance(c, CategoricalColumn):
                if not (isinstance(right, exp.Literal) and right.is_string) or type(node) not in (exp.EQ, exp.NEQ):
                    raise _refuse(node, f"compare categorical column {name!r} with = or <> and a string")
                values = list(self.bounds_of(name))
                hits = {bool(op(v, right.this)) for v in values}
                return hits.pop() if len(hits) == 1 else None
            k = number(right)
            if k is None:
                raise _refuse(node, "a CASE condition compares a declared column with a constant number")
            lo, hi = (Fraction(v) for v in self.bounds_of(name))
            at = {bool(op(lo, k)), bool(op(hi, k))}
            if type(node) in (exp.EQ, exp.NEQ):
                inside = lo <= k <= hi
                if not inside:
                    return type(node) is exp.NEQ
                return None if lo < hi else bool(op(lo, k))
            return at.pop() if len(at) == 1 else None  # monotone in the column: decided by the ends
        raise _refuse(node, "a CASE condition is a comparison of a column with a constant, IN, AND, OR or NOT")

    def membership(self, node: exp.In) -> bool | None:
        """``col IN (constants)`` (a public lookup column's CASE: :mod:`dpmagic.query.joins`), decided over the box
        where it can be: never when no listed value is in the column's range, always when every value of the
        range is listed (an int range no longer than the list)."""
        left = strip(node.this)
        if not isinstance(left, exp.Column) or node.args.get("query") is not None or not node.expressions:
            raise _refuse(node, "a CASE condition's IN compares a declared column with a list of constants")
        name = left.name
        try:
            c = self.schema[name]
        except Exception as e:
            raise _refuse(node, f"unknown column {name!r}") from e
        items = [strip(x) for x in node.expressions]
        if isinstance(c, CategoricalColumn):
            if not all(isinstance(x, exp.Literal) and x.is_string for x in items):
                raise _refuse(node, f"compare categorical column {name!r} with IN and strings")
            listed = {x.this for x in items}
            hits = {v in listed for v in self.bounds_of(name)}
            return hits.pop() if len(hits) == 1 else None
        nums = [number(x) for x in items]
        if any(k is None for k in nums):
            raise _refuse(node, "a CASE condition's IN lists constant numbers")
        lo, hi = (Fraction(v) for v in self.bounds_of(name))
        inside = {k for k in nums if k is not None and lo <= k <= hi}
        if not inside:
            return False
        if isinstance(c, NumericColumn) and c.is_int and hi - lo + 1 <= len(inside):
            return True if all(Fraction(v) in inside for v in range(int(lo), int(hi) + 1)) else None
        return None


def in_values(node: exp.In) -> list[Any]:
    """The literals of ``col IN (…)`` (a validated condition): strings, or numbers as exact fractions."""
    out: list[Any] = []
    for x in node.expressions:
        x = strip(x)
        out.append(x.this if isinstance(x, exp.Literal) and x.is_string else number(x))
    return out


def box_bounds(query: Query, schema: Schema) -> BoundsOf:
    """``bounds_of`` for the query's WHERE box, from the schema and the query only (invariant 1): a numeric
    column's (inf, sup) in the box (its declared bounds intersected with the box's set on it, as
    :func:`dpmagic.noise.sensitivity.value_range`), a categorical column's declared values in the box."""

    def of(name: str) -> Any:
        c = schema[name]
        s = query.where.get(name)
        if isinstance(c, CategoricalColumn):
            return tuple(s.values) if isinstance(s, CategorySet) else tuple(c.values)
        assert isinstance(c, NumericColumn)
        if isinstance(s, IntervalSet) and s.intervals:
            lo, hi = s.intervals[0].lo, s.intervals[-1].hi
        else:
            lo, hi = c.lower, c.upper
        return (int(lo), int(hi)) if c.is_int else (float(lo), float(hi))

    return of


def enclosure(node: exp.Expr, schema: Schema, bounds_of: BoundsOf) -> tuple[Fraction, Fraction, bool]:
    """The exact rational enclosure [lo, hi] of ``node`` over the box (``bounds_of``: a numeric column's public
    (lo, hi) in the box; a categorical column's declared values in the box) and whether it is an exact int64
    expression.  Raises :class:`~dpmagic.errors.UnsupportedQueryError` naming the construct otherwise."""
    ch = _Checker(schema, bounds_of)
    lo, hi = ch.range(node)
    return lo, hi, ch.is_int


def row_expr(node: exp.Expr, schema: Schema, bounds_of: BoundsOf) -> RowExpr:
    """Validate ``node`` and compute its enclosure over the box (rounded outwards to doubles; exact ints when
    computed in int64)."""
    ch = _Checker(schema, bounds_of)
    lo, hi = ch.range(node)
    node = node.copy()
    if ch.is_int:
        return RowExpr(node, node.sql(), int(lo), int(hi), True, frozenset(ch.columns))
    flo, fhi = outward(lo, hi)
    return RowExpr(node, node.sql(), flo, fhi, False, frozenset(ch.columns))
