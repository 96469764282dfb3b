"""The analyst's questions: cost preview, affordable budget, accuracy first, free re-runs, replace-one, budget map."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmagic import Session
from dpmagic.domain.schema import Schema
from dpmagic.errors import BudgetExceededError, ConfigurationError
from dpmagic.noise.calibration import release_integer
from dpmagic.overlap.pairs import max_pair_load
from dpmagic.query import parse_query
from dpmagic.releases.plan import cost_for_target, plan_noise


class NoTouch:
    """A DataFrame stand-in that fails on any access: proves that no data is read."""

    def __getattr__(self, name):
        raise AssertionError(f"the data was accessed ({name})")

    def __getitem__(self, key):
        raise AssertionError("the data was accessed")

    def __len__(self):
        raise AssertionError("the data was accessed")


@pytest.fixture
def session(adult) -> Session:
    df, schema = adult
    return Session(df, schema, "epsilon=1.0")


def forbid_data(s: Session) -> None:
    s.backend.df = NoTouch()  # type: ignore[assignment]
    s.data = NoTouch()  # type: ignore[assignment]


def snapshot(s: Session):
    return [(e.id, e.status, e.cost) for e in s.accountant.entries()], s.spent, len(s.ledger.events())


def test_preview_and_afford_read_nothing_and_change_nothing(session: Session) -> None:
    r1 = session.query("SELECT COUNT(*) FROM adult WHERE age < 30", epsilon=0.4)
    r2 = session.query("SELECT sex, COUNT(*) FROM adult WHERE age >= 30 GROUP BY sex", epsilon=0.3)
    before = snapshot(session)
    forbid_data(session)
    p = session.preview("SELECT COUNT(*) FROM adult WHERE age BETWEEN 25 AND 35", epsilon=0.2)
    assert p.admissible
    assert p.increase == pytest.approx(0.2)
    assert p.charge.overlaps == 2 and list(p.overlapping["id"]) == [r1.entry_id, r2.entry_id]
    assert p.charge.worst_row is not None and 25 <= p.charge.worst_row["age"] <= 29  # new worst row: age < 30 part
    assert p.halfwidth["count"] > 0
    assert "Nothing was spent" in p.summary()
    assert session.affordable("SELECT COUNT(*) FROM adult WHERE age < 30") == pytest.approx(0.6)
    assert session.affordable("SELECT COUNT(*) FROM adult WHERE age >= 30") == pytest.approx(0.7)
    assert session.affordable("SELECT COUNT(*) FROM adult") == pytest.approx(0.6)
    big = session.preview("SELECT COUNT(*) FROM adult", epsilon=0.9)
    assert not big.admissible and "REFUSED" in big.summary()
    session.preview("SELECT AVG(age) FROM adult WHERE sex = 'Male'", ci=5.0, min_rows=1000)
    session.preview("SELECT COUNT(*) FROM adult WHERE age < 30", epsilon="max")
    assert snapshot(session) == before


def test_epsilon_max_exhausts_exactly_that_region(session: Session) -> None:
    session.query("SELECT COUNT(*) FROM adult WHERE sex = 'Male'", epsilon=0.3)
    r = session.query("SELECT COUNT(*) FROM adult WHERE sex = 'Male' AND age < 40", epsilon="max")
    assert r.cost == pytest.approx(0.7)
    assert session.spent == pytest.approx(1.0)
    assert session.affordable("SELECT COUNT(*) FROM adult WHERE sex = 'Male' AND age < 40") == pytest.approx(
        0.0, abs=1e-12
    )
    with pytest.raises(BudgetExceededError, match="no budget is left"):
        session.query("SELECT COUNT(*) FROM adult WHERE sex = 'Male' AND age = 30", epsilon="max")
    # elsewhere the budget is untouched: a disjoint region still gets the full budget
    assert session.affordable("SELECT COUNT(*) FROM adult WHERE sex = 'Female'") == pytest.approx(1.0)
    r2 = session.query("SELECT COUNT(*) FROM adult WHERE sex = 'Female'", epsilon="max")
    assert r2.cost == pytest.approx(1.0) and session.spent == pytest.approx(1.0)
    # what is left on the male, older region is what the first query left
    assert session.affordable("SELECT COUNT(*) FROM adult WHERE sex = 'Male' AND age >= 40") == pytest.approx(0.7)


@pytest.mark.parametrize("definition, budget", [("epsilon", 5.0), ("rho", 5.0), ("mu", 5.0)])
@pytest.mark.parametrize("target", [5.0, 50.0])
def test_accuracy_first_count(adult, definition, budget, target) -> None:
    df, schema = adult
    s = Session(df, schema, f"{definition}={budget}")
    q = s.parse("SELECT COUNT(*) FROM adult WHERE age < 40")
    cost = cost_for_target(q, s.schema, s.currency, target)
    plan = plan_noise(q, s.schema, s.currency, cost)
    assert plan.count.ci_halfwidth() <= target
    # the smallest such cost: a little less would miss the target
    cheaper = plan_noise(q, s.schema, s.currency, cost * 0.99)
    assert cheaper.count.ci_halfwidth() > target
    draws = release_integer(np.zeros(20_000, dtype=np.int64), plan.count)
    inside = np.mean(np.abs(draws) <= target)
    assert 0.94 <= inside <= 0.975  # empirical 95% interval half-width matches the target
    r = s.query("SELECT COUNT(*) FROM adult WHERE age < 40", ci=target)
    assert r.cost == pytest.approx(cost)
    assert (r.df["count_ci_high"] - r.df["count"]).iloc[0] <= target


def test_accuracy_first_sum_and_avg(session: Session) -> None:
    r = session.query("SELECT SUM(age) AS s FROM adult WHERE sex = 'Female'", ci=3000)
    assert (r.df["s_ci_high"] - r.df["s"]).iloc[0] <= 3000
    with pytest.raises(ConfigurationError, match="min-rows"):
        session.query("SELECT AVG(age) FROM adult WHERE sex = 'Male'", ci=1.0)
    r = session.query("SELECT AVG(age) AS a FROM adult WHERE sex = 'Male'", ci=1.0, min_rows=5000)
    width = (r.df["a_ci_high"] - r.df["a_ci_low"]).iloc[0] / 2
    assert width <= 1.0 + 1e-9  # the group is far larger than 5,000 rows
    with pytest.raises(BudgetExceededError, match="needs ε="):
        session.query("SELECT COUNT(*) FROM adult", ci=0.5)


def test_free_reruns(session: Session) -> None:
    a = session.query("SELECT sex, COUNT(*) AS n FROM adult WHERE age < 30 GROUP BY sex", epsilon=0.1)
    spent = session.spent
    b = session.query("select sex,   count(*) as n\nFROM adult  where AGE < 30 group by sex", epsilon=0.1)
    assert b.cached and session.spent == spent
    pd.testing.assert_frame_equal(a.df, b.df)
    assert "charged nothing" in b.summary()
    for sql, kw in [
        ("SELECT sex, COUNT(*) AS n FROM adult WHERE age < 31 GROUP BY sex", {"epsilon": 0.1}),  # literal
        ("SELECT sex, COUNT(*) AS n FROM adult WHERE age < 30 GROUP BY sex", {"epsilon": 0.2}),  # cost
        ("SELECT sex, COUNT(*) AS n FROM adult WHERE age < 30 GROUP BY sex", {"ci": 100.0}),  # option
        ("SELECT sex, COUNT(*) AS n FROM adult WHERE age < 30 GROUP BY sex", {"epsilon": 0.1, "fresh": True}),
    ]:
        n = len(session.accountant.ledger)
        r = session.query(sql, **kw)
        assert not r.cached and len(session.accountant.ledger) == n + 1
    assert session.preview("SELECT sex, COUNT(*) AS n FROM adult WHERE age < 30 GROUP BY sex", epsilon=0.1).cached


def test_rerun_cache_survives_rebinding_a_durable_ledger(adult, tmp_path) -> None:
    df, schema = adult
    path = tmp_path / "ledger.sqlite"
    s1 = Session(df, schema, "epsilon=1", ledger=path)
    a = s1.query("SELECT race, COUNT(*) FROM adult GROUP BY race", epsilon=0.2)
    s2 = Session(df, schema, "epsilon=1", ledger=path)
    assert s2.spent == pytest.approx(0.2)
    b = s2.query("SELECT race, COUNT(*) FROM adult GROUP BY race", epsilon=0.2)
    assert b.cached and s2.spent == pytest.approx(0.2)
    pd.testing.assert_frame_equal(a.df, b.df, check_dtype=False)


def test_rerun_cache_refuses_a_ledger_release_without_its_answer(adult, tmp_path) -> None:
    """A release event of the ledger without its answer (an edited file) is one clear error that charges nothing."""
    df, schema = adult
    path = tmp_path / "ledger.sqlite"
    s1 = Session(df, schema, "epsilon=1", ledger=path)
    a = s1.query("SELECT race, COUNT(*) FROM adult GROUP BY race", epsilon=0.2)
    s1.accountant.ledger.append(s1.accountant.key, "release", {"entry": a.entry_id})  # no "answer"
    s2 = Session(df, schema, "epsilon=1", ledger=path)
    with pytest.raises(ConfigurationError, match=f"release of entry {a.entry_id} without its answer"):
        s2.query("SELECT race, COUNT(*) FROM adult GROUP BY race", epsilon=0.2)
    assert s2.spent == pytest.approx(0.2) and len(s2.accountant.ledger) == len(s1.accountant.ledger)


def test_budget_map(session: Session) -> None:
    session.query("SELECT COUNT(*) FROM adult WHERE sex = 'Male' AND race = 'White'", epsilon=0.3)
    session.query("SELECT COUNT(*) FROM adult WHERE race IN ('White', 'Black')", epsilon=0.2)
    session.query("SELECT COUNT(*) FROM adult WHERE age < 30", epsilon=0.1)
    m = session.budget_map("sex", "race")
    assert m.shape == (2, 5)
    assert m.loc["Male", "White"] == pytest.approx(0.6)
    assert m.loc["Female", "White"] == pytest.approx(0.3)
    assert m.loc["Female", "Other"] == pytest.approx(0.1)
    a = session.budget_map("age", "sex")
    assert a.loc["[17, 29]", "Male"] == pytest.approx(0.6) and a.loc["[30, 90]", "Female"] == pytest.approx(0.2)
    with pytest.raises(ConfigurationError):
        session.budget_map("sex", "nope")


TINY = Schema.from_dict(
    {
        "columns": {
            "a": {"type": "categorical", "values": ["x", "y", "z"]},
            "b": {"type": "int", "lower": 0, "upper": 4},
            "c": {"type": "categorical", "values": [0, 1]},
        }
    }
)
PREDICATES = {
    "a": ["a = 'x'", "a IN ('x', 'y')", "a <> 'z'", "a = 'z'"],
    "b": ["b < 2", "b BETWEEN 1 AND 3", "b >= 3", "b = 2", "b <> 2"],
    "c": ["c = 0", "c = 1"],
}
ROWS = [dict(zip("abc", v)) for v in itertools.product(["x", "y", "z"], range(5), [0, 1])]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from([p for ps in PREDICATES.values() for p in ps]), max_size=3),
            st.sampled_from([0.1, 0.25, 0.5, 1.0]),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_replace_one_pair_bound_matches_brute_force(queries) -> None:
    boxes, weights = [], []
    for preds, w in queries:
        sql = "SELECT COUNT(*) FROM t" + (" WHERE " + " AND ".join(preds) if preds else "")
        boxes.append(parse_query(sql, TINY).where)
        weights.append(w)
    r = max_pair_load(boxes, weights, TINY)
    assert r is not None
    brute = max(
        math.fsum(w for b, w in zip(boxes, weights) if b.contains_row(x) or b.contains_row(y))
        for x, y in itertools.combinations(ROWS, 2)
    )
    assert r.value == pytest.approx(brute)
    exact = max(
        sum((Fraction(w) for b, w in zip(boxes, weights) if b.contains_row(x) or b.contains_row(y)), Fraction(0))
        for x, y in itertools.combinations(ROWS, 2)
    )
    assert Fraction(r.value) >= exact  # a proven upper bound: never rounded below the exact pair weight
    x, y = r.rows
    assert math.fsum(w for b, w in zip(boxes, weights) if b.contains_row(x) or b.contains_row(y)) == pytest.approx(
        brute
    )
    gamma = max(math.fsum(w for b, w in zip(boxes, weights) if b.contains_row(x)) for x in ROWS)
    assert gamma - 1e-12 <= r.value <= min(2 * gamma, sum(weights)) + 1e-12


def test_replace_one_session(adult) -> None:
    df, schema = adult
    s = Session(df, schema, "epsilon=1.0", neighbors="replace")
    s.query("SELECT COUNT(*) FROM adult WHERE age < 30", epsilon=0.4)
    s.query("SELECT COUNT(*) FROM adult WHERE age >= 30", epsilon=0.4)
    assert s.spent == pytest.approx(0.8)  # a person changing from 25 to 45 touches both
    with pytest.raises(BudgetExceededError):
        s.query("SELECT COUNT(*) FROM adult WHERE age >= 60", epsilon=0.3)
    r = s.query("SELECT SUM(age) AS a FROM adult WHERE sex = 'Male'", epsilon=0.2)
    # A replaced row can leave the box (Male → Female): max(upper − lower, max|value|) = max(73, 90).
    # (This expectation was 90 − 17 before the audit's item 1: that under-noised the release.)
    assert r.noise["sum(age)"].sensitivity == 90
    grouped = plan_noise(
        s.parse("SELECT sex, COUNT(*) FROM adult GROUP BY sex"), s.schema, s.currency, 0.1, replace_one=True
    )
    assert grouped.count.sensitivity == 2.0  # one cell loses a row, another gains it
    a = Session(df, schema, "epsilon=1.0")
    a.query("SELECT COUNT(*) FROM adult WHERE age < 30", epsilon=0.4)
    a.query("SELECT COUNT(*) FROM adult WHERE age >= 30", epsilon=0.4)
    assert a.spent == pytest.approx(0.4)  # add/remove-one: disjoint regions compose in parallel


def test_dry_run_magic_spends_nothing(adult) -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from dpmagic.presentation.magics import current_session

    ip = InteractiveShell.instance()
    ip.run_cell("%load_ext dpmagic")
    ip.user_ns.update(adult=adult[0], schema=adult[1])
    with capture_output():
        ip.run_cell("%dpsession adult --schema schema --budget epsilon=1.0")
        res = ip.run_cell("%%dpquery --dry-run --epsilon 0.3\nSELECT COUNT(*) FROM adult WHERE age < 30\n")
        assert res.success and "dry run" in res.result.summary()
        assert current_session().spent == 0.0
        res = ip.run_cell("%%dpquery --epsilon max\nSELECT COUNT(*) FROM adult WHERE age < 30\n")
        assert res.success and current_session().spent == pytest.approx(1.0)
        again = ip.run_cell("%%dpquery --epsilon max\nSELECT COUNT(*) FROM adult WHERE age < 30\n")
        assert again.success and again.result.cached  # re-running the cell is free
        res = ip.run_cell("%%dpquery --ci 40\nSELECT COUNT(*) FROM adult WHERE age >= 30\n")
        assert res.success
        res = ip.run_cell('x = %dpbudget --afford "SELECT COUNT(*) FROM adult WHERE age >= 30"')
        assert 0 < ip.user_ns["x"] < 1.0
        res = ip.run_cell("m = %dpbudget --map sex race")
        assert ip.user_ns["m"].shape == (2, 5)
