"""The base aggregates of the SQL subset (COUNT, SUM, AVG, VAR/STDDEV, quantiles) and their clamps."""

from __future__ import annotations

import math
from collections.abc import Callable

from sqlglot import exp

from dpmagic.domain.schema import NumericColumn, Schema
from dpmagic.errors import QueryError, QueryTypeError, UnsupportedQueryError
from dpmagic.query.domain import resolve_column
from dpmagic.query.evaluate import columns_of
from dpmagic.query.model import Aggregate, AggregateFunction

__all__ = [
    "AGG_CLASSES",
    "ANON_AGGS",
    "is_aggregate",
    "base_aggregate",
    "fraction_value",
    "number_value",
    "clamped_column",
    "meet_clamps",
]

_INF = math.inf


AGG_CLASSES: tuple[type[exp.Expr], ...] = (exp.AggFunc, exp.WithinGroup)


ANON_AGGS: dict[str, tuple[AggregateFunction, float | None]] = {
    "VAR": ("var", 1.0),
    "VARP": ("var", 0.0),
    "STD": ("stddev", 1.0),
    "STDEV": ("stddev", 1.0),
    "STDEVP": ("stddev", 0.0),
    "APPROX_PERCENTILE": ("quantile", None),
    "PERCENTILE": ("quantile", None),
}


def is_aggregate(node: exp.Expr) -> bool:
    if isinstance(node, AGG_CLASSES):
        return True
    return isinstance(node, exp.Anonymous) and str(node.this).upper() in ANON_AGGS


#: SUM / AVG / VAR / STDDEV of a row expression: registers it as a derived column, returns its name
Derive = Callable[[exp.Expr], str]

_DERIVABLE = ("sum", "avg", "var", "stddev")


