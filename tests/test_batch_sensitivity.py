"""Exact batch sensitivity of box counting queries vs brute force over every row / every neighbouring pair."""

from __future__ import annotations

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from dpmagic.batch.sensitivity import batch_sensitivity
from dpmagic.domain.schema import CategoricalColumn, NumericColumn, Schema
from dpmagic.domain.sets import Box, CategorySet, Interval, IntervalSet

SCHEMA = Schema(
    {
        "c": CategoricalColumn("c", ("a", "b", "c")),
        "i": NumericColumn("i", "int", 0, 5),
    }
)
ROWS = [{"c": c, "i": i} for c in ("a", "b", "c") for i in range(6)]


@st.composite
def box(draw):
    cons = {}
    if draw(st.booleans()):
        cons["c"] = CategorySet.of_indices(SCHEMA["c"], draw(st.sets(st.integers(0, 2), min_size=1)))
    if draw(st.booleans()):
        a, b = sorted(draw(st.lists(st.integers(0, 5), min_size=2, max_size=2)))
        cons["i"] = IntervalSet.of(SCHEMA["i"], [Interval(float(a), float(b), draw(st.booleans()), True)])
    return Box(cons)


def _pop(boxes, row):
    return frozenset(j for j, b in enumerate(boxes) if not b.is_empty() and b.contains_row(row))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(box(), min_size=1, max_size=6))
def test_batch_sensitivity_matches_brute_force(boxes):
    res = batch_sensitivity(SCHEMA, boxes)
    pops = [_pop(boxes, r) for r in ROWS]
    add_remove = max(len(p) for p in pops)  # D' = D ∪ {r}: every query containing r changes by 1
    replace = max(len(p ^ q) for p, q in itertools.product(pops, pops))  # r → r'
    assert res.add_remove_l1 == add_remove
    assert res.add_remove_l2 == math.sqrt(add_remove)
    assert res.replace_l1 == replace
    assert res.replace_l2 == math.sqrt(replace)
    # Inan et al. 2017's bounds are upper bounds of the exact replace-one value, never below it
    assert replace <= res.seed001_b2 <= res.seed001_b1  # |C1 ∪ C2| ≤ min(k, 2·MCS)
    assert replace <= 2 * add_remove


def test_single_box_and_identical_boxes():
    b = Box({"c": CategorySet.of_values(SCHEMA["c"], ["a"])})
    res = batch_sensitivity(SCHEMA, [b])
    assert (res.add_remove_l1, res.replace_l1) == (1, 1)
    assert res.seed001_b2 == 1  # pairing the clique with itself: never 0
    res = batch_sensitivity(SCHEMA, [b, b, b])
    assert (res.add_remove_l1, res.replace_l1, res.seed001_b1) == (3, 3, 3)
    # two disjoint boxes: a row moving from one to the other changes both counts
    b2 = Box({"c": CategorySet.of_values(SCHEMA["c"], ["b"])})
    res = batch_sensitivity(SCHEMA, [b, b2])
    assert (res.add_remove_l1, res.replace_l1) == (1, 2)
    assert batch_sensitivity(SCHEMA, []).replace_l1 == 0
