"""One engine-neutral compiler from a :class:`~dpmagic.query.model.Query` to SQL, and the engine backends' common
part (DuckDB: :mod:`dpmagic.backends.duckdb`, Spark: :mod:`dpmagic.backends.spark`).

Size: one module (≈ 600 lines) because the compiler and the validation queries are one translation of the
schema and the query model into SQL; split, each half would need the other's column and literal rules.

Every statement is built as a sqlglot expression tree from the *schema and the parsed query* — column names as
quoted identifiers, values as literals (floats as ``CAST('<repr>' AS DOUBLE)``, which every engine parses to the
same double), never text pasted from the analyst — and rendered with ``.sql(dialect="duckdb" | "spark")``.

What the engine computes, identically to :class:`~dpmagic.backends.pandas.PandasBackend` (bit for bit):

* the **normalised view** of the bound data: every declared column, int columns as BIGINT, float columns as
  DOUBLE, both clamped into the declared bounds under the custodian's ``--clamp`` policy (the pandas path's
  :meth:`Schema.validate` copy);
* the **WHERE filter**: a box is an AND over its columns of a category list (``IN``) or a union of intervals
  with exact ends (Python ints on int columns, doubles on float columns); AND / OR / NOT of boxes map to the
  same SQL operators.  Validated data has no NULL (a NULL or NaN is refused at binding, as in pandas), so
  SQL's three-valued logic never differs from the pandas masks;
* the **cell** of each row: the engine groups by ``dp_in`` (the row passes the filter) and each GROUP BY key
  (a categorical key's raw value, or a bin index); the kernel maps each aggregate row to its declared cell in
  numpy's ``ravel_multi_index`` order and drops the rows outside the filter or in no bin — every row is
  aggregated alike (the same work however many rows the box holds, as the pandas backend's discarded bin);
  zero-filling over the declared keys happens in the kernel;
* exact **integer sums**: BIGINT per-row values summed into HUGEINT (DuckDB's SUM of BIGINT) or, on Spark, as
  one to three BIGINT sums of limbs, as few as the values' proven bound allows, recombined exactly in the kernel
  (:func:`exact_sum`), exact for 2³² rows × 2⁶³; float
  columns clamped and quantised per row with numpy's ``rint`` (round half to even) spelt out in IEEE
  arithmetic that every engine does the same way — r = FLOOR(y), d = y − r (exact), +1 when d > ½ or d = ½ and r
  is odd — or by the engine's own exact ``RINT`` (Spark: Java's ``Math.rint``; :attr:`Compiler.native_rint`),
  so the integer units equal :func:`dpmagic.noise.calibration.quantise`'s;
* the inputs of the aggregates of :mod:`dpmagic.aggregates`: COUNT(DISTINCT) per cell; VAR / STDDEV's three
  exact sums (:func:`dpmagic.aggregates.variance.exact`, same per-row formulas and quantisation); a quantile's
  per-cell *histogram over its public candidate grid* (2K + 1 bins: :func:`dpmagic.aggregates.quantile.bins`,
  computed per row exactly by :func:`bin_sql`), all OpenDP's quantile score depends on, of a size fixed before
  the charge (the pandas backend computes the same array with ``searchsorted`` and ``bincount``).

Only these aggregates cross from the engine to the kernel; binding validates the domain with aggregate queries
(counts of missing, non-finite, fractional, out-of-range values; the distinct undeclared categories, which the
pandas path names too) and raises the same errors (:mod:`dpmagic.domain.schema`'s message functions).
"""

from __future__ import annotations

import decimal
import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlglot import exp

from dpmagic.aggregates.quantile import Grid, histogram_bins
from dpmagic.backends.pandas import too_many_rows_error
from dpmagic.domain.columns import (
    CategoricalColumn,
    NumericColumn,
    OutOfRangePolicy,
    categories_error,
    dtype_error,
    fractional_error,
    missing_columns_error,
    missing_values_error,
    nonfinite_error,
    outside_error,
    undeclared_columns_error,
)
from dpmagic.domain.schema import Schema
from dpmagic.domain.sets import Box, CategorySet, IntervalSet, ValueSet
from dpmagic.errors import DataValidationError, DPMagicError
from dpmagic.noise.calibration import MAX_ROWS
from dpmagic.noise.sensitivity import clamp_bounds
from dpmagic.query.model import Filter, GroupKey, Query
from dpmagic.releases.cells import Cells

__all__ = ["EngineBackend", "SourceColumn", "Compiler"]

#: the name the normalised data carries inside every statement
DATA = "dpmagic_data"
_DOUBLE_MAX = "1.7976931348623157e308"


@dataclass(frozen=True)
class SourceColumn:
    """A column of the bound source: its name, its kind (``string``, ``int``, ``uint``, ``float``, ``decimal``,
    ``bool`` or ``other``) and the dtype name pandas would show for it (for the same error message)."""

    name: str
    kind: str
    dtype: str

    @property
    def numeric(self) -> bool:
        return self.kind in ("int", "uint", "float", "decimal")


# -- expression helpers ---------------------------------------------------------------------------------
def col(name: str) -> exp.Column:
    return exp.column(exp.to_identifier(name, quoted=True))


def lit(v: Any) -> exp.Expr:
    """A literal: strings quoted by sqlglot, ints exact, floats as CAST('<repr>' AS DOUBLE) (exact round trip)."""
    if isinstance(v, str):
        return exp.Literal.string(v)
    if isinstance(v, (bool, np.bool_)):
        raise TypeError("boolean literals are not domain values")
    if isinstance(v, (int, np.integer)):
        return exp.Literal.number(int(v))
    f = float(v)
    if not math.isfinite(f):
        raise ValueError(f"non-finite literal {f!r}")
    return exp.cast(exp.Literal.string(repr(f)), "DOUBLE")


def _and(parts: Sequence[exp.Expr]) -> exp.Expr:
    parts = list(parts)
    if not parts:
        return exp.true()
    out = parts[0]
    for p in parts[1:]:
        out = exp.And(this=out, expression=p)
    return exp.paren(out) if len(parts) > 1 else out


