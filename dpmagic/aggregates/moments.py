"""The distinct releases of a query's COUNT / SUM / AVG / VAR / STDDEV, planned once and shared by every output
derived from them, and the error-minimising split of the query's weight over them (issue 32, issue 27 item 5).

**Quantities.**  Each of these units declares the quantities it is computed from
(:attr:`~dpmagic.aggregates.registry.AggregateUnit.quantities`); a query releases each *distinct* quantity once per
cell (:func:`dpmagic.query.kinds.distinct_quantities`):

* ``n`` — the cell count, once for every COUNT, AVG, VAR and STDDEV of the query;
* per (column, clamp) — written ``key``, :attr:`~dpmagic.query.model.Aggregate.sum_key` — either

  - a centred sum S = Σ(x − c) when an AVG, VAR or STDDEV of that column asks for it, with c the midpoint of the
    column's public value range [lo, hi] in the WHERE box (:func:`dpmagic.noise.sensitivity.value_range`,
    :func:`dpmagic.aggregates.variance.center`: an integer on int columns, so that S is an exact integer sum); a
    SUM of the same column is then derived, S + c·n̂, with no release of its own; or
  - a raw sum Σx when only SUM asks for it;
* ``q`` — a centred sum of squares Q = Σ(x − c)², per (column, clamp) any VAR or STDDEV of it asks for, shared by
  VAR and STDDEV and by every ddof.

Each is a sum over the rows of the box of a per-row value in a public range — [1, 1], [lo − c, hi − c],
[0, max((lo − c)², (hi − c)²)], [lo, hi] — so its sensitivity is :func:`dpmagic.noise.sensitivity.patterns` of that
range over the query's coverage, at row and person level alike (brute-force tested: ``tests/test_conformance.py``,
``tests/test_aggregate_sensitivity.py``, ``tests/test_moments.py``).  Centring halves the add/remove sensitivity
of a sum over [0, U]: max(|lo − c|, |hi − c|) = W/2 instead of max(|lo|, |hi|) (as Tumult Analytics and
PipelineDP do for their averages).

**The split** (:func:`split_weights`).  A query of cost c has the additive weight w = weight(c) (ε under pure DP,
ρ under zCDP, μ² under μ-GDP).  The releases of units without shared quantities (quantiles, COUNT(DISTINCT))
keep the equal share w/k each (k = distinct releases per cell); the others share the rest, w_m, so as to minimise

    Σ_r A_r / w_r^p,   A_r = D_r² · Σ_o g_{o,r},   subject to Σ_r w_r = w_m,

where r ranges over the shared releases, p = 2 under pure DP (a Laplace variance is 2(Δ/ε)²) and p = 1 under
zCDP and GDP (a Gaussian's is Δ²/(2ρ), resp. Δ²·k/μ²); D_r is the release's calibrated sensitivity
(:meth:`~dpmagic.noise.sensitivity.Sensitivity.delta`; under GDP times √(cells one step changes), whose μ is
split over them).  Lagrange's condition p·A_r/w_r^(p+1) = λ gives

    w_r = w_m · A_r^(1/(p+1)) / Σ_s A_s^(1/(p+1))    (cube roots under pure DP, square roots otherwise).

The coefficients g_{o,r} are each output o's delta-method variance (first order in the noise, for a cell of N
rows) divided by the square of the output's natural scale, so that outputs in different units weigh alike.
The true centred mean μ_c of a cell is private; the objective averages over a mean spread uniformly over the
range, μ_c ~ U[−h, h] with h = W/2 = (hi − lo)/2 (E[μ_c²] = h²/3), and, for VAR / STDDEV, a within-cell variance
σ² = h²/3 (values spread over the range):

=======  ===========================================  ==========  =====================================
output   variance of the output (first order)          scale       g (per release)
=======  ===========================================  ==========  =====================================
COUNT    Var n                                         N           n: 1
SUM      Var Σx (a raw sum)                            N·M         sum: 1/M²  (M = max(|lo|, |hi|))
SUM      Var S + c² Var n (derived: S + c·n)           N·M         s: 1/M², n: c²/M²
AVG      (Var S + μ_c² Var n)/N²  (c + S/n)            h           s: 1/h², n: 1/3
VAR      (Var Q + 4μ_c² Var S + (μ_c² − σ²)² Var n)/N²  h²          q: 1/h⁴, s: 4/(3h²), n: 4/45
STDDEV   VAR's / (4σ²)                                 h           VAR's × 3/4
=======  ===========================================  ==========  =====================================

(VAR: v = Q/n − (S/n)², ∂v/∂Q = 1/N, ∂v/∂S = −2μ_c/N, ∂v/∂n = (2μ_c² − m₂)/N with m₂ = Q/N = σ² + μ_c²;
E[(μ_c² − σ²)²] = h⁴/5 − 2·(h²/3)² + h⁴/9 = 4h⁴/45.)  Every scale is N times a public constant, so N cancels:
the split needs no lower bound on the group size (``min_rows`` is not used), and it reads only the schema, the
query and the definition.  For AVG alone under pure DP this gives w_S : w_n = 1 : (1/3)^(1/3) ≈ 0.59 : 0.41
instead of 0.5 : 0.5 (measured: ``benchmarks/bench_avg.py``).  A zero range (h = 0 or M = 0) uses 1 in place of
the zero scale.

A SUM derived as S + c·n̂ costs no release of its own; its noise variance Var S + c² Var n is below that of a raw
sum released at the same weight as S whenever the range is not symmetric and c² Var n < (M² − h²)/h² · Var S
(e.g. [0, U], c = U/2: Var S ∝ U²/4 against U² for the raw sum).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from dpmagic.aggregates.registry import AggregateUnit, SqlInputs, SqlResults, UnitPlan, unit_for
from dpmagic.aggregates.variance import VariancePlan, center, exact, sql_values
from dpmagic.domain.schema import NumericColumn
from dpmagic.noise.calibration import Noise, release_integer
from dpmagic.noise.sensitivity import Coverage, Sensitivity, patterns, value_range

if TYPE_CHECKING:
    from dpmagic.accountant.currency import Definition
    from dpmagic.domain.schema import Schema
    from dpmagic.query.model import Aggregate, Query

__all__ = ["Drawn", "MomentPlan", "MomentsUnit", "Quantities", "draw", "split_weights"]

#: a noisy release and its noise
Released = tuple[np.ndarray, Noise]


@dataclass(frozen=True)
class Quantities:
    """The distinct shared releases of a query (no data): whether the cell count is needed, the raw sums (by
    ``sum_key``: the first aggregate asking) and the centred sums (by ``sum_key``: the first aggregate asking,
    and whether a sum of squares is needed too)."""

    count: bool
    raw: dict[str, Aggregate]
    centred: dict[str, tuple[Aggregate, bool]]

    @classmethod
    def of(cls, query: Query) -> Quantities:
        count = False
        raw: dict[str, Aggregate] = {}
        centred: dict[str, tuple[Aggregate, bool]] = {}
        for a in query.aggregates:
            qs = unit_for(a.func).quantities
            count = count or "n" in qs
            if "s" in qs:
                first, sq = centred.get(a.sum_key, (a, False))
                centred[a.sum_key] = (first, sq or "q" in qs)
        for a in query.aggregates:
            if "sum" in unit_for(a.func).quantities and a.sum_key not in centred:
                raw.setdefault(a.sum_key, a)
        return cls(count, raw, centred)

    def names(self) -> list[str]:
        """The release names: ``count``, ``sum(key)``, ``s(key)``, ``q(key)``."""
        out = ["count"] if self.count else []
        out += [f"sum({k})" for k in self.raw]
        for k, (_, sq) in self.centred.items():
            out.append(f"s({k})")
            if sq:
                out.append(f"q({k})")
        return out


def _scale(x: float) -> float:
    return float(x) if x > 0 else 1.0


def _effective(sens: Sensitivity, definition: Definition) -> float:
    """D_r² of the module docstring: the calibrated sensitivity squared (GDP: times the cells μ is split over)."""
    s = sens.or_one()
    d = float(s.delta(definition))
    return d * d * (s.max_cells if definition == "gdp" else 1)


def centred_range(query: Query, schema: Schema, agg: Aggregate) -> tuple[float, float, float, bool]:
    """(lo, hi, c, is_int) of a centred quantity: the box's clamped value range and its public midpoint."""
    col = schema[str(agg.column)]
    assert isinstance(col, NumericColumn)
    lo, hi = value_range(query, schema, str(agg.column), agg.clamp)
    return lo, hi, center(lo, hi, col.is_int), col.is_int


