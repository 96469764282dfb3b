"""One engine-neutral compiler from a :class:`~dpmagic.query.model.Query` to SQL (the engine backends' common part
is :mod:`dpmagic.backends.engine`; the expression helpers :mod:`dpmagic.aggregates.sqlexpr`, the exact sums
:mod:`dpmagic.aggregates.exactsum`, the aggregates' own per-row inputs their units).

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
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from dpmagic.aggregates.quantile_unit import Binned, bin_sql, grid_index
from dpmagic.aggregates.rowvalues import derived_sql
from dpmagic.aggregates.sqlexpr import Quantised, as_double, clip, col, double_bounds, lit, rint
from dpmagic.aggregates.sqlexpr import and_ as _and
from dpmagic.aggregates.sqlexpr import case as _case
from dpmagic.aggregates.sqlexpr import or_ as _or
from dpmagic.domain.columns import CategoricalColumn, NumericColumn, OutOfRangePolicy
from dpmagic.domain.schema import Schema
from dpmagic.domain.sets import Box, CategorySet, IntervalSet, ValueSet
from dpmagic.query.model import Filter, GroupKey, Query

__all__ = ["SourceColumn", "Compiler"]

#: the name the normalised data carries inside every statement
DATA = "dpmagic_data"


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

    @property
    def temporal(self) -> bool:
        """A DATE or TIMESTAMP column (the source of a declared ``date`` / ``timestamp`` column)."""
        return self.kind in ("date", "timestamp")


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
        if c.temporal is not None and source is not None and source.temporal:
            return exp.cast(clip(self.temporal_number(name), lo, hi), "BIGINT")
        if source is not None and source.kind == "float":
            lo_d, hi_d = double_bounds(lo, hi)
            whens = [
                (exp.LT(this=x, expression=lit(lo_d)), lit(lo)),
                (exp.GT(this=x.copy(), expression=lit(hi_d)), lit(hi)),
            ]
            return exp.cast(_case(whens, exp.cast(x.copy(), "BIGINT")), "BIGINT")
        return exp.cast(clip(x, lo, hi), "BIGINT")

    def temporal_number(self, name: str, *, micros: bool = False) -> exp.Expr:
        """The DATE / TIMESTAMP source column ``name`` as the exact integer dpmagic holds it
        (:mod:`dpmagic.domain.temporal`): days since 1970-01-01 for a ``date`` column (a timestamp source is
        cast to its date; :meth:`time_of_day` finds those with a time), microseconds since 1970-01-01 00:00:00
        for a ``timestamp`` column (``micros``: whatever the column's declared type).  Integer date arithmetic
        of the engine, never through a double."""
        c = self.schema[name]
        assert isinstance(c, NumericColumn)
        x: exp.Expr = col(name)
        if c.temporal == "date" and not micros:
            source = self.columns.get(name)
            if source is not None and source.kind == "timestamp":
                x = exp.cast(x, "DATE")
            epoch = exp.cast(exp.Literal.string("1970-01-01"), "DATE")
            return exp.DateDiff(this=x, expression=epoch, unit=exp.var("DAY"))
        source = self.columns.get(name)
        if source is not None and "time zone" in source.dtype.lower():
            # a TIMESTAMP WITH TIME ZONE at its wall-clock time in the engine's zone (as pandas reads a tz-aware
            # column at its wall-clock time): the difference with a zone-less epoch would be taken in UTC, or with
            # the epoch's own offset in the session zone (an hour off across a daylight-saving change)
            x = exp.cast(x, exp.DataType.build("TIMESTAMPNTZ"))
        epoch_ts = exp.cast(exp.Literal.string("1970-01-01 00:00:00"), exp.DataType.build("TIMESTAMPNTZ"))
        return exp.TimestampDiff(this=x, expression=epoch_ts, unit=exp.var("MICROSECOND"))

    def time_of_day(self, name: str) -> exp.Expr:
        """The TIMESTAMP source of a ``date`` column holds a time other than midnight (refused at binding, as
        a fraction of a day in pandas)."""
        micros = self.temporal_number(name, micros=True)
        return exp.NEQ(this=exp.Mod(this=micros, expression=lit(86_400 * 1_000_000)), expression=lit(0))

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

    def category_eq(self, name: str, value: Any) -> exp.Expr:
        """The row's value of categorical column ``name`` is ``value`` (a CASE condition of a row expression),
        compared as :meth:`value_set` compares: by declared position on a coded column, else exactly."""
        c = self.schema[name]
        assert isinstance(c, CategoricalColumn)
        if name in self.coded:
            i = c.index_of(value)
            return exp.false() if i is None else exp.EQ(this=col(name), expression=lit(i))
        e = self.category_literal(name, value)
        return exp.false() if e is None else exp.EQ(this=self.text(name), expression=e)

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
        derived = dict(query.derived)
        if derived:  # each row expression's per-row value, clamped into its enclosure, as a column of the view
            view = exp.select(
                exp.Star(),
                *[
                    exp.alias_(derived_sql(r, self.schema, self.category_eq), exp.to_identifier(n, quoted=True))
                    for n, r in derived.items()
                ],
            ).from_(exp.alias_(exp.Subquery(this=view), "dp_d"))
        keys = ["dp_in"] + [f"dp_g{i}" for i in range(len(query.groups))]
        first: list[exp.Expr] = [exp.alias_(_case([(_and(cond), lit(1))], lit(0)), "dp_in")]
        for i, g in enumerate(query.groups):
            raw = g.sets is None and (g.column in self.coded or not self.coded_keys)
            first.append(exp.alias_(self.text(g.column) if raw else self.group_code(g), f"dp_g{i}"))
        for k, v in values.items():
            first.append(exp.alias_(v.y if isinstance(v, (Quantised, Binned)) else v, k))
        read = [c.name for e in [*cond, *first[1:]] for c in e.find_all(exp.Column)]
        read += [c.name for n in read if n in derived for c in derived[n].node.find_all(exp.Column)]
        used = dict.fromkeys(n for n in read if n in self.schema.columns)
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
