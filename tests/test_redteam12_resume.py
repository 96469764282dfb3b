"""Red team 12 (issue 28): the paused scoped searches kept with γ's pending terms are bounded after a re-tightening
too, not only after an admission.

Finding: :func:`~dpmagic.overlap.engine._keep_resumes` (at most ``RESUME_MAX`` paused searches, at most
``RESUME_MAX_BYTES`` in all) ran only in ``admit``.  ``retighten`` gives a term without a paused search a fresh one
and, when it times out, keeps it and goes on to the next largest term: one call paused a search on every term it
reached (6 with ``RESUME_MAX`` 4 here; each may hold up to ≈ 100 MB on the largest instances), and they stayed
held until the next admission.
"""

from __future__ import annotations

import time
from dataclasses import replace
from fractions import Fraction

import numpy as np
from overlap_support import SCHEMA, EveryOtherClock, brute_max

import dpmagic.overlap.engine as eng_mod
import dpmagic.overlap.scoped as scoped_mod
from dpmagic.domain.sets import Box, CategorySet, Interval, IntervalSet
from dpmagic.overlap import OverlapEngine, PortfolioConfig
from dpmagic.overlap.rounding import sum_up
from dpmagic.overlap.scoped import scoped_state_nbytes

SCOPED = PortfolioConfig(steps=frozenset({"scoped"}), scoped_max_scope=99.0)


def _boxes(seed: int) -> list[Box]:
    rng = np.random.default_rng(seed)
    c3, c4, i = SCHEMA["c3"], SCHEMA["c4"], SCHEMA["i"]
    out = []
    for _ in range(24):
        cons = {}
        if rng.random() < 0.7:
            cons["c3"] = CategorySet.of_indices(c3, rng.choice(3, size=2, replace=False).tolist())
        if rng.random() < 0.7:
            cons["c4"] = CategorySet.of_indices(c4, rng.choice(4, size=2, replace=False).tolist())
        if rng.random() < 0.7:
            a = int(rng.integers(0, 5))
            cons["i"] = IntervalSet.of(i, [Interval(a, a + 2)])
        out.append(Box(cons))
    return out


def test_retighten_keeps_at_most_resume_max_paused_searches() -> None:
    """24 nodes of weight 0.1, γ's interval widened to Σw with 16 pending terms (``w_k`` + the load over box_k
    before k ≤ Σw: proven) holding no paused search, as ``_keep_resumes`` leaves the terms beyond the largest
    ``RESUME_MAX``.  One idle ``retighten`` whose searches each pause after a node: afterwards at most
    ``RESUME_MAX`` terms hold a paused search, within ``RESUME_MAX_BYTES``, and γ's interval is still proven
    (before the fix: 6 held)."""
    bx = _boxes(6)
    ws = [0.1] * len(bx)
    eng = OverlapEngine(SCHEMA, charged="exact", solver=SCOPED, time_limit=60.0, quick_time_limit=5.0,
                        retighten_seconds=0.0)  # fmt: skip
    for b, w in zip(bx, ws):
        eng.add(b, w)
    total = sum_up(ws)
    eng._gamma = replace(eng.overlap(), upper=total, exact=False)
    eng._pending = tuple(eng_mod._Term(k, bx[k], ws[k], total) for k in range(8, 24))
    eng._exact_up = 0.0
    scoped_mod.time = EveryOtherClock()  # type: ignore[assignment]
    try:
        eng.retighten(1000.0)
    finally:
        scoped_mod.time = time
    held = [t for t in eng._pending if t.resume is not None and t.resume.get("search") is not None]
    assert len(held) <= eng_mod.RESUME_MAX
    assert sum(scoped_state_nbytes(t.resume) for t in held) <= eng_mod.RESUME_MAX_BYTES
    g = eng.overlap()
    truth = round(brute_max(SCHEMA, bx, ws) / 0.1) * Fraction(0.1)  # exact: every load is a multiple of 0.1
    assert Fraction(g.lower) <= truth <= Fraction(g.upper)
