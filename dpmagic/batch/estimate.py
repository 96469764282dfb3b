"""The estimate a batch released, kept for free follow-up queries (issue 32).

A batch measures its strategy once, y = A x + z, and answers every workload query from the least-squares estimate
x̂ = A⁺y (McKenna, Miklau, Hay, Machanavajjhala, "Optimizing error of high-dimensional statistical queries under
differential privacy", PVLDB 11(10), 2018, doi:10.14778/3231751.3231769, §10).  Any further linear query qᵀx̂ is
post-processing of the released y: it costs nothing, and all such answers are consistent (one vector x̂: a range is
the difference of two prefixes).  For a strategy of full column rank qᵀx̂ is unbiased with variance
v·qᵀ(AᵀA)⁻¹q, v the variance of one noisy strategy answer (Li, Miklau, Hay, McGregor, Rastogi, "The matrix
mechanism", VLDB J. 24(6), 2015, doi:10.1007/s00778-015-0398-x); every answer carries the 95% normal interval
± 1.96·√Var, as the batch's own answers do.

No data is read here: x̂ and the strategy are public once released.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from dpmagic.batch.implicit import PIdentityCovariance, full_rank, quadratic_form, range_sums, supports_vector
from dpmagic.batch.strategies import PIdentity
from dpmagic.errors import ConfigurationError

__all__ = ["BatchEstimate", "DerivedAnswer"]

_Z95 = 1.959963984540054


@dataclass(frozen=True)
class DerivedAnswer:
    """One follow-up answer qᵀx̂ of a kept batch estimate, with its 95% interval; charged nothing."""

    query: str
    count: float
    ci_low: float
    ci_high: float
    variance: float
    source: str

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "query": [self.query],
                "count": [self.count],
                "count_ci_low": [self.ci_low],
                "count_ci_high": [self.ci_high],
            }
        )

    @property
    def df(self) -> pd.DataFrame:
        return self.frame()

    def summary(self) -> str:
        return (
            f"{self.query}: {self.count:.6g} (95% interval {self.ci_low:.6g} to {self.ci_high:.6g}); "
            f"derived from {self.source}, no further charge"
        )

    def __repr__(self) -> str:
        return self.summary()


class BatchEstimate:
    """The least-squares estimate x̂ of a released batch, over the batch's columns and their declared values.

    ``range(lo, hi)``, ``prefix(v)``, ``point(v)`` and ``query(vector)`` answer from x̂ for free; ``ranges`` answers
    many ranges at once (a DataFrame).  A query the strategy does not support (q outside A's row space, e.g. a
    3-way cell after a batch of 2-way marginals) is refused: its estimate would be biased.  ``unit_variance`` is the variance of one noisy strategy answer, at the scale
    actually used.  ``ordered`` marks the int columns (ranges and prefixes need one).
    """

    def __init__(
        self,
        *,
        name: str,
        columns: tuple[str, ...],
        values: tuple[tuple[object, ...], ...],
        ordered: tuple[bool, ...],
        strategy: Any,
        x_hat: np.ndarray,
        unit_variance: float,
        entry_id: int,
        workload: str,
    ) -> None:
        self.name = name
        self.columns = columns
        self.values = values
        self.ordered = ordered
        self.strategy = strategy
        x = np.asarray(x_hat, dtype=float).reshape(-1)
        x.setflags(write=False)
        self.x_hat = x
        self.unit_variance = float(unit_variance)
        self.entry_id = entry_id
        self.workload = workload
        self.sizes = tuple(len(v) for v in values)
        if math.prod(self.sizes) != x.shape[0]:
            raise ConfigurationError("batch estimate: the estimate does not match the columns' declared values")
        self.unbiased = full_rank(strategy)

    @property
    def source(self) -> str:
        return f"batch release {self.name!r} (ledger entry #{self.entry_id})"

    def __repr__(self) -> str:
        cols = ", ".join(self.columns)
        return (
            f"BatchEstimate {self.name!r}: {self.x_hat.shape[0]:,} cells over {cols}, from ledger entry "
            f"#{self.entry_id} ({self.workload}); follow-up queries are free: .range(lo, hi), .prefix(v), "
            ".point(v), .query(vector)"
        )

    # -- checks ------------------------------------------------------------------------------------------
    def _axis(self, column: str | None, what: str) -> int:
        if column is None:
            if len(self.columns) != 1:
                raise ConfigurationError(
                    f"{what}: the estimate {self.name!r} is over {', '.join(self.columns)}: name the column",
                    hint=f"e.g. .{what}(..., column={self.columns[0]!r})",
                )
            return 0
        if column not in self.columns:
            raise ConfigurationError(
                f"{what}: the estimate {self.name!r} has no column {column!r}",
                hint=f"its columns: {', '.join(self.columns)}",
            )
        return self.columns.index(column)

    def _position(self, axis: int, value: object, what: str) -> int:
        vals = self.values[axis]
        col = self.columns[axis]
        if self.ordered[axis]:
            if isinstance(value, bool) or not isinstance(value, (int, np.integer, float)) or value != int(value):
                raise ConfigurationError(f"{what}: {value!r} is not an integer value of {col!r}")
            lo, hi = int(vals[0]), int(vals[-1])  # type: ignore[call-overload]
            v = int(value)
            if not lo <= v <= hi:
                raise ConfigurationError(
                    f"{what}: {v} is outside the declared domain of {col!r}, {lo}..{hi}",
                    hint="follow-up queries are over the batch's declared values only",
                )
            return v - lo
        if value not in vals:
            raise ConfigurationError(
                f"{what}: {value!r} is not a declared value of {col!r}", hint=f"declared: {list(vals)[:10]}"
            )
        return vals.index(value)

    def _need_ordered(self, axis: int, what: str) -> None:
        if not self.ordered[axis]:
            raise ConfigurationError(
                f"{what}: column {self.columns[axis]!r} is categorical; ranges need an int column",
                hint="use .point(value) for one category",
            )

    # -- answers -----------------------------------------------------------------------------------------
    @cached_property
    def _cov(self) -> PIdentityCovariance | None:
        return PIdentityCovariance(self.strategy) if isinstance(self.strategy, PIdentity) else None

    def _answer(self, label: str, q: np.ndarray) -> DerivedAnswer:
        if not self.unbiased and not supports_vector(self.strategy, q):
            raise ConfigurationError(
                f"{label}: not determined by what {self.name!r} measured (its strategy does not support this query; "
                "an answer from the estimate would be biased)",
                hint="ask a query of the batch's workload, or run a batch whose strategy measures every cell",
            )
        est = float(q @ self.x_hat)
        var = self.unit_variance * quadratic_form(self.strategy, q)
        return self._derived(label, est, var)

    def _derived(self, label: str, est: float, var: float) -> DerivedAnswer:
        h = _Z95 * math.sqrt(max(var, 0.0))
        return DerivedAnswer(label, est, est - h, est + h, var, self.source)

    def _indicator(self, axis: int, lo: int, hi: int) -> np.ndarray:
        q = np.ones(1)
        for i, n in enumerate(self.sizes):
            f = np.ones(n)
            if i == axis:
                f = np.zeros(n)
                f[lo : hi + 1] = 1.0
            q = np.multiply.outer(q, f).reshape(-1)
        return q

    def range(self, lo: object, hi: object, column: str | None = None) -> DerivedAnswer:
        """The count of rows with lo ≤ column ≤ hi (every other column summed), from x̂: no charge."""
        axis = self._axis(column, "range")
        self._need_ordered(axis, "range")
        a, b = self._position(axis, lo, "range"), self._position(axis, hi, "range")
        if a > b:
            raise ConfigurationError(f"range: the lower end {lo} is above the upper end {hi}")
        col = self.columns[axis]
        label = f"{col} = {lo}" if a == b else f"{col} BETWEEN {lo} AND {hi}"
        if len(self.columns) == 1 and self._cov is not None and self.unbiased:
            est = float(range_sums(self.x_hat, np.array([a]), np.array([b]))[0])
            var = self.unit_variance * float(self._cov.ranges(np.array([a]), np.array([b]))[0])
            return self._derived(label, est, var)
        return self._answer(label, self._indicator(axis, a, b))

    def prefix(self, value: object, column: str | None = None) -> DerivedAnswer:
        """The count of rows with column ≤ value (the empirical CDF at value), from x̂: no charge."""
        axis = self._axis(column, "prefix")
        self._need_ordered(axis, "prefix")
        self._position(axis, value, "prefix")
        ans = self.range(self.values[axis][0], value, column)
        return DerivedAnswer(
            f"{self.columns[axis]} <= {value}", ans.count, ans.ci_low, ans.ci_high, ans.variance, ans.source
        )

    def point(self, value: object, column: str | None = None) -> DerivedAnswer:
        """The count of rows with column = value (every other column summed), from x̂: no charge."""
        axis = self._axis(column, "point")
        i = self._position(axis, value, "point")
        if self.ordered[axis]:
            return self.range(value, value, column)
        label = f"{self.columns[axis]} = {value!r}"
        return self._answer(label, self._indicator(axis, i, i))

    def query(self, vector: Any, label: str = "custom linear query") -> DerivedAnswer:
        """qᵀx̂ for any vector q over the cells (row-major over the columns' declared values), from x̂: no charge."""
        try:
            q = np.asarray(vector, dtype=float)
        except (TypeError, ValueError):
            raise ConfigurationError("query: the vector must be numbers, one per cell") from None
        if q.ndim != 1 or q.shape[0] != self.x_hat.shape[0] or not np.all(np.isfinite(q)):
            raise ConfigurationError(
                f"query: the vector must be {self.x_hat.shape[0]:,} finite numbers (one per cell), got shape {q.shape}"
            )
        return self._answer(label, q)

    def ranges(self, pairs: Any, column: str | None = None) -> pd.DataFrame:
        """Many ranges [(lo, hi), ...] at once: one row each (query, count, 95% interval), from x̂: no charge.

        One column with the p-Identity strategy: O(n + k·p) for k ranges; otherwise one quadratic form each."""
        rows = [tuple(p) for p in pairs]
        if any(len(r) != 2 for r in rows):
            raise ConfigurationError("ranges: give (lo, hi) pairs")
        axis = self._axis(column, "ranges")
        self._need_ordered(axis, "ranges")
        pos = [(self._position(axis, a, "ranges"), self._position(axis, b, "ranges")) for a, b in rows]
        for (a, b), (lo, hi) in zip(pos, rows, strict=True):
            if a > b:
                raise ConfigurationError(f"ranges: the lower end {lo} is above the upper end {hi}")
        if len(self.columns) == 1 and self._cov is not None and pos:
            s = np.array([a for a, _ in pos])
            e = np.array([b for _, b in pos])
            est = range_sums(self.x_hat, s, e)
            var = self.unit_variance * self._cov.ranges(s, e)
            col = self.columns[0]
            labels = [f"{col} = {lo}" if lo == hi else f"{col} BETWEEN {lo} AND {hi}" for lo, hi in rows]
            h = _Z95 * np.sqrt(np.maximum(var, 0.0))
            return pd.DataFrame({"query": labels, "count": est, "count_ci_low": est - h, "count_ci_high": est + h})
        answers = [self.range(lo, hi, column) for lo, hi in rows]
        return pd.DataFrame(
            {
                "query": [a.query for a in answers],
                "count": [a.count for a in answers],
                "count_ci_low": [a.ci_low for a in answers],
                "count_ci_high": [a.ci_high for a in answers],
            }
        )
