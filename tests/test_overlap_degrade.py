"""Graceful degradation on by default (issue 28, session 9b), against brute force (helpers of
``test_overlap_engine``).

A charged engine's admission searches its region for ``quick_time_limit`` first, searches on only when the slack
could matter (wider than ``charge_rel_slack``: up to ``hard_time_limit``; straddling the budget: up to
``near_time_limit`` < 1 s, never the whole ``time_limit``), and charges the proven upper end.  Every path is checked
for: γ ≤ reported upper, lower ≤ γ, the witness's load = lower, exact only when the two are equal, and the
recovered exact γ equal to a from-scratch solve.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from overlap_support import FAST, SCHEMA, assert_sound, boxes, brute_max, row_load, tri_boxes

from dpmagic.accountant.accountant import Accountant
from dpmagic.accountant.currency import parse_budget
from dpmagic.accountant.ledger import Ledger
from dpmagic.domain.sets import Box, CategorySet
from dpmagic.errors import BudgetExceededError
from dpmagic.overlap import OverlapEngine, PortfolioConfig, max_overlap
from dpmagic.overlap.engine import HARD_TIME_LIMIT, NEAR_TIME_LIMIT, QUICK_TIME_LIMIT
from dpmagic.overlap.rounding import is_exact

#: HiGHS alone: on these small instances it is the one step a zero time limit stops (no tensor, no scoped search)
HIGHS = PortfolioConfig(steps=frozenset({"milp"}))
#: no time for any search: every region result is a proven interval, never exact by search
STARVED = dict(solver=HIGHS, quick_time_limit=0.0, hard_time_limit=0.0, near_time_limit=0.0, retighten_seconds=0.0)
weights = st.sampled_from([0.01, 0.037, 0.05, 0.1, 0.083, 0.3, 0.07, 0.5, 1.25])
workloads = st.lists(st.tuples(boxes(), weights), min_size=1, max_size=8)


_tri = tri_boxes


def test_degradation_is_on_by_default_for_charged_engines() -> None:
    """A charged engine (the accountant's) degrades gracefully without opting in; the near-budget cap is below
    1 s, so no admission's region search waits for ``time_limit``."""
    eng = OverlapEngine(SCHEMA, charged="exact")
    assert eng.quick_time_limit == QUICK_TIME_LIMIT
    assert eng.near_time_limit == NEAR_TIME_LIMIT < 1.0
    assert eng.hard_time_limit < 1.0
    assert OverlapEngine(SCHEMA, quick_time_limit=None).quick_time_limit is None  # the old behaviour, opt-out


def test_near_budget_search_is_capped_and_charges_the_proven_upper() -> None:
    """An admission straddling the budget searches for ``near_time_limit``, not the whole ``time_limit``: with
    no time at all it keeps the proven interval [1.0, ≥ 1.5] and charges its upper end (above the budget, so
    the accountant refuses it); with the default cap the same admission is exact (γ = 1.0)."""
    tri = _tri()
    starved = OverlapEngine(SCHEMA, charged="exact", time_limit=10.0, charge_rel_slack=0.0, **STARVED)
    starved.add(tri[0], 0.5)
    starved.add(tri[1], 0.5)
    adm = starved.admit(tri[2], 0.5, budget=1.2)
    ov = adm.bounds.overlap
    assert not ov.exact and ov.lower == 1.0 and ov.upper >= 1.5
    value, label = adm.bounds.charge("exact")
    assert value >= 1.5 > 1.2 and label == "overlap-upper"
    assert_sound(ov, tri, [0.5, 0.5, 0.5])
    cfg = {**STARVED, "near_time_limit": NEAR_TIME_LIMIT}
    capped = OverlapEngine(SCHEMA, charged="exact", charge_rel_slack=0.0, **cfg)
    capped.add(tri[0], 0.5)
    capped.add(tri[1], 0.5)
    adm = capped.admit(tri[2], 0.5, budget=1.2)
    assert adm.bounds.overlap.exact and adm.bounds.overlap.lower == 1.0


@given(workloads, st.lists(st.floats(0.0, 3.0), min_size=8, max_size=8))
@FAST
def test_starved_admissions_near_and_far_from_the_budget_are_sound(wl, budgets) -> None:
    """With no search time at all (near the budget or not), every admission's bounds and every committed γ are
    proven (brute force); the charged value is ≥ the true γ; ``retighten`` with time recovers the exact γ, equal
    to a from-scratch solve."""
    eng = OverlapEngine(SCHEMA, charged="exact", **STARVED)
    bx: list[Box] = []
    ws: list[float] = []
    for (b, w), budget in zip(wl, budgets):
        adm = eng.admit(b, w, budget=budget)
        assert_sound(adm.bounds.overlap, [*bx, b], [*ws, w])
        assert adm.bounds.charge("exact")[0] >= brute_max(SCHEMA, [*bx, b], [*ws, w])
        eng.commit(adm)
        bx.append(b)
        ws.append(w)
        assert_sound(eng.overlap(), bx, ws)
    eng.quick_time_limit, eng.solver = 2.0, PortfolioConfig()
    assert eng.retighten(30.0)
    ov = eng.overlap()
    assert_sound(ov, bx, ws)
    assert ov.exact and ov.lower == pytest.approx(max_overlap(bx, ws, SCHEMA).lower, abs=1e-12)


@given(workloads, st.lists(st.floats(0.0, 3.0), min_size=8, max_size=8))
@FAST
def test_default_engine_is_exact_and_equals_from_scratch(wl, budgets) -> None:
    """The default charged engine (degradation on) on small instances: exact after every admission, equal to
    brute force and to a from-scratch engine (incremental = from scratch)."""
    eng = OverlapEngine(SCHEMA, charged="exact")
    bx: list[Box] = []
    ws: list[float] = []
    for (b, w), budget in zip(wl, budgets):
        eng.commit(eng.admit(b, w, budget=budget))
        bx.append(b)
        ws.append(w)
        ov = eng.overlap()
        assert_sound(ov, bx, ws)
    scratch = OverlapEngine.from_boxes(SCHEMA, bx, ws).overlap()
    assert scratch.exact and ov.exact and ov.lower == pytest.approx(scratch.lower, abs=1e-12)


def test_accountant_refuses_a_capped_straddling_admission_and_spends_nothing() -> None:
    """Invariants 2 and 3 on the capped near-budget path: the true γ after the third query (1.0) fits the budget
    ε = 1.2, but with no search time its proven interval is [1.0, ≥ 1.5]; the accountant charges the proven upper
    end, so the query is refused, and the refusal changes nothing (ledger, charged bound, registered queries)."""
    tri = _tri()
    acc = Accountant(parse_budget("epsilon=1.2"), SCHEMA, ledger=Ledger())
    for name, value in {**STARVED, "charge_rel_slack": 0.0, "display_time_limit": 0.0}.items():
        setattr(acc.engine, name, value)
    acc.charge(tri[0], 0.5, sql="q0", canonical="q0")
    acc.charge(tri[1], 0.5, sql="q1", canonical="q1")
    before = (acc.charged_weight, len(acc.ledger), len(acc.engine))
    pre = acc.preview(tri[2], 0.5)
    assert pre.after >= 1.5 and not pre.admissible
    with pytest.raises(BudgetExceededError):
        acc.charge(tri[2], 0.5, sql="q2", canonical="q2")
    assert (acc.charged_weight, len(acc.ledger), len(acc.engine)) == before


# ---------------------------------------------------------------------------------------------------------------
# session 10 (issue 28, the sparse generator): one capped search without slack, the nodes' terms, the term bound
# ---------------------------------------------------------------------------------------------------------------
def _region_limits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The time limit of every region search an engine starts (``OverlapEngine._region`` recorded)."""
    limits: list[float] = []
    orig = OverlapEngine._region

    def rec(self, box, nb, limit, *a, **k):  # type: ignore[no-untyped-def]
        limits.append(limit)
        return orig(self, box, nb, limit, *a, **k)

    monkeypatch.setattr(OverlapEngine, "_region", rec)
    return limits


def test_without_slack_one_search_gets_the_hard_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``charge_rel_slack`` 0 every inexact quick result would search on, and a second search starts from
    scratch (measured on the sparse generator: +40 ms on every admission needing more than the quick limit, and
    the hard admissions ran out of time): the first search gets ``hard_time_limit`` and there is no second one
    unless the admission is near the budget.  With a slack the quick search comes first, as before."""
    tri = _tri()
    limits = _region_limits(monkeypatch)
    eng = OverlapEngine(SCHEMA, charged="exact")
    for b in tri:
        eng.add(b, 0.5)
    assert limits == [HARD_TIME_LIMIT] * 3  # one search per admission (the first: the no-neighbour check)
    limits.clear()
    slack = OverlapEngine(SCHEMA, charged="exact", charge_rel_slack=0.01)
    for b in tri:
        slack.add(b, 0.5)
    assert limits[0] == QUICK_TIME_LIMIT
    # no time at all, far from the budget: one search per admission, the proven interval kept (never restarted)
    limits.clear()
    starved = OverlapEngine(SCHEMA, charged="exact", **STARVED)
    for b in tri:
        adm = starved.admit(b, 0.5, budget=100.0)
        starved.commit(adm)
    assert len(limits) == 3
    assert_sound(starved.overlap(), tri, [0.5] * 3)
    assert starved.overlap().upper >= 1.5  # a proven upper end, never the incumbent


def _brute_term(bx: list[Box], ws: list[float], k: int) -> float:
    """w_k + max over box_k of the load of the nodes before k (brute force)."""
    return ws[k] + brute_max(SCHEMA, bx[:k], ws[:k], region=bx[k])


@given(workloads, st.integers(0, 3), st.booleans())
@FAST
def test_node_terms_are_proven_bounds(wl, bulk, starved) -> None:
    """Every node's term (``_term_up``) is ≥ w_k + max over box_k of the load before k (brute force), for bulk-
    loaded nodes (bounded by the from-scratch γ), admitted ones, with and without search time; so every row's
    load is at most the term of the last node covering it, which is what the term bound relies on."""
    eng = OverlapEngine(SCHEMA, charged="exact", **(STARVED if starved else {}))
    bx = [b for b, _ in wl[:bulk]]
    ws = [w for _, w in wl[:bulk]]
    if bx:
        eng.extend(bx, ws)
        eng.overlap()
    for b, w in wl[bulk:]:
        eng.add(b, w)
        bx.append(b)
        ws.append(w)
        assert_sound(eng.overlap(), bx, ws)
    for k, b in enumerate(bx):
        if not b.is_empty():
            assert eng._term_up[k] >= _brute_term(bx, ws, k) - 1e-12
    scratch = max_overlap(bx, ws, SCHEMA)
    if eng.overlap().exact:
        assert eng.overlap().lower == pytest.approx(scratch.lower, abs=1e-12)  # incremental = from scratch


@given(workloads, boxes(), st.floats(-1.0, 8.0))
@FAST
def test_term_bound_is_sound(wl, region, floor) -> None:
    """The term bound of a region (no search): when it applies, lower ≤ R ≤ upper for R the brute-force maximum
    load over the region, the witness's load is the lower end, and it is exact only when the two are equal."""
    eng = OverlapEngine(SCHEMA, charged="exact")
    bx = [b for b, _ in wl]
    ws = [w for _, w in wl]
    for b, w in wl:
        eng.add(b, w)
    if region.is_empty():
        return
    res = eng._term_bound(region, eng.neighbors(region), floor, False)
    if res is None:
        return
    truth = brute_max(SCHEMA, bx, ws, region=region)
    assert res.lower <= truth + 1e-12 and truth <= res.upper
    assert res.upper <= max(floor, res.lower)  # it only applies when nothing above the floor can exist
    assert res.exact == is_exact(res.lower, res.upper)
    assert row_load(bx, ws, res.witness) == pytest.approx(res.lower, abs=1e-12)
    assert region.contains_row(_complete(res.witness, region))


def _complete(row: dict, box: Box) -> dict:
    out = dict(row)
    for name in SCHEMA.names:
        if name not in out:
            vs = box.constraints.get(name)
            out[name] = vs.some_value() if vs is not None else SCHEMA[name].values[0] if name in ("c3", "c4") else 0
    return out


def test_term_bound_certifies_an_admission_without_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three nodes stacked on c3 = a (γ = 3) and one on c3 = b: a new box on c3 ∈ {b, c} meets only the c3 = b
    node, whose term (1) is at most the floor γ − w = 2, so the admission is exact with no search (γ stays 3);
    brute force agrees, and a from-scratch engine gives the same γ."""
    c3 = SCHEMA["c3"]
    a = Box({"c3": CategorySet.of_indices(c3, [0])})
    b = Box({"c3": CategorySet.of_indices(c3, [1])})
    new = Box({"c3": CategorySet.of_indices(c3, [1, 2])})
    eng = OverlapEngine(SCHEMA, charged="exact")
    for box in (a, a, a, b):
        eng.add(box, 1.0)
    searched: list[object] = []
    monkeypatch.setattr("dpmagic.overlap.engine.solve_overlap", lambda *a, **k: searched.append(a))
    adm = eng.admit(new, 1.0)
    monkeypatch.undo()
    assert searched == []
    assert "term-bound" in adm._gamma.method
    ov = adm.bounds.overlap
    bx, ws = [a, a, a, b, new], [1.0] * 5
    assert_sound(ov, bx, ws)
    assert ov.exact and ov.lower == 3.0 == brute_max(SCHEMA, bx, ws)
    eng.commit(adm)
    assert eng._term_up[4] == 2.0 == _brute_term(bx, ws, 4)
    assert OverlapEngine.from_boxes(SCHEMA, bx, ws).overlap().lower == 3.0


def test_graph_first_plans_give_the_graph_search_most_of_the_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the graph search runs first (sparse query graphs over many columns) it gets ``graph_first_share`` of
    the time, not half: with half of an admission's 0.8 s cap it timed out on the sparse generator's admissions
    it solves in 0.42–0.53 s.  The result stays a proven interval (the stub proves nothing)."""
    from dataclasses import replace

    import numpy as np

    from dpmagic.overlap import portfolio as pf
    from dpmagic.overlap.encoding import BoxStore, build_problem
    from dpmagic.overlap.rounding import ProblemRounding

    shares: list[float] = []

    def graph(s, deadline):  # type: ignore[no-untyped-def]
        shares.append(deadline - pf.time.perf_counter())
        return False

    monkeypatch.setitem(pf.STEPS, "graph", replace(pf.STEPS["graph"], run=graph))
    tri = _tri()
    store = BoxStore(SCHEMA)
    store.extend(tri, [0.5, 0.5, 0.5])
    ids = np.arange(3)
    prob = build_problem(store, ids, None)
    cfg = PortfolioConfig(steps=frozenset({"graph", "columns"}), column_first_log10=-1.0)
    inst = pf.Instance.of(store, prob, ids)
    assert [s.name for s, _ in pf.plan(inst, cfg)] == ["graph", "columns"]
    _, upper, exact, _ = pf.run_portfolio(inst, pf.time.perf_counter() + 1.0, ProblemRounding.of(prob), cfg, 0.0)
    assert len(shares) == 1 and 0.8 <= shares[0] <= cfg.graph_first_share
    assert exact and upper == 1.0  # the column search after it still solves the tiny instance


@given(workloads, st.lists(st.sampled_from([0.0, 0.0, 0.5, 2.0]), min_size=8, max_size=8), st.floats(-1.0, 4.0))
@FAST
def test_graph_search_with_terms_is_exact(wl, slack, floor) -> None:
    """The graph search given per-node terms (any proven bounds ≥ w_k + max over box_k of the load before k:
    brute force, plus a slack) cuts the branches whose intersection meets no node with a term above its best;
    against brute force it stays sound (lower ≤ γ ≤ upper, witness load = lower, exact only when equal) and,
    with time, exact whenever γ exceeds the floor."""
    import numpy as np

    from dpmagic.overlap.encoding import BoxStore
    from dpmagic.overlap.maxoverlap import solve_overlap

    bx = [b for b, _ in wl]
    ws = [w for _, w in wl]
    if not bx:
        return
    terms = np.array(
        [(_brute_term(bx, ws, k) + s) if not b.is_empty() else 0.0 for k, (b, s) in enumerate(zip(bx, slack))]
    )
    store = BoxStore(SCHEMA)
    store.extend(bx, ws)
    cfg = PortfolioConfig(steps=frozenset({"graph"}))
    res = solve_overlap(store, time_limit=10.0, floor=floor, config=cfg, terms=terms)
    plain = solve_overlap(store, time_limit=10.0, floor=floor, config=cfg)
    truth = brute_max(SCHEMA, bx, ws)
    assert res.lower <= truth + 1e-12 and truth <= res.upper
    assert res.exact == is_exact(res.lower, res.upper)
    assert row_load(bx, ws, res.witness) == pytest.approx(res.lower, abs=1e-12)
    if truth > floor + 1e-9:
        assert res.exact and res.lower == pytest.approx(truth, abs=1e-12) and plain.lower == res.lower


@given(workloads, workloads, st.one_of(st.none(), st.floats(0.0, 4.0)))
@FAST
def test_degraded_interval_admissions_are_sound(first, rest, budget) -> None:
    """γ's interval made wider than ``DEGRADED_REL_GAP`` (a proven but loose global term, Σw, as a bulk load can
    leave): later admissions search only for region loads that would raise the upper end (unless near the
    ``budget``), and after every admission γ's interval is still proven (brute force: lower ≤ γ ≤ upper, the
    witness's load is the lower end, exact only when equal); retighten then recovers the exact γ."""
    from dataclasses import replace

    from dpmagic.overlap.engine import DEGRADED_REL_GAP, _Term
    from dpmagic.overlap.rounding import sum_up

    eng = OverlapEngine(SCHEMA, charged="exact", retighten_seconds=0.0)
    bx = [b for b, _ in first]
    ws = [w for _, w in first]
    for b, w in first:
        eng.add(b, w)
    g = eng.overlap()
    wide = sum_up(ws) * 2.0  # γ ≤ Σw: a proven, loose bound of every row's load
    if g.lower <= 0.0 or not wide > (1.0 + DEGRADED_REL_GAP) * g.lower:
        return  # (γ = 0: every box empty; its interval [0, the next float] never reads as exact, as before)
    eng._gamma = replace(g, upper=wide, exact=False)
    eng._pending, eng._exact_up = (_Term(eng.store.n, None, 0.0, wide),), 0.0
    eng._term_up[: eng.store.n] = wide
    for b, w in rest:
        adm = eng.admit(b, w, budget=budget)
        eng.commit(adm)
        bx.append(b)
        ws.append(w)
        assert_sound(adm.bounds.overlap, bx, ws)
        assert adm.bounds.charge("exact")[0] >= brute_max(SCHEMA, bx, ws)
    assert eng.retighten(30.0)
    assert_sound(eng.overlap(), bx, ws)
    scratch = max_overlap(bx, ws, SCHEMA)
    assert eng.overlap().lower == pytest.approx(scratch.lower, abs=1e-12)


@given(workloads, workloads, st.one_of(st.none(), st.floats(0.0, 4.0)))
@FAST
def test_admissions_after_a_capped_search_are_degraded_and_sound(first, rest, budget) -> None:
    """``DEGRADE_AFTER_CAP``: once an admission's region search used its whole cap without closing γ (here every
    search is starved), the engine is *stalled* and later admissions are degraded even when γ's interval is within
    ``DEGRADED_REL_GAP``, until γ is exact again.  After every admission γ's interval is still proven (brute force),
    a stalled engine never has an exact γ, an admission that is not committed leaves the state as it was, and
    retighten recovers the exact γ and clears the state."""
    eng = OverlapEngine(SCHEMA, charged="exact", **STARVED)
    bx: list[Box] = []
    ws: list[float] = []
    for b, w in first + rest:
        before = eng._stalled
        eng.admit(b, w, budget=budget)  # a preview changes nothing
        assert eng._stalled == before
        adm = eng.admit(b, w, budget=budget)
        eng.commit(adm)
        bx.append(b)
        ws.append(w)
        assert_sound(adm.bounds.overlap, bx, ws)
        assert adm.bounds.charge("exact")[0] >= brute_max(SCHEMA, bx, ws)
        assert not (eng._stalled and eng.overlap().exact)
        if adm._capped and not eng.overlap().exact:
            assert eng._stalled
    eng.retighten(30.0)
    assert eng.overlap().exact and not eng._stalled
    assert_sound(eng.overlap(), bx, ws)


def test_a_stalled_engine_searches_only_above_the_upper_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stalled engine's admission (γ inexact within ``DEGRADED_REL_GAP``) gets the degraded floor (γ.upper − w)
    and the degraded time limit; without the stall the same admission searches from γ.lower − w with the hard cap."""
    from dataclasses import replace

    from dpmagic.overlap.engine import DEGRADED_REL_GAP

    bx = _tri()
    seen: list[tuple[float, float, float]] = []
    Eng = OverlapEngine
    orig = Eng._region

    def spy(self, box, nb, limit, floor=float("-inf"), helly=False, resume=None, soft=float("-inf")):  # type: ignore[no-untyped-def]
        seen.append((limit, floor, soft))
        return orig(self, box, nb, limit, floor, helly, resume, soft)

    for stalled in (False, True):
        eng = OverlapEngine(SCHEMA, charged="exact", retighten_seconds=0.0)
        for b in bx[:2]:
            eng.add(b, 1.0)
        g = eng.overlap()
        assert g.exact
        up = g.lower * (1.0 + DEGRADED_REL_GAP / 2)  # proven (γ is exact), within the gap
        eng._gamma = replace(g, upper=up, exact=False)
        eng._stalled = stalled
        seen.clear()
        monkeypatch.setattr(Eng, "_region", spy)
        eng.admit(bx[2], 0.5)
        monkeypatch.setattr(Eng, "_region", orig)
        limit, floor, soft = seen[0]
        if stalled:
            assert floor == pytest.approx(up - 0.5) and limit <= eng.degraded_time_limit
            assert soft == pytest.approx(g.lower - 0.5)  # the pairwise LP may still stop at the old floor
        else:
            assert floor == pytest.approx(g.lower - 0.5) and limit >= eng.hard_time_limit
            assert soft == float("-inf")
