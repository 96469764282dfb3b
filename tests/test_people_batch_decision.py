"""Person-level batches and decision queries against brute force (docs/people.md §2, Proposition 2.6; issue 26).

A tiny person-level table: ``pid`` (the unit's id), ``g`` (categorical a/b, optionally per-group bounded), ``s``
(categorical m/f, optionally declared invariant) and ``x`` (int in [0, 2]): 12 domain rows.  A person is any
multiset of at most K rows that respects the declared bounds (≤ K rows, ≤ c rows per value of g, ≤ g_max values
of g, s constant when invariant): exactly the truncated tables (docs/people.md §1: truncation is stable, so the
truncated tables of two neighbours differ by exactly one person's kept rows).

Every release checked here is *linear* in the truncated table's rows — an HDMM batch measures A·h of the
workload histogram h, a box batch the vector of its boxes' counts, a ProBE read the per-group COUNT or integer
SUM(x − shift) — so over every data set of 1–3 persons (indeed of any number) adding a person P changes the
release by f(P) = Σ_{rows r of P} f(r) and replacing P by P′ by f(P′) − f(P), whatever the other persons:
the maxima over *all* neighbouring pairs are the maxima over persons (add/remove) and over pairs of persons
(replace).  Linearity of the per-row decomposition is checked against the pandas backend on random data sets
of 1–3 persons (:func:`test_the_per_row_oracle_agrees_with_the_backend`).

Checked, for both relations and all three definitions:

* HDMM batches (every candidate strategy, as the session plans and wires them: ``Session.batch`` dry runs):
  the true max ‖A·Δh‖_p (p = 1 for pure ε, 2 for ρ-zCDP and μ-GDP) ≤ the calibrated sensitivity, and the loss
  that change implies at the noise scale actually used (Δ/b; (Δ/σ)²/2; Δ/σ) ≤ the charged cost;
* box batches (``SELECT COUNT(*) … ; …``): the same for the vector of box counts;
* ProBE decision reads (Phase One's plan, and Phase-Two-like reads at tighter u): OpenDP's own privacy map of
  the read's vector discrete Laplace at the true L1 change of the read groups' statistics ≤ the read's certified
  pure ε (``loss_epsilon``), and its conversion to ρ or μ ≤ the charged cost.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd
import pytest
from tests_support import bounded_persons

from dpmagic import Session
from dpmagic.backends.pandas import PandasBackend
from dpmagic.batch.release import BatchMechanism, BoxBatchMechanism, plan_strategy
from dpmagic.batch.spec import parse_workload
from dpmagic.decision.mechanism import cost_of_epsilon, tslm_epsilon
from dpmagic.decision.planning import MeasureRequest
from dpmagic.decision.release import DecisionPhaseMechanism
from dpmagic.domain.schema import Schema
from dpmagic.errors import BudgetExceededError
from dpmagic.noise.samplers import vector_measurement
from dpmagic.noise.sensitivity import person_rows
from dpmagic.query.sql import parse_query
from dpmagic.session.decide import make_plan

COLUMNS = {
    "pid": {"type": "int", "lower": 0, "upper": 99},
    "g": {"type": "categorical", "values": ["a", "b"]},
    "s": {"type": "categorical", "values": ["m", "f"]},
    "x": {"type": "int", "lower": 0, "upper": 2},
}
ROWS = [{"g": g, "s": s, "x": x} for g, s, x in itertools.product("ab", "mf", range(3))]
BUDGETS = {"pure": "epsilon=100", "zcdp": "rho=100", "gdp": "mu=100"}
PARAMETER = {"pure": "epsilon", "zcdp": "rho", "gdp": "mu"}
COST = {"pure": 0.7, "zcdp": 0.3, "gdp": 0.9}
#: (K, per-group bound on g: max_groups, max_rows, s invariant): unbounded, each per-group bound, invariance
BOUNDS = [
    (1, None, None, False),
    (2, None, None, False),
    (3, None, None, False),
    (3, 1, None, False),
    (3, None, 1, False),
    (3, 2, 2, True),
    (2, 1, 2, True),
]
#: the bounds every run checks (the most persons; a per-group bound; invariance): the rest are marked ``slow``
#: (``-m slow``; scripts/test.sh runs both), keeping the default run short on a 2-core machine
BOUNDS_DEFAULT = [BOUNDS[2], BOUNDS[3], BOUNDS[6]]
BOUND_CASES = [b if b in BOUNDS_DEFAULT else pytest.param(b, marks=pytest.mark.slow) for b in BOUNDS]
WORKLOADS = [
    ("prefix(x) * identity(g)", None),
    ("all_range(x)", "g = 'a'"),
    ("identity(g, s)", "x >= 1"),
    ("marginals([g, s, x], 1)", None),
    ("identity(s) * total(x)", None),
]
BOX_BATCHES = [
    ["x <= 1", "x >= 1 AND g = 'a'", "s = 'm'"],
    ["g = 'a'", "g = 'b'", "g = 'a'"],
    ["x = 0", "x = 1", "x = 2", "s = 'f' AND x >= 1"],
    ["x >= 0", "x >= 0", "x >= 1"],  # row level: replace (1) below add/remove (3); a person's replace is not
]
DECISIONS = [
    "SELECT g, COUNT(*) FROM t GROUP BY g HAVING COUNT(*) > 2",
    "SELECT g, COUNT(*) FROM t WHERE s = 'm' GROUP BY g HAVING COUNT(*) > 2 AND SUM(x) > 3",
    "SELECT s, COUNT(*) FROM t WHERE x >= 1 GROUP BY s HAVING AVG(x) > 1 OR SUM(x) < 2",
    "SELECT g, s, COUNT(*) FROM t GROUP BY g, s HAVING SUM(x) > 1",
]


def schema_of(k: int, groups: int | None, per: int | None, invariant: bool) -> Schema:
    unit: dict[str, Any] = {"id": "pid", "max_rows": k, "invariant": ["s"] if invariant else []}
    bound = {key: v for key, v in (("max_groups", groups), ("max_rows", per)) if v is not None}
    if bound:
        unit["per_group"] = {"g": bound}
    return Schema.from_dict({"table": "t", "privacy_unit": unit, "columns": COLUMNS, "max_group_size": 6})


def persons(schema: Schema) -> list[tuple[int, ...]]:
    """Every person (a multiset of row indices of ROWS) that respects the schema's bounds."""
    return bounded_persons(schema, ROWS)


