"""Exact evaluation of a :class:`~dpmagic.query.model.Query` on a validated pandas DataFrame.

The backend is the only place that reads rows.  It returns exact per-cell aggregates for the cells of the
declared GROUP BY keys (every combination of declared values, zero-filled), which the session then
perturbs.  It is called only after the accountant has charged the query.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dpmagic.query.model import Filter, GroupKey, Query
from dpmagic.schema import CategoricalColumn, NumericColumn, Schema
from dpmagic.sets import Box, CategorySet, IntervalSet

__all__ = ["PandasBackend", "Cells"]


@dataclass
class Cells:
    """Exact aggregates for each GROUP BY cell, in declared-key order."""

    keys: list[tuple[object, ...]]
    counts: np.ndarray  # int64, one per cell
    int_sums: dict[str, np.ndarray]  # exact integer sums per cell for int columns
    float_values: dict[str, list[np.ndarray]]  # the rows' values per cell for float columns
    extra: dict[str, Any] = field(default_factory=dict)  # exact inputs of the dpmagic.aggregates units


class PandasBackend:
    """Evaluates queries on a DataFrame already validated against ``schema``."""

    def __init__(self, df: pd.DataFrame, schema: Schema) -> None:
        self.df = df
        self.schema = schema
        self._codes: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.df)

    def mask(self, box: Box) -> np.ndarray:
        """Boolean mask of the rows inside ``box``."""
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

    def _group_codes(self, g: GroupKey) -> np.ndarray:
        """Each row's cell index along one GROUP BY key (its declared value or bin)."""
        if g.sets is None:
            return self._category_codes(g.column)
        codes = np.full(len(self.df), -1, dtype=np.int64)
        for i, s in enumerate(g.sets):
            codes[self.mask(Box({g.column: s})) & (codes < 0)] = i
        return codes

    def evaluate(self, query: Query, units: dict[str, Any] | None = None) -> Cells:
        """Exact per-cell COUNT and SUM inputs for ``query`` (cells = declared GROUP BY keys / bins)."""
        mask = self.mask(query.where)
        if query.filter is not None:
            mask &= self.filter_mask(query.filter)
        sizes = [g.size for g in query.groups]
        n_cells = int(np.prod(sizes)) if sizes else 1
        if query.groups:
            codes = [self._group_codes(g)[mask] for g in query.groups]
            if any((c < 0).any() for c in codes):  # bins cover the declared domain: cannot happen
                raise RuntimeError("a row fell outside every declared bin")
            cell = np.ravel_multi_index(codes, sizes) if codes else np.zeros(0, dtype=np.int64)
            keys = list(itertools.product(*[g.labels for g in query.groups]))
        else:
            cell = np.zeros(int(mask.sum()), dtype=np.int64)
            keys = [()]
        counts = np.bincount(cell, minlength=n_cells).astype(np.int64)
        int_sums: dict[str, np.ndarray] = {}
        float_values: dict[str, list[np.ndarray]] = {}
        order = np.argsort(cell, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(counts)])
        for agg in query.aggregates:
            key = agg.sum_key
            if agg.column is None or not agg.is_basic or key in int_sums or key in float_values:
                continue
            col = self.schema[agg.column]
            assert isinstance(col, NumericColumn)
            values = self.df[agg.column].to_numpy()[mask]
            if agg.clamp is not None:
                values = np.clip(values, agg.clamp[0], agg.clamp[1]).astype(values.dtype)
            if col.is_int:
                sums = np.zeros(n_cells, dtype=object)
                np.add.at(sums, cell, values.astype(object))  # exact Python integers: no overflow
                int_sums[key] = np.array([int(s) for s in sums], dtype=object)
            else:
                vals = values.astype(float)[order]
                float_values[key] = [vals[bounds[i] : bounds[i + 1]] for i in range(n_cells)]
        extra: dict[str, Any] = {}
        if units:
            from dpmagic.aggregates import exact_extended

            extra = exact_extended(units, lambda c: self.df[c].to_numpy()[mask], cell, n_cells)
        return Cells(keys=keys, counts=counts, int_sums=int_sums, float_values=float_values, extra=extra)
