"""A long session's memory: a committed admission is not kept with the session's results (issue 28, session 13).

The engine's admission carries its pending terms, and a timed-out region search keeps its paused scoped search and
encoded problem there (≈ 10 MB each with 10,000 registered queries) so that later commits resume it; the engine
keeps at most ``RESUME_MAX`` of them.  A result's charge holding its admission kept every one ever made alive: with
10,000 registered queries the resident memory grew by ≈ 7 MB per hard admission (measured: 265 → 773 MB over 60
admissions; ``benchmarks/results/bench_session_issue28_s13_stall.md``)."""

from __future__ import annotations

import gc
import weakref

from tests_support import DECISION_SCHEMA as SCHEMA
from tests_support import DECISION_SQL as SQL
from tests_support import decision_frame as frame

from dpmagic.accountant.accountant import Accountant
from dpmagic.domain.schema import Schema
from dpmagic.session.session import Session


def test_results_do_not_keep_the_engines_admissions() -> None:
    s = Session(frame(), Schema.from_dict(SCHEMA), "epsilon=10")
    made: list[weakref.ref] = []
    orig = Accountant.preview

    def spy(self, box, cost, **kw):  # type: ignore[no-untyped-def]
        ch = orig(self, box, cost, **kw)
        if ch.admission is not None:
            made.append(weakref.ref(ch.admission))
        return ch

    Accountant.preview = spy  # type: ignore[method-assign]
    try:
        for _ in range(3):
            s.query(SQL, epsilon=0.1)
    finally:
        Accountant.preview = orig  # type: ignore[method-assign]
    assert made and len(s.results) == 3
    assert all(r.charge.admission is None and r.charge.person_admission is None for r in s.results)
    gc.collect()
    assert all(ref() is None for ref in made)
