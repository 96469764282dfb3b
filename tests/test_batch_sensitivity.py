"""Exact batch sensitivity of box counting queries vs brute force over every row / every neighbouring pair."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tests_support import audit_gap_batch, brute_batch_sensitivity, oracle_rows

from dpmagic.batch.sensitivity import batch_sensitivity
from dpmagic.domain.schema import CategoricalColumn, NumericColumn, Schema
from dpmagic.domain.sets import Box, CategorySet, Interval, IntervalSet
from dpmagic.query.sql import parse_query

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


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(box(), min_size=1, max_size=6))
def test_batch_sensitivity_matches_brute_force(boxes):
    res = batch_sensitivity(SCHEMA, boxes)
    add_remove, replace = brute_batch_sensitivity(boxes, ROWS)
    assert res.add_remove_l1 == add_remove
    assert res.add_remove_l2 == math.sqrt(add_remove)
    assert res.replace_l1 == replace
    assert res.replace_l2 == math.sqrt(replace)
    # Inan et al. 2017's bounds are upper bounds of the exact replace-one value, never below it
    assert replace <= res.inan_clique_pair_bound <= res.inan_clique_bound  # |C1 ∪ C2| ≤ min(k, 2·MCS)
    assert replace <= 2 * add_remove


def test_single_box_and_identical_boxes():
    b = Box({"c": CategorySet.of_values(SCHEMA["c"], ["a"])})
    res = batch_sensitivity(SCHEMA, [b])
    assert (res.add_remove_l1, res.replace_l1) == (1, 1)
    assert res.inan_clique_pair_bound == 1  # pairing the clique with itself: never 0
    res = batch_sensitivity(SCHEMA, [b, b, b])
    assert (res.add_remove_l1, res.replace_l1, res.inan_clique_bound) == (3, 3, 3)
    # two disjoint boxes: a row moving from one to the other changes both counts
    b2 = Box({"c": CategorySet.of_values(SCHEMA["c"], ["b"])})
    res = batch_sensitivity(SCHEMA, [b, b2])
    assert (res.add_remove_l1, res.replace_l1) == (1, 2)
    assert batch_sensitivity(SCHEMA, []).replace_l1 == 0


# -- beyond 2^53 and near the double limits (issue 24, finding 1) ---------------------------------------

OFF = 2**60
I64 = 2**63 - 1
DMAX = 1.7976931348623157e308
BIG = Schema(
    {
        "c": CategoricalColumn("c", ("a", "b", "c")),
        "s": NumericColumn("s", "int", OFF, OFF + 5),  # a small domain shifted by 2^60: brute-forced value by value
        "n": NumericColumn("n", "int", -I64, I64),  # the whole int64 range (but its minimum)
        "f": NumericColumn("f", "float", -DMAX, DMAX),  # the whole double range
    }
)
_N_ENDS = [-I64 - 5, -I64, -I64 + 1, -OFF, 0, OFF - 1, OFF, OFF + 1, OFF + 2, OFF + 10, I64 - 1, I64, I64 + 5]
_D1 = math.nextafter(DMAX, 0.0)
_D2 = math.nextafter(_D1, 0.0)
_F_ENDS = [-math.inf, -DMAX, -_D1, -1e308, 0.0, 1e308, 1.5e308, _D2, _D1, DMAX, math.inf]


@st.composite
def _intervals(draw, ends: list) -> list[Interval]:
    out = []
    for _ in range(draw(st.integers(1, 2))):  # two pieces: a box with a gap (non-Helly)
        a, b = sorted(draw(st.lists(st.sampled_from(ends), min_size=2, max_size=2)))
        out.append(Interval(a, b, draw(st.booleans()), draw(st.booleans())))
    return out


@st.composite
def big_box(draw) -> Box:
    cons = {}
    if draw(st.booleans()):
        cons["c"] = CategorySet.of_indices(BIG["c"], draw(st.sets(st.integers(0, 2), max_size=3)))
    if draw(st.booleans()):
        cons["s"] = IntervalSet.of(BIG["s"], draw(_intervals(list(range(OFF - 1, OFF + 7)))))
    if draw(st.booleans()):
        cons["n"] = IntervalSet.of(BIG["n"], draw(_intervals(_N_ENDS)))
    if draw(st.booleans()):
        cons["f"] = IntervalSet.of(BIG["f"], draw(_intervals(_F_ENDS)))
    return Box(cons)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(big_box(), min_size=1, max_size=5), st.integers(1, 3))
# an open gap between two adjacent doubles: a real atom holding no double (the engine's witness cannot reach it)
@example([Box({"f": IntervalSet.of(BIG["f"], [Interval(-DMAX, -_D1, False, False)])})], 2)
def test_batch_sensitivity_beyond_2_53_and_near_double_max_matches_brute_force(boxes, repeat):
    """Both relations, L1 and L2, against the brute force over rows meeting every atom (a true oracle: every
    value of the shifted column, every end of the int64 column with its integer neighbours, every end of the
    float column with its neighbouring doubles and the exact (Fraction) midpoints of the gaps); boxes are
    repeated so that a missed atom costs more than one."""
    boxes = boxes * repeat
    res = batch_sensitivity(BIG, boxes)
    add_remove, replace = brute_batch_sensitivity(boxes, oracle_rows(BIG, boxes))
    assert (res.add_remove_l1, res.replace_l1) == (add_remove, replace)
    assert (res.add_remove_l2, res.replace_l2) == (math.sqrt(add_remove), math.sqrt(replace))
    assert replace <= res.inan_clique_pair_bound <= res.inan_clique_bound and replace <= 2 * add_remove


def _audit_int_batch() -> tuple[Schema, list[str]]:
    schema, sql = audit_gap_batch()
    return Schema.from_dict(schema), sql


def _audit_float_batch() -> tuple[Schema, list[str]]:
    """The same shape near the double maximum: the midpoints of 1e308, 1.5e308 and 1.6e308 overflow to inf."""
    schema = Schema({"f": NumericColumn("f", "float", -DMAX, DMAX)})
    gaps = ["f > 1e308 AND f < 1.5e308", "f > 1.5e308 AND f < 1.6e308", "f <= 0"]
    return schema, [f"SELECT COUNT(*) FROM t WHERE {g}" for g in gaps for _ in range(5)]


@pytest.mark.parametrize("batch", [_audit_int_batch, _audit_float_batch])
def test_audit_batch_replace_one_is_exact(batch) -> None:
    """A row moves from the box into a point of the gap: 10 answers change (5 down, 5 up), not 5 or fewer."""
    schema, sql = batch()
    boxes = [parse_query(q, schema).coverage for q in sql]
    res = batch_sensitivity(schema, boxes)
    assert brute_batch_sensitivity(boxes, oracle_rows(schema, boxes)) == (5, 10)
    assert (res.add_remove_l1, res.replace_l1, res.replace_l2) == (5, 10, math.sqrt(10))
