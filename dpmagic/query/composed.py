"""Conditional aggregates with several conditions in one SELECT, as separate releases composed.

``SELECT sex, COUNT(*) FILTER (WHERE age > 40) AS older, SUM(CASE WHEN married = 1 THEN 1 ELSE 0 END) AS wed,
COUNT(*) AS n FROM pums GROUP BY sex`` asks aggregates over different row sets: each condition (and the
unconditioned aggregates) is one query of its own — the condition ANDed to WHERE, the same GROUP BY — released
through the session's one path (:mod:`dpmagic.session.composed`), the query's cost split over them by sequential
composition, and the answers joined on the GROUP BY keys.  This module only splits the statement (nothing is read).

Supported SELECT items: GROUP BY keys and bare aggregates, each under its own ``FILTER (WHERE c)`` or a one-branch
``CASE WHEN c THEN … END`` form (:func:`dpmagic.query.flatten._case_as_filter`), or none.  Arithmetic across
aggregates of different conditions (``COUNT(*) FILTER (WHERE c) * 1.0 / COUNT(*)``) is post-processing of the
joined answer: each aggregate it reads is a hidden output of its part, and its interval comes from theirs by a union
bound and interval arithmetic (:mod:`dpmagic.query.intervals`; COUNT and SUM only).  HAVING, ORDER BY and LIMIT are
refused with the reason (each part is its own release: combine them on the answer).  A SUM of a CASE with several
branches is the sum of one conditional aggregate per branch (:func:`_case_branches`), answered so.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from dpmagic.errors import UnsupportedQueryError
from dpmagic.query.aggregates import is_aggregate
from dpmagic.query.flatten import _case_as_filter
from dpmagic.query.scalar import single_select

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
    #: arithmetic across aggregates (name, SQL over hidden part outputs), evaluated on the joined answer
    computed: tuple[tuple[str, str], ...] = ()
    #: the hidden part outputs those read (``dp__pN``)
    hidden: tuple[str, ...] = ()


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
    select = single_select(sql)
    if select is None:
        return None
    tree = select.transform(_case_branches, copy=True).transform(_case_as_filter, copy=False)
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
    computed: list[tuple[str, str]] = []
    hidden: list[str] = []
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
        elif node.find(exp.AggFunc) is not None and not isinstance(node, exp.Star):
            name = alias or node.sql()
            computed.append((name, _across(node, by_cond, hidden)))
        else:
            raise _refuse(f"{item.sql()} combines or nests them")
        order.append(name)
    if len(set(order)) != len(order) or set(order) & set(hidden):
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
    return Composed(tuple(parts), tuple(n for n, _ in keys), tuple(order), widest.sql(), tuple(computed), tuple(hidden))


def _number(node: exp.Expr | None) -> float | None:
    if isinstance(node, exp.Literal) and not node.is_string:
        return float(node.this)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return -float(node.this.this)
    return None


def _case_branches(node: exp.Expr) -> exp.Expr:
    """``SUM(CASE WHEN c₁ THEN v₁ WHEN c₂ THEN v₂ … ELSE v₀ END)`` (two branches or more) as the sum over its
    branches of the aggregate over the rows each one takes: branch i takes the rows where cᵢ holds and no earlier
    condition does (the CASE's own first-match rule: NULL is not a match, ``NOT (c) IS TRUE``), a number vᵢ
    gives vᵢ · COUNT(*) FILTER (WHERE …), another expression SUM(vᵢ) FILTER (WHERE …); a branch of 0 (or a
    missing ELSE) adds nothing.  The branches' row sets are disjoint, so each is one release of the composition
    (:mod:`dpmagic.session.composed`) and the total's interval comes from theirs (:mod:`dpmagic.query.intervals`).
    Anything else unchanged."""
    if not isinstance(node, exp.Sum) or isinstance(node.parent, exp.Filter):
        return node
    case = node.this
    if not isinstance(case, exp.Case) or case.this is not None or len(case.args.get("ifs") or []) < 2:
        return node
    branches = [(b.this, b.args.get("true")) for b in case.args["ifs"]]
    default = case.args.get("default")
    earlier: list[exp.Expr] = []
    terms: list[exp.Expr] = []
    for cond, value in [*branches, (None, default)]:
        parts: list[exp.Expr] = [exp.Paren(this=cond.copy())] if cond is not None else []
        # "no earlier condition is TRUE": NOT (c) IS TRUE, so that a NULL condition (a LEFT JOIN lookup's column)
        # passes on to the next branch as in CASE, where NOT (c) alone would drop the row (SQL's three-valued NOT)
        parts += [
            exp.Not(this=exp.Is(this=exp.Paren(this=c.copy()), expression=exp.Boolean(this=True))) for c in earlier
        ]
        if cond is not None:
            earlier.append(cond)
        if value is None or isinstance(value, exp.Null):
            continue
        k = _number(value)
        if k == 0.0:
            continue
        where = exp.Where(this=exp.and_(*parts) if len(parts) > 1 else parts[0])
        agg: exp.Expr = exp.Count(this=exp.Star()) if k is not None else exp.Sum(this=value.copy())
        term: exp.Expr = exp.Filter(this=agg, expression=where)
        if k is not None and k != 1.0:
            term = exp.Mul(this=value.copy(), expression=term)
        terms.append(term)
    if not terms:
        return exp.Mul(this=exp.Literal.number(0), expression=exp.Count(this=exp.Star()))
    total = terms[0]
    for t in terms[1:]:
        total = exp.Add(this=total, expression=t)
    return exp.Paren(this=total)


def _across(
    node: exp.Expr, by_cond: dict[str | None, list[tuple[str, exp.Expr, exp.Expr | None]]], hidden: list[str]
) -> str:
    """Arithmetic across conditional aggregates (``COUNT(*) FILTER (WHERE c) * 1.0 / COUNT(*)``): each aggregate
    becomes a hidden output of its condition's part (``dp__pN``), the item the SQL of the expression over them,
    evaluated on the joined answer (:func:`dpmagic.session.composed._join`)."""

    def visit(e: exp.Expr) -> exp.Expr:
        if isinstance(e, exp.Filter) and isinstance(e.expression, exp.Where) and is_aggregate(e.this):
            agg, cond = e.this, e.expression.this
        elif is_aggregate(e) and e.find(exp.Filter) is None:
            agg, cond = e, None
        else:
            return e
        key = None if cond is None else cond.sql()
        for n, a, _ in by_cond.get(key, []):
            if n in hidden and a.sql() == agg.sql():
                return exp.column(exp.to_identifier(n, quoted=True))
        n = f"dp__p{len(hidden)}"
        hidden.append(n)
        by_cond.setdefault(key, []).append((n, agg.copy(), None if cond is None else cond.copy()))
        return exp.column(exp.to_identifier(n, quoted=True))

    out = node.copy().transform(visit, copy=False)
    if out.find(exp.AggFunc) is not None or out.find(exp.Filter) is not None:
        raise _refuse(f"{node.sql()} nests aggregates")
    stray = sorted(c.name for c in out.find_all(exp.Column) if c.name not in hidden)
    if stray:
        raise _refuse(
            f"{node.sql()} reads {stray[0]!r} outside an aggregate (only aggregates combine across conditions)"
        )
    return out.sql()
