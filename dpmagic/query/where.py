"""WHERE → a box per column (the coverage the accountant charges) and, when no box is exact, an exact filter.

AND intersects per column; OR on one column is a union, OR across columns is evaluated exactly on the rows and
charged over the smallest covering box (a superset: safe); NOT complements on the declared domain — in SQL's
three-valued logic when its operand can be NULL there (a CASE without ELSE, a LEFT JOIN lookup's column, NULL):
NOT p keeps the values where p is FALSE, not NULL (:func:`_false_box`).
"""

from __future__ import annotations

import numpy as np
from sqlglot import exp

from dpmagic.domain.schema import CategoricalColumn, Column, NumericColumn, Schema
from dpmagic.domain.sets import Box, ValueSet, empty_set
from dpmagic.errors import UnsupportedQueryError
from dpmagic.query.domain import (
    check_declared,
    check_value_type,
    column_of,
    comparison_set,
    domain_array,
    enumerate_domain,
    int_set,
    is_column,
    is_literal,
    literal_value,
    points_set,
    range_set,
    resolve_column,
    set_of_values,
)
from dpmagic.query.evaluate import EvalError, columns_of, evaluate, null_mask
from dpmagic.query.model import Filter, Query
from dpmagic.query.temporal import is_temporal, temporal_atom

__all__ = [
    "COMPARISONS",
    "where_clause",
    "where_box",
    "exact_box",
    "conjuncts",
    "predicate",
    "atom_box",
    "check_literal_types",
    "check_categories",
    "empty_box",
    "simple_comparison",
    "bounding_union",
    "union_box",
    "complement_box",
    "comparison_box",
]


COMPARISONS: dict[type[exp.Expr], str] = {
    exp.EQ: "=",
    exp.NEQ: "!=",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}


_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def where_clause(node: exp.Expr, schema: Schema) -> tuple[Box, Filter | None]:
    """The WHERE clause's covering box, and the exact filter when the box is only a cover (None: exact)."""
    f, box, exact = predicate(fold_constants(node), schema)
    return box, (None if exact else f)


#: arithmetic and constant functions a constant sub-expression of WHERE may be made of
_FOLDABLE = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.Neg, exp.Paren, exp.Pi, exp.Literal)


def fold_constants(node: exp.Expr) -> exp.Expr:
    """``node`` with every maximal arithmetic sub-expression of number literals and constant functions
    (``10 * PI()``, ``(1 + 2) * 3``) replaced by its value, evaluated by :mod:`dpmagic.query.evaluate` (whose
    ``int / int`` truncates, as everywhere in dpmagic's SQL).  A bare literal, or anything that names a column,
    is left as it is; nothing is read.  O(size of the tree)."""

    def constant(e: exp.Expr) -> bool:
        return all(isinstance(x, _FOLDABLE) and not (isinstance(x, exp.Literal) and x.is_string) for x in e.walk())

    def fold(e: exp.Expr) -> exp.Expr:
        if isinstance(e, exp.Literal) or (isinstance(e, exp.Neg) and isinstance(e.this, exp.Literal)):
            return e  # already a literal (a negative number is Neg(Literal))
        if not constant(e):
            return e
        value = evaluate(e, {}, 1, lambda c: c.name)[0]
        if isinstance(value, float) and value != value:  # NaN (0 / 0): leave it for the usual error
            return e
        number = int(value) if isinstance(value, (int, np.integer)) else float(value)
        lit = exp.Literal.number(abs(number))
        return exp.Neg(this=lit) if number < 0 else lit

    from dpmagic.query.temporal import untyped_literals

    return untyped_literals(node.transform(fold, copy=True), copy=False)  # the folded copy is ours: one copy


def where_box(node: exp.Expr, schema: Schema) -> Box:
    box, _ = exact_box(node, schema)
    return box


def exact_box(node: exp.Expr, schema: Schema) -> tuple[Box, frozenset[str]]:
    """A sub-predicate that must be an exact box (CASE group conditions): its box and its columns."""
    _, box, exact = predicate(node, schema)
    if not exact:
        raise UnsupportedQueryError(f"{node.sql()!r}: OR across columns is not supported here")
    return box, frozenset(box.constraints)


def conjuncts(node: exp.Expr) -> list[exp.Expr]:
    """The operands of a left-deep chain of ANDs (as sqlglot parses ``a AND b AND c``), left to right."""
    out: list[exp.Expr] = []
    while isinstance(node, exp.And):
        out.append(node.expression)
        node = node.this
    out.append(node)
    return out[::-1]


