"""Scalar subqueries: ``WHERE age > (SELECT AVG(age) FROM t)`` as two releases in sequence.

The inner query (one aggregate, no GROUP BY, over the bound table) is released and charged first, through the
session's one release path, like any query; its *noisy* value is then a public constant of the outer query,
whose coverage is computed with that constant (:meth:`dpmagic.Session.query`).  Nothing here reads data: this
module only finds the subquery and writes the outer statement with a constant in its place.

Supported shape: ``<column> <op> (SELECT <one aggregate expression> FROM <table> [WHERE …])`` (either side;
``op`` one of ``= <> < <= > >=``) as one of the AND-ed conditions of the outer WHERE — never under OR or NOT, so
that the outer's region *without* that condition (:meth:`ScalarSubquery.outer` with None) covers the region of
every possible threshold: what a dry run shows and what is checked before the inner is charged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from dpmagic.errors import UnsupportedQueryError
from dpmagic.query.where import COMPARISONS, conjuncts

__all__ = ["ScalarSubquery", "scalar_subquery", "constant_literal"]


@dataclass(frozen=True)
class ScalarSubquery:
    """A statement with one scalar subquery in its WHERE: the inner SELECT and the outer with a hole."""

    #: the inner statement's SQL (a query of its own)
    inner: str
    #: the outer statement's tree (the comparison with the subquery at ``position`` among WHERE's conjuncts)
    tree: exp.Select
    position: int
    #: the comparison as written (for the answer's note), e.g. ``age > (SELECT AVG(age) FROM pums)``
    shown: str

    def outer(self, value: float | None) -> str:
        """The outer statement with the subquery replaced by the constant ``value``; None: the condition dropped
        (TRUE), the widest region any threshold can give."""
        tree = self.tree.copy()
        where = tree.args["where"]
        parts = conjuncts(where.this)
        cmp = parts[self.position]
        if value is None:
            cmp.replace(exp.true())
        else:
            sub = next(cmp.find_all(exp.Subquery))
            sub.replace(constant_literal(value))
        return str(tree.sql())


def constant_literal(value: float) -> exp.Expr:
    """A released number as a SQL literal that parses back to the same double (``repr``), negatives as ``-x``."""
    if not math.isfinite(value):
        raise ValueError("not a finite number")
    text = repr(float(value)) if not float(value).is_integer() or abs(value) >= 1e16 else str(int(value))
    lit = exp.Literal.number(text.lstrip("-"))
    return exp.Neg(this=lit) if value < 0 else lit


def single_select(sql: str) -> exp.Select | None:
    """The one SELECT statement of ``sql``; None for several statements, another statement, or text sqlglot cannot
    parse (:func:`~dpmagic.query.sql.parse_query` reports those)."""
    try:
        statements = [s for s in sqlglot.parse(sql) if s is not None and not isinstance(s, exp.Semicolon)]
    except (ParseError, TokenError):
        return None
    if len(statements) != 1 or not isinstance(statements[0], exp.Select):
        return None
    return statements[0]


def scalar_subquery(sql: str) -> ScalarSubquery | None:
    """The scalar subquery of ``sql`` when it has one in its WHERE (None otherwise, and for text sqlglot cannot
    parse: :func:`~dpmagic.query.sql.parse_query` reports that).  A subquery elsewhere in WHERE (under OR / NOT,
    inside an expression, IN (SELECT …), several of them) is refused with the reason."""
    if "select" not in sql.lower().split("select", 1)[-1]:
        return None  # one SELECT keyword at most: no subquery (cheap test before parsing)
    select = single_select(sql)
    if select is None:
        return None
    tree = select
    where = tree.args.get("where")
    if where is None or where.find(exp.Subquery) is None:
        return None
    if isinstance(where.this, exp.Subquery) or any(
        isinstance(n, exp.In) and n.args.get("query") is not None for n in where.walk()
    ):
        raise UnsupportedQueryError("IN (SELECT …) is not supported: list the values")
    found = [(i, part) for i, part in enumerate(conjuncts(where.this)) if part.find(exp.Subquery) is not None]
    if len(found) != 1 or len(list(where.find_all(exp.Subquery))) != 1:
        raise UnsupportedQueryError(
            "one scalar subquery per query, as one AND-ed condition of WHERE: col > (SELECT AVG(col) FROM t)",
            hint="ask the inner aggregate as its own query and use its (noisy) value as a constant",
        )
    i, cmp = found[0]
    while isinstance(cmp, exp.Paren):
        cmp = cmp.this
    sub = next(cmp.find_all(exp.Subquery))
    sides = (cmp.this, cmp.expression) if type(cmp) in COMPARISONS else ()
    if not sides or sub not in sides or not any(_is_column(s) for s in sides):
        raise UnsupportedQueryError(
            f"{cmp.sql()}: a scalar subquery must be compared directly with a column (col > (SELECT AVG(col) FROM t)), "
            "as one AND-ed condition of WHERE (not under OR or NOT, not inside an expression)",
            hint="ask the inner aggregate as its own query and use its (noisy) value as a constant",
        )
    inner = sub.this
    if not isinstance(inner, exp.Select):
        raise UnsupportedQueryError(f"{sub.sql()}: the subquery must be one SELECT")
    if inner.args.get("group") is not None or len(inner.expressions) != 1:
        raise UnsupportedQueryError(
            f"{sub.sql()}: a scalar subquery returns one value — one aggregate, no GROUP BY",
            hint="e.g. (SELECT AVG(age) FROM pums WHERE sex = 1)",
        )
    return ScalarSubquery(inner=str(inner.sql()), tree=tree, position=i, shown=cmp.sql())


def _is_column(node: exp.Expr) -> bool:
    while isinstance(node, exp.Paren):
        node = node.this
    return isinstance(node, exp.Column)
