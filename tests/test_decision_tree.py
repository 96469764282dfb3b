"""Condition trees: minimisation (sympy Quine–McCluskey) against brute-force truth tables."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmagic.decision.tree import (
    And,
    Condition,
    Leaf,
    Or,
    avg,
    count,
    evaluate,
    index_conditions,
    minimise,
    realisable,
    sum_,
)
from dpmagic.errors import QueryError

POOL = [
    count(">", 100),
    count(">", 50),
    count("<", 20),
    avg("age", ">", 65),
    avg("age", "<", 5),
    sum_("hours", ">", 1000),
]


def trees(depth: int = 3):
    leaf = st.sampled_from(POOL)
    return st.recursive(
        leaf,
        lambda kids: st.one_of(
            st.lists(kids, min_size=2, max_size=3).map(lambda k: And(*k)),
            st.lists(kids, min_size=2, max_size=3).map(lambda k: Or(*k)),
        ),
        max_leaves=7,
    )


def _leaves(node) -> int:
    return 1 if isinstance(node, Leaf) else sum(_leaves(c) for c in node.children)


def _has_negation(node) -> bool:
    return not isinstance(node, (Leaf, And, Or)) or (
        not isinstance(node, Leaf) and any(_has_negation(c) for c in node.children)
    )


@settings(max_examples=150, deadline=None, derandomize=True)
@given(trees())
def test_minimised_tree_agrees_on_every_realisable_assignment(tree) -> None:
    try:
        m = minimise(tree)
    except QueryError:
        return  # constant on realisable assignments: refused
    n = len(m.conditions)
    assert not _has_negation(m.tree)
    assert _leaves(m.tree) <= _leaves(m.original)
    for bits in itertools.product((False, True), repeat=n):
        if realisable(m.conditions, bits):
            assert evaluate(m.tree, bits) == evaluate(m.original, bits)
    # without implications the minimised tree is equivalent on *all* assignments
    try:
        plain = minimise(tree, use_implications=False)
    except QueryError:
        return
    for bits in itertools.product((False, True), repeat=n):
        assert evaluate(plain.tree, bits) == evaluate(plain.original, bits)


def test_factorisation_reduces_occurrences() -> None:
    a, b, c = count(">", 100), avg("age", ">", 65), sum_("hours", ">", 10)
    m = minimise(Or(And(a, b), And(a, c)), use_implications=False)
    assert m.occurrences == (1, 1, 1)
    assert _leaves(m.tree) == 3
    assert "COUNT(*) > 100 AND" in m.text


def test_threshold_implication_drops_a_condition() -> None:
    # COUNT > 100 implies COUNT > 50: (COUNT > 100) OR (COUNT > 50 AND AVG > 65) ... OR COUNT > 120 (implied)
    t = Or(count(">", 100), And(count(">", 50), avg("age", ">", 65)), count(">", 120))
    m = minimise(t)
    assert m.occurrences[2] == 0 or m.occurrences[-1] == 0
    assert len(m.used) == 3
    # COUNT > 100 AND COUNT > 50 is COUNT > 100
    m2 = minimise(And(count(">", 100), count(">", 50)))
    assert m2.used == (0,)


def test_realisable_against_a_grid_of_values() -> None:
    conds = [count(">", 2), count(">", 4), count("<", 3), count("<", 5), avg("age", ">", 1)]
    grid = [x / 2 for x in range(-2, 14)]  # thresholds and midpoints between them
    for bits in itertools.product((False, True), repeat=len(conds)):
        want = any(
            all(((g > c.threshold) if c.op == ">" else (g < c.threshold)) == b for c, b in zip(conds[:4], bits[:4]))
            for g in grid
        )
        assert realisable(conds, bits) == want


def test_bad_trees_are_refused() -> None:
    with pytest.raises(QueryError, match="never hold"):
        minimise(And(count(">", 100), count("<", 50)))
    with pytest.raises(QueryError, match="always holds"):
        minimise(Or(count(">", 100), count("<", 150)))
    with pytest.raises(QueryError):
        Condition("count", "age", ">", 1)
    with pytest.raises(QueryError):
        Condition("median", "age", ">", 1)  # type: ignore[arg-type]
    with pytest.raises(QueryError):
        count(">", float("nan"))
    with pytest.raises(QueryError, match="empty"):
        index_conditions(And())
