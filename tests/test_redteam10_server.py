"""Red team (session 10): the custodian server's per-analyst isolation and its dry runs (in process, no HTTP)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from server_support import write_config

from dpmagic.errors import UnsupportedQueryError
from dpmagic.presentation.server.config import load_config
from dpmagic.presentation.server.state import Custodian

ALICE_SQL = "SELECT COUNT(*) FROM pums WHERE age BETWEEN 41 AND 43 AND educ = 9"


@pytest.fixture
def custodian(tmp_path: Path) -> Custodian:
    return Custodian(load_config(write_config(tmp_path, budget="epsilon=1.0", quota=0.6)))


def test_a_dry_run_never_shows_another_analysts_sql_or_region(custodian: Custodian) -> None:
    """Hole (fixed): bob's dry run rendered the *global* accountant's overlapping queries — alice's SQL text and
    cost — and the global worst-case row (alice's region, educ=9), although the server promises that each analyst
    sees only their own charges."""
    status, _, read = custodian.query("alice", "pums", {"sql": ALICE_SQL, "epsilon": 0.1}, None)
    assert status == 200 and read
    body = {"sql": "SELECT COUNT(*) FROM pums WHERE age > 40", "epsilon": 0.1, "dry_run": True}
    status, reply, read = custodian.query("bob", "pums", body, None)
    assert status == 200 and not read
    shown = json.dumps(reply)
    assert "BETWEEN 41 AND 43" not in shown and "educ" not in shown, shown
    assert reply["admissible"]
    # bob's own earlier query does appear in his dry run
    custodian.query("bob", "pums", {"sql": "SELECT COUNT(*) FROM pums WHERE age > 50", "epsilon": 0.1}, None)
    _, reply, _ = custodian.query("bob", "pums", body, None)
    assert "age &gt; 50" in reply["html"] or "age > 50" in reply["html"]
    assert "BETWEEN 41 AND 43" not in json.dumps(reply)


def test_a_dry_run_is_refused_when_the_global_budget_would_refuse(custodian: Custodian) -> None:
    """The own-quota view keeps the global verdict: alice and carol fill the global budget on a region where bob's
    quota is untouched; bob's dry run there says refused (not admitted by his fresh quota alone)."""
    for who, eps in (("alice", 0.6), ("carol", 0.25)):
        status, _, _ = custodian.query(who, "pums", {"sql": "SELECT COUNT(*) FROM pums", "epsilon": eps}, None)
        assert status == 200
    body = {"sql": "SELECT COUNT(*) FROM pums WHERE age > 40", "epsilon": 0.3, "dry_run": True}
    status, reply, _ = custodian.query("bob", "pums", body, None)
    assert status == 200 and reply["admissible"] is False


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM pums WHERE age > (SELECT AVG(age) FROM pums)",
        "SELECT COUNT(*) FILTER (WHERE age > 40) AS a, COUNT(*) AS n FROM pums",
    ],
)
def test_a_dry_run_of_a_shape_the_server_does_not_answer_is_one_clear_error(custodian: Custodian, sql: str) -> None:
    """A scalar subquery or conditions on some aggregates only: the server's query path refuses them (one
    DPMagicError before any charge); their dry run raised AttributeError (a bare HTTP 500) — now the same refusal."""
    with pytest.raises(UnsupportedQueryError):
        custodian.query("bob", "pums", {"sql": sql, "epsilon": 0.1, "dry_run": True}, None)
    with pytest.raises(UnsupportedQueryError):
        custodian.query("bob", "pums", {"sql": sql, "epsilon": 0.1}, None)
    assert custodian.budget("bob", "pums")["quota"]["spent"] == 0.0