def _or(parts: Sequence[exp.Expr]) -> exp.Expr:
    parts = list(parts)
    if not parts:
        return exp.false()
    out = parts[0]
    for p in parts[1:]:
        out = exp.Or(this=out, expression=p)
    return exp.paren(out) if len(parts) > 1 else out


def _case(whens: Sequence[tuple[exp.Expr, exp.Expr]], default: exp.Expr) -> exp.Expr:
    c = exp.Case()
    for cond, then in whens:
        c = c.when(cond, then)
    return c.else_(default)


def clip(x: exp.Expr, lo: Any, hi: Any) -> exp.Expr:
    """``np.clip(x, lo, hi)`` as a CASE (no NULL or NaN reaches it: validated data; a CASE rather than
    GREATEST / LEAST, which some dialects wrap in NULL guards)."""
    return _case(
        [(exp.LT(this=x, expression=lit(lo)), lit(lo)), (exp.GT(this=x.copy(), expression=lit(hi)), lit(hi))],
        x.copy(),
    )


def as_double(x: exp.Expr) -> exp.Expr:
    return exp.cast(x, "DOUBLE")


def double_bounds(lo: int, hi: int) -> tuple[float, float]:
    """The smallest double ≥ ``lo`` and the largest double ≤ ``hi`` (both whole numbers): for any double (or
    float) ``x``, ``x < lo`` exactly iff ``x < lo_d``, and ``x > hi`` iff ``x > hi_d``.  The engines compare a
    floating-point column with an integer bound in floating point, which rounds a bound beyond 2⁵³ (2⁵³ + 3 to
    2⁵³ + 4), so an integer column read from doubles is checked and clamped against these instead; and every
    double in [lo_d, hi_d] converts to BIGINT without overflow (float(2⁶³ − 1) is 2⁶³)."""
    lo_d, hi_d = float(lo), float(hi)
    if int(lo_d) < lo:
        lo_d = math.nextafter(lo_d, math.inf)
    if int(hi_d) > hi:
        hi_d = math.nextafter(hi_d, -math.inf)
    return lo_d, hi_d


@dataclass(frozen=True)
class Quantised:
    """A per-row value to be quantised: ``y`` = clip(x, lo, hi) / unit (a double), rounded by :func:`rint` in a
    later projection of :meth:`Compiler.rows` (so that ``y`` is computed once per row).  ``bound``: a proven
    bound of the rounded value's magnitude (``unit`` is a power of two, so ``|y| ≤ max(|lo|, |hi|) / unit``
    exactly, and rounding adds at most one)."""

    y: exp.Expr
    bound: int


def rint(y: exp.Expr, r: exp.Expr) -> exp.Expr:
    """numpy's ``rint`` (round half to even) of the double ``y`` as BIGINT, given r = CAST(FLOOR(y) AS BIGINT),
    in IEEE arithmetic every engine does alike: d = y − r is exact; r + 1 when d > ½, or d = ½ and r is odd."""
    d = exp.paren(exp.Sub(this=y, expression=as_double(r.copy())))
    half = lit(0.5)
    odd = exp.NEQ(this=exp.Mod(this=r.copy(), expression=lit(2)), expression=lit(0))
    up = exp.Or(
        this=exp.GT(this=d, expression=half),
        expression=exp.paren(exp.And(this=exp.EQ(this=d.copy(), expression=half.copy()), expression=odd)),
    )
    return exp.Add(this=r.copy(), expression=_case([(up, lit(1))], lit(0)))


def quantise_sql(x: exp.Expr, unit: float, lo: float, hi: float) -> Quantised:
    """:func:`dpmagic.noise.calibration.quantise` of one row: rint(clip(x, lo, hi) / unit) (``unit`` a power of two)."""
    y = exp.Div(this=exp.paren(clip(as_double(x), float(lo), float(hi))), expression=lit(float(unit)))
    m = max(abs(float(lo)), abs(float(hi))) / float(unit)
    return Quantised(y, int(math.ceil(m)) + 1 if math.isfinite(m) else _UNBOUNDED)


@dataclass(frozen=True)
class Binned:
    """A per-row bin on a quantile's public candidate grid (:func:`dpmagic.aggregates.quantile.bins`): ``y`` =
    the value as a double clamped into [lo, hi], computed once per row in the first projection of
    :meth:`Compiler.rows`; on an affine grid a = ⌊(y − lo)·inv⌋ in the second; the bin (:func:`bin_sql`) in the
    third."""

    y: exp.Expr
    grid: Grid


def quantile_bin(x: exp.Expr, lo: float, hi: float, grid: Grid) -> Binned:
    """The bin of ``x`` (a column of the normalised view) on ``grid``, its value first converted to a double and
    clamped into [lo, hi] — the values OpenDP's scorer sees (the pandas path's ``np.clip(values.astype(float),
    lo, hi)``)."""
    return Binned(clip(as_double(x), float(lo), float(hi)), grid)


def grid_index(y: exp.Expr, g: Grid) -> exp.Expr:
    """a = ⌊(y − lo)·inv⌋ as BIGINT (:class:`~dpmagic.aggregates.quantile.Grid`, the affine grid)."""
    t = exp.Mul(this=exp.paren(exp.Sub(this=y, expression=lit(g.lo))), expression=lit(g.inv))
    return exp.cast(exp.Floor(this=t), "BIGINT")


