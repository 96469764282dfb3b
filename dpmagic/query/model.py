"""The structured query: what a ``%%dpquery`` cell asks, independent of SQL text.

A :class:`Query` is a set of aggregates (COUNT, SUM, AVG) over the rows inside a WHERE :class:`~dpmagic.sets.Box`,
optionally grouped by categorical columns over all their *declared* values.  Its coverage for the
accountant is the WHERE box: a GROUP BY releases disjoint cells, so the whole query is one node
(DESIGN.md §2, "GROUP BY").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dpmagic.sets import Box

__all__ = ["Aggregate", "Query", "AggregateFunction"]

AggregateFunction = Literal["count", "sum", "avg"]


@dataclass(frozen=True)
class Aggregate:
    """One aggregate of the SELECT list: ``COUNT(*)``, ``SUM(col)`` or ``AVG(col)``, with its output name."""

    func: AggregateFunction
    column: str | None
    alias: str

    @property
    def releases(self) -> int:
        """How many noisy values it needs per cell: AVG is a noisy SUM divided by a noisy COUNT."""
        return 2 if self.func == "avg" else 1

    def __str__(self) -> str:
        inner = "*" if self.column is None else f'"{self.column}"'
        return f"{self.func.upper()}({inner})"


@dataclass(frozen=True)
class Query:
    """A parsed, validated query over one table's declared domain."""

    text: str
    canonical: str
    table: str | None
    aggregates: tuple[Aggregate, ...]
    group_by: tuple[str, ...]
    where: Box

    @property
    def coverage(self) -> Box:
        """The domain rows any of its releases can depend on (the accountant's node coverage)."""
        return self.where

    @property
    def key(self) -> str:
        """A normalised identity: same aggregates, aliases, GROUP BY and coverage → same key.

        Keyword case, whitespace, column-name case and equivalent predicates (``age < 30`` and
        ``age <= 29`` on an int column) all normalise away; a different literal that changes the coverage
        does not.
        """
        import json

        from dpmagic.sets import box_to_json

        aggs = [[a.func, a.column, a.alias] for a in self.aggregates]
        return json.dumps([aggs, list(self.group_by), box_to_json(self.where), self.where.is_empty()], sort_keys=True)

    @property
    def releases_per_cell(self) -> int:
        return sum(a.releases for a in self.aggregates)

    @property
    def is_empty(self) -> bool:
        """True when the WHERE clause matches no row of the declared domain (a valid, empty predicate)."""
        return self.where.is_empty()

    def __str__(self) -> str:
        return self.canonical
