"""Columns, literals and value sets on the declared domain (the SQL translation's lowest layer).

Resolving a column name against the schema, converting a literal to the column's type (one clear error for a
typo), and the value set of a comparison, an IN list, a range or an enumerated single-column expression —
always over the *declared* domain, never the rows.  Used by :mod:`.where`, :mod:`.groups` and :mod:`.sql`.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlglot import exp

from dpmagic.domain.schema import CategoricalColumn, Column, NumericColumn, Schema
from dpmagic.domain.sets import CategorySet, Interval, IntervalSet, ValueSet, empty_set
from dpmagic.errors import QueryError, QueryTypeError, UnknownColumnError, UnsupportedQueryError
from dpmagic.query.evaluate import EvalError, evaluate

__all__ = [
    "MAX_ENUMERATION",
    "domain_values",
    "domain_array",
    "set_of_values",
    "enumerate_domain",
    "fix_dashed_columns",
    "resolve_column",
    "literal_value",
    "check_value_type",
    "check_declared",
    "int_set",
    "is_literal",
    "is_column",
    "column_of",
    "points_set",
    "half_line",
    "range_set",
    "interval_set",
    "comparison_set",
]

_INF = math.inf


#: the largest integer domain a single-column expression is evaluated on (to turn it into a set or bins)
MAX_ENUMERATION = 2_000_000


def domain_values(col: Column) -> list[Any] | None:
    if isinstance(col, CategoricalColumn):
        return list(col.values)
    if col.is_int and int(col.upper) - int(col.lower) + 1 <= MAX_ENUMERATION:
        return list(range(int(col.lower), int(col.upper) + 1))
    return None


def domain_array(col: Column, values: list[Any]) -> np.ndarray:
    if isinstance(col, CategoricalColumn) and not col.is_numeric_valued:
        a = np.empty(len(values), dtype=object)
        a[:] = values
        return a
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        return np.array(values, dtype=np.int64)
    return np.array(values, dtype=float)


def set_of_values(col: Column, members: list[Any]) -> ValueSet:
    if isinstance(col, CategoricalColumn):
        return CategorySet.of_values(col, members) if members else empty_set(col)
    return IntervalSet.of(col, [Interval(float(v), float(v)) for v in members]) if members else empty_set(col)


def enumerate_domain(expr: exp.Expr, col: Column, schema: Schema) -> tuple[list[Any], np.ndarray] | None:
    values = domain_values(col)
    if values is None:
        return None
    arr = domain_array(col, values)
    try:
        out = evaluate(expr, {col.name: arr}, len(values), lambda c: resolve_column(c, schema))
    except EvalError as exc:
        raise UnsupportedQueryError(str(exc)) from None
    return values, out


def fix_dashed_columns(subs: list[exp.Sub], schema: Schema) -> None:
    """Rewrite ``marital - status`` (how unquoted ``marital-status`` parses) into the declared column."""

    def dashed(e: exp.Expr) -> str | None:
        if isinstance(e, exp.Column) and not e.table:
            return e.name
        if isinstance(e, exp.Sub):
            left, right = dashed(e.this), dashed(e.expression)
            if left is not None and right is not None:
                return f"{left}-{right}"
        return None

    for node in subs:  # in walk order, collected before any replacement (as ``list(tree.find_all(exp.Sub))``)
        name = dashed(node)
        if name is not None and name in schema:
            node.replace(exp.column(exp.to_identifier(name, quoted=True)))


def resolve_column(col: exp.Column, schema: Schema) -> str:
    name = col.name
    if name in schema:
        return name
    matches = [c for c in schema.names if c.lower() == name.lower()]
    if len(matches) == 1:
        return matches[0]
    if col.this is not None and getattr(col.this, "quoted", False):
        raise UnknownColumnError(
            f'unknown column "{name}": double quotes name a column',
            hint=f"string literals take single quotes: '{name}'",
        )
    close = [c for c in schema.names if name.lower() in c.lower() or c.lower() in name.lower()]
    hint = f"did you mean {close[0]!r}?" if close else f"declared columns: {', '.join(schema.names)}"
    raise UnknownColumnError(f"unknown column {name!r}", hint=hint)


def literal_value(node: exp.Expr, column: Column) -> Any:
    if isinstance(node, exp.Paren):
        return literal_value(node.this, column)
    negate = False
    if isinstance(node, exp.Neg):
        negate, node = True, node.this
    if isinstance(node, exp.Literal):
        if node.is_string:
            if negate:
                raise QueryTypeError(f"cannot negate the string {node.this!r}")
            value: Any = node.this
        else:
            text = node.this
            try:
                value = int(text)
            except ValueError:
                try:
                    value = float(text)
                except ValueError:
                    raise QueryError(f"{text!r} is not a valid number") from None
            if negate:
                value = -value
    elif isinstance(node, exp.Null):
        raise UnsupportedQueryError(f"NULL comparisons on {column.name!r} are not supported (the domain has no NULLs)")
    elif isinstance(node, exp.Boolean):
        raise QueryTypeError(f"boolean literal {node.sql()} cannot be compared with column {column.name!r}")
    elif isinstance(node, exp.Column):
        raise UnsupportedQueryError(
            f"comparing two columns ({column.name!r} and {node.name!r}) is not supported: compare a column with literals"
        )
    else:
        raise UnsupportedQueryError(f"{node.sql()!r} is not a literal value")
    if isinstance(column, NumericColumn) and column.temporal is not None:
        return _temporal_literal(value, column)
    if isinstance(value, str) and isinstance(column, CategoricalColumn) and column.is_numeric_valued:
        value = _numeric_category(value, column)
    elif isinstance(value, str) and isinstance(column, NumericColumn):
        value = _numeric_text(value, column)
    check_value_type(value, column)
    return value


#: a quoted number read as the number it writes: a SQL numeric literal exactly (no spaces, signs once, no
#: ``inf`` / ``nan`` / hex / digit separators, which Python's ``float`` would accept)
_NUMBER_TEXT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def _numeric_text(text: str, column: NumericColumn) -> Any:
    """A quoted number compared with an int or float column (``"education-num" = '13'``): the number it writes
    when the whole string is a SQL numeric literal (read as the unquoted literal is: an int when it has no point
    or exponent), with a :class:`~dpmagic.query.regions.QueryNoteWarning` saying so (the parser puts it in the
    answer's notes); otherwise the string, refused by :func:`check_value_type` with its hint."""
    from dpmagic.query.regions import note

    if not _NUMBER_TEXT.fullmatch(text):
        return text
    number: int | float = int(text) if text.lstrip("+-").isdigit() else float(text)
    if not math.isfinite(number):
        return text
    shown = f'"{column.name}"' if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", column.name) else column.name
    note(
        f"'{text}' was read as the number {number!r}: column {column.name!r} is {column.kind} "
        f"(write {shown} = {number!r}, without quotes)",
        stacklevel=2,
    )
    return number


def _temporal_literal(value: Any, column: NumericColumn) -> int:
    """A literal compared with a date / timestamp column: an ISO string (``'2024-01-31'``, ``DATE '…'``) as the
    column's integer; a number is refused (day numbers and microseconds are dpmagic's own representation)."""
    from dpmagic.domain.temporal import parse_value

    assert column.temporal is not None
    if not isinstance(value, str):
        raise QueryTypeError(
            f"column {column.name!r} is a {column.temporal}; compare it with a quoted ISO {column.temporal}, not "
            f"the number {value!r}",
            hint=f"e.g. {column.name} >= '{column.show(column.lower)}'",
        )
    return parse_value(value, column.temporal, what=f"the {column.temporal} literal")


def _numeric_category(text: str, column: CategoricalColumn) -> Any:
    """A quoted number compared with a column of numeric categories (``educ = '8'``): the declared value it
    names when exactly one declared value equals it, with a :class:`~dpmagic.query.regions.QueryNoteWarning`
    saying so; otherwise the string (refused by :func:`check_value_type` with its hint)."""
    from dpmagic.query.regions import note

    try:
        number = float(text.strip())
    except ValueError:
        return text
    matches = [v for v in column.values if not isinstance(v, str) and v == number]
    if len(matches) != 1:
        return text
    note(
        f"'{text}' was read as the number {matches[0]!r}: column {column.name!r} has numeric categories "
        f"(write {column.name} = {matches[0]!r}, without quotes)",
        stacklevel=2,
    )
    return matches[0]


def check_value_type(value: Any, column: Column) -> None:
    """A string compared with a numeric column (or a number with a string one) is a typo: one error that says
    how to write the value (quoted digits lose their quotes; a word is not a number)."""
    if isinstance(column, NumericColumn):
        if isinstance(value, str):
            raise QueryTypeError(
                f"column {column.name!r} is {column.kind}; it cannot be compared with the string {value!r}",
                hint=_number_hint(value, column.name, f"numbers from {column.lower:g} to {column.upper:g}"),
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise QueryTypeError(f"literal {value!r} for column {column.name!r} is not finite")
        return
    numeric = column.is_numeric_valued
    if numeric and isinstance(value, str):
        kinds = sorted({type(v).__name__ for v in column.values})
        raise QueryTypeError(
            f"column {column.name!r} has numeric categories ({'/'.join(kinds)}); compare it with numbers, "
            f"not the string {value!r}",
            hint=_number_hint(value, column.name, f"the values {_listing(column.values)}"),
        )
    if not numeric and not isinstance(value, str):
        raise QueryTypeError(f"column {column.name!r} has string categories; quote the value: '{value}'")


def _number_hint(text: str, name: str, holds: str) -> str:
    if not _NUMBER_TEXT.fullmatch(text.strip()):
        return f"{name} holds {holds}: compare it with a number, written without quotes"
    return f"write {name} = {text.strip()} (no quotes)"


def _listing(values: Sequence[Any], most: int = 8) -> str:
    shown = ", ".join(repr(v) for v in values[:most])
    return shown + (f", … ({len(values)} in all)" if len(values) > most else "")


def check_declared(value: Any, column: Column) -> None:
    """A string compared with a categorical column by =, <>, IN or NOT IN that is not one of its declared
    categories but differs from one only by case or a few letters ('female' for 'Female', 'Whit' for 'White') is
    a typo: refused, naming the declared value, before anything is charged.

    Any other undeclared value stays a valid predicate that matches no row (the empty-region warning of
    :mod:`dpmagic.query.regions` says so): there is nothing to suggest."""
    if not isinstance(column, CategoricalColumn) or not isinstance(value, str) or value in column.values:
        return
    strings = [v for v in column.values if isinstance(v, str)]
    same = [v for v in strings if v.casefold() == value.casefold()]
    close = same or difflib.get_close_matches(value, strings, n=2, cutoff=0.75)
    if not close:
        return
    raise QueryTypeError(
        f"{value!r} is not a declared category of column {column.name!r}: no row has this value",
        hint=f"did you mean {' or '.join(repr(v) for v in close)}?"
        + (" (categories are case-sensitive)" if same else ""),
    )


def int_set(col: NumericColumn, members: list[Any]) -> ValueSet:
    """A set of declared integers as a union of closed intervals (runs merged)."""
    runs: list[list[Any]] = []  # [first, last] of each run of consecutive members
    for v in members:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    ivs = [Interval(float(first), float(last)) for first, last in runs]
    return IntervalSet.of(col, ivs) if ivs else empty_set(col)


def is_literal(node: exp.Expr) -> bool:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Neg):
        node = node.this
    return isinstance(node, (exp.Literal, exp.Null))


def is_column(node: exp.Expr) -> bool:
    while isinstance(node, exp.Paren):
        node = node.this
    return isinstance(node, exp.Column)


def column_of(node: exp.Expr, schema: Schema, where: str) -> tuple[str, Column]:
    if isinstance(node, exp.Paren):
        return column_of(node.this, schema, where)
    if not isinstance(node, exp.Column):
        raise UnsupportedQueryError(f"the left side of {where} must be a column, not {node.sql()!r}")
    name = resolve_column(node, schema)
    return name, schema[name]


def points_set(col: Column, values: list[Any]) -> ValueSet:
    if isinstance(col, CategoricalColumn):
        return CategorySet.of_values(col, values)
    # literals stay exact Python numbers: IntervalSet.of keeps ints exact on int columns (no double round
    # trip, so ``ts = 1700000000000000001`` is that integer) and makes doubles of them on float columns
    return IntervalSet.of(col, [Interval(v, v) for v in values])


def half_line(col: Column, op: str, x: Any) -> ValueSet:
    iv = {
        "<": Interval(-_INF, x, True, False),
        "<=": Interval(-_INF, x, True, True),
        ">": Interval(x, _INF, False, True),
        ">=": Interval(x, _INF, True, True),
    }[op]
    return interval_set(col, iv)


def range_set(col: Column, lo: Any, hi: Any) -> ValueSet:
    if isinstance(col, CategoricalColumn) and not col.is_numeric_valued:
        raise UnsupportedQueryError(
            f"BETWEEN on categorical column {col.name!r} with string values is not supported; use IN (...)"
        )
    return interval_set(col, Interval(lo, hi))


def interval_set(col: Column, iv: Interval) -> ValueSet:
    if isinstance(col, NumericColumn):
        return IntervalSet.of(col, [iv])
    # numeric-valued categories: the declared values inside the interval
    members = [i for i, v in enumerate(col.values) if iv.contains(v)]  # exact comparisons of Python numbers
    s = CategorySet.of_indices(col, members)
    return s if members else empty_set(col)


@functools.lru_cache(maxsize=4096)
def comparison_set(col: Column, op: str, kind: type, value: Any) -> ValueSet:
    """The value set of ``col op value`` (memoised: logs repeat their comparisons; value sets are immutable;
    ``kind`` keeps ``1``, ``1.0`` and ``True`` apart)."""
    if op in ("=", "!="):
        s = points_set(col, [value])
        return s.complement() if op == "!=" else s
    return half_line(col, op, value)
