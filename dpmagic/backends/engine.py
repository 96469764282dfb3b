"""The engine backends' common part (DuckDB: :mod:`dpmagic.backends.duckdb`, Spark: :mod:`dpmagic.backends.spark`):
binding validated by aggregate queries, and the one aggregate statement of a query built with the
:class:`~dpmagic.backends.compiler.Compiler` from the basic family's counts and sums and each aggregate unit's
declared inputs (:meth:`AggregateUnit.sql <dpmagic.aggregates.registry.AggregateUnit.sql>`), read back into
:class:`~dpmagic.releases.cells.Cells` equal to :class:`~dpmagic.backends.pandas.PandasBackend`'s.
"""

from __future__ import annotations

import itertools
from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

import numpy as np
from sqlglot import exp

from dpmagic.aggregates.exactsum import combine, exact_sum
from dpmagic.aggregates.registry import UnitPlan
from dpmagic.aggregates.sqlexpr import (
    UNBOUNDED,
    Quantised,
    as_double,
    clip,
    col,
    count_if,
    double_bounds,
    lit,
    quantise_sql,
)
from dpmagic.backends.compiler import Compiler, SourceColumn
from dpmagic.backends.pandas import too_many_rows_error
from dpmagic.backends.truncate import invariant_check_select, invariant_error, truncated_select, varying_from_row
from dpmagic.domain.columns import (
    CategoricalColumn,
    NumericColumn,
    OutOfRangePolicy,
    categories_error,
    dtype_error,
    fractional_error,
    missing_columns_error,
    missing_id_error,
    missing_values_error,
    nonfinite_error,
    outside_error,
    time_of_day_error,
    undeclared_columns_error,
)
from dpmagic.domain.schema import Schema
from dpmagic.errors import DataValidationError, DPMagicError
from dpmagic.noise.calibration import MAX_ROWS
from dpmagic.noise.sensitivity import clamp_bounds
from dpmagic.query.derived import with_derived
from dpmagic.query.model import Query
from dpmagic.releases.backend import Backend
from dpmagic.releases.cells import Cells

__all__ = ["EngineBackend"]

_DOUBLE_MAX = "1.7976931348623157e308"


class _Statement:
    """The per-row values and aggregates of one query's statement (:class:`~dpmagic.aggregates.registry.SqlInputs`)."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self.values: dict[str, Any] = {}
        self.aggs: dict[str, exp.Expr] = {"n": exp.Count(this=exp.Star())}
        self.sum_parts: dict[str, list[str]] = {}  # an exact sum -> the names of its aggregates

    def value(self, v: Any) -> str:
        k = f"v{len(self.values)}"
        self.values[k] = v
        return k

    def aggregate(self, name: str, expr: exp.Expr) -> None:
        self.aggs[name] = expr

    def exact_sum(self, name: str, column: str, bound: int) -> None:
        parts = exact_sum(exp.column(column), self.dialect, bound)
        self.sum_parts[name] = [name] if len(parts) == 1 else [f"{name}_p{j}" for j in range(len(parts))]
        self.aggs.update(zip(self.sum_parts[name], parts, strict=True))


class _Results:
    """The statement's per-cell results (:class:`~dpmagic.aggregates.registry.SqlResults`)."""

    def __init__(
        self,
        backend: EngineBackend,
        query: Query,
        rows: exp.Select,
        key_cols: list[str],
        counts: np.ndarray,
        per: dict[str, list[int]],
    ) -> None:
        self._backend, self._query, self._rows, self._keys = backend, query, rows, key_cols
        self.counts = counts
        self._per = per

    def per_cell(self, name: str) -> list[int]:
        return self._per[name]

    def histogram(self, column: str, width: int) -> np.ndarray:
        return self._backend._histogram(self._query, self._rows, self._keys, column, self._query.n_cells, width)


def _pandas_string_dtype() -> str:
    import pandas as pd

    return str(pd.Series(["a"]).dtype)


