"""ProBE planner and executor against fake backends (order of calls, short-circuits, refusals, phases)."""

from __future__ import annotations

import pandas as pd
import pytest
from scipy.stats import binom

from dpmagic.decision import And, Or, avg, count, plan, run
from dpmagic.decision.local import FrameMeasure
from dpmagic.decision.probe import MeasureRequest
from dpmagic.errors import BudgetError, BudgetExceededError, QueryError

GROUPS = [f"g{k}" for k in range(8)]


class FakeBackend:
    """Records every call; ``measure`` returns the exact values (no noise) or a fixed offset."""

    def __init__(self, values: dict[int, dict[str, float]], fail_charge: bool = False) -> None:
        self.values = values
        self.log: list[tuple] = []
        self.fail_charge = fail_charge
        self.open: tuple | None = None

    def charge(self, cost: float, coverage: dict) -> None:
        if self.fail_charge:
            raise BudgetExceededError("no budget")
        self.log.append(("charge", cost, tuple(coverage["groups"]), coverage["phase"]))
        self.open = (tuple(coverage["groups"]), cost)

    def measure(self, i: int, req: MeasureRequest) -> dict[str, float]:
        assert self.open is not None, "measure before charge"
        groups, cost = self.open
        assert groups == req.groups and cost == req.cost
        self.open = None  # one charge covers one read
        self.log.append(("measure", i, req.groups, req.phase))
        return {g: self.values[i][g] for g in req.groups}


def example_tree():
    return Or(And(count(">", 100), avg("age", ">", 65)), And(count(">", 50), avg("age", "<", 5)))


def test_plan_is_pure_and_describes_costs() -> None:
    p = plan(
        example_tree(),
        groups=GROUPS,
        max_group_size=1000,
        beta=0.05,
        alpha=0.1,
        bounds={"age": (0, 100)},
        integer_columns={"age"},
    )
    s = p.summary()
    assert s["phase_one_epsilon"] == pytest.approx(sum(c["epsilon"] for c in s["conditions"]))
    assert sum(c.beta for c in p.conditions) <= 0.025 + 1e-15
    for c in p.conditions:
        assert c.u == int(c.u) and c.u >= 1  # integer statistics get an integer region
        assert c.u == pytest.approx(int(0.3 * c.statistic.range), abs=1)
    for d in ("zcdp", "gdp"):
        q = plan(
            example_tree(),
            groups=GROUPS,
            max_group_size=1000,
            beta=0.05,
            alpha=0.1,
            bounds={"age": (0, 100)},
            definition=d,
        )
        assert q.phase_one_epsilon == pytest.approx(p.phase_one_epsilon)
        assert q.phase_one_cost != p.phase_one_cost


def test_bad_parameters_are_refused() -> None:
    kw = dict(groups=GROUPS, max_group_size=10, bounds={"age": (0, 100)})
    with pytest.raises(BudgetError):
        plan(example_tree(), beta=0.0, alpha=0.1, **kw)
    with pytest.raises(BudgetError):
        plan(example_tree(), beta=0.05, alpha=1.5, **kw)
    with pytest.raises(QueryError):
        plan(example_tree(), beta=0.05, alpha=0.1, groups=[], max_group_size=10, bounds={"age": (0, 100)})
    with pytest.raises(QueryError):
        plan(example_tree(), beta=0.05, alpha=0.1, groups=["a", "a"], max_group_size=10, bounds={"age": (0, 100)})


