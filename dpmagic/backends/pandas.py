"""Exact evaluation of a :class:`~dpmagic.query.model.Query` on a validated pandas DataFrame.

The backend is the only place that reads rows.  It returns exact per-cell aggregates for the cells of the
declared GROUP BY keys (every combination of declared values, zero-filled), which the session then
perturbs.  It is called only after the accountant has charged the query.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpmagic.errors import DataValidationError
from dpmagic.mechanisms import MAX_ROWS, quantise
from dpmagic.query.model import Query
from dpmagic.schema import CategoricalColumn, NumericColumn, Schema
from dpmagic.sets import Box, CategorySet, IntervalSet

__all__ = ["PandasBackend", "Cells", "exact_cell_sums"]


@dataclass
class Cells:
    """Exact aggregates for each GROUP BY cell, in declared-key order."""

    keys: list[tuple[object, ...]]
    counts: np.ndarray  # int64, one per cell
    sums: dict[str, list[int]]  # exact integer sums per cell, in the column's units (1, or a float quantum)


def exact_cell_sums(cell: np.ndarray, values: np.ndarray, n_bins: int) -> list[int]:
    """Exact Σ of int64 ``values`` per bin of ``cell`` (vectorised, no overflow, at most 2³² rows).

    Each value is split into three 21-bit limbs of its two's complement, v = h·2⁴² + m·2²¹ + l with
    0 ≤ l, m < 2²¹ and |h| ≤ 2²¹; each limb is summed per bin with a float64 ``bincount``, exact because every
    partial sum is an integer below 2³²·2²¹ = 2⁵³.  O(rows + bins).
    """
    v = np.asarray(values, dtype=np.int64)
    mask = np.int64(0x1FFFFF)
    limbs = (v & mask, (v >> 21) & mask, v >> 42)
    lo, mid, hi = (np.bincount(cell, weights=w.astype(np.float64), minlength=n_bins)[:n_bins] for w in limbs)
    return [int(a) + (int(b) << 21) + (int(c) << 42) for a, b, c in zip(lo, mid, hi)]


class PandasBackend:
    """Evaluates queries on a DataFrame already validated against ``schema``."""

    def __init__(self, df: pd.DataFrame, schema: Schema) -> None:
        if len(df) > MAX_ROWS:
            raise DataValidationError(
                f"the data has more than {MAX_ROWS:,} rows, the most dpmagic sums exactly",
                hint="split the table into parts of at most 2^32 rows",
            )
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

    def evaluate(self, query: Query, units: Mapping[str, float] | None = None) -> Cells:
        """Exact per-cell COUNT and SUMs of ``query`` (cells = declared GROUP BY keys).

        Float columns are summed as integers in the quantum ``units[column]`` (a power of two; see
        :func:`dpmagic.mechanisms.quantise`).  The work is vectorised over *every* row of the frame (rows outside
        the WHERE box go to a discarded bin), so it does not depend on how many rows the box holds.
        """
        mask = self.mask(query.where)
        group_cols = [self.schema[g] for g in query.group_by]
        sizes = [c.size for c in group_cols if isinstance(c, CategoricalColumn)]
        n_cells = int(np.prod(sizes)) if sizes else 1
        if group_cols:
            codes = [self._category_codes(g) for g in query.group_by]
            cell = np.ravel_multi_index(codes, sizes).astype(np.int64)
            keys = list(itertools.product(*[c.values for c in group_cols]))  # type: ignore[union-attr]
        else:
            cell = np.zeros(len(self.df), dtype=np.int64)
            keys = [()]
        cell = np.where(mask, cell, n_cells)  # the discarded bin
        counts = np.bincount(cell, minlength=n_cells + 1)[:n_cells].astype(np.int64)
        sums: dict[str, list[int]] = {}
        for agg in query.aggregates:
            if agg.column is None or agg.column in sums:
                continue
            col = self.schema[agg.column]
            assert isinstance(col, NumericColumn)
            raw = self.df[agg.column].to_numpy()
            if col.is_int:
                values = raw.astype(np.int64)
            else:
                unit = (units or {}).get(agg.column)
                if unit is None:
                    raise ValueError(f"no quantum given for the float column {agg.column!r}")
                values = quantise(raw, unit, float(col.lower), float(col.upper))
            sums[agg.column] = exact_cell_sums(cell, values, n_cells)
        return Cells(keys=keys, counts=counts, sums=sums)