def predicate(node: exp.Expr, schema: Schema) -> tuple[Filter, Box, bool]:
    """(exact filter, covering box, whether the box is exact)."""
    if isinstance(node, exp.Paren):
        return predicate(node.this, schema)
    if isinstance(node, exp.And):
        # folded along the chain (``a AND b AND c`` is ((a AND b) AND c)); exact boxes are intersected per column
        # once at the end (the same box as intersecting pairwise)
        done = [predicate(p, schema) for p in conjuncts(node)]
        f, box, exact = done[0]
        if all(e for _, _, e in done):
            cons: dict[str, ValueSet] = {}
            for _, b, _ in done:
                for c, vs in b.constraints.items():
                    cons[c] = cons[c].intersect(vs) if c in cons else vs
            box = Box(cons)
            return Filter("box", box), box, True
        for fb, b, eb in done[1:]:
            box = box.intersect(b)
            f, exact = (Filter("box", box), True) if exact and eb else (Filter("and", parts=(f, fb)), False)
        return f, box, exact
    if isinstance(node, exp.Or):
        fa, a, ea = predicate(node.this, schema)
        fb, b, eb = predicate(node.expression, schema)
        if ea and eb:
            exact_union = union_box(a, b)
            if exact_union is not None:
                return Filter("box", exact_union), exact_union, True
        return Filter("or", parts=(fa, fb)), bounding_union(a, b), False
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Boolean) and node.expression.this is True:
        return predicate(node.this, schema)  # ``c IS TRUE``: the rows where c holds (NULL and FALSE excluded)
    if isinstance(node, exp.Not):
        inner = node.this
        while isinstance(inner, exp.Paren):
            inner = inner.this
        if inner.find(*_NULLABLE) is not None:  # SQL's NOT keeps the rows where its operand is FALSE, not NULL
            if isinstance(inner, exp.And):  # De Morgan holds in three-valued logic
                return predicate(
                    exp.or_(exp.Not(this=inner.this.copy()), exp.Not(this=inner.expression.copy())), schema
                )
            if isinstance(inner, exp.Or):
                return predicate(
                    exp.and_(exp.Not(this=inner.this.copy()), exp.Not(this=inner.expression.copy())), schema
                )
            if isinstance(inner, exp.Not):
                return predicate(inner.this, schema)
            false = _false_box(inner, schema)
            if false is not None:
                return Filter("box", false), false, True
        f, box, exact = predicate(node.this, schema)
        if exact:
            comp = complement_box(box, schema)
            if comp is not None:
                return Filter("box", comp), comp, True
        return Filter("not", parts=(f,)), Box.everything(), False
    box = atom_box(node, schema)
    return Filter("box", box), box, True


#: constructs that can make a one-column predicate NULL on the declared domain (which itself has no NULLs): a CASE
#: without ELSE (a public lookup's column under LEFT JOIN is one), NULL, NULLIF, IF, a division or modulo by zero
_NULLABLE = (exp.Case, exp.Null, exp.Nullif, exp.If, exp.Div, exp.Mod)


def _false_box(atom: exp.Expr, schema: Schema) -> Box | None:
    """The declared values of the atom's one column on which ``atom`` is FALSE in SQL's three-valued logic —
    neither TRUE nor NULL (a comparison, BETWEEN, IN or LIKE is NULL when an operand is) — so that ``NOT atom``
    selects what SQL selects; None when the atom is not an enumerable one-column predicate (the caller's usual
    path then applies, and refuses what it cannot answer).  Reads the schema only."""
    if isinstance(atom, exp.Is):
        return None  # IS NULL / IS TRUE are never NULL: their complement is exact
    names = {resolve_column(c, schema) for c in atom.find_all(exp.Column)}
    if len(names) != 1:
        return None
    name = names.pop()
    col = schema[name]
    if is_temporal(col):
        return None
    if type(atom) in COMPARISONS or isinstance(atom, (exp.Like, exp.ILike)):
        operands = [atom.this, atom.expression]
    elif isinstance(atom, exp.Between):
        operands = [atom.this, atom.args["low"], atom.args["high"]]
    elif isinstance(atom, exp.In):
        operands = [atom.this, *atom.expressions]
    else:
        operands = [atom]
    try:
        got = enumerate_domain(atom, col, schema)
    except UnsupportedQueryError:
        return None
    if got is None:
        return None
    values, truth = got
    if truth.dtype.kind != "b":
        return None
    arr = domain_array(col, values)
    unknown = np.zeros(len(values), dtype=bool)
    for e in operands:
        try:
            v = evaluate(e, {col.name: arr}, len(values), lambda c: resolve_column(c, schema))
        except EvalError:
            return None
        unknown |= null_mask(np.asarray(v))
    members = [v for v, t, u in zip(values, truth.tolist(), unknown.tolist(), strict=True) if not t and not u]
    if isinstance(col, NumericColumn):
        return Box({name: int_set(col, members)})
    return Box({name: set_of_values(col, members)})


