"""VAR / VARIANCE / VAR_SAMP / VAR_POP and STDDEV / STD / STDEV / STDDEV_POP.

Three noisy releases per cell — shared with the query's COUNT / AVG / SUM and between VAR and STDDEV of the
column, the cost split over the query's distinct releases (:mod:`dpmagic.aggregates.moments`): a COUNT n, a SUM
S = Σ (x − c) and a sum of squares Q = Σ (x − c)², where x is clamped to the public range [lo, hi] of the
column's values in the WHERE box (declared bounds ∩ the box's set on the column, clamped by the analyst's
clamp if any: :func:`dpmagic.noise.sensitivity.value_range`) and c is its midpoint (an integer for int columns).
Centring makes the squares' range [0, q], q = max((lo − c)², (hi − c)²) ≈ (hi − lo)²/4, instead of
max(lo², hi²).

Each of n, S and Q is a sum over the rows of the box of a per-row value in a public range ([1, 1],
[lo − c, hi − c], [0, q]), so its sensitivity is :func:`dpmagic.noise.sensitivity.patterns` of that range over the
query's coverage (add/remove: M; replace-one: W, M if a row can leave the box, (M, M) across two cells),
and it is released exactly as :func:`dpmagic.releases.plan.plan_noise` releases a SUM: an exact integer sum over
every row (rows outside the box go to a discarded bin; :func:`dpmagic.aggregates.common.exact_cell_sums`) with
OpenDP's integer noise (:func:`dpmagic.noise.calibration.calibrate`, :func:`~dpmagic.noise.calibration.release_integer`).
S and Q are exact int64 sums on int columns while their values fit (|x − c| ≤ 2⁶², (x − c)² ≤ 2⁶²); otherwise,
and on float columns, each per-row value is clamped into its public range and quantised to a power-of-two
quantum u (:func:`~dpmagic.noise.calibration.float_unit`, :func:`~dpmagic.noise.calibration.quantise`): the sensitivity is
then that of the quantised range, brute-force tested in ``tests/test_aggregate_sensitivity.py``.

The variance is post-processing: var = (Q − S²/n) / (n − ddof) with n = max(noisy n, ddof + 1), clipped
into [0, (hi − lo)²/4] (the largest variance of values in [lo, hi]); STDDEV is its square root.  Its 95%
interval (:func:`interval`) comes from the three releases' own intervals by a union bound and the monotonicity
of the formula: it covers the exact variance of the clamped values with probability ≥ 95% (STDDEV: the square
roots of its ends).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from sqlglot import exp

from dpmagic.accountant.currency import Definition
from dpmagic.aggregates.exactsum import exact_cell_sums
from dpmagic.aggregates.registry import AggregateUnit, PlanContext, SqlInputs, SqlResults, UnitPlan, register
from dpmagic.aggregates.sqlexpr import Quantised, as_double, clip, col, lit, quantise_sql
from dpmagic.domain.schema import NumericColumn
from dpmagic.noise.calibration import MAX_ROWS, Noise, calibrate, float_unit, quantise, release_integer
from dpmagic.noise.sensitivity import Coverage, patterns, value_range

if TYPE_CHECKING:
    from dpmagic.aggregates.moments import Drawn
    from dpmagic.query.model import Aggregate

__all__ = ["StddevUnit", "VarUnit", "VariancePlan", "SumPart", "plan", "exact", "release", "center", "sql_values"]

#: Largest |per-row value| summed as an exact int64 (the limbs of exact_cell_sums need int64 values).
_INT_LIMIT = 2**62


@dataclass(frozen=True)
class SumPart:
    """One summed per-row value with its public range [a, b], summed exactly (``unit`` None) or quantised."""

    noise: Noise
    a: float
    b: float
    quantised: bool

    def __str__(self) -> str:
        return str(self.noise)


@dataclass(frozen=True)
class VariancePlan:
    """The noise of n, S = Σ(x − c) and (when a VAR / STDDEV needs it) Q = Σ(x − c)² for values in [lo, hi]."""

    count: Noise
    total: SumPart
    squares: SumPart | None
    lo: float
    hi: float
    c: float
    is_int: bool


def center(lo: float, hi: float, is_int: bool) -> float:
    """The midpoint of [lo, hi] (rounded down to an integer on int columns: exact Python ints)."""
    if is_int:
        return (int(lo) + int(hi)) // 2
    return (lo + hi) / 2.0


def _part(
    definition: Definition, share: float, cov: Coverage, a: float, b: float, exact_int: bool, *, replace_one: bool
) -> SumPart:
    if exact_int:
        return SumPart(calibrate(definition, share, patterns(a, b, cov, replace_one=replace_one)), a, b, False)
    a, b = float(a), float(b)
    real = patterns(a, b, cov, replace_one=replace_one)
    unit = float_unit(definition, share, real, max(abs(a), abs(b)))
    sens = patterns(int(np.rint(a / unit)), int(np.rint(b / unit)), cov, replace_one=replace_one)
    return SumPart(calibrate(definition, share, sens, unit=unit, bias=MAX_ROWS * unit / 2.0), a, b, True)


def plan(
    lo: float,
    hi: float,
    is_int: bool,
    definition: Definition,
    share: float,
    cov: Coverage,
    *,
    replace_one: bool,
    shares: tuple[float, float, float] | None = None,
    count: Noise | None = None,
    squares: bool = True,
) -> VariancePlan:
    """The releases' noise for values in [lo, hi] (the box's clamped value range); no data read.

    ``shares`` = (count, sum, squares) costs (default: ``share`` each); ``count`` an already calibrated count
    noise (shared with the query's COUNT / AVG); ``squares`` False plans no sum of squares (``squares`` is then
    None: an AVG or SUM needs only n and S)."""
    c = center(lo, hi, is_int)
    n_share, s_share, q_share = shares if shares is not None else (share, share, share)
    if count is None:
        count = calibrate(definition, n_share, patterns(1, 1, cov, replace_one=replace_one))
    sa, sb = lo - c, hi - c
    q = max(sa * sa, sb * sb)
    s_exact = is_int and max(abs(sa), abs(sb)) <= _INT_LIMIT
    q_exact = is_int and q <= _INT_LIMIT
    total = _part(definition, s_share, cov, sa, sb, s_exact, replace_one=replace_one)
    sq: SumPart | None = None
    if squares:
        sq = _part(
            definition,
            q_share,
            cov,
            0 if q_exact else 0.0,
            q if q_exact else float(q),
            q_exact,
            replace_one=replace_one,
        )
    return VariancePlan(count, total, sq, lo, hi, c, is_int)


def _values(part: SumPart, v: np.ndarray) -> np.ndarray:
    """The int64 per-row values summed for ``part``: exact, or clamped into [a, b] and quantised."""
    if part.quantised:
        return quantise(v.astype(np.float64), part.noise.unit, part.a, part.b)
    return v.astype(np.int64)


def exact(values: np.ndarray, cell: np.ndarray, n_cells: int, p: VariancePlan) -> dict[str, list[int]]:
    """Per cell: exact n, S and Q (int; in the quantum of a quantised part).

    ``values`` and ``cell`` cover *every* row of the table; ``cell == n_cells`` is the discarded bin (rows
    outside the WHERE filter).  Values are clamped into [lo, hi] first (a no-op on the box's rows unless the
    analyst clamped), so the work and the int64 arithmetic do not depend on the data.  O(rows).
    """
    n = np.bincount(cell, minlength=n_cells + 1)[:n_cells].astype(np.int64).tolist()
    sq = p.squares
    q_in: np.ndarray | None = None
    if p.is_int:
        y = np.clip(values.astype(np.int64), np.int64(p.lo), np.int64(p.hi))
        s_in = (y - np.int64(p.c)) if not p.total.quantised else (y.astype(np.float64) - float(p.c))
        if sq is not None and sq.quantised:
            q_in = (y.astype(np.float64) - float(p.c)) ** 2
        elif sq is not None:
            yc = y - np.int64(p.c)
            q_in = yc * yc
    else:
        x = np.clip(values.astype(np.float64), p.lo, p.hi) - p.c
        s_in, q_in = x, x * x
    out = {"n": n, "s": exact_cell_sums(cell, _values(p.total, s_in), n_cells)}
    if sq is not None:
        assert q_in is not None
        out["q"] = exact_cell_sums(cell, _values(sq, q_in), n_cells)
    return out


def release(
    inputs: dict[str, list[int]], p: VariancePlan, ddof: float, sqrt: bool, level: float = 0.95
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The noisy variance (or standard deviation) per cell: post-processing of three integer releases."""
    assert p.squares is not None
    n = release_integer(inputs["n"], p.count)
    s = release_integer(inputs["s"], p.total.noise)
    q = release_integer(inputs["q"], p.squares.noise)
    return from_noisy(n, s, q, p, ddof, sqrt, level)


