"""Subqueries and CTEs that only shape the table, flattened into the one aggregate they are.

``SELECT COUNT(*) FROM (SELECT * FROM pums)``, ``WITH adults AS (SELECT * FROM t WHERE age >= 18) SELECT ...
FROM adults WHERE sex = 1`` and derived columns in the inner query (``SELECT SUM(a) FROM (SELECT age AS a FROM
t WHERE educ > 3)``) select and filter rows of the bound table: the outer aggregate over them is the same
aggregate over the bound table with the inner filters joined by AND and the inner expressions substituted — the
same coverage and the same sensitivity, so it is answered as that one query.  The rewriting is sqlglot's own
optimizer (``qualify``, ``eliminate_subqueries``, ``merge_subqueries``), which merges a derived table only when
that preserves the result; whatever it leaves (an inner GROUP BY, aggregate, LIMIT, DISTINCT, UNION, JOIN, a
scalar subquery in WHERE) is refused with the reason.  Reads nothing: text and the schema's column names only.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.errors import OptimizeError, SqlglotError

from dpmagic.domain.schema import CategoricalColumn, Schema
from dpmagic.errors import UnsupportedQueryError

__all__ = ["flatten_table_subqueries", "shapes_the_table"]


def _arg(node: exp.Expr, name: str) -> exp.Expr | None:
    """``node``'s ``name`` argument, under sqlglot's older key (``from``) or newer one (``from_``)."""
    value = node.args.get(name)
    return value if value is not None else node.args.get(name + "_")


def shapes_the_table(tree: exp.Select) -> bool:
    """Whether ``tree`` reads its rows from a CTE or a subquery in FROM (the cases :func:`flatten_table_subqueries`
    rewrites); O(size of the FROM clause)."""
    if _arg(tree, "with") is not None:
        return True
    source = _arg(tree, "from")
    return source is not None and isinstance(source.this, exp.Subquery)


def _sql_type(schema: Schema, name: str) -> str:
    col = schema[name]
    if isinstance(col, CategoricalColumn):
        return "VARCHAR" if any(isinstance(v, str) for v in col.values) else "BIGINT"
    return "BIGINT" if col.is_int else "DOUBLE"


def flatten_table_subqueries(tree: exp.Select, schema: Schema) -> exp.Select:
    """``tree`` with its table-shaping CTEs and FROM subqueries merged into one SELECT over a base table.

    The outer SELECT list keeps its names (an item the analyst did not alias stays unaliased); columns lose the
    table qualifiers the rewriting adds.  Raises :class:`UnsupportedQueryError` naming what cannot be merged.
    """
    if not shapes_the_table(tree):
        return tree
    # sqlglot's optimizer is imported only for nested queries: the CLI parses thousands of flat statements
    from sqlglot.optimizer.eliminate_subqueries import eliminate_subqueries
    from sqlglot.optimizer.merge_subqueries import merge_subqueries
    from sqlglot.optimizer.qualify import qualify

    for derived in tree.find_all(exp.TableAlias):
        if derived.columns:  # (SELECT ...) AS s(a, b): positional names over the inner SELECT list's order
            raise UnsupportedQueryError(
                f"a column alias list on a subquery or CTE ({derived.sql()}) is not supported",
                hint="name the columns inside the inner SELECT instead (SELECT income AS a, ...)",
            )
    aliased = [isinstance(item, exp.Alias) for item in tree.expressions]
    bases = {t.name for t in tree.find_all(exp.Table)} - {cte.alias for cte in tree.find_all(exp.CTE)}
    columns = {name: _sql_type(schema, name) for name in schema.columns}
    try:
        qualified = qualify(
            tree.copy(),
            schema={base: columns for base in bases},
            quote_identifiers=False,
            identify=False,
            validate_qualify_columns=True,
        )
        merged = merge_subqueries(eliminate_subqueries(qualified))
    except (OptimizeError, SqlglotError) as e:
        raise UnsupportedQueryError(
            f"cannot flatten this subquery or WITH clause into one query over the bound table ({e})",
            hint="select and filter the bound table's columns in the inner query, or write the one query directly",
        ) from None
    assert isinstance(merged, exp.Select)
    source = _arg(merged, "from")
    if _arg(merged, "with") is not None or source is None or not isinstance(source.this, exp.Table):
        raise UnsupportedQueryError(
            "a subquery or WITH clause that groups, aggregates, limits, de-duplicates or combines rows is not a "
            "shaping of the bound table: dpmagic answers one aggregate over the table itself",
            hint="move the inner filters into the outer WHERE clause; an aggregate of aggregates needs two queries",
        )
    source.this.set("alias", None)
    for column in merged.find_all(exp.Column):
        column.set("table", None)
    for i, was_aliased in enumerate(aliased):
        item = merged.expressions[i]
        # the optimizer names every unaliased item (_col_0, ...): drop those names so dpmagic names the output as
        # for the direct query; an inner alias the outer item referred to (SELECT b FROM (... AS b)) is kept
        if not was_aliased and isinstance(item, exp.Alias) and item.alias.startswith("_col_"):
            item.replace(item.this)
    return merged


def _case_as_filter(node: exp.Expr) -> exp.Expr:
    """``SUM(CASE WHEN c THEN e [ELSE 0] END)``, ``AVG(CASE WHEN c THEN e [ELSE NULL] END)`` and ``COUNT(CASE WHEN c THEN
    <non-NULL literal> END)`` as the aggregate with ``FILTER (WHERE c)`` they equal (a row failing c adds 0 to a
    SUM, or is NULL and skipped); anything else unchanged."""
    if not isinstance(node, (exp.Sum, exp.Avg, exp.Count)) or isinstance(node.parent, exp.Filter):
        return node
    case = node.this
    if not isinstance(case, exp.Case) or case.this is not None or len(case.args.get("ifs") or []) != 1:
        return node
    (branch,) = case.args["ifs"]
    cond, then = branch.this, branch.args.get("true")
    default = case.args.get("default")
    if isinstance(default, exp.Null):
        default = None  # ELSE NULL is what a CASE without ELSE gives
    if then is None:
        return node
    zero = isinstance(default, exp.Literal) and not default.is_string and float(default.this) == 0.0
    one = isinstance(then, exp.Literal) and not then.is_string and float(then.this) == 1.0
    if isinstance(node, exp.Sum) and (default is None or zero) and one:
        agg: exp.Expr = exp.Count(this=exp.Star())  # SUM(CASE WHEN c THEN 1 ELSE 0 END): the rows satisfying c
    elif isinstance(node, exp.Sum) and (default is None or zero):
        agg = exp.Sum(this=then.copy())
    elif isinstance(node, exp.Avg) and default is None:
        agg = exp.Avg(this=then.copy())
    elif isinstance(node, exp.Count) and default is None and isinstance(then, exp.Literal):
        agg = exp.Count(this=exp.Star())
    else:
        return node
    return exp.Filter(this=agg, expression=exp.Where(this=cond.copy()))


def fold_common_filter(tree: exp.Select) -> exp.Select:
    """Conditional aggregation with ONE condition, answered as the query it is.

    When every aggregate of the statement carries the same ``FILTER (WHERE c)`` — written so, or as
    ``SUM(CASE WHEN c THEN e ELSE 0 END)`` / ``AVG(CASE WHEN c THEN e END)`` / ``COUNT(CASE WHEN c THEN 1 END)``
    (:func:`_case_as_filter`) — each aggregate is the same aggregate over the rows satisfying WHERE AND c: the
    query is rewritten so (same coverage, same sensitivity, the same release as writing it directly).  GROUP BY
    keys then are those inside the narrowed region (a key c excludes would only show a known zero).  Aggregates
    with different conditions are left as they are (and refused by the parser with its message).  Reads nothing.
    Rewrites ``tree`` in place and returns it (the parser owns its freshly parsed tree: no defensive copy).
    """
    moved = tree.transform(_case_as_filter, copy=False)
    assert isinstance(moved, exp.Select)
    tree = moved
    filters = list(tree.find_all(exp.Filter))
    if not filters:
        return tree
    conds = {f.expression.this.sql() for f in filters if isinstance(f.expression, exp.Where)}
    aggs = [a for a in tree.find_all(exp.AggFunc) if not isinstance(a.parent, exp.Filter)]
    if len(conds) != 1 or aggs or any(not isinstance(f.expression, exp.Where) for f in filters):
        raise UnsupportedQueryError(
            "conditional aggregates are answered when every aggregate of the SELECT has the same condition "
            "(FILTER (WHERE c), or SUM/AVG/COUNT of CASE WHEN c THEN … END); these have "
            + ("different conditions" if len(conds) > 1 else "a condition on some aggregates only"),
            hint="ask one query per condition, or move a common condition into WHERE",
        )
    cond = filters[0].expression.this.copy()
    for f in filters:
        f.replace(f.this)
    where = tree.args.get("where")
    tree.set(
        "where", exp.Where(this=cond if where is None else exp.and_(exp.Paren(this=where.this), exp.Paren(this=cond)))
    )
    return tree
