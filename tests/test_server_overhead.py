"""The server's per-query overhead (issue 31, continued) without HTTP: a plain answer travels as data and is
rendered by the client exactly as a local session renders it; the server parses a request's SQL once; the quota's
overlap, solved to admit a query, is not solved again to charge it (and the charge is the same proven bound)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from server_support import DATA, write_config

import dpmagic
import dpmagic.session.session as session_module
from dpmagic.accountant.accountant import Accountant
from dpmagic.domain.sets import box_from_json
from dpmagic.presentation.remote import RemoteAnswer
from dpmagic.presentation.server.config import load_config
from dpmagic.presentation.server.state import Custodian
from dpmagic.presentation.server.wire import result_to_wire

SQLS = [
    "SELECT COUNT(*) FROM pums WHERE age BETWEEN 20 AND 30",
    "SELECT sex, COUNT(*) AS n FROM pums WHERE age BETWEEN 25 AND 40 GROUP BY sex",
    "SELECT educ, AVG(income) AS m FROM pums WHERE age BETWEEN 30 AND 35 GROUP BY educ",
    "SELECT SUM(income) FROM pums WHERE age BETWEEN 40 AND 60",
]


@pytest.fixture
def custodian(tmp_path: Path) -> Custodian:
    return Custodian(load_config(write_config(tmp_path, budget="epsilon=100", quota=50.0)))


@pytest.mark.parametrize("definition", ["epsilon=5", "rho=5", "mu=5"])
@pytest.mark.parametrize("sql", SQLS)
def test_client_renders_a_plain_answer_exactly_as_locally(sql: str, definition: str) -> None:
    s = dpmagic.Session(pd.read_csv(DATA / "pums.csv"), DATA / "pums.schema.json", definition)
    param = definition.split("=")[0]
    result = s.query(sql, **{param: 0.5})
    body = result_to_wire(result)
    assert "text" not in body and "html" not in body and "notes" not in body  # no rendering on the server
    answer = RemoteAnswer(body, s.parse(sql), s.currency)
    assert repr(answer) == repr(result)
    assert answer._repr_html_() == result._repr_html_()
    assert answer.notes == result.notes and answer.summary() == result.summary()


def test_the_server_parses_a_request_once(custodian: Custodian, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = session_module.parse_query

    def counting(sql: str, *args: object, **kwargs: object) -> object:
        calls.append(sql)
        return real(sql, *args, **kwargs)

    monkeypatch.setattr(session_module, "parse_query", counting)
    for i, sql in enumerate(SQLS):
        status, reply, read = custodian.query("alice", "pums", {"sql": sql, "epsilon": 0.1}, f"key-{i}")
        assert status == 200 and read, reply
    assert calls == SQLS


def test_the_quota_overlap_is_solved_once_and_charges_the_same_bound(
    custodian: Custodian, monkeypatch: pytest.MonkeyPatch
) -> None:
    quota = custodian.quota("alice", "pums")
    previews: list[str] = []
    real = Accountant.preview

    def counting(self: Accountant, box: object, cost: float) -> object:
        if self is quota:
            previews.append(self.key)
        return real(self, box, cost)  # type: ignore[arg-type]

    monkeypatch.setattr(Accountant, "preview", counting)
    for i, sql in enumerate(SQLS * 2):
        status, reply, _ = custodian.query("alice", "pums", {"sql": sql, "epsilon": 0.2, "fresh": True}, f"k{i}")
        assert status == 200, reply
    assert len(previews) == len(SQLS) * 2  # one overlap solve per admitted query (was two: admit, then charge)
    # the recorded charges are the exact accountant's: a fresh in-memory accountant charging the same coverages
    # and costs in the same order (each charge solved anew) records the same bounds
    fresh = Accountant(quota.budget, quota.schema, bound="exact", neighbors=quota.neighbors)
    expected = []
    for e in quota.entries():
        _, ch = fresh.charge(box_from_json(e.coverage, quota.schema), e.cost, sql=e.sql, canonical=e.canonical)
        expected.append(ch.after)
    assert [e.charged_after for e in quota.entries()] == expected
    assert quota.spent <= quota.budget.total
