"""Dry runs predict what the run then charges (issue 27, items 6 and 7).

A corpus of queries, batches and decision queries on the shipped Adult and PUMS data (pandas backend), each run
first as a dry run and then for real on the same session, in order (so the overlaps with the earlier charges are
part of what is predicted): the dry run charges and records nothing; a query's or a batch's predicted charge
(bound before → after) is exactly the one made, and a dry run that says "refused" is followed by a refused run
that spends nothing; a decision query charges exactly its Phase One cost without an FPR target, and at most Phase
One plus the stated Phase Two maximum with one.  Deterministic: the charges depend on the public queries only
(a decision query's Phase Two on the noise, checked against its stated maximum)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from tests_support import DATA

from dpmagic import Session
from dpmagic.errors import BudgetExceededError, DPMagicError

ADULT: list[tuple[str, str, dict[str, Any]]] = [
    ("query", "SELECT sex, COUNT(*) FROM adult GROUP BY sex", {"epsilon": 0.1}),
    ("query", "SELECT race, AVG(age) FROM adult WHERE sex = 'Female' GROUP BY race", {"epsilon": 0.2}),
    (
        "query",
        "SELECT education, MEDIAN(age) FROM adult WHERE education IN ('Bachelors', 'Masters') GROUP BY education",
        {"epsilon": 0.2},
    ),
    ("query", "SELECT race, MAX(age), MIN(age) FROM adult WHERE race = 'White' GROUP BY race", {"epsilon": 0.1}),
    (
        "query",
        'SELECT workclass, SUM("hours-per-week") AS h FROM adult GROUP BY workclass HAVING h > 10000',
        {"epsilon": 0.1},
    ),
    (
        "query",
        'SELECT occupation, AVG("hours-per-week") AS hrs FROM adult GROUP BY occupation ORDER BY hrs DESC LIMIT 3',
        {"epsilon": 0.1},
    ),
    ("query", "SELECT COUNT(DISTINCT education) FROM adult WHERE age < 25", {"epsilon": 0.05}),
    ("query", "SELECT sex, VAR(age), STDDEV(age) FROM adult GROUP BY sex", {"epsilon": 0.1}),
    (
        "query",
        "SELECT PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY age) FROM adult WHERE sex = 'Male'",
        {"epsilon": 0.05},
    ),
    ("query", "SELECT sex, COUNT(*) FROM adult GROUP BY sex", {"epsilon": 0.1}),  # the same again: cached, free
    ("query", "SELECT age, COUNT(*) FROM adult WHERE age BETWEEN 18 AND 22 GROUP BY age", {"epsilon": 0.1}),
    ("query", "SELECT COUNT(*) FROM adult WHERE age > 60", {"epsilon": 50.0}),  # refused: beyond the budget
    ("batch", "identity(sex)", {"epsilon": 0.1}),
    ("batch", "prefix(age)", {"epsilon": 0.2, "where": "sex = 'Female'"}),
    (
        "batch",
        "SELECT COUNT(*) FROM adult WHERE age < 30; SELECT COUNT(*) FROM adult WHERE race = 'Black'",
        {"epsilon": 0.1},
    ),
    ("batch", "identity(race)", {"epsilon": 40.0}),  # refused: beyond the budget
    ("decide", "SELECT race FROM adult GROUP BY race HAVING COUNT(*) > 1000", {"fnr": 0.05}),
    ("decide", "SELECT race FROM adult GROUP BY race HAVING AVG(age) > 38", {"fnr": 0.05}),
    ("decide", "SELECT sex FROM adult WHERE age < 40 GROUP BY sex HAVING COUNT(*) > 5000", {"fnr": 0.1, "fpr": 0.1}),
    ("query", "SELECT COUNT(*) FROM adult WHERE age > 60", {"epsilon": "max"}),  # what is left on its region
    ("batch", "identity(sex)", {"epsilon": 0.01, "where": "age > 60"}),  # refused: nothing left there
]
PUMS: list[tuple[str, str, dict[str, Any]]] = [
    ("query", "SELECT sex, COUNT(*), AVG(income) FROM pums GROUP BY sex", {"rho": 0.05}),
    ("query", "SELECT educ, MEDIAN(age) FROM pums WHERE educ IN ('9', '13') GROUP BY educ", {"rho": 0.05}),
    ("query", "SELECT race, MAX(income) FROM pums GROUP BY race", {"rho": 0.02}),
    ("query", "SELECT married, VAR(age) FROM pums GROUP BY married", {"rho": 0.02}),
    ("query", "SELECT COUNT(DISTINCT educ) FROM pums WHERE age >= 30", {"rho": 0.01}),
    (
        "query",
        "SELECT age, AVG(income) AS m FROM pums WHERE age BETWEEN 30 AND 40 GROUP BY age HAVING m > 30000",
        {"rho": 0.02},
    ),
    ("query", "SELECT COUNT(*) FROM pums", {"rho": 5.0}),  # refused
    ("batch", "identity(sex)", {"rho": 0.05}),
    ("batch", "identity(race)", {"rho": 3.0}),  # refused
    ("batch", "prefix(age)", {"rho": 0.05, "where": "married = '1'"}),
    ("decide", "SELECT race FROM pums GROUP BY race HAVING COUNT(*) > 100", {"fnr": 0.05}),
    ("decide", "SELECT sex FROM pums GROUP BY sex HAVING COUNT(*) > 400", {"fnr": 0.05, "fpr": 0.2}),
]


def _run(s: Session, kind: str, text: str, opts: dict[str, Any], dry: bool) -> Any:
    opts = dict(opts)
    if kind == "query":
        return s.preview(text, **opts) if dry else s.query(text, **opts)
    if kind == "batch":
        return s.batch(text, dry_run=dry, **opts)
    return s.decide(text, dry_run=dry, max_group_size=40_000, **{"fpr": None, **opts})


@pytest.mark.parametrize("table, budget, corpus", [("adult", "epsilon=3", ADULT), ("pums", "rho=1", PUMS)])
def test_dry_runs_predict_the_charge(table: str, budget: str, corpus: list) -> None:
    df = pd.read_csv(DATA / f"{table}.csv")
    s = Session(df, DATA / f"{table}.schema.json", budget)
    refused = 0
    for kind, text, opts in corpus:
        spent, entries = s.spent, len(s.accountant)
        pre = _run(s, kind, text, opts, dry=True)
        assert s.spent == spent and len(s.accountant) == entries, text  # a dry run charges and records nothing
        if kind == "decide":
            res = _run(s, kind, text, opts, dry=False)
            charged = s.spent - spent
            phase_one, phase_two = pre.plan["phase_one_cost"], pre.plan["phase_two_max_cost"]
            assert res.cost == pytest.approx(charged, rel=1e-9, abs=1e-12), text
            if opts.get("fpr") is None:
                assert phase_two == 0.0 and charged == pytest.approx(phase_one, rel=1e-9), text
                assert "Phase Two" not in pre.summary()
            else:
                assert phase_one * (1 - 1e-9) <= charged <= (phase_one + phase_two) * (1 + 1e-9), text
                assert "depends on the data, at most" in pre.summary()
            continue
        if kind == "query" and pre.cached:  # an identical earlier query: the stored answer, nothing charged
            _run(s, kind, text, opts, dry=False)
            assert s.spent == spent, text
            continue
        ch = pre.charge
        if not ch.admissible:
            refused += 1
            if kind == "batch":
                assert "would be REFUSED" in pre.summary() and "would be charged" not in pre.summary()
            with pytest.raises(BudgetExceededError):
                _run(s, kind, text, opts, dry=False)
            assert s.spent == spent and len(s.accountant) == entries, text
            continue
        if kind == "batch":
            assert "would be charged" in pre.summary()
        real = _run(s, kind, text, opts, dry=False)
        assert (real.charge.before, real.charge.after) == pytest.approx((ch.before, ch.after), rel=1e-12), text
        assert real.charge.charged_as == ch.charged_as, text
        assert s.spent == pytest.approx(s.budget.currency.cost(ch.after), rel=1e-12), text
    assert refused >= 2


def test_a_dry_run_refuses_what_the_run_refuses_before_the_charge() -> None:
    """The run refuses, before the charge, what the backend cannot answer (``Mechanism.check``); the dry run
    runs the same check, so it never says "would be charged" for such a release."""
    df = pd.read_csv(DATA / "pums.csv")
    s = Session(df, DATA / "pums.schema.json", "epsilon=1")

    class Refusing(type(s.backend)):  # type: ignore[misc]
        def check(self, query: Any, extended: Any = None) -> None:
            raise DPMagicError("this backend cannot answer it")

    s.backend.__class__ = Refusing
    for call in (
        lambda: s.preview("SELECT COUNT(*) FROM pums", epsilon=0.1),
        lambda: s.query("SELECT COUNT(*) FROM pums", epsilon=0.1),
    ):
        with pytest.raises(DPMagicError, match="cannot answer"):
            call()
    assert s.spent == 0.0 and len(s.accountant) == 0