def atom_box(node: exp.Expr, schema: Schema) -> Box:
    if isinstance(node, exp.Boolean):
        return Box.everything() if node.this else empty_box(schema)
    if type(node) in COMPARISONS and simple_comparison(node):
        return comparison_box(node, COMPARISONS[type(node)], schema)[0]
    if (
        isinstance(node, exp.Between)
        and is_column(node.this)
        and is_literal(node.args["low"])
        and is_literal(node.args["high"])
    ):
        name, col = column_of(node.this, schema, "BETWEEN")
        lo, hi = literal_value(node.args["low"], col), literal_value(node.args["high"], col)
        return Box({name: range_set(col, lo, hi)})
    if isinstance(node, exp.In):
        if node.args.get("query") is not None or node.args.get("unnest") is not None:
            raise UnsupportedQueryError("IN (subquery) is not supported: list the values")
        if is_column(node.this) and all(is_literal(v) for v in node.expressions):
            name, col = column_of(node.this, schema, "IN")
            values = [literal_value(v, col) for v in node.expressions]
            return Box({name: points_set(col, values)})
    if isinstance(node, exp.Is) and is_column(node.this) and isinstance(node.expression, exp.Null):
        name, col = column_of(node.this, schema, "IS NULL")
        return Box({name: empty_set(col)})  # the declared domain has no NULLs
    if isinstance(node, exp.Literal):
        raise UnsupportedQueryError(f"a constant ({node.sql()}) is not a predicate in dpmagic's SQL subset")
    calendar = temporal_atom(node, schema)  # EXTRACT(YEAR FROM d) = 2024, DATE_TRUNC('month', d) >= '…'
    if calendar is not None:
        return calendar
    cols = columns_of(node)
    if not cols:
        raise UnsupportedQueryError(f"{node.sql()!r} is a constant, not a predicate on a column")
    if len(cols) > 1:
        names = sorted({resolve_column(c, schema) for c in node.find_all(exp.Column)})
        if len(names) > 1:
            raise UnsupportedQueryError(
                f"{node.sql()!r} compares or combines several columns ({', '.join(names)}): each predicate must be "
                "on one column"
            )
    name = resolve_column(next(iter(node.find_all(exp.Column))), schema)
    col = schema[name]
    for bad in (exp.Like, exp.ILike):
        if node.find(bad) is not None and not (isinstance(col, CategoricalColumn) and not col.is_numeric_valued):
            raise UnsupportedQueryError(f"LIKE applies to string categorical columns; {name!r} is not one")
    if is_temporal(col):
        raise UnsupportedQueryError(
            f"{node.sql()!r} is not a supported predicate on the {col.temporal} column {name!r}",  # type: ignore[union-attr]
            hint=f"compare it with ISO literals ({name} >= '2024-01-01', BETWEEN … AND …) or compare a calendar "
            f"field (EXTRACT(YEAR FROM {name}) = 2024, DATE_TRUNC('month', {name}) = '2024-03-01')",
        )
    check_literal_types(node, col)
    got = enumerate_domain(node, col, schema)
    if got is None:
        raise UnsupportedQueryError(
            f"{node.sql()!r} is not a supported WHERE predicate on float column {name!r}",
            hint="compare the column with numbers (=, <, BETWEEN, IN ...)",
        )
    values, truth = got
    if truth.dtype.kind != "b":
        if isinstance(node, exp.Column) and truth.dtype.kind in "iuf":
            truth = truth.astype(float) != 0  # a bare 0/1 column as a boolean
        else:
            raise UnsupportedQueryError(f"{node.sql()!r} is not a predicate: compare it with a value")
    members = [v for v, t in zip(values, truth.tolist(), strict=True) if t]
    if isinstance(col, NumericColumn):
        return Box({name: int_set(col, members)})
    return Box({name: set_of_values(col, members)})


