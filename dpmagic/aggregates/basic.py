"""COUNT, SUM and AVG: the basic family, answered from the query's shared releases (:mod:`dpmagic.aggregates.moments`).

The family shares its releases across aggregates — one COUNT release serves every COUNT, AVG, VAR and STDDEV of a
query, one centred sum S = Σ(x − c) every AVG, VAR and STDDEV of the same (clamped) column (and a SUM of it, derived
as S + c·n̂), a raw sum a SUM whose column nobody centres — so :mod:`dpmagic.releases.plan` plans and draws them once
(:func:`~dpmagic.releases.plan.plan_noise`, :func:`~dpmagic.releases.plan.release`).  Each unit here declares the
quantities it needs (:attr:`~dpmagic.aggregates.registry.AggregateUnit.quantities`), its answer and interval
(:meth:`BasicUnit.answer`) and its interval's half-width before any data (:meth:`BasicUnit.basic_halfwidth`); the
sensitivities are :func:`dpmagic.noise.sensitivity.patterns`' (brute-force tested in ``tests/test_sensitivity.py``,
``tests/test_moments.py`` and the conformance suite).

AVG = c + S/n̂ with c the public midpoint of the column's range in the box: centring halves the add/remove
sensitivity of a sum over [0, U] (U/2 instead of U), as Tumult Analytics and PipelineDP do.  Its interval
(:func:`ratio_estimate` on the centred values) is the range of S/n over the rectangle of the two 97.5% intervals
(a union bound), shifted by c, so it covers the true average with probability ≥ 95% whenever the true count is
positive.  Where both are shown, AVG = SUM/COUNT (SUM = S + c·n̂) unless AVG was clamped into [lo, hi].
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from dpmagic.aggregates.registry import AggregateUnit, Interval, PlanContext, SqlInputs, SqlResults, UnitPlan, register
from dpmagic.errors import ConfigurationError
from dpmagic.query.intervals import ratio_estimate  # the AVG interval (pure post-processing; re-exported)

if TYPE_CHECKING:
    from dpmagic.aggregates.moments import Drawn
    from dpmagic.aggregates.variance import VariancePlan
    from dpmagic.noise.calibration import Noise
    from dpmagic.query.model import Aggregate

__all__ = ["AvgUnit", "BasicUnit", "CountUnit", "SumUnit", "integer_interval", "ratio_estimate"]


def integer_interval(x: np.ndarray, noise: Noise, level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``level`` interval of a noisy integer release: (low, high, unsure), a side infinite (and ``unsure``)
    where the exact value may have been clamped before noise (|exact| ≥ the noise's public clamp)."""
    h = noise.ci_halfwidth(level)
    clipped_high = x + h >= noise.clamp  # post-processing of the noisy value only
    clipped_low = x - h <= -noise.clamp
    low = np.where(clipped_low, -np.inf, x - h)
    high = np.where(clipped_high, np.inf, x + h)
    return low, high, clipped_low | clipped_high


class BasicUnit(AggregateUnit):
    """A member of the counts-and-sums family: planned, computed and drawn by the shared path."""

    basic: ClassVar[bool] = True

    @property
    def needs_count(self) -> bool:
        """Takes the query's noisy cell counts."""
        return "n" in self.quantities

    @property
    def needs_sum(self) -> bool:
        """Takes a noisy sum of its (clamped) column (raw, or centred)."""
        return "sum" in self.quantities or "s" in self.quantities

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

    def answer(self, agg: Aggregate, drawn: Drawn, level: float) -> Interval:
        """(value, ci_low, ci_high) per cell from the query's shared noisy releases (post-processing)."""
        raise NotImplementedError

    def basic_halfwidth(
        self,
        agg: Aggregate,
        count: Noise | None,
        raw: Noise | None,
        centred: VariancePlan | None,
        min_rows: int | None,
        level: float,
    ) -> float:
        """The largest half-width of its ``level`` interval before any data (``raw``: its raw sum's noise;
        ``centred``: the plan of its column's centred sum)."""
        raise NotImplementedError


class CountUnit(BasicUnit):
    kind = "count"
    releases = 1
    quantities = ("n",)

    def answer(self, agg: Aggregate, drawn: Drawn, level: float) -> Interval:
        assert drawn.count is not None
        x, noise = drawn.count
        low, high, _ = integer_interval(x, noise, level)
        return x, low, high

    def basic_halfwidth(
        self,
        agg: Aggregate,
        count: Noise | None,
        raw: Noise | None,
        centred: VariancePlan | None,
        min_rows: int | None,
        level: float,
    ) -> float:
        assert count is not None
        return float(count.ci_halfwidth(level))


