"""Directed rounding of float64 sums: every reported upper bound of γ_w is rounded *up*, every lower bound *down*.

Floating-point sums are rounded to nearest, so a computed sum can sit just below the exact (real) sum of its
terms; charging it would under-charge by up to an ulp (or, for long sums computed by numpy, by up to
``(k-1)·2⁻⁵³`` relative, Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., SIAM 2002, §4.2).
This module is the single place that turns computed float values into proven bounds:

* :func:`sum_up` / :func:`sum_down` — the exact sum of a list of floats rounded up / down (``math.fsum`` is
  correctly rounded to nearest; a second ``fsum`` of the terms minus the result gives the sign of the error);
* :func:`proven_upper` — a proven upper bound of a quantity whose float64 evaluation used at most ``n_terms``
  additions of terms whose partial sums are bounded by ``scale`` (default ``|x|``: sums of non-negative terms);
  then snapped down to the weights' lattice (:func:`grid_of`) when all weights are multiples of a power of two
  (integers, halves …: γ is such a multiple, so a bound within one grid step snaps to the exact value);
* :func:`is_exact` — the relative tolerance ``REL_TOL`` within which ``[lower, upper]`` is reported exact.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from dpmagic.overlap.encoding import Problem

__all__ = [
    "ProblemRounding",
    "DecimalLattice",
    "REL_TOL",
    "sum_up",
    "sum_down",
    "add_up",
    "proven_upper",
    "grid_of",
    "is_exact",
]

#: ``[lower, upper]`` is reported exact when ``upper - lower <= REL_TOL * upper`` (the charge is always ``upper``)
REL_TOL = 1e-9
_U = 2.0**-53  # unit roundoff of float64
_ETA = 2.0**-1074  # smallest subnormal (absolute error of an operation in the subnormal range)


def _directed_sum(values: Iterable[float], up: bool) -> float:
    """``math.fsum`` (correctly rounded to nearest), moved one ulp toward ``±inf`` when it lies on the wrong
    side of the exact sum (the residual's sign, itself computed exactly by ``fsum``)."""
    xs = [float(v) for v in values]
    s = math.fsum(xs)
    if not math.isfinite(s):
        return s
    xs.append(-s)
    r = math.fsum(xs)  # exact sum − s, correctly rounded (so its sign is exact)
    if up:
        return s if r <= 0.0 else math.nextafter(s, math.inf)
    return s if r >= 0.0 else math.nextafter(s, -math.inf)


def sum_up(values: Iterable[float]) -> float:
    """The smallest float64 ≥ the exact real sum of ``values``.  ``O(k)``."""
    return _directed_sum(values, True)


def sum_down(values: Iterable[float]) -> float:
    """The largest float64 ≤ the exact real sum of ``values``.  ``O(k)``."""
    return _directed_sum(values, False)


def add_up(a: float, b: float) -> float:
    """``a + b`` rounded up (exact real sum of two floats)."""
    return sum_up((a, b))


def grid_of(weights: np.ndarray) -> float:
    """The largest power of two ``g`` with every weight an integer multiple of ``g`` (0.0 if none/empty).

    Every sum of weights (γ_w included) is then a multiple of ``g``.  ``O(n)``.
    """
    w = np.asarray(weights, dtype=np.float64)
    w = w[w != 0.0]
    if len(w) == 0 or not np.all(np.isfinite(w)):
        return 0.0
    m, e = np.frexp(np.abs(w))  # |w| = m·2^e, m ∈ [0.5, 1): the mantissa is the integer m·2^53
    mant = (m * 2.0**53).astype(np.int64)
    low = mant & -mant  # lowest set bit
    tz = np.log2(low.astype(np.float64)).astype(np.int64)
    k = int(np.min(e.astype(np.int64) - 53 + tz))
    if k < -1074:
        return 0.0
    return math.ldexp(1.0, k)


def proven_upper(x: float, n_terms: int = 0, scale: float = 0.0, grid: float = 0.0) -> float:
    """A float64 proven ≥ the exact quantity whose float64 evaluation gave ``x``.

    ``x`` was computed with at most ``n_terms`` floating-point additions (any order, rounded to nearest) of
    terms whose partial sums are bounded in magnitude by ``scale`` (default ``|x|``, i.e. non-negative terms,
    whose partial sums never exceed the total).  The rounding error is then at most ``n_terms·u·scale`` plus
    one ``η`` per operation in the subnormal range (Higham 2002, §4.2, with ``u = 2⁻⁵³``); the bound adds
    twice that, rounds the addition up, and snaps down to a multiple of ``grid`` when ``grid > 0`` (every
    weight a multiple of ``grid``, see :func:`grid_of`).  Infinite ``x`` is returned unchanged.  ``O(1)``.
    """
    if not math.isfinite(x):
        return x
    k = max(int(n_terms), 0) + 2
    mag = max(abs(x), float(scale))
    err = 2.0 * k * (_U * mag + _ETA)
    up = math.nextafter(math.nextafter(x + err, math.inf), math.inf)
    if grid > 0.0:
        q = up / grid  # exact: grid is a power of two (barring overflow, checked)
        if math.isfinite(q) and abs(q) < 2.0**53:
            up = math.floor(q) * grid
    return up


def is_exact(lower: float, upper: float) -> bool:
    """Whether ``[lower, upper]`` meet within the relative tolerance ``REL_TOL`` (both finite, lower ≤ upper)."""
    if not (math.isfinite(lower) and math.isfinite(upper)):
        return False
    return upper - lower <= REL_TOL * abs(upper)


#: decimal lattices finer than 10^-DECIMAL_MAX_DIGITS are not used (the snap would rarely help)
DECIMAL_MAX_DIGITS = 9
_DECOMPOSED: dict[float, tuple[int, int, Fraction]] = {}  # w -> (digits d, k, w - k·10^-d), exact


def _decompose(w: float) -> tuple[int, int, Fraction]:
    """``(d, k, e)`` with ``w = k·10^-d + e`` exactly, ``k·10^-d`` the shortest decimal that rounds to ``w``."""
    got = _DECOMPOSED.get(w)
    if got is None:
        dec = Decimal(repr(w))
        d = max(0, -int(dec.as_tuple().exponent))
        k = int(dec.scaleb(d))
        got = (d, k, Fraction(w) - Fraction(k, 10**d))
        if len(_DECOMPOSED) > 100_000:
            _DECOMPOSED.clear()
        _DECOMPOSED[w] = got
    return got


@dataclass(frozen=True)
class DecimalLattice:
    """Weights that are (to within a tiny known error) multiples of ``10^-digits``: ``w_i = k_i·δ + e_i``.

    Costs typed by people are short decimals (ε = 0.05, 0.037): as floats they are not multiples of a power of
    two, so :func:`grid_of` finds no lattice, but each is ``k_i·δ + e_i`` with ``|e_i| < ulp``, computed exactly
    (:class:`~fractions.Fraction`).  Any load ``Σ_{i∈S} w_i = K·δ + E`` with ``−neg ≤ E ≤ pos``
    (``neg = Σ max(−e_i, 0)``, ``pos = Σ max(e_i, 0)`` over all the problem's weights, counted with
    multiplicity).  So a proven bound ``U ≥`` load gives ``K ≤ ⌊(U + neg)/δ⌋`` and load ``≤ ⌊(U + neg)/δ⌋·δ +
    pos`` (:meth:`snap`, rounded up): a bound within less than one step of the true maximum snaps to it (up to
    ``pos + neg``, far below ``REL_TOL``).  Exact rational arithmetic, so the result is a proven upper bound.
    """

    digits: int
    neg: Fraction
    pos: Fraction

    @classmethod
    def of(cls, weights: np.ndarray) -> DecimalLattice | None:
        """The lattice of ``weights`` (None when some weight needs more than ``DECIMAL_MAX_DIGITS`` digits).
        ``O(n log n)`` (distinct weights are decomposed once and cached)."""
        w = np.asarray(weights, dtype=np.float64)
        if len(w) == 0 or not bool(np.all(np.isfinite(w))):
            return None
        vals, counts = np.unique(w, return_counts=True)
        parts = [_decompose(float(v)) for v in vals.tolist()]
        d = max(p[0] for p in parts)
        if d > DECIMAL_MAX_DIGITS:
            return None
        # k·10^-di = (k·10^(d-di))·10^-d: the same error e on the common lattice.  Σ c·e summed as integers over
        # the common denominator (Fraction additions re-reduce at every step: ≈ 6 ms for 100 distinct weights)
        den = math.lcm(*(p[2].denominator for p in parts))
        pos_n = neg_n = 0
        for (_, _, e), c in zip(parts, counts.tolist()):
            num = c * e.numerator * (den // e.denominator)
            if num > 0:
                pos_n += num
            else:
                neg_n -= num
        return cls(d, Fraction(neg_n, den), Fraction(pos_n, den))

    def snap(self, upper: float) -> float:
        """A proven upper bound ≤ ``upper`` of any load bounded by ``upper`` (see the class docstring)."""
        if not math.isfinite(upper) or upper < 0:
            return upper
        scale = 10**self.digits
        big_k = math.floor((Fraction(upper) + self.neg) * scale)
        v = Fraction(big_k, scale) + self.pos
        f = float(v)
        if Fraction(f) < v:
            f = math.nextafter(f, math.inf)
        return min(upper, f)


@dataclass(frozen=True)
class ProblemRounding:
    """Proven upper bounds for the float64 values computed on one problem (:mod:`.rounding`).

    Every value a solver computes (a load, a column sum, a colouring bound, a tensor cell) is a float64
    evaluation with at most ``n_terms`` additions of ± weights whose partial sums are bounded by ``total``
    (Σw rounded up): ``n`` for a sum of weights, ``n`` more for the pruning comparisons, two per run of the runs
    column with most runs (the tensor's difference rows), plus the longest cumulative-sum axis.  :meth:`up` turns such a value into a proven bound.
    """

    n_terms: int
    total: float
    grid: float
    lattice: DecimalLattice | None = None

    @classmethod
    def of(cls, prob: Problem) -> ProblemRounding:
        w = np.asarray(prob.weights, dtype=np.float64)
        longest = max((c.a for c in prob.columns), default=0)
        # a runs column's difference rows add two terms per run (a query with several intervals has several runs:
        # red team 17 found 2n too few there), summed over all its runs
        runs = max(
            (int(np.count_nonzero(c.rs < c.re)) for c in prob.columns if c.rs is not None and c.re is not None),
            default=0,
        )
        grid = grid_of(w)
        lattice = DecimalLattice.of(w)
        return cls(2 * len(w) + 2 * runs + longest + 4, sum_up(w.tolist()), grid, lattice)

    def up(self, x: float) -> float:
        """A float ≥ the exact value whose float64 evaluation on this problem gave ``x`` (a load: a sum of some
        of the problem's weights), snapped to the decimal lattice when there is one."""
        return self.snap(proven_upper(x, self.n_terms, self.total, self.grid))

    def snap(self, upper: float) -> float:
        """A proven bound of a load of this problem's weights ≤ ``upper`` (a proven bound of it):
        :meth:`DecimalLattice.snap` when the weights have a decimal lattice, else ``upper``."""
        return self.lattice.snap(upper) if self.lattice is not None else upper

    @property
    def slack(self) -> float:
        """An absolute bound on the rounding error of any such evaluation (0 for exact lattice sums)."""
        if self.grid > 0.0 and self.total / self.grid < 2.0**52:
            return 0.0
        return 2.0 * (self.n_terms + 2) * 2.0**-53 * self.total


def float_slack(weights: np.ndarray) -> float:
    """Absolute bound on the rounding error of float64 sums of ``weights`` (0 when every such sum is exact)."""
    w = np.asarray(weights, dtype=np.float64)
    if len(w) == 0:
        return 0.0
    grid = grid_of(w)
    total = sum_up(w.tolist())
    if grid > 0.0 and total / grid < 2.0**52:
        return 0.0
    return 2.0 * (2 * len(w) + 4) * 2.0**-53 * total