def frame(rows: list[dict[str, Any]], pids: list[int]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["g", "s", "x"]).assign(pid=pids)
    return df[list(COLUMNS)].astype({"pid": "int64", "x": "int64"})


def incidence(people: list[tuple[int, ...]]) -> np.ndarray:
    """persons × domain rows: how many copies of each row a person holds."""
    inc = np.zeros((len(people), len(ROWS)), dtype=np.int64)
    for j, p in enumerate(people):
        for i in p:
            inc[j, i] += 1
    return inc


def changes(vec: np.ndarray, replace_one: bool) -> np.ndarray:
    """The release changes of every neighbouring pair: f(P) (add/remove), f(P′) − f(P) (replace)."""
    if not replace_one:
        return vec
    return (vec[:, None, :] - vec[None, :, :]).reshape(-1, vec.shape[1])


def max_norm(d: np.ndarray, p: int) -> float:
    a = np.abs(d).astype(float)
    return float(a.sum(axis=1).max() if p == 1 else np.sqrt((a**2).sum(axis=1)).max())


def implied_loss(definition: str, change: float, scale: float) -> float:
    """The loss the Laplace (b) / Gaussian (σ) release of a vector changing by ``change`` (L1 / L2) incurs:
    ε = Δ₁/b; ρ = (Δ₂/σ)²/2 (Bun & Steinke 2016, Prop. 1.6); μ = Δ₂/σ (Dong, Roth & Su 2022, Th. 2.7)."""
    if definition == "pure":
        return change / scale
    if definition == "zcdp":
        return (change / scale) ** 2 / 2.0
    return change / scale


