"""Red team 12 (issue 28): the overlap engine's session-11 changes under an adversary — resumable scoped searches
and their pending terms, degraded mode, the weight-splitting cut — against brute force on small domains.

The reference is *exact*: every maximum load is a sum of :class:`~fractions.Fraction` weights (no float tolerance),
so "charged ≥ γ" is checked strictly.  Timeouts are forced deterministically: the scoped search reads its clock
from a stub that reports the deadline passed after a given number of readings (its only source of time), so a
search is paused and resumed at chosen nodes; the real time limits are generous so that no other step of the
engine depends on the machine's load (the runs are reproducible, and two engines fed the same calls behave alike).
"""

from __future__ import annotations

import itertools
import math
import time
from fractions import Fraction

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from overlap_support import FAST, SCHEMA, _candidates, boxes

import dpmagic.overlap.scoped as scoped_mod
from dpmagic.domain.sets import Box
from dpmagic.overlap import OverlapEngine, PortfolioConfig
from dpmagic.overlap.rounding import REL_TOL

#: the scoped search alone (no tensor, no other step): every search of the engine is the resumable one
SCOPED = PortfolioConfig(steps=frozenset({"scoped"}), scoped_max_scope=99.0)
decimal_weights = st.sampled_from([0.01, 0.037, 0.05, 0.1, 0.083, 0.3, 0.07, 0.011, 0.25, 1.0])


class _Clock:
    """The scoped search's clock: the deadline passes after ``left`` readings (set before each engine call)."""

    def __init__(self) -> None:
        self.left = 0

    def perf_counter(self) -> float:
        self.left -= 1
        return math.inf if self.left < 0 else 0.0


class _Truth:
    """Exact maximum loads over the schema's small domain: each box's rows as a mask, loads as Fractions."""

    def __init__(self, all_boxes: list[Box]) -> None:
        cand = _candidates(SCHEMA, all_boxes)
        names = list(cand)
        self.rows = [dict(zip(names, combo)) for combo in itertools.product(*(cand[n] for n in names))]
        self.cover: dict[int, np.ndarray] = {}

    def mask(self, b: Box) -> np.ndarray:
        got = self.cover.get(id(b))
        if got is None:
            got = self.cover[id(b)] = np.array([not b.is_empty() and b.contains_row(r) for r in self.rows], dtype=bool)
        return got

    def gamma(self, bx: list[Box], ws: list[float]) -> Fraction:
        if not bx:
            return Fraction(0)
        cov = np.stack([self.mask(b) for b in bx], axis=1)
        approx = cov @ np.asarray(ws, dtype=np.float64)
        top = float(approx.max())
        best = Fraction(0)
        for r in np.flatnonzero(approx >= top * (1 - 1e-6)):  # the exact maximum is among the float near-maxima
            best = max(best, sum((Fraction(w) for w, c in zip(ws, cov[r]) if c), Fraction(0)))
        return best


def _proven(ov, truth: Fraction) -> None:
    """``lower ≤ γ ≤ upper`` exactly, and exact only when the interval is within REL_TOL (hence of γ)."""
    assert Fraction(ov.lower) <= truth <= Fraction(ov.upper), (ov.lower, float(truth), ov.upper)
    if ov.exact:
        assert ov.upper - ov.lower <= REL_TOL * abs(ov.upper)


def _engine(slack: float) -> OverlapEngine:
    # generous real limits (the stub clock decides every timeout); a positive slack makes a timed-out first search
    # search on (the admission's second search resumes the first one's), none keeps one search
    return OverlapEngine(
        SCHEMA, charged="exact", solver=SCOPED, time_limit=60.0, quick_time_limit=5.0, hard_time_limit=10.0,
        near_time_limit=20.0, degraded_time_limit=2.0, charge_rel_slack=slack, retighten_seconds=1000.0,
    )  # fmt: skip


def _state(eng: OverlapEngine) -> tuple:
    """What an admission depends on: γ, the pending terms (and their paused searches' progress), the node terms,
    the pool of heavy rows, the colouring and the state counter."""
    g = eng._gamma
    assert g is not None
    pend = tuple(
        (t.n, t.upper, t.tries, None if t.resume is None or "search" not in t.resume else t.resume["search"].nodes)
        for t in eng._pending
    )
    n = eng.store.n
    pool = tuple((tuple(sorted(r.items(), key=str)), v) for r, v in eng._pool)
    return (g.lower, g.upper, g.exact, eng._exact_up, pend, eng._term_up[:n].tolist(), pool, eng._cm.tolist(),
            eng.state[1])  # fmt: skip


def _view(bd) -> tuple:
    """The bounds without their timing fields."""
    ov = bd.overlap
    return (bd.sequential, bd.chromatic, bd.clique, bd.clique_exact, bd.clique_lower, ov.lower, ov.upper, ov.exact,
            ov.witness, ov.members)  # fmt: skip


@st.composite
def _sessions(draw):  # type: ignore[no-untyped-def]
    bulk = draw(st.lists(st.tuples(boxes(), decimal_weights), min_size=0, max_size=10))  # loaded at once first
    wl = draw(st.lists(st.tuples(boxes(), decimal_weights), min_size=2, max_size=9))
    steps = draw(st.lists(st.integers(0, 6), min_size=len(wl), max_size=len(wl)))  # scoped nodes per call
    budget = draw(st.one_of(st.none(), st.sampled_from([0.05, 0.1, 0.2, 0.3, 0.5, 1.0])))
    probes = draw(st.lists(st.tuples(boxes(), decimal_weights), min_size=len(wl), max_size=len(wl)))
    slack = draw(st.sampled_from([0.0, 1e-6]))
    stale = draw(st.lists(st.booleans(), min_size=len(wl), max_size=len(wl)))  # re-tighten between admit and commit
    split = draw(st.booleans())  # the weight-splitting cut at every branching node from the first
    return bulk, wl, steps, budget, probes, slack, stale, split


