"""Admission objects (issue 11): one computation per admission, checked against brute force.

``admit`` computes the bounds after adding a node; ``commit`` installs them without solving again (or
recomputes when the engine changed in between).  Under a ``charged`` bound the charged value is exact and
the display-only bounds are proven intervals: ``lower ≤ γ ≤ upper``, the witness's load is ``lower``, and
``exact`` only when the interval is a point.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from overlap_support import FAST, SCHEMA, boxes, brute_clique, brute_max, row_load, weights_st, workloads

from dpmagic.domain.sets import Box
from dpmagic.overlap import OverlapEngine
from dpmagic.overlap.rounding import sum_up

KINDS = (None, "exact", "clique", "chromatic", "sequential")


def _sound(b, bx, ws) -> None:
    """Every reported bound is a proven bound of the brute-force γ / ω."""
    truth = brute_max(SCHEMA, bx, ws)
    ov = b.overlap
    assert ov.lower <= truth + 1e-12 <= ov.upper + 2e-12
    if ov.exact:
        assert ov.lower == pytest.approx(truth, abs=1e-12) == ov.upper
    else:
        assert ov.upper > ov.lower
    if ov.witness is not None and bx:
        assert row_load(bx, ws, ov.witness) == pytest.approx(ov.lower, abs=1e-12)
    omega = brute_clique(bx, ws) if bx else 0.0
    assert truth - 1e-12 <= omega <= b.clique + 1e-12
    if b.clique_exact:
        assert b.clique == pytest.approx(omega)
    assert b.clique <= b.chromatic + 1e-12 <= b.sequential + 2e-12
    assert b.sequential == sum_up(ws)  # exactly: the smallest float ≥ the exact Σw


@FAST
@given(workloads, boxes(), weights_st)
def test_admission_equals_from_scratch(wl, box, w) -> None:
    """The admission's bounds are those of an engine built from scratch with the node added."""
    eng = OverlapEngine(SCHEMA)
    for b, x in wl:
        eng.add(b, x)
    adm = eng.admit(box, w)
    bx = [b for b, _ in wl] + [box]
    ws = [x for _, x in wl] + [w]
    truth = brute_max(SCHEMA, bx, ws)
    assert adm.bounds.overlap.exact and adm.bounds.overlap.lower == pytest.approx(truth, abs=1e-12)
    scratch = OverlapEngine.from_boxes(SCHEMA, bx, ws).bounds()
    assert adm.bounds.overlap.lower == pytest.approx(scratch.overlap.lower, abs=1e-12)
    assert adm.bounds.clique_exact and adm.bounds.clique == pytest.approx(scratch.clique)
    _sound(adm.bounds, bx, ws)


@FAST
@given(workloads, boxes(), weights_st)
def test_preview_then_commit_equals_add(wl, box, w) -> None:
    """``commit(admit(x))`` leaves the engine exactly as ``add(x)`` does, and nothing changes before the commit."""
    a, b = OverlapEngine(SCHEMA), OverlapEngine(SCHEMA)
    for bb, x in wl:
        a.add(bb, x)
        b.add(bb, x)
    before = a.bounds()
    adm = a.admit(box, w)
    assert a.bounds() == before and len(a) == len(wl)  # admitting changes nothing
    qa = a.commit(adm)
    qb = b.add(box, w)
    assert qa == qb == len(wl)
    ba, bb2 = a.bounds(), b.bounds()
    assert ba.overlap.lower == bb2.overlap.lower and ba.overlap.upper == bb2.overlap.upper
    assert ba.clique == bb2.clique and ba.chromatic == bb2.chromatic and ba.sequential == bb2.sequential
    assert list(a.coloring()) == list(b.coloring())
    assert adm.bounds.overlap.lower == ba.overlap.lower and adm.bounds.clique == ba.clique


@FAST
@given(workloads, boxes(), boxes(), weights_st)
def test_stale_admission_is_recomputed(wl, box, other, w) -> None:
    """An admission committed after the engine changed is recomputed: the result is that of two adds."""
    eng = OverlapEngine(SCHEMA)
    for b, x in wl:
        eng.add(b, x)
    adm = eng.admit(box, w)
    eng.add(other, 1.0)  # the engine changes between preview and commit
    assert adm.state != eng.state
    eng.commit(adm)
    bx = [b for b, _ in wl] + [other, box]
    ws = [x for _, x in wl] + [1.0, w]
    b = eng.bounds()
    assert b.overlap.exact and b.overlap.lower == pytest.approx(brute_max(SCHEMA, bx, ws), abs=1e-12)
    _sound(b, bx, ws)