def session(schema: Schema, definition: str, replace_one: bool) -> Session:
    return Session(
        frame([ROWS[0]], [0]), schema, BUDGETS[definition], neighbors="replace" if replace_one else "add-remove"
    )


_PER_ROW: dict[tuple[str, str], np.ndarray] = {}


def per_row_counts(q, schema: Schema) -> np.ndarray:
    """domain rows × cells: the cell each one-row table puts its row in (COUNT of the query, pandas backend)."""
    key = (repr(schema.person_unit), q.canonical)
    if key not in _PER_ROW:
        _PER_ROW[key] = np.stack(
            [np.asarray(PandasBackend(frame([r], [0]), schema).evaluate(q, {}, extended=None).counts) for r in ROWS]
        ).astype(np.int64)
    return _PER_ROW[key]


_PLANS: dict[tuple[Any, ...], Any] = {}


# ---- HDMM batches -------------------------------------------------------------------------------------------
def check_hdmm(schema: Schema, people, text: str, where: str | None, definition: str, replace_one: bool) -> int:
    s = session(schema, definition, replace_one)
    spec = parse_workload(text, schema)
    clause = f" WHERE {where}" if where else ""
    q = s.parse(f"SELECT COUNT(*) FROM t{clause} GROUP BY {', '.join(spec.columns)}")
    rows = person_rows(schema, q)
    h = incidence(people) @ per_row_counts(q, schema)  # persons × workload cells
    cost = COST[definition]
    key = (text, where, definition, replace_one, rows)
    if key not in _PLANS:  # the plan depends on the schema only through T (HDMM's optimisations are slow)
        pre = s.batch(text, where=where, dry_run=True, **{PARAMETER[definition]: cost})
        plan = plan_strategy(spec, s.currency, replace_one=replace_one, rows=rows)
        assert set(plan.rmse) == set(pre.rmse) and plan.chosen == pre.strategy
        mech = BatchMechanism(spec, q, s.currency, cost, replace_one=replace_one, plan=plan, rows=rows)
        assert pre.details["noise"]["sensitivity"] == mech.sensitivity  # the session's wiring: the same T
        _PLANS[key] = plan
    plan = _PLANS[key]
    checked = 0
    for name in list(plan.rmse):
        plan.chosen = name
        mech = BatchMechanism(spec, q, s.currency, cost, replace_one=replace_one, plan=plan, rows=rows)
        p = mech.noise_model.p
        assert p == (1 if definition == "pure" else 2)
        a = np.column_stack([mech.strategy.measure(np.eye(spec.n)[:, j]) for j in range(spec.n)])
        true = max_norm(changes(h @ a.T, replace_one), p)
        assert true <= mech.sensitivity * (1 + 1e-9), (name, true, mech.sensitivity)
        assert implied_loss(definition, true, mech.scale) <= cost * (1 + 1e-9), (name, true, mech.scale)
        checked += 1
    assert s.spent == 0.0
    return checked


@pytest.mark.parametrize("bounds", BOUND_CASES)
@pytest.mark.parametrize("definition", ["pure", "zcdp", "gdp"])
def test_hdmm_batches_cover_every_person_step(bounds, definition: str) -> None:
    schema = schema_of(*bounds)
    people = persons(schema)
    for (text, where), replace_one in itertools.product(WORKLOADS, (False, True)):
        assert check_hdmm(schema, people, text, where, definition, replace_one) >= 2


