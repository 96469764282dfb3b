"""The aggregate kinds a query can name, with the two facts the query layer needs of each: how many noisy
releases per cell it takes alone, whether it belongs to the shared counts-and-sums family (COUNT / SUM / AVG),
and which shared quantities it is computed from (the cell count n, a raw or centred sum, a centred sum of
squares): a query's cost is split over its *distinct* releases (:func:`distinct_releases`), so COUNT and AVG of a
query share one count, VAR and STDDEV of a column share n, S and Q.

The kinds the parser produces are declared here (the SQL vocabulary of :mod:`dpmagic.query.aggregates`); the
unit that releases each is registered in :mod:`dpmagic.aggregates.registry`, whose :func:`register
<dpmagic.aggregates.registry.register>` declares a new kind here and checks a built-in one against this table
(one source per fact: a unit stating a different release count is refused at import).  The query layer sits below
the aggregates, so it cannot ask the registry; an undeclared kind is an error (:func:`kind_of`), never a default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dpmagic.errors import UnsupportedQueryError

__all__ = ["AggregateKind", "BUILTIN", "declare", "distinct_quantities", "distinct_releases", "kind_of", "undeclare"]


@dataclass(frozen=True)
class AggregateKind:
    name: str
    #: noisy releases per GROUP BY cell
    releases: int
    #: released by the shared counts-and-sums path (COUNT, SUM, AVG)
    basic: bool = False
    #: the shared quantities it is computed from (empty: its ``releases`` are its own): ``"n"`` the cell count,
    #: ``"sum"`` the raw sum of its (clamped) column, ``"s"`` the centred sum Σ(x − c), ``"q"`` the centred sum
    #: of squares Σ(x − c)² (:mod:`dpmagic.aggregates.moments`)
    quantities: tuple[str, ...] = ()


BUILTIN: tuple[AggregateKind, ...] = (
    AggregateKind("count", 1, True, ("n",)),
    AggregateKind("sum", 1, True, ("sum",)),
    AggregateKind("avg", 2, True, ("n", "s")),  # a centred SUM and a COUNT
    AggregateKind("count_distinct", 1),
    AggregateKind("var", 3, False, ("n", "s", "q")),  # a COUNT, a centred SUM and a centred sum of squares
    AggregateKind("stddev", 3, False, ("n", "s", "q")),
    AggregateKind("quantile", 2),  # the pick and its interval histogram
)

_KINDS: dict[str, AggregateKind] = {k.name: k for k in BUILTIN}


def declare(kind: AggregateKind) -> None:
    """Declare ``kind`` (a no-op when declared with the same facts; a conflicting declaration is an error)."""
    old = _KINDS.get(kind.name)
    if old is not None and old != kind:
        raise ValueError(f"aggregate kind {kind.name!r} is declared as {old}, not {kind}")
    _KINDS[kind.name] = kind


def undeclare(name: str) -> None:
    """Remove a kind declared at run time (a built-in one stays)."""
    if name not in {k.name for k in BUILTIN}:
        _KINDS.pop(name, None)


def kind_of(name: str) -> AggregateKind:
    kind = _KINDS.get(name)
    if kind is None:
        raise UnsupportedQueryError(f"unknown aggregate kind {name!r}", hint="known: " + ", ".join(sorted(_KINDS)))
    return kind


def distinct_quantities(aggregates: Sequence[Any]) -> list[tuple[str, ...]]:
    """The distinct noisy releases per cell of a query's ``aggregates`` (each with ``func``, ``sum_key``), in
    order of first need: ``("n",)`` the cell count (once, whoever needs it), ``("s", key)`` / ``("q", key)`` the
    centred sum / sum of squares of a (clamped) column, ``("sum", key)`` a raw sum — only when no aggregate of
    the same column asks for the centred sum (a SUM is then derived from it: S + c·n) — and ``("own", i, j)``
    the j-th own release of the i-th aggregate of a kind without shared quantities."""
    seen: dict[tuple[Any, ...], None] = {}
    centred = {a.sum_key for a in aggregates if "s" in kind_of(a.func).quantities}
    for i, a in enumerate(aggregates):
        kind = kind_of(a.func)
        if not kind.quantities:
            for j in range(kind.releases):
                seen.setdefault(("own", i, j))
            continue
        for name in kind.quantities:
            if name == "n":
                seen.setdefault(("n",))
            elif name == "sum" and a.sum_key in centred:
                seen.setdefault(("s", a.sum_key))
            else:
                seen.setdefault((name, a.sum_key))
    return list(seen)


def distinct_releases(aggregates: Sequence[Any]) -> int:
    """How many distinct noisy releases per cell ``aggregates`` need (the query's cost is split over them)."""
    return len(distinct_quantities(aggregates))
