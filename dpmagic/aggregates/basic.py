"""COUNT, SUM and AVG: the basic family, released together from one vector of cell counts and one exact integer
sum per summed column (an AVG is the post-processing of a noisy SUM over a noisy COUNT).

The family shares its releases across aggregates — one COUNT release serves every COUNT and AVG of a query, one
SUM release every SUM and AVG of the same (clamped) column — so :mod:`dpmagic.releases.plan` plans and draws them
together (:func:`~dpmagic.releases.plan.plan_noise`, :func:`~dpmagic.releases.plan.release`) and the backends
compute them in their common counts-and-sums pass.  Each unit here declares what it takes from that path
(:attr:`BasicUnit.needs_count`, :attr:`BasicUnit.needs_sum`), its answer and interval (:meth:`BasicUnit.answer`)
and its interval's half-width before any data (:meth:`BasicUnit.basic_halfwidth`); the sensitivities are
:func:`dpmagic.noise.sensitivity.release_sensitivity`'s (brute-force tested in ``tests/test_sensitivity.py``
and the conformance suite).

AVG's interval (:func:`ratio_estimate`) is the range of SUM/COUNT over the rectangle of the two 97.5% intervals (a
union bound), so it covers the true average with probability ≥ 95% whenever the true count is positive.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from dpmagic.aggregates.common import effective_bounds
from dpmagic.aggregates.registry import AggregateUnit, Interval, PlanContext, SqlInputs, SqlResults, UnitPlan, register
from dpmagic.errors import ConfigurationError

if TYPE_CHECKING:
    from dpmagic.domain.schema import Schema
    from dpmagic.noise.calibration import Noise
    from dpmagic.query.model import Aggregate

__all__ = ["AvgUnit", "BasicUnit", "CountUnit", "SumUnit", "integer_interval", "ratio_estimate"]

#: a noisy release and its noise
Released = tuple[np.ndarray, "Noise"]


def integer_interval(x: np.ndarray, noise: Noise, level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``level`` interval of a noisy integer release: (low, high, unsure), a side infinite (and ``unsure``)
    where the exact value may have been clamped before noise (|exact| ≥ the noise's public clamp)."""
    h = noise.ci_halfwidth(level)
    clipped_high = x + h >= noise.clamp  # post-processing of the noisy value only
    clipped_low = x - h <= -noise.clamp
    low = np.where(clipped_low, -np.inf, x - h)
    high = np.where(clipped_high, np.inf, x + h)
    return low, high, clipped_low | clipped_high


