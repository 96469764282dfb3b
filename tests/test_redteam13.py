"""Red team 13 (issue 28, session 13): the scoped search's rewritten split steps (``_split_steps``, ``_SplitLevel``,
``_Search._split`` / ``_split_cut``), the inlined ``cold`` / ``_tables`` / ``_enter``, the engine's stall rule
(``DEGRADE_AFTER_CAP``), retighten's capped doubling, and a committed charge without its admission — against an
exact brute force (Fraction sums, no float tolerance) with adversarial weights (subnormal, huge, mixed).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from overlap_support import FAST, SCHEMA, EveryOtherClock, assert_sound, boxes, brute_max

import dpmagic.overlap.engine as eng_mod
import dpmagic.overlap.scoped as scoped_mod
from dpmagic.domain.sets import Box, CategorySet
from dpmagic.overlap import OverlapEngine, PortfolioConfig
from dpmagic.overlap.encoding import Problem, ProblemColumn
from dpmagic.overlap.rounding import ProblemRounding, is_exact, sum_up
from dpmagic.overlap.scoped import _ETA, SPLIT_MARGIN, _Search, scoped_search, split_bound

ETA = 2.0**-1074
#: adversarial weights: subnormal, tiny normal, ordinary, huge (sums overflow), and mixed magnitudes
weights = st.one_of(
    st.sampled_from([ETA, 3 * ETA, 1e-310, 2.0**-1000, 0.1, 1 / 3, 1.0, 7.0, 1e300, 1.7e308]),
    st.floats(min_value=ETA, max_value=1e308, allow_nan=False, allow_infinity=False),
)
#: the same, with sums that stay finite (``ProblemRounding.of`` sums the weights with ``math.fsum``)
finite_sum_weights = st.one_of(
    st.sampled_from([ETA, 3 * ETA, 1e-310, 2.0**-1000, 0.1, 1 / 3, 1.0, 7.0, 1e300]),
    st.floats(min_value=ETA, max_value=1e300, allow_nan=False, allow_infinity=False),
)


@st.composite
def problems(draw, wst=weights):  # type: ignore[no-untyped-def]
    """1–5 columns of 1–3 atoms, 0–7 queries: each query's row in a column is any nonempty atom set (all atoms:
    it constrains no column there), equal or independent adversarial weights."""
    m = draw(st.integers(1, 5))
    widths = [draw(st.integers(1, 3)) for _ in range(m)]
    n = draw(st.integers(0, 7))
    mats = []
    for a in widths:
        mm = np.ones((n, a), dtype=bool)
        for q in range(n):
            if draw(st.booleans()):
                row = np.array(draw(st.lists(st.booleans(), min_size=a, max_size=a)), dtype=bool)
                row[draw(st.integers(0, a - 1))] = True
                mm[q] = row
        mats.append(mm)
    if draw(st.booleans()):
        w = np.full(n, draw(wst))
    else:
        w = np.array(draw(st.lists(wst, min_size=n, max_size=n)), dtype=np.float64)
    cols = [ProblemColumn(f"c{c}", widths[c], None, M=mats[c]) for c in range(m)]  # type: ignore[arg-type]
    return Problem(np.arange(n), w, cols), mats, widths, w  # type: ignore[arg-type]


def _loads(mats: list[np.ndarray], widths: list[int], w: np.ndarray, queries: np.ndarray | None = None):  # type: ignore[no-untyped-def]
    """Every row's exact load (Fractions) and its last covering query (-1: none), over ``queries`` (default all)."""
    n = len(w)
    use = np.ones(n, dtype=bool) if queries is None else queries
    for row in itertools.product(*[range(a) for a in widths]):
        alive = use.copy()
        for c, a in enumerate(row):
            alive &= mats[c][:, a]
        ids = np.flatnonzero(alive)
        yield row, sum((Fraction(x) for x in w[ids].tolist()), Fraction(0)), (int(ids[-1]) if len(ids) else -1)


