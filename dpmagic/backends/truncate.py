"""Stable truncation of a person-level table (docs/people.md §1), the same on pandas, DuckDB and Spark.

For a schema whose :attr:`~dpmagic.domain.schema.Schema.person_unit` is set, every backend queries, instead of the
bound rows, the rows each person keeps.  The kept rows are chosen once, at binding, by:

1. **the row order** — each row's *coded* values (a categorical column as its declared position, an integer as
   itself, a float as itself with −0.0 written +0.0) and its **row hash** h = MD5(salt ‖ "|" ‖ t₁ ‖ "|" ‖ … ‖ tₘ)
   (lower-case hex), where t₁ … tₘ are the decimal texts of the coded values in declared order — a float x as
   the integer ⌊x / u⌋ for a power of two u ≥ 2⁻⁴⁰·max|bound| (:func:`float_unit`; a double's own text is not the
   same in Python, DuckDB and Spark, this integer is).  Rows are ordered by (h, every declared column's coded
   value): a total order on distinct rows (ties only between identical rows), which depends only on the row
   itself and the public salt;
2. for each ``per_group`` column A in declared order: with ``max_groups`` g, each person keeps the rows of the g
   first of their values of A by the **group order** (MD5(salt ‖ "|" ‖ A ‖ "|" ‖ id text ‖ "|" ‖ value text),
   then the value), and with ``max_rows`` c, the c first rows of each value of A by the row order;
3. each person keeps the K = ``max_rows`` first remaining rows by the row order;
4. with ``"invariant_mode": "first"``, every kept row of a person takes, in each invariant column, the value of the
   person's first kept row.

Each step maps a person's rows to a subset of them by a rule that reads no other person's rows, so the kept rows of
a person are a function of that person's rows alone (stable: adding or removing one person changes no one
else's kept rows).  pandas (:func:`truncate_frame`) is the reference; the engines run :func:`truncated_select`,
one statement of window functions (``ROW_NUMBER`` / ``DENSE_RANK`` / ``FIRST_VALUE`` ``OVER (PARTITION BY id
ORDER BY …)``) over the coded table (:meth:`~dpmagic.backends.compiler.Compiler.coding`), materialised once.

The binding checks (a NULL id, a declared invariant column that varies within a person) are decided by the engine:
only one flag per column crosses to the kernel, and the errors name columns, never a value or a count.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from sqlglot import exp

from dpmagic.aggregates.sqlexpr import case, col, lit
from dpmagic.domain.schema import CategoricalColumn, NumericColumn, Schema
from dpmagic.domain.unit import PersonUnit
from dpmagic.errors import DataValidationError

__all__ = [
    "invariant_check_select",
    "invariant_error",
    "float_unit",
    "truncate_frame",
    "truncated_select",
    "varying_from_row",
    "varying_invariant_columns",
]

#: the separator of the hashed texts (never in a decimal integer's text)
SEP = "|"


def _unit(schema: Schema) -> PersonUnit:
    unit = schema.person_unit
    if unit is None:
        raise ValueError("a row-level schema has nothing to truncate")
    return unit


def _is_float(schema: Schema, name: str) -> bool:
    c = schema[name]
    return isinstance(c, NumericColumn) and not c.is_int


def float_unit(schema: Schema, name: str) -> float:
    """u, the power of two a float column's values are divided by (and floored) in the hashed text: the least
    with |x / u| < 2⁴⁰ for every x within the declared bounds, so ⌊x / u⌋ is an exact BIGINT on every engine
    (division by a power of two and FLOOR are exact IEEE operations, the same in numpy, DuckDB and Java)."""
    c = schema[name]
    assert isinstance(c, NumericColumn)
    m = max(abs(float(c.lower)), abs(float(c.upper)))
    unit = math.ldexp(1.0, math.frexp(m)[1] - 40) if m > 0 else 1.0
    return unit if unit > 0 else math.ldexp(1.0, -1074)


def salt(schema: Schema) -> str:
    return _unit(schema).salt_for(schema.dataset, schema.table)


def invariant_error(columns: Sequence[str]) -> DataValidationError:
    """A declared invariant column varies within some person (named; no value, no person, no count)."""
    names = ", ".join(repr(c) for c in columns)
    plural = len(columns) != 1
    return DataValidationError(
        f"the privacy unit declares column{'s' if plural else ''} {names} invariant, but {'they vary' if plural else 'it varies'} "
        "within a person",
        hint='fix the data, remove the column(s) from \'invariant\', or declare "invariant_mode": "first" (each '
        "person then keeps the value of their first kept row)",
    )


# ---- pandas: the reference implementation ----
def _coded(df: pd.DataFrame, schema: Schema) -> dict[str, np.ndarray]:
    """Each declared column's coded values (categorical: declared position; int: int64; float: float64, +0.0)."""
    out: dict[str, np.ndarray] = {}
    for name, c in schema.columns.items():
        if isinstance(c, CategoricalColumn):
            out[name] = pd.Categorical(df[name], categories=list(c.values)).codes.astype(np.int64)
        elif c.is_int:
            out[name] = df[name].to_numpy().astype(np.int64)
        else:
            x = df[name].to_numpy().astype(np.float64)
            out[name] = np.where(x == 0, 0.0, x)
    return out