@given(_sessions())
@FAST
def test_starved_session_charges_proven_bounds_and_refusals_change_nothing(session) -> None:
    """A session whose scoped searches stop after 0–6 nodes per call (paused, resumed by the admission's second
    search and by every commit's re-tightening; γ's interval wide, so degraded mode too), with a budget refusing
    what does not fit, against an exact brute force: every admission's charged γ (its proven upper end) is ≥ the
    exact γ after it, every interval holds γ, exact only when it is.  A twin engine given the same calls but never
    asked the refused queries nor the extra probes (admissions computed and dropped) is in exactly the same state
    after every commit: a dropped admission changes nothing — not γ, the pending terms, their paused searches'
    progress, the node terms nor the pool.  Some admissions are committed after a re-tightening changed the
    engine (then recomputed), and some sessions cut with the weight-splitting bound at every branching node."""
    bulk, wl, steps, budget, probes, slack, stale, split = session
    saved = scoped_mod.SPLIT_DEPTH, scoped_mod.SPLIT_AFTER, scoped_mod.SPLIT_RATIO
    if split:
        scoped_mod.SPLIT_DEPTH, scoped_mod.SPLIT_AFTER, scoped_mod.SPLIT_RATIO = 99, 0, math.inf
    truth = _Truth([b for b, _ in bulk + wl + probes])
    clock = _Clock()
    a, b = _engine(slack), _engine(slack)
    bx: list[Box] = [b for b, _ in bulk]
    ws: list[float] = [w for _, w in bulk]
    scoped_mod.time = clock  # type: ignore[assignment]
    try:
        if bulk:  # γ of a bulk load is solved from scratch on the next request: starved, a wide interval
            for eng in (a, b):
                eng.extend(bx, ws)
                clock.left = steps[0]
                _proven(eng.overlap(), truth.gamma(bx, ws))
        for (box, w), k, (pbox, pw), late in zip(wl, steps, probes, stale):
            clock.left = k
            probe = a.admit(pbox, pw, budget=budget)  # asked, never committed (a preview, or a refused query)
            _proven(probe.bounds.overlap, truth.gamma(bx + [pbox], ws + [pw]))
            after = truth.gamma(bx + [box], ws + [w])
            admitted = []
            for eng in (a, b):
                clock.left = k
                adm = eng.admit(box, w, budget=budget)
                charged, _ = adm.bounds.charge("exact")
                assert Fraction(charged) >= after
                _proven(adm.bounds.overlap, after)
                admitted.append(adm)
            assert _view(admitted[0].bounds) == _view(admitted[1].bounds)
            if budget is not None and admitted[0].bounds.charge("exact")[0] > budget:
                continue  # refused: nothing is committed
            for eng, adm in zip((a, b), admitted):
                if late:  # the engine changes between the admission and its commit: the commit recomputes it
                    clock.left = k
                    eng.retighten(1000.0)
                clock.left = k
                eng.commit(adm)
            bx.append(box)
            ws.append(w)
            assert _state(a) == _state(b)
            _proven(a.overlap(), truth.gamma(bx, ws))
        # idle time: the pending terms' paused searches finish, a few nodes at a time, and γ is exact again
        for _ in range(3000):
            if a.overlap().exact:
                break
            clock.left = 3
            a.retighten(1000.0)
            _proven(a.overlap(), truth.gamma(bx, ws))
    finally:
        scoped_mod.time = time
        scoped_mod.SPLIT_DEPTH, scoped_mod.SPLIT_AFTER, scoped_mod.SPLIT_RATIO = saved
    g = a.overlap()
    assert g.exact
    _proven(g, truth.gamma(bx, ws))


@given(_sessions())
@FAST
def test_starved_accountant_and_its_reload_charge_proven_bounds(session) -> None:
    """The accountant (row level, exact bound) on the starved engine of the test above: every charge recorded is ≥
    the exact γ after it, a refused query records nothing, and an accountant re-built from the ledger (the charges
    replayed one by one, with fresh searches) charges a proven bound of the same γ."""
    from dpmagic.accountant.accountant import Accountant
    from dpmagic.accountant.currency import parse_budget
    from dpmagic.accountant.ledger import Ledger
    from dpmagic.errors import BudgetExceededError

    bulk, wl, steps, budget, probes, slack, stale, split = session
    truth = _Truth([b for b, _ in wl])
    clock = _Clock()
    saved = Accountant._new_engine
    Accountant._new_engine = lambda self: _engine(slack)  # type: ignore[method-assign]
    scoped_mod.time = clock  # type: ignore[assignment]
    try:
        ledger = Ledger()
        acc = Accountant(parse_budget(f"epsilon={budget if budget is not None else 100.0}"), SCHEMA, ledger=ledger)
        bx: list[Box] = []
        ws: list[float] = []
        for (box, w), k in zip(wl, steps):
            clock.left = k
            n = len(ledger.events(acc.key))
            try:
                acc.charge(box, w, sql="q", canonical="q")
            except BudgetExceededError:
                assert len(ledger.events(acc.key)) == n  # nothing recorded
                continue
            bx.append(box)
            ws.append(w)
            assert Fraction(acc.charged_weight) >= truth.gamma(bx, ws)
        clock.left = 0
        again = Accountant(acc.budget, SCHEMA, ledger=ledger)
        assert len(again) == len(bx)
        assert Fraction(again.charged_weight) >= truth.gamma(bx, ws)
        _proven(again.engine.overlap(), truth.gamma(bx, ws))
    finally:
        scoped_mod.time = time
        Accountant._new_engine = saved  # type: ignore[method-assign]