# ---- box batches --------------------------------------------------------------------------------------------
def check_boxes(schema: Schema, people, wheres: list[str], definition: str, replace_one: bool) -> None:
    s = session(schema, definition, replace_one)
    sql = [f"SELECT COUNT(*) FROM t WHERE {w}" for w in wheres]
    cost = COST[definition]
    pre = s.batch("; ".join(sql), dry_run=True, **{PARAMETER[definition]: cost})
    queries = [s.parse(x) for x in sql]
    pops = np.column_stack([per_row_counts(q, schema)[:, 0] for q in queries])  # domain rows × boxes
    assert all(pops[i, j] == int(q.coverage.contains_row(r)) for i, r in enumerate(ROWS) for j, q in enumerate(queries))
    unit = schema.person_unit
    assert unit is not None
    mech = BoxBatchMechanism(queries, schema, s.currency, cost, replace_one=replace_one, rows=unit.kept_rows)
    assert pre.details["noise"]["sensitivity"] == mech.sensitivity
    p = 1 if definition == "pure" else 2
    true = max_norm(changes(incidence(people) @ pops, replace_one), p)
    assert true <= mech.sensitivity * (1 + 1e-12), (wheres, true, mech.sensitivity)
    assert implied_loss(definition, true, mech.scale) <= cost * (1 + 1e-9)
    assert s.spent == 0.0


@pytest.mark.parametrize("bounds", BOUND_CASES)
def test_box_batches_cover_every_person_step(bounds) -> None:
    schema = schema_of(*bounds)
    people = persons(schema)
    for wheres, definition, replace_one in itertools.product(BOX_BATCHES, ("pure", "zcdp", "gdp"), (False, True)):
        check_boxes(schema, people, wheres, definition, replace_one)


# ---- ProBE decision reads -----------------------------------------------------------------------------------
def decision_reads(s: Session, sql: str):
    """Phase One's reads (the plan) and Phase-Two-like reads of each condition at u/2 and u/8 (the tightest
    a round may go: ``shrink`` = 4 keeps u within [u/8, u/2])."""
    q = s.parse(sql)
    p = make_plan(s, q, fnr=0.05, fpr=0.1, max_group_size=None)
    for c in p.conditions:
        st = c.statistic
        for phase, u, beta in ((1, c.u, c.beta), (2, max(1.0, round(c.u / 2)), c.beta / 4), (3, 1.0, c.beta / 8)):
            eps = c.epsilon if phase == 1 else tslm_epsilon(st.sensitivity, beta, u)
            yield (
                q,
                c,
                MeasureRequest(
                    condition=c.index,
                    statistic=st,
                    where=c.condition.where,
                    kind=st.kind,
                    scale=c.scale if phase == 1 else st.sensitivity / eps,
                    sensitivity=st.sensitivity,
                    epsilon=eps,
                    cost=cost_of_epsilon(eps, p.definition),
                    groups=tuple(p.groups),
                    phase=phase,
                    u=u,
                    beta=beta,
                ),
            )


def statistic_per_row(mech: DecisionPhaseMechanism, schema: Schema) -> np.ndarray:
    """domain rows × read groups: what one row adds to each read group's statistic (COUNT, or the integer
    SUM(x) − shift·COUNT), from the pandas backend's exact per-cell COUNT and SUM of the read's own query."""
    q = mech.measurement_query()
    st = mech.request.statistic
    key = (repr(schema.person_unit), f"{q.canonical} | {st.text} | {st.shift} | {mech.request.groups}")
    if key in _PER_ROW:
        return _PER_ROW[key]
    out = []
    for r in ROWS:
        cells = PandasBackend(frame([r], [0]), schema).evaluate(q, None, extended=None)
        single = len(q.groups) == 1
        index = {(k[0] if single else k): j for j, k in enumerate(cells.keys)}
        js = [index[g] for g in mech.request.groups]
        n = np.asarray(cells.counts, dtype=np.int64)[js]
        if st.column is None:
            out.append(n)
        else:
            out.append(np.asarray([int(v) for v in cells.sums[st.column]], dtype=np.int64)[js] - int(st.shift) * n)
    _PER_ROW[key] = np.stack(out)
    return _PER_ROW[key]


