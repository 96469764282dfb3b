"""Turning exact cell aggregates into a noisy, released answer.

Cost split (documented policy): a query charged cost c releases, in every GROUP BY cell, one noisy value per
COUNT or SUM and two per AVG (a noisy SUM and a noisy COUNT).  The query's additive weight w = weight(c) is
divided equally among those k releases (w/k each: ε/k under pure DP, ρ/k under zCDP, μ²/k under GDP).  The
cells of a GROUP BY are disjoint, so they compose in parallel and each cell gets the full per-release share.

AVG is post-processing (:func:`dpmagic.postprocess.ratio_estimate`): noisy SUM / noisy COUNT, clamped into the
column's declared bounds, and NaN where the noisy count's interval reaches below one row.  Its 95% interval is
the range of SUM/COUNT over the rectangle of the two 97.5% intervals (a union bound), so it covers the true
average with probability ≥ 95% whenever the true count is positive; never zero-width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpmagic.accountant.currency import Currency
from dpmagic.backends.pandas import Cells
from dpmagic.errors import BudgetError, ConfigurationError
from dpmagic.mechanisms import Noise, float_sum_noise, noise_for, release_float_sum, release_integer
from dpmagic.postprocess import ratio_estimate
from dpmagic.query.model import Query
from dpmagic.schema import NumericColumn, Schema

__all__ = ["plan_noise", "plan_halfwidth", "cost_for_target", "release", "ReleasePlan"]


@dataclass(frozen=True)
class ReleasePlan:
    """The noise of every release of a query, fixed before any data is read."""

    count: Noise | None
    sums: dict[str, Noise]
    share_cost: float
    releases_per_cell: int


def plan_noise(
    query: Query, schema: Schema, currency: Currency, cost: float, *, replace_one: bool = False
) -> ReleasePlan:
    """Calibrate the noise of each release of ``query`` for a total cost ``cost`` (data-independent).

    Sensitivities (L1 for Laplace, L2 for Gaussian noise; M = max(|lower|, |upper|)):

    ==========================  ===================  ==========================================================
    release                     add/remove one       replace one (bounded DP, seed 001)
    ==========================  ===================  ==========================================================
    COUNT, no GROUP BY          1                    1
    COUNT per GROUP BY cell     1                    2 (L1) / √2 (L2): one cell −1, another +1 (GDP: μ/√2 per cell)
    SUM, no GROUP BY            M                    upper − lower
    SUM per GROUP BY cell       M                    max(upper − lower, 2M) (L1) / max(upper − lower, √2·M) (L2)
    float SUM (OpenDP)          make_sum.map(1)      make_sum.map(2) (a change = a removal and an addition)
    ==========================  ===================  ==========================================================

    Under μ-GDP the discrete Gaussian is calibrated exactly (:func:`~dpmagic.mechanisms.gdp_noise`), which needs
    slightly more noise than the continuous Gaussian's σ = Δ/μ.
    """
    k = query.releases_per_cell
    share = currency.cost(currency.weight(cost) / k)
    definition = currency.definition
    grouped = bool(query.group_by) and replace_one
    # Under replace-one a GROUP BY changes two cells.  Laplace: L1 sensitivity 2 per unit shift.  zCDP: L2
    # sensitivity √2.  GDP: each cell is a μ/√2-GDP release (two compose to μ: Dong, Roth & Su 2019, Cor. 3.3).
    if grouped and definition == "gdp":
        cell_cost, spread = share / math.sqrt(2.0), 1.0
    else:
        cell_cost, spread = share, (2.0 if definition == "pure" else math.sqrt(2.0)) if grouped else 1.0
    needs_count = any(a.func in ("count", "avg") for a in query.aggregates)
    count = noise_for(definition, cell_cost, spread, integer=True) if needs_count else None
    sums: dict[str, Noise] = {}
    for agg in query.aggregates:
        if agg.column is None or agg.column in sums:
            continue
        col = schema[agg.column]
        assert isinstance(col, NumericColumn)
        if col.is_int:
            if not replace_one:
                sens = col.max_abs
            elif grouped:
                sens = max(col.width, spread * col.max_abs)
            else:
                sens = col.width
            if sens == 0:
                sens = 1.0  # a constant column: any positive scale is private; keep the mechanism defined
            sums[agg.column] = noise_for(definition, cell_cost, sens, integer=True)
        else:
            sums[agg.column] = float_sum_noise(
                definition, cell_cost, float(col.lower), float(col.upper), d_in=2 if replace_one else 1
            )
    plan = ReleasePlan(count=count, sums=sums, share_cost=share, releases_per_cell=k)
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
        if agg.func == "count":
            assert plan.count is not None
            widths.append(plan.count.ci_halfwidth(level))
        elif agg.func == "sum":
            assert agg.column is not None
            widths.append(plan.sums[agg.column].ci_halfwidth(level))
        else:
            assert agg.column is not None and plan.count is not None
            if min_rows is None:
                raise ConfigurationError(
                    "an accuracy target for AVG needs --min-rows N (min_rows=N): a public lower bound on the group size",
                    hint="add --min-rows N: the target then holds for groups of at least N rows",
                )
            col = schema[agg.column]
            assert isinstance(col, NumericColumn)
            hs, hc = plan.sums[agg.column].ci_halfwidth(half), plan.count.ci_halfwidth(half)
            widths.append(math.inf if hc >= min_rows else (hs + col.max_abs * hc) / (min_rows - hc))
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
    """Draw the noise and assemble the answer: one row per declared GROUP BY key."""
    out: dict[str, object] = {}
    for i, g in enumerate(query.group_by):
        out[g] = [key[i] for key in cells.keys]
    noisy_count = None
    if plan.count is not None:
        noisy_count = release_integer(cells.counts, plan.count).astype(float)
    noisy_sums: dict[str, np.ndarray] = {}
    for colname, noise in plan.sums.items():
        col = schema[colname]
        assert isinstance(col, NumericColumn)
        if col.is_int:
            noisy_sums[colname] = release_integer(cells.int_sums[colname], noise).astype(float)
        else:
            noisy_sums[colname] = release_float_sum(
                cells.float_values[colname], noise, float(col.lower), float(col.upper)
            )
    for agg in query.aggregates:
        if agg.func == "count":
            assert plan.count is not None and noisy_count is not None
            h = plan.count.ci_halfwidth(level)
            out[agg.alias] = noisy_count
            out[f"{agg.alias}_ci_low"], out[f"{agg.alias}_ci_high"] = noisy_count - h, noisy_count + h
        elif agg.func == "sum":
            assert agg.column is not None
            h = plan.sums[agg.column].ci_halfwidth(level)
            out[agg.alias] = noisy_sums[agg.column]
            out[f"{agg.alias}_ci_low"], out[f"{agg.alias}_ci_high"] = (
                noisy_sums[agg.column] - h,
                noisy_sums[agg.column] + h,
            )
        else:
            assert agg.column is not None and plan.count is not None and noisy_count is not None
            col = schema[agg.column]
            assert isinstance(col, NumericColumn)
            s, c = noisy_sums[agg.column], noisy_count
            lo_b, hi_b = float(col.lower), float(col.upper)
            half_level = 1.0 - (1.0 - level) / 2.0
            hs, hc = plan.sums[agg.column].ci_halfwidth(half_level), plan.count.ci_halfwidth(half_level)
            avg, low, high = ratio_estimate(s, hs, c, hc, lo_b, hi_b)  # NaN where the noisy count is too small
            out[agg.alias] = avg
            out[f"{agg.alias}_ci_low"], out[f"{agg.alias}_ci_high"] = low, high
    return pd.DataFrame(out)