def bin_sql(y: exp.Expr, a: exp.Expr | None, g: Grid) -> exp.Expr:
    """#{c < y} + #{c ≤ y} of the double ``y`` over the grid's candidates, exactly (as numpy's ``searchsorted``;
    :class:`~dpmagic.aggregates.quantile.Grid`): 2·(y − base) + 1 on an integer grid; on an affine grid, from
    the approximate index ``a`` and the seven candidates around it, each recomputed by the grid's formula."""
    if g.k == 1:
        c = lit(g.lo)
        return _case(
            [(exp.LT(this=y.copy(), expression=c), lit(0)), (exp.GT(this=y.copy(), expression=c.copy()), lit(2))],
            lit(1),
        )
    if g.base is not None:
        j = exp.paren(exp.Sub(this=exp.cast(y.copy(), "BIGINT"), expression=lit(g.base)))
        return exp.Add(this=exp.Mul(this=lit(2), expression=j), expression=lit(1))
    assert a is not None

    def point(d: int) -> tuple[exp.Expr, exp.Expression]:  # (the index a + d, c_{a+d} by the formula)
        j = exp.paren(exp.Add(this=a.copy(), expression=lit(d))) if d else a.copy()
        w = exp.paren(exp.Mul(this=lit(g.width), expression=as_double(j.copy())))
        return j, exp.paren(exp.Add(this=lit(g.lo), expression=exp.Div(this=w, expression=lit(float(g.k - 1)))))

    def below(d: int, strict: bool) -> exp.Expr:  # [c_{a+d} < y] (strict) or [c_{a+d} ≤ y], 0 or 1
        j, c = point(d)
        cmp = (exp.LT if strict else exp.LTE)(this=c, expression=y.copy())
        whens = [
            (exp.LT(this=j, expression=lit(0)), lit(1)),
            (exp.GT(this=j.copy(), expression=lit(g.k - 1)), lit(0)),
            (cmp, lit(1)),
        ]
        return exp.paren(_case(whens, lit(0)))

    terms: list[exp.Expr] = [exp.paren(exp.Sub(this=exp.Mul(this=lit(2), expression=a.copy()), expression=lit(3)))]
    terms += [below(d, False) for d in (-1, 0, 1)] + [below(d, True) for d in (-2, -1, 0, 1)]
    out = terms[0]
    for t in terms[1:]:
        out = exp.Add(this=out, expression=t)
    return out


assert MAX_ROWS <= 2**32, "exact_sum's limb widths assume at most 2^32 rows"

#: the limb shifts of an exact BIGINT sum on engines without a native 128-bit SUM, by the number of limbs
LIMB_SHIFTS: dict[int, tuple[int, ...]] = {1: (0,), 2: (0, 30), 3: (0, 21, 42)}

#: the per-row bound used when none is known (any BIGINT)
_UNBOUNDED = 1 << 63


def _limb(x: exp.Expr, shift: int, width: int | None) -> exp.Expr:
    """``(x >> shift) & (2^width - 1)`` (``width`` None: the arithmetic shift alone, the signed top limb)."""
    y = x.copy() if shift == 0 else exp.paren(exp.BitwiseRightShift(this=x.copy(), expression=lit(shift)))
    return y if width is None else exp.BitwiseAnd(this=y, expression=lit((1 << width) - 1))


def exact_sum(x: exp.Expr, dialect: str, bound: int = _UNBOUNDED) -> list[exp.Expr]:
    """The exact Σ of a BIGINT per-row value, as the aggregates whose values recombine into it (:func:`combine`).

    DuckDB sums BIGINT into a HUGEINT (int128) natively: one aggregate.  Other engines (Spark, whose
    DECIMAL(38, 0) aggregation costs twice a BIGINT one) sum BIGINT limbs of the value's two's complement, as few
    as its proven bound ``|v| ≤ bound`` allows, every limb's sum over at most 2³² rows
    (:data:`~dpmagic.noise.calibration.MAX_ROWS`, refused beyond at binding) staying inside BIGINT (< 2⁶³):

    * ``bound < 2³¹``: the value itself (|Σ| < 2³²·2³¹);
    * ``bound < 2⁶⁰``: v = h·2³⁰ + l with 0 ≤ l < 2³⁰ and |h| ≤ 2³⁰ (sums < 2⁶²);
    * otherwise v = h·2⁴² + m·2²¹ + l with 0 ≤ l, m < 2²¹ and |h| ≤ 2²¹ (sums < 2⁵³).

    The kernel recombines them exactly in Python ints (as :func:`dpmagic.aggregates.common.exact_cell_sums`)."""
    b = abs(int(bound))
    if dialect == "duckdb" or b < 1 << 31:
        return [exp.Sum(this=x)]
    if b < 1 << 60:
        return [exp.Sum(this=_limb(x, 0, 30)), exp.Sum(this=_limb(x, 30, None))]
    return [exp.Sum(this=_limb(x, 0, 21)), exp.Sum(this=_limb(x, 21, 21)), exp.Sum(this=_limb(x, 42, None))]


def combine(parts: Sequence[Any]) -> int:
    """The exact sum from the values of :func:`exact_sum`'s aggregates (one sum, or its limbs' sums)."""
    return sum(int(v or 0) << s for v, s in zip(parts, LIMB_SHIFTS[len(parts)], strict=True))


def count_if(cond: exp.Expr) -> exp.Expr:
    return exp.Sum(this=_case([(cond, lit(1))], lit(0)))


