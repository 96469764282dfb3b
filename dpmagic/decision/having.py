"""From a parsed ``GROUP BY … HAVING`` query to a ProBE condition tree (:mod:`dpmagic.decision.tree`).

The SQL parser (:func:`dpmagic.query.sql.parse_query`) keeps HAVING as a post-processing expression over the
aliases of the query's aggregates (``'("count" > 100 AND "__a1" > 40) OR "__a2" < 5000'``, with the hidden
aggregates ``__a1 = AVG(age)``, ``__a2 = SUM(hours)``).  :func:`decision_tree` reads that expression back with
sqlglot and accepts exactly the language of the decision queries of Lahjouji et al. (ProBE,
arXiv:2406.15655): AND / OR (and parentheses) over atoms ``aggregate > c`` or ``aggregate < c`` (either side;
``c > COUNT(*)`` is ``COUNT(*) < c``) with aggregate COUNT(*), SUM(col) or AVG(col) of a declared int column
and c a numeric literal.  Anything else is refused with one :class:`~dpmagic.errors.QueryError` naming the
construct.  Cost: linear in the size of the HAVING expression.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp

from dpmagic.decision.tree import And, Condition, Node, Op, Or
from dpmagic.domain.columns import NumericColumn
from dpmagic.errors import QueryError

if TYPE_CHECKING:
    from dpmagic.domain.schema import Schema
    from dpmagic.query.model import Aggregate, Query

__all__ = ["decision_tree", "group_keys", "public_bounds"]

_HINT = "a decision query is GROUP BY … HAVING with AND/OR of COUNT(*), SUM(col) or AVG(col) compared by > or < with a number"


def _refuse(what: str) -> QueryError:
    return QueryError(f"a decision query cannot use {what}", hint=_HINT)


def _number(node: exp.Expr) -> float | None:
    if isinstance(node, exp.Paren):
        return _number(node.this)
    if isinstance(node, exp.Neg):
        v = _number(node.this)
        return None if v is None else -v
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            v = float(node.this)
        except ValueError:
            return None
        return v if math.isfinite(v) else None
    return None


def _aggregate(node: exp.Expr, by_alias: dict[str, Aggregate]) -> Aggregate | None:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column) and not node.table:
        return by_alias.get(node.name)
    return None


def _condition(node: exp.Expr, by_alias: dict[str, Aggregate], schema: Schema) -> Condition:
    if isinstance(node, (exp.GTE, exp.LTE)):
        raise _refuse(f"'{node.sql()}' (>= / <=): compare with > or <")
    if isinstance(node, (exp.EQ, exp.NEQ)):
        raise _refuse(f"'{node.sql()}' (= / <>): compare with > or <")
    if not isinstance(node, (exp.GT, exp.LT)):
        raise _refuse(f"'{node.sql()}' in HAVING")
    op: Op = ">" if isinstance(node, exp.GT) else "<"
    left, right = node.this, node.expression
    agg, c = _aggregate(left, by_alias), _number(right)
    if agg is None or c is None:
        agg, c = _aggregate(right, by_alias), _number(left)
        op = "<" if op == ">" else ">"
    if agg is None or c is None:
        raise _refuse(f"'{node.sql()}': each condition compares one aggregate with a number")
    if agg.clamp is not None:
        raise _refuse(f"{agg} (an analyst's clamp) in HAVING")
    if agg.column is not None and agg.column not in schema:
        raise _refuse(f"{agg.func.upper()}({agg.column}) (a row expression) in HAVING")
    if agg.func == "count":
        if agg.column is not None:
            raise _refuse(f"{agg} in HAVING: use COUNT(*)")
        return Condition("count", None, op, c)
    if agg.func != "sum" and agg.func != "avg":
        raise _refuse(f"{agg} in HAVING: use COUNT(*), SUM or AVG")
    col = schema[str(agg.column)]
    if getattr(col, "is_int", False) and agg.func == "avg" and c != math.floor(c):
        raise _refuse(f"'{agg} {op} {c:g}': AVG on an int column needs a whole-number threshold")
    return Condition(agg.func, str(agg.column), op, c)


def _tree(node: exp.Expr, by_alias: dict[str, Aggregate], schema: Schema) -> Node:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, (exp.And, exp.Or)):
        kids = (_tree(node.this, by_alias, schema), _tree(node.expression, by_alias, schema))
        return And(*kids) if isinstance(node, exp.And) else Or(*kids)
    if isinstance(node, exp.Not):
        raise _refuse(f"NOT ('{node.sql()}'): the condition must be a monotone AND/OR tree")
    return _condition(node, by_alias, schema)


def decision_tree(query: Query, schema: Schema) -> Node:
    """The condition tree of ``query``'s HAVING (module docstring); refuses any other construct."""
    if not query.groups:
        raise _refuse("a query without GROUP BY: the answer is a set of groups")
    if query.having is None:
        raise _refuse("a query without HAVING: add the condition the groups must satisfy")
    if query.limit is not None:
        raise _refuse("LIMIT (the answer is the set of all groups reported to satisfy HAVING)")
    try:
        parsed = sqlglot.parse_one(query.having)
    except sqlglot.errors.ParseError:  # pragma: no cover - the parser produced it
        raise _refuse(f"the HAVING expression {query.having!r}") from None
    by_alias = {a.alias: a for a in query.aggregates}
    return _tree(parsed, by_alias, schema)


def public_bounds(schema: Schema, tree: Node) -> tuple[dict[str, tuple[float, float]], frozenset[str]]:
    """Declared [lower, upper] of the columns in ``tree`` and those of int type (public information only)."""
    from dpmagic.decision.tree import conditions_of

    bounds: dict[str, tuple[float, float]] = {}
    ints: set[str] = set()
    for cond in conditions_of(tree):
        if cond.column is None:
            continue
        col = schema[cond.column]
        assert isinstance(col, NumericColumn)  # SUM / AVG of a categorical column is refused when the query is parsed
        bounds[cond.column] = (float(col.lower), float(col.upper))
        if col.is_int:
            ints.add(cond.column)
    return bounds, frozenset(ints)


def group_keys(query: Query) -> list[object]:
    """The public groups: the declared GROUP BY cells inside the WHERE region (a label, or a tuple of labels for
    several keys; :meth:`~dpmagic.query.model.Query.region_keys`, from the query and the schema alone) — a group
    the WHERE clause excludes holds no row, so it is neither read nor reported."""
    keys: list[tuple[object, ...]] = query.region_keys()
    return [k[0] for k in keys] if len(query.groups) == 1 else list(keys)