# ------------------------------------------------------------------------------------------------------
# split steps (the rewrite of 5f68e49): _Search._split against split_bound and an exact brute force
# ------------------------------------------------------------------------------------------------------
@given(problems(), st.data())
@FAST
def test_split_cut_bound_is_split_bound_and_proven(pw, data) -> None:  # type: ignore[no-untyped-def]
    """At every level j, over any alive set, from any warm start and after any number of steps: the cut's bound
    (``_split``'s best with ``_split_cut``'s margins) is bit-for-bit :func:`split_bound`'s on the same queries and
    columns, with the same split, and at least the exact maximum over the columns from j on of the load of the
    alive queries with a free column (each weighed by its constrained columns from j on only)."""
    prob, _mats, _widths, w = pw
    s = _Search(prob, math.inf, -math.inf, math.inf, 0.0)
    if s.k == 0:
        return
    s._split_cut(0, np.ones(len(w), dtype=bool), -math.inf)  # builds _cat and the root's split (never cuts)
    assert s._cat is not None and s._lam is not None
    j = data.draw(st.integers(0, s.k - 1))
    alive = np.array(data.draw(st.lists(st.booleans(), min_size=len(w), max_size=len(w))), dtype=bool)
    steps = data.draw(st.integers(0, 5))
    sl = s._split_level(j)
    idx = np.flatnonzero(alive & sl.free)
    if len(idx) == 0:
        return
    lam0 = s._lam[idx, j:] if data.draw(st.booleans()) else None
    best, lam = s._split(j, idx, lam0, steps)
    ub = (0.0 + best) * (1.0 + SPLIT_MARGIN) + (len(idx) * sl.consf.shape[1] + 2) * _ETA
    off = s._cat_offsets[j:-1]
    cover = s._cat.T[idx, off[0] :].astype(np.float64)
    ref, ref_lam = split_bound(cover, s._cons[idx, j:], off - off[0], s.w[idx], lam0, steps)
    assert ub == ref or (math.isnan(ub) and math.isnan(ref))
    assert np.array_equal(lam, ref_lam)
    assert not math.isnan(ub)
    # exact: max over rows of the columns j.. (branching order) of Σ_{q ∈ idx} w_q Π_{c ≥ j constrained} [covers]
    sub = [s.cover[c] for c in range(j, s.k)]
    truth = max(ld for _, ld, _ in _loads(sub, [m.shape[1] for m in sub], s.w, np.isin(np.arange(len(w)), idx)))
    if math.isfinite(ub):
        assert truth <= Fraction(ub)


# ------------------------------------------------------------------------------------------------------
# the whole scoped search: fresh or resumed after every node, with or without terms, any floor
# ------------------------------------------------------------------------------------------------------


@given(problems(finite_sum_weights), st.data())
@FAST
def test_scoped_search_upper_is_proven(pw, data) -> None:  # type: ignore[no-untyped-def]
    """:func:`scoped_search` with any floor (incumbent), terms None / exact / loose, split cuts from the first node,
    fresh or resumed after every node: the upper end is at least every row's exact load above the floor; a reported
    row lies above the floor with a load at most the upper end; the resumed search ends where the fresh one does."""
    prob, mats, widths, w = pw
    rows = list(_loads(mats, widths, w))
    truth = max(ld for _, ld, _ in rows)
    kind = data.draw(st.sampled_from(["none", "exact", "loose"]))
    terms = None
    if kind != "none":
        # per query, the most load on a row it covers last (exact), or a proven larger value
        best_last = [Fraction(0)] * len(w)
        for _, ld, last in rows:
            if last >= 0:
                best_last[last] = max(best_last[last], ld)
        terms = np.array([math.nextafter(float(t), math.inf) if t else 0.0 for t in best_last])
        if kind == "loose":
            terms = terms * 2.0 + 1.0
    ft = float(min(truth, Fraction(np.finfo(float).max)))
    floor = data.draw(st.sampled_from([-math.inf, 0.0, ft / 2, math.nextafter(ft, -math.inf), ft]))
    above = floor == -math.inf or truth > Fraction(floor)
    resumed = data.draw(st.booleans())
    rnd = ProblemRounding.of(prob)
    # split cuts from the second node, tried at every node when the ratio is huge (the cut is proven at any ratio)
    old_after, old_ratio = scoped_mod.SPLIT_AFTER, scoped_mod.SPLIT_RATIO
    scoped_mod.SPLIT_AFTER = 0
    scoped_mod.SPLIT_RATIO = data.draw(st.sampled_from([old_ratio, 1e300]))
    try:
        if resumed:
            state: dict = {}
            scoped_mod.time = EveryOtherClock()  # type: ignore[assignment]
            try:
                for _ in range(10_000):
                    atoms, upper, exact, _tag = scoped_search(prob, 1.0, rnd, floor, math.inf, terms, state)
                    if math.isfinite(upper):
                        assert Fraction(upper) >= truth or not above
                    if exact:
                        break
            finally:
                scoped_mod.time = time
            assert exact
        else:
            atoms, upper, exact, _tag = scoped_search(prob, math.inf, rnd, floor, math.inf, terms)
            assert exact
    finally:
        scoped_mod.SPLIT_AFTER, scoped_mod.SPLIT_RATIO = old_after, old_ratio
    assert not math.isnan(upper)
    if above and math.isfinite(upper):
        assert Fraction(upper) >= truth
    if atoms:  # the branched columns' atoms (any atom of the others: no query constrains them)
        load = next(ld for row, ld, _ in rows if all(row[int(c[1:])] == a for c, a in atoms.items()))
        assert floor == -math.inf or load > Fraction(floor)
        if math.isfinite(upper):
            assert load <= Fraction(upper)


