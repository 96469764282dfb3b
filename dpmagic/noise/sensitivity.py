"""Sensitivities of every release, derived in one place from the neighbouring relation and the query's coverage.

A release is the vector of one aggregate's exact values over a query's cells (one cell without GROUP BY; one
per declared key with it): COUNT, or the SUM of a numeric column (AVG releases both).  Every aggregate here
is a sum over the rows inside the WHERE box B of a per-row contribution v(x) placed in the row's cell: v ≡ 1
for COUNT, the (clamped; for float columns, quantised: :func:`dpmagic.noise.calibration.float_unit`) value for SUM.

Let V be the set of values v(x) takes over the rows x ∈ B (B is a product of per-column sets, so V is the same
in every cell), with lo = inf V, hi = sup V, M = max(|lo|, |hi|) and W = hi − lo.  A neighbouring step changes
the vector of cell answers as follows (Smith et al. 2022 for add/remove; Inan et al. 2017, Inan et al., for bounded DP):

* **add/remove one row** x: nothing if x ∉ B, else one cell by v(x): the change is (M) at most.
* **replace one row** x → x′:
    - x, x′ ∈ B in the same cell: that cell by v(x′) − v(x): (W);
    - x, x′ ∈ B in different cells (possible iff B holds ≥ 2 cells): one cell by −v(x), another by +v(x′):
      (M, M);
    - exactly one of x, x′ in B (possible iff B is not the whole domain): one cell by ±v: (M);
    - neither in B: nothing.

So a release's :class:`Sensitivity` is the list of these *patterns* (the largest |change| of each cell a step
changes), each attained (so the bounds below are tight when lo and hi are attained, e.g. on int columns):
the L1 sensitivity (pure ε-DP, Laplace) is the largest pattern sum, the L2 sensitivity (ρ-zCDP, Gaussian) the
largest pattern norm, and for μ-GDP each cell's discrete Gaussian is calibrated to the largest single change
(L∞) at μ/√k, where k is the largest number of cells one step changes (k independent μ/√k-GDP releases
compose to μ-GDP: Dong, Roth & Su, *Gaussian Differential Privacy*, JRSS B 2022, Cor. 3.3).  In the usual
cases: COUNT has 1 (add/remove) and, under replace-one, 1 without GROUP BY (0 if B is the whole domain), 2 (L1)
/ √2 (L2) with a GROUP BY; SUM has M (add/remove) and, under replace-one, max(W, M) if B is not the whole
domain (a replaced row can leave the box), W if it is, and max(W, 2M) (L1) / max(W, √2·M) (L2) with ≥ 2 cells.

SQL constructs: an analyst's clamp (``SUM(CLAMP(x, a, b))``) clamps V, so lo and hi are the clamped ends of
the box's range (:func:`value_range`); GROUP BY cells may be declared values, declared integers or declared
bins (:attr:`Query.groups`), counted where they meet the box; an exact WHERE filter that is not a box (OR across
columns) is treated through its bounding box B (a superset of its rows: V and the cells only grow) with rows
able to leave it (B is never "the whole domain" then).  All brute-force tested (``tests/test_sensitivity.py``,
``tests/test_aggregate_sensitivity.py``).

A release whose every change is 0 (an empty box, a constant column) is noised as if its sensitivity were 1:
any noise keeps a constant private, and the mechanism stays defined.

Rounding an exact integer release to a grid of k units, r(s) = ⌊s/k + 1/2⌋, maps a change d to one of at
most ⌈|d|/k⌉ grid units (⌊u⌋ − ⌊w⌋ < u − w + 1 and is an integer), so :meth:`Sensitivity.coarsen` applies
⌈·/k⌉ to each entry of each pattern.

Complexity: O(number of GROUP BY and constrained columns) per release; no data is read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from dpmagic.domain.schema import CategoricalColumn, NumericColumn, Schema
from dpmagic.domain.sets import CategorySet, IntervalSet
from dpmagic.query.model import Query

__all__ = ["Sensitivity", "Coverage", "clamp_bounds", "coverage_of", "patterns", "release_sensitivity", "value_range"]


@dataclass(frozen=True)
class Sensitivity:
    """The largest |change| of each cell over the kinds of neighbouring step (see the module docstring)."""

    patterns: tuple[tuple[float, ...], ...]

    @property
    def l1(self) -> float:
        return max((sum(p) for p in self.patterns), default=0)

    @property
    def l2(self) -> float:
        return max((math.sqrt(math.fsum(float(s) ** 2 for s in p)) for p in self.patterns), default=0.0)

    @property
    def linf(self) -> float:
        return max((max(p, default=0) for p in self.patterns), default=0)

    @property
    def max_cells(self) -> int:
        """The largest number of cells one neighbouring step changes (≥ 1)."""
        return max((sum(1 for s in p if s) for p in self.patterns), default=1) or 1

    @property
    def is_zero(self) -> bool:
        return all(s == 0 for p in self.patterns for s in p)

    def or_one(self) -> Sensitivity:
        """This sensitivity, or a single change of 1 if the release is constant (see the module docstring)."""
        return Sensitivity(((1,),)) if self.is_zero else self

    def coarsen(self, k: int) -> Sensitivity:
        """The sensitivity, in grid units, of the release rounded to a grid of ``k`` (integer) units."""
        if k == 1:
            return self
        return Sensitivity(tuple(tuple(_ceil_div(s, k) for s in p) for p in self.patterns))

    def delta(self, definition: str) -> float:
        """The sensitivity the definition's noise is calibrated to: L1 (pure), L2 (zCDP), L∞ per cell (GDP)."""
        if definition == "pure":
            return self.l1
        if definition == "zcdp":
            return self.l2
        return self.linf


