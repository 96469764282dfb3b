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
from dpmagic.aggregates.basic import BasicUnit
from dpmagic.aggregates.common import effective_bounds
from dpmagic.aggregates.registry import releases_per_cell, unit_for
from dpmagic.domain.schema import NumericColumn, Schema
from dpmagic.errors import BudgetError, ConfigurationError
from dpmagic.noise.calibration import MAX_ROWS, Noise, calibrate, float_unit, release_integer
from dpmagic.noise.sensitivity import release_sensitivity
from dpmagic.query.intervals import level_column, union_level, union_sizes
from dpmagic.query.model import Query
from dpmagic.releases.cells import Cells

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
    k = releases_per_cell(query)  # an unknown aggregate kind is refused here, before anything else
    share = currency.cost(currency.weight(cost) / k)
    definition = currency.definition
    basic = {a.alias: u for a in query.aggregates if isinstance(u := unit_for(a.func), BasicUnit)}
    needs_count = any(u.needs_count for u in basic.values())
    count = None
    if needs_count:
        count = calibrate(definition, share, release_sensitivity(query, schema, None, replace_one=replace_one))
    sums: dict[str, Noise] = {}
    for agg in query.aggregates:
        member = basic.get(agg.alias)
        if member is None or not member.needs_sum or agg.column is None or agg.sum_key in sums:
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
    for agg in query.aggregates:
        unit = unit_for(agg.func)
        if isinstance(unit, BasicUnit):
            total = plan.sums[agg.sum_key] if unit.needs_sum else None
            widths.append(unit.basic_halfwidth(agg, plan.count, total, schema, min_rows, level))
        else:
            widths.append(unit.halfwidth(plan.extra[agg.alias], level))
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

    extended: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    if plan.extra:
        extended = release_extended(plan.extra, cells.extra, level)
    sizes = union_sizes(query)
    for agg in query.aggregates:
        unit = unit_for(agg.func)
        if isinstance(unit, BasicUnit):
            count = None
            if unit.needs_count:
                assert plan.count is not None and noisy_count is not None
                count = (noisy_count, plan.count)
            total = (noisy_sums[agg.sum_key], plan.sums[agg.sum_key]) if unit.needs_sum else None
            v, lo_ci, hi_ci = unit.answer(agg, count, total, schema, level)
        else:
            v, lo_ci, hi_ci = extended[agg.alias]
        out[agg.alias], out[f"{agg.alias}_ci_low"], out[f"{agg.alias}_ci_high"] = v, lo_ci, hi_ci
        if isinstance(unit, BasicUnit):
            # a computed output reading k aggregates takes each one's interval at level 1 − α/k (a union bound,
            # dpmagic.query.intervals): post-processing of the same noisy values, nothing drawn again
            for k in sizes:
                _, lo_k, hi_k = unit.answer(agg, count, total, schema, union_level(level, k))
                out[level_column(agg.alias, "ci_low", k)], out[level_column(agg.alias, "ci_high", k)] = lo_k, hi_k
    return pd.DataFrame(out)


def units_of(plan: ReleasePlan) -> dict[str, float]:
    """The quantum each summed column (by :attr:`~dpmagic.query.model.Aggregate.sum_key`) is computed in (1 for
    int columns)."""
    return {name: noise.unit for name, noise in plan.sums.items()}