def base_aggregate(node: exp.Expr, schema: Schema, derive: Derive | None = None) -> Aggregate:
    """One aggregate call → a base :class:`Aggregate` (alias filled in by the caller).  ``derive``: the parser's
    hook for a SUM / AVG / VAR / STDDEV of a row expression that is not a (clamped) column
    (:mod:`dpmagic.query.derived`); without it such an expression is refused."""
    func: AggregateFunction
    param: float | None = None
    arg: exp.Expr | None
    if isinstance(node, exp.WithinGroup):
        inner, order = node.this, node.expression
        if not isinstance(inner, (exp.PercentileCont, exp.PercentileDisc)):
            raise UnsupportedQueryError(
                f"{inner.sql()} WITHIN GROUP is not supported: use PERCENTILE_CONT(p) WITHIN GROUP (ORDER BY col)"
            )
        if not isinstance(order, exp.Order) or len(order.expressions) != 1:
            raise UnsupportedQueryError("PERCENTILE_CONT(p) WITHIN GROUP takes (ORDER BY one column)")
        o = order.expressions[0]
        if isinstance(o, exp.Ordered) and o.args.get("desc"):
            raise UnsupportedQueryError(
                "PERCENTILE_CONT(p) WITHIN GROUP (ORDER BY col DESC) is not supported: use 1 - p"
            )
        func, param = "quantile", fraction_value(inner.this, "PERCENTILE_CONT")
        arg = o.this if isinstance(o, exp.Ordered) else o
    elif isinstance(node, exp.Count):
        arg = node.this
        if isinstance(arg, exp.Distinct):
            if len(arg.expressions) != 1:
                raise UnsupportedQueryError("COUNT(DISTINCT ...) takes one column")
            col = arg.expressions[0]
            if not isinstance(col, exp.Column):
                quoted = isinstance(col, exp.Literal) and col.is_string
                raise UnsupportedQueryError(
                    f"COUNT(DISTINCT ...) takes a column name, not {col.sql()!r}"
                    + (": single quotes make a string, not a column" if quoted else ""),
                    hint=f'COUNT(DISTINCT {col.this}) or COUNT(DISTINCT "{col.this}")' if quoted else None,
                )
            return Aggregate("count_distinct", resolve_column(col, schema), "")
        if isinstance(arg, exp.Star) or arg is None:
            return Aggregate("count", None, "")
        if isinstance(arg, exp.Column):
            resolve_column(arg, schema)  # the column must exist; the domain has no NULLs, so COUNT(col) = COUNT(*)
            return Aggregate("count", None, "")
        if not columns_of(arg):
            return Aggregate("count", None, "")  # COUNT(1)
        raise UnsupportedQueryError(f"COUNT takes *, a column or DISTINCT column, not {arg.sql()!r}")
    elif isinstance(node, exp.Sum):
        func, arg = "sum", node.this
    elif isinstance(node, exp.Avg):
        func, arg = "avg", node.this
    elif isinstance(node, exp.Variance):
        func, param, arg = "var", 1.0, node.this
    elif isinstance(node, exp.VariancePop):
        func, param, arg = "var", 0.0, node.this
    elif isinstance(node, (exp.Stddev, exp.StddevSamp)):
        func, param, arg = "stddev", 1.0, node.this
    elif isinstance(node, exp.StddevPop):
        func, param, arg = "stddev", 0.0, node.this
    elif isinstance(node, exp.Median):
        func, param, arg = "quantile", 0.5, node.this
    elif isinstance(node, (exp.Quantile, exp.ApproxQuantile)):
        q = node.args.get("quantile")
        func, param, arg = "quantile", fraction_value(q, node.key.upper()), node.this
    elif isinstance(node, (exp.Min, exp.Max)):
        # the 0- or 1-quantile, by an exponential mechanism with a data-independent tie-break (dpmagic.aggregates.quantile)
        func, param, arg = "quantile", 0.0 if isinstance(node, exp.Min) else 1.0, node.this
        if arg is None or isinstance(arg, exp.Star):
            raise UnsupportedQueryError(f"{node.key.upper()} takes one column name, not '*'")
    elif isinstance(node, exp.Anonymous) and str(node.this).upper() in ANON_AGGS:
        func, param = ANON_AGGS[str(node.this).upper()]
        args = node.expressions
        if func == "quantile":
            if len(args) != 2:
                raise UnsupportedQueryError(f"{str(node.this).upper()} takes (col, p)")
            param = fraction_value(args[1], str(node.this).upper())
        elif len(args) != 1:
            raise UnsupportedQueryError(f"{str(node.this).upper()} takes one column")
        arg = args[0]
    elif isinstance(node, exp.AggFunc):
        raise UnsupportedQueryError(
            f"aggregate {node.key.upper()} is not supported: use COUNT, COUNT(DISTINCT col), SUM, AVG, VAR, STDDEV, "
            "MEDIAN or PERCENTILE_CONT"
        )
    else:  # pragma: no cover - guarded by is_aggregate
        raise UnsupportedQueryError(f"{node.sql()!r} is not an aggregate")
    if arg is None or isinstance(arg, exp.Star):
        raise UnsupportedQueryError(f"{func.upper()} takes one column name, not '*'")
    while isinstance(arg, exp.Paren):
        arg = arg.this
    try:
        name, clamp = clamped_column(arg, schema, func)
    except UnsupportedQueryError:
        if derive is None or func not in _DERIVABLE or isinstance(arg, exp.Literal):
            raise
        return Aggregate(func, derive(arg), "", None, param)  # a row expression: its own checks and messages
    col = schema[name]
    if not isinstance(col, NumericColumn):
        label = {"quantile": "a quantile", "var": "VAR", "stddev": "STDDEV"}.get(func, func.upper())
        raise QueryTypeError(f"{label} of {name!r} needs a numeric (int or float) column; {name!r} is categorical")
    if col.temporal is not None:
        label = {"quantile": "a quantile (MIN, MAX, MEDIAN)", "var": "VAR", "stddev": "STDDEV"}.get(func, func.upper())
        raise UnsupportedQueryError(
            f"{label} of the {col.temporal} column {name!r} is not supported: dpmagic releases counts over dates",
            hint=f"count by period (SELECT DATE_TRUNC('month', {name}) AS m, COUNT(*) … GROUP BY m) or filter on it",
        )
    if clamp is not None and col.is_int and not all(math.isinf(b) or float(b).is_integer() for b in clamp):
        raise QueryTypeError(
            f"the clamp bounds of int column {name!r} must be whole numbers, got {clamp[0]:g}, {clamp[1]:g}"
        )
    if clamp is not None:
        lo, hi = max(clamp[0], float(col.lower)), min(clamp[1], float(col.upper))
        if lo > hi:
            lo = hi = min(max(clamp[0], float(col.lower)), float(col.upper))
        clamp = None if (lo, hi) == (float(col.lower), float(col.upper)) else (lo, hi)
    return Aggregate(func, name, "", clamp, param)


