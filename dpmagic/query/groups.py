"""GROUP BY keys: categorical and integer columns (one cell per declared value) and single-column expressions
that bin the declared domain (``FLOOR(age / 10) * 10``, ``WIDTH_BUCKET``, ``CASE WHEN``, ``CAST``)."""

from __future__ import annotations

import functools
import math
from typing import Any

from sqlglot import exp

from dpmagic.domain.schema import CategoricalColumn, Column, NumericColumn, Schema
from dpmagic.domain.sets import Interval, IntervalSet, ValueSet, empty_set, full_set
from dpmagic.errors import QueryTypeError, UnsupportedQueryError
from dpmagic.query.aggregates import AGG_CLASSES, is_aggregate, number_value
from dpmagic.query.domain import enumerate_domain, resolve_column, set_of_values
from dpmagic.query.evaluate import columns_of
from dpmagic.query.model import GroupKey
from dpmagic.query.temporal import column_bins, temporal_bins, temporal_call
from dpmagic.query.where import exact_box

__all__ = [
    "MAX_CELLS",
    "group_by_keys",
    "group_key",
    "enumerated_bins",
    "case_bins",
    "case_constant",
    "float_bins",
    "norm_sql",
]

_INF = math.inf


#: the largest number of GROUP BY cells a query may release (each is a noisy row of the answer)
MAX_CELLS = 10_000


def group_by_keys(tree: exp.Select, schema: Schema, aliases: dict[str, exp.Expr]) -> tuple[list[GroupKey], list[str]]:
    group = tree.args.get("group")
    if group is None:
        return [], []
    keys: list[GroupKey] = []
    exprs: list[str] = []
    names_by_expr = {norm_sql(item.this): item.alias for item in tree.expressions if isinstance(item, exp.Alias)}
    for e in group.expressions:
        name: str
        if (
            isinstance(e, exp.Column)
            and not e.table
            and e.name.lower() in aliases
            and e.name not in schema
            and not any(c.lower() == e.name.lower() for c in schema.names)
        ):
            expr = aliases[e.name.lower()]
            name = [a for a in (names_by_expr.get(norm_sql(expr)),) if a][0]
        elif isinstance(e, exp.Literal) and not e.is_string and e.this.isdigit():
            i = int(e.this)
            if not 1 <= i <= len(tree.expressions):
                raise UnsupportedQueryError(f"GROUP BY {i}: the SELECT list has {len(tree.expressions)} items")
            item = tree.expressions[i - 1]
            expr = item.this if isinstance(item, exp.Alias) else item
            name = (
                item.alias
                if isinstance(item, exp.Alias)
                else (expr.name if isinstance(expr, exp.Column) else expr.sql())
            )
        else:
            expr = e
            name = names_by_expr.get(norm_sql(e)) or (e.name if isinstance(e, exp.Column) else e.sql())
        while isinstance(expr, exp.Paren):
            expr = expr.this
        if is_aggregate(expr) or expr.find(*AGG_CLASSES):
            raise UnsupportedQueryError(f"GROUP BY {e.sql()}: an aggregate cannot be a group key")
        key = group_key(expr, name, schema)
        if any(k.name.lower() == key.name.lower() for k in keys):
            raise UnsupportedQueryError(f"{key.name!r} appears twice in GROUP BY")
        keys.append(key)
        exprs.append(norm_sql(expr))
        if isinstance(expr, exp.Column):
            exprs[-1] = norm_sql(exp.column(resolve_column(expr, schema)))
    n = 1
    for k in keys:
        n *= k.size
    if n > MAX_CELLS:
        raise UnsupportedQueryError(
            f"GROUP BY {', '.join(k.name for k in keys)} has {n:,} cells (declared values), more than the "
            f"limit of {MAX_CELLS:,}",
            hint="bin a numeric key, e.g. GROUP BY FLOOR(age / 10) * 10, or filter it with WHERE",
        )
    return keys, exprs


