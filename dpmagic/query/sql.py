"""SQL subset → :class:`~dpmagic.query.model.Query`, via sqlglot.

Supported (docs/sql.md lists every construct with its privacy cost)::

    SELECT [TOP n] item [, item ...] FROM <table> [WHERE ...] [GROUP BY key, ...]
           [HAVING ...] [ORDER BY ... [ASC|DESC]] [LIMIT n]

* base aggregates (noisy releases): ``COUNT(*)``/``COUNT(col)``, ``COUNT(DISTINCT col)``, ``SUM``, ``AVG``,
  ``VAR``/``VARIANCE``/``VAR_SAMP``/``VAR_POP``, ``STDDEV``/``STD``/``STDEV``/``STDDEV_POP``, ``MEDIAN``,
  ``PERCENTILE_CONT(p) WITHIN GROUP (ORDER BY col)``, ``QUANTILE(col, p)``; the column argument may be
  clamped by the analyst (``CLAMP(col, lo, hi)``, ``LEAST(GREATEST(col, lo), hi)``);
* SELECT items: group keys, aggregates, and any arithmetic / CAST / scalar function / CASE / constant over
  them (post-processing of released values), with aliases;
* GROUP BY: categorical columns, integer columns (one cell per declared value, zero-filled, at most
  :data:`MAX_CELLS` cells), and single-column expressions that bin the declared domain (``FLOOR(age / 10) * 10``,
  ``WIDTH_BUCKET``, ``CASE WHEN … END``, ``CAST``), or a SELECT alias of one;
* WHERE: predicates that reduce to a box per column (including CASE/CAST/LIKE/IS NULL/booleans on one column,
  evaluated on the declared domain), AND, OR, NOT; OR across columns is evaluated exactly on the rows and
  charged over the smallest box covering it;
* HAVING, ORDER BY, LIMIT / TOP n: post-processing of the released, noisy values (free).

Column names that contain ``-`` (``marital-status``) may be written unquoted or in double quotes.

Layout: this module parses the statement (once, with sqlglot) and translates its clauses and SELECT list;
:mod:`.where` turns WHERE into boxes, :mod:`.groups` the GROUP BY keys into declared cells, :mod:`.aggregates`
the aggregate calls, :mod:`.domain` columns and literals into value sets on the declared domain (this module,
≈ 450 lines, keeps the clause checks and the SELECT list together: they share the aggregate collector).  The
statement's canonical text (:attr:`Query.canonical`) is regenerated from the tree only when first asked for.
Anything else raises a :class:`~dpmagic.errors.QueryError` subclass that names the construct; parsing
never touches data or budget.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Sequence

import numpy as np
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from dpmagic.domain.schema import NumericColumn, Schema
from dpmagic.domain.sets import Box
from dpmagic.errors import QueryError, UnsupportedQueryError
from dpmagic.query.aggregates import AGG_CLASSES, base_aggregate, is_aggregate
from dpmagic.query.domain import MAX_ENUMERATION, fix_dashed_columns, resolve_column
from dpmagic.query.evaluate import EvalError, evaluate
from dpmagic.query.flatten import flatten_table_subqueries, fold_common_filter
from dpmagic.query.groups import MAX_CELLS, group_by_keys, norm_sql
from dpmagic.query.joins import rewrite_public_joins
from dpmagic.query.linear import distribute_linear, linear_range
from dpmagic.query.model import Aggregate, GroupKey, Output, Query
from dpmagic.query.rowexpr import RowExpr, box_bounds, row_expr
from dpmagic.query.syntax import syntax_error
from dpmagic.query.where import where_clause

#: a column name written without quotes in a derived column's name
_PLAIN = re.compile(r"[a-z_][a-z0-9_]*")

__all__ = ["parse_query", "split_statements", "canonical_sql", "MAX_CELLS", "MAX_ENUMERATION"]


# Constructs refused with their name in the message (checked anywhere in the tree).
_REFUSED: list[tuple[type[exp.Expr], str]] = [
    (exp.Join, "JOIN (dpmagic answers questions about one bound table; joins would change the privacy unit)"),
    (exp.Subquery, "a subquery (each query is one aggregate over the bound table)"),
    (exp.Union, "UNION (ask one query per part)"),
    (exp.Intersect, "INTERSECT"),
    (exp.Except, "EXCEPT"),
    (exp.Offset, "OFFSET"),
    (exp.Window, "a window function"),
    (exp.With, "WITH (common table expressions)"),
]
_REFUSED_KINDS = tuple(kind for kind, _ in _REFUSED)


_KINDS: dict[type, str | None] = {}


def _node_kind(t: type) -> str | None:
    """What the walk of :func:`parse_query` does with a node of type ``t``: ``"sub"`` (a dashed-name
    candidate), ``"select"``, the label of a refused construct, or None; memoised per type (the walk visits
    every node of every statement)."""
    try:
        return _KINDS[t]
    except KeyError:
        pass
    kind: str | None = None
    if issubclass(t, exp.Sub):
        kind = "sub"
    elif issubclass(t, _REFUSED_KINDS):
        kind = next(lab for k, lab in _REFUSED if issubclass(t, k))
    elif issubclass(t, exp.Select):
        kind = "select"
    _KINDS[t] = kind
    return kind


def _parse_statements(text: str) -> list[exp.Expr]:
    """Parse with the default dialect; T-SQL (``SELECT TOP n``) as a fallback."""
    try:
        return [s for s in sqlglot.parse(text) if s is not None and not isinstance(s, exp.Semicolon)]
    except (ParseError, TokenError) as exc:
        first = exc
    try:
        return [s for s in sqlglot.parse(text, read="tsql") if s is not None and not isinstance(s, exp.Semicolon)]
    except (ParseError, TokenError):
        pass
    raise syntax_error(text, first) from None


def split_statements(text: str) -> list[str]:
    """Split a ``.sql`` text into statements on ``;`` (comments and blank statements dropped)."""
    return [e.sql() for e in _parse_statements(text)]


def canonical_sql(text: str) -> str:
    """The statement re-generated by sqlglot: keyword case and whitespace normalised (cache key)."""
    statements = _parse_statements(text)
    if len(statements) != 1:
        raise QueryError("expected one SQL statement")
    return statements[0].sql()


def parse_query(text: str, schema: Schema, *, tables: Sequence[str] | None = None) -> Query:
    """Parse one SELECT statement against ``schema`` into a :class:`Query`.

    ``tables``: the names the bound table may be called by (a session passes the schema's ``table`` and the
    notebook variable's name); a schema-qualified form of any of them (``PUMS.PUMS``) is accepted too.  None
    accepts any single table name (schema-only tools such as ``dpmagic overlap``).  Raises :class:`QueryError` (or a
    subclass) with one message that names the problem.  How a part that could be misread was read (``educ =
    '8'`` read as the number 8) is warned (:class:`~dpmagic.query.regions.QueryNoteWarning`) and kept in
    :attr:`Query.notes`, which the answer shows.
    """
    from dpmagic.query.regions import collecting_notes

    with collecting_notes() as notes:  # per thread / task: a server's concurrent parses keep their own
        q = _parse_query(text, schema, tables=tables)
    if notes:
        q = dataclasses.replace(q, notes=tuple(dict.fromkeys(notes)))
    return q


def _parse_query(text: str, schema: Schema, *, tables: Sequence[str] | None) -> Query:
    if not isinstance(text, str) or not text.strip():
        raise QueryError("the query is empty: write a SELECT statement")
    statements = _parse_statements(text)
    if not statements:
        raise QueryError("the query is empty: write a SELECT statement")
    if len(statements) > 1:
        raise UnsupportedQueryError(f"one statement per query, got {len(statements)} (separated by ';')")
    tree = statements[0]
    if not isinstance(tree, exp.Select):
        if isinstance(tree, (exp.Column, exp.Identifier, exp.Literal, exp.Alias)):
            raise QueryError(f"cannot parse the SQL: expected a SELECT statement, got {tree.sql()!r}")
        if isinstance(tree, (exp.Union, exp.Intersect, exp.Except)):
            raise UnsupportedQueryError(
                f"{tree.key.upper()} is not supported in dpmagic's SQL subset: ask one query per part"
            )
        raise UnsupportedQueryError(f"only SELECT statements are supported, not {tree.key.upper()}")
    tree, _ = rewrite_public_joins(tree, schema, tables)  # a JOIN with a public lookup: the single-table query
    tree = flatten_table_subqueries(tree, schema)  # a CTE or FROM subquery that only shapes the bound table
    tree = fold_common_filter(tree)  # every aggregate under one FILTER (WHERE c): that condition ANDed to WHERE
    subs: list[exp.Sub] = []  # candidates for dashed column names, collected in the same walk
    for node in tree.walk():
        kind = _node_kind(type(node))
        if kind is None:
            continue
        if kind == "sub":
            assert isinstance(node, exp.Sub)
            subs.append(node)
        elif kind != "select":
            label = kind
            raise UnsupportedQueryError(
                f"{label.split(' (')[0]} is not supported in dpmagic's SQL subset"
                + (f" ({label.split(' (', 1)[1]}" if " (" in label else "")
            )
        elif node is not tree:
            raise UnsupportedQueryError("a subquery is not supported in dpmagic's SQL subset")
    if tree.args.get("distinct") is not None:
        raise UnsupportedQueryError(
            "SELECT DISTINCT is not supported: it lists row values, which is a row-level release",
            hint="use GROUP BY col with COUNT(*) instead (all declared values are listed, with noisy counts)",
        )
    _check_no_unknown_clauses(tree)
    _check_rand_only_in_select(tree)
    fix_dashed_columns(subs, schema)
    # SUM(a + b) = SUM(a) + SUM(b), AVG(2 * a + 1) = (2 * SUM(a) + COUNT(*)) / COUNT(*) (after the dashed names)
    tree = distribute_linear(tree)

    table = _table_name(tree, schema, tables)
    where_node = tree.args.get("where")
    if where_node is not None:  # before the SELECT list: a row expression's range is taken over the WHERE box
        where, exact = where_clause(where_node.this, schema)
    else:
        where, exact = Box.everything(), None
    ctx = _Context(schema, where)
    aliases = _select_aliases(tree)
    groups, group_exprs = group_by_keys(tree, schema, aliases)
    ctx.groups = groups
    ctx.group_exprs = group_exprs
    outputs, simple = _select_list(tree, ctx)
    having = None
    if tree.args.get("having") is not None:
        having = ctx.post_expr(tree.args["having"].this, "HAVING", outputs).sql()
    order_by: list[tuple[str, bool]] = []
    if tree.args.get("order") is not None:
        for o in tree.args["order"].expressions:
            e = o.this if isinstance(o, exp.Ordered) else o
            desc = bool(o.args.get("desc")) if isinstance(o, exp.Ordered) else False
            order_by.append((ctx.post_expr(e, "ORDER BY", outputs).sql(), desc))
    limit = _limit(tree)
    if not ctx.aggregates and not groups:
        raise UnsupportedQueryError(
            "the SELECT list needs at least one aggregate (COUNT(*), SUM(col), AVG(col), ...): "
            "row-level SELECTs are not supported, dpmagic releases noisy aggregates only",
            hint="a SELECT of GROUP BY keys alone (SELECT educ FROM t GROUP BY educ) lists the declared keys for free",
        )
    if not ctx.aggregates and having is not None:
        raise UnsupportedQueryError(
            "HAVING needs an aggregate: a SELECT of GROUP BY keys alone lists public declared keys",
            hint="filter the keys in WHERE instead",
        )
    post = not simple or having is not None or bool(order_by) or limit is not None or ctx.hidden
    return Query(
        text=text,
        table=table,
        aggregates=tuple(ctx.aggregates),
        group_by=tuple(g.name for g in groups),
        where=where,
        groups=tuple(groups),
        filter=exact,
        outputs=tuple(outputs) if post else None,
        having=having,
        order_by=tuple(order_by),
        limit=limit,
        hidden=tuple(ctx.hidden),
        derived=tuple(ctx.derived.items()),
        _tree=tree,
    )


# --------------------------------------------------------------------------------------------------
# clauses


def _check_rand_only_in_select(tree: exp.Select) -> None:
    """RAND() is a public random number beside the released values (SELECT list, HAVING, ORDER BY); elsewhere it
    would select or weigh rows at random (a sample, whose privacy this subset does not model): refused."""
    for r in tree.find_all(exp.Rand):
        if r.this is not None:
            raise UnsupportedQueryError(
                "RAND(seed) is not supported", hint="write RAND() (a fresh public random number per output row)"
            )
    parts: list[tuple[str, exp.Expr | None]] = [("WHERE", tree.args.get("where")), ("GROUP BY", tree.args.get("group"))]
    parts += [("an aggregate", a) for e in tree.expressions for a in e.find_all(exp.AggFunc)]
    for where, node in parts:
        if node is not None and node.find(exp.Rand) is not None:
            raise UnsupportedQueryError(
                f"RAND() in {where} is not supported: it would pick or weigh rows at random",
                hint="RAND() is allowed in the SELECT list, HAVING and ORDER BY: a public random number beside the answer",
            )


def _check_no_unknown_clauses(tree: exp.Select) -> None:
    allowed = {"expressions", "from", "from_", "where", "group", "kind", "hint", "having", "order", "limit", "distinct"}
    for key, value in tree.args.items():
        if value in (None, [], False) or key in allowed:
            continue
        raise UnsupportedQueryError(f"the {key.upper()} clause is not supported in dpmagic's SQL subset")


def _table_name(tree: exp.Select, schema: Schema, tables: Sequence[str] | None) -> str:
    source = tree.args.get("from") or tree.args.get("from_")
    if source is None:
        raise UnsupportedQueryError("the query needs a FROM clause naming the table")
    t = source.this
    if not isinstance(t, exp.Table) or not isinstance(t.this, exp.Identifier):
        raise UnsupportedQueryError("FROM must name the bound table (no subqueries or table functions)")
    if t.args.get("catalog"):
        raise UnsupportedQueryError(f"FROM {t.sql()}: name the bound table as table or schema.table")
    allowed = {n.lower() for n in (tables or []) if n}  # None: any one table name (schema-only tools)
    name, db = t.name, t.args.get("db")
    parts = [name] + ([db.name] if db is not None else [])
    if allowed and not all(p.lower() in allowed for p in parts):
        raise UnsupportedQueryError(
            f"FROM {t.sql()}: the bound table is {', '.join(sorted(allowed))!s}; other tables are not available",
            hint=f"write FROM {sorted(allowed)[0]}",
        )
    return ".".join(reversed(parts))


def _limit(tree: exp.Select) -> int | None:
    lim = tree.args.get("limit")
    if lim is None:
        return None
    node = lim.expression if lim.expression is not None else lim.this
    if isinstance(node, exp.Paren):
        node = node.this
    if not (isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit()):
        raise UnsupportedQueryError(
            f"LIMIT / TOP takes a whole number, not {node.sql() if node is not None else '?'!r}"
        )
    return int(node.this)


def _select_aliases(tree: exp.Select) -> dict[str, exp.Expr]:
    return {item.alias.lower(): item.this for item in tree.expressions if isinstance(item, exp.Alias)}


# -- aggregates ----------------------------------------------------------------------------------------


class _Context:
    """Collects the base aggregates of a query (deduplicated) while its expressions are rewritten."""

    def __init__(self, schema: Schema, where: Box | None = None) -> None:
        self.schema = schema
        self.where = Box.everything() if where is None else where
        self.derived: dict[str, RowExpr] = {}
        self.aggregates: list[Aggregate] = []
        self.hidden: list[str] = []
        self.groups: list[GroupKey] = []
        self.group_exprs: list[str] = []

    def add(self, agg: Aggregate, alias: str | None, *, hidden: bool) -> str:
        """Register a base aggregate; returns the name it is released under."""
        for i, a in enumerate(self.aggregates):
            if a.identity() == agg.identity():
                if alias is not None and a.alias.startswith("__") and not hidden:
                    self.aggregates[i] = Aggregate(a.func, a.column, alias, a.clamp, a.param)
                    if a.alias in self.hidden:
                        self.hidden.remove(a.alias)
                    return alias
                return a.alias
        name = alias if alias is not None else f"__a{len(self.aggregates)}"
        self.aggregates.append(Aggregate(agg.func, agg.column, name, agg.clamp, agg.param))
        if name.startswith("__"):
            self.hidden.append(name)
        return name

    def derive(self, arg: exp.Expr) -> str:
        """A row expression inside SUM / AVG / VAR / STDDEV (:mod:`dpmagic.query.derived`): validated, its range
        enclosed over the WHERE box (:func:`~dpmagic.query.rowexpr.row_expr`), registered as a derived column
        named by its SQL (column names resolved); the name is returned."""
        node = arg.copy()
        for c in list(node.find_all(exp.Column)):
            name = resolve_column(c, self.schema)
            c.replace(exp.column(exp.to_identifier(name, quoted=not _PLAIN.fullmatch(name))))
        for c in node.find_all(exp.Column):
            col = self.schema[c.name]
            if isinstance(col, NumericColumn) and col.temporal is not None:
                raise UnsupportedQueryError(
                    f"the row expression {arg.sql()!r} reads the {col.temporal} column {c.name!r}: dpmagic releases "
                    "counts over dates, not sums of them",
                    hint=f"count by period (DATE_TRUNC('month', {c.name})) or filter on it",
                )
        box = Query(text="", table=None, aggregates=(), group_by=(), where=self.where)
        r = row_expr(node, self.schema, box_bounds(box, self.schema))
        name = r.key
        while name in self.schema.columns:  # never shadow a declared column
            name = f"({name})"
        self.derived.setdefault(name, r)
        return name

    def key_for(self, node: exp.Expr) -> str | None:
        """The group key an expression (a column or the GROUP BY expression itself) refers to."""
        if not self.groups:
            return None
        sql = norm_sql(node)
        for g, gsql in zip(self.groups, self.group_exprs, strict=True):
            if sql == gsql:
                return g.name
        if isinstance(node, exp.Column):
            for g in self.groups:
                if g.name.lower() == node.name.lower():
                    return g.name
        return None

    def rewrite(self, node: exp.Expr, where: str, outputs: list[Output] | None = None) -> exp.Expr:
        """Replace aggregates and group keys by references to released columns; refuse row-level columns."""
        node = node.copy()
        key = self.key_for(node)
        if key is not None:
            return _ref(key)
        if is_aggregate(node):
            agg = base_aggregate(node, self.schema, self.derive)
            return _ref(self.add(agg, None, hidden=True))

        def visit(e: exp.Expr) -> exp.Expr:
            k = self.key_for(e)
            if k is not None:
                return _ref(k)
            if is_aggregate(e):
                return _ref(self.add(base_aggregate(e, self.schema, self.derive), None, hidden=True))
            if isinstance(e, exp.Column):
                if outputs is not None:
                    for o in outputs:
                        if o.name.lower() == e.name.lower():
                            return exp.Paren(this=sqlglot.parse_one(o.expr))
                name = resolve_column(e, self.schema)
                raise UnsupportedQueryError(
                    f"column {name!r} is used in {where} without an aggregate and is not in GROUP BY",
                    hint="aggregate it (COUNT, SUM, AVG ...) or add it to GROUP BY",
                )
            return e

        return node.transform(visit, copy=False)

    def post_expr(self, node: exp.Expr, where: str, outputs: list[Output]) -> exp.Expr:
        # an output name (alias) or position in ORDER BY
        if isinstance(node, exp.Column) and not node.table:
            for o in outputs:
                if o.name.lower() == node.name.lower():
                    return sqlglot.parse_one(o.expr)
        if where == "ORDER BY" and isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
            i = int(node.this)
            if not 1 <= i <= len(outputs):
                raise UnsupportedQueryError(f"ORDER BY {i}: the SELECT list has {len(outputs)} items")
            return sqlglot.parse_one(outputs[i - 1].expr)
        e = self.rewrite(node, where, outputs)
        _check_evaluable(e, self.groups, node, where)
        return e


def _ref(name: str) -> exp.Column:
    return exp.column(exp.to_identifier(name, quoted=True))


def _ref_sql(name: str) -> str:
    """``_ref(name).sql()`` without regenerating SQL: a double-quoted identifier, quotes doubled."""
    return '"' + name.replace('"', '""') + '"'


def _check_evaluable(e: exp.Expr, groups: Sequence[GroupKey], shown: exp.Expr, where: str) -> None:
    """Refuse now (before any budget) what post-processing could not evaluate on a released answer.

    ``e`` (the rewritten ``shown``) is evaluated as :func:`dpmagic.query.outputs.finish` will evaluate it, on a
    stand-in of the released frame built from public information only (every declared label of each group key;
    noisy values, NaN and ±inf for each aggregate: :func:`~dpmagic.query.outputs.stand_in_env`), a HAVING
    condition taken as a truth value and an ORDER BY key sorted.  Any failure — not only the evaluator's own
    errors — refuses the query with one error naming ``shown``: nothing is charged, nothing is read.
    """
    from dpmagic.query.evaluate import _truth
    from dpmagic.query.outputs import order_rows, stand_in_env

    env, n = stand_in_env(sorted({c.name for c in e.find_all(exp.Column)}), groups)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            value = evaluate(e, env, n, lambda c: c.name)
            if where == "HAVING":
                _truth(value)
            elif where == "ORDER BY":
                order_rows([value], [False], np.arange(n))
    except EvalError as exc:
        raise UnsupportedQueryError(str(exc)) from None
    except QueryError as exc:
        raise type(exc)(f"{where}: {shown.sql()}: {exc}", hint=exc.hint) from None
    except Exception as exc:
        raise UnsupportedQueryError(
            f"{where}: {shown.sql()} cannot be computed from the released values ({type(exc).__name__}: {exc})",
            hint="check the types and arguments of the functions applied to aggregates and group keys",
        ) from None


# -- GROUP BY ------------------------------------------------------------------------------------------


# -- SELECT list ---------------------------------------------------------------------------------------


def _select_list(tree: exp.Select, ctx: _Context) -> tuple[list[Output], bool]:
    """The answer's columns; ``simple`` when the release needs no post-processing (keys, then bare aggregates)."""
    outputs: list[Output] = []
    simple = True
    seen_agg = False
    key_pos = 0
    for item in tree.expressions:
        alias = item.alias if isinstance(item, exp.Alias) else None
        node = item.this if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.Star):
            raise UnsupportedQueryError(
                "SELECT * is a row-level query, which is not supported: select aggregates such as COUNT(*)"
            )
        key = ctx.key_for(node)
        if key is not None:
            name = alias or key
            if alias is not None and alias != key:
                # an alias on a group key renames the key in the answer
                for i, g in enumerate(ctx.groups):
                    if g.name == key:
                        ctx.groups[i] = GroupKey(alias, g.column, g.labels, g.sets)
                        key = alias
                name = alias
            if seen_agg or key_pos >= len(ctx.groups) or ctx.groups[key_pos].name != key:
                simple = False
            key_pos += 1
            outputs.append(Output(name, _ref_sql(key), None))
            continue
        if is_aggregate(node):
            agg = base_aggregate(node, ctx.schema, ctx.derive)
            name = alias or (node.sql() if agg.column in ctx.derived else _default_name(agg))
            released = ctx.add(agg, name, hidden=False)
            if released != name:
                simple = False
            seen_agg = True
            outputs.append(Output(name, _ref_sql(released), released))
            continue
        if isinstance(node, exp.Column):
            name = resolve_column(node, ctx.schema)
            raise UnsupportedQueryError(
                f"column {name!r} is selected without an aggregate and is not in GROUP BY"
                + (
                    ""
                    if ctx.groups or tree.find(*AGG_CLASSES)
                    else ": row-level SELECTs are not supported, dpmagic releases noisy aggregates only"
                ),
                hint="aggregate it (COUNT, SUM, AVG ...) or add it to GROUP BY",
            )
        simple = False
        e = ctx.rewrite(node, "the SELECT list")
        _check_evaluable(e, ctx.groups, node, "the SELECT list")
        source = None
        inner = e
        while isinstance(inner, (exp.Paren, exp.Cast)) and not (
            isinstance(inner, exp.Cast) and inner.to.this in (exp.DataType.Type.VARCHAR, exp.DataType.Type.TEXT)
        ):
            inner = inner.this
        if isinstance(inner, exp.Column) and any(a.alias == inner.name for a in ctx.aggregates):
            source = inner.name
        bounds = None
        terms = node.meta.get("linear_avg")
        if terms is not None:  # AVG of a linear row expression: its value lies in the expression's range
            bounds = linear_range(terms, lambda atom: _atom_bounds(atom, ctx.schema))
        outputs.append(Output(alias or node.sql(), e.sql(), source, bounds))
    names = [o.name.lower() for o in outputs]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise UnsupportedQueryError(f"two outputs are named {sorted(dup)[0]!r}: give one an alias with AS")
    if ctx.groups and key_pos == 0 and simple:
        simple = True  # keys not selected: the legacy answer lists them first anyway
    elif ctx.groups and key_pos != len(ctx.groups):
        simple = False
    return outputs, simple