def _text_codes(schema: Schema, name: str, coded: np.ndarray) -> np.ndarray:
    """The integers whose decimal texts enter the hashes: the coded value, ⌊x / u⌋ for a float (:func:`float_unit`)."""
    if not _is_float(schema, name):
        return coded
    return np.floor(coded / float_unit(schema, name)).astype(np.int64)


def _md5(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """MD5 of each text as two big-endian uint64 halves (ordered as the lower-case hex strings are)."""
    raw = b"".join(hashlib.md5(t.encode("utf-8")).digest() for t in texts)
    halves = np.frombuffer(raw, dtype=">u8").astype(np.uint64).reshape(-1, 2)
    return halves[:, 0].copy(), halves[:, 1].copy()


def _texts(prefix: str, parts: Sequence[np.ndarray], n: int) -> list[str]:
    if not parts:
        return [prefix] * n
    strs = [p.astype(str).tolist() for p in parts]
    return [prefix + SEP.join(row) for row in zip(*strs, strict=True)]


def varying_invariant_columns(df: pd.DataFrame, schema: Schema) -> list[str]:
    """The declared invariant columns that take two values within some person (pandas)."""
    unit = _unit(schema)
    if not unit.invariant or len(df) == 0:
        return []
    coded = _coded(df, schema)
    frame = pd.DataFrame({f"c{i}": coded[c] for i, c in enumerate(unit.invariant)})
    g = frame.groupby(coded[unit.id], sort=False)
    varies = (g.min() != g.max()).any(axis=0)
    return [c for i, c in enumerate(unit.invariant) if bool(varies[f"c{i}"])]


def truncate_frame(df: pd.DataFrame, schema: Schema) -> pd.DataFrame:
    """The rows each person keeps (module docstring), in their original order; a validated frame in, one out.

    O(n log n) for n rows (one sort; an MD5 per row and per (person, value) of a ``max_groups`` column)."""
    unit = _unit(schema)
    names = list(schema.columns)
    n = len(df)
    coded = _coded(df, schema)
    prefix = salt(schema) + SEP
    text = {c: _text_codes(schema, c, coded[c]) for c in names}
    hi, lo = _md5(_texts(prefix, [text[c] for c in names], n))
    # the row order: (h, every declared column's coded value); np.lexsort's last key is the primary one
    pos = np.lexsort([coded[c] for c in reversed(names)] + [lo, hi]).astype(np.int64)
    ident = coded[unit.id]
    for a, bound in unit.per_group.items():
        ids, vals = ident[pos], coded[a][pos]
        keep = np.ones(len(pos), dtype=bool)
        if bound.max_groups is not None:
            pairs = pd.DataFrame({"i": ids, "a": vals}).drop_duplicates(ignore_index=True)
            parts = [_text_codes(schema, unit.id, pairs["i"].to_numpy()), _text_codes(schema, a, pairs["a"].to_numpy())]
            ghi, glo = _md5(_texts(prefix + a + SEP, parts, len(pairs)))
            order = np.lexsort([pairs["a"].to_numpy(), glo, ghi, pairs["i"].to_numpy()])
            ranked = pairs.iloc[order].reset_index(drop=True)
            ranked["r"] = ranked.groupby("i", sort=False).cumcount()
            rank = pd.DataFrame({"i": ids, "a": vals}).merge(ranked, on=["i", "a"], how="left")["r"].to_numpy()
            keep &= rank < bound.max_groups
        if bound.max_rows is not None:
            within = pd.DataFrame({"i": ids, "a": vals}).groupby(["i", "a"], sort=False).cumcount().to_numpy()
            keep &= within < bound.max_rows
        pos = pos[keep]
    ids = pd.Series(ident[pos])
    pos = pos[ids.groupby(ids, sort=False).cumcount().to_numpy() < unit.max_rows]
    out = df.iloc[pos].copy()
    if unit.invariant_mode == "first" and unit.invariant:
        ids = pd.Series(ident[pos])
        first = pd.Series(pos).groupby(ids, sort=False).transform("first").to_numpy()
        for c in unit.invariant:
            out[c] = df[c].to_numpy()[first]
    for name in names:
        if _is_float(schema, name):
            x = out[name].to_numpy().astype(np.float64)
            out[name] = np.where(x == 0, 0.0, x)
    order = np.argsort(pos, kind="stable")
    return out.iloc[order].reset_index(drop=True)


# ---- SQL engines ----
def _ordered(x: exp.Expr) -> exp.Ordered:
    return exp.Ordered(this=x, desc=False, nulls_first=False)


def _window(fn: exp.Expr, partition: Sequence[exp.Expr], order: Sequence[exp.Expr]) -> exp.Window:
    return exp.Window(
        this=fn,
        partition_by=[p.copy() for p in partition],
        order=exp.Order(expressions=[_ordered(o.copy()) for o in order]),
    )


def _text(schema: Schema, name: str) -> exp.Expr:
    """The decimal text of a column's hashed integer (:func:`_text_codes`), in SQL."""
    x: exp.Expr = col(name)
    if _is_float(schema, name):
        x = exp.cast(exp.Floor(this=exp.Div(this=x, expression=lit(float_unit(schema, name)))), "BIGINT")
    return exp.cast(x, "TEXT")


def _md5_sql(prefix: str, parts: Sequence[exp.Expr]) -> exp.Expr:
    """MD5(prefix ‖ t₁ ‖ "|" ‖ … ‖ tₘ) in lower-case hex (DuckDB and Spark both)."""
    pieces: list[exp.Expr] = [exp.Literal.string(prefix)]
    for i, p in enumerate(parts):
        if i:
            pieces.append(exp.Literal.string(SEP))
        pieces.append(p)
    body = pieces[0] if len(pieces) == 1 else exp.Concat(expressions=pieces)
    return exp.MD5(this=body)


def _select(items: Mapping[str, exp.Expr], source: exp.Expr, alias: str) -> exp.Select:
    return exp.select(*[exp.alias_(v, exp.to_identifier(k, quoted=True)) for k, v in items.items()]).from_(
        exp.alias_(exp.Subquery(this=source) if isinstance(source, exp.Select) else source, alias)
    )


def truncated_select(schema: Schema, coded: exp.Expr) -> exp.Select:
    """The rows each person keeps (module docstring) as one SELECT of the declared columns over ``coded`` — a
    table or SELECT holding every declared column coded (:meth:`~dpmagic.backends.compiler.Compiler.coding`:
    categorical columns as declared positions, numbers clamped).  The same statement on DuckDB and Spark."""
    unit = _unit(schema)
    names = list(schema.columns)
    prefix = salt(schema) + SEP
    # level 0: the coded values (+0.0 for −0.0), the row hash, one group hash per max_groups column
    items: dict[str, exp.Expr] = {}
    for name in names:
        x: exp.Expr = col(name)
        if _is_float(schema, name):
            x = case([(exp.EQ(this=col(name), expression=lit(0.0)), lit(0.0))], col(name))
        items[name] = x
    items["dp_h"] = _md5_sql(prefix, [_text(schema, c) for c in names])
    group_cols = list(unit.per_group)
    for j, a in enumerate(group_cols):
        if unit.per_group[a].max_groups is not None:
            items[f"dp_gh{j}"] = _md5_sql(prefix + a + SEP, [_text(schema, unit.id), _text(schema, a)])
    carried = list(items)
    stmt = _select(items, coded, "dp_t0")
    row_order = [exp.column("dp_h"), *[col(c) for c in names]]
    person = [col(unit.id)]
    for j, a in enumerate(group_cols):
        bound = unit.per_group[a]
        items = {k: exp.column(exp.to_identifier(k, quoted=True)) for k in carried}
        conds: list[exp.Expr] = []
        if bound.max_groups is not None:
            rank = _window(exp.Anonymous(this="DENSE_RANK"), person, [exp.column(f"dp_gh{j}"), col(a)])
            items[f"dp_gr{j}"] = rank
            conds.append(exp.LTE(this=exp.column(f"dp_gr{j}"), expression=lit(bound.max_groups)))
        if bound.max_rows is not None:
            items[f"dp_cr{j}"] = _window(exp.RowNumber(), [*person, col(a)], row_order)
            conds.append(exp.LTE(this=exp.column(f"dp_cr{j}"), expression=lit(bound.max_rows)))
        inner = _select(items, stmt, f"dp_t{j + 1}")
        stmt = exp.select(*[exp.column(exp.to_identifier(k, quoted=True)) for k in carried]).from_(
            exp.alias_(exp.Subquery(this=inner), f"dp_u{j + 1}")
        )
        stmt = stmt.where(exp.and_(*conds))
    items = {k: col(k) for k in names}
    items["dp_k"] = _window(exp.RowNumber(), person, row_order)
    first = unit.invariant if unit.invariant_mode == "first" else ()
    for j, c in enumerate(first):
        items[f"dp_f{j}"] = _window(exp.FirstValue(this=col(c)), person, row_order)
    inner = _select(items, stmt, "dp_tk")
    outs = []
    for name in names:
        src = col(name) if name not in first else exp.column(f"dp_f{first.index(name)}")
        outs.append(exp.alias_(src, exp.to_identifier(name, quoted=True)))
    return (
        exp.select(*outs)
        .from_(exp.alias_(exp.Subquery(this=inner), "dp_uk"))
        .where(exp.LTE(this=exp.column("dp_k"), expression=lit(unit.max_rows)))
    )


def invariant_check_select(schema: Schema, coded: exp.Expr) -> exp.Select | None:
    """One aggregate statement over ``coded`` giving, per declared invariant column, 1 when it takes two values
    within some person and 0 otherwise (None: nothing to check).  Only these flags leave the engine."""
    unit = _unit(schema)
    if unit.invariant_mode != "check" or not unit.invariant:
        return None
    flags: dict[str, exp.Expr] = {}
    for j, c in enumerate(unit.invariant):
        differ = exp.NEQ(this=exp.Min(this=col(c)), expression=exp.Max(this=col(c)))
        flags[f"v{j}"] = case([(differ, lit(1))], lit(0))
    source = exp.Subquery(this=coded) if isinstance(coded, exp.Select) else coded
    inner = exp.select(*[exp.alias_(v, k) for k, v in flags.items()]).from_(exp.alias_(source, "dp_c"))
    inner = inner.group_by(col(unit.id))
    return exp.select(*[exp.alias_(exp.Max(this=exp.column(k)), k) for k in flags]).from_(
        exp.alias_(exp.Subquery(this=inner), "dp_v")
    )


def varying_from_row(schema: Schema, row: Sequence[Any]) -> list[str]:
    """The invariant columns flagged in the one row of :func:`invariant_check_select`."""
    unit = _unit(schema)
    return [c for c, v in zip(unit.invariant, row, strict=True) if v is not None and int(v) == 1]