# -- the compiler --------------------------------------------------------------------------------------
class Compiler:
    """Builds the statements of one bound data set (its schema, its source relation's name and columns)."""

    def __init__(
        self,
        schema: Schema,
        source: exp.Expr,
        columns: Mapping[str, SourceColumn],
        *,
        coded_keys: bool = False,
        coded: frozenset[str] = frozenset(),
        clamped: bool = False,
        native_rint: bool = False,
        collation: str | None = None,
    ) -> None:
        self.schema = schema
        self.source = source  # a table / view reference of the raw bound data
        self.columns = dict(columns)
        #: group a categorical key by its declared position (a CASE, −1 when undeclared) instead of its raw value:
        #: for engines whose hash aggregation is much faster on integer keys than on strings (Spark)
        self.coded_keys = coded_keys
        #: categorical columns the source holds as their declared positions (−1 or NULL: no declared value), as
        #: :meth:`coding` makes them: predicates compare positions, keys group by them
        self.coded = frozenset(coded)
        #: the source holds every numeric column already clamped and typed (as :meth:`coding` makes it): the view
        #: passes it through
        self.clamped = clamped
        #: the engine has an exact round-half-to-even function ``RINT`` (Spark's, Java's ``Math.rint``): the
        #: quantised values use it instead of :func:`rint`'s IEEE spelling
        self.native_rint = native_rint
        #: the engine's name of byte-wise string comparison (DuckDB: ``binary``), applied with ``COLLATE`` to every
        #: string column in every generated comparison and GROUP BY key (:meth:`text`), so that no collation of
        #: the source (``VARCHAR COLLATE NOCASE``, a connection's default) can merge two categories
        self.collation = collation

    def text(self, name: str, x: exp.Expr | None = None) -> exp.Expr:
        """The string column ``name`` (or ``x``, a value of it) compared and grouped byte for byte: ``x COLLATE
        <collation>`` (:attr:`collation`); unchanged on other kinds, on coded columns, or without a collation.

        A collation changes what ``=``, ``IN`` and GROUP BY consider equal: under ``NOCASE`` the declared 'ab'
        would match 'Ab', 'aB' and 'AB' too, so disjoint boxes would share rows (each counted in parallel) and
        GROUP BY would move rows across declared cells; pandas compares exactly."""
        x = col(name) if x is None else x
        source = self.columns.get(name)
        if self.collation is None or name in self.coded or source is None or source.kind != "string":
            return x
        return exp.Collate(this=x, expression=exp.to_identifier(self.collation, quoted=True))

    def coding(self) -> exp.Select:
        """SELECT of every declared column with each categorical one replaced by its declared position
        (:meth:`category_position`), each numeric one clamped and typed (:meth:`clamped_number`): the source of
        a compiler with ``coded`` and ``clamped``."""
        sel: list[exp.Expr] = []
        for name, c in self.schema.columns.items():
            x: exp.Expr
            if isinstance(c, CategoricalColumn):
                x = exp.cast(self.category_position(name), "INT")
            else:
                x = self.clamped_number(name)
            sel.append(exp.alias_(x, exp.to_identifier(name, quoted=True)))
        return exp.select(*sel).from_(self.source.copy())

    def clamped_number(self, name: str) -> exp.Expr:
        """The numeric column ``name`` clamped to its declared bounds, as BIGINT (integer) or DOUBLE.

        An integer column held as floating point is compared with :func:`double_bounds` (exact) and takes the
        declared bound itself when outside, as the pandas path's exact clamp; inside, its value converts to
        BIGINT in range."""
        c = self.schema[name]
        assert isinstance(c, NumericColumn)
        x = col(name)
        if not c.is_int:
            return clip(as_double(x), float(c.lower), float(c.upper))
        lo, hi = int(c.lower), int(c.upper)
        source = self.columns.get(name)
        if source is not None and source.kind == "float":
            lo_d, hi_d = double_bounds(lo, hi)
            whens = [
                (exp.LT(this=x, expression=lit(lo_d)), lit(lo)),
                (exp.GT(this=x.copy(), expression=lit(hi_d)), lit(hi)),
            ]
            return exp.cast(_case(whens, exp.cast(x.copy(), "BIGINT")), "BIGINT")
        return exp.cast(clip(x, lo, hi), "BIGINT")

    # ---- the normalised view (declared types, the custodian's clamp) ----
    def view(self, out_of_range: OutOfRangePolicy) -> exp.Select:
        """SELECT of every declared column as the pandas path's validated frame holds it."""
        sel = []
        for name, c in self.schema.columns.items():
            x: exp.Expr = col(name)
            # clamped under both policies: a no-op on the validated data (in bounds, or refused at binding), but a
            # file rewritten after binding can hold anything, and every sensitivity assumes the bounds (a
            # ``clamped`` source was clamped by the statement that made it, which Spark re-runs if it recomputes it)
            if isinstance(c, NumericColumn) and not self.clamped:
                x = self.clamped_number(name)
            elif isinstance(c, CategoricalColumn):
                x = self.text(name)  # compared and grouped byte for byte downstream, whatever the source's collation
            sel.append(exp.alias_(x, exp.to_identifier(name, quoted=True)))
        return exp.select(*sel).from_(self.source.copy())

    # ---- rows inside the declared domain ----
    def declared(self, name: str, x: exp.Expr | None = None) -> exp.Expr:
        """``x`` (default: the column) is one of the declared categories of ``name`` (compared exactly, as
        ``index_of``: :meth:`category_literal`); FALSE when no declared value can equal a source value."""
        c = self.schema[name]
        assert isinstance(c, CategoricalColumn)
        if name in self.coded:
            return exp.GTE(this=col(name) if x is None else x, expression=lit(0))
        lits = [e for v in c.values if (e := self.category_literal(name, v)) is not None]
        if not lits:
            return exp.false()
        return exp.In(this=self.text(name, x), expressions=lits)

    def category_literal(self, name: str, value: Any) -> exp.Expr | None:
        """The literal the engine's ``=`` compares *exactly* with the source column ``name`` to test for the declared
        category ``value`` — Python's equality, as ``index_of`` and the pandas path — or None when no value of the
        source's kind equals it.  Strings match strings and numbers numbers; on an integer column a declared
        float matches only if it is integral (compared as that integer), on a double column a declared integer
        only if it is exactly a double (``2**53 + 1`` is not: the engine would round it to ``2.0**53``)."""
        s = self.columns.get(name)
        kind = s.kind if s is not None else "string"
        if kind == "string":
            return lit(value) if isinstance(value, str) else None
        if isinstance(value, str) or kind not in ("int", "uint", "float", "decimal"):
            return None
        if kind in ("int", "uint") and isinstance(value, float):
            return lit(int(value)) if value.is_integer() else None
        if kind == "float" and not isinstance(value, float):
            try:
                exact = float(value) == value
            except OverflowError:
                exact = False
            return lit(float(value)) if exact else None
        return lit(value)

    def valid(self, names: Sequence[str]) -> exp.Expr:
        """The row holds a value of the declared domain in each of ``names``: not NULL, and a declared category.

        Always true on the data validated at binding, but files can change after it: a row with a missing or
        undeclared value is then discarded (``dp_in`` = 0) in the same statement, never counted in a box it is
        not in, never reported (numbers are clamped by the view).
        """
        parts: list[exp.Expr] = []
        for name in names:
            parts.append(exp.Not(this=exp.Is(this=col(name), expression=exp.Null())))
            if isinstance(self.schema[name], CategoricalColumn):
                parts.append(self.declared(name))
        return _and(parts)

    # ---- predicates ----
    def value_set(self, name: str, s: ValueSet) -> exp.Expr:
        if isinstance(s, CategorySet):
            mask = s.to_mask()
            values = [v for v, m in zip(s.column.values, mask, strict=True) if m]
            if len(values) == len(s.column.values):
                return exp.true()
            if not values:
                return exp.false()
            if name in self.coded:
                return exp.In(this=col(name), expressions=[lit(i) for i, m in enumerate(mask) if m])
            lits = [e for v in values if (e := self.category_literal(name, v)) is not None]
            return exp.In(this=self.text(name), expressions=lits) if lits else exp.false()
        assert isinstance(s, IntervalSet)
        c = self.schema[name]
        assert isinstance(c, NumericColumn)
        parts = []
        for iv in s.intervals:
            sides: list[exp.Expr] = []
            if not (isinstance(iv.lo, float) and math.isinf(iv.lo)):
                lo = int(iv.lo) if c.is_int else float(iv.lo)
                sides.append((exp.GTE if iv.lo_closed else exp.GT)(this=col(name), expression=lit(lo)))
            if not (isinstance(iv.hi, float) and math.isinf(iv.hi)):
                hi = int(iv.hi) if c.is_int else float(iv.hi)
                sides.append((exp.LTE if iv.hi_closed else exp.LT)(this=col(name), expression=lit(hi)))
            parts.append(_and(sides))
        return _or(parts)

    def box(self, box: Box) -> exp.Expr:
        if box.is_empty():
            return exp.false()
        return _and([self.value_set(n, s) for n, s in box.constraints.items()])

    def filter(self, f: Filter) -> exp.Expr:
        if f.op == "box":
            assert f.box is not None
            return self.box(f.box)
        parts = [self.filter(p) for p in f.parts]
        if f.op == "and":
            return _and(parts)
        if f.op == "or":
            return _or(parts)
        return exp.Not(this=exp.paren(parts[0]))

    def group_code(self, g: GroupKey) -> exp.Expr:
        """The row's bin index along ``g`` (−1: in no bin; impossible on validated data, but discarded)."""
        if g.sets is None:
            return self.category_position(g.column)
        return _case([(self.value_set(g.column, s), lit(i)) for i, s in enumerate(g.sets)], lit(-1))

    def category_position(self, name: str) -> exp.Expr:
        """The declared position of the row's value of the categorical column ``name``, a CASE of exact
        comparisons (:meth:`category_literal`); −1 for any other value, NULL included."""
        c = self.schema[name]
        assert isinstance(c, CategoricalColumn)
        whens = [
            (exp.EQ(this=self.text(name), expression=e), lit(i))
            for i, v in enumerate(c.values)
            if (e := self.category_literal(name, v)) is not None
        ]
        return _case(whens, lit(-1)) if whens else lit(-1)

    # ---- the per-cell aggregates of one query ----
    def rows(
        self, query: Query, values: Mapping[str, exp.Expr | Quantised | Binned], view: exp.Select
    ) -> tuple[exp.Select, list[str]]:
        """SELECT <keys>, <per-row values> FROM data, and the key columns' names.

        Keys: ``dp_in`` (1 when the row passes the filter) and one ``dp_g<i>`` per GROUP BY key — the row's raw
        value on a categorical key grouped by its declared values (the engine groups by it; the kernel maps the
        few distinct values to their declared positions) or, with :attr:`coded_keys`, its declared position; else its
        bin index (−1: in no bin).  Every row is
        scanned and aggregated alike, whether it passes the filter or not (the kernel drops ``dp_in = 0``), as the
        pandas backend's discarded bin.  Three projections, so that no per-row subexpression is repeated: keys
        and the quantised and binned values' ``y``; then r = FLOOR(y) and a binned value's approximate index; then
        the rounded values (with :attr:`native_rint`, RINT(y) in the last projection, no r) and the bins
        (:func:`bin_sql`).
        """
        cond = [self.box(query.where)]
        if query.filter is not None:
            cond.append(self.filter(query.filter))
        keys = ["dp_in"] + [f"dp_g{i}" for i in range(len(query.groups))]
        first: list[exp.Expr] = [exp.alias_(_case([(_and(cond), lit(1))], lit(0)), "dp_in")]
        for i, g in enumerate(query.groups):
            raw = g.sets is None and (g.column in self.coded or not self.coded_keys)
            first.append(exp.alias_(self.text(g.column) if raw else self.group_code(g), f"dp_g{i}"))
        for k, v in values.items():
            first.append(exp.alias_(v.y if isinstance(v, (Quantised, Binned)) else v, k))
        used = dict.fromkeys(
            c.name for e in [*cond, *first[1:]] for c in e.find_all(exp.Column) if c.name in self.schema.columns
        )
        cond.insert(0, self.valid(list(used)))
        first[0] = exp.alias_(_case([(_and(cond), lit(1))], lit(0)), "dp_in")
        second: list[exp.Expr] = [exp.column(k) for k in keys]
        third: list[exp.Expr] = [exp.column(k) for k in keys]
        for k, v in values.items():
            if isinstance(v, Binned):  # y; then y and a (an affine grid); then the bin
                second.append(exp.column(k))
                a = None
                if v.grid.k > 1 and v.grid.base is None:
                    second.append(exp.alias_(grid_index(exp.column(k), v.grid), f"{k}_a"))
                    a = exp.column(f"{k}_a")
                third.append(exp.alias_(bin_sql(exp.column(k), a, v.grid), k))
                continue
            second.append(exp.column(k))
            if isinstance(v, Quantised) and self.native_rint:
                third.append(exp.alias_(exp.cast(exp.Anonymous(this="RINT", expressions=[exp.column(k)]), "BIGINT"), k))
            elif isinstance(v, Quantised):
                second.append(exp.alias_(exp.cast(exp.Floor(this=exp.column(k)), "BIGINT"), f"{k}_r"))
                third.append(exp.alias_(rint(exp.column(k), exp.column(f"{k}_r")), k))
            else:
                third.append(exp.column(k))
        q1 = exp.select(*first).from_(exp.alias_(exp.Subquery(this=view), DATA))
        q2 = exp.select(*second).from_(exp.alias_(exp.Subquery(this=q1), "dp_l1"))
        return exp.select(*third).from_(exp.alias_(exp.Subquery(this=q2), "dp_l2")), keys

    def cell_of(self, query: Query, key: Sequence[Any]) -> int | None:
        """The declared cell of one aggregate row's keys (``dp_in``, ``dp_g<i>``), None when it is discarded."""
        if int(key[0]) != 1:
            return None
        cell = 0
        for g, v in zip(query.groups, key[1:], strict=True):
            if g.sets is None and not self.coded_keys and g.column not in self.coded:
                c = self.schema[g.column]
                assert isinstance(c, CategoricalColumn)
                if isinstance(v, decimal.Decimal):
                    v = int(v) if v == v.to_integral_value() else float(v)
                i = c.index_of(v)
            else:
                i = int(v)
            if i is None or i < 0:
                return None
            cell = cell * g.size + i
        return cell


