"""A further admission on the one release path (dpmagic/session/admission.py): a server's per-analyst quota,
checked under the session's lock and charged in the same ledger transaction as the global charge, before any
row is read.  Exact (no statistics)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

import dpmagic
from dpmagic.accountant.accountant import Accountant
from dpmagic.accountant.currency import Budget
from dpmagic.errors import BudgetExceededError
from dpmagic.presentation.server.state import QuotaAdmission, bind_budget
from dpmagic.session.admission import admitting, current_admission

PUMS = dpmagic.__path__[0] + "/data/"


@pytest.fixture
def session(tmp_path) -> dpmagic.Session:
    return dpmagic.Session(
        pd.read_csv(PUMS + "pums.csv"), PUMS + "pums.schema.json", "epsilon=1.0", ledger=tmp_path / "l.sqlite"
    )


def quota(s: dpmagic.Session, total: float, who: str = "a") -> Accountant:
    key = f"{s.ledger_key}|analyst|{who}"
    budget = bind_budget(s.ledger, key, s.schema, Budget(s.currency, total, s.budget.delta), s.neighbors, who)
    return Accountant(budget, s.schema, ledger=s.ledger, key=key)


class Reading:
    """Wraps a backend's evaluate: records whether rows were read."""

    def __init__(self, s: dpmagic.Session) -> None:
        self.reads = 0
        inner = s.backend.evaluate

        def evaluate(*args: Any, **kwargs: Any) -> Any:
            self.reads += 1
            return inner(*args, **kwargs)

        s.backend.evaluate = evaluate  # type: ignore[method-assign]


def test_quota_refusal_charges_nothing_and_reads_nothing(session: dpmagic.Session) -> None:
    q = quota(session, 0.25)
    reading = Reading(session)
    events = len(session.ledger.events())
    with admitting(QuotaAdmission(q, "a", None)), pytest.raises(BudgetExceededError, match="your quota"):
        session.query("SELECT COUNT(*) FROM pums", epsilon=0.5)
    assert reading.reads == 0 and session.spent == 0 and q.spent == 0
    assert len(session.ledger.events()) == events  # nothing written


def test_both_charges_are_written_before_the_read(session: dpmagic.Session) -> None:
    q = quota(session, 0.5)
    seen: list[tuple[int, int]] = []
    inner = session.backend.evaluate

    def evaluate(*args: Any, **kwargs: Any) -> Any:  # at the read: both charges are already in the file
        from dpmagic.accountant.ledger import Ledger

        on_disk = Ledger(session.ledger.path)
        seen.append((len(on_disk.entries(session.ledger_key)), len(on_disk.entries(q.key))))
        on_disk.close()
        return inner(*args, **kwargs)

    session.backend.evaluate = evaluate  # type: ignore[method-assign]
    admission = QuotaAdmission(q, "a", "key-1")
    with admitting(admission):
        r = session.query("SELECT COUNT(*) FROM pums WHERE age < 40", epsilon=0.25)
    assert seen == [(1, 1)] and admission.charged
    assert session.spent == pytest.approx(0.25) and q.spent == pytest.approx(0.25)
    g = session.accountant.entry(r.entry_id)
    assert g is not None and g.details["analyst"] == "a" and g.details["idempotency_key"] == "key-1"
    assert q.entries()[0].details["global_entry"] == r.entry_id


def test_affordable_and_max_are_the_smaller_allowance(session: dpmagic.Session) -> None:
    q = quota(session, 0.3)
    sql = "SELECT COUNT(*) FROM pums WHERE age < 40"
    assert session.affordable(sql) == pytest.approx(1.0)
    with admitting(QuotaAdmission(q, "a", None)):
        assert session.affordable(sql) == pytest.approx(0.3)
        r = session.query(sql, epsilon="max")
    assert r.cost == pytest.approx(0.3)
    assert current_admission() is None  # only for the block
    other = quota(session, 1.0, "b")  # another analyst: the global load (0.3 there) bounds them
    with admitting(QuotaAdmission(other, "b", None)):
        assert session.affordable(sql) == pytest.approx(0.7)
        assert session.affordable("SELECT COUNT(*) FROM pums WHERE age >= 40") == pytest.approx(1.0)


def test_without_an_admission_nothing_changes(session: dpmagic.Session) -> None:
    r = session.query("SELECT COUNT(*) FROM pums", epsilon=0.25)
    g = session.accountant.entry(r.entry_id)
    assert g is not None and "analyst" not in g.details and session.ledger.ledger_keys() == [session.ledger_key]
