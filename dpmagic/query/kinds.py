"""The aggregate kinds a query can name, with the two facts the query layer needs of each: how many noisy
releases per cell it takes (the query's cost is split equally over them) and whether it belongs to the shared
counts-and-sums family (COUNT / SUM / AVG).

The kinds the parser produces are declared here (the SQL vocabulary of :mod:`dpmagic.query.aggregates`); the
unit that releases each is registered in :mod:`dpmagic.aggregates.registry`, whose :func:`register
<dpmagic.aggregates.registry.register>` declares a new kind here and checks a built-in one against this table
(one source per fact: a unit stating a different release count is refused at import).  The query layer sits below
the aggregates, so it cannot ask the registry; an undeclared kind is an error (:func:`kind_of`), never a default.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpmagic.errors import UnsupportedQueryError

__all__ = ["AggregateKind", "BUILTIN", "declare", "kind_of", "undeclare"]


@dataclass(frozen=True)
class AggregateKind:
    name: str
    #: noisy releases per GROUP BY cell
    releases: int
    #: released by the shared counts-and-sums path (COUNT, SUM, AVG)
    basic: bool = False


BUILTIN: tuple[AggregateKind, ...] = (
    AggregateKind("count", 1, True),
    AggregateKind("sum", 1, True),
    AggregateKind("avg", 2, True),  # a SUM and a COUNT
    AggregateKind("count_distinct", 1),
    AggregateKind("var", 3),  # a COUNT, a SUM and a sum of squares
    AggregateKind("stddev", 3),
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
