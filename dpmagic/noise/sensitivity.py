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

**Person level** (``schema.person_unit`` set; docs/people.md §2).  A neighbouring step adds or removes one
person with all their kept rows, or replaces one person's rows by another's.  :func:`coverage_of` attaches the
person's :class:`~dpmagic.domain.unit.Contribution` to the query (T rows at most in the query's cells, at most
c in one cell, at most n cells; a GROUP BY column constant within a person — the id or an invariant column —
puts all of a person's rows in one of its cells), and :func:`patterns` then returns a :class:`NormSensitivity`
(:func:`person_patterns`): explicit bounds on the L1, L2 and L∞ norms and on the number of changed cells of every
change vector, each proven in docs/people.md §2 and brute-force tested (``tests/test_people_sensitivity.py``).
A person with at most one row in the query's cells (T = 1) is a row, and the row-level patterns apply.

Complexity: O(number of GROUP BY and constrained columns) per release; no data is read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from dpmagic.domain.columns import clamp_bounds  # re-exported (its old home)
from dpmagic.domain.schema import NumericColumn, Schema
from dpmagic.domain.sets import IntervalSet
from dpmagic.domain.unit import Contribution, PersonUnit
from dpmagic.query.model import GroupKey, Query

__all__ = [
    "Sensitivity",
    "NormSensitivity",
    "Coverage",
    "clamp_bounds",
    "coverage_of",
    "distinct_sensitivity",
    "patterns",
    "person_contribution",
    "person_distance",
    "person_patterns",
    "person_rows",
    "release_sensitivity",
    "value_range",
]


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


