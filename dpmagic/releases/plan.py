"""Turning exact cell aggregates into a noisy, released answer.

Cost split (documented policy): a query charged cost c releases, in every GROUP BY cell, one noisy value per
COUNT, SUM or COUNT(DISTINCT), two per AVG (a noisy SUM and a noisy COUNT), three per VAR / STDDEV and one per
quantile (the units of :mod:`dpmagic.aggregates`).  The query's additive weight w = weight(c) is
divided equally among those k releases (w/k each: ε/k under pure DP, ρ/k under zCDP, μ²/k under GDP).  Each
release is the vector of its cells' values, noised for that vector's sensitivity (:mod:`dpmagic.noise.sensitivity`):
under add/remove-one a row touches one cell, so every cell gets the full per-release share; under replace-one
two cells can change, which the L1 / L2 sensitivity (or GDP's per-cell split) accounts for.

AVG is post-processing (:func:`dpmagic.releases.postprocess.ratio_estimate`): noisy SUM / noisy COUNT, clamped into the
column's declared bounds, and NaN where the noisy count's interval reaches below one row.  Its 95% interval is
the range of SUM/COUNT over the rectangle of the two 97.5% intervals (a union bound), so it covers the true
average with probability ≥ 95% whenever the true count is positive; never zero-width.

An analyst's clamp (``SUM(CLAMP(x, lo, hi))``, :attr:`~dpmagic.query.model.Aggregate.clamp`) is a different sum:
it has its own release, keyed by :attr:`~dpmagic.query.model.Aggregate.sum_key`, whose sensitivity follows the
clamped bounds (:func:`dpmagic.noise.sensitivity.release_sensitivity` with ``clamp``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dpmagic.accountant.currency import Currency
from dpmagic.aggregates import plan_extended, release_extended
from dpmagic.aggregates.common import effective_bounds
from dpmagic.domain.schema import NumericColumn, Schema
from dpmagic.errors import BudgetError, ConfigurationError
from dpmagic.noise.calibration import MAX_ROWS, Noise, calibrate, float_unit, release_integer
from dpmagic.noise.sensitivity import release_sensitivity
from dpmagic.query.model import Query
from dpmagic.releases.cells import Cells
from dpmagic.releases.postprocess import ratio_estimate

__all__ = ["plan_noise", "plan_halfwidth", "cost_for_target", "release", "units_of", "ReleasePlan", "effective_bounds"]


@dataclass(frozen=True)
class ReleasePlan:
    """The noise of every release of a query, fixed before any data is read."""

    count: Noise | None
    sums: dict[str, Noise]
    share_cost: float
    releases_per_cell: int
    #: plans of the non-basic aggregates (:mod:`dpmagic.aggregates` units), by alias
    extra: dict[str, Any] = field(default_factory=dict)


def plan_noise(
    query: Query, schema: Schema, currency: Currency, cost: float, *, replace_one: bool = False
) -> ReleasePlan:
    """Calibrate the noise of each release of ``query`` for a total cost ``cost`` (data-independent).

    Every sensitivity comes from :func:`dpmagic.noise.sensitivity.release_sensitivity` (derived from the neighbouring
    relation and the query's box; brute-force tested).  With M = max|v| and W = max v − min v over the summed
    column's values inside the WHERE box:

    ===========================  ==============  ==================================================================
    release                      add/remove one  replace one (bounded DP, Inan et al. 2017)
    ===========================  ==============  ==================================================================
    COUNT, no GROUP BY           1               1 (a replaced row can leave the box; 0 → 1 if the box is everything)
    COUNT per GROUP BY cell      1               2 (L1) / √2 (L2): one cell −1, another +1 (GDP: 1 per cell at μ/√2)
    SUM, no GROUP BY             M               max(W, M); W if the box is the whole domain (no row can leave it)
    SUM per GROUP BY cell        M               max(W, 2M) (L1) / max(W, √2·M) (L2) (GDP: max(W, M) at μ/√2)
    float SUM                    as SUM, on the column's quantum u (:func:`~dpmagic.noise.calibration.float_unit`)
    SUM(CLAMP(x, a, b))          as SUM, with the values (and so M and W) clamped into [a, b]
    ===========================  ==============  ==================================================================

    (A GROUP BY whose box holds a single cell behaves as no GROUP BY.)  Under μ-GDP the discrete Gaussian is
    calibrated exactly (:func:`~dpmagic.noise.calibration.calibrate`), which needs slightly more noise than the
    continuous Gaussian's σ = Δ/μ.
    """
    k = query.releases_per_cell
    share = currency.cost(currency.weight(cost) / k)
    definition = currency.definition
    needs_count = any(a.func in ("count", "avg") for a in query.aggregates)
    count = None
    if needs_count:
        count = calibrate(definition, share, release_sensitivity(query, schema, None, replace_one=replace_one))
    sums: dict[str, Noise] = {}
    for agg in query.aggregates:
        if agg.column is None or not agg.is_basic or agg.sum_key in sums:
            continue
        col = schema[agg.column]
        assert isinstance(col, NumericColumn)
        clamp = agg.clamp
        if col.is_int:
            sens = release_sensitivity(query, schema, agg.column, replace_one=replace_one, clamp=clamp)
            sums[agg.sum_key] = calibrate(definition, share, sens)
        else:
            real = release_sensitivity(query, schema, agg.column, replace_one=replace_one, clamp=clamp)
            lo, hi = effective_bounds(agg, schema)
            unit = float_unit(definition, share, real, max(abs(lo), abs(hi)))

            def to_units(v: float, u: float = unit) -> int:
                return int(np.rint(v / u))

            sens = release_sensitivity(
                query, schema, agg.column, replace_one=replace_one, clamp=clamp, to_units=to_units
            )
            sums[agg.sum_key] = calibrate(definition, share, sens, unit=unit, bias=MAX_ROWS * unit / 2.0)
    extra = plan_extended(query, schema, definition, share, replace_one=replace_one)
    plan = ReleasePlan(count=count, sums=sums, share_cost=share, releases_per_cell=k, extra=extra)
    for noise in [count, *sums.values()]:  # everything release() computes from the noise, before any charge
        if noise is not None:
            noise.ci_halfwidth(0.95)
            noise.ci_halfwidth(0.975)
    return plan


def plan_halfwidth(
    plan: ReleasePlan, query: Query, schema: Schema, *, min_rows: int | None, level: float = 0.95
) -> float:
    """The largest 95% half-width among a plan's answers (COUNT, SUM; AVG when ``min_rows`` is given).

    AVG's half-width depends on the group's size, which is private: with a public lower bound N on it
    (``min_rows``) the bound used is (h_S + M·h_C) / (N − h_C) with 97.5% half-widths h_S, h_C of the SUM and
    COUNT noise and M = max(|lower|, |upper|): the AVG interval is at most that wide whenever the group has
    at least N rows and the noisy count lands inside its interval.
    """
    widths: list[float] = []
    half = 1.0 - (1.0 - level) / 2.0
    for agg in query.aggregates:
        if agg.func == "count_distinct":
            widths.append(plan.extra[agg.alias].plan.ci_halfwidth(level))
        elif not agg.is_basic:
            raise ConfigurationError(
                f"an accuracy target (--ci) is not available for {agg.func.upper()}: give a cost instead",
                hint="use --epsilon / --rho / --mu",
            )
        elif agg.func == "count":
            assert plan.count is not None
            widths.append(plan.count.ci_halfwidth(level))
        elif agg.func == "sum":
            assert agg.column is not None
            widths.append(plan.sums[agg.sum_key].ci_halfwidth(level))
        else:
            assert agg.column is not None and plan.count is not None
            if min_rows is None:
                raise ConfigurationError(
                    "an accuracy target for AVG needs --min-rows N (min_rows=N): a public lower bound on the group size",
                    hint="add --min-rows N: the target then holds for groups of at least N rows",
                )
            lo, hi = effective_bounds(agg, schema)
            hs, hc = plan.sums[agg.sum_key].ci_halfwidth(half), plan.count.ci_halfwidth(half)
            m = max(abs(lo), abs(hi))
            widths.append(math.inf if hc >= min_rows else (hs + m * hc) / (min_rows - hc))
    return max(widths)


def cost_for_target(
    query: Query,
    schema: Schema,
    currency: Currency,
    target: float,
    *,
    min_rows: int | None = None,
    replace_one: bool = False,
    level: float = 0.95,
) -> float:
    """The smallest cost whose answers all have a 95% half-width ≤ ``target`` (bisection; no data read).

    The half-width decreases with the cost, so a bisection over log(cost) finds the threshold; the returned
    cost is on the satisfying side (up to a relative 1e-6).
    """
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not math.isfinite(target) or target <= 0:
        raise ConfigurationError(f"the accuracy target must be a positive number, got {target!r}")

    def width(c: float) -> float:
        try:
            plan = plan_noise(query, schema, currency, c, replace_one=replace_one)
        except BudgetError:  # a cost too small to be released: infinitely wide
            return math.inf
        return plan_halfwidth(plan, query, schema, min_rows=min_rows, level=level)

    hi = 1.0
    while width(hi) > target:
        hi *= 4.0
        if hi > 1e9:
            raise ConfigurationError(f"no cost reaches a 95% half-width of {target:g} for this query")
    lo = hi / 4.0
    while lo > 1e-12 and width(lo) <= target:
        hi, lo = lo, lo / 4.0
    for _ in range(80):
        if hi / lo - 1.0 < 1e-6:
            break
        mid = math.sqrt(lo * hi)
        if width(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


def release(query: Query, cells: Cells, plan: ReleasePlan, schema: Schema, *, level: float = 0.95) -> pd.DataFrame:
    """Draw the noise and assemble the answer: one row per declared GROUP BY key.

    ``cells`` holds exact integer aggregates in each release's units (:meth:`PandasBackend.evaluate` with
    :func:`units_of`), and the exact inputs of the :mod:`dpmagic.aggregates` units (``cells.extra``).  An interval side is infinite where the exact value may have been clamped before noise
    (|exact| ≥ the noise's public clamp, :data:`~dpmagic.noise.calibration.SUM_CLAMP` grid units).
    """
    out: dict[str, object] = {}
    for i, g in enumerate(query.group_by):  # public declared keys / bin labels
        out[g] = [key[i] for key in cells.keys]
    noisy_count = None
    if plan.count is not None:
        noisy_count = release_integer(cells.counts, plan.count)
    noisy_sums = {name: release_integer(cells.sums[name], noise) for name, noise in plan.sums.items()}

    def interval(x: np.ndarray, noise: Noise, lev: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        h = noise.ci_halfwidth(lev)
        clipped_high = x + h >= noise.clamp  # post-processing of the noisy value only
        clipped_low = x - h <= -noise.clamp
        low = np.where(clipped_low, -np.inf, x - h)
        high = np.where(clipped_high, np.inf, x + h)
        return low, high, clipped_low | clipped_high

    extended: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    if plan.extra:
        extended = release_extended(plan.extra, cells.extra, level)
    for agg in query.aggregates:
        if not agg.is_basic:
            v, lo_ci, hi_ci = extended[agg.alias]
            out[agg.alias], out[f"{agg.alias}_ci_low"], out[f"{agg.alias}_ci_high"] = v, lo_ci, hi_ci
        elif agg.func == "count":
            assert plan.count is not None and noisy_count is not None
            out[agg.alias] = noisy_count
            out[f"{agg.alias}_ci_low"], out[f"{agg.alias}_ci_high"], _ = interval(noisy_count, plan.count, level)
        elif agg.func == "sum":
            assert agg.column is not None
            x = noisy_sums[agg.sum_key]
            out[agg.alias] = x
            out[f"{agg.alias}_ci_low"], out[f"{agg.alias}_ci_high"], _ = interval(x, plan.sums[agg.sum_key], level)
        else:
            assert agg.column is not None and plan.count is not None and noisy_count is not None
            s, c = noisy_sums[agg.sum_key], noisy_count
            lo_b, hi_b = effective_bounds(agg, schema)  # the declared bounds, or the analyst's clamp
            half_level = 1.0 - (1.0 - level) / 2.0
            hs, hc = plan.sums[agg.sum_key].ci_halfwidth(half_level), plan.count.ci_halfwidth(half_level)
            avg, low, high = ratio_estimate(s, hs, c, hc, lo_b, hi_b)  # NaN where the noisy count is too small
            # an interval side whose true value may have been clamped (overflow guard): the whole declared range
            unsure = interval(s, plan.sums[agg.sum_key], half_level)[2] | interval(c, plan.count, half_level)[2]
            low[unsure], high[unsure] = lo_b, hi_b
            out[agg.alias] = avg
            out[f"{agg.alias}_ci_low"], out[f"{agg.alias}_ci_high"] = low, high
    return pd.DataFrame(out)


def units_of(plan: ReleasePlan) -> dict[str, float]:
    """The quantum each summed column (by :attr:`~dpmagic.query.model.Aggregate.sum_key`) is computed in (1 for
    int columns)."""
    return {name: noise.unit for name, noise in plan.sums.items()}
