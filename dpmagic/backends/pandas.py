"""Exact evaluation of a :class:`~dpmagic.query.model.Query` on a validated pandas DataFrame.

The backend is the only place that reads rows.  It returns exact per-cell aggregates for the cells of the
declared GROUP BY keys (every combination of declared values, zero-filled), which the session then
perturbs.  It is called only after the accountant has charged the query.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd
from sqlglot import exp

from dpmagic.aggregates.common import exact_cell_sums
from dpmagic.aggregates.rowvalues import derived_values
from dpmagic.domain.schema import CategoricalColumn, NumericColumn, Schema
from dpmagic.domain.sets import Box, CategorySet, IntervalSet
from dpmagic.errors import DataValidationError
from dpmagic.noise.calibration import MAX_ROWS, quantise
from dpmagic.noise.sensitivity import clamp_bounds
from dpmagic.query.derived import with_derived
from dpmagic.query.model import Filter, GroupKey, Query
from dpmagic.releases.backend import Backend
from dpmagic.releases.cells import Cells  # re-exported: the backends' result type lives in dpmagic.releases.cells

__all__ = ["PandasBackend", "Cells"]


def too_many_rows_error() -> DataValidationError:
    """The one error of a table longer than :data:`~dpmagic.noise.calibration.MAX_ROWS` (every backend)."""
    return DataValidationError(
        f"the data has more than {MAX_ROWS:,} rows, the most dpmagic sums exactly",
        hint="split the table into parts of at most 2^32 rows",
    )


class PandasBackend(Backend):
    """Evaluates queries on a DataFrame already validated against ``schema``."""

    row_expressions = True

    def __init__(self, df: pd.DataFrame, schema: Schema) -> None:
        if len(df) > MAX_ROWS:
            raise too_many_rows_error()
        if schema.person_unit is not None:
            # a person-level table: the invariant columns checked, then each person's kept rows, once
            # (docs/people.md §1; the engines run the same truncation in SQL)
            from dpmagic.backends.truncate import invariant_error, truncate_frame, varying_invariant_columns

            if schema.person_unit.invariant_mode == "check":
                varying = varying_invariant_columns(df, schema)
                if varying:
                    raise invariant_error(varying)
            df = truncate_frame(df, schema)
        self.df = df
        self.schema = schema
        self._codes: dict[str, np.ndarray] = {}

    def mask(self, box: Box) -> np.ndarray:
        """Boolean mask of the rows inside ``box``.

        Int columns are validated int64 arrays and int intervals have exact Python-int ends, which numpy
        compares exactly (no double round trip), so the mask agrees with :meth:`Box.contains_row` and the
        overlap engine on every value, also beyond 2^53.
        """
        m = np.ones(len(self.df), dtype=bool)
        if box.is_empty():
            return np.zeros(len(self.df), dtype=bool)
        for name, s in box.constraints.items():
            if isinstance(s, CategorySet):
                codes = self._category_codes(name)
                m &= s.to_mask()[codes]
            elif isinstance(s, IntervalSet):
                col = self.df[name].to_numpy()
                inside = np.zeros(len(col), dtype=bool)
                for iv in s.intervals:
                    lo_ok = col >= iv.lo if iv.lo_closed else col > iv.lo
                    hi_ok = col <= iv.hi if iv.hi_closed else col < iv.hi
                    inside |= lo_ok & hi_ok
                m &= inside
        return m

    def _category_codes(self, name: str) -> np.ndarray:
        codes = self._codes.get(name)
        if codes is None:
            col = self.schema[name]
            assert isinstance(col, CategoricalColumn)
            codes = pd.Categorical(self.df[name], categories=list(col.values)).codes.astype(np.int64)
            self._codes[name] = codes
        return codes

    def filter_mask(self, f: Filter) -> np.ndarray:
        """Boolean mask of the rows an exact filter (AND / OR / NOT of boxes) selects."""
        if f.op == "box":
            assert f.box is not None
            return self.mask(f.box)
        masks = [self.filter_mask(p) for p in f.parts]
        if f.op == "and":
            return np.logical_and.reduce(masks)
        if f.op == "or":
            return np.logical_or.reduce(masks)
        return ~masks[0]

    def row_mask(self, query: Query) -> np.ndarray:
        """Boolean mask of the rows the query's WHERE selects: its box, and its exact filter when the box is only
        a cover (an OR or NOT across columns)."""
        mask = self.mask(query.where)
        if query.filter is not None:
            mask &= self.filter_mask(query.filter)
        return mask

    def _group_codes(self, g: GroupKey) -> np.ndarray:
        """Each row's cell index along one GROUP BY key (its declared value or bin; bins cover the domain)."""
        if g.sets is None:
            return self._category_codes(g.column)
        codes = np.full(len(self.df), -1, dtype=np.int64)
        for i, s in enumerate(g.sets):
            codes[self.mask(Box({g.column: s})) & (codes < 0)] = i
        return codes

    def evaluate(
        self,
        query: Query,
        units: Mapping[str, float] | None = None,
        *,
        extended: Mapping[str, Any] | None = None,
    ) -> Cells:
        """Exact per-cell COUNT and SUMs of ``query`` (cells = declared GROUP BY keys / bins).

        Float sums are computed as integers in the quantum ``units[agg.sum_key]`` (a power of two; see
        :func:`dpmagic.noise.calibration.quantise`); an analyst's clamp is applied to the values first, and its bounds
        are the quantisation bounds; with ``units`` given, only the raw sums it names are computed (an AVG's sum is
        a centred quantity).  ``extended`` holds the plans of the aggregates with their own releases and of the
        centred quantities (:func:`dpmagic.releases.plan.plan_noise`), whose exact inputs go to ``Cells.extra``.  The work
        is vectorised over *every* row of the frame (rows outside the WHERE filter go to a discarded bin), so it
        does not depend on how many rows the box holds.
        """
        mask = self.row_mask(query)
        sizes = [g.size for g in query.groups]
        n_cells = int(np.prod(sizes)) if sizes else 1
        if query.groups:
            codes = [self._group_codes(g) for g in query.groups]
            # bins cover the declared domain; a row in none (impossible for validated data) is discarded
            outside = np.logical_or.reduce([c < 0 for c in codes])
            cell = np.ravel_multi_index([np.maximum(c, 0) for c in codes], sizes).astype(np.int64)
            mask &= ~outside
            keys = list(itertools.product(*[g.labels for g in query.groups]))
        else:
            cell = np.zeros(len(self.df), dtype=np.int64)
            keys = [()]
        cell = np.where(mask, cell, n_cells)  # the discarded bin
        counts = np.bincount(cell, minlength=n_cells + 1)[:n_cells].astype(np.int64)
        sums: dict[str, list[int]] = {}
        schema = with_derived(self.schema, query)
        column = self._columns(query)
        for agg in query.aggregates:
            if agg.column is None or not agg.is_basic or agg.sum_key in sums:
                continue
            col = schema[agg.column]
            assert isinstance(col, NumericColumn)
            if units is not None and agg.sum_key not in units and not col.is_int:
                continue  # a float column's sum not planned as a raw sum (an AVG's sum is a centred quantity)
            raw = column(agg.column)
            lo, hi = clamp_bounds(col, agg.clamp)  # the declared bounds, or the analyst's clamp inside them
            if col.is_int:
                values = raw.astype(np.int64)
                if agg.clamp is not None:
                    values = np.clip(values, np.int64(lo), np.int64(hi))
                bound: int | None = max(abs(int(lo)), abs(int(hi)))  # validated (or clipped) values lie in [lo, hi]
            else:
                unit = (units or {}).get(agg.sum_key)
                if unit is None:
                    raise ValueError(f"no quantum given for the float sum {agg.sum_key!r}")
                values = quantise(raw, unit, float(lo), float(hi))  # clamped into [lo, hi], then quantised
                top = max(abs(float(lo)), abs(float(hi))) / unit  # |rint(clamped / unit)| is at most ⌈top⌉
                bound = math.ceil(top) + 1 if math.isfinite(top) else None
            sums[agg.sum_key] = exact_cell_sums(cell, values, n_cells, bound)
        extra: dict[str, Any] = {}
        if extended:
            from dpmagic.aggregates import exact_extended

            extra = exact_extended(extended, column, cell, n_cells)
        return Cells(keys=keys, counts=counts, sums=sums, extra=extra)

    def _columns(self, query: Query) -> Callable[[str], np.ndarray]:
        """A column's values by name: a declared column of the frame, or a derived column of the query (a row
        expression's per-row value clamped into its enclosure: :func:`dpmagic.aggregates.rowvalues.derived_values`,
        computed once per query)."""
        derived = dict(query.derived)
        made: dict[str, np.ndarray] = {}

        def get(name: str) -> np.ndarray:
            if name not in derived:
                return self.df[name].to_numpy()
            if name not in made:
                r = derived[name]
                cols = {c.name: self.df[c.name].to_numpy() for c in r.node.find_all(exp.Column)}
                made[name] = derived_values(r, cols)
            return made[name]

        return get
