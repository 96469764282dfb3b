"""Top sets (issue 28, session 18; :mod:`dpmagic.overlap.topset`) against brute force.

Checked row by row over the small declared domain: every row outside the enumerated cells has load at most the
threshold, every row inside a cell at most that cell's load (a cell's rows all have that load), each cell's row lies
in it; with a small cap the threshold rises and the same holds; and a top set's bound over any box, after later
nodes were added to it, is at least the brute-force maximum over that box of all the nodes.
"""

from __future__ import annotations

import itertools
import time

from hypothesis import given
from hypothesis import strategies as st
from overlap_support import FAST, SCHEMA, _candidates, boxes, brute_max, row_load

from dpmagic.domain.schema import CategoricalColumn
from dpmagic.domain.sets import Box, CategorySet, Interval, IntervalSet
from dpmagic.overlap.encoding import BoxStore
from dpmagic.overlap.rounding import sum_up
from dpmagic.overlap.topset import TopSet, enumerate_top

weights = st.sampled_from([1.0, 0.5, 2.0, 0.25, 3.0, 1.5, 0.1, 0.3])
items = st.lists(st.tuples(boxes(), weights), min_size=1, max_size=9)


def _point(row: dict) -> Box:  # type: ignore[type-arg]
    cons = {}
    for name, col in SCHEMA.columns.items():
        v = row[name]
        if isinstance(col, CategoricalColumn):
            cons[name] = CategorySet.of_values(col, [v])
        else:
            cons[name] = IntervalSet.of(col, [Interval(float(v), float(v), True, True)])
    return Box(cons)


def _rows(bs: list[Box]) -> list[dict]:  # type: ignore[type-arg]
    cand = _candidates(SCHEMA, bs)
    names = list(cand)
    return [dict(zip(names, combo)) for combo in itertools.product(*(cand[n] for n in names))]


def _store(bs: list[Box], ws: list[float]) -> BoxStore:
    st_ = BoxStore(SCHEMA)
    st_.extend(bs, ws)
    return st_


def _check(bs: list[Box], ws: list[float], frac: float, cap: int) -> None:
    truth = brute_max(SCHEMA, bs, ws)
    top = enumerate_top(_store(bs, ws), frac * truth - 1e-9, time.perf_counter() + 60.0, cap=cap)
    if top is None:  # nothing constrained: no problem columns
        assert all(not b.constraints or b.is_empty() for b in bs)
        return
    assert len(top.loads) <= cap
    assert top.upper >= truth
    ts = TopSet(top, SCHEMA)
    for i, r in enumerate(top.rows):  # each cell's row lies in it, with that cell's load
        assert ts.meets(_point({**{n: _candidates(SCHEMA, bs)[n][0] for n in SCHEMA.names}, **r}))[i]
    for row in _rows(bs):
        load = row_load(bs, ws, row)
        inside = ts.meets(_point(row))
        if inside.any():
            assert load <= top.loads[inside].min() + 1e-12  # the cells are disjoint: one cell, its load
        else:
            assert load <= top.threshold + 1e-12


@given(items, st.sampled_from([0.0, 0.3, 0.6, 0.9]))
@FAST
def test_every_row_above_the_threshold_is_in_a_cell_of_at_least_its_load(wl, frac) -> None:  # type: ignore[no-untyped-def]
    bs = [b for b, _ in wl]
    ws = [w for _, w in wl]
    _check(bs, ws, frac, 10**6)


@given(items, st.sampled_from([0.0, 0.5]), st.integers(1, 3))
@FAST
def test_a_cap_raises_the_threshold_and_stays_sound(wl, frac, cap) -> None:  # type: ignore[no-untyped-def]
    bs = [b for b, _ in wl]
    ws = [w for _, w in wl]
    _check(bs, ws, frac, cap)


@given(items, items, boxes(), st.sampled_from([0.0, 0.5, 0.9]))
@FAST
def test_the_bound_over_a_box_covers_the_later_nodes(first, later, region, frac) -> None:  # type: ignore[no-untyped-def]
    """A top set of the first nodes, then the later ones added to it: its bound over ``region`` (with the later
    nodes meeting it as ``later``) is at least the brute-force maximum over ``region`` of all the nodes."""
    bs = [b for b, _ in first]
    ws = [w for _, w in first]
    top = enumerate_top(_store(bs, ws), frac * brute_max(SCHEMA, bs, ws) - 1e-9, time.perf_counter() + 60.0)
    if top is None or region.is_empty():
        return
    ts = TopSet(top, SCHEMA)
    for b, w in later:
        ts.add(b, w)
    lb = [b for b, _ in later]
    lw = [w for _, w in later]
    meeting = [w for b, w in later if not b.is_empty() and b.overlaps(region)]
    bound = ts.bound(region, sum_up(meeting))
    assert bound >= brute_max(SCHEMA, bs + lb, ws + lw, region)
