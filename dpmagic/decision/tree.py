"""Condition trees of decision (HAVING) queries and their Boolean minimisation.

A decision query asks, for every group of a GROUP BY over declared keys, whether a *monotone* AND/OR
formula of atomic conditions holds::

    HAVING (COUNT(*) > 100 AND AVG(age) > 65) OR (COUNT(*) > 50 AND AVG(age) < 5)

An atomic :class:`Condition` is ``aggregate > c`` or ``aggregate < c`` with the aggregate COUNT(*),
SUM(col) or AVG(col) (optionally over its own WHERE filter, as in Lahjouji et al.'s model where the atomic
queries share the groups but may have different filters). There is no NOT: a negated comparison is the
mirrored comparison, so every tree is a monotone Boolean function of its atoms, which is what the accuracy
proofs of :mod:`dpmagic.decision.mechanism` rest on.

:func:`minimise` rewrites the tree with the fewest leaf occurrences (Quine–McCluskey via sympy's
``SOPform``/``POSform``), as ProBE prescribes (Lahjouji, Ghayyur, He, Mehrotra, *ProBE: Proportioning
Privacy Budget for Complex Exploratory Decision Support*, arXiv:2406.15655, 2024,
doi:10.48550/arXiv.2406.15655, §4.3 and Alg. 1), and
reports o_i, the number of occurrences of condition i in the minimised tree.

Threshold implications between conditions on the same aggregate (COUNT > 100 implies COUNT > 50; COUNT > 100
and COUNT < 50 exclude each other) are passed to the minimiser as *don't-care* assignments: assignments of
truth values that no real value of the aggregate can produce. The minimised formula agrees with the original
on every realisable assignment, hence on the true data; a result with a negated literal (possible when
don't-cares are used) is discarded in favour of the plain minimisation, so the output is always monotone.
Complexity: the truth table has 2^n rows for n distinct conditions (refused above :data:`MAX_CONDITIONS`),
Quine–McCluskey is exponential in n in the worst case; n ≤ 12 is instantaneous in practice.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dpmagic.errors import QueryError

__all__ = [
    "And",
    "Condition",
    "Leaf",
    "MAX_CONDITIONS",
    "MinimisedTree",
    "Node",
    "Or",
    "count",
    "avg",
    "children_of",
    "sum_",
    "evaluate",
    "minimise",
    "occurrences",
    "realisable",
    "to_text",
]

#: Largest number of distinct atomic conditions a decision query may have (the minimiser's truth table
#: has 2^n rows).
MAX_CONDITIONS = 12

Aggregate = Literal["count", "sum", "avg"]
Op = Literal[">", "<"]


@dataclass(frozen=True)
class Condition:
    """``aggregate(column) op threshold`` evaluated per group (``column`` is None for COUNT(*)).

    ``where`` is an optional hashable description of the condition's own filter (None: the query's WHERE);
    two conditions with different filters are different aggregates.
    """

    aggregate: Aggregate
    column: str | None
    op: Op
    threshold: float
    where: Any = None

    def __post_init__(self) -> None:
        if self.aggregate not in ("count", "sum", "avg"):
            raise QueryError(f"unsupported aggregate {self.aggregate!r} in a HAVING condition: use COUNT, SUM or AVG")
        if self.op not in (">", "<"):
            raise QueryError(f"unsupported comparison {self.op!r} in a HAVING condition: use > or <")
        if (self.aggregate == "count") != (self.column is None):
            raise QueryError("COUNT(*) takes no column; SUM and AVG take one")
        if not isinstance(self.threshold, (int, float)) or not math.isfinite(self.threshold):
            raise QueryError(f"the threshold of a HAVING condition must be a finite number, got {self.threshold!r}")

    @property
    def statistic_key(self) -> tuple[Any, ...]:
        """Identity of the aggregate compared (same key: thresholds can imply each other)."""
        return (self.aggregate, self.column, self.where)

    @property
    def aggregate_text(self) -> str:
        return "COUNT(*)" if self.aggregate == "count" else f"{self.aggregate.upper()}({self.column})"

    def __str__(self) -> str:
        w = "" if self.where is None else f" [WHERE {self.where}]"
        return f"{self.aggregate_text} {self.op} {self.threshold:g}{w}"


def count(op: Op, threshold: float, where: Any = None) -> Condition:
    return Condition("count", None, op, threshold, where)


def sum_(column: str, op: Op, threshold: float, where: Any = None) -> Condition:
    return Condition("sum", column, op, threshold, where)


def avg(column: str, op: Op, threshold: float, where: Any = None) -> Condition:
    return Condition("avg", column, op, threshold, where)


@dataclass(frozen=True)
class Leaf:
    """An occurrence of condition number ``index`` (into the query's list of distinct conditions)."""

    index: int


@dataclass(frozen=True)
class And:
    children: tuple[Node, ...]

    def __init__(self, *children: Node | Condition) -> None:
        object.__setattr__(self, "children", tuple(children))


@dataclass(frozen=True)
class Or:
    children: tuple[Node, ...]

    def __init__(self, *children: Node | Condition) -> None:
        object.__setattr__(self, "children", tuple(children))


Node = Leaf | And | Or | Condition


def children_of(node: Node) -> tuple[Node, ...]:
    """The children of an AND / OR node (a leaf or a condition has none: refused)."""
    if isinstance(node, (And, Or)):
        return node.children
    raise TypeError(f"not an AND/OR node: {node!r}")


# --------------------------------------------------------------------------------------------------
# normalisation


def index_conditions(tree: Node) -> tuple[Node, tuple[Condition, ...]]:
    """Replace every :class:`Condition` by a :class:`Leaf` into the list of distinct conditions.

    The list is in order of first appearance (left to right). Empty AND/OR nodes are refused.
    """
    conds: list[Condition] = []
    where: dict[Condition, int] = {}

    def walk(node: Node) -> Node:
        if isinstance(node, Condition):
            if node not in where:
                where[node] = len(conds)
                conds.append(node)
            return Leaf(where[node])
        if isinstance(node, Leaf):
            raise QueryError("a condition tree must be built from Condition objects, not Leaf indices")
        if isinstance(node, (And, Or)):
            if not node.children:
                raise QueryError(f"an empty {type(node).__name__.upper()} in a HAVING condition")
            kids = tuple(walk(c) for c in node.children)
            return And(*kids) if isinstance(node, And) else Or(*kids)
        raise QueryError(f"unexpected node {node!r} in a HAVING condition tree")

    out = walk(tree)
    if len(conds) > MAX_CONDITIONS:
        raise QueryError(
            f"a HAVING clause with {len(conds)} distinct conditions is too large (at most {MAX_CONDITIONS})"
        )
    return out, tuple(conds)


def evaluate(tree: Node, values: Sequence[bool] | Sequence[int] | Mapping[int, bool]) -> bool:
    """The truth value of an indexed tree given the truth value of each condition (by index; 0/1 or bool)."""
    if isinstance(tree, Leaf):
        return bool(values[tree.index])
    if isinstance(tree, And):
        return all(evaluate(c, values) for c in tree.children)
    if isinstance(tree, Or):
        return any(evaluate(c, values) for c in tree.children)
    raise TypeError(f"not an indexed tree node: {tree!r}")


def occurrences(tree: Node, n: int) -> list[int]:
    """o_i: how many leaves of ``tree`` refer to condition i, for i < n."""
    o = [0] * n

    def walk(node: Node) -> None:
        if isinstance(node, Leaf):
            o[node.index] += 1
        else:
            for c in children_of(node):
                walk(c)

    walk(tree)
    return o


def to_text(tree: Node, conditions: Sequence[Condition]) -> str:
    if isinstance(tree, Leaf):
        return str(conditions[tree.index])
    op = " AND " if isinstance(tree, And) else " OR "
    parts = []
    for c in children_of(tree):
        s = to_text(c, conditions)
        parts.append(f"({s})" if isinstance(c, (And, Or)) and type(c) is not type(tree) else s)
    return op.join(parts)


# --------------------------------------------------------------------------------------------------
# realisable assignments (threshold implications)


def realisable(conditions: Sequence[Condition], values: Sequence[bool]) -> bool:
    """Can some real value of each aggregate give exactly these truth values?

    Per aggregate (same :attr:`Condition.statistic_key`), the true ``> a`` and false ``< b`` atoms give
    lower bounds (g > a, g ≥ b), the true ``< b`` and false ``> a`` atoms upper bounds (g < b, g ≤ a); the
    assignment is realisable iff the resulting interval is non-empty. Integrality and the aggregate's public
    range are ignored, which only declares *more* assignments realisable (fewer don't-cares): always sound.
    """
    lo: dict[Any, tuple[float, bool]] = {}  # key -> (bound, strict)
    hi: dict[Any, tuple[float, bool]] = {}

    def tighten(d: dict[Any, tuple[float, bool]], key: Any, bound: float, strict: bool, lower: bool) -> None:
        if key not in d:
            d[key] = (bound, strict)
            return
        b, s = d[key]
        better = bound > b if lower else bound < b
        if better or (bound == b and strict and not s):
            d[key] = (bound, strict)

    for cond, v in zip(conditions, values):
        key = cond.statistic_key
        if cond.op == ">":
            if v:
                tighten(lo, key, cond.threshold, True, True)
            else:
                tighten(hi, key, cond.threshold, False, False)
        else:
            if v:
                tighten(hi, key, cond.threshold, True, False)
            else:
                tighten(lo, key, cond.threshold, False, True)
    for key in lo.keys() & hi.keys():
        (a, sa), (b, sb) = lo[key], hi[key]
        if a > b or (a == b and (sa or sb)):
            return False
    return True


# --------------------------------------------------------------------------------------------------
# minimisation


@dataclass(frozen=True)
class MinimisedTree:
    """The result of :func:`minimise`: original and minimised indexed trees over the same conditions."""

    original: Node
    tree: Node
    conditions: tuple[Condition, ...]
    occurrences: tuple[int, ...]
    used_implications: bool = field(default=False)

    @property
    def text(self) -> str:
        return to_text(self.tree, self.conditions)

    @property
    def used(self) -> tuple[int, ...]:
        """Indices of the conditions the minimised tree still refers to."""
        return tuple(i for i, o in enumerate(self.occurrences) if o > 0)


def _leaves(tree: Node) -> int:
    if isinstance(tree, Leaf):
        return 1
    return sum(_leaves(c) for c in children_of(tree))


def _from_sympy(expr: Any, symbols: Sequence[Any]) -> Node | None:
    """Back from a sympy Boolean expression (None if it has a negation or is constant)."""
    import sympy

    index = {s: i for i, s in enumerate(symbols)}
    if isinstance(expr, sympy.Symbol):
        return Leaf(index[expr])
    if isinstance(expr, (sympy.And, sympy.Or)):
        kids = [k for a in expr.args if (k := _from_sympy(a, symbols)) is not None]
        if len(kids) < len(expr.args):
            return None
        kids.sort(key=_sort_key)
        return And(*kids) if isinstance(expr, sympy.And) else Or(*kids)
    return None  # Not, true, false


def _sort_key(node: Node) -> tuple[int, int]:
    if isinstance(node, Leaf):
        return (0, node.index)
    return (1, min(_sort_key(c)[1] for c in children_of(node)))


def minimise(tree: Node, *, use_implications: bool = True) -> MinimisedTree:
    """Minimise a condition tree (fewest leaf occurrences) with Quine–McCluskey (sympy).

    Both a minimal sum of products and a minimal product of sums are computed and the one with fewer
    leaves kept (the original tree if neither is smaller). With ``use_implications`` the unrealisable
    assignments (see :func:`realisable`) are don't-cares. A tree that is constant on realisable
    assignments (always true or never true) is refused: it is not a question about the data.
    """
    from sympy import symbols as make_symbols
    from sympy.logic import POSform, SOPform

    indexed, conds = index_conditions(tree)
    n = len(conds)
    syms = make_symbols(f"x0:{n}")
    minterms: list[list[int]] = []
    dontcares: list[list[int]] = []
    plain_minterms: list[list[int]] = []
    for bits in itertools.product((0, 1), repeat=n):
        value = evaluate(indexed, bits)
        if value:
            plain_minterms.append(list(bits))
        if use_implications and not realisable(conds, [bool(b) for b in bits]):
            dontcares.append(list(bits))
        elif value:
            minterms.append(list(bits))
    if not minterms:
        raise QueryError("the HAVING condition can never hold: nothing to decide")
    if len(minterms) + len(dontcares) == 2**n:
        raise QueryError("the HAVING condition always holds: nothing to decide")

    best: Node = indexed
    used_impl = False
    candidates: list[tuple[Node | None, bool]] = []
    for form in (SOPform, POSform):
        if dontcares:
            candidates.append((_from_sympy(form(syms, minterms, dontcares), syms), True))
        candidates.append((_from_sympy(form(syms, plain_minterms), syms), False))
    for cand, impl in candidates:
        if cand is not None and _leaves(cand) < _leaves(best):
            best, used_impl = cand, impl
    return MinimisedTree(indexed, best, conds, tuple(occurrences(best, n)), used_impl)


def conditions_of(tree: Node) -> tuple[Condition, ...]:
    """The distinct conditions of a tree, in order of first appearance."""
    return index_conditions(tree)[1]


def all_assignments(n: int) -> Iterable[tuple[bool, ...]]:
    return itertools.product((False, True), repeat=n)
