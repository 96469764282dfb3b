"""A toy backend in one module: a pure-Python list of rows (the conformance suite's proof that a new backend is
one module implementing :class:`dpmagic.releases.backend.Backend`).

Binding validates with the declared schema (:meth:`Schema.validate`: the same errors as every backend), then
keeps the rows as dicts.  ``evaluate`` walks every row once whatever the box holds: membership by the domain's own
definition (:meth:`Box.contains_row`, the filter's AND / OR / NOT), the cell by the declared values or bins,
counts and sums in Python ints (float values quantised per row by :func:`dpmagic.noise.calibration.quantise`);
the aggregate units' inputs from their own :meth:`~dpmagic.aggregates.registry.AggregateUnit.exact` over the
columns and the cells (rows outside the filter in the discarded bin ``n_cells``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from sqlglot import exp

from dpmagic.aggregates.rowvalues import derived_values
from dpmagic.domain.schema import CategoricalColumn, NumericColumn, Schema
from dpmagic.noise.calibration import quantise
from dpmagic.noise.sensitivity import clamp_bounds
from dpmagic.query.derived import with_derived
from dpmagic.query.model import Filter, Query
from dpmagic.releases.backend import Backend
from dpmagic.releases.cells import Cells


def _passes(f: Filter, row: Mapping[str, Any]) -> bool:
    if f.op == "box":
        assert f.box is not None
        return not f.box.is_empty() and f.box.contains_row(row)
    if f.op == "and":
        return all(_passes(p, row) for p in f.parts)
    if f.op == "or":
        return any(_passes(p, row) for p in f.parts)
    return not _passes(f.parts[0], row)


class ToyBackend(Backend):
    """Rows as a list of dicts; every query walks all of them.  A row expression's derived column is each row's
    value from :func:`dpmagic.aggregates.rowvalues.derived_values` (clamped into its public bounds)."""

    row_expressions = True

    def __init__(self, df: pd.DataFrame, schema: Schema, *, out_of_range: str = "error") -> None:
        self.schema = schema
        self.rows: list[dict[str, Any]] = schema.validate(df, out_of_range=out_of_range).to_dict("records")
        self.rows_walked = 0  # the work done, for the conformance suite's structural check

    def _cell(self, query: Query, row: Mapping[str, Any]) -> int | None:
        cell = 0
        for g in query.groups:
            if g.sets is None:
                col = self.schema[g.column]
                assert isinstance(col, CategoricalColumn)
                i = col.index_of(row[g.column])
            else:
                i = next((j for j, s in enumerate(g.sets) if s.contains(row[g.column])), None)
            if i is None:
                return None
            cell = cell * g.size + i
        return cell

    def evaluate(
        self, query: Query, units: Mapping[str, float] | None = None, *, extended: Mapping[str, Any] | None = None
    ) -> Cells:
        n = query.n_cells
        keys = list(itertools.product(*[g.labels for g in query.groups])) if query.groups else [()]
        cells: list[int] = []
        for row in self.rows:
            self.rows_walked += 1
            inside = not query.where.is_empty() and query.where.contains_row(row)
            if inside and query.filter is not None:
                inside = _passes(query.filter, row)
            c = self._cell(query, row) if inside else None
            cells.append(n if c is None else c)
        counts = np.zeros(n, dtype=np.int64)
        for c in cells:
            if c < n:
                counts[c] += 1
        rows, schema = self.rows, with_derived(self.schema, query)
        if query.derived:  # each derived column added to a copy of every row
            rows = [dict(r) for r in self.rows]
            for name, r in query.derived:
                cols = {c.name: np.asarray([row[c.name] for row in self.rows]) for c in r.node.find_all(exp.Column)}
                for row, v in zip(rows, derived_values(r, cols), strict=True):
                    row[name] = v.item()
        sums: dict[str, list[int]] = {}
        for agg in query.aggregates:
            if agg.column is None or not agg.is_basic or agg.sum_key in sums:
                continue
            col = schema[agg.column]
            assert isinstance(col, NumericColumn)
            if units is not None and agg.sum_key not in units and not col.is_int:
                continue  # a float sum not planned as a raw sum (an AVG's sum is centred)
            lo, hi = clamp_bounds(col, agg.clamp)
            total = [0] * n
            for row, c in zip(rows, cells, strict=True):
                if c == n:
                    continue
                v = row[agg.column]
                if col.is_int:
                    total[c] += min(max(int(v), int(lo)), int(hi))
                else:
                    unit = (units or {})[agg.sum_key]
                    total[c] += int(quantise(np.asarray([float(v)]), unit, float(lo), float(hi))[0])
            sums[agg.sum_key] = total
        cell_arr = np.asarray(cells, dtype=np.int64)
        extra = {
            alias: u.unit.exact(u, np.asarray([r[str(u.agg.column)] for r in rows]), cell_arr, n)
            for alias, u in (extended or {}).items()
        }
        return Cells(keys=keys, counts=counts, sums=sums, extra=extra)