# ------------------------------------------------------------------------------------------------------
# the engine: the stall rule and retighten
# ------------------------------------------------------------------------------------------------------
HIGHS = PortfolioConfig(steps=frozenset({"milp"}))
STARVED = dict(solver=HIGHS, quick_time_limit=0.0, hard_time_limit=0.0, near_time_limit=0.0, retighten_seconds=0.0)
small_weights = st.sampled_from([0.01, 0.037, 0.05, 0.1, 0.083, 0.3, 0.07, 0.5, 1.25])
workloads = st.lists(st.tuples(boxes(), small_weights), min_size=1, max_size=7)


def _timing_out(orig, data):  # type: ignore[no-untyped-def]
    """``OverlapEngine._region`` whose searches "time out" on demand (drawn): the true result with its upper end
    raised to a proven bound of the region's load (the neighbours' Σw, or — a narrow interval — the true upper end
    raised by 0.1% / 0.5%), inexact; so admissions really end capped (real starved searches rarely do)."""

    def timing_out(self, box, nb, limit, floor=-math.inf, helly=False, resume=None, soft=-math.inf):  # type: ignore[no-untyped-def]
        res = orig(self, box, nb, limit, floor, helly, resume, soft)
        if data.draw(st.integers(0, 3), label="time out") == 0 or not nb.size:
            return res
        how = data.draw(st.sampled_from(["sum", 1.001, 1.005]), label="raised to")
        up = sum_up(self._store.weights[nb].tolist()) if how == "sum" else res.upper * how
        up = max(res.upper, up)
        return replace(res, upper=up, exact=is_exact(res.lower, up))

    return timing_out


@given(workloads, st.data())
@FAST
def test_stale_commits_previews_and_bulk_loads_keep_the_stall_rule(items, data) -> None:  # type: ignore[no-untyped-def]
    """Searches timing out on demand (:func:`_timing_out`), interleaved with previews (not committed), stale commits
    (an admission committed after another one: recomputed on the current state), bulk loads and display refinements:
    γ's interval stays proven (brute force), every admission's charge bounds the truth, a preview changes neither
    the stall flag nor γ, and a stalled engine never holds an exact γ (the flag is cleared whenever γ is exact)."""
    eng = OverlapEngine(SCHEMA, charged="exact", solver=HIGHS, retighten_seconds=0.0)
    bx: list[Box] = []
    ws: list[float] = []
    orig = OverlapEngine._region
    OverlapEngine._region = _timing_out(orig, data)  # type: ignore[method-assign]
    try:
        _stale_steps(eng, items, data, bx, ws)
    finally:
        OverlapEngine._region = orig  # type: ignore[method-assign]
    eng.retighten(30.0)
    assert eng.overlap().exact and not eng._stalled
    assert_sound(eng.overlap(), bx, ws)