def test_every_measure_is_preceded_by_its_charge_and_and_short_circuits() -> None:
    t = And(count(">", 100), avg("age", ">", 65))
    p = plan(t, groups=GROUPS, max_group_size=1000, beta=0.05, alpha=None, bounds={"age": (0, 100)})
    # condition 0 (COUNT > 100) is far below the shifted threshold for every group but g0
    first = p.minimised.conditions.index(count(">", 100))
    second = 1 - first
    vals = {first: {g: -1e6 for g in GROUPS}, second: {g: 1e6 for g in GROUPS}}
    vals[first]["g0"] = 1e6
    fb = FakeBackend(vals)
    res = run(p, fb.charge, fb.measure, max_epsilon=10.0)
    kinds = [e[0] for e in fb.log]
    assert kinds == ["charge", "measure"] * (len(kinds) // 2)
    measured_second = [e for e in fb.log if e[0] == "measure" and e[1] == second]
    assert [e[2] for e in measured_second] == [("g0",)]  # only the group alive after the first side
    assert res.groups == frozenset({"g0"})
    assert res.per_group_epsilon["g0"] == pytest.approx(p.phase_one_epsilon)
    assert res.epsilon_spent == pytest.approx(p.phase_one_epsilon)
    assert res.per_group_epsilon["g1"] < p.phase_one_epsilon


def test_or_skips_groups_already_reported_true() -> None:
    t = Or(count(">", 100), avg("age", ">", 65))
    p = plan(t, groups=GROUPS, max_group_size=1000, beta=0.05, alpha=None, bounds={"age": (0, 100)})
    i_count = p.minimised.conditions.index(count(">", 100))
    vals = {i_count: {g: (1e6 if g in ("g1", "g2") else -1e6) for g in GROUPS}, 1 - i_count: {g: -1e9 for g in GROUPS}}
    fb = FakeBackend(vals)
    res = run(p, fb.charge, fb.measure, max_epsilon=10.0)
    second = [e for e in fb.log if e[0] == "measure" and e[1] == 1 - i_count]
    if second:
        assert "g1" not in second[0][2] and "g2" not in second[0][2]
    assert res.groups == frozenset({"g1", "g2"})


def test_refusals_charge_nothing() -> None:
    p = plan(count(">", 10), groups=GROUPS, max_group_size=100, beta=0.05, alpha=None)
    fb = FakeBackend({0: {g: 0.0 for g in GROUPS}})
    with pytest.raises(BudgetExceededError):
        run(p, fb.charge, fb.measure, max_epsilon=p.phase_one_epsilon / 2)
    assert fb.log == []
    failing = FakeBackend({0: {g: 0.0 for g in GROUPS}}, fail_charge=True)
    with pytest.raises(BudgetExceededError):
        run(p, failing.charge, failing.measure, max_epsilon=10.0)
    assert failing.log == []  # the failing charge stopped the read
    with pytest.raises(BudgetError):
        run(p, fb.charge, fb.measure, max_epsilon=0)


def test_phase_two_tightens_u_and_respects_max_epsilon() -> None:
    groups = [f"z{k}" for k in range(200)]
    # 20 groups well above 100, 180 groups at 60-80: inside the Phase One uncertain region (u = 300)
    exact = {g: (400.0 if k < 20 else 60.0 + k % 20) for k, g in enumerate(groups)}
    p = plan(count(">", 100), groups=groups, max_group_size=1000, beta=0.05, alpha=0.1)
    fb = FakeBackend({0: exact})
    res = run(p, fb.charge, fb.measure, max_epsilon=50.0)
    us = [ph["flagged"][0]["u"] for ph in res.phases[1:]]
    assert us and us[0] < p.conditions[0].u and us == sorted(us, reverse=True)  # u tightens geometrically
    assert not res.denied and res.groups >= frozenset(groups[:20])  # no false negative (no noise here)
    assert len(res.groups) - 20 <= 0.1 * 180
    assert res.fnr_bound <= 0.05 + 1e-15
    reads = [e for e in fb.log if e[0] == "measure"]
    assert [e[3] for e in reads] == list(range(1, len(us) + 2))
    # only groups still uncertain are re-read: the last round skips the 20 groups decided at 400
    assert reads[-1][2] and set(reads[-1][2]) <= set(groups[20:])
    assert res.epsilon_spent == pytest.approx(res.phases[-1]["projected_epsilon"])
    # the same with a cap between Phase One and Phase Two: denied after Phase One, no Phase Two charge
    fb2 = FakeBackend({0: exact})
    res2 = run(p, fb2.charge, fb2.measure, max_epsilon=p.phase_one_epsilon * 1.01)
    assert res2.denied and res2.groups is None
    assert [e[3] for e in fb2.log if e[0] == "charge"] == [1]
    assert res2.epsilon_spent == pytest.approx(p.phase_one_epsilon)


def test_per_group_fnr_with_opendp_noise() -> None:
    """5,000 groups all truly positive by the smallest margin; the FN count must stay below a 1e-12 tail."""
    n = 5000
    groups = list(range(n))
    df = pd.DataFrame({"g": [g for g in groups for _ in range(101)]})  # COUNT = 101 > 100 everywhere
    beta = 0.05
    t = And(count(">", 100), count("<", 200))
    p = plan(t, groups=groups, max_group_size=300, beta=beta, alpha=None, phase_one_share=1.0)
    res = run(p, lambda cost, cov: None, FrameMeasure(df, "g", groups), max_epsilon=10.0)
    fn = n - len(res.groups)
    assert res.fnr_bound <= beta
    assert fn <= binom.isf(1e-12, n, beta)