def _atom_bounds(atom: exp.Expr, schema: Schema) -> tuple[float, float]:
    """The public bounds of a linear term's atom (a column or a clamp of one): its SUM's declared or clamped
    bounds (as :func:`dpmagic.aggregates.common.effective_bounds` computes them)."""
    from dpmagic.domain.columns import NumericColumn, clamp_bounds

    agg = base_aggregate(exp.Sum(this=atom.copy()), schema)
    col = schema[str(agg.column)]
    assert isinstance(col, NumericColumn)
    lo, hi = clamp_bounds(col, agg.clamp)
    return float(lo), float(hi)


def _default_name(agg: Aggregate) -> str:
    base = {"count_distinct": "count_distinct", "quantile": "quantile"}.get(agg.func, agg.func)
    if agg.func == "count":
        return "count"
    name = f"{base}_{agg.column}"
    if agg.func == "quantile" and agg.param is not None:
        name = {0.5: "median_", 0.0: "min_", 1.0: "max_"}.get(agg.param, f"quantile_{agg.param:g}_") + str(agg.column)
    if agg.clamp is not None:
        name += f"_{agg.clamp[0]:g}_{agg.clamp[1]:g}"
    return name


# --------------------------------------------------------------------------------------------------
# columns and literals


# --------------------------------------------------------------------------------------------------
# WHERE → Box (coverage) and, when no box is exact, an exact filter