@FAST
@given(workloads, st.sampled_from(KINDS))
def test_charged_bound_is_exact_and_display_bounds_sound(wl, kind) -> None:
    """Under each charged bound: after every admission the charged value is the one of a full engine (the
    colouring for ``chromatic``, Σw for ``sequential``, γ / ω exact for ``exact`` / ``clique``); every other
    bound is a proven interval; ``bounds()`` refines the display-only ones (small instances: exact)."""
    eng = OverlapEngine(SCHEMA, charged=kind)
    full = OverlapEngine(SCHEMA)
    bx: list[Box] = []
    ws: list[float] = []
    for b, x in wl:
        adm = eng.admit(b, x)
        bx.append(b)
        ws.append(x)
        _sound(adm.bounds, bx, ws)
        ref = full.admit(b, x).bounds
        if kind in ("exact", "clique"):
            assert adm.bounds.overlap.exact
            assert adm.bounds.charge(kind)[0] == pytest.approx(ref.charge(kind)[0])
        if kind == "sequential":
            assert adm.bounds.charge(kind)[0] == ref.charge(kind)[0]
        eng.commit(adm)
        full.add(b, x)
    b = eng.bounds()
    _sound(b, bx, ws)
    assert b.overlap.exact and b.clique_exact  # refined for display within the budget (tiny instances)
    assert b.chromatic == full.bounds().chromatic


@FAST
@given(workloads, weights_st)
def test_whole_domain_and_duplicate_queries(wl, w) -> None:
    """A whole-domain query and a duplicate of a registered one give exact, sound bounds."""
    eng = OverlapEngine(SCHEMA)
    for b, x in wl:
        eng.add(b, x)
    bx = [b for b, _ in wl]
    ws = [x for _, x in wl]
    for box in [Box({})] + bx[:2]:
        adm = eng.admit(box, w)
        assert adm.bounds.overlap.exact
        assert adm.bounds.overlap.lower == pytest.approx(brute_max(SCHEMA, bx + [box], ws + [w]), abs=1e-12)
        _sound(adm.bounds, bx + [box], ws + [w])


# ------------------------------------------------------------------------------------------------------
# the floor of an admission's region search, on instances too large for the load tensor (searches run)
# ------------------------------------------------------------------------------------------------------
def _wide_schema(m: int = 24):
    from dpmagic.domain.schema import CategoricalColumn, Schema

    return Schema({f"c{i}": CategoricalColumn(f"c{i}", ("a", "b", "c", "d")) for i in range(m)})


@st.composite
def wide_workloads(draw):
    from dpmagic.domain.sets import CategorySet

    schema = _wide_schema()
    names = schema.names
    out = []
    for _ in range(draw(st.integers(5, 40))):
        cols = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
        cons = {
            c: CategorySet.of_indices(schema[c], draw(st.sets(st.integers(0, 3), min_size=1, max_size=3))) for c in cols
        }
        out.append((Box(cons), draw(weights_st)))
    return schema, out


@FAST
@given(wide_workloads(), st.sampled_from([-1.0, 0.0, 0.5, 1.0, 3.0]))
def test_region_floor_is_sound(data, delta) -> None:
    """With ``floor``, the region result is a proven interval around the exact max R; exact whenever R > floor."""
    from dpmagic.overlap import BoxStore, solve_overlap

    schema, wl = data
    store = BoxStore(schema)
    store.extend([b for b, _ in wl[:-1]], [w for _, w in wl[:-1]])
    region = wl[-1][0]
    ref = solve_overlap(store, region=region)
    assert ref.exact
    floor = ref.lower - delta
    r = solve_overlap(store, region=region, floor=floor)
    assert r.lower <= ref.lower + 1e-12 <= r.upper + 2e-12
    assert row_load(store.boxes, store.weights[: store.n].tolist(), r.witness) == pytest.approx(r.lower)
    assert region.contains_row(r.witness)
    if r.exact:
        assert r.lower == pytest.approx(ref.lower)
    if ref.lower > floor:
        assert r.exact
    else:
        assert r.upper <= max(floor, ref.lower) + 1e-9
