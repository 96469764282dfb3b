"""Exact evaluation of a :class:`~dpmagic.query.model.Query` on a validated pandas DataFrame.

The backend is the only place that reads rows.  It returns exact per-cell aggregates for the cells of the
declared GROUP BY keys (every combination of declared values, zero-filled), which the session then
perturbs.  It is called only after the accountant has charged the query.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpmagic.query.model import Query
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


class PandasBackend:
    """Evaluates queries on a DataFrame already validated against ``schema``."""

    def __init__(self, df: pd.DataFrame, schema: Schema) -> None:
        self.df = df
        self.schema = schema
        self._codes: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.df)

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

    def evaluate(self, query: Query) -> Cells:
        """Exact per-cell COUNT and SUM inputs for ``query`` (cells = declared GROUP BY keys)."""
        mask = self.mask(query.where)
        group_cols = [self.schema[g] for g in query.group_by]
        sizes = [c.size for c in group_cols if isinstance(c, CategoricalColumn)]
        n_cells = int(np.prod(sizes)) if sizes else 1
        if group_cols:
            codes = [self._category_codes(g)[mask] for g in query.group_by]
            cell = np.ravel_multi_index(codes, sizes) if codes else np.zeros(0, dtype=np.int64)
            keys = list(itertools.product(*[c.values for c in group_cols]))  # type: ignore[union-attr]
        else:
            cell = np.zeros(int(mask.sum()), dtype=np.int64)
            keys = [()]
        counts = np.bincount(cell, minlength=n_cells).astype(np.int64)
        int_sums: dict[str, np.ndarray] = {}
        float_values: dict[str, list[np.ndarray]] = {}
        order = np.argsort(cell, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(counts)])
        for agg in query.aggregates:
            if agg.column is None or agg.column in int_sums or agg.column in float_values:
                continue
            col = self.schema[agg.column]
            assert isinstance(col, NumericColumn)
            values = self.df[agg.column].to_numpy()[mask]
            if col.is_int:
                sums = np.zeros(n_cells, dtype=object)
                np.add.at(sums, cell, values.astype(object))  # exact Python integers: no overflow
                int_sums[agg.column] = np.array([int(s) for s in sums], dtype=object)
            else:
                vals = values.astype(float)[order]
                float_values[agg.column] = [vals[bounds[i] : bounds[i + 1]] for i in range(n_cells)]
        return Cells(keys=keys, counts=counts, int_sums=int_sums, float_values=float_values)