def _ceil_div(s: float, k: int) -> float:
    return -(-s // k) if isinstance(s, int) else math.ceil(s / k)


@dataclass(frozen=True)
class Coverage:
    """What of a query's box matters for sensitivities: emptiness, whether rows can be outside it, its cells."""

    empty: bool
    whole_domain: bool
    cells: int  # number of GROUP BY cells holding rows of the box


def coverage_of(query: Query, schema: Schema) -> Coverage:
    """The coverage facts of ``query``: its WHERE box (for an exact :class:`~dpmagic.query.model.Filter`, the
    smallest box covering it, a superset of the rows it selects) and its GROUP BY cells.

    ``cells`` counts the cells of :attr:`Query.groups` whose set meets the box on that column (categorical
    values, declared integers or declared bins): an upper bound of the cells that can hold a row of the box,
    which is the safe direction (≥ 2 cells adds the two-cell pattern).  With an exact filter, rows of the box
    can fall outside the filter, so the coverage is never the whole domain.  O(number of cells).
    """
    box = query.where
    if box.is_empty():
        return Coverage(True, False, 0)
    cells = 1
    for g in query.groups:
        s = box.get(g.column)
        if g.sets is None:
            col = schema[g.column]
            assert isinstance(col, CategoricalColumn)
            cells *= len(s) if isinstance(s, CategorySet) else col.size
        elif s is None:
            cells *= len(g.sets)
        else:
            cells *= sum(1 for b in g.sets if b.overlaps(s))
    # A Box drops tautologies on construction: it covers the whole domain iff it constrains nothing (and no
    # exact filter narrows it further).
    return Coverage(False, not box.constraints and query.filter is None, cells)


def clamp_bounds(col: NumericColumn, clamp: tuple[float, float] | None) -> tuple[float, float]:
    """The bounds the backend clamps a column's values into: the declared bounds, or the analyst's clamp
    (a, b) moved into them, in the column's type (exact Python ints for int columns: no double round trip)."""
    lower, upper = (int(col.lower), int(col.upper)) if col.is_int else (float(col.lower), float(col.upper))
    if clamp is None:
        return lower, upper
    a, b = (int(clamp[0]), int(clamp[1])) if col.is_int else (float(clamp[0]), float(clamp[1]))
    return min(max(a, lower), upper), min(max(b, lower), upper)


def value_range(
    query: Query, schema: Schema, column: str, clamp: tuple[float, float] | None = None
) -> tuple[float, float]:
    """(inf, sup) of ``column``'s values over the rows of the query's (non-empty) box: its declared bounds
    intersected with the box's set on that column (attained on int columns, whose set ends are integers).

    ``clamp`` = (a, b): the values are clamped, x ↦ min(max(x, a), b) (``SUM(CLAMP(col, a, b))``), a
    non-decreasing map, so the range is the clamp of the range's ends: the effective (clamped) bounds.
    """
    col = schema[column]
    assert isinstance(col, NumericColumn)
    s = query.where.get(column)
    if isinstance(s, IntervalSet) and s.intervals:
        lo, hi = s.intervals[0].lo, s.intervals[-1].hi
    else:
        lo, hi = col.lower, col.upper
    if clamp is not None:  # data lies in the declared bounds, where clip(x, a, b) = clip(x, clamp_bounds)
        a, b = clamp_bounds(col, clamp)
        lo, hi = min(max(lo, a), b), min(max(hi, a), b)
    if col.is_int:
        return int(lo), int(hi)
    return float(lo), float(hi)


def patterns(lo: float, hi: float, cov: Coverage, *, replace_one: bool) -> Sensitivity:
    """The change patterns of a sum of per-row values in [lo, hi] over ``cov`` (module docstring)."""
    if cov.empty:
        return Sensitivity(())
    m = max(abs(lo), abs(hi))
    if not replace_one:
        return Sensitivity(((m,),))
    out: list[tuple[float, ...]] = [(hi - lo,)]
    if not cov.whole_domain:
        out.append((m,))
    if cov.cells >= 2:
        out.append((m, m))
    return Sensitivity(tuple(out))


def release_sensitivity(
    query: Query,
    schema: Schema,
    column: str | None,
    *,
    replace_one: bool,
    to_units: Callable[[float], float] | None = None,
    clamp: tuple[float, float] | None = None,
) -> Sensitivity:
    """The sensitivity of the release of COUNT (``column=None``) or SUM(``column``) of ``query``.

    ``to_units`` maps a value of the column to the units the exact sum is computed in (a non-decreasing map,
    e.g. the float quantisation of :func:`dpmagic.noise.calibration.float_unit`); it maps the box's value range.
    ``clamp`` is the analyst's clamp of the summed values (:attr:`Aggregate.clamp`): the range is clamped.
    """
    cov = coverage_of(query, schema)
    if column is None:
        return patterns(1, 1, cov, replace_one=replace_one)
    if cov.empty:
        return Sensitivity(())
    lo, hi = value_range(query, schema, column, clamp)
    if to_units is not None:
        lo, hi = to_units(lo), to_units(hi)
    return patterns(lo, hi, cov, replace_one=replace_one)