def ratio_estimate(
    s: np.ndarray, hs: float, c: np.ndarray, hc: float, lo: float, hi: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """AVG = noisy SUM / noisy COUNT per cell, with its interval (post-processing of the two noisy values).

    ``hs`` and ``hc`` are the half-widths of the SUM and COUNT intervals at level 1 − α/2 (a union bound makes
    the ratio's interval a 1 − α one).  Where ``c − hc < 1`` the count's interval admits an empty or
    one-row group: the ratio is meaningless there, so the estimate is ``NaN`` and the interval is the whole
    declared range ``[lo, hi]`` (which contains every possible average).  Elsewhere the estimate is S/C
    clamped into ``[lo, hi]`` and the interval is the range of S/C over the rectangle of the two intervals,
    intersected with ``[lo, hi]``; if that intersection is empty or a single bound (the noise pushed both
    ends past a bound), the interval is the whole declared range.  Only when both half-widths are 0 (the
    releases are exact at this level) is the interval the single value S/C.

    O(number of cells).
    """
    s = np.asarray(s, dtype=float)
    c = np.asarray(c, dtype=float)
    c_lo = c - hc
    ok = c_lo >= 1.0
    est = np.full(len(s), np.nan, dtype=float)
    low = np.full(len(s), lo, dtype=float)
    high = np.full(len(s), hi, dtype=float)
    if ok.any():
        est[ok] = np.clip(s[ok] / c[ok], lo, hi)
        corners = np.stack(
            [
                (s[ok] - hs) / c_lo[ok],
                (s[ok] - hs) / (c[ok] + hc),
                (s[ok] + hs) / c_lo[ok],
                (s[ok] + hs) / (c[ok] + hc),
            ]
        )
        raw_a, raw_b = corners.min(axis=0), corners.max(axis=0)
        a = np.clip(raw_a, lo, hi)
        b = np.clip(raw_b, lo, hi)
        # degenerate: the noise pushed the whole rectangle past a bound (the clipped interval is empty or a
        # bound alone).  A rectangle of zero width (both half-widths 0: the releases are exact at this level,
        # e.g. at a very large ε) is no such case: its point is the value (issue 27, item 8).
        degenerate = (b < a) | ((b == a) & (raw_b > raw_a))
        low[ok] = np.where(degenerate, lo, a)
        high[ok] = np.where(degenerate, hi, b)
    return est, low, high


class BasicUnit(AggregateUnit):
    """A member of the counts-and-sums family: planned, computed and drawn by the shared path."""

    basic: ClassVar[bool] = True
    #: takes the query's noisy cell counts
    needs_count: ClassVar[bool] = False
    #: takes the noisy exact sum of its (clamped) column
    needs_sum: ClassVar[bool] = False

    def _shared(self) -> TypeError:
        return TypeError(f"{self.kind.upper()} is released by the shared counts-and-sums path (dpmagic.releases.plan)")

    def plan(self, agg: Aggregate, ctx: PlanContext) -> UnitPlan:
        raise self._shared()

    def exact(self, u: UnitPlan, values: np.ndarray, cell: np.ndarray, n_cells: int) -> Any:
        raise self._shared()

    def sql(self, u: UnitPlan, alias: str, b: SqlInputs) -> Any:
        raise self._shared()

    def read(self, u: UnitPlan, alias: str, handle: Any, r: SqlResults) -> Any:
        raise self._shared()

    def release(self, u: UnitPlan, inputs: Any, level: float = 0.95) -> Interval:
        raise self._shared()

    def answer(
        self, agg: Aggregate, count: Released | None, total: Released | None, schema: Schema, level: float
    ) -> Interval:
        """(value, ci_low, ci_high) per cell from the shared noisy releases."""
        raise NotImplementedError

    def basic_halfwidth(
        self,
        agg: Aggregate,
        count: Noise | None,
        total: Noise | None,
        schema: Schema,
        min_rows: int | None,
        level: float,
    ) -> float:
        raise NotImplementedError


class _OneRelease(BasicUnit):
    """COUNT and SUM: one shared release (the cell counts, or the column's sum), answered with its own interval."""

    releases = 1

    def _own(self, count: Any, total: Any) -> Any:
        own = count if self.needs_count else total
        assert own is not None
        return own

    def answer(
        self, agg: Aggregate, count: Released | None, total: Released | None, schema: Schema, level: float
    ) -> Interval:
        x, noise = self._own(count, total)
        low, high, _ = integer_interval(x, noise, level)
        return x, low, high

    def basic_halfwidth(
        self,
        agg: Aggregate,
        count: Noise | None,
        total: Noise | None,
        schema: Schema,
        min_rows: int | None,
        level: float,
    ) -> float:
        return float(self._own(count, total).ci_halfwidth(level))


class CountUnit(_OneRelease):
    kind = "count"
    needs_count = True


class SumUnit(_OneRelease):
    kind = "sum"
    needs_sum = True


class AvgUnit(BasicUnit):
    kind = "avg"
    releases = 2  # a SUM and a COUNT
    needs_count = True
    needs_sum = True

    def answer(
        self, agg: Aggregate, count: Released | None, total: Released | None, schema: Schema, level: float
    ) -> Interval:
        assert agg.column is not None and count is not None and total is not None
        (s, s_noise), (c, c_noise) = total, count
        lo_b, hi_b = effective_bounds(agg, schema)  # the declared bounds, or the analyst's clamp
        half_level = 1.0 - (1.0 - level) / 2.0
        hs, hc = s_noise.ci_halfwidth(half_level), c_noise.ci_halfwidth(half_level)
        avg, low, high = ratio_estimate(s, hs, c, hc, lo_b, hi_b)  # NaN where the noisy count is too small
        # an interval side whose true value may have been clamped (overflow guard): the whole declared range
        unsure = integer_interval(s, s_noise, half_level)[2] | integer_interval(c, c_noise, half_level)[2]
        low[unsure], high[unsure] = lo_b, hi_b
        return avg, low, high

    def basic_halfwidth(
        self,
        agg: Aggregate,
        count: Noise | None,
        total: Noise | None,
        schema: Schema,
        min_rows: int | None,
        level: float,
    ) -> float:
        """With a public lower bound N on the group's size (``min_rows``): (h_S + M·h_C) / (N − h_C) with 97.5%
        half-widths h_S, h_C and M = max(|lower|, |upper|) (see :func:`dpmagic.releases.plan.plan_halfwidth`)."""
        assert agg.column is not None and count is not None and total is not None
        if min_rows is None:
            raise ConfigurationError(
                "an accuracy target for AVG needs --min-rows N (min_rows=N): a public lower bound on the group size",
                hint="add --min-rows N: the target then holds for groups of at least N rows",
            )
        half = 1.0 - (1.0 - level) / 2.0
        lo, hi = effective_bounds(agg, schema)
        hs, hc = total.ci_halfwidth(half), count.ci_halfwidth(half)
        m = max(abs(lo), abs(hi))
        return math.inf if hc >= min_rows else (hs + m * hc) / (min_rows - hc)


for _unit in (CountUnit(), SumUnit(), AvgUnit()):
    register(_unit)
