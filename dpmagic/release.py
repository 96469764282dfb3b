"""Turning exact cell aggregates into a noisy, released answer.

Cost split (documented policy): a query charged cost c releases, in every GROUP BY cell, one noisy value per
COUNT or SUM and two per AVG (a noisy SUM and a noisy COUNT).  The query's additive weight w = weight(c) is
divided equally among those k releases (w/k each: ε/k under pure DP, ρ/k under zCDP, μ²/k under GDP).  The
cells of a GROUP BY are disjoint, so they compose in parallel and each cell gets the full per-release share.

AVG is post-processing: noisy SUM / max(noisy COUNT, 1), clamped into the column's declared bounds.  Its
95% interval is the range of SUM/COUNT over the rectangle of the two 97.5% intervals (a union bound), so it
covers the true average with probability ≥ 95% whenever the true count is positive.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dpmagic.accountant.currency import Currency
from dpmagic.backends.pandas import Cells
from dpmagic.errors import BudgetError, ConfigurationError
from dpmagic.mechanisms import Noise, float_sum_noise, noise_for, release_float_sum, release_integer
from dpmagic.query.model import Aggregate, Query
from dpmagic.schema import NumericColumn, Schema

__all__ = ["plan_noise", "plan_halfwidth", "cost_for_target", "release", "ReleasePlan"]


@dataclass(frozen=True)
class ReleasePlan:
    """The noise of every release of a query, fixed before any data is read."""

    count: Noise | None
    sums: dict[str, Noise]
    share_cost: float
    releases_per_cell: int
    #: effective (clamped) column of each SUM key that is not a plain declared column
    columns: dict[str, NumericColumn] = field(default_factory=dict)
    #: plans of the non-basic aggregates (dpmagic.aggregates units), by alias
    extra: dict[str, Any] = field(default_factory=dict)


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
    columns: dict[str, NumericColumn] = {}
    for agg in query.aggregates:
        if agg.column is None or not agg.is_basic or agg.sum_key in sums:
            continue
        col = _effective_column(agg, schema)
        if agg.clamp is not None:
            columns[agg.sum_key] = col
        if col.is_int:
            if not replace_one:
                sens = col.max_abs
            elif grouped:
                sens = max(col.width, spread * col.max_abs)
            else:
                sens = col.width
            if sens == 0:
                sens = 1.0  # a constant column: any positive scale is private; keep the mechanism defined
            sums[agg.sum_key] = noise_for(definition, cell_cost, sens, integer=True)
        else:
            sums[agg.sum_key] = float_sum_noise(
                definition, cell_cost, float(col.lower), float(col.upper), d_in=2 if replace_one else 1
            )
    from dpmagic.aggregates import plan_extended

    extra = plan_extended(query, schema, definition, share, replace_one=replace_one)
    plan = ReleasePlan(count=count, sums=sums, share_cost=share, releases_per_cell=k, columns=columns, extra=extra)
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
            col = _effective_column(agg, schema)
            hs, hc = plan.sums[agg.sum_key].ci_halfwidth(half), plan.count.ci_halfwidth(half)
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
        col = plan.columns.get(colname) or schema[colname]
        assert isinstance(col, NumericColumn)
        if col.is_int:
            noisy_sums[colname] = release_integer(cells.int_sums[colname], noise).astype(float)
        else:
            noisy_sums[colname] = release_float_sum(
                cells.float_values[colname], noise, float(col.lower), float(col.upper)
            )
    if plan.extra:
        from dpmagic.aggregates import release_extended

        extended = release_extended(plan.extra, cells.extra, level)
    for agg in query.aggregates:
        if not agg.is_basic:
            v, lo_ci, hi_ci = extended[agg.alias]
            out[agg.alias], out[f"{agg.alias}_ci_low"], out[f"{agg.alias}_ci_high"] = v, lo_ci, hi_ci
        elif agg.func == "count":
            assert plan.count is not None and noisy_count is not None
            h = plan.count.ci_halfwidth(level)
            out[agg.alias] = noisy_count
            out[f"{agg.alias}_ci_low"], out[f"{agg.alias}_ci_high"] = noisy_count - h, noisy_count + h
        elif agg.func == "sum":
            assert agg.column is not None
            h = plan.sums[agg.sum_key].ci_halfwidth(level)
            out[agg.alias] = noisy_sums[agg.sum_key]
            out[f"{agg.alias}_ci_low"], out[f"{agg.alias}_ci_high"] = (
                noisy_sums[agg.sum_key] - h,
                noisy_sums[agg.sum_key] + h,
            )
        else:
            assert agg.column is not None and plan.count is not None and noisy_count is not None
            col = _effective_column(agg, schema)
            s, c = noisy_sums[agg.sum_key], noisy_count
            lo_b, hi_b = float(col.lower), float(col.upper)
            avg = np.clip(s / np.maximum(c, 1.0), lo_b, hi_b)
            half_level = 1.0 - (1.0 - level) / 2.0
            hs, hc = plan.sums[agg.sum_key].ci_halfwidth(half_level), plan.count.ci_halfwidth(half_level)
            low, high = _ratio_interval(s, hs, c, hc, lo_b, hi_b)
            out[agg.alias] = avg
            out[f"{agg.alias}_ci_low"], out[f"{agg.alias}_ci_high"] = low, high
    return pd.DataFrame(out)


def _ratio_interval(
    s: np.ndarray, hs: float, c: np.ndarray, hc: float, lo: float, hi: float
) -> tuple[np.ndarray, np.ndarray]:
    """Range of S/C over [s ± hs] × [c ± hc] (C ≥ 1), clamped to [lo, hi]; the whole range if C may be < 1."""
    c_lo = c - hc
    low = np.full(len(s), lo, dtype=float)
    high = np.full(len(s), hi, dtype=float)
    ok = c_lo >= 1.0
    if ok.any():
        corners = np.stack(
            [
                (s[ok] - hs) / c_lo[ok],
                (s[ok] - hs) / (c[ok] + hc),
                (s[ok] + hs) / c_lo[ok],
                (s[ok] + hs) / (c[ok] + hc),
            ]
        )
        low[ok] = np.clip(corners.min(axis=0), lo, hi)
        high[ok] = np.clip(corners.max(axis=0), lo, hi)
    return low, high


def _effective_column(agg: Aggregate, schema: Schema) -> NumericColumn:
    """The aggregated column with the analyst's clamp as its public bounds (SUM(CLAMP(x, lo, hi)))."""
    col = schema[str(agg.column)]
    assert isinstance(col, NumericColumn)
    if agg.clamp is None:
        return col
    from dpmagic.aggregates import effective_bounds

    lo, hi = effective_bounds(agg, schema)
    return dataclasses.replace(col, lower=int(lo) if col.is_int else lo, upper=int(hi) if col.is_int else hi)