class EngineBackend(Backend):
    """A :class:`~dpmagic.releases.base.Backend` over a SQL engine: validation at binding, exact aggregates.

    Subclasses give the dialect, the source's columns and a way to run one statement (returning rows of
    aggregates only).  Binding validates the declared domain (:meth:`validate`) and fixes the normalised view.
    """

    dialect: str = "duckdb"
    row_expressions = True  # derived columns are added to the normalised view (Compiler.rows)
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
            self._view = self.compiler.view(out_of_range)
            if schema.person_unit is not None:
                self._bind_people(columns)
        except DPMagicError:
            raise
        except Exception as e:  # the engine failed to read the rows (a CSV value it cannot parse, a bad file)
            # one clear error; the engine's text stays behind (it can quote a row)
            raise DataValidationError(
                f"{self.dialect} cannot read the data: {type(e).__name__}",
                hint="check the files (a value of the wrong type, a malformed line) or bind them as a DataFrame",
            ) from None

    # ---- person-level tables: the binding checks and the stable truncation (dpmagic.backends.truncate) ----
    def _bind_people(self, columns: list[SourceColumn]) -> None:
        """Check the declared invariant columns (``"check"`` mode: one engine statement, one flag per column
        crosses) and make the truncated, coded table every query then reads (:func:`truncated_select` over
        :meth:`~dpmagic.backends.compiler.Compiler.coding`, materialised once by :meth:`_materialise`)."""
        coding = self.compiler.coding()
        check = invariant_check_select(self.schema, coding)
        if check is not None:
            rows = self._run(check)
            varying = varying_from_row(self.schema, rows[0]) if rows else []
            if varying:
                raise invariant_error(varying)
        self._use_coded(self._materialise(truncated_select(self.schema, coding)), columns)

    def _materialise(self, select: exp.Select) -> exp.Expr:
        """Make ``select`` (the truncated, coded rows) a table of the engine, once; return a reference to it."""
        raise NotImplementedError(f"{type(self).__name__} does not bind person-level tables")

    def _use_coded(self, table: exp.Expr, columns: list[SourceColumn]) -> None:
        """Compile every later statement against ``table``, which holds the declared columns coded as
        :meth:`~dpmagic.backends.compiler.Compiler.coding` makes them (categories as declared positions, numbers
        clamped and typed)."""
        cats = frozenset(n for n, c in self.schema.columns.items() if isinstance(c, CategoricalColumn))
        kinds = {c.name: c for c in columns}
        coded_cols = [SourceColumn(n, "int", "int32") if n in cats else kinds[n] for n in self.schema.columns]
        self.compiler = Compiler(
            self.schema,
            table,
            {c.name: c for c in coded_cols},
            coded_keys=self.coded_keys,
            coded=cats,
            clamped=True,
            native_rint=self.native_rint,
            collation=self.collation,
        )
        self._view = self.compiler.view(self.out_of_range)

    @abstractmethod
    def _run(self, statement: exp.Expr) -> list[tuple[Any, ...]]:
        """Run one SELECT (of aggregates) and return its rows."""

    def aggregate_groups(self, query: Query, extended: Mapping[str, Any] | None = None) -> int:
        """A bound, from the schema and the query alone, on the groups of the largest statement :meth:`evaluate`
        runs: the main one groups by ``dp_in`` and the GROUP BY keys (2 × cells), a quantile's histogram by the
        keys and its bin (cells × (2K + 1)).  (On validated data; COUNT(DISTINCT)'s per-cell sets, whose size
        depends on the data, are not included: the engine spills them.)"""
        n = query.n_cells
        out = 2 * n
        for u in (extended or {}).values():
            out = max(out, u.unit.engine_groups(u, n))
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
            elif isinstance(c, NumericColumn) and c.temporal is not None:
                if s.temporal:  # compared as the integers dpmagic holds (a source of another kind: dtype error)
                    if c.temporal == "date" and s.kind == "timestamp":
                        aggs[f"frac_{i}"] = count_if(self.compiler.time_of_day(name))
                    days = self.compiler.temporal_number(name)
                    aggs[f"out_{i}"] = count_if(
                        exp.Or(
                            this=exp.LT(this=days, expression=lit(int(c.lower))),
                            expression=exp.GT(this=days.copy(), expression=lit(int(c.upper))),
                        )
                    )
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
                raise missing_id_error(name) if self._is_person_id(name) else missing_values_error(name)
            if isinstance(c, CategoricalColumn):
                if counts[f"bad_{i}"]:
                    bad = self._bad_categories(c, s) if self.diagnostics else None
                    raise categories_error(name, bad, diagnostics=self.diagnostics)
                continue
            if (c.temporal is None and not s.numeric) or (c.temporal is not None and not s.temporal):
                raise dtype_error(c, s.dtype)
            if counts.get(f"inf_{i}"):
                raise nonfinite_error(name)
            if counts.get(f"frac_{i}"):
                raise fractional_error(name) if c.temporal is None else time_of_day_error(name)
            if counts[f"out_{i}"] and self.out_of_range == "error":
                raise outside_error(c, counts[f"out_{i}"], diagnostics=self.diagnostics)
        if counts["n_rows"] > MAX_ROWS:
            raise too_many_rows_error()
        return counts["n_rows"]

    def _is_person_id(self, name: str) -> bool:
        unit = self.schema.person_unit
        return unit is not None and unit.id == name

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
        """Exact per-cell COUNT and SUMs (and the inputs of the :mod:`dpmagic.aggregates` units, each declaring
        its per-row values and aggregates: :meth:`AggregateUnit.sql <dpmagic.aggregates.registry.AggregateUnit.sql>`),
        as the pandas backend's."""
        comp = self.compiler
        n_cells = query.n_cells
        keys: list[tuple[Any, ...]] = (
            list(itertools.product(*[g.labels for g in query.groups])) if query.groups else [()]
        )
        st = _Statement(self.dialect)
        sum_keys: dict[str, str] = {}
        schema = with_derived(self.schema, query)  # a row expression's derived column (added to the view by rows)
        for agg in query.aggregates:
            if agg.column is None or not agg.is_basic or agg.sum_key in sum_keys:
                continue
            c = schema[agg.column]
            assert isinstance(c, NumericColumn)
            if units is not None and agg.sum_key not in units and not c.is_int:
                continue  # a float column's sum not planned as a raw sum (an AVG's sum is a centred quantity)
            lo, hi = clamp_bounds(c, agg.clamp)
            x = col(agg.column)
            value: exp.Expr | Quantised = x
            bound = UNBOUNDED
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
            k = st.value(value)
            sum_keys[agg.sum_key] = k
            st.exact_sum(f"s_{k}", k, bound)
        plans: dict[str, UnitPlan] = dict(extended or {})
        handles = {alias: u.unit.sql(u, alias, st) for alias, u in plans.items()}
        rows, key_cols = comp.rows(query, st.values, self._view)
        nk = len(key_cols)
        aggs = st.aggs
        stmt = (
            exp.select(*[exp.column(k) for k in key_cols], *[exp.alias_(v, k) for k, v in aggs.items()])
            .from_(exp.alias_(exp.Subquery(this=rows), "r"))
            .group_by(*[exp.column(k) for k in key_cols])
        )
        names = list(aggs)
        sum_parts = st.sum_parts
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
        results = _Results(self, query, rows, key_cols, counts, per)
        extra = {alias: u.unit.read(u, alias, handles[alias], results) for alias, u in plans.items()}
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