def _stale_steps(eng, items, data, bx, ws) -> None:  # type: ignore[no-untyped-def]
    held = None
    for b, w in items:
        op = data.draw(st.sampled_from(["commit", "stale", "extend", "refine"]))
        before, g0 = eng._stalled, eng._gamma
        adm = eng.admit(b, w, budget=data.draw(st.one_of(st.none(), st.floats(0.0, 4.0))))
        assert eng._stalled == before and eng._gamma is g0
        if op == "stale" and held is None:
            held = adm  # committed after the next one
            continue
        if op == "extend":
            eng.extend([b], [w])
        else:
            eng.commit(adm)
        bx.append(b)
        ws.append(w)
        if op == "commit":
            assert adm.bounds.charge("exact")[0] >= brute_max(SCHEMA, bx, ws)
        if held is not None:
            eng.commit(held)  # stale: recomputed
            bx.append(held.box)
            ws.append(held.weight)
            held = None
        if op == "refine":
            eng.bounds()
        g = eng.overlap()
        assert_sound(g, bx, ws)
        assert not (eng._stalled and g.exact)
        event(f"stalled={eng._stalled} op={op}")


def test_a_from_scratch_exact_gamma_clears_the_stall() -> None:
    """A stalled engine whose γ is recomputed from scratch and exact (a bulk load, here ``extend``) is no longer
    stalled: the next admission within ``DEGRADED_REL_GAP`` is not degraded (before the fix the flag survived the
    bulk load, and every later admission was degraded although γ had been exact since)."""
    eng = OverlapEngine(SCHEMA, charged="exact", retighten_seconds=0.0)
    eng.add(Box({}), 1.0)
    eng._stalled = True  # as after a capped admission
    eng.extend([Box({})], [1.0])
    assert eng.overlap().exact
    assert not eng._stalled


def test_retighten_with_many_tries_and_a_zero_quick_limit_ends() -> None:
    """retighten's doubling tries: a zero quick limit and a term tried 5,000 times (2.0**5000 overflows) neither
    loop nor raise, and γ's interval stays proven."""
    eng = OverlapEngine(SCHEMA, charged="exact", quick_time_limit=0.0, retighten_seconds=0.0)
    bx = [Box({}), Box({})]
    for b in bx:
        eng.add(b, 1.0)
    g = eng.overlap()
    eng._gamma = replace(g, upper=3.0, exact=False)
    eng._pending = (eng_mod._Term(1, bx[1], 1.0, 3.0, tries=5000),)
    eng._exact_up = 0.0
    eng.retighten(0.05)
    assert_sound(eng.overlap(), bx, [1.0, 1.0])


@given(workloads, st.data())
@FAST
def test_forced_timeouts_stall_and_every_interval_stays_proven(items, data) -> None:  # type: ignore[no-untyped-def]
    """Region searches that "time out" on demand (the true result with its upper end raised to the neighbours' Σw,
    a proven bound of the region's load, and inexact), so admissions really end capped: after every commit γ's
    interval is proven and its witness's load is its lower end (brute force), each admission's charge bounds the
    truth, a capped admission leaving γ inexact stalls the engine, a stalled engine's γ is never exact, previews
    (admissions not committed, with or without a budget) change neither the flag nor γ, and once the searches are
    honest again retighten closes γ and clears the flag."""
    orig = OverlapEngine._region
    timing_out = _timing_out(orig, data)
    eng = OverlapEngine(SCHEMA, charged="exact", solver=HIGHS, retighten_seconds=0.0)
    bx: list[Box] = []
    ws: list[float] = []
    OverlapEngine._region = timing_out  # type: ignore[method-assign]
    try:
        for b, w in items:
            budget = data.draw(st.one_of(st.none(), st.floats(0.0, 4.0)), label="budget")
            before, g0 = eng._stalled, eng._gamma
            eng.admit(b, w, budget=budget)  # a preview
            assert eng._stalled == before and eng._gamma is g0
            adm = eng.admit(b, w, budget=budget)
            eng.commit(adm)
            bx.append(b)
            ws.append(w)
            assert adm.bounds.charge("exact")[0] >= brute_max(SCHEMA, bx, ws)
            g = eng.overlap()
            assert_sound(g, bx, ws)
            assert not (eng._stalled and g.exact)
            if adm._capped and not g.exact:
                assert eng._stalled
            event(f"stalled={eng._stalled} narrow={not g.exact and g.upper <= 1.01 * g.lower}")
    finally:
        OverlapEngine._region = orig  # type: ignore[method-assign]
    eng.retighten(30.0)
    assert eng.overlap().exact and not eng._stalled
    assert_sound(eng.overlap(), bx, ws)


