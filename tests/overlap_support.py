"""Brute-force oracles and hypothesis strategies of the overlap engine's tests (not a test module): the maximum
load and clique of boxes over a small declared domain, enumerated row by row."""

from __future__ import annotations

import itertools
import math

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from dpmagic.domain.schema import CategoricalColumn, NumericColumn, Schema
from dpmagic.domain.sets import Box, CategorySet, Interval, IntervalSet

# ------------------------------------------------------------------------------------------------------
# brute force
# ------------------------------------------------------------------------------------------------------


def _candidates(schema: Schema, boxes: list[Box], region: Box | None = None) -> dict[str, list]:
    """Per column a list of values meeting every atom of the boxes (whole domain for small ones)."""
    out: dict[str, list] = {}
    allb = boxes + ([region] if region is not None else [])
    for name, col in schema.columns.items():
        if isinstance(col, CategoricalColumn):
            out[name] = list(col.values)
        elif col.is_int:
            out[name] = list(range(int(col.lower), int(col.upper) + 1))
        else:
            pts = {float(col.lower), float(col.upper)}
            for b in allb:
                vs = b.constraints.get(name)
                if isinstance(vs, IntervalSet):
                    for iv in vs.intervals:
                        pts.update((iv.lo, iv.hi))
            s = sorted(pts)
            out[name] = s + [(a + b) / 2 for a, b in zip(s, s[1:])]
    return out


def brute_max(schema, boxes, weights, region=None):
    cand = _candidates(schema, boxes, region)
    names = list(cand)
    best = 0.0
    for combo in itertools.product(*(cand[n] for n in names)):
        row = dict(zip(names, combo))
        if region is not None and not region.contains_row(row):
            continue
        load = math.fsum(w for b, w in zip(boxes, weights) if not b.is_empty() and b.contains_row(row))
        best = max(best, load)
    return best


def brute_clique(boxes, weights):
    n = len(boxes)
    best = 0.0
    for r in range(1, n + 1):
        for sub in itertools.combinations(range(n), r):
            if all(boxes[i].overlaps(boxes[j]) for i, j in itertools.combinations(sub, 2)) and all(
                not boxes[i].is_empty() for i in sub
            ):
                best = max(best, math.fsum(weights[i] for i in sub))
    return best


def row_load(boxes, weights, row):
    return math.fsum(w for b, w in zip(boxes, weights) if not b.is_empty() and b.contains_row(row))


def admit_each(engine, items):
    """Admit and commit each ``(box, weight)`` of ``items`` in turn on ``engine``; after each, yield the
    admission's overlap bounds with the boxes and weights registered so far (lists, grown in place)."""
    bx, ws = [], []
    for b, x in items:
        adm = engine.admit(b, x)
        engine.commit(adm)
        bx.append(b)
        ws.append(x)
        yield adm.bounds.overlap, bx, ws


# ------------------------------------------------------------------------------------------------------
# strategies
# ------------------------------------------------------------------------------------------------------
SCHEMA = Schema(
    {
        "c3": CategoricalColumn("c3", ("a", "b", "c")),
        "c4": CategoricalColumn("c4", (1, 2, 3, 4)),
        "i": NumericColumn("i", "int", 0, 6),
        "f": NumericColumn("f", "float", 0.0, 4.0),
    }
)


@st.composite
def value_sets(draw, name):
    col = SCHEMA[name]
    if isinstance(col, CategoricalColumn):
        idx = draw(st.sets(st.integers(0, col.size - 1), max_size=col.size))
        cs = CategorySet.of_indices(col, idx)
        return cs.complement() if draw(st.booleans()) and draw(st.booleans()) else cs
    grid = [0, 1, 2, 3, 4, 5, 6] if col.is_int else [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0]
    k = draw(st.integers(1, 3))
    ivs = []
    for _ in range(k):
        a, b = sorted(draw(st.lists(st.sampled_from(grid), min_size=2, max_size=2)))
        ivs.append(Interval(float(a), float(b), draw(st.booleans()), draw(st.booleans())))
    s = IntervalSet.of(col, ivs)
    return s.complement() if draw(st.integers(0, 4)) == 0 else s


@st.composite
def boxes(draw):
    cons = {}
    for name in SCHEMA.names:
        if draw(st.integers(0, 2)) == 0:
            cons[name] = draw(value_sets(name))
    return Box(cons)


weights_st = st.sampled_from([1.0, 0.5, 2.0, 0.25, 3.0, 1.5])
workloads = st.lists(st.tuples(boxes(), weights_st), min_size=0, max_size=9)

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_sound(ov, boxes, weights, schema=SCHEMA, region=None):  # type: ignore[no-untyped-def]
    """An engine or solver result against brute force: lower ≤ γ ≤ upper, exact only when the two are equal (then
    equal to γ), and the witness's load is the lower end (``region``: the maximum over it, the witness inside it)."""
    import pytest

    from dpmagic.overlap.rounding import is_exact

    truth = brute_max(schema, boxes, weights, region)
    assert ov.lower <= truth + 1e-12 and truth <= ov.upper
    assert ov.exact == is_exact(ov.lower, ov.upper)
    if ov.exact:
        assert ov.lower == pytest.approx(truth, abs=1e-12)
    if ov.witness is not None and boxes:
        assert row_load(boxes, weights, ov.witness) == pytest.approx(ov.lower, abs=1e-12)
        if region is not None:
            assert region.contains_row(ov.witness)


class EveryOtherClock:
    """A stand-in for a search module's ``time``: every second reading is past any deadline (a search pauses after
    each node), for deterministic forced timeouts."""

    def __init__(self) -> None:
        self.k = 0

    def perf_counter(self) -> float:
        self.k += 1
        return math.inf if self.k % 2 == 0 else 0.0


def tri_boxes() -> list[Box]:
    """Three pairwise overlapping boxes with no common row (Smith et al. 2022, "Making the Most of Parallel
    Composition in Differential Privacy", PoPETs 2022(1), Prop. 4): γ = 2 weights, a clique of 3."""
    c3, c4, i = SCHEMA["c3"], SCHEMA["c4"], SCHEMA["i"]
    return [
        Box({"c3": CategorySet.of_indices(c3, [0, 1]), "i": IntervalSet.of(i, [Interval(0, 3)])}),
        Box({"c3": CategorySet.of_indices(c3, [1, 2]), "c4": CategorySet.of_indices(c4, [1, 2])}),
        Box({"c3": CategorySet.of_indices(c3, [0, 2]), "c4": CategorySet.of_indices(c4, [0, 1])}),
    ]


def problem_of(boxes, weights, region=None, schema=SCHEMA):  # type: ignore[no-untyped-def]
    """``(store, problem)``: the boxes in a fresh :class:`BoxStore`, the compressed problem of those alive (and
    overlapping ``region``, restricted to it, when given)."""
    import numpy as np

    from dpmagic.overlap.encoding import BoxStore, build_problem

    store = BoxStore(schema)
    store.extend(boxes, weights)
    ids = np.flatnonzero(store.alive[: store.n])
    if region is not None:
        ids = ids[store.overlap_mask(region)[ids]]
    return store, build_problem(store, ids, region)
