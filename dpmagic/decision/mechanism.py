"""The threshold-shift Laplace mechanism, its sensitivities, the optimal FNR split, and currency conversion.

References
----------
* Lahjouji, Ghayyur, He, Mehrotra, *ProBE: Proportioning Privacy Budget for Complex Exploratory Decision
  Support*, arXiv:2406.15655 (2024), doi:10.48550/arXiv.2406.15655 — the problem, TSLM in a tree, Phase One/Two.
* Ghayyur, Ghosh, He, Mehrotra, *MIDE: Accuracy Aware Minimally Invasive Data Exploration for Decision
  Support*, PVLDB 15(11):2653–2665 (2022), doi:10.14778/3551793.3551821 — the threshold-shift Laplace mechanism.
* Bun & Steinke, *Concentrated Differential Privacy: Simplifications, Extensions, and Lower Bounds*, TCC 2016,
  doi:10.1007/978-3-662-53641-4_24, Prop. 1.4 — ε-DP implies (ε²/2)-zCDP.
* Dong, Roth & Su, *Gaussian Differential Privacy*, JRSS-B 84(1):3–37 (2022), doi:10.1111/rssb.12454 —
  ε-DP is f_{ε,0}-DP (Prop. 2.5 / Wasserman–Zhou), used for the GDP conversion below.

Threshold-shift Laplace (TSLM), per atomic condition
----------------------------------------------------
Every condition is compared in the *canonical* direction: with σ = +1 for ``>`` and σ = −1 for ``<``, the
condition ``g op c`` is ``σ·g > σ·c``. The mechanism releases g̃ = g + η, η ~ Laplace(b), b = Δg/ε, and
reports the group iff σ·g̃ > σ·c − u, i.e. g̃ > c − u for ``>`` and g̃ < c + u for ``<``.

**FNR bound.** Suppose the condition is true, σ·g > σ·c. A false negative needs σ·g̃ ≤ σ·c − u, i.e.
σ·η ≤ σ·c − σ·g − u < −u. The Laplace law is symmetric, so σ·η ~ Laplace(b) and
P(FN) ≤ P(σ·η < −u) = ½·e^{−u/b} = ½·e^{−uε/Δg}. With ε = Δg·ln(1/(2β))/u this is exactly β. The same holds
for both directions, whatever the true value, so it is a per-group guarantee for every data set.

*Discrete (integer) statistics* (COUNT; SUM/AVG over ``int`` columns with an integer threshold) use OpenDP's
discrete Laplace, P(η = k) ∝ q^{|k|}, q = e^{−1/b}, whose tail is P(η ≤ −m) = q^m/(1 + q) for integers m ≥ 1.
Then σ·η ≤ σ·c − σ·g − u < −u forces σ·η ≤ −(⌊u⌋ + 1); with u an integer (the planner rounds u down to an
integer ≥ 1 for integer statistics) P(FN) ≤ q^{u+1}/(1 + q) = q^u · q/(1+q) < ½·q^u = β. Exact tails:
:func:`false_negative_bound`.

Sensitivities (add/remove one row; groups are disjoint so one row touches one group)
-----------------------------------------------------------------------------------
* COUNT(*): Δ = 1.
* SUM(col), col clamped to the declared [L, U]: Δ = max(|L|, |U|).
* AVG(col) op c: we do **not** release an average. For a non-empty group AVG(col) > c ⇔ Σ(col − c) > 0 and
  AVG(col) < c ⇔ Σ(col − c) < 0, so the condition is the single linear statistic h = SUM(col − c) compared
  with 0, with Δh = max(|L − c|, |U − c|) (the term one row adds or removes). An empty group has h = 0, which
  satisfies neither strict inequality — the same as SQL, where AVG of no rows is NULL and the HAVING test is
  not true. This is exact (no approximation of the ratio) and needs one measurement instead of two.
* Replace-one neighbours: a replacement changes one group's statistic by at most U − L ≤ 2·max(|L|, |U|)
  (resp. 2·Δh, or moves one row between two groups, each changing by at most Δ): the session's accountant
  covers it by charging twice the overlap (docs/design.md §2), as for any other release.

Public range (for the default uncertain region u = 0.3·range)
-------------------------------------------------------------
COUNT ∈ [0, N]; SUM ∈ [N·min(0, L), N·max(0, U)]; h = SUM(col − c) ∈ [N·min(0, L − c), N·max(0, U − c)],
where N is a **public** bound on the number of rows of a group (the custodian's declared maximum group size,
or the table size). Nothing here reads the data: ProBE's public code takes the range of the true counts,
which leaks; we never do.

Optimal split of the FNR budget
-------------------------------
With a_i = Δg_i/u_i, minimise E(β) = Σ_i o_i ε_i = Σ_i o_i a_i ln(1/(2β_i)) subject to Σ_i o_i β_i ≤ β.
E is strictly convex (−ln is) and decreasing in every β_i, so the constraint is active at the optimum and
the KKT conditions are necessary and sufficient. Lagrangian L = E + λ(Σ o_i β_i − β):
∂L/∂β_i = −o_i a_i/β_i + λ o_i = 0 ⇒ β_i = a_i/λ; the constraint gives λ = Σ_y o_y a_y/β, hence

    β_i = β · a_i / Σ_y o_y a_y = β · (Δg_i/u_i) / Σ_y o_y (Δg_y/u_y).

(ProBE's printed Theorem 4.5 puts the product Π_{x≠y} u_x o_y Δg_y in the denominator, which multiplies o_y
and Δg_y n − 1 times; it agrees with the above only for n ≤ 2 — e.g. n = 3, o = 1 — its β_i do not sum to β.)
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from scipy.stats import norm

from dpmagic.accountant.currency import Definition
from dpmagic.decision.tree import Condition
from dpmagic.errors import BudgetError, QueryError

__all__ = [
    "Statistic",
    "cost_of_epsilon",
    "false_negative_bound",
    "gdp_mu_of_pure_epsilon",
    "optimal_beta_split",
    "statistic_for",
    "total_cost",
    "tslm_epsilon",
    "uniform_beta_split",
]

NoiseKind = Literal["laplace", "discrete_laplace"]


@dataclass(frozen=True)
class Statistic:
    """The per-group linear statistic a condition is decided on, with public sensitivity and range.

    The session computes, over the group's rows that pass the condition's filter,
    ``COUNT(*)`` if ``column`` is None, else ``SUM(clamp(column, lower, upper) − shift)``; for a float column
    (``unit`` set) ``SUM(quantise(column, unit, lower, upper) − shift)`` with
    :func:`dpmagic.noise.calibration.quantise`, an exact integer in units of ``unit`` (``shift``, ``threshold``,
    ``sensitivity`` and the range are then in those units too).
    The condition holds iff ``sign · statistic > sign · threshold``.
    """

    text: str
    column: str | None
    lower: float | None
    upper: float | None
    shift: float
    sensitivity: float
    threshold: float
    sign: int
    range_lo: float
    range_hi: float
    integer: bool
    unit: float | None = None

    @property
    def range(self) -> float:
        return self.range_hi - self.range_lo

    @property
    def kind(self) -> NoiseKind:
        return "discrete_laplace" if self.integer else "laplace"


def statistic_for(
    cond: Condition,
    bounds: Mapping[str, tuple[float, float]],
    *,
    max_group_size: int,
    integer_columns: Collection[str] = (),
) -> Statistic:
    """The statistic, sensitivity and public range for ``cond`` (see the module docstring)."""
    if not isinstance(max_group_size, int) or isinstance(max_group_size, bool) or max_group_size < 1:
        raise QueryError(f"max_group_size must be a positive integer (a public bound), got {max_group_size!r}")
    n = float(max_group_size)
    sign = 1 if cond.op == ">" else -1
    if cond.aggregate == "count":
        return Statistic("COUNT(*)", None, None, None, 0.0, 1.0, float(cond.threshold), sign, 0.0, n, True)
    col = cond.column
    assert col is not None
    if col not in bounds:
        raise QueryError(f"column {col!r} has no declared bounds: SUM/AVG need the schema's lower and upper")
    lo, hi = (float(bounds[col][0]), float(bounds[col][1]))
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise QueryError(f"column {col!r} has invalid bounds [{lo}, {hi}]")
    is_int = col in integer_columns
    if not is_int:
        return _float_statistic(cond, col, lo, hi, n, sign)
    integer: bool
    if cond.aggregate == "sum":
        delta = max(abs(lo), abs(hi))
        shift, thr, text = 0.0, float(cond.threshold), f"SUM({col})"
        integer = is_int
    else:
        c = float(cond.threshold)
        delta = max(abs(lo - c), abs(hi - c))
        shift, thr, text = c, 0.0, f"SUM({col} - {c:g})"
        integer = is_int and c == math.floor(c)
    if delta <= 0:
        raise QueryError(f"{cond} does not depend on the data (the declared range of {col!r} is a single point)")
    return Statistic(
        text, col, lo, hi, shift, delta, thr, sign, n * min(0.0, lo - shift), n * max(0.0, hi - shift), integer
    )


#: float columns are quantised to a power of two 2^-20 of their largest magnitude (and of the threshold)
FLOAT_BITS = 20


def _float_statistic(cond: Condition, col: str, lo: float, hi: float, n: float, sign: int) -> Statistic:
    """A float SUM/AVG condition as an exact integer statistic on quantised values (sound, no float sums).

    Values are quantised like every float release of dpmagic: x_q = rint(clamp(x, L, U)/q)
    (:func:`dpmagic.noise.calibration.quantise`), q = 2^(⌈log₂ M⌉ − 20), M = max(|L|, |U|, |c|), so |x − q·x_q| ≤ q/2.
    The threshold is moved by the worst quantisation error **towards reporting**, so that a true condition is
    still true on the quantised statistic and the FNR proof applies unchanged (only the FPR can grow, by groups
    within q of the threshold):

    * AVG(x) > c ⇒ Σx_q > n(c/q − ½) ⇒ Σ(x_q − s) > 0 with s = ⌊c/q − ½⌋ (for ``<``: s = ⌈c/q + ½⌉);
    * SUM(x) > c ⇒ Σx_q > c/q − n/2 ≥ c/q − N/2 ⇒ Σx_q > ⌊c/q − N/2⌋ (for ``<``: ⌈c/q + N/2⌉).

    The sensitivity (add/remove one row, in units) is :func:`dpmagic.noise.sensitivity.patterns` of the quantised
    per-row range [rint(L/q) − s, rint(U/q) − s]; every quantity is an integer, so the discrete Laplace applies.
    """
    from dpmagic.noise.sensitivity import Coverage, patterns

    c = float(cond.threshold)
    m = max(abs(lo), abs(hi), abs(c))
    if m == 0:
        raise QueryError(f"{cond} does not depend on the data (the declared range of {col!r} is a single point)")
    q = math.ldexp(1.0, math.ceil(math.log2(m)) - FLOAT_BITS)
    if n * 2.0 ** (FLOAT_BITS + 2) > 2.0**62:
        raise QueryError(f"max_group_size {int(n)} is too large for exact sums of the float column {col!r}")
    lo_q, hi_q = int(round(lo / q)), int(round(hi / q))
    if cond.aggregate == "avg":
        shift = math.floor(c / q - 0.5) if sign > 0 else math.ceil(c / q + 0.5)
        thr, text = 0.0, f"SUM(q({col}) - {shift}) [q = 2^{math.ceil(math.log2(m)) - FLOAT_BITS}]"
    else:
        shift = 0
        thr = float(math.floor(c / q - n / 2.0) if sign > 0 else math.ceil(c / q + n / 2.0))
        text = f"SUM(q({col})) [q = 2^{math.ceil(math.log2(m)) - FLOAT_BITS}]"
    a, b = lo_q - shift, hi_q - shift
    delta = patterns(a, b, Coverage(False, False, 2), replace_one=False).linf
    if delta <= 0 or lo == hi:
        raise QueryError(f"{cond} does not depend on the data (the declared range of {col!r} is a single point)")
    return Statistic(text, col, lo, hi, float(shift), float(delta), thr, sign, n * min(0, a), n * max(0, b), True, q)


def tslm_epsilon(sensitivity: float, beta: float, u: float) -> float:
    """ε = Δg·ln(1/(2β))/u: the TSLM cost giving FNR ≤ β with an uncertain region of width u."""
    if not (0.0 < beta < 0.5):
        raise BudgetError(f"a per-condition false-negative bound must lie in (0, 1/2), got {beta!r}")
    if not (u > 0 and math.isfinite(u)):
        raise BudgetError(f"the uncertain region u must be positive and finite, got {u!r}")
    return sensitivity * math.log(1.0 / (2.0 * beta)) / u


def optimal_beta_split(a: Sequence[float], o: Sequence[int], beta: float) -> list[float]:
    """β_i = β·a_i / Σ_y o_y a_y with a_i = Δg_i/u_i: minimises Σ o_i ε_i s.t. Σ o_i β_i ≤ β (module doc)."""
    if len(a) != len(o) or not a:
        raise ValueError("need one weight and one occurrence count per condition")
    if any(x <= 0 for x in a) or any(k < 1 for k in o):
        raise ValueError("weights must be positive and occurrence counts at least 1")
    total = math.fsum(k * x for k, x in zip(o, a))
    out = [beta * x / total for x in a]
    # Floating point: make sure the constraint holds (shrink by one ulp-scale factor if it does not).
    while math.fsum(k * b for k, b in zip(o, out)) > beta:
        out = [b * (1.0 - 1e-15) for b in out]
    return out


def uniform_beta_split(o: Sequence[int], beta: float) -> list[float]:
    """The naive baseline: β_i = β / Σ o (every occurrence gets the same share)."""
    total = sum(o)
    return [beta / total for _ in o]


def total_cost(eps: Sequence[float], o: Sequence[int]) -> float:
    return math.fsum(k * e for k, e in zip(o, eps))


def false_negative_bound(kind: NoiseKind, scale: float, u: float) -> float:
    """Worst-case P(false negative) of one TSLM test with noise ``kind`` of scale b and region u.

    Continuous Laplace: ½e^{−u/b}. Discrete Laplace (integer statistic and threshold... or any threshold):
    P(η ≤ −(⌊u⌋+1)) = q^{⌊u⌋+1}/(1+q), q = e^{−1/b}. Both are suprema over the true value g > c.
    """
    if kind == "laplace":
        return 0.5 * math.exp(-u / scale)
    m = math.floor(u) + 1
    q = math.exp(-1.0 / scale)
    return math.exp(-m / scale) / (1.0 + q)


def gdp_mu_of_pure_epsilon(eps: float) -> float:
    """The smallest μ such that every ε-DP mechanism is μ-GDP: μ = 2·Φ⁻¹(e^ε/(1+e^ε)).

    An ε-DP mechanism is f_{ε,0}-DP with f_{ε,0}(x) = max(0, 1 − e^ε x, e^{−ε}(1 − x)) and this is tight for
    randomized response (Dong, Roth & Su 2022, Prop. 2.5). G_μ(x) = Φ(Φ⁻¹(1−x) − μ) is convex with G_μ(0) = 1
    and G_μ(1) = 0, so G_μ ≤ f_{ε,0} on each of the two linear pieces iff it holds at their common kink
    x* = 1/(1+e^ε), where f_{ε,0}(x*) = x*: Φ(Φ⁻¹(1 − x*) − μ) ≤ x* ⇔ μ ≥ Φ⁻¹(1 − x*) − Φ⁻¹(x*) =
    2Φ⁻¹(1 − x*). Hence ε-DP ⇒ μ-GDP with this μ, and no smaller μ works for all ε-DP mechanisms.
    For small ε, μ ≈ ε·√(π/2). Computed as 2·Φ̄⁻¹(1/(1+e^ε)) (stable for large ε) and rounded up.
    """
    if eps <= 0:
        return 0.0
    mu = 2.0 * float(norm.isf(1.0 / (1.0 + math.exp(eps)) if eps < 700 else 0.0))
    return math.nextafter(mu * (1.0 + 1e-12), math.inf)


def cost_of_epsilon(eps: float, definition: Definition) -> float:
    """The cost parameter charged for a pure ε-DP release in a session of ``definition``.

    pure: ε. zcdp: ρ = ε²/2 (Bun & Steinke 2016, Prop. 1.4). gdp: μ = 2Φ⁻¹(e^ε/(1+e^ε))
    (:func:`gdp_mu_of_pure_epsilon`; the accountant's additive weight is μ²). Always rounded up.
    """
    if definition == "pure":
        return math.nextafter(eps, math.inf)
    if definition == "zcdp":
        return math.nextafter(eps * eps / 2.0 * (1.0 + 1e-15), math.inf)
    if definition == "gdp":
        return gdp_mu_of_pure_epsilon(eps)
    raise BudgetError(f"unknown privacy definition {definition!r}: use pure, zcdp or gdp")
