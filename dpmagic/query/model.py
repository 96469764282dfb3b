"""The structured query: what a ``%%dpquery`` cell asks, independent of SQL text.

A :class:`Query` is a set of *base aggregates* (the noisy releases: COUNT, SUM, AVG, COUNT(DISTINCT),
VAR/STDDEV, quantiles) over the rows selected by a WHERE filter, grouped by :class:`GroupKey` s whose cells
come from the *declared* domain (categorical values, every declared integer, or declared bins), followed by
free post-processing of the released values (:class:`Output` expressions, HAVING, ORDER BY, LIMIT).

Its coverage for the accountant is one box: the WHERE box when the filter is a box, or the smallest box
covering the filter (OR across columns → the per-column union of the branches' sets, a superset: safe).  A
GROUP BY releases disjoint cells, so the whole query is one node (docs/design.md §2, "GROUP BY").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from dpmagic.domain.sets import Box, ValueSet, box_to_json
from dpmagic.query.kinds import distinct_releases, kind_of

__all__ = ["Aggregate", "AggregateFunction", "Filter", "GroupKey", "Output", "Query"]

AggregateFunction = Literal["count", "sum", "avg", "count_distinct", "var", "stddev", "quantile"]


def _bound(x: float) -> str:
    """A clamp bound as text: ``:g`` when that names it exactly, else its shortest exact repr (two different
    clamps must never share a name: :attr:`Aggregate.sum_key` keys the shared releases)."""
    short = f"{x:g}"
    if float(short) == float(x):
        return short
    return str(int(x)) if float(x).is_integer() else repr(float(x))


@dataclass(frozen=True)
class Aggregate:
    """One base aggregate (a noisy release), with its output name.

    ``clamp`` = (lo, hi): the analyst clamped the column inside the aggregate (``SUM(CLAMP(x, 0, 100))``,
    ``LEAST(GREATEST(x, 0), 100)``); values are clamped into [lo, hi] ∩ the declared bounds, and the
    sensitivity follows those tighter public bounds.  ``param`` is the quantile's p in [0, 1].
    """

    func: AggregateFunction
    column: str | None
    alias: str
    clamp: tuple[float, float] | None = None
    param: float | None = None

    @property
    def releases(self) -> int:
        """How many noisy values it needs per cell (AVG: a SUM and a COUNT; VAR: a COUNT, SUM and sum of squares)."""
        return kind_of(self.func).releases

    @property
    def is_basic(self) -> bool:
        """COUNT/SUM/AVG: released by :mod:`dpmagic.releases.plan`; the others by :mod:`dpmagic.aggregates`."""
        return kind_of(self.func).basic

    @property
    def sum_key(self) -> str:
        """The key of the values summed (a column, or a column under an analyst's clamp)."""
        if self.clamp is None or self.column is None:
            return str(self.column)
        lo, hi = self.clamp
        return f"{self.column}[{_bound(lo)}:{_bound(hi)}]"

    def identity(self) -> tuple[Any, ...]:
        return (self.func, self.column, self.clamp, self.param)

    def __str__(self) -> str:
        inner = "*" if self.column is None else f'"{self.column}"'
        if self.clamp is not None:
            inner = f"CLAMP({inner}, {_bound(self.clamp[0])}, {_bound(self.clamp[1])})"
        if self.func == "count_distinct":
            return f"COUNT(DISTINCT {inner})"
        if self.func == "quantile":
            assert self.param is not None  # a quantile has its p
            named = {0.0: "MIN", 1.0: "MAX", 0.5: "MEDIAN"}.get(self.param)
            return f"{named}({inner})" if named else f"QUANTILE({inner}, {self.param:g})"
        return f"{self.func.upper()}({inner})"


@dataclass(frozen=True)
class GroupKey:
    """One GROUP BY key: its output name, the column it bins, and one cell per declared bin.

    ``sets`` is None for a categorical column grouped by its declared values (one cell per value, labels =
    values).  Otherwise ``sets[i]`` is the i-th bin (disjoint, together covering the column's declared domain)
    and ``labels[i]`` its output value (None for rows that fall in no CASE branch: SQL's NULL group).
    """

    name: str
    column: str
    labels: tuple[Any, ...]
    sets: tuple[ValueSet, ...] | None = None

    @property
    def size(self) -> int:
        return len(self.labels)

    def identity(self) -> list[Any]:
        sets = None if self.sets is None else [str(s) for s in self.sets]
        return [self.name, self.column, [repr(v) for v in self.labels], sets]


@dataclass(frozen=True)
class Filter:
    """An exact row filter that is not a single box: ``op`` is ``box``, ``and``, ``or`` or ``not``."""

    op: Literal["box", "and", "or", "not"]
    box: Box | None = None
    parts: tuple[Filter, ...] = ()

    @property
    def columns(self) -> frozenset[str]:
        """The columns the filter's boxes constrain (anywhere in the AND / OR / NOT tree)."""
        if self.op == "box":
            return frozenset(self.box.constraints) if self.box is not None else frozenset()
        return frozenset().union(*(p.columns for p in self.parts))

    def identity(self) -> Any:
        if self.op == "box":
            assert self.box is not None
            return ["box", box_to_json(self.box), self.box.is_empty()]
        return [self.op, [p.identity() for p in self.parts]]


@dataclass(frozen=True)
class Output:
    """One column of the answer: a SQL expression (sqlglot SQL text) over aggregate aliases and group keys.

    ``source`` names the base aggregate whose 95% interval carries over (a bare aggregate, or one under
    CAST / parentheses / rounding-free renaming); None for computed values, whose interval is derived from the
    base intervals by a union bound and interval arithmetic (:mod:`dpmagic.query.intervals`).  ``bounds``: for
    the AVG of a linear row expression, the expression's range over the declared box (its value lies in it).
    """

    name: str
    expr: str
    source: str | None = None
    bounds: tuple[float, float] | None = None


@dataclass(frozen=True)
class Query:
    """A parsed, validated query over one table's declared domain."""

    text: str
    table: str | None
    aggregates: tuple[Aggregate, ...]
    group_by: tuple[str, ...]
    where: Box
    groups: tuple[GroupKey, ...] = ()
    filter: Filter | None = None
    outputs: tuple[Output, ...] | None = None
    having: str | None = None
    order_by: tuple[tuple[str, bool], ...] = ()
    limit: int | None = None
    hidden: tuple[str, ...] = field(default=())
    #: derived columns: (name, row expression) of each SUM / AVG / VAR / STDDEV of a row expression (issue 29),
    #: aggregated as a numeric column whose public bounds are the expression's enclosure over the WHERE box
    #: (:mod:`dpmagic.query.derived`); its name is the expression's SQL, so it is part of :attr:`key`
    derived: tuple[tuple[str, Any], ...] = field(default=())
    #: how parts that could be misread were read (``educ = '8'`` read as the number 8): shown with the answer
    notes: tuple[str, ...] = field(default=(), compare=False)
    #: the parsed statement (a sqlglot tree, private to the parser): :attr:`canonical` is generated from it on
    #: first use only (regenerating SQL costs about as much as parsing it; the CLI never needs it)
    _tree: Any = field(default=None, compare=False, repr=False)

    @cached_property
    def canonical(self) -> str:
        """The statement regenerated by sqlglot: keyword case and whitespace normalised (cache key, ledger)."""
        if self._tree is None:
            return self.text
        return str(self._tree.sql(copy=False))  # the tree is not used after this: no defensive copy

    @property
    def coverage(self) -> Box:
        """The domain rows any of its releases can depend on (the accountant's node coverage)."""
        return self.where

    @property
    def is_public(self) -> bool:
        """A SELECT of GROUP BY keys alone (no aggregate): its answer is public and costs nothing."""
        return not self.aggregates

    def region_labels(self) -> list[list[Any]]:
        """Per GROUP BY key, its labels whose cell meets the WHERE region (its covering box): a categorical value
        in the box's set on its column, a bin that meets it; every label where the box leaves the column free.
        From the schema and the query only.  O(number of labels)."""
        per: list[list[Any]] = []
        for g in self.groups:
            s = self.where.get(g.column)
            if g.sets is None:
                per.append([v for v in g.labels if s is None or s.contains(v)])
            else:
                per.append([lab for lab, b in zip(g.labels, g.sets, strict=True) if s is None or b.overlaps(s)])
        return per

    def region_keys(self) -> list[tuple[Any, ...]]:
        """The declared GROUP BY keys inside the WHERE region, in declared order (:meth:`region_labels`, every
        combination); none when the region is empty.  O(number of keys)."""
        import itertools

        if self.where.is_empty():
            return []
        return list(itertools.product(*self.region_labels()))

    @property
    def n_cells(self) -> int:
        """The number of GROUP BY cells released (1 without GROUP BY)."""
        n = 1
        for g in self.groups:
            n *= g.size
        return n

    @property
    def is_postprocessed(self) -> bool:
        return self.outputs is not None or self.having is not None or bool(self.order_by) or self.limit is not None

    @property
    def key(self) -> str:
        """A normalised identity: same table, aggregates, aliases, GROUP BY, coverage and post-processing → same key.

        Keyword case, whitespace, column-name case and equivalent predicates (``age < 30`` and
        ``age <= 29`` on an int column) all normalise away; a different literal that changes the coverage
        does not.
        """
        aggs = [
            [a.func, a.column, a.alias, a.clamp, a.param] if not a.is_basic or a.clamp else [a.func, a.column, a.alias]
            for a in self.aggregates
        ]
        parts: list[Any] = [aggs, list(self.group_by), box_to_json(self.where), self.where.is_empty()]
        extra: dict[str, Any] = {}
        if any(g.sets is not None or g.name != g.column for g in self.groups):
            extra["groups"] = [g.identity() for g in self.groups]
        if self.filter is not None:
            extra["filter"] = self.filter.identity()
        if self.is_postprocessed:
            extra["post"] = [
                None if self.outputs is None else [[o.name, o.expr] for o in self.outputs],
                self.having,
                [list(o) for o in self.order_by],
                self.limit,
            ]
        if self.table is not None:
            extra["table"] = self.table.lower()
        if extra:
            parts.append(extra)
        return json.dumps(parts, sort_keys=True, default=str)

    @property
    def releases_per_cell(self) -> int:
        """The distinct noisy releases per cell (shared ones counted once: :func:`~dpmagic.query.kinds.distinct_releases`)."""
        return distinct_releases(self.aggregates)

    @property
    def is_empty(self) -> bool:
        """True when the WHERE clause matches no row of the declared domain (a valid, empty predicate)."""
        return self.where.is_empty()

    def __str__(self) -> str:
        return self.canonical