class SumUnit(BasicUnit):
    """SUM: its own raw sum, or — when an AVG / VAR / STDDEV of the same column needs the centred sum S — the
    derived S + c·n̂ (no release of its own), with the interval of the 1 − α/2 intervals of S and n (union bound)."""

    kind = "sum"
    releases = 1
    quantities = ("sum",)

    def answer(self, agg: Aggregate, drawn: Drawn, level: float) -> Interval:
        if agg.sum_key in drawn.raw:
            x, noise = drawn.raw[agg.sum_key]
            low, high, _ = integer_interval(x, noise, level)
            return x, low, high
        s, _, p = drawn.centred[agg.sum_key]
        c = float(p.c)
        if c == 0.0:
            low, high, _ = integer_interval(s, p.total.noise, level)
            return s, low, high
        assert drawn.count is not None
        n, n_noise = drawn.count
        half = 1.0 - (1.0 - level) / 2.0
        s_lo, s_hi, _ = integer_interval(s, p.total.noise, half)
        n_lo, n_hi, _ = integer_interval(n, n_noise, half)
        if c > 0:
            low, high = s_lo + c * n_lo, s_hi + c * n_hi
        else:
            low, high = s_lo + c * n_hi, s_hi + c * n_lo
        return s + c * n, low, high

    def basic_halfwidth(
        self,
        agg: Aggregate,
        count: Noise | None,
        raw: Noise | None,
        centred: VariancePlan | None,
        min_rows: int | None,
        level: float,
    ) -> float:
        if raw is not None:
            return float(raw.ci_halfwidth(level))
        assert centred is not None
        if float(centred.c) == 0.0:
            return float(centred.total.noise.ci_halfwidth(level))
        assert count is not None
        half = 1.0 - (1.0 - level) / 2.0
        return float(centred.total.noise.ci_halfwidth(half) + abs(float(centred.c)) * count.ci_halfwidth(half))


class AvgUnit(BasicUnit):
    """AVG = c + S/n̂: the centred sum S = Σ(x − c) over the noisy count, c the midpoint of the column's public
    range [lo, hi] in the box; clamped into [lo, hi]; its interval the range of c + S/n over the rectangle of the
    two 1 − α/2 intervals (:func:`ratio_estimate` on the centred values: a union bound, ≥ 1 − α coverage whenever
    the true count is positive)."""

    kind = "avg"
    releases = 2  # a centred SUM and a COUNT
    quantities = ("n", "s")

    def answer(self, agg: Aggregate, drawn: Drawn, level: float) -> Interval:
        assert drawn.count is not None
        s, _, p = drawn.centred[agg.sum_key]
        c_val, c_noise = drawn.count
        c = float(p.c)
        lo_c, hi_c = float(p.lo) - c, float(p.hi) - c  # the centred values' range
        half = 1.0 - (1.0 - level) / 2.0
        hs, hc = p.total.noise.ci_halfwidth(half), c_noise.ci_halfwidth(half)
        avg, low, high = ratio_estimate(s, hs, c_val, hc, lo_c, hi_c)  # NaN where the noisy count is too small
        lo_b, hi_b = float(p.lo), float(p.hi)
        avg, low, high = np.clip(avg + c, lo_b, hi_b), np.clip(low + c, lo_b, hi_b), np.clip(high + c, lo_b, hi_b)
        # an interval side whose true value may have been clamped (overflow guard): the whole range
        unsure = integer_interval(s, p.total.noise, half)[2] | integer_interval(c_val, c_noise, half)[2]
        low[unsure], high[unsure] = lo_b, hi_b
        return avg, low, high

    def basic_halfwidth(
        self,
        agg: Aggregate,
        count: Noise | None,
        raw: Noise | None,
        centred: VariancePlan | None,
        min_rows: int | None,
        level: float,
    ) -> float:
        """With a public lower bound N on the group's size (``min_rows``): (h_S + M·h_C) / (N − h_C) with
        1 − α/2 half-widths h_S, h_C of the centred sum and the count and M = max(|lo − c|, |hi − c|) (see
        :func:`dpmagic.releases.plan.plan_halfwidth`)."""
        assert count is not None and centred is not None
        if min_rows is None:
            raise ConfigurationError(
                "an accuracy target for AVG needs --min-rows N (min_rows=N): a public lower bound on the group size",
                hint="add --min-rows N: the target then holds for groups of at least N rows",
            )
        half = 1.0 - (1.0 - level) / 2.0
        hs, hc = centred.total.noise.ci_halfwidth(half), count.ci_halfwidth(half)
        m = max(abs(float(centred.lo) - float(centred.c)), abs(float(centred.hi) - float(centred.c)))
        return math.inf if hc >= min_rows else (hs + m * hc) / (min_rows - hc)


for _unit in (CountUnit(), SumUnit(), AvgUnit()):
    register(_unit)