def split_weights(
    query: Query, schema: Schema, definition: Definition, weight: float, *, replace_one: bool, cov: Coverage
) -> dict[str, float]:
    """The additive weight of each shared release (by :meth:`Quantities.names`), summing to ``weight`` (the
    weight the shared releases get: the query's weight less the equal shares of the other units' releases),
    minimising the objective of the module docstring.  Reads the schema, the query and the definition only."""
    qs = Quantities.of(query)
    names = qs.names()
    if not names:
        return {}
    g: dict[str, float] = dict.fromkeys(names, 0.0)
    sens: dict[str, float] = {}
    if qs.count:
        sens["count"] = _effective(patterns(1, 1, cov, replace_one=replace_one), definition)
    for k, a in qs.raw.items():
        lo, hi = value_range(query, schema, str(a.column), a.clamp)
        sens[f"sum({k})"] = _effective(patterns(lo, hi, cov, replace_one=replace_one), definition)
    ranges: dict[str, tuple[float, float, float]] = {}
    for k, (a, sq) in qs.centred.items():
        lo, hi, c, _ = centred_range(query, schema, a)
        ranges[k] = (lo, hi, c)
        sa, sb = float(lo - c), float(hi - c)
        sens[f"s({k})"] = _effective(patterns(sa, sb, cov, replace_one=replace_one), definition)
        if sq:
            sens[f"q({k})"] = _effective(patterns(0.0, max(sa * sa, sb * sb), cov, replace_one=replace_one), definition)
    for a in query.aggregates:
        f = a.func
        if f == "count":
            g["count"] += 1.0
        elif f == "sum" and a.sum_key in qs.raw:
            lo, hi = value_range(query, schema, str(a.column), a.clamp)
            g[f"sum({a.sum_key})"] += 1.0 / _scale(max(abs(lo), abs(hi))) ** 2
        elif f == "sum":
            lo, hi, c = ranges[a.sum_key]
            m2 = _scale(max(abs(lo), abs(hi))) ** 2
            g[f"s({a.sum_key})"] += 1.0 / m2
            g["count"] += float(c) ** 2 / m2
        elif f == "avg":
            lo, hi, _ = ranges[a.sum_key]
            h = _scale((hi - lo) / 2.0)
            g[f"s({a.sum_key})"] += 1.0 / h**2
            g["count"] += 1.0 / 3.0
        elif f in ("var", "stddev"):
            lo, hi, _ = ranges[a.sum_key]
            h = _scale((hi - lo) / 2.0)
            t = 0.75 if f == "stddev" else 1.0
            g[f"q({a.sum_key})"] += t / h**4
            g[f"s({a.sum_key})"] += t * 4.0 / (3.0 * h**2)
            g["count"] += t * 4.0 / 45.0
    root = 1.0 / 3.0 if definition == "pure" else 0.5
    # every A_r > 0 (each needed release has a positive coefficient); a floor guards against underflow
    parts = {r: max(sens[r] * g[r], 1e-300) ** root for r in names}
    total = math.fsum(parts.values())
    return {r: weight * v / total for r, v in parts.items()}


