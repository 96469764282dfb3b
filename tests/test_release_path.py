"""One release path: every kind of release (query, batch, decision read) is charged by ``Session.run``, tells the
panel through the same ``charged`` event, and its dry run (the same pipeline without the charge) predicts exactly
what the run then charges — or, for a decision query's Phase Two, says that it depends on the data and gives its
maximum.  Nothing here is random in what it asserts: the charges are public functions of the queries.
"""

from __future__ import annotations

import pandas as pd
import pytest
from tests_support import DECISION_SCHEMA as SCHEMA
from tests_support import DECISION_SQL as SQL
from tests_support import decision_frame as frame

from dpmagic.domain.schema import Schema
from dpmagic.presentation.widgets import BudgetWidget
from dpmagic.session.session import Session

BUDGETS = ["epsilon=4", "rho=2", "mu=2"]


def _session(budget: str) -> Session:
    return Session(frame(), Schema.from_dict({**SCHEMA, "max_group_size": 1000}), budget)


def _charged_events(s: Session) -> list[dict]:
    seen: list[dict] = []
    s.subscribe(lambda kind, info: seen.append(info) if kind == "charged" else None)
    return seen


@pytest.mark.parametrize("budget", BUDGETS)
def test_every_kind_of_release_emits_charged_once_per_charge(budget: str) -> None:
    s = _session(budget)
    seen = _charged_events(s)
    small = {"epsilon": 0.05} if budget.startswith("epsilon") else {"rho": 0.01} if budget.startswith("rho") else {}
    s.query("SELECT COUNT(*) FROM t WHERE r = 'N'", **small)
    assert len(seen) == 1 and seen[-1]["number"] == 1
    s.batch("identity(g)", where="r = 'S'", **small)
    assert len(seen) == 2 and seen[-1]["number"] == 2
    before = len(s.accountant)
    s.decide(SQL.format(r="N"), fnr=0.05, fpr=None)
    reads = len(s.accountant) - before
    assert reads >= 1 and len(seen) == 2 + reads  # one event per charged read, the panel never goes stale
    assert [e["number"] for e in seen] == list(range(1, len(seen) + 1))


def test_the_panel_refreshes_after_a_decision_query() -> None:
    s = _session("epsilon=4")
    panel = BudgetWidget(s)
    before = panel.numbers.value
    s.decide(SQL.format(r="N"), fnr=0.05, fpr=None)
    assert panel.numbers.value != before
    assert f"{len(s.accountant)} queries" in panel.numbers.value and len(s.accountant) >= 1
    assert "answered" in panel.status.value


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM t WHERE r = 'N'",
        "SELECT g, SUM(x), AVG(x) FROM t WHERE x > 3 GROUP BY g",
        "SELECT MEDIAN(x), VAR(f) FROM t WHERE g IN ('A', 'B')",
        "SELECT STDDEV(x) FROM t WHERE g IN ('A', 'B') OR x < 2",
        "SELECT COUNT(DISTINCT g) FROM t",
    ],
)
def test_a_query_dry_run_predicts_the_charge_exactly(budget: str, sql: str) -> None:
    if "MEDIAN" in sql and budget.startswith("mu"):
        pytest.skip("quantiles are refused under μ-GDP (tested in tests/test_minmax.py)")
    s = _session(budget)
    s.query("SELECT COUNT(*) FROM t WHERE g = 'A'")  # something already charged, overlapping some of them
    pre = s.preview(sql)
    r = s.query(sql)
    assert pre.charge.after == r.charge.after and pre.charge.cost == r.cost
    assert s.accountant.charged_weight == pre.charge.after


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize(
    "workload, where",
    [
        ("identity(g)", "r = 'N'"),
        ("prefix(x)", None),
        ("SELECT COUNT(*) FROM t WHERE x < 3; SELECT COUNT(*) FROM t WHERE g = 'B'", None),
    ],
)
def test_a_batch_dry_run_predicts_the_charge_exactly(budget: str, workload: str, where: str | None) -> None:
    s = _session(budget)
    s.query("SELECT COUNT(*) FROM t WHERE g = 'A'")
    pre = s.batch(workload, where=where, dry_run=True)
    assert len(s.accountant) == 1  # the dry run charged nothing
    r = s.batch(workload, where=where)
    assert pre.charge.after == r.charge.after and pre.cost == r.cost


def test_a_batch_dry_run_says_when_the_run_would_be_refused() -> None:
    s = _session("epsilon=1")
    s.query("SELECT COUNT(*) FROM t WHERE r = 'N'", epsilon=0.9)
    pre = s.batch("identity(g)", where="r = 'N'", epsilon=0.5, dry_run=True)
    assert not pre.charge.admissible
    assert "REFUSED" in pre.summary() and "would be charged" not in pre.summary()
    with pytest.raises(Exception, match="refused"):
        s.batch("identity(g)", where="r = 'N'", epsilon=0.5)


@pytest.mark.parametrize("budget", BUDGETS)
def test_a_decision_dry_run_predicts_phase_one_exactly(budget: str) -> None:
    s = _session(budget)
    s.query("SELECT COUNT(*) FROM t WHERE g = 'A'")
    sql = SQL.format(r="N")
    pre = s.decide(sql, fnr=0.05, fpr=None, dry_run=True)
    assert len(s.accountant) == 1
    weight_before = s.accountant.charged_weight
    ans = s.decide(sql, fnr=0.05, fpr=None)
    # Phase One only (no FPR target): the dry run's cost is what the reads charged, composed
    assert ans.cost == pytest.approx(pre.cost, rel=1e-12)
    assert pre.plan["phase_two_max_cost"] == 0.0
    charged = s.currency.weight(pre.cost)
    assert s.accountant.charged_weight == pytest.approx(max(weight_before, weight_before + charged), rel=1e-12)


def test_a_decision_dry_run_with_phase_two_gives_its_maximum() -> None:
    s = _session("epsilon=4")
    sql = SQL.format(r="N")
    pre = s.decide(sql, fnr=0.05, fpr=0.05, dry_run=True, max_epsilon=2.0)
    assert "depends on the data" in pre.summary()
    ans = s.decide(sql, fnr=0.05, fpr=0.05, max_epsilon=2.0)
    assert ans.cost <= pre.cost + pre.plan["phase_two_max_cost"] + 1e-12


def test_dry_runs_leave_the_ledger_untouched() -> None:
    s = _session("epsilon=4")
    events = len(s.ledger.events())
    s.preview("SELECT COUNT(*) FROM t")
    s.batch("identity(g)", dry_run=True)
    s.decide(SQL.format(r="S"), fnr=0.05, fpr=None, dry_run=True)
    assert len(s.ledger.events()) == events and s.spent == 0.0
    assert isinstance(s.ledger_frame(), pd.DataFrame)


def test_a_batch_at_max_with_nothing_left_is_refused_like_a_query() -> None:
    s = _session("epsilon=1")
    s.query("SELECT COUNT(*) FROM t WHERE r = 'N'", epsilon="max")
    for ask in (
        lambda: s.query("SELECT COUNT(*) FROM t WHERE r = 'N'", epsilon="max", fresh=True),
        lambda: s.batch("identity(g)", where="r = 'N'", epsilon="max"),
    ):
        with pytest.raises(Exception, match="no budget is left"):
            ask()
    assert s.spent == pytest.approx(1.0)
