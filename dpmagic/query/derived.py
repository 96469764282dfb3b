"""Derived columns: a row expression inside SUM / AVG / VAR / STDDEV (issue 29) aggregated as a numeric column.

``SUM(price * quantity)`` is the SUM of the per-row value v = price · quantity.  The parser validates the
expression and encloses its range over the query's WHERE box (:func:`dpmagic.query.rowexpr.row_expr`: interval
arithmetic from the declared bounds, never the rows), and registers v as a *derived column* of the query
(:attr:`dpmagic.query.model.Query.derived`) whose public bounds are that enclosure [lo, hi].  Every later stage
then treats it as a declared numeric column with bounds [lo, hi]: the sensitivity of its SUM (raw, or centred for
AVG / VAR / STDDEV) is that of a sum of per-row values in [lo, hi] over the query's coverage, at row and person
level alike (:func:`dpmagic.noise.sensitivity.patterns`), which holds because the backends clamp every value into
[lo, hi] before summing (:func:`dpmagic.aggregates.rowvalues.derived_values` /
:func:`~dpmagic.aggregates.rowvalues.derived_sql`, bit-identical across engines).  One release per SUM(expr), as
for a column; nothing about the rows enters the bounds (invariant 1).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from dpmagic.domain.columns import NumericColumn
from dpmagic.domain.schema import Schema

if TYPE_CHECKING:
    from dpmagic.query.model import Query
    from dpmagic.query.rowexpr import RowExpr

__all__ = ["derived_column", "with_derived"]


def derived_column(name: str, r: RowExpr) -> NumericColumn:
    """The numeric column a derived value is aggregated as: int with the exact integer enclosure when computed in
    int64, else float with the enclosure rounded outwards."""
    if r.is_int:
        return NumericColumn(name, "int", int(r.lo), int(r.hi))
    return NumericColumn(name, "float", float(r.lo), float(r.hi))


def with_derived(schema: Schema, query: Query) -> Schema:
    """``schema`` with the query's derived columns added (``schema`` itself when it has none)."""
    if not query.derived:
        return schema
    cols = dict(schema.columns)
    for name, r in query.derived:
        if name not in cols:
            cols[name] = derived_column(name, r)
    return dataclasses.replace(schema, columns=cols)