# ------------------------------------------------------------------------------------------------------
# a committed charge without its admission (3977b9f)
# ------------------------------------------------------------------------------------------------------
@given(workloads, st.data())
@FAST
def test_a_returned_charge_reused_as_a_preview_is_solved_again(items, data) -> None:  # type: ignore[no-untyped-def]
    """The charge :meth:`Accountant.charge` returns holds no admission; passed back as the ``preview`` of a later
    charge (the same query or another), or a preview already committed passed again, it is never committed as is:
    the engine solves again on its current state and registers exactly one node per charge, and the charged total
    is a proven bound of γ (brute force); a refused charge registers nothing."""
    from dpmagic.accountant.accountant import Accountant
    from dpmagic.accountant.currency import parse_budget
    from dpmagic.accountant.ledger import Ledger
    from dpmagic.errors import BudgetExceededError

    acc = Accountant(parse_budget(f"epsilon={data.draw(st.sampled_from([1.0, 3.0, 100.0]))}"), SCHEMA, ledger=Ledger())
    bx: list[Box] = []
    ws: list[float] = []
    last = None
    for i, (b, w) in enumerate(items):
        how = data.draw(st.sampled_from(["fresh", "returned", "committed-preview"]))
        pre = acc.preview(b, w)
        if how == "returned" and last is not None:
            pre = last[1]
        elif how == "committed-preview" and last is not None:
            pre = last[0]
        n = len(acc.engine)
        try:
            _, ch = acc.charge(b, w, sql=f"q{i}", canonical=f"q{i}", preview=pre)
        except BudgetExceededError:
            assert len(acc.engine) == n
            continue
        assert ch.admission is None and ch.person_admission is None
        assert len(acc.engine) == n + 1
        bx.append(b)
        ws.append(w)
        assert acc.charged_weight >= brute_max(SCHEMA, bx, ws)
        assert_sound(acc.engine.overlap(), bx, ws)
        last = (acc.preview(b, w), ch)  # a preview of this query on the state before the next one's commit
        if data.draw(st.booleans()):
            last = (pre, ch)


@pytest.mark.parametrize("slack", [0.0, 0.01])
def test_only_a_search_that_used_its_cap_stalls_the_engine(slack: float) -> None:
    """An admission whose region search ends inexact stalls the engine only when it used its cap: with no slack
    the one search has the hard cap (capped, stalled); with ``charge_rel_slack`` 1% a quick result within it does
    not search on, so it did not use the cap and does not stall the engine (before the fix it did: every result
    within the slack degraded all later admissions).  Either way γ's interval is proven."""
    c3 = SCHEMA["c3"]
    bx = [Box({"c3": CategorySet.of_indices(c3, [0, 1])}), Box({"c3": CategorySet.of_indices(c3, [1, 2])})]
    orig = OverlapEngine._region
    limits: list[float] = []

    def narrow(self, box, nb, limit, floor=-math.inf, helly=False, resume=None, soft=-math.inf):  # type: ignore[no-untyped-def]
        res = orig(self, box, nb, limit, floor, helly, resume, soft)
        limits.append(limit)
        up = res.upper * 1.001  # a proven upper end (res.upper is one), 0.1% above: within the slack
        return replace(res, upper=up, exact=is_exact(res.lower, up))

    eng = OverlapEngine(SCHEMA, charged="exact", charge_rel_slack=slack, solver=HIGHS, retighten_seconds=0.0)
    eng.commit(eng.admit(bx[0], 1.0))
    OverlapEngine._region = narrow  # type: ignore[method-assign]
    try:
        adm = eng.admit(bx[1], 1.0)
    finally:
        OverlapEngine._region = orig  # type: ignore[method-assign]
    eng.commit(adm)
    assert not eng.overlap().exact
    assert_sound(eng.overlap(), bx, [1.0, 1.0])
    if slack == 0.0:
        assert max(limits) >= eng.hard_time_limit and adm._capped and eng._stalled
    else:
        assert max(limits) < eng.hard_time_limit and not adm._capped and not eng._stalled