def fraction_value(node: exp.Expr | None, where: str) -> float:
    if node is None:
        raise UnsupportedQueryError(f"{where} needs a fraction p in [0, 1]")
    try:
        v = number_value(node)
    except QueryError:
        raise UnsupportedQueryError(f"{where} takes a constant fraction p in [0, 1], not {node.sql()!r}") from None
    if not 0.0 <= v <= 1.0:
        raise QueryError(f"{where}: the fraction p must be in [0, 1], got {v:g}")
    return float(v)


def number_value(node: exp.Expr) -> float:
    neg = False
    while isinstance(node, (exp.Paren, exp.Neg)):
        if isinstance(node, exp.Neg):
            neg = not neg
        node = node.this
    if isinstance(node, exp.Cast):
        return (-1 if neg else 1) * number_value(node.this)
    if not (isinstance(node, exp.Literal) and not node.is_string):
        raise QueryError(f"{node.sql()!r} is not a number")
    v = float(node.this)
    return -v if neg else v


def clamped_column(arg: exp.Expr, schema: Schema, func: str) -> tuple[str, tuple[float, float] | None]:
    """``col``, ``CLAMP(col, lo, hi)``, ``LEAST(GREATEST(col, lo), hi)`` (either order) → (column, clamp)."""
    while isinstance(arg, exp.Paren):
        arg = arg.this
    if isinstance(arg, exp.Cast):
        return clamped_column(arg.this, schema, func)
    if isinstance(arg, exp.Column):
        return resolve_column(arg, schema), None
    if isinstance(arg, exp.Literal) and arg.is_string:
        raise UnsupportedQueryError(
            f"{func.upper()}({arg.sql()}): single quotes make the string {arg.this!r}, not a column",
            hint=f'name the column without quotes or in double quotes: {func.upper()}({arg.this}) or {func.upper()}("{arg.this}")',
        )
    if isinstance(arg, exp.Anonymous) and str(arg.this).upper() == "CLAMP" and len(arg.expressions) == 3:
        inner, lo, hi = arg.expressions
        name, c = clamped_column(inner, schema, func)
        lo_v, hi_v = number_value(lo), number_value(hi)
        if lo_v > hi_v:
            raise QueryError(f"CLAMP({name}, {lo_v:g}, {hi_v:g}): the lower bound exceeds the upper bound")
        return name, meet_clamps(c, (lo_v, hi_v))
    if isinstance(arg, (exp.Least, exp.Greatest)):
        operands = [arg.this, *arg.expressions]
        inner = [o for o in operands if columns_of(o)]
        consts = [o for o in operands if not columns_of(o)]
        if len(inner) == 1 and consts:
            name, c = clamped_column(inner[0], schema, func)
            vals = [number_value(o) for o in consts]
            bound = (-_INF, min(vals)) if isinstance(arg, exp.Least) else (max(vals), _INF)
            return name, meet_clamps(c, bound)
    raise UnsupportedQueryError(
        f"{func.upper()}({arg.sql()}) is not supported: aggregate a column, optionally clamped with CLAMP(col, lo, hi) "
        "or LEAST(GREATEST(col, lo), hi)"
        + (
            ", or (SUM / AVG / VAR / STDDEV) an expression of numeric columns with + - * ABS LEAST GREATEST CASE: "
            "SUM(a + b), AVG(price * quantity); a division or another function of a column is not"
            if func in _DERIVABLE
            else ""
        )
    )


def meet_clamps(a: tuple[float, float] | None, b: tuple[float, float]) -> tuple[float, float]:
    if a is None:
        return b
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    if lo > hi:  # clamping into an empty range: every value becomes the same bound
        lo = hi = min(max(a[0], b[0]), b[1]) if b[1] < a[0] else b[0]
    return lo, hi
