"""Dates and timestamps in SQL: typed literals, calendar GROUP BY keys and predicates on calendar fields.

A ``date`` / ``timestamp`` column is an ``int`` column of day numbers / microseconds
(:mod:`dpmagic.domain.temporal`), so its coverage and sensitivity are those of any int column.  Here:

* ``DATE '2024-01-01'`` / ``TIMESTAMP '…'`` / ``CAST('…' AS DATE)`` are the string literal they wrap
  (:func:`untyped_literals`); a string compared with a temporal column is read as an ISO date / timestamp
  (:func:`dpmagic.query.domain.literal_value`);
* ``EXTRACT(f FROM d)`` (``YEAR(d)``, ``MONTH(d)`` …) and ``DATE_TRUNC(unit, d)`` as GROUP BY keys: one bin per
  calendar value / period inside the declared bounds (public keys), each the exact integer ranges of the
  column that give it (:func:`temporal_bins`), so the backends group rows with the same value sets as a
  binned GROUP BY (``FLOOR(x / 10)``) and the keys are identical on every engine;
* the same expressions compared with constants in WHERE (``EXTRACT(YEAR FROM d) = 2024``): the union of the
  bins whose key satisfies the comparison (:func:`temporal_atom`).
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from dpmagic.domain.schema import Column, NumericColumn, Schema
from dpmagic.domain.sets import Box, Interval, IntervalSet, ValueSet, empty_set
from dpmagic.domain.temporal import EXTRACT_FIELDS, TRUNC_UNITS, extract_bins, parse_value, trunc_bins
from dpmagic.errors import QueryTypeError, UnsupportedQueryError

__all__ = ["untyped_literals", "temporal_call", "temporal_bins", "temporal_atom", "is_temporal"]

_FUNCTIONS: dict[type[exp.Expr], str] = {
    exp.Year: "year",
    exp.Quarter: "quarter",
    exp.Month: "month",
    exp.Day: "day",
    exp.DayOfMonth: "day",
    exp.Hour: "hour",
    exp.Minute: "minute",
}
_TYPES = (
    exp.DataType.Type.DATE,
    exp.DataType.Type.TIMESTAMP,
    exp.DataType.Type.TIMESTAMPNTZ,
    exp.DataType.Type.DATETIME,
)


def is_temporal(col: Column) -> bool:
    return isinstance(col, NumericColumn) and col.temporal is not None


def untyped_literals(node: exp.Expr, *, copy: bool = True) -> exp.Expr:
    """``node`` with every typed date / timestamp literal (``DATE '…'``, ``CAST('…' AS TIMESTAMP)``) replaced by
    its string: compared with a temporal column it is read as that column's type.  ``copy=False`` rewrites ``node``
    in place (for a caller that owns it)."""

    def strip(e: exp.Expr) -> exp.Expr:
        if (
            isinstance(e, exp.Cast)
            and isinstance(e.this, exp.Literal)
            and e.this.is_string
            and e.to is not None
            and e.to.this in _TYPES
        ):
            return exp.Literal.string(e.this.this)
        return e

    return node.transform(strip, copy=copy)


def temporal_call(expr: exp.Expr) -> tuple[str, str, exp.Column] | None:
    """``("extract", field, column)`` or ``("trunc", unit, column)`` when ``expr`` is a calendar function of a
    column; None otherwise."""
    while isinstance(expr, exp.Paren):
        expr = expr.this
    if isinstance(expr, exp.Extract) and isinstance(expr.expression, exp.Column):
        return "extract", expr.this.name.lower(), expr.expression
    if type(expr) in _FUNCTIONS and isinstance(expr.this, exp.Column):
        return "extract", _FUNCTIONS[type(expr)], expr.this
    if isinstance(expr, (exp.DateTrunc, exp.TimestampTrunc)) and isinstance(expr.this, exp.Column):
        unit = expr.args.get("unit")
        name = unit.name.lower() if isinstance(unit, (exp.Literal, exp.Var)) else ""
        return "trunc", name, expr.this
    if isinstance(expr, exp.DayOfWeek) and isinstance(expr.this, exp.Column):
        raise UnsupportedQueryError(
            f"{expr.sql()}: engines number the days of the week differently",
            hint="write EXTRACT(DOW FROM col) (0 = Sunday … 6) or EXTRACT(ISODOW FROM col) (1 = Monday … 7)",
        )
    return None


def temporal_bins(kind: str, what: str, col: NumericColumn, sql: str) -> list[tuple[Any, ValueSet]]:
    """The bins of ``EXTRACT(what FROM col)`` / ``DATE_TRUNC(what, col)`` over the column's declared bounds: (key,
    the set of the column's integers giving it), keys in increasing order; from the schema alone."""
    if col.temporal is None:
        raise QueryTypeError(
            f"{sql}: column {col.name!r} is {col.kind}, not a date or timestamp",
            hint='declare it with "type": "date" (or "timestamp") and ISO bounds in the schema',
        )
    lo, hi = int(col.lower), int(col.upper)
    try:
        if kind == "extract":
            if what not in EXTRACT_FIELDS:
                raise QueryTypeError(
                    f"{sql}: EXTRACT({what.upper()} …) is not supported", hint=f"fields: {', '.join(EXTRACT_FIELDS)}"
                )
            got: list[tuple[Any, list[tuple[int, int]]]] = list(extract_bins(what, lo, hi, col.temporal))
        else:
            if what not in TRUNC_UNITS:
                raise QueryTypeError(
                    f"{sql}: DATE_TRUNC unit {what!r} is not supported", hint=f"units: {', '.join(TRUNC_UNITS)}"
                )
            got = list(trunc_bins(what, lo, hi, col.temporal))
    except QueryTypeError as exc:
        if exc.args and str(exc).startswith(sql):
            raise
        raise QueryTypeError(f"{sql}: {exc}", hint=exc.hint) from None
    return [(label, IntervalSet.of(col, [Interval(a, b) for a, b in ranges])) for label, ranges in got]


