"""The per-row value of a row expression inside SUM / AVG (:mod:`dpmagic.query.rowexpr`), computed identically
on every engine: numpy here (the pandas backend), SQL for DuckDB / Spark.

When every column read by the arithmetic is an int column, every constant an integer, and every intermediate
enclosure within ±2⁶² (:attr:`~dpmagic.query.rowexpr.RowExpr.is_int`), v is computed in exact int64 arithmetic and
summed exactly.  Otherwise the columns are read as doubles and v is computed in IEEE double arithmetic, operation
by operation in the tree's order (+, −, × are correctly rounded on every engine; ABS, LEAST, GREATEST and CASE are
exact), then clamped into the enclosure [lo, hi] (exact) and, for a float sum, quantised to the power-of-two
quantum u of the float SUM path (:func:`dpmagic.noise.calibration.quantise`,
:func:`dpmagic.aggregates.sqlexpr.quantise_sql`): the integer per-row values, hence the exact integer sums, are
bit-identical on pandas, DuckDB and Spark (IEEE 754-2019, §5.4: +, −, × correctly rounded).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from sqlglot import exp

from dpmagic.aggregates.sqlexpr import Quantised, as_double, case, clip, col, lit, or_, quantise_sql
from dpmagic.domain.columns import NumericColumn
from dpmagic.domain.schema import Schema
from dpmagic.noise.calibration import quantise
from dpmagic.query.rowexpr import COMPARE, RowExpr, in_values, number, strip

__all__ = ["CategoryEq", "derived_sql", "derived_values", "row_sql", "row_values"]

#: the engine's test ``column = value`` for a categorical column (its coding and collation)
CategoryEq = Callable[[str, str], exp.Expr]


def _refuse(node: exp.Expr, why: str) -> ValueError:
    return ValueError(f"the row expression {node.sql()!r} was not validated: {why}")


def _eval(node: exp.Expr, cols: Mapping[str, np.ndarray], n: int, as_int: bool) -> np.ndarray:
    node = strip(node)
    k = number(node)
    if k is not None:
        return np.full(n, int(k) if as_int else float(k), dtype=np.int64 if as_int else np.float64)
    if isinstance(node, exp.Column):
        return np.asarray(cols[node.name]).astype(np.int64 if as_int else np.float64)
    if isinstance(node, exp.Neg):
        return -_eval(node.this, cols, n, as_int)
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
        a, b = _eval(node.this, cols, n, as_int), _eval(node.expression, cols, n, as_int)
        return a + b if isinstance(node, exp.Add) else (a - b if isinstance(node, exp.Sub) else a * b)
    if isinstance(node, exp.Abs):
        return np.abs(_eval(node.this, cols, n, as_int))
    if isinstance(node, (exp.Least, exp.Greatest)):
        out = _eval(node.this, cols, n, as_int)
        for x in node.expressions:
            v = _eval(x, cols, n, as_int)
            out = np.where(v < out, v, out) if isinstance(node, exp.Least) else np.where(v > out, v, out)
        return out
    if isinstance(node, exp.Cast):
        return _eval(node.this, cols, n, as_int)
    if isinstance(node, exp.Case):
        out = _eval(node.args["default"], cols, n, as_int)
        for when in reversed(node.args.get("ifs") or []):
            out = np.where(_cond(when.this, cols), _eval(when.args["true"], cols, n, as_int), out)
        return out
    raise _refuse(node, "unexpected node")  # pragma: no cover - row_expr validated the tree


def _typed(k: Any, x: np.ndarray) -> int | float:
    """An exact fraction as the int (int columns, whole k) or double the column is compared with."""
    return int(k) if k.denominator == 1 and x.dtype.kind in "iu" else float(k)


def _cond(node: exp.Expr, cols: Mapping[str, np.ndarray]) -> np.ndarray:
    node = strip(node)
    if isinstance(node, exp.Not):
        return ~_cond(node.this, cols)
    if isinstance(node, exp.And):
        return _cond(node.this, cols) & _cond(node.expression, cols)
    if isinstance(node, exp.Or):
        return _cond(node.this, cols) | _cond(node.expression, cols)
    if isinstance(node, exp.In):
        x = np.asarray(cols[strip(node.this).name])
        out = np.zeros(len(x), dtype=bool)
        for k in in_values(node):
            out |= np.asarray(x == (k if isinstance(k, str) else _typed(k, x)), dtype=bool)
        return out
    right = strip(node.expression)
    v: Any = right.this if right.is_string else number(right)
    x = np.asarray(cols[strip(node.this).name])
    if not isinstance(v, str):
        assert v is not None
        v = int(v) if v.denominator == 1 and x.dtype.kind in "iu" else float(v)
    return np.asarray(COMPARE[type(node)](x, v), dtype=bool)


def row_values(r: RowExpr, cols: Mapping[str, np.ndarray], unit: float | None) -> np.ndarray:
    """The int64 per-row values summed: v(x) clamped into [lo, hi] (exact ints when ``r.is_int``), else computed
    in doubles, clamped and quantised to ``unit`` (a power of two)."""
    n = len(next(iter(cols.values()))) if cols else 0
    if r.is_int:
        return np.clip(_eval(r.node, cols, n, True), int(r.lo), int(r.hi)).astype(np.int64)
    assert unit is not None
    return quantise(_eval(r.node, cols, n, False), unit, r.lo, r.hi)


def _sql(node: exp.Expr, schema: Schema, as_int: bool, cat: CategoryEq | None = None) -> exp.Expr:
    node = strip(node)
    k = number(node)
    if k is not None:
        return lit(int(k)) if as_int else lit(float(k))
    if isinstance(node, exp.Column):
        return exp.cast(col(node.name), "BIGINT") if as_int else as_double(col(node.name))
    if isinstance(node, exp.Neg):
        return exp.Neg(this=exp.paren(_sql(node.this, schema, as_int, cat)))
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
        return exp.paren(
            type(node)(
                this=exp.paren(_sql(node.this, schema, as_int, cat)),
                expression=exp.paren(_sql(node.expression, schema, as_int, cat)),
            )
        )
    if isinstance(node, exp.Abs):
        return exp.Abs(this=_sql(node.this, schema, as_int, cat))
    if isinstance(node, (exp.Least, exp.Greatest)):
        out = _sql(node.this, schema, as_int, cat)
        for x in node.expressions:
            v = _sql(x, schema, as_int, cat)
            cmp = exp.LT if isinstance(node, exp.Least) else exp.GT
            out = case([(cmp(this=v, expression=out), v.copy())], out.copy())  # numpy's where(v < out, v, out)
        return out
    if isinstance(node, exp.Cast):
        return _sql(node.this, schema, as_int, cat)
    if isinstance(node, exp.Case):
        whens = [
            (_cond_sql(w.this, schema, cat), _sql(w.args["true"], schema, as_int, cat))
            for w in node.args.get("ifs") or []
        ]
        return case(whens, _sql(node.args["default"], schema, as_int, cat))
    raise _refuse(node, "unexpected node")  # pragma: no cover


def _cond_sql(node: exp.Expr, schema: Schema, cat: CategoryEq | None = None) -> exp.Expr:
    node = strip(node)
    if isinstance(node, exp.Not):
        return exp.Not(this=exp.paren(_cond_sql(node.this, schema, cat)))
    if isinstance(node, (exp.And, exp.Or)):
        return exp.paren(
            type(node)(this=_cond_sql(node.this, schema, cat), expression=_cond_sql(node.expression, schema, cat))
        )
    name = strip(node.this).name
    c = schema[name]
    if isinstance(node, exp.In):
        parts: list[exp.Expr] = []
        for k in in_values(node):
            if isinstance(k, str):
                parts.append(cat(name, k) if cat is not None else exp.EQ(this=col(name), expression=lit(k)))
            else:
                v_in = int(k) if isinstance(c, NumericColumn) and c.is_int and k.denominator == 1 else float(k)
                parts.append(exp.EQ(this=col(name), expression=lit(v_in)))
        return exp.paren(or_(parts))
    right = strip(node.expression)
    if right.is_string and cat is not None:  # a categorical column as the engine holds it (coded, collated)
        eq = cat(name, right.this)
        return eq if isinstance(node, exp.EQ) else exp.Not(this=exp.paren(eq))
    if right.is_string:
        v: Any = right.this
    else:
        k = number(right)
        assert k is not None
        v = int(k) if isinstance(c, NumericColumn) and c.is_int and k.denominator == 1 else float(k)
    return type(node)(this=col(name), expression=lit(v))


def row_sql(r: RowExpr, schema: Schema, unit: float | None) -> Quantised | tuple[exp.Expr, int]:
    """The per-row value as SQL over the normalised view's columns: (clamped BIGINT expression, its bound) when
    ``r.is_int``, else the :class:`~dpmagic.aggregates.sqlexpr.Quantised` value on ``unit`` (the same rounding
    as :func:`row_values`)."""
    if r.is_int:
        return clip(_sql(r.node, schema, True), int(r.lo), int(r.hi)), max(abs(int(r.lo)), abs(int(r.hi)))
    assert unit is not None
    return quantise_sql(_sql(r.node, schema, False), unit, r.lo, r.hi)


def derived_values(r: RowExpr, cols: Mapping[str, np.ndarray]) -> np.ndarray:
    """The derived column a backend adds for ``r`` (:mod:`dpmagic.query.derived`): v(x) clamped into [lo, hi], as
    int64 when ``r.is_int``, else as doubles (the float SUM / centred-sum paths quantise them as any float
    column's values)."""
    n = len(next(iter(cols.values()))) if cols else 0
    if r.is_int:
        return row_values(r, cols, None)
    return np.clip(_eval(r.node, cols, n, False), r.lo, r.hi)


def derived_sql(r: RowExpr, schema: Schema, cat: CategoryEq | None = None) -> exp.Expr:
    """The SQL of :func:`derived_values` over the normalised view's columns (the same values, bit for bit);
    ``cat(name, value)``: the engine's test that categorical column ``name`` holds ``value`` (coded or collated
    columns), else a plain ``=``."""
    if r.is_int:
        return clip(_sql(r.node, schema, True, cat), int(r.lo), int(r.hi))
    return clip(_sql(r.node, schema, False, cat), r.lo, r.hi)