def group_key(expr: exp.Expr, name: str, schema: Schema) -> GroupKey:
    if isinstance(expr, exp.Column):
        col_name = resolve_column(expr, schema)
        col = schema[col_name]
        out_name = col_name if name.lower() == col_name.lower() else name
        if isinstance(col, CategoricalColumn):
            return GroupKey(out_name, col_name, tuple(col.values), None)
        if col.temporal is not None:
            n = int(col.upper) - int(col.lower) + 1
            if col.temporal == "timestamp" or n > MAX_CELLS:
                raise UnsupportedQueryError(
                    f"GROUP BY {col_name}: the {col.temporal} column has {n:,} declared values, more than the limit "
                    f"of {MAX_CELLS:,} cells",
                    hint=f"group by a period: DATE_TRUNC('month', {col_name}), EXTRACT(YEAR FROM {col_name}), …",
                )
            bins = column_bins(col)
            return GroupKey(out_name, col_name, tuple(b[0] for b in bins), tuple(b[1] for b in bins))
        if col.is_int:
            n = int(col.upper) - int(col.lower) + 1
            if n > MAX_CELLS:
                raise UnsupportedQueryError(
                    f"GROUP BY {col_name}: the int column has {n:,} declared values, more than the limit of "
                    f"{MAX_CELLS:,} cells",
                    hint=_bin_hint(col_name, float(col.lower), float(col.upper)),
                )
            values = range(int(col.lower), int(col.upper) + 1)
            sets = tuple(IntervalSet.of(col, [Interval(float(v), float(v))]) for v in values)
            return GroupKey(out_name, col_name, tuple(values), sets)
        raise UnsupportedQueryError(
            f"GROUP BY {col_name}: a float column has no finite set of values to group by",
            hint=_bin_hint(col_name, float(col.lower), float(col.upper)),
        )
    cols = columns_of(expr)
    if len(cols) != 1:
        raise UnsupportedQueryError(
            f"GROUP BY {expr.sql()}: a group key must be a column or an expression of one column"
            + ("" if cols else " (this one is a constant)")
        )
    col_name = resolve_column(next(iter(expr.find_all(exp.Column))), schema)
    col = schema[col_name]
    call = temporal_call(expr)
    if call is not None and isinstance(col, NumericColumn):
        bins = temporal_bins(call[0], call[1], col, f"GROUP BY {expr.sql()}")
        bins = [(lab, s) for lab, s in bins if not s.is_empty()]
        if len(bins) > MAX_CELLS:
            raise UnsupportedQueryError(
                f"GROUP BY {expr.sql()} has {len(bins):,} periods in the declared range, more than {MAX_CELLS:,}",
                hint="group by a coarser period, or narrow the declared bounds",
            )
        return GroupKey(name, col_name, tuple(lab for lab, _ in bins), tuple(s for _, s in bins))
    if isinstance(col, NumericColumn) and col.temporal is not None:
        raise UnsupportedQueryError(
            f"GROUP BY {expr.sql()}: on the {col.temporal} column {col_name!r} group by the column, a calendar field "
            "or a period",
            hint=f"EXTRACT(YEAR FROM {col_name}), EXTRACT(MONTH FROM {col_name}), DATE_TRUNC('month', {col_name}), "
            f"DATE_TRUNC('week', {col_name}) …",
        )
    bins = enumerated_bins(expr, col, schema)
    labels = tuple(label for label, _ in bins)
    return GroupKey(name, col_name, labels, tuple(s for _, s in bins))


