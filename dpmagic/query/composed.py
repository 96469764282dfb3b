"""Conditional aggregates with several conditions in one SELECT, as separate releases composed.

``SELECT sex, COUNT(*) FILTER (WHERE age > 40) AS older, SUM(CASE WHEN married = 1 THEN 1 ELSE 0 END) AS wed,
COUNT(*) AS n FROM pums GROUP BY sex`` asks aggregates over different row sets: each condition (and the
unconditioned aggregates) is one query of its own — the condition ANDed to WHERE, the same GROUP BY — released
through the session's one path (:mod:`dpmagic.session.composed`), the query's cost split over them by sequential
composition, and the answers joined on the GROUP BY keys.  This module only splits the statement (nothing is read).

Supported SELECT items: GROUP BY keys and bare aggregates, each under its own ``FILTER (WHERE c)`` or a one-branch
``CASE WHEN c THEN … END`` form (:func:`dpmagic.query.flatten._case_as_filter`), or none.  Arithmetic across
aggregates of different conditions, HAVING, ORDER BY and LIMIT are refused with the reason (each part is its own
release: combine them on the answer).
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from dpmagic.errors import UnsupportedQueryError
from dpmagic.query.aggregates import is_aggregate
from dpmagic.query.flatten import _case_as_filter

__all__ = ["Part", "Composed", "split_conditions"]


@dataclass(frozen=True)
class Part:
    """One release: the statement of one condition (None: the unconditioned aggregates) and its output names."""

    sql: str
    condition: str | None
    names: tuple[str, ...]


@dataclass(frozen=True)
class Composed:
    parts: tuple[Part, ...]
    #: the output names of the GROUP BY key items, and of every item, in SELECT order
    keys: tuple[str, ...]
    order: tuple[str, ...]
    #: the statement with no condition (the WHERE region: every part's coverage lies inside it)
    widest: str


def _refuse(why: str) -> UnsupportedQueryError:
    return UnsupportedQueryError(
        f"conditional aggregates with different conditions are answered as one release per condition, joined on "
        f"the GROUP BY keys; {why}",
        hint="select each conditional aggregate bare, with an alias, and combine them on the answer (or ask one "
        "query per condition)",
    )


def split_conditions(sql: str) -> Composed | None:
    """The parts of a SELECT whose aggregates carry different conditions; None when it has none or one condition
    for every aggregate (the parser folds that one into WHERE) or is not a single SELECT."""
    low = sql.lower()
    if "filter" not in low and "case" not in low:
        return None
    try:
        statements = [s for s in sqlglot.parse(sql) if s is not None and not isinstance(s, exp.Semicolon)]
    except (ParseError, TokenError):
        return None
    if len(statements) != 1 or not isinstance(statements[0], exp.Select):
        return None
    tree = statements[0].transform(_case_as_filter, copy=True)
    assert isinstance(tree, exp.Select)
    filters = list(tree.find_all(exp.Filter))
    if not filters or any(not isinstance(f.expression, exp.Where) for f in filters):
        return None
    conds = {f.expression.this.sql() for f in filters}
    plain = [a for a in tree.find_all(exp.AggFunc) if not isinstance(a.parent, exp.Filter)]
    if len(conds) == 1 and not plain:
        return None  # one condition for all: the query with it in WHERE (dpmagic.query.flatten)
    for clause, label in (("having", "HAVING"), ("order", "ORDER BY"), ("limit", "LIMIT")):
        if tree.args.get(clause) is not None:
            raise _refuse(f"{label} is not supported across them")
    if tree.args.get("distinct") is not None:
        raise _refuse("SELECT DISTINCT is not supported")
    keys: list[tuple[str, exp.Expr]] = []
    order: list[str] = []
    by_cond: dict[str | None, list[tuple[str, exp.Expr, exp.Expr | None]]] = {}
    for item in tree.expressions:
        alias = item.alias if isinstance(item, exp.Alias) else None
        node = item.this if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.Filter) and isinstance(node.expression, exp.Where) and is_aggregate(node.this):
            name = alias or node.sql()
            cond = node.expression.this
            by_cond.setdefault(cond.sql(), []).append((name, node.this, cond))
        elif is_aggregate(node) and node.find(exp.Filter) is None:
            name = alias or node.sql()
            by_cond.setdefault(None, []).append((name, node, None))
        elif node.find(exp.AggFunc) is None and node.find(exp.Filter) is None and not isinstance(node, exp.Star):
            name = alias or (node.name if isinstance(node, exp.Column) else node.sql())
            keys.append((name, item))
        else:
            raise _refuse(f"{item.sql()} combines or nests them")
        order.append(name)
    if len(set(order)) != len(order):
        raise _refuse("two outputs have the same name: give each an alias with AS")
    where = tree.args.get("where")
    parts = []
    for cond, aggs in by_cond.items():
        part = tree.copy()
        part.set(
            "expressions", [k.copy() for _, k in keys] + [exp.alias_(a.copy(), n, quoted=True) for n, a, _ in aggs]
        )
        c = aggs[0][2]
        if c is not None:
            new = c.copy() if where is None else exp.and_(exp.Paren(this=where.this.copy()), exp.Paren(this=c.copy()))
            part.set("where", exp.Where(this=new))
        parts.append(Part(part.sql(), cond, tuple(n for n, _, _ in aggs)))
    widest = tree.copy()
    widest.set("expressions", [k.copy() for _, k in keys] + [exp.alias_(exp.Count(this=exp.Star()), "__n")])
    return Composed(tuple(parts), tuple(n for n, _ in keys), tuple(order), widest.sql())
