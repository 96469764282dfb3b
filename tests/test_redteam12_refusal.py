"""Red team 12: a refused query changes nothing — at person level too, where the refusal's message computes what is
left on the query's region (:meth:`~dpmagic.accountant.accountant.Accountant.affordable`).

Finding: that computation read both engines' :meth:`~dpmagic.overlap.engine.OverlapEngine.bounds`, whose display
refinement re-solves a non-exact γ from scratch and tightens γ's interval, its pending terms and the node terms in
place (without changing the engine's state counter).  After a refused query the next admission was then computed
from a different engine than if the query had never been asked (here: γ's interval [2, 4] became exact at 2).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from test_people_accountant import COLUMNS, accountant_for, charge_all, strictly_tighter_case

from dpmagic.accountant.accountant import Accountant
from dpmagic.accountant.currency import parse_budget
from dpmagic.accountant.ledger import Ledger
from dpmagic.domain.schema import Schema
from dpmagic.errors import BudgetExceededError
from dpmagic.overlap.engine import OverlapEngine, _Term
from dpmagic.overlap.rounding import sum_up


def _widen(eng: OverlapEngine) -> None:
    """γ's interval as a timed-out from-scratch search leaves it: [witness, Σw] with one global pending term (Σw
    bounds every row's load: proven)."""
    wide = sum_up(eng.weights.tolist())
    eng._gamma = replace(eng.overlap(), upper=wide, exact=False)
    eng._pending, eng._exact_up = (_Term(eng.store.n, None, 0.0, wide),), 0.0
    eng._term_up[: eng.store.n] = wide


def _snapshot(eng: OverlapEngine) -> tuple:
    g = eng._gamma
    assert g is not None
    terms = tuple(t.upper for t in eng._pending)
    return g.lower, g.upper, g.exact, eng._exact_up, terms, eng._term_up[: eng.store.n].tolist(), eng.state[1]


def test_a_refused_person_level_query_changes_no_engine() -> None:
    """Two accountants with the same four charges (person level, K′ = 2, budget ε = 5) and γ's intervals left
    wide; one is asked a query costing ε = 10 (refused).  Its engines are unchanged, and the next query's preview
    (charge, label, bounds) is the same in both."""
    schema, work = strictly_tighter_case()
    asked, never = (accountant_for(schema, "add-remove", budget="epsilon=5") for _ in range(2))
    for acc in (asked, never):
        charge_all(acc, work)
        assert acc.person_engine is not None
        _widen(acc.engine)
        _widen(acc.person_engine)
    assert asked.person_engine is not None and never.person_engine is not None
    before = (_snapshot(asked.engine), _snapshot(asked.person_engine))
    with pytest.raises(BudgetExceededError):
        asked.charge(work[0][0], 10.0, sql="refused", canonical="refused")
    assert (_snapshot(asked.engine), _snapshot(asked.person_engine)) == before
    a, b = asked.preview(work[1][0], 0.5), never.preview(work[1][0], 0.5)
    assert (a.after, a.charged_as, a.admissible) == (b.after, b.charged_as, b.admissible)
    for x, y in ((a.bounds, b.bounds), (a.person_admission.bounds, b.person_admission.bounds)):  # type: ignore[union-attr]
        assert (x.overlap.lower, x.overlap.upper, x.overlap.exact) == (
            y.overlap.lower,
            y.overlap.upper,
            y.overlap.exact,
        )


@pytest.mark.parametrize("person", [False, True])
def test_a_refusal_message_searches_no_longer_than_an_admission(monkeypatch, person) -> None:
    """A refusal's "what is left on this region" is a load search like an admission's: it gets the engine's
    ``near_time_limit`` (below 1 s), not the engine's ``time_limit`` (10 s by default, which a hard region would
    spend on the refused cell).  The bound stays proven (only its tightness depends on the time)."""
    import dpmagic.overlap.engine as engine_module

    schema, work = strictly_tighter_case()
    if person:
        acc = accountant_for(schema, "add-remove", budget="epsilon=5")
    else:
        row_level = Schema(dict(COLUMNS), table="t")  # the same columns, one row per person
        acc = Accountant(parse_budget("epsilon=5"), row_level, ledger=Ledger())
        assert acc.unit is None
    charge_all(acc, work)
    limits: list[float] = []
    real = engine_module.solve_overlap

    def spy(*args, **kwargs):
        limits.append(kwargs.get("time_limit", math.inf))
        return real(*args, **kwargs)

    monkeypatch.setattr(engine_module, "solve_overlap", spy)
    with pytest.raises(BudgetExceededError):
        acc.charge(work[0][0], 10.0, sql="refused", canonical="refused")
    assert limits and max(limits) <= acc.engine.near_time_limit < 1.0
