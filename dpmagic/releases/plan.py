"""Turning exact cell aggregates into a noisy, released answer.

Cost split (documented policy: docs/privacy-model.md, "The cost split"): a query charged cost c releases, in every
GROUP BY cell, each of its *distinct* quantities once (:mod:`dpmagic.aggregates.moments`): one cell count for every
COUNT / AVG / VAR / STDDEV, per column a centred sum (AVG / VAR / STDDEV, and a SUM of the same column derived from
it) or a raw sum (SUM alone), a centred sum of squares (VAR / STDDEV), and each own release of the other units
(COUNT(DISTINCT), quantiles).  The query's additive weight w = weight(c) gives the own releases w/k each (k
distinct releases) and the shared ones the error-minimising split of :func:`~dpmagic.aggregates.moments.split_weights`
(w_r ∝ A_r^(1/3) under pure DP, √A_r under zCDP / GDP).  Each release is the vector of its cells' values, noised
for that vector's sensitivity (:mod:`dpmagic.noise.sensitivity`): under add/remove-one a row touches one cell, so
every cell gets the full per-release share; under replace-one two cells can change, which the L1 / L2 sensitivity
(or GDP's per-cell split) accounts for.

AVG is post-processing (:func:`dpmagic.releases.postprocess.ratio_estimate` on the centred values): c + S/n̂,
clamped into the column's range in the box, and NaN where the noisy count's interval reaches below one row.  Its
95% interval is the range of c + S/n over the rectangle of the two 97.5% intervals (a union bound), so it covers
the true average with probability ≥ 95% whenever the true count is positive; never zero-width.

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
from dpmagic.aggregates import plan_extended, release_extended, variance
from dpmagic.aggregates.basic import BasicUnit
from dpmagic.aggregates.common import effective_bounds
from dpmagic.aggregates.moments import Drawn, MomentPlan, Quantities, centred_range, draw, split_weights
from dpmagic.aggregates.registry import releases_per_cell, unit_for
from dpmagic.domain.schema import NumericColumn, Schema
from dpmagic.errors import BudgetError, ConfigurationError
from dpmagic.noise.calibration import MAX_ROWS, Noise, calibrate, float_unit
from dpmagic.noise.sensitivity import coverage_of, release_sensitivity
from dpmagic.query.derived import with_derived
from dpmagic.query.intervals import level_column, union_level, union_sizes
from dpmagic.query.model import Query
from dpmagic.releases.cells import Cells

__all__ = ["plan_noise", "plan_halfwidth", "cost_for_target", "release", "units_of", "ReleasePlan", "effective_bounds"]


@dataclass(frozen=True)
class ReleasePlan:
    """The noise of every release of a query, fixed before any data is read."""

    count: Noise | None
    #: raw sums (a SUM whose column no AVG / VAR / STDDEV centres), by sum key
    sums: dict[str, Noise]
    #: the equal share w/k of the query's weight, as a cost (the releases of units with their own releases)
    share_cost: float
    releases_per_cell: int
    #: plans of the aggregates with releases of their own (:mod:`dpmagic.aggregates` units), by alias, and of the
    #: centred quantities (:class:`~dpmagic.aggregates.moments.MomentPlan`, under their reserved keys)
    extra: dict[str, Any] = field(default_factory=dict)
    #: the centred quantities' plans by sum key (also in ``extra``)
    moments: dict[str, MomentPlan] = field(default_factory=dict)
    #: the cost each shared release is calibrated at, by name (``count``, ``sum(key)``, ``s(key)``, ``q(key)``)
    shares: dict[str, float] = field(default_factory=dict)


def _reserved_key(query: Query, i: int) -> str:
    taken = {a.alias for a in query.aggregates}
    key = f"dp_moments_{i}"
    while key in taken:
        key = "_" + key
    return key


def plan_noise(
    query: Query, schema: Schema, currency: Currency, cost: float, *, replace_one: bool = False
) -> ReleasePlan:
    """Calibrate the noise of each release of ``query`` for a total cost ``cost`` (data-independent).

    The releases are the query's *distinct* quantities (:mod:`dpmagic.aggregates.moments`): the cell count, a raw
    sum per column only SUM asks for, a centred sum S = Σ(x − c) per column an AVG / VAR / STDDEV asks for (a SUM
    of it is then S + c·n̂), a centred sum of squares per column a VAR / STDDEV asks for, and the own releases of
    the other units.  The query's weight is split over them: the own releases get the equal share w/k each, the
    shared ones the error-minimising split of :func:`~dpmagic.aggregates.moments.split_weights`.

    Every sensitivity comes from :func:`dpmagic.noise.sensitivity.patterns` (derived from the neighbouring
    relation and the query's box; brute-force tested).  With M = max|v| and W = max v − min v over the summed
    values inside the WHERE box (for a centred sum, v = x − c: M = W/2 up to c's rounding on int columns):

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
    schema = with_derived(schema, query)  # a row expression's derived column, bounded by its enclosure
    k = releases_per_cell(query)  # an unknown aggregate kind is refused here, before anything else
    weight = currency.weight(cost)
    share = currency.cost(weight / k)
    definition = currency.definition
    quantities = Quantities.of(query)
    n_shared = len(quantities.names())
    cov = coverage_of(query, schema)
    weights = split_weights(query, schema, definition, weight * n_shared / k, replace_one=replace_one, cov=cov)
    shares = {name: currency.cost(w) for name, w in weights.items()}
    count = None
    if quantities.count:
        count = calibrate(
            definition, shares["count"], release_sensitivity(query, schema, None, replace_one=replace_one)
        )
    sums: dict[str, Noise] = {}
    for key, agg in quantities.raw.items():
        col = schema[str(agg.column)]
        assert isinstance(col, NumericColumn)
        clamp = agg.clamp
        s_share = shares[f"sum({key})"]
        if col.is_int:
            sens = release_sensitivity(query, schema, str(agg.column), replace_one=replace_one, clamp=clamp)
            sums[key] = calibrate(definition, s_share, sens)
        else:
            real = release_sensitivity(query, schema, str(agg.column), replace_one=replace_one, clamp=clamp)
            lo, hi = effective_bounds(agg, schema)
            unit = float_unit(definition, s_share, real, max(abs(lo), abs(hi)))

            def to_units(v: float, u: float = unit) -> int:
                return int(np.rint(v / u))

            sens = release_sensitivity(
                query, schema, str(agg.column), replace_one=replace_one, clamp=clamp, to_units=to_units
            )
            sums[key] = calibrate(definition, s_share, sens, unit=unit, bias=MAX_ROWS * unit / 2.0)
    extra = plan_extended(query, schema, definition, share, replace_one=replace_one)
    moments: dict[str, MomentPlan] = {}
    for i, (key, (agg, squares)) in enumerate(quantities.centred.items()):
        assert count is not None  # every centred quantity's unit needs n
        lo, hi, _, is_int = centred_range(query, schema, agg)
        q_share = shares.get(f"q({key})", shares[f"s({key})"])
        vp = variance.plan(
            lo,
            hi,
            is_int,
            definition,
            shares[f"s({key})"],
            cov,
            replace_one=replace_one,
            shares=(shares["count"], shares[f"s({key})"], q_share),
            count=count,
            squares=squares,
        )
        mp = MomentPlan(agg, vp, lo, hi, key=_reserved_key(query, i))
        moments[key] = mp
        extra[mp.key] = mp
    plan = ReleasePlan(
        count=count,
        sums=sums,
        share_cost=share,
        releases_per_cell=k,
        extra=extra,
        moments=moments,
        shares=shares,
    )
    noises: list[Noise | None] = [count, *sums.values()]
    for mp in moments.values():
        noises.append(mp.plan.total.noise)
        if mp.plan.squares is not None:
            noises.append(mp.plan.squares.noise)
    for noise in noises:  # everything release() computes from the noise, before any charge
        if noise is not None:
            for level in (0.95, 0.975, 1.0 - 0.05 / 3.0):
                noise.ci_halfwidth(level)
    return plan


def plan_halfwidth(
    plan: ReleasePlan, query: Query, schema: Schema, *, min_rows: int | None, level: float = 0.95
) -> float:
    """The largest 95% half-width among a plan's answers (COUNT, SUM; AVG when ``min_rows`` is given).

    AVG's half-width depends on the group's size, which is private: with a public lower bound N on it
    (``min_rows``) the bound used is (h_S + M·h_C) / (N − h_C) with 97.5% half-widths h_S, h_C of the centred SUM
    and COUNT noise and M = max(|lo − c|, |hi − c|) (the centred values' largest magnitude): the AVG interval is
    at most that wide whenever the group has at least N rows and the noisy count lands inside its interval.
    A VAR / STDDEV has no such target (refused with the reason).
    """
    widths: list[float] = []
    for agg in query.aggregates:
        unit = unit_for(agg.func)
        if isinstance(unit, BasicUnit):
            raw = plan.sums.get(agg.sum_key)
            mp = plan.moments.get(agg.sum_key)
            centred = None if mp is None else mp.plan
            widths.append(unit.basic_halfwidth(agg, plan.count, raw, centred, min_rows, level))
        elif unit.quantities:  # VAR / STDDEV: from the shared centred plan (no target: refused with the reason)
            widths.append(unit.halfwidth(plan.moments[agg.sum_key], level))
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
    schema = with_derived(schema, query)

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
    schema = with_derived(schema, query)
    out: dict[str, object] = {}
    for i, g in enumerate(query.group_by):  # public declared keys / bin labels
        out[g] = [key[i] for key in cells.keys]
    drawn = draw(plan.count, cells.counts, plan.sums, cells.sums, plan.moments, cells.extra)
    own = {a: u for a, u in plan.extra.items() if not isinstance(u, MomentPlan)}
    extended: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    if own:
        extended = release_extended(own, cells.extra, level)
    sizes = union_sizes(query)
    for agg in query.aggregates:
        unit: Any = unit_for(agg.func)
        if unit.quantities:
            v, lo_ci, hi_ci = unit.answer(agg, drawn, level)
        else:
            v, lo_ci, hi_ci = extended[agg.alias]
        out[agg.alias], out[f"{agg.alias}_ci_low"], out[f"{agg.alias}_ci_high"] = v, lo_ci, hi_ci
        if unit.quantities:
            # a computed output reading k aggregates takes each one's interval at level 1 − α/k (a union bound,
            # dpmagic.query.intervals): post-processing of the same noisy values, nothing drawn again
            for k in sizes:
                _, lo_k, hi_k = unit.answer(agg, drawn, union_level(level, k))
                out[level_column(agg.alias, "ci_low", k)], out[level_column(agg.alias, "ci_high", k)] = lo_k, hi_k
    df = pd.DataFrame(out)
    df.attrs["dp_notes"] = consistency_notes(query, drawn, df)
    df.attrs["dp_drawn"] = drawn  # the noisy shared releases (QueryMechanism keeps them: dpmagic.releases.consistency)
    return df


def consistency_notes(query: Query, drawn: Drawn, df: pd.DataFrame) -> list[str]:
    """Notes on AVG values clamped into their column's range (computed from the noisy values only: free): there
    c + S/n̂ fell outside [lo, hi], so the AVG shown is a bound of the range, and differs from SUM/COUNT where
    those are shown too."""
    notes: list[str] = []
    shown_sum = {a.sum_key for a in query.aggregates if a.func == "sum"}
    has_count = any(a.func == "count" for a in query.aggregates)
    for agg in query.aggregates:
        if agg.func != "avg" or agg.sum_key not in drawn.centred or drawn.count is None:
            continue
        s, _, p = drawn.centred[agg.sum_key]
        n = drawn.count[0]
        with np.errstate(divide="ignore", invalid="ignore"):
            raw = float(p.c) + s / n
        clipped = np.isfinite(df[agg.alias].to_numpy(dtype=float)) & ((raw < p.lo) | (raw > p.hi))
        k = int(clipped.sum())
        if k:
            also = "; it differs there from SUM/COUNT" if agg.sum_key in shown_sum and has_count else ""
            notes.append(
                f"{agg.alias}: clamped into its range [{p.lo:g}, {p.hi:g}] in {k} group{'s' if k != 1 else ''} "
                f"(the noisy sum over the noisy count fell outside it){also}"
            )
    return notes


def units_of(plan: ReleasePlan) -> dict[str, float]:
    """The quantum each summed column (by :attr:`~dpmagic.query.model.Aggregate.sum_key`) is computed in (1 for
    int columns)."""
    return {name: noise.unit for name, noise in plan.sums.items()}
