"""A JOIN with a public lookup table, rewritten into the single-table query it equals.

``SELECT r.name, COUNT(*) FROM t JOIN regions r ON t.region = r.code WHERE r.zone = 'A' GROUP BY r.name``
joins each private row to at most one public row (the lookup's join column is unique: many-to-one), so each
row of the result is one row of the bound table and the privacy unit is unchanged.  Every lookup column is
then a *public function of the private join column*: ``r.name`` is ``CASE WHEN t.region IN (1, 2) THEN
'North' WHEN t.region IN (3) THEN 'South' END`` (codes with one name merged into one branch, written over the
join column's declared values only).  The rewritten query is an ordinary single-table query: a condition on
``r.zone`` becomes a condition on ``t.region`` (evaluated on the declared domain by :mod:`.where`), GROUP BY
``r.name`` a binned GROUP BY of ``t.region`` (:func:`.groups.enumerated_bins`: one cell per name, a function of
one private column), and its coverage and sensitivity are those of the single-table query — which is what
dpmagic charges.  An INNER JOIN drops the rows whose code is missing from the lookup (``t.region IN (codes of
the lookup)`` is ANDed to WHERE when some declared code is missing); a LEFT JOIN keeps them, with NULL lookup
values (a NULL group key).

Refused, with the reason: a join whose lookup column is not unique (one-to-many: a row would count several
times), a join of two private tables or a self-join (the privacy unit would change), RIGHT / FULL / CROSS
joins, a join condition that is not ``private column = lookup column``, a float join column, and aggregates of
lookup columns other than SUM / AVG / VAR / STDDEV.  ``SUM(r.weight)`` (or ``AVG(r.weight * t.hours)``) is the
SUM of a row expression: the lookup column becomes ``CASE WHEN t.region IN (…) THEN <weight> … ELSE 0 END``, a
public function of the private join column, released once with the sensitivity of its range (max |weight| over
the codes the WHERE box allows: :mod:`dpmagic.query.rowexpr`); AVG / VAR / STDDEV are refused when some kept row
would join a NULL value (SQL skips those rows, ELSE 0 would not).
Reads nothing but the schema (its public tables included); O(size of the lookup × references).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlglot import exp

from dpmagic.domain.public import PublicTable
from dpmagic.domain.schema import CategoricalColumn, Schema
from dpmagic.errors import UnsupportedQueryError
from dpmagic.query.aggregates import AGG_CLASSES
from dpmagic.query.domain import resolve_column

__all__ = ["rewrite_public_joins"]

_PRIVATE_JOIN = (
    "a JOIN of the bound table with another private table (or with itself) is not supported: it would change the "
    "privacy unit (a person's rows could appear in several joined rows)"
)


def _literal(v: Any) -> exp.Expr:
    if v is None:
        return exp.Null()
    if isinstance(v, str):
        return exp.Literal.string(v)
    return exp.Literal.number(repr(v) if isinstance(v, float) else str(v))


def _lookup(schema: Schema, name: str) -> PublicTable | None:
    for n, t in (schema.public_tables or {}).items():
        if n.lower() == name.lower():
            return t
    return None


class _Join:
    """One lookup join: the lookup, the names it is referred to by, its join column and the private column."""

    def __init__(self, table: PublicTable, names: set[str], lookup_col: str, private_col: str, left: bool) -> None:
        self.table, self.names, self.lookup_col, self.private_col, self.left = (
            table,
            names,
            lookup_col,
            private_col,
            left,
        )


def _join_columns(cond: exp.Expr, private_names: set[str], join_names: set[str]) -> tuple[str, str]:
    """(private column, lookup column) of an ``ON a = b`` condition; refuses anything else."""
    while isinstance(cond, exp.Paren):
        cond = cond.this
    if not (isinstance(cond, exp.EQ) and isinstance(cond.this, exp.Column) and isinstance(cond.expression, exp.Column)):
        raise UnsupportedQueryError(
            f"JOIN ... ON {cond.sql()}: a lookup join needs ON <bound table column> = <lookup column>",
            hint="put other conditions in WHERE",
        )
    a, b = cond.this, cond.expression
    qa, qb = a.table.lower(), b.table.lower()
    if qa in join_names and qb not in join_names:
        a, b = b, a
    elif not (qb in join_names and qa not in join_names):
        raise UnsupportedQueryError(
            f"JOIN ... ON {cond.sql()}: qualify both columns (t.col = lookup.col), one from each table"
        )
    if a.table and a.table.lower() not in private_names:
        raise UnsupportedQueryError(f"JOIN ... ON {cond.sql()}: {a.table!r} is not the bound table")
    return a.name, b.name


def _name_unselected_keys(tree: exp.Select, found: list[_Join]) -> None:
    """GROUP BY lookup columns none of which is selected (``SELECT COUNT(*) … GROUP BY r.name``): the answer lists
    the keys first anyway, so they are put at the head of the SELECT list under their column names (``name``, not
    the CASE they become).  Only when no SELECT item is a key and no clause refers to a SELECT position."""
    group = tree.args.get("group")
    if group is None or any(not isinstance(e, exp.Column) for e in group.expressions):
        return
    if any(not item.find(*AGG_CLASSES) for item in tree.expressions):
        return  # some key is selected: the analyst chose the columns
    order = tree.args.get("order")
    if order is not None and any(isinstance(o.this, exp.Literal) for o in order.expressions):
        return
    names = {n for j in found for n in j.names}
    if not any(e.table.lower() in names for e in group.expressions):
        return
    keys = [exp.alias_(e.copy(), e.name) if e.table else e.copy() for e in group.expressions]
    tree.set("expressions", keys + list(tree.expressions))


def rewrite_public_joins(tree: exp.Select, schema: Schema, tables: Sequence[str] | None) -> tuple[exp.Select, bool]:
    """``tree`` with its public lookup joins rewritten into the single-table query (see the module docstring);
    returns (tree, whether a join was rewritten).  Raises :class:`UnsupportedQueryError` naming the refusal."""
    joins = tree.args.get("joins") or []
    if not joins:
        return tree, False
    tree = tree.copy()
    joins = tree.args["joins"]
    source = tree.args.get("from") or tree.args.get("from_")
    base = source.this if source is not None else None
    if not isinstance(base, exp.Table):
        raise UnsupportedQueryError("a JOIN needs the bound table in FROM (not a subquery)")
    private_names = {base.name.lower(), (base.alias or base.name).lower()}
    private_names |= {n.lower() for n in (tables or []) if n}
    private_names.add(schema.table.lower())
    found: list[_Join] = []
    for j in joins:
        other = j.this
        if not isinstance(other, exp.Table):
            raise UnsupportedQueryError("JOIN with a subquery is not supported: join a public lookup table by name")
        t = _lookup(schema, other.name)
        if t is None:
            declared = sorted(schema.public_tables or {})
            if other.name.lower() in private_names:
                raise UnsupportedQueryError(_PRIVATE_JOIN + " (a self-join)")
            raise UnsupportedQueryError(
                f"JOIN {other.name}: {other.name!r} is not a public table of the schema; " + _PRIVATE_JOIN,
                hint=(
                    f"public lookup tables: {', '.join(declared)}"
                    if declared
                    else 'a custodian may declare a public lookup table in the schema\'s "public_tables"'
                ),
            )
        side, kind = (j.side or "").upper(), (j.kind or "").upper()
        if side not in ("", "LEFT") or kind not in ("", "INNER", "OUTER") or (kind == "OUTER" and side != "LEFT"):
            raise UnsupportedQueryError(
                f"{' '.join(x for x in (side, kind) if x)} JOIN {other.name}: only [INNER] JOIN and LEFT JOIN of a "
                "public lookup are supported (RIGHT / FULL / CROSS joins add rows that are not rows of the bound table)"
            )
        names = {other.name.lower(), (other.alias or other.name).lower()}
        if names & private_names:
            raise UnsupportedQueryError(f"JOIN {other.sql()}: the lookup's alias is also the bound table's name")
        using = j.args.get("using")
        on = j.args.get("on")
        if using:
            if len(using) != 1:
                raise UnsupportedQueryError("JOIN ... USING takes one column (the lookup's key)")
            private_col = lookup_col = using[0].name
        elif on is not None:
            private_col, lookup_col = _join_columns(on, private_names, names)
        else:
            raise UnsupportedQueryError(
                f"JOIN {other.name} needs ON <column> = <lookup column> or USING (<column>); a join without a "
                "condition (FROM t, lookup or CROSS JOIN) pairs every row with every lookup row",
                hint=f"write FROM {base.name} JOIN {other.name} ON {base.name}.<column> = {other.name}.{t.key}",
            )
        private_col = resolve_column(exp.column(private_col), schema)
        lc = t.column(lookup_col)
        if lc is None:
            raise UnsupportedQueryError(
                f"JOIN {other.name}: the public table has no column {lookup_col!r}",
                hint=f"its columns: {', '.join(t.columns)}",
            )
        values = t.values(lc)
        if len(set(values)) != len(values) or any(v is None for v in values):
            raise UnsupportedQueryError(
                f"JOIN {other.name} ON {lc}: {lc!r} is not unique in the public table (or has nulls), so the join is "
                "one-to-many: a private row would appear several times, changing its contribution",
                hint=f"join on the lookup's key {t.key!r}, which is unique",
            )
        col = schema[private_col]
        if not isinstance(col, CategoricalColumn) and (not col.is_int or col.temporal is not None):
            raise UnsupportedQueryError(
                f"JOIN ON {private_col}: a {col.temporal or 'float'} column is not supported as a lookup join column",
                hint="join on a categorical or int column",
            )
        found.append(_Join(t, names, lc, private_col, side == "LEFT"))
    all_names = [n for j in found for n in j.names]
    if len(set(all_names)) != len(all_names):
        raise UnsupportedQueryError("two joined tables share a name or alias: give each lookup its own alias")
    for node in tree.find_all(exp.Star):
        if isinstance(node.parent, exp.Column) and node.parent.table:
            raise UnsupportedQueryError(f"{node.parent.sql()}: row-level SELECTs are not supported")
    tree.set("joins", None)
    base.set("alias", None)

    def in_domain(j: _Join) -> tuple[list[Any], int]:
        """The lookup's join values that are declared values of the private column (in lookup order, as the
        column's own values), and the number of declared values; O(lookup rows), never enumerating an int range."""
        col = schema[j.private_col]
        codes = j.table.values(j.lookup_col)
        if isinstance(col, CategoricalColumn):
            declared = set(col.values)
            return [c for c in codes if c in declared and not isinstance(c, bool)], len(declared)
        lo, hi = int(col.lower), int(col.upper)
        ints = [
            int(c)
            for c in codes
            if isinstance(c, (int, float)) and not isinstance(c, bool) and float(c).is_integer() and lo <= c <= hi
        ]
        return ints, hi - lo + 1

    def mapping(j: _Join, column: str, default: exp.Expr | None = None) -> exp.Expr:
        """The lookup column as a CASE over the private join column (declared codes only, equal values merged),
        NULL elsewhere, or ``default``."""
        lk = j.table.values(j.lookup_col)
        vals = j.table.values(column)
        domset = set(in_domain(j)[0])
        by_value: dict[Any, list[Any]] = {}
        for code, v in zip(lk, vals, strict=True):
            if code in domset and v is not None and not isinstance(code, bool):
                by_value.setdefault(v, []).append(int(code) if isinstance(code, float) else code)
        priv = exp.column(j.private_col)
        ifs = [
            exp.If(this=exp.In(this=priv.copy(), expressions=[_literal(c) for c in codes]), true=_literal(v))
            for v, codes in by_value.items()
        ]
        if not ifs:
            return exp.Null() if default is None else default
        return exp.Paren(this=exp.Case(ifs=ifs) if default is None else exp.Case(ifs=ifs, default=default))

    def resolve(c: exp.Column) -> exp.Expr:
        q = c.table.lower()
        if q:
            for j in found:
                if q in j.names:
                    lc = j.table.column(c.name)
                    if lc is None:
                        raise UnsupportedQueryError(
                            f"{c.sql()}: the public table {j.table.name!r} has no column {c.name!r}",
                            hint=f"its columns: {', '.join(j.table.columns)}",
                        )
                    return lookup_ref(j, lc, c)
            if q not in private_names:
                raise UnsupportedQueryError(f"{c.sql()}: {c.table!r} names no table of the FROM clause")
            return exp.column(resolve_column(exp.column(c.name), schema))
        in_private = c.name in schema or any(n.lower() == c.name.lower() for n in schema.names)
        hits = [j for j in found if j.table.column(c.name) is not None]
        using = [j for j in hits if j.private_col.lower() == c.name.lower()]
        if in_private and (not hits or using):
            return exp.column(resolve_column(exp.column(c.name), schema))
        if in_private or len(hits) > 1:
            raise UnsupportedQueryError(f"column {c.name!r} is ambiguous: qualify it with its table's name or alias")
        if hits:
            j = hits[0]
            lc = j.table.column(c.name)
            assert lc is not None
            return lookup_ref(j, lc, c)
        return c

    def summed(j: _Join, lc: str, c: exp.Column, agg: exp.Expr) -> exp.Expr:
        """A lookup column inside SUM / AVG / VAR / STDDEV: its public value per code as a CASE over the private
        join column with ELSE 0 — a row expression (:mod:`dpmagic.query.rowexpr`) whose range is the lookup's
        values over the codes the WHERE box allows, so SUM(r.weight) is one release of sensitivity max |weight|.
        SUM skips a NULL as adding 0; AVG / VAR / STDDEV skip the row, which ELSE 0 would not: refused when a code
        the join keeps has no value."""
        kept, n_declared = in_domain(j)
        values = dict(zip(j.table.values(j.lookup_col), j.table.values(lc), strict=True))
        words = [
            v
            for k in kept
            if (v := values.get(k)) is not None and (isinstance(v, bool) or not isinstance(v, (int, float)))
        ]
        if words:
            raise UnsupportedQueryError(
                f"{agg.sql()}: the public table's column {lc!r} holds non-numbers ({words[0]!r}), which cannot be summed",
                hint=f"GROUP BY {c.sql()} with COUNT(*) counts the rows per value",
            )
        if isinstance(agg, exp.Sum):
            return mapping(j, lc, default=exp.Literal.number(0))
        if not isinstance(agg, (exp.Avg, exp.Variance, exp.VariancePop, exp.Stddev, exp.StddevSamp, exp.StddevPop)):
            raise UnsupportedQueryError(
                f"{agg.sql()}: {agg.key.upper()} of a lookup column is not supported (SUM, AVG, VAR and STDDEV are)",
                hint=f"GROUP BY {c.sql()} with COUNT(*) answers it from the counts",
            )
        if any(values.get(k) is None for k in kept) or (j.left and len(set(kept)) < n_declared):
            raise UnsupportedQueryError(
                f"{agg.sql()}: some rows join no value of {c.sql()} (NULL), which {agg.key.upper()} skips",
                hint=f"filter them out in WHERE, or use SUM({c.sql()}) / COUNT(*) over the rows that have one",
            )
        return mapping(j, lc, default=exp.Literal.number(0))

    def lookup_ref(j: _Join, lc: str, c: exp.Column) -> exp.Expr:
        parent = c.parent
        while parent is not None and not isinstance(parent, exp.Select):
            if isinstance(parent, AGG_CLASSES) and not isinstance(parent, exp.Count):
                return summed(j, lc, c, parent)
            parent = parent.parent
        if lc == j.lookup_col and not j.left:
            return exp.column(j.private_col)  # an inner join's key equals the private column on every kept row
        return mapping(j, lc)

    _name_unselected_keys(tree, found)

    def lookup_in_aggregate(item: exp.Expr) -> bool:
        """``item`` aggregates a lookup column by SUM / AVG / VAR / STDDEV (``SUM(r.weight)``)."""
        for agg in item.find_all(*AGG_CLASSES):
            if isinstance(agg, exp.Count):
                continue
            for c in agg.find_all(exp.Column):
                q = c.table.lower()
                if any(
                    j.table.column(c.name) is not None and (q in j.names if q else c.name not in schema) for j in found
                ):
                    return True
        return False

    for item in list(tree.expressions):  # SUM(r.weight) is named as written, not by its CASE
        if not isinstance(item, exp.Alias) and lookup_in_aggregate(item):
            item.replace(exp.alias_(item.copy(), item.sql(), quoted=True))
    for c in list(tree.find_all(exp.Column)):
        if isinstance(c.this, exp.Star):
            continue
        new = resolve(c)
        if new is not c:
            if c.parent is tree and c.arg_key == "expressions" and not isinstance(new, exp.Column):
                new = exp.alias_(new, c.name)  # SELECT r.name: the answer's column is called name, as joined
            c.replace(new)
    conds: list[exp.Expr] = []
    for j in found:
        if j.left:
            continue
        kept, n_declared = in_domain(j)
        kept = sorted(set(kept), key=str) if isinstance(schema[j.private_col], CategoricalColumn) else sorted(set(kept))
        if len(kept) == n_declared:
            continue
        if not kept:
            raise UnsupportedQueryError(
                f"JOIN {j.table.name}: none of {j.private_col!r}'s declared values is in the lookup, so the inner join "
                "has no rows"
            )
        conds.append(exp.In(this=exp.column(j.private_col), expressions=[_literal(v) for v in kept]))
    if conds:
        where = tree.args.get("where")
        cond = conds[0] if len(conds) == 1 else exp.and_(*conds)
        tree.set(
            "where",
            exp.Where(this=cond if where is None else exp.and_(exp.Paren(this=where.this), exp.Paren(this=cond))),
        )
    return tree, True
