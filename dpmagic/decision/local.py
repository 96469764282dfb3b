"""A reference ``measure`` callback over a pandas DataFrame, with OpenDP's exact Laplace samplers.

The session will implement ``measure`` with its backend's exact aggregates; this one serves the tests and
the benchmarks. Exact per-group statistics are computed once per condition (cached); every call draws fresh
noise from OpenDP (discrete Laplace on integers, Laplace on floats). Conditions with a ``where`` filter take
it as a callable ``DataFrame -> boolean Series`` (a public predicate).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from dpmagic.decision.probe import MeasureRequest
from dpmagic.noise.calibration import quantise
from dpmagic.noise.samplers import vector_measurement

__all__ = ["FrameMeasure"]


class FrameMeasure:
    """``measure(condition_index, request)`` over ``df`` grouped by ``by`` (the public keys ``groups``)."""

    def __init__(self, df: pd.DataFrame, by: str, groups: Sequence[Hashable]) -> None:
        self.df = df
        self.by = by
        self.groups = list(groups)
        self._exact: dict[Any, pd.Series] = {}

    def exact(self, req: MeasureRequest) -> pd.Series:
        """The exact statistic per public group (0 for a group without rows)."""
        st = req.statistic
        key = (st.text, st.column, st.lower, st.upper, st.shift, id(req.where) if callable(req.where) else req.where)
        if key not in self._exact:
            df = self.df if req.where is None else self.df[req.where(self.df)]
            if st.column is None:
                s = df.groupby(self.by, observed=True).size()
            else:
                if st.unit is not None:  # float column: exact integer sums of quantised values
                    assert st.lower is not None and st.upper is not None  # a SUM's statistic has the declared bounds
                    q = quantise(df[st.column].to_numpy(), st.unit, st.lower, st.upper) - int(st.shift)
                    vals = pd.Series(q, index=df.index)
                else:
                    vals = df[st.column].clip(st.lower, st.upper) - st.shift
                s = vals.groupby(df[self.by], observed=True).sum()
            self._exact[key] = s.reindex(self.groups, fill_value=0)
        return self._exact[key]

    def __call__(self, condition: int, req: MeasureRequest) -> dict[Hashable, float]:
        exact = self.exact(req).loc[list(req.groups)]
        meas = vector_measurement(req.kind, req.scale)
        if req.kind == "discrete_laplace":
            noisy = np.asarray(meas([int(round(v)) for v in exact.to_numpy()]), dtype=float)
        else:
            noisy = np.asarray(meas([float(v) for v in exact.to_numpy()]), dtype=float)
        return dict(zip(req.groups, noisy.tolist()))