def enumerated_bins(expr: exp.Expr, col: Column, schema: Schema) -> list[tuple[Any, ValueSet]]:
    """The declared bins of a single-column expression: (output value, the column's values giving it)."""
    got = enumerate_domain(expr, col, schema)
    if got is None:
        if isinstance(expr, (exp.Case, exp.If)):
            return case_bins(expr, col, schema)
        if isinstance(col, NumericColumn):
            return float_bins(expr, col, schema)
        raise UnsupportedQueryError(f"GROUP BY {expr.sql()}: cannot enumerate the declared values of {col.name!r}")
    values, out = got
    groups: dict[Any, list[Any]] = {}
    for v, o in zip(values, out.tolist(), strict=True):
        key = None if (o is None or (isinstance(o, float) and math.isnan(o))) else o
        groups.setdefault(key, []).append(v)
    if len(groups) > MAX_CELLS:
        raise UnsupportedQueryError(
            f"GROUP BY {expr.sql()} has {len(groups):,} bins, more than the limit of {MAX_CELLS:,}"
        )
    try:
        labels = sorted(groups, key=lambda k: (k is None, k if k is not None else 0))
    except TypeError:
        raise QueryTypeError(
            f"GROUP BY {expr.sql()}: its values mix numbers and strings",
            hint="give every branch the same type (e.g. CAST(... AS VARCHAR))",
        ) from None
    return [(k, set_of_values(col, groups[k])) for k in labels]


def case_bins(expr: exp.Expr, col: Column, schema: Schema) -> list[tuple[Any, ValueSet]]:
    """CASE WHEN cond THEN const ... over a float column: each condition a set of the column (first match wins)."""
    if isinstance(expr, exp.If):
        branches = [(expr.this, expr.args.get("true"))]
        default = expr.args.get("false")
    else:
        if expr.this is not None:
            raise UnsupportedQueryError(f"GROUP BY {expr.sql()}: use CASE WHEN <condition> THEN ... on a float column")
        branches = [(i.this, i.args.get("true")) for i in expr.args.get("ifs", [])]
        default = expr.args.get("default")
    taken = empty_set(col)
    out: dict[Any, ValueSet] = {}
    order: list[Any] = []

    def add(label: Any, s: ValueSet) -> None:
        if label in out:
            out[label] = out[label].union(s)
        else:
            out[label] = s
            order.append(label)

    for cond, then in branches:
        box, _ = exact_box(cond, schema)
        s = box.constraints.get(col.name, full_set(col)) if not box.is_empty() else empty_set(col)
        if set(box.constraints) - {col.name}:
            raise UnsupportedQueryError(f"GROUP BY {expr.sql()}: every condition must be on {col.name!r}")
        add(case_constant(then), s.intersect(taken.complement()))
        taken = taken.union(s)
    add(case_constant(default) if default is not None else None, taken.complement())
    return [(k, out[k]) for k in order if not out[k].is_empty()]


def case_constant(node: exp.Expr | None) -> Any:
    if node is None or isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        v = float(node.this)
        return int(v) if v.is_integer() and "." not in node.this else v
    if isinstance(node, (exp.Neg, exp.Paren)):
        return number_value(node)
    raise UnsupportedQueryError(f"a CASE group key takes constant results, not {node.sql()!r}")