@dataclass(frozen=True)
class MomentPlan(UnitPlan):
    """The plan of one column's centred quantities (S, and Q if any VAR / STDDEV asks), carried in
    :attr:`ReleasePlan.extra <dpmagic.releases.plan.ReleasePlan.extra>` under a reserved key so that every backend
    computes its exact inputs through the unit interface (:class:`MomentsUnit`)."""

    key: str = ""

    @property
    def unit(self) -> AggregateUnit:
        return MOMENTS


class MomentsUnit(AggregateUnit):
    """The exact inputs and sensitivities of a column's centred quantities (not a registered kind: the shared
    planner places it; every aggregate answer is derived from the draws by its own unit)."""

    kind = "moments"
    releases = 1

    def plan(self, agg: Aggregate, ctx: Any) -> UnitPlan:  # pragma: no cover - planned by plan_noise
        raise TypeError("the centred quantities are planned by dpmagic.releases.plan.plan_noise")

    def describe(self, u: UnitPlan) -> dict[str, str]:
        p: VariancePlan = u.plan
        out = {f"centred sum of {u.agg.sum_key} (c = {p.c:g})": str(p.total)}
        if p.squares is not None:
            out[f"centred sum of squares of {u.agg.sum_key}"] = str(p.squares)
        return out

    def exact(self, u: UnitPlan, values: np.ndarray, cell: np.ndarray, n_cells: int) -> Any:
        return exact(values, cell, n_cells, u.plan)

    def sql(self, u: UnitPlan, alias: str, b: SqlInputs) -> Any:
        (s_expr, s_bound), q = sql_values(str(u.agg.column), u.plan)
        b.exact_sum(f"vs_{alias}", b.value(s_expr), s_bound)
        if q is not None:
            b.exact_sum(f"vq_{alias}", b.value(q[0]), q[1])
        return None

    def read(self, u: UnitPlan, alias: str, handle: Any, r: SqlResults) -> Any:
        out = {"n": [int(v) for v in r.counts], "s": r.per_cell(f"vs_{alias}")}
        if u.plan.squares is not None:
            out["q"] = r.per_cell(f"vq_{alias}")
        return out

    def release(self, u: UnitPlan, inputs: Any, level: float = 0.95) -> Any:  # pragma: no cover
        raise TypeError("the centred quantities are drawn by dpmagic.releases.plan.release")

    def sensitivities(self, u: UnitPlan) -> dict[str, Any]:
        p: VariancePlan = u.plan
        out = {"n": p.count, "s": p.total.noise}
        if p.squares is not None:
            out["q"] = p.squares.noise
        return out

    def integer_releases(self, u: UnitPlan, inputs: Any) -> dict[str, list[int]]:
        return {k: [int(v) for v in inputs[k]] for k in self.sensitivities(u)}


MOMENTS = MomentsUnit()


@dataclass
class Drawn:
    """The noisy shared releases of one query (post-processing reads only these): the cell count, the raw sums
    and, per centred column, (S, Q or None, its plan)."""

    count: Released | None
    raw: dict[str, Released] = field(default_factory=dict)
    centred: dict[str, tuple[np.ndarray, np.ndarray | None, VariancePlan]] = field(default_factory=dict)


def draw(
    count: Noise | None,
    counts: Any,
    raw: dict[str, Noise],
    sums: dict[str, Any],
    moments: dict[str, Any],
    extra: dict[str, Any],
) -> Drawn:
    """Draw every shared release once (OpenDP's exact samplers): ``moments`` maps a sum key to its
    :class:`MomentPlan`, whose exact inputs are ``extra[plan.key]``."""
    n = None if count is None else (release_integer(counts, count), count)
    out = Drawn(n, {k: (release_integer(sums[k], noise), noise) for k, noise in raw.items()})
    for k, mp in moments.items():
        p: VariancePlan = mp.plan
        inputs = extra[mp.key]
        s = release_integer(inputs["s"], p.total.noise)
        q = None if p.squares is None else release_integer(inputs["q"], p.squares.noise)
        out.centred[k] = (s, q, p)
    return out