def column_bins(col: NumericColumn) -> list[tuple[Any, ValueSet]]:
    """GROUP BY a date column itself: one bin per declared day, its key the ISO date."""
    assert col.temporal is not None
    return [(col.show(v), IntervalSet.of(col, [Interval(v, v)])) for v in range(int(col.lower), int(col.upper) + 1)]


_CMP: dict[type[exp.Expr], str] = {exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def temporal_atom(node: exp.Expr, schema: Schema) -> Box | None:
    """A comparison, IN or BETWEEN of a calendar function of one column with constants (``EXTRACT(YEAR FROM d) =
    2024``, ``MONTH(d) IN (1, 2)``, ``DATE_TRUNC('month', d) >= '2024-03-01'``): the union of the column's bins
    whose key satisfies it, exactly.  None when ``node`` is not of that form."""
    from dpmagic.query.domain import resolve_column

    if type(node) in _CMP:
        left, right, op = node.this, node.expression, _CMP[type(node)]
        if temporal_call(left) is None and temporal_call(right) is not None:
            left, right, op = right, left, _FLIP[op]
        call = temporal_call(left)
        if call is None:
            return None
        tests = [(op, right)]
    elif isinstance(node, exp.In) and temporal_call(node.this) is not None:
        call, tests = temporal_call(node.this), [("in", v) for v in node.expressions]
    elif isinstance(node, exp.Between) and temporal_call(node.this) is not None:
        call, tests = temporal_call(node.this), [(">=", node.args["low"]), ("<=", node.args["high"])]
    else:
        return None
    assert call is not None
    kind, what, column = call
    name = resolve_column(column, schema)
    col = schema[name]
    if not isinstance(col, NumericColumn):
        raise QueryTypeError(f"{node.sql()}: column {name!r} is categorical, not a date or timestamp")
    bins = temporal_bins(kind, what, col, node.sql())
    values = [(op, _constant(v, kind, col, node)) for op, v in tests]
    in_list = [v for op, v in values if op == "in"]

    def keep(label: Any) -> bool:
        if in_list:
            return label in in_list
        return all(_holds(label, op, v) for op, v in values)

    out = empty_set(col)
    for label, s in bins:
        if keep(label):
            out = out.union(s)
    return Box({name: out})


def _constant(node: exp.Expr, kind: str, col: NumericColumn, whole: exp.Expr) -> Any:
    """The constant a calendar key is compared with: a whole number for EXTRACT, a period start (ISO text in the
    keys' form) for DATE_TRUNC."""
    while isinstance(node, exp.Paren):
        node = node.this
    node = untyped_literals(node)
    if not isinstance(node, exp.Literal):
        raise UnsupportedQueryError(f"{whole.sql()}: compare a calendar field with constants, not {node.sql()!r}")
    if kind == "extract":
        if node.is_string:
            raise QueryTypeError(f"{whole.sql()}: EXTRACT gives a number; compare it with {node.this} (no quotes)")
        return float(node.this) if "." in node.this else int(node.this)
    if not node.is_string:
        raise QueryTypeError(f"{whole.sql()}: DATE_TRUNC gives a date; compare it with a quoted ISO date")
    assert col.temporal is not None
    # as the keys write a period start (ISO text, which orders as time does)
    return col.show(parse_value(node.this, col.temporal, what="the constant"))


def _holds(label: Any, op: str, v: Any) -> bool:
    if op == "=":
        return bool(label == v)
    if op == "!=":
        return bool(label != v)
    if op == "<":
        return bool(label < v)
    if op == "<=":
        return bool(label <= v)
    if op == ">":
        return bool(label > v)
    return bool(label >= v)
