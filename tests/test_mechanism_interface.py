"""The mechanism interface: any Mechanism subclass is charged by overlap, before it may read, through Session.run."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from dpmagic import Session
from dpmagic.domain.schema import Schema
from dpmagic.domain.sets import Box
from dpmagic.errors import BudgetExceededError, DPMagicError
from dpmagic.query.sql import parse_query
from dpmagic.releases import Backend, Mechanism, QueryMechanism

SCHEMA = Schema.from_dict(
    {
        "table": "t",
        "dataset": "mechanism-interface-test",
        "columns": {"g": {"type": "categorical", "values": ["a", "b"]}, "v": {"type": "int", "lower": 0, "upper": 9}},
    }
)


class Recording(Mechanism):
    """A toy mechanism that records when it is asked to read, and what the ledger held at that moment."""

    kind = "toy"

    def __init__(self, session: Session, coverage: Box, cost: float, *, fail: bool = False) -> None:
        self.session, self._coverage, self._cost, self.fail = session, coverage, cost, fail
        self.read_with_charges: list[int] = []

    @property
    def coverage(self) -> Box:
        return self._coverage

    @property
    def cost(self) -> float:
        return self._cost

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "note": "public description"}

    def release(self, backend: Backend) -> pd.DataFrame:
        self.read_with_charges.append(len(self.session.accountant.ledger.entries(self.session.accountant.key)))
        if self.fail:
            raise ValueError("exact value 123456789 leaked")
        return pd.DataFrame({"answer": [1.0]})


def _session() -> Session:
    return Session(pd.DataFrame({"g": ["a", "b", "a"], "v": [1, 2, 3]}), SCHEMA, "epsilon=1.0")


def _box(sql: str) -> Box:
    return parse_query(sql, SCHEMA).coverage


def test_a_new_mechanism_is_charged_before_it_reads_and_composes_in_parallel() -> None:
    s = _session()
    a = Recording(s, _box("SELECT COUNT(*) FROM t WHERE g = 'a'"), 0.75)
    b = Recording(s, _box("SELECT COUNT(*) FROM t WHERE g = 'b'"), 0.75)
    ra = s.run(a, sql="toy a", canonical="toy a")
    assert a.read_with_charges == [1]  # the charge was in the ledger when it read
    s.run(b, sql="toy b", canonical="toy b")  # disjoint coverage: parallel composition
    assert s.spent == pytest.approx(0.75)
    assert ra.df["answer"].tolist() == [1.0] and ra.charge.charged_as == "exact"
    details = s.accountant.entries()[0].details
    assert details["kind"] == "toy" and details["note"] == "public description"


def test_a_refused_mechanism_never_reads() -> None:
    s = _session()
    s.run(Recording(s, _box("SELECT COUNT(*) FROM t"), 0.75), sql="x", canonical="x")
    late = Recording(s, _box("SELECT COUNT(*) FROM t WHERE g = 'a'"), 0.5)
    with pytest.raises(BudgetExceededError):
        s.run(late, sql="y", canonical="y")
    assert late.read_with_charges == [] and s.spent == pytest.approx(0.75) and len(s.accountant) == 1


def test_a_failing_mechanism_leaks_no_text_and_stays_charged() -> None:
    s = _session()
    with pytest.raises(DPMagicError) as info:
        s.run(Recording(s, _box("SELECT COUNT(*) FROM t"), 0.25, fail=True), sql="z", canonical="z")
    assert "123456789" not in str(info.value) and info.value.__cause__ is None
    assert s.spent == pytest.approx(0.25) and s.accountant.entries()[-1].status == "charged"


def test_query_mechanism_declares_coverage_cost_and_noise_before_reading() -> None:
    q = parse_query("SELECT g, COUNT(*) AS n, SUM(v) AS s FROM t WHERE v < 5 GROUP BY g", SCHEMA)
    s = _session()
    m = QueryMechanism(q, SCHEMA, s.currency, 0.5, replace_one=False)
    assert m.coverage == q.coverage and m.cost == 0.5
    assert set(m.noise) == {"count", "sum(v)"} and m.describe()["releases_per_cell"] == 2
    r = s.run(m, sql=q.text, canonical=q.canonical)
    assert list(r.df["g"]) == ["a", "b"]