def check_decision(schema: Schema, people, sql: str, definition: str, replace_one: bool) -> int:
    s = session(schema, definition, replace_one)
    inc = incidence(people)
    checked = 0
    for q, c, req in decision_reads(s, sql):
        mech = DecisionPhaseMechanism(
            q, req, str(c.condition), definition=definition, replace_one=replace_one, rows=person_rows(schema, q)
        )
        d = changes(inc @ statistic_per_row(mech, schema), replace_one)
        true_l1 = int(np.abs(d).sum(axis=1).max())
        loss = float(vector_measurement(req.kind, req.scale).map(true_l1)) if true_l1 else 0.0
        assert loss <= mech.loss_epsilon, (sql, c.condition, req.phase, true_l1, loss, mech.loss_epsilon)
        assert cost_of_epsilon(loss, definition) <= mech.cost if loss else True
        checked += 1
    assert s.spent == 0.0
    return checked


@pytest.mark.parametrize("bounds", BOUND_CASES)
def test_decision_reads_cover_every_person_step(bounds) -> None:
    schema = schema_of(*bounds)
    people = persons(schema)
    for sql, definition, replace_one in itertools.product(DECISIONS, ("pure", "zcdp", "gdp"), (False, True)):
        assert check_decision(schema, people, sql, definition, replace_one) >= 3


# ---- the oracle ---------------------------------------------------------------------------------------------
def test_the_per_row_oracle_agrees_with_the_backend() -> None:
    """The per-row decomposition (a person's release = the sum of their rows') equals the pandas backend on whole
    data sets of 1–3 persons: the workload histogram, the box counts and a decision read's statistics."""
    schema = schema_of(3, 2, 2, False)
    people = persons(schema)
    rng = np.random.default_rng(11)
    q = parse_query("SELECT COUNT(*) FROM t WHERE x >= 1 GROUP BY g, s, x", schema)
    per = per_row_counts(q, schema)
    s = session(schema, "pure", False)
    _, c, req = next(iter(decision_reads(s, DECISIONS[1])))
    mech = DecisionPhaseMechanism(s.parse(DECISIONS[1]), req, str(c.condition), definition="pure", replace_one=False)
    stat = statistic_per_row(mech, schema)
    mq = mech.measurement_query()
    for _ in range(25):
        chosen = [people[int(i)] for i in rng.choice(len(people), int(rng.integers(1, 4)))]
        rows = [ROWS[i] for p in chosen for i in p]
        df = frame(rows, [j for j, p in enumerate(chosen) for _ in p])
        backend = PandasBackend(df, schema)
        want = incidence(chosen)
        assert list(backend.evaluate(q, {}, extended=None).counts) == list((want @ per).sum(axis=0))
        cells = backend.evaluate(mq, None, extended=None)
        idx = {k[0]: j for j, k in enumerate(cells.keys)}
        js = [idx[g] for g in req.groups]
        got = np.asarray([int(v) for v in cells.sums["x"]])[js] if req.statistic.column else cells.counts[js]
        got = np.asarray(got, dtype=np.int64) - int(req.statistic.shift) * np.asarray(cells.counts)[js]
        assert list(got) == list((want @ stat).sum(axis=0))