def from_noisy(
    n: np.ndarray, s: np.ndarray, q: np.ndarray, p: VariancePlan, ddof: float, sqrt: bool, level: float = 0.95
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The variance (or standard deviation) per cell and its ``level`` interval from the noisy n, S and Q
    (post-processing: one draw of n, S, Q serves VAR and STDDEV of every ddof, and STDDEV is exactly the square
    root of the VAR of the same ddof, its interval the square roots of VAR's)."""
    nn = np.maximum(n, ddof + 1.0)
    with np.errstate(over="ignore", invalid="ignore"):
        var = (q - s * s / nn) / (nn - ddof)
    var = np.clip(np.nan_to_num(var, nan=0.0), 0.0, (float(p.hi) - float(p.lo)) ** 2 / 4.0)
    low, high = interval(n, s, q, p, ddof, level)
    if sqrt:
        return np.sqrt(var), np.sqrt(low), np.sqrt(high)
    return var, low, high


def interval(
    n: np.ndarray, s: np.ndarray, q: np.ndarray, p: VariancePlan, ddof: float, level: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """A ``level`` interval of each cell's exact variance (of the clamped values), from the three releases.

    Each of n, S, Q gets its own interval at level 1 − (1 − ``level``)/3 (the noise's exact half-width, its
    rounding and quantisation bias included), so all three hold together with probability ≥ ``level`` (union
    bound).  On that event, with d = ddof and n_l > d, the exact variance f(n, S, Q) = (Q − S²/n)/(n − d) lies in

        [max(Q_l, 0)/(n_h − d) − max S²/(n_l(n_l − d)),   Q_h/(n_l − d) − min S²/(n_h(n_h − d))]

    (f increases with Q, decreases with S², and each of its two terms shrinks in magnitude as n grows, so every
    term is bounded at its own worst end), clipped into [0, W²/4 · n_l/(n_l − d)] — the largest variance of
    values in a range of width W (for d > 0 the factor n/(n − d) is largest at the smallest n).  Where the count's
    interval reaches d or below, or a release may have been clamped before noise, the interval is that whole
    range: conservative, never wrong.  O(cells)."""
    assert p.squares is not None
    lvl = 1.0 - (1.0 - level) / 3.0
    h_n, h_s, h_q = (x.ci_halfwidth(lvl) for x in (p.count, p.total.noise, p.squares.noise))
    clamped = (
        (np.abs(n) + h_n >= p.count.clamp)
        | (np.abs(s) + h_s >= p.total.noise.clamp)
        | (np.abs(q) + h_q >= p.squares.noise.clamp)
    )
    n_l, n_h = np.maximum(n - h_n, 0.0), n + h_n
    s_l, s_h = s - h_s, s + h_s
    q_l, q_h = np.maximum(q - h_q, 0.0), q + h_q
    s2_max = np.maximum(s_l * s_l, s_h * s_h)
    s2_min = np.where((s_l <= 0.0) & (s_h >= 0.0), 0.0, np.minimum(s_l * s_l, s_h * s_h))
    ok = (n_l > ddof) & ~clamped
    width2 = (float(p.hi) - float(p.lo)) ** 2 / 4.0
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        safe_l = np.where(ok, n_l, ddof + 1.0)
        safe_h = np.where(ok, n_h, ddof + 1.0)
        cap = width2 * safe_l / (safe_l - ddof) if ddof > 0 else np.full(len(n), width2)
        lo = q_l / (safe_h - ddof) - s2_max / (safe_l * (safe_l - ddof))
        hi = q_h / (safe_l - ddof) - s2_min / (safe_h * (safe_h - ddof))
    cap = np.asarray(cap, dtype=np.float64)
    # the whole range where the event gives nothing (a count that may be ≤ ddof, a clamped release)
    big = width2 * (ddof + 1.0) if ddof > 0 else width2
    lo = np.where(ok, np.clip(np.nan_to_num(lo, nan=0.0), 0.0, cap), 0.0)
    hi = np.where(ok, np.clip(np.nan_to_num(hi, nan=big), 0.0, cap), big)
    return lo, np.maximum(hi, lo)


Valued = tuple["exp.Expr | Quantised", int]


def sql_values(name: str, p: VariancePlan) -> tuple[Valued, Valued | None]:
    """The per-row S and Q values of :func:`dpmagic.aggregates.variance.exact` (same formulas, same units),
    each with a proven bound of its magnitude (:func:`exact_sum`); Q is None when the plan has no squares."""
    x = col(name)
    sq = p.squares
    if p.is_int:
        y = clip(x, int(p.lo), int(p.hi))
        c = int(p.c)
        dev = max(abs(int(p.lo) - c), abs(int(p.hi) - c))  # |y - c|
        yd = exp.Sub(this=as_double(y.copy()), expression=lit(float(p.c)))
        s: Valued
        q: Valued | None = None
        if p.total.quantised:
            qs = quantise_sql(yd.copy(), p.total.noise.unit, p.total.a, p.total.b)
            s = (qs, qs.bound)
        else:
            s = (exp.Sub(this=y.copy(), expression=lit(c)), dev)
        if sq is not None and sq.quantised:
            qq = quantise_sql(
                exp.Mul(this=exp.paren(yd.copy()), expression=exp.paren(yd.copy())), sq.noise.unit, sq.a, sq.b
            )
            q = (qq, qq.bound)
        elif sq is not None:
            yc = exp.paren(exp.Sub(this=y.copy(), expression=lit(c)))
            q = (exp.Mul(this=yc, expression=yc.copy()), dev * dev)
        return s, q
    xc = exp.paren(exp.Sub(this=clip(as_double(x), float(p.lo), float(p.hi)), expression=lit(float(p.c))))
    qs = quantise_sql(xc.copy(), p.total.noise.unit, p.total.a, p.total.b)
    if sq is None:
        return (qs, qs.bound), None
    qq = quantise_sql(exp.Mul(this=xc.copy(), expression=xc.copy()), sq.noise.unit, sq.a, sq.b)
    return (qs, qs.bound), (qq, qq.bound)


class VarUnit(AggregateUnit):
    """VAR (sample or population: ``param`` is the ddof): a COUNT, a centred SUM and a centred sum of squares."""

    kind = "var"
    releases = 3
    quantities = ("n", "s", "q")  # shared with COUNT / AVG / SUM and STDDEV of the query (moments)
    sqrt: ClassVar[bool] = False

    def answer(self, agg: Aggregate, drawn: Drawn, level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """From the query's shared draws of n, S and Q (:mod:`dpmagic.aggregates.moments`): VAR and STDDEV of one
        column and ddof read the same numbers, so STDDEV is exactly the square root of VAR."""
        assert drawn.count is not None
        s, q, p = drawn.centred[agg.sum_key]
        assert q is not None
        ddof = 1.0 if agg.param is None else float(agg.param)
        return from_noisy(drawn.count[0], s, q, p, ddof, self.sqrt, level)

    def plan(self, agg: Aggregate, ctx: PlanContext) -> UnitPlan:
        c = ctx.schema[str(agg.column)]
        assert isinstance(c, NumericColumn)
        lo, hi = value_range(ctx.query, ctx.schema, str(agg.column), agg.clamp)  # the box's clamped value range
        p = plan(lo, hi, c.is_int, ctx.definition, ctx.share, ctx.coverage, replace_one=ctx.replace_one)
        return UnitPlan(agg, p, lo, hi)

    def describe(self, u: UnitPlan) -> dict[str, str]:
        a, p = u.agg, u.plan
        return {
            f"{a.func}({a.column}) count": str(p.count),
            f"{a.func}({a.column}) sum": str(p.total),
            f"{a.func}({a.column}) sum of squares": str(p.squares),
        }

    def exact(self, u: UnitPlan, values: np.ndarray, cell: np.ndarray, n_cells: int) -> Any:
        return exact(values, cell, n_cells, u.plan)

    def sql(self, u: UnitPlan, alias: str, b: SqlInputs) -> Any:
        (s_expr, s_bound), sq = sql_values(str(u.agg.column), u.plan)
        assert sq is not None
        q_expr, q_bound = sq
        ks = b.value(s_expr)
        kq = b.value(q_expr)
        b.exact_sum(f"vs_{alias}", ks, s_bound)
        b.exact_sum(f"vq_{alias}", kq, q_bound)
        return None

    def read(self, u: UnitPlan, alias: str, handle: Any, r: SqlResults) -> Any:
        return {"n": [int(v) for v in r.counts], "s": r.per_cell(f"vs_{alias}"), "q": r.per_cell(f"vq_{alias}")}

    def release(self, u: UnitPlan, inputs: Any, level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ddof = 1.0 if u.agg.param is None else float(u.agg.param)
        return release(inputs, u.plan, ddof, self.sqrt, level)

    def sensitivities(self, u: UnitPlan) -> dict[str, Any]:
        p = u.plan
        assert p.squares is not None
        return {"n": p.count, "s": p.total.noise, "q": p.squares.noise}

    def integer_releases(self, u: UnitPlan, inputs: Any) -> dict[str, list[int]]:
        return {k: [int(v) for v in inputs[k]] for k in ("n", "s", "q")}


class StddevUnit(VarUnit):
    """STDDEV: the square root of :class:`VarUnit`'s variance (post-processing)."""

    kind = "stddev"
    sqrt = True


register(VarUnit())
register(StddevUnit())