def _pandas_string_dtype() -> str:
    import pandas as pd

    return str(pd.Series(["a"]).dtype)


class EngineBackend(ABC):
    """A :class:`~dpmagic.releases.base.Backend` over a SQL engine: validation at binding, exact aggregates.

    Subclasses give the dialect, the source's columns and a way to run one statement (returning rows of
    aggregates only).  Binding validates the declared domain (:meth:`validate`) and fixes the normalised view.
    """

    dialect: str = "duckdb"
    #: see :attr:`Compiler.coded_keys`
    coded_keys: bool = False
    #: see :attr:`Compiler.native_rint`
    native_rint: bool = False
    #: see :attr:`Compiler.collation`
    collation: str | None = None

    schema: Schema

    def _init(
        self,
        schema: Schema,
        source: exp.Expr,
        columns: list[SourceColumn],
        out_of_range: OutOfRangePolicy,
        diagnostics: bool = False,
    ) -> None:
        if out_of_range not in ("error", "clamp"):
            raise DataValidationError(f"out_of_range must be 'error' or 'clamp', not {out_of_range!r}")
        self.schema = schema
        self.out_of_range = out_of_range
        #: binding errors quote undeclared values and count out-of-bound ones (the custodian's switch; see
        #: :func:`dpmagic.domain.columns.categories_error`)
        self.diagnostics = diagnostics
        self.compiler = Compiler(
            schema,
            source,
            {c.name: c for c in columns},
            coded_keys=self.coded_keys,
            native_rint=self.native_rint,
            collation=self.collation,
        )
        try:
            self.n_rows = self.validate(columns)
        except DPMagicError:
            raise
        except Exception as e:  # the engine failed to read the rows (a CSV value it cannot parse, a bad file)
            # one clear error; the engine's text stays behind (it can quote a row)
            raise DataValidationError(
                f"{self.dialect} cannot read the data: {type(e).__name__}",
                hint="check the files (a value of the wrong type, a malformed line) or bind them as a DataFrame",
            ) from None
        self._view = self.compiler.view(out_of_range)

    @abstractmethod
    def _run(self, statement: exp.Expr) -> list[tuple[Any, ...]]:
        """Run one SELECT (of aggregates) and return its rows."""

    def check(self, query: Query, extended: Mapping[str, Any] | None = None) -> None:
        """Refuse, before the charge and from public information only (the query, the schema, the engine's
        settings), a query this engine cannot answer (subclasses; none by default)."""
        return None

    def aggregate_groups(self, query: Query, extended: Mapping[str, Any] | None = None) -> int:
        """A bound, from the schema and the query alone, on the groups of the largest statement :meth:`evaluate`
        runs: the main one groups by ``dp_in`` and the GROUP BY keys (2 × cells), a quantile's histogram by the
        keys and its bin (cells × (2K + 1)).  (On validated data; COUNT(DISTINCT)'s per-cell sets, whose size
        depends on the data, are not included: the engine spills them.)"""
        n = query.n_cells
        out = 2 * n
        for u in (extended or {}).values():
            if u.agg.func == "quantile":
                out = max(out, n * histogram_bins(len(u.plan.candidates)))
        return out

    def _position(self) -> exp.Expr:
        """A per-row scan position (only to list undeclared categories in order of first appearance)."""
        return exp.Window(this=exp.RowNumber())

    def sql(self, statement: exp.Expr) -> str:
        return statement.sql(dialect=self.dialect)

    # ---- binding: the domain checked by aggregate queries ----
    def validate(self, columns: list[SourceColumn]) -> int:
        """Check the source against the declared domain; the errors (and their order) are the pandas path's.

        One aggregate scan: per column the counts of missing values, undeclared categories, non-finite,
        fractional and out-of-range numbers (only a count crosses, and the messages show none); then, only when a
        column has undeclared categories and :attr:`diagnostics` is on (the custodian's switch), its distinct
        undeclared values (the message then names them, and the number of values out of bounds).
        Returns the row count.
        """
        names = [c.name for c in columns]
        missing = [c for c in self.schema.columns if c not in names]
        if missing:
            raise missing_columns_error(missing)
        undeclared = [c for c in names if c not in self.schema.columns]
        if undeclared:
            raise undeclared_columns_error(undeclared)
        src = {c.name: c for c in columns}
        aggs: dict[str, exp.Expr] = {"n_rows": exp.Count(this=exp.Star())}
        for i, (name, c) in enumerate(self.schema.columns.items()):
            s = src[name]
            x = col(name)
            null: exp.Expr = exp.Is(this=x, expression=exp.Null())
            if s.kind == "float":
                null = exp.Or(this=null, expression=exp.IsNan(this=x.copy()))
            aggs[f"null_{i}"] = count_if(null)
            if isinstance(c, CategoricalColumn):
                aggs[f"bad_{i}"] = count_if(exp.Not(this=exp.paren(self.compiler.declared(name))))
            elif s.numeric:
                if s.kind in ("float", "decimal"):
                    aggs[f"inf_{i}"] = count_if(
                        exp.GT(this=exp.Abs(this=as_double(x.copy())), expression=lit(float(_DOUBLE_MAX)))
                    )
                    if c.is_int:
                        # x % 1 (exact: fmod of a double, decimal arithmetic of a decimal), not FLOOR(x): Spark's
                        # FLOOR of a double is a BIGINT, which overflows (an error under ANSI, saturated without) on
                        # a whole double beyond 2^63
                        aggs[f"frac_{i}"] = count_if(
                            exp.NEQ(this=exp.Mod(this=x.copy(), expression=lit(1)), expression=lit(0))
                        )
                lo, hi = (int(c.lower), int(c.upper)) if c.is_int else (float(c.lower), float(c.upper))
                if c.is_int and s.kind == "float":  # exact, as pandas (see clamped_number)
                    lo, hi = double_bounds(int(lo), int(hi))
                aggs[f"out_{i}"] = count_if(
                    exp.Or(
                        this=exp.LT(this=x.copy(), expression=lit(lo)),
                        expression=exp.GT(this=x.copy(), expression=lit(hi)),
                    )
                )
        stmt = exp.select(*[exp.alias_(v, k) for k, v in aggs.items()]).from_(self.compiler.source.copy())
        row = dict(zip(aggs, self._run(stmt)[0], strict=True))
        counts = {k: int(v or 0) for k, v in row.items()}
        for i, (name, c) in enumerate(self.schema.columns.items()):
            s = src[name]
            if counts[f"null_{i}"]:
                raise missing_values_error(name)
            if isinstance(c, CategoricalColumn):
                if counts[f"bad_{i}"]:
                    bad = self._bad_categories(c, s) if self.diagnostics else None
                    raise categories_error(name, bad, diagnostics=self.diagnostics)
                continue
            if not s.numeric:
                raise dtype_error(c, s.dtype)
            if counts.get(f"inf_{i}"):
                raise nonfinite_error(name)
            if counts.get(f"frac_{i}"):
                raise fractional_error(name)
            if counts[f"out_{i}"] and self.out_of_range == "error":
                raise outside_error(c, counts[f"out_{i}"], diagnostics=self.diagnostics)
        if counts["n_rows"] > MAX_ROWS:
            raise too_many_rows_error()
        return counts["n_rows"]

    def _bad_categories(self, c: CategoricalColumn, s: SourceColumn) -> list[Any]:
        """The first (up to 6) distinct undeclared values, in order of first appearance in the scan."""
        inner = exp.select(exp.alias_(self.compiler.text(c.name), "v"), exp.alias_(self._position(), "pos")).from_(
            self.compiler.source.copy()
        )
        stmt = (
            exp.select("v")
            .from_(exp.alias_(exp.Subquery(this=inner), "t"))
            .where(exp.Not(this=exp.paren(self.compiler.declared(c.name, exp.column("v")))))
            .group_by("v")
            .order_by(exp.Min(this=exp.column("pos")))
            .limit(6)
        )
        out = []
        for (v,) in self._run(stmt):
            out.append(v.item() if isinstance(v, np.generic) else v)
        return out

    # ---- queries ----
    def evaluate(
        self,
        query: Query,
        units: Mapping[str, float] | None = None,
        *,
        extended: Mapping[str, Any] | None = None,
    ) -> Cells:
        """Exact per-cell COUNT and SUMs (and the inputs of :mod:`dpmagic.aggregates`), as the pandas backend's."""
        comp = self.compiler
        n_cells = query.n_cells
        keys: list[tuple[Any, ...]] = (
            list(itertools.product(*[g.labels for g in query.groups])) if query.groups else [()]
        )
        values: dict[str, exp.Expr | Quantised | Binned] = {}
        aggs: dict[str, exp.Expr] = {"n": exp.Count(this=exp.Star())}
        sum_keys: dict[str, str] = {}
        sum_parts: dict[str, list[str]] = {}  # an exact sum -> the names of its aggregates

        def add_sum(name: str, x: exp.Expr, bound: int) -> None:
            parts = exact_sum(x, self.dialect, bound)
            sum_parts[name] = [name] if len(parts) == 1 else [f"{name}_p{j}" for j in range(len(parts))]
            aggs.update(zip(sum_parts[name], parts, strict=True))

        for agg in query.aggregates:
            if agg.column is None or not agg.is_basic or agg.sum_key in sum_keys:
                continue
            c = self.schema[agg.column]
            assert isinstance(c, NumericColumn)
            lo, hi = clamp_bounds(c, agg.clamp)
            x = col(agg.column)
            value: exp.Expr | Quantised = x
            bound = _UNBOUNDED
            if c.is_int:
                bound = max(abs(int(lo)), abs(int(hi)))  # the view clamps to the declared bounds, the SQL clamp inside
                if agg.clamp is not None:
                    value = clip(x, int(lo), int(hi))
            else:
                unit = (units or {}).get(agg.sum_key)
                if unit is None:
                    raise ValueError(f"no quantum given for the float sum {agg.sum_key!r}")
                quantised = quantise_sql(x, unit, float(lo), float(hi))
                value, bound = quantised, quantised.bound
            k = f"v{len(values)}"
            values[k] = value
            sum_keys[agg.sum_key] = k
            add_sum(f"s_{k}", exp.column(k), bound)
        plans = dict(extended or {})
        quantiles: dict[str, str] = {}
        for alias, u in plans.items():
            a = u.agg
            name = str(a.column)
            if a.func == "count_distinct":
                k = f"v{len(values)}"
                values[k] = col(name)
                aggs[f"d_{alias}"] = exp.Count(this=exp.Distinct(expressions=[exp.column(k)]))
            elif a.func in ("var", "stddev"):
                (s_expr, s_bound), (q_expr, q_bound) = self._variance_values(name, u.plan)
                ks, kq = f"v{len(values)}", f"v{len(values) + 1}"
                values[ks], values[kq] = s_expr, q_expr
                add_sum(f"vs_{alias}", exp.column(ks), s_bound)
                add_sum(f"vq_{alias}", exp.column(kq), q_bound)
            else:
                k = f"v{len(values)}"
                values[k] = quantile_bin(col(name), u.lo, u.hi, u.plan.grid)
                quantiles[alias] = k
        rows, key_cols = comp.rows(query, values, self._view)
        nk = len(key_cols)
        stmt = (
            exp.select(*[exp.column(k) for k in key_cols], *[exp.alias_(v, k) for k, v in aggs.items()])
            .from_(exp.alias_(exp.Subquery(this=rows), "r"))
            .group_by(*[exp.column(k) for k in key_cols])
        )
        names = list(aggs)
        limbs = {p for ps in sum_parts.values() for p in ps} - set(sum_parts)
        outputs = [k for k in names if k not in limbs] + [k for k in sum_parts if k not in aggs]
        per: dict[str, list[int]] = {k: [0] * n_cells for k in outputs}
        seen: set[int] = set()
        for row in self._run(stmt):
            cell = comp.cell_of(query, row[:nk])
            if cell is None:
                continue
            if cell in seen:  # distinct raw values map to distinct declared values (validated data)
                raise RuntimeError("two engine groups map to one declared cell")
            seen.add(cell)
            got = dict(zip(names, row[nk:], strict=True))
            for k in per:
                per[k][cell] = combine([got[p] for p in sum_parts.get(k, [k])])
        counts = np.asarray(per["n"], dtype=np.int64)
        sums = {sk: per[f"s_{k}"] for sk, k in sum_keys.items()}
        extra: dict[str, Any] = {}
        for alias, u in plans.items():
            a = u.agg
            if a.func == "count_distinct":
                extra[alias] = np.asarray(per[f"d_{alias}"], dtype=np.int64)
            elif a.func in ("var", "stddev"):
                extra[alias] = {"n": [int(v) for v in counts], "s": per[f"vs_{alias}"], "q": per[f"vq_{alias}"]}
            else:
                width = histogram_bins(len(u.plan.candidates))
                extra[alias] = self._histogram(query, rows, key_cols, quantiles[alias], n_cells, width)
        return Cells(keys=keys, counts=counts, sums=sums, extra=extra)

    def _histogram(
        self, query: Query, rows: exp.Select, key_cols: list[str], k: str, n_cells: int, width: int
    ) -> np.ndarray:
        """Each cell's histogram over a quantile's candidates (``n_cells × width``), from one aggregate over every
        row: grouped by the GROUP BY keys and the bin, counting the rows that pass the filter (SUM of ``dp_in``)
        — not by ``dp_in`` itself, so the engine groups, and returns, the same rows whatever the box holds; at
        most (GROUP BY cells) × (2K + 1) groups, a bound known before the charge (:meth:`aggregate_groups`)."""
        groups = [exp.column(c) for c in key_cols[1:]] + [exp.column(k)]
        stmt = (
            exp.select(*groups, exp.alias_(exp.Sum(this=exp.column("dp_in")), "n"))
            .from_(exp.alias_(exp.Subquery(this=rows), "r"))
            .group_by(*[g.copy() for g in groups])
        )
        nk = len(groups)
        hist = np.zeros((n_cells, width), dtype=np.int64)
        for row in self._run(stmt):
            cell = self.compiler.cell_of(query, (1, *row[: nk - 1]))
            b, n = row[nk - 1], int(row[nk] or 0)
            if cell is None or b is None or n == 0:  # a row in no cell, or a missing value (dp_in = 0)
                continue
            hist[cell, int(b)] += n
        return hist

    def _variance_values(
        self, name: str, p: Any
    ) -> tuple[tuple[exp.Expr | Quantised, int], tuple[exp.Expr | Quantised, int]]:
        """The per-row S and Q values of :func:`dpmagic.aggregates.variance.exact` (same formulas, same units),
        each with a proven bound of its magnitude (:func:`exact_sum`)."""
        x = col(name)
        if p.is_int:
            y = clip(x, int(p.lo), int(p.hi))
            c = int(p.c)
            dev = max(abs(int(p.lo) - c), abs(int(p.hi) - c))  # |y - c|
            yd = exp.Sub(this=as_double(y.copy()), expression=lit(float(p.c)))
            s: tuple[exp.Expr | Quantised, int]
            q: tuple[exp.Expr | Quantised, int]
            if p.total.quantised:
                qs = quantise_sql(yd.copy(), p.total.noise.unit, p.total.a, p.total.b)
                s = (qs, qs.bound)
            else:
                s = (exp.Sub(this=y.copy(), expression=lit(c)), dev)
            if p.squares.quantised:
                qq = quantise_sql(
                    exp.Mul(this=exp.paren(yd.copy()), expression=exp.paren(yd.copy())),
                    p.squares.noise.unit,
                    p.squares.a,
                    p.squares.b,
                )
                q = (qq, qq.bound)
            else:
                yc = exp.paren(exp.Sub(this=y.copy(), expression=lit(c)))
                q = (exp.Mul(this=yc, expression=yc.copy()), dev * dev)
            return s, q
        xc = exp.paren(exp.Sub(this=clip(as_double(x), float(p.lo), float(p.hi)), expression=lit(float(p.c))))
        qs = quantise_sql(xc.copy(), p.total.noise.unit, p.total.a, p.total.b)
        qq = quantise_sql(exp.Mul(this=xc.copy(), expression=xc.copy()), p.squares.noise.unit, p.squares.a, p.squares.b)
        return (qs, qs.bound), (qq, qq.bound)