def test_person_level_calibration_is_attained_for_identity_and_box_batches() -> None:
    """Where Proposition 2.6 is tight the brute force reaches it: K = 3, no per-group bound, add/remove, pure ε:
    an identity batch's L1 change is K (all rows in one cell), a box batch's K·ω."""
    schema = schema_of(3, None, None, False)
    people = persons(schema)
    s = session(schema, "pure", False)
    spec = parse_workload("identity(g, s)", schema)
    q = s.parse("SELECT COUNT(*) FROM t GROUP BY g, s")
    plan = plan_strategy(spec, s.currency, replace_one=False, strategy="identity", rows=3)
    mech = BatchMechanism(spec, q, s.currency, 1.0, replace_one=False, plan=plan, rows=3)
    h = incidence(people) @ per_row_counts(q, schema)
    assert max_norm(h, 1) == 3 == pytest.approx(mech.sensitivity, rel=1e-12)
    queries = [s.parse(f"SELECT COUNT(*) FROM t WHERE {w}") for w in BOX_BATCHES[0]]
    box = BoxBatchMechanism(queries, schema, s.currency, 1.0, replace_one=False, rows=3)
    pops = np.column_stack([per_row_counts(x, schema)[:, 0] for x in queries])
    assert max_norm(incidence(people) @ pops, 1) == box.sensitivity == 9  # ω = 3 boxes hold one row


# ---- the decision budget pre-check at person level ----------------------------------------------------------
def _decision_session(budget: str, neighbors: str = "add-remove") -> Session:
    schema = schema_of(3, None, None, False)
    rows = [ROWS[i] for i in (0, 1, 2, 3, 6, 7)]
    return Session(frame(rows, [0, 0, 0, 1, 1, 2]), schema, budget, neighbors=neighbors)


@pytest.mark.parametrize("neighbors", ["add-remove", "replace"])
@pytest.mark.parametrize("definition", ["pure", "zcdp", "gdp"])
def test_decision_pre_check_uses_the_person_level_cost(definition: str, neighbors: str) -> None:
    """The dry run's Phase One cost and the budget pre-check (``afford`` in decision/probe.py, built by
    session/decide.py) are the person-level cost the reads then charge: with T = 3 a budget between the row-level
    and the person-level estimate is refused before anything is charged or read; the person-level estimate is
    admitted and charges exactly it."""
    sql = DECISIONS[1]
    s = _decision_session(f"{PARAMETER[definition]}=100", neighbors)
    q = s.parse(sql)
    assert person_rows(s.schema, q) == 3
    dry = s.decide(sql, fnr=0.05, fpr=None, dry_run=True)
    person = dry.plan["phase_one_cost"]
    k = 2.0 if neighbors == "replace" else 1.0
    p = make_plan(s, q, fnr=0.05, fpr=None, max_group_size=None)
    row_eps = [k * c.epsilon for c in p.conditions]
    row = {"pure": sum(row_eps), "zcdp": sum(e * e / 2 for e in row_eps)}.get(definition)
    if row is None:
        row = sum(cost_of_epsilon(e, "gdp") ** 2 for e in row_eps) ** 0.5
    assert person > 1.5 * row  # T = 3 rows per person: the person-level cost is well above the row-level one
    low = _decision_session(f"{PARAMETER[definition]}={(row * 1.2)!r}", neighbors)
    reads: list[int] = []
    original = low.backend.evaluate
    low.backend.evaluate = lambda *a, **kw: reads.append(1) or original(*a, **kw)  # type: ignore[method-assign]
    with pytest.raises(BudgetExceededError):
        low.decide(sql, fnr=0.05, fpr=None)
    assert low.spent == 0.0 and len(low.accountant) == 0 and reads == []
    ok = _decision_session(f"{PARAMETER[definition]}={person!r}", neighbors)
    ans = ok.decide(sql, fnr=0.05, fpr=None)
    assert ans.cost == pytest.approx(person, rel=1e-9) and ok.spent == pytest.approx(person, rel=1e-9)
    # max_epsilon is per person too: one just below the person-level ε refuses before anything is charged
    per_person = sum(r["epsilon"] for r in ans.reads)
    capped = _decision_session(f"{PARAMETER[definition]}=100", neighbors)
    with pytest.raises(BudgetExceededError):
        capped.decide(sql, fnr=0.05, fpr=None, max_epsilon=per_person * 0.9)
    assert capped.spent == 0.0 and len(capped.accountant) == 0