def float_bins(expr: exp.Expr, col: NumericColumn, schema: Schema) -> list[tuple[Any, ValueSet]]:
    """``FLOOR(col / w) [* w]``, ``WIDTH_BUCKET(col, lo, hi, k)`` and ``CAST(col AS INT)`` on a float column."""
    lo, hi = float(col.lower), float(col.upper)
    if isinstance(expr, exp.WidthBucket) and isinstance(expr.this, exp.Column):
        a, b, k = (number_value(expr.args[x]) for x in ("min_value", "max_value", "num_buckets"))
        k = int(k)
        if not (b > a and 1 <= k <= MAX_CELLS):
            raise UnsupportedQueryError("WIDTH_BUCKET needs min < max and 1 ≤ buckets ≤ 10,000")
        edges = [a + (b - a) * i / k for i in range(k + 1)]
        bins: list[tuple[Any, ValueSet]] = [(0, IntervalSet.of(col, [Interval(-_INF, a, True, False)]))]
        for i in range(k):
            bins.append((i + 1, IntervalSet.of(col, [Interval(edges[i], edges[i + 1], True, False)])))
        bins.append((k + 1, IntervalSet.of(col, [Interval(b, _INF, True, True)])))
        return [(lab, s) for lab, s in bins if not s.is_empty()]
    mult = None
    inner = expr
    if isinstance(inner, exp.Mul) and not columns_of(inner.expression):
        mult, inner = number_value(inner.expression), inner.this
    while isinstance(inner, exp.Paren):
        inner = inner.this
    if isinstance(inner, exp.Floor):
        arg = inner.this
        while isinstance(arg, exp.Paren):
            arg = arg.this
        if isinstance(arg, exp.Div) and isinstance(arg.this, exp.Column) and not columns_of(arg.expression):
            w = number_value(arg.expression)
        elif isinstance(arg, exp.Column):
            w = 1.0
        else:
            w = 0.0
        if w > 0:
            first, last = math.floor(lo / w), math.floor(hi / w)
            if last - first + 1 > MAX_CELLS:
                raise UnsupportedQueryError(
                    f"GROUP BY {expr.sql()} has {last - first + 1:,} bins, more than {MAX_CELLS:,}"
                )
            out = []
            for j in range(first, last + 1):
                label: Any = j if mult is None else j * mult
                if isinstance(label, float) and label.is_integer():
                    label = int(label)
                out.append((label, IntervalSet.of(col, [Interval(j * w, (j + 1) * w, True, False)])))
            return [(lab, s) for lab, s in out if not s.is_empty()]
    raise UnsupportedQueryError(
        f"GROUP BY {expr.sql()} on float column {col.name!r} is not supported",
        hint=f"use FLOOR({col.name} / w) * w, WIDTH_BUCKET({col.name}, lo, hi, k) or CASE WHEN {col.name} < ... THEN ... END",
    )


def norm_sql(node: exp.Expr) -> str:
    """``node``'s SQL in lower case (GROUP BY keys and the expressions that refer to them are matched by it).

    A plain column (identifiers only, no comment) is written once per spelling (:func:`_column_sql`, issue 28:
    a parse asks for the same few columns several times, and each generation builds a sqlglot generator); any
    other node is generated as sqlglot does by default."""
    if (
        isinstance(node, exp.Column)
        and not node.comments
        and _COLUMN_PARTS.issuperset(k for k, v in node.args.items() if v)
    ):
        parts = node.parts
        if all(isinstance(p, exp.Identifier) and not p.comments for p in parts):
            return _column_sql(tuple((p.arg_key, p.name, bool(p.args.get("quoted"))) for p in parts))
    return node.sql().lower()


#: the arguments of a column :func:`_column_sql` writes (anything else, e.g. a join mark, is generated as is)
_COLUMN_PARTS = frozenset({"this", "table", "db", "catalog"})


@functools.lru_cache(maxsize=4096)
def _column_sql(parts: tuple[tuple[str, str, bool], ...]) -> str:
    """The lower-case SQL of the column of these (argument, name, quoted) identifiers, generated by sqlglot."""
    args = {key: exp.Identifier(this=name, quoted=quoted) for key, name, quoted in parts}
    return exp.Column(**args).sql().lower()


def _bin_hint(name: str, lower: float, upper: float) -> str:
    """A binned GROUP BY that works on this column, with numbers from its declared bounds: a round width w (a
    power of ten giving about 10–100 bins) for FLOOR, ten buckets for WIDTH_BUCKET."""
    span = upper - lower
    w = 10.0 ** math.floor(math.log10(span / 10.0)) if span > 0 and math.isfinite(span) else 1.0
    width = f"{w:.0f}" if w >= 1 else f"{w:g}"
    lo, hi = f"{lower:g}", f"{upper:g}"
    return (
        f"bin it: GROUP BY FLOOR({name} / {width}) * {width} (about {max(1, round(span / w)):,} bins), or "
        f"WIDTH_BUCKET({name}, {lo}, {hi}, 10), or CASE WHEN {name} < … THEN … END"
    )