def check_literal_types(node: exp.Expr, col: Column) -> None:
    """A string literal compared with a numeric column (or a number with a string one) is a typo: say so."""
    for cmp in [node, *node.find_all(exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.In)]:
        if type(cmp) not in COMPARISONS and not isinstance(cmp, exp.In):
            continue
        sides = [cmp.this, *(cmp.expressions if isinstance(cmp, exp.In) else [cmp.expression])]
        if not any(is_column(s) for s in sides):
            continue
        for s in sides:
            if isinstance(s, exp.Literal):
                check_value_type(literal_value(s, col), col)


def check_categories(query: Query, schema: Schema) -> None:
    """Refuse ``col = v``, ``col <> v``, ``col IN (…)`` and ``NOT IN`` (anywhere in the statement) when ``col`` is
    categorical and ``v`` is not one of its declared categories (:func:`~dpmagic.query.domain.check_declared`:
    'female' for 'Female' names 'Female').

    :func:`where_clause` keeps such a comparison a valid, empty predicate (the schema-only tools, e.g. ``dpmagic
    overlap`` on a query log, analyse it as such); a session calls this before anything is charged, because an
    analyst who spends budget on a value that matches no row has almost always made a typo."""
    if query._tree is None:
        return
    for cmp in query._tree.find_all(exp.EQ, exp.NEQ, exp.In):
        sides = [cmp.this, *(cmp.expressions if isinstance(cmp, exp.In) else [cmp.expression])]
        columns = [s for s in sides if is_column(s)]
        if len(columns) != 1:
            continue
        node = columns[0]
        while isinstance(node, exp.Paren):
            node = node.this
        matches = [c for c in schema.names if c == node.name] or [
            c for c in schema.names if c.lower() == node.name.lower()
        ]
        col = schema[matches[0]] if len(matches) == 1 else None
        if not isinstance(col, CategoricalColumn):
            continue
        for s in sides:
            if is_literal(s) and s.find(exp.Null) is None:
                check_declared(literal_value(s, col), col)


def empty_box(schema: Schema) -> Box:
    name = schema.names[0]
    return Box({name: empty_set(schema[name])})


def simple_comparison(node: exp.Expr) -> bool:
    left, right = node.this, node.expression
    return (is_column(left) and is_literal(right)) or (is_column(right) and is_literal(left))


def bounding_union(a: Box, b: Box) -> Box:
    """The smallest box containing a ∪ b: per column, the union of both sides' sets (unconstrained if either is)."""
    if a.is_empty():
        return b
    if b.is_empty():
        return a
    out: dict[str, ValueSet] = {}
    for c in set(a.constraints) & set(b.constraints):
        u = a.constraints[c].union(b.constraints[c])
        if not u.is_full():
            out[c] = u
    return Box(out)


def union_box(a: Box, b: Box) -> Box | None:
    """a ∪ b when it is a box (same single column, or one side empty / everything); None otherwise."""
    if a.is_empty():
        return b
    if b.is_empty():
        return a
    if not a.constraints or not b.constraints:
        return Box.everything()
    ka, kb = set(a.constraints), set(b.constraints)
    if len(ka) == 1 and ka == kb:
        (c,) = ka
        return Box({c: a.constraints[c].union(b.constraints[c])})
    return None


def complement_box(box: Box, schema: Schema) -> Box | None:
    """The complement of a box when it is a box (at most one constrained column); None otherwise."""
    if box.is_empty():
        return Box.everything()
    if not box.constraints:
        return empty_box(schema)
    if len(box.constraints) == 1:
        ((c, s),) = box.constraints.items()
        return Box({c: s.complement()})
    return None


def comparison_box(node: exp.Expr, op: str, schema: Schema) -> tuple[Box, frozenset[str]]:
    left, right = node.this, node.expression
    for side in (left, right):
        if isinstance(side, exp.Func):
            raise UnsupportedQueryError(f"function {side.sql()!r} is not supported in WHERE")
    if is_column(right) and not is_column(left):
        left, right, op = right, left, _FLIP[op]
    if not is_column(left):
        raise UnsupportedQueryError(f"{node.sql()!r}: one side of a comparison must be a column")
    name, col = column_of(left, schema, op)
    value = literal_value(right, col)
    if op not in ("=", "!=") and isinstance(col, CategoricalColumn) and not col.is_numeric_valued:
        raise UnsupportedQueryError(
            f"ordering comparison {op!r} on categorical column {name!r} with string values is not supported",
            hint="use = or IN (...) on categorical columns",
        )
    kind: type = type(value)
    return Box({name: comparison_set(col, op, kind, value)}), frozenset([name])