@dataclass(frozen=True)
class NormSensitivity(Sensitivity):
    """A sensitivity given by proven bounds on the norms of every change vector d a neighbouring step makes
    (person level: the changes are too many to list as patterns, docs/people.md §2): ‖d‖₁ ≤ ``norm1``,
    ‖d‖₂ ≤ ``norm2``, ‖d‖∞ ≤ ``norminf``, at most ``cells`` non-zero entries.

    :meth:`coarsen` keeps every bound proven: rounding to a grid of k units maps each entry dⱼ to at most
    ⌈|dⱼ|/k⌉ < |dⱼ|/k + 1 units and leaves zero entries at zero, so over at most n changed cells
    Σ⌈|dⱼ|/k⌉ < ‖d‖₁/k + n (also ≤ n·⌈‖d‖∞/k⌉) and, by Minkowski's inequality on the non-negative vectors
    |d|/k and the support's indicator, ‖⌈|d|/k⌉‖₂ ≤ ‖d‖₂/k + √n (also ≤ √n·⌈‖d‖∞/k⌉).  (Coarsening representative
    patterns entry-wise would not be: (3, 1) and (4) and (1, 1, 1, 1) share ‖·‖₁ = 4, but only (3, 1) → (2, 1).)
    """

    norm1: float = 0
    norm2: float = 0.0
    norminf: float = 0
    cells: int = 1

    @property
    def l1(self) -> float:
        return self.norm1

    @property
    def l2(self) -> float:
        return self.norm2

    @property
    def linf(self) -> float:
        return self.norminf

    @property
    def max_cells(self) -> int:
        return max(1, self.cells)

    @property
    def is_zero(self) -> bool:
        return self.norm1 == 0 and self.norminf == 0

    def coarsen(self, k: int) -> Sensitivity:
        if k == 1:
            return self
        n = self.max_cells
        inf = _ceil_div(self.norminf, k)
        if isinstance(self.norm1, int):
            l1: float = min((self.norm1 + n * k) // k, n * int(inf))
        else:
            l1 = min(self.norm1 / k + n, n * inf)
        l2 = min(self.norm2 / k + math.sqrt(n), math.sqrt(n) * inf)
        return NormSensitivity((), l1, l2, inf, n)


def _ceil_div(s: float, k: int) -> float:
    return -(-s // k) if isinstance(s, int) else math.ceil(s / k)


@dataclass(frozen=True)
class Coverage:
    """What of a query's box matters for sensitivities: emptiness, whether rows can be outside it, its cells."""

    empty: bool
    whole_domain: bool
    cells: int  # number of GROUP BY cells holding rows of the box
    #: person level: the bounds of one person's rows over the query's cells (None: one row is the unit)
    contribution: Contribution | None = None
    #: person level: the unit's id column (COUNT(DISTINCT id) counts persons: :func:`distinct_sensitivity`)
    unit_id: str | None = None


def coverage_of(query: Query, schema: Schema) -> Coverage:
    """The coverage facts of ``query``: its WHERE box (for an exact :class:`~dpmagic.query.model.Filter`, the
    smallest box covering it, a superset of the rows it selects) and its GROUP BY cells.

    ``cells`` counts the cells of :attr:`Query.groups` whose set meets the box on that column (categorical
    values, declared integers or declared bins): an upper bound of the cells that can hold a row of the box,
    which is the safe direction (≥ 2 cells adds the two-cell pattern).  With an exact filter, rows of the box
    can fall outside the filter, so the coverage is never the whole domain.  O(number of cells).
    """
    box = query.where
    unit = schema.person_unit
    if box.is_empty():
        return Coverage(True, False, 0, None, None if unit is None else unit.id)
    per_key = [len(labels) for labels in query.region_labels()]
    cells = math.prod(per_key)
    # A Box drops tautologies on construction: it covers the whole domain iff it constrains nothing (and no
    # exact filter narrows it further).
    whole = not box.constraints and query.filter is None
    if unit is None:
        return Coverage(False, whole, cells)
    return Coverage(False, whole, cells, person_contribution(unit, query.groups, per_key), unit.id)


def person_contribution(unit: PersonUnit, groups: tuple[GroupKey, ...], cells: list[int]) -> Contribution:
    """One person's contribution bounds over a query's GROUP BY keys ``groups`` with ``cells[i]`` cells meeting
    the box each (docs/people.md §2): :meth:`PersonUnit.contribution`, with two adjustments.

    * A key on a column constant within a person (:attr:`PersonUnit.separating`: the id, an invariant column)
      puts all of a person's rows in one of its cells: it counts as one cell.
    * A per-group ``max_rows`` c bounds a person's rows per *value* of the column: it bounds the rows in a cell
      only when the key's cells are the column's values (a categorical key, ``sets`` None); a binned key's cell
      may hold several values, so there it bounds the rows per cell by c·g when ``max_groups`` g is declared,
      else not at all.  (``max_groups`` bounds the cells of a binned key as well: distinct bins need distinct
      values.)
    """
    eff: dict[str, int] = {}
    for g, n in zip(groups, cells):
        n = 1 if g.column in unit.separating else max(1, n)
        eff[g.column] = eff.get(g.column, 1) * n
    base = unit.contribution(eff)
    per_cell = unit.kept_rows
    for g in groups:
        b = unit.per_group.get(g.column)
        if b is None or b.max_rows is None or g.column in unit.separating:
            continue
        if g.sets is None:
            per_cell = min(per_cell, b.max_rows)
        elif b.max_groups is not None:
            per_cell = min(per_cell, b.max_rows * b.max_groups)
    return Contribution(rows=base.rows, per_cell=per_cell, cells=base.cells)


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
    """The change patterns of a sum of per-row values in [lo, hi] over ``cov`` (module docstring); at person
    level (``cov.contribution`` set, more than one row of a person in the query's cells) the norm bounds of
    :func:`person_patterns`."""
    if cov.empty:
        return Sensitivity(())
    if cov.contribution is not None and cov.contribution.total > 1:
        return person_patterns(lo, hi, cov, cov.contribution, replace_one=replace_one)
    m = max(abs(lo), abs(hi))
    if not replace_one:
        return Sensitivity(((m,),))
    out: list[tuple[float, ...]] = [(hi - lo,)]
    if not cov.whole_domain:
        out.append((m,))
    if cov.cells >= 2:
        out.append((m, m))
    return Sensitivity(tuple(out))


def person_patterns(
    lo: float, hi: float, cov: Coverage, contribution: Contribution, *, replace_one: bool
) -> NormSensitivity:
    """The sensitivity of a sum of per-row values in [lo, hi] over ``cov`` when one step adds, removes or
    replaces one person (docs/people.md §2, Propositions 2.1–2.3).

    With T = ``contribution.total``, c = ``per_cell``, n = min(``cells``, ``cov.cells``), M = max(|lo|, |hi|),
    P = max(hi, 0), N = max(−lo, 0), R = P + N and ℓ = :meth:`Contribution.l2_rows`:

    * add/remove: ‖d‖₁ ≤ T·M, ‖d‖₂ ≤ ℓ·M, ‖d‖∞ ≤ c·M, n cells;
    * replace, one cell: |d| ≤ max_k k·hi − min_k k·lo over k ∈ [k₀, T] (k₀ = 1 if every row is in the box,
      a person having at least one row; else 0) — at most T·R;
    * replace, several cells: ‖d‖₁ ≤ 2T·M, ‖d‖₂ ≤ ℓ·min(√2·R, 2M), ‖d‖∞ ≤ c·R, min(C, 2n) cells.
    """
    t, c = contribution.total, contribution.per_cell
    n = max(1, min(contribution.cells, cov.cells))
    m = max(abs(lo), abs(hi))
    pos, neg = max(hi, 0), max(-lo, 0)
    ell = contribution.l2_rows()
    if not replace_one:
        return NormSensitivity((), t * m, ell * m, c * m, n)
    if cov.cells <= 1:
        k0 = 1 if cov.whole_domain else 0
        top = t * hi if hi >= 0 else k0 * hi
        bottom = t * lo if lo <= 0 else k0 * lo
        d = top - bottom
        return NormSensitivity((), d, float(d), d, 1)
    r = pos + neg
    return NormSensitivity((), 2 * t * m, ell * min(math.sqrt(2.0) * r, 2.0 * m), c * r, min(cov.cells, 2 * n))


def distinct_sensitivity(cov: Coverage, column: str, *, replace_one: bool) -> Sensitivity:
    """The sensitivity of COUNT(DISTINCT ``column``) over ``cov``.

    A cell's distinct count moves like a sum of per-row values in [0, 1] (:mod:`dpmagic.aggregates.distinct`):
    :func:`patterns` (0, 1), at row and at person level.  At person level COUNT(DISTINCT id) counts persons: one
    step changes each of the person's ≤ n cells by exactly 1 (add/remove: ‖d‖₁ = n, ‖d‖₂ = √n, ‖d‖∞ = 1); a
    replacement −1 in the old person's cells and +1 in the new one's (0 where both are), ≤ min(C, 2n) cells, and
    nothing with one cell that holds every row (docs/people.md §2, Proposition 2.4).
    """
    if cov.empty or cov.contribution is None or column != cov.unit_id:
        return patterns(0, 1, cov, replace_one=replace_one)
    n = max(1, min(cov.contribution.cells, cov.cells))
    if replace_one:
        if cov.cells <= 1:
            d = 0 if cov.whole_domain else 1
            return NormSensitivity((), d, float(d), d, 1)
        n = min(cov.cells, 2 * n)
    return NormSensitivity((), n, math.sqrt(n), 1, n)


def person_distance(
    contribution: Contribution, cells: int, *, replace_one: bool, definition: str, extreme: bool
) -> float:
    """The distance a per-cell OpenDP quantile measurement is calibrated at when one step adds, removes or
    replaces one person whose rows fall in the query's ``cells`` cells (docs/people.md §2, Proposition 2.5).

    Per cell j a step moves the cell's data set by a symmetric distance dⱼ (the person's rows there: ≤ c;
    replace: aⱼ + bⱼ ≤ 2c) and, for MIN / MAX, each candidate's count score by eⱼ ≤ nⱼ (replace: max(aⱼ, bⱼ)).
    OpenDP's maps of the exponential mechanism are linear in the distance under pure DP and quadratic under zCDP,
    so the cells compose to the map at ‖d‖₁ (pure) or ‖d‖₂ (zCDP), bounded as for a sum of per-row values
    in [0, 1]: T or ℓ (add/remove), 2T or 2ℓ (replace; MIN / MAX: 2T or √2·ℓ), and T, 2T (MIN / MAX: T) in one
    cell.  The symmetric distance is an integer: a quantile's L2 bound is rounded up.
    """
    t, ell = contribution.total, contribution.l2_rows()
    if cells <= 1:
        return float(t if (extreme or not replace_one) else 2 * t)
    if definition == "pure":
        return float(2 * t if replace_one else t)
    if not replace_one:
        d = ell
    else:
        d = math.sqrt(2.0) * ell if extreme else 2.0 * ell
    return d if extreme else float(math.ceil(d))


def person_rows(schema: Schema, query: Query) -> int:
    """T: the most rows one person has in ``query``'s cells (1 for a row-level schema): the factor by which a
    linear release's row-level L1 sensitivity grows at person level (batches, decision queries; docs/people.md
    §2, Proposition 2.6)."""
    cov = coverage_of(query, schema)
    return 1 if cov.contribution is None else cov.contribution.total


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
