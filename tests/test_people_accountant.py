"""The accountant at person level (issue 26, part A; docs/people.md §3): the charged bound against brute force.

A person is a set of at most K′ domain points sharing their separating values (the id and the invariant columns);
its load is the weight of the queries whose box holds *any* of its points.  The accountant charges
min(γ_w of the boxes projected on the separating columns, K′·γ_w of the full boxes, Σw, and under add/remove the
exact person-level bound: an integer program, :mod:`dpmagic.overlap.person`).  Every test here enumerates every
person of a small domain: the charge must be ≥ the true worst person's load (soundness), equal to the minimum of
the bounds computed independently by brute force, the exact bound equal to the truth when solved (so the charge
is the truth under add/remove), and the same after a restart.  Weights are dyadic, so every sum is exact.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpmagic import Session
from dpmagic.accountant.accountant import Accountant, project_box
from dpmagic.accountant.currency import parse_budget
from dpmagic.accountant.ledger import Ledger
from dpmagic.domain.schema import CategoricalColumn, Schema
from dpmagic.domain.sets import Box, CategorySet
from dpmagic.domain.unit import PersonUnit
from dpmagic.overlap.encoding import BoxStore
from dpmagic.overlap.person import max_person_load_over

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# pid: the id; s, r: candidate invariant columns; d: never invariant (a date in a panel)
COLUMNS = {
    "pid": CategoricalColumn("pid", (1, 2)),
    "s": CategoricalColumn("s", ("F", "M")),
    "r": CategoricalColumn("r", ("n", "e", "w")),
    "d": CategoricalColumn("d", (1, 2, 3)),
}


def schema_for(invariant: tuple[str, ...], k: int) -> Schema:
    return Schema(dict(COLUMNS), table="t", privacy_unit=PersonUnit(id="pid", max_rows=k, invariant=invariant))


def domain_points(schema: Schema) -> list[dict]:
    names = schema.names
    return [dict(zip(names, v)) for v in itertools.product(*(schema[c].values for c in names))]


def load(boxes: list[Box], weights: list[float], points: list[dict]) -> float:
    return math.fsum(w for b, w in zip(boxes, weights) if not b.is_empty() and any(b.contains_row(p) for p in points))


def persons(schema: Schema) -> list[list[dict]]:
    """Every person: a non-empty set of ≤ K′ domain points sharing their separating values (a multiset adds
    nothing: a query touches a person or not)."""
    unit = schema.person_unit
    assert unit is not None
    by_sep: dict[tuple, list[dict]] = {}
    for p in domain_points(schema):
        by_sep.setdefault(tuple(p[c] for c in unit.separating), []).append(p)
    out = []
    for pts in by_sep.values():
        for n in range(1, min(unit.kept_rows, len(pts)) + 1):
            out.extend(list(c) for c in itertools.combinations(pts, n))
    return out


def true_person_max(schema, boxes, weights) -> float:
    return max(load(boxes, weights, p) for p in persons(schema))


def true_pair_max(schema, boxes, weights) -> float:
    """Replace-one person: the worst pair of persons (the queries touching either)."""
    masks = {frozenset(i for i, b in enumerate(boxes) if load([b], [1.0], p)) for p in persons(schema)}
    return max(math.fsum(weights[i] for i in m | n) for m in masks for n in masks)


def gamma(schema, boxes, weights) -> float:
    return max(load(boxes, weights, [p]) for p in domain_points(schema))


def pair(schema, boxes, weights) -> float:
    pts = domain_points(schema)
    return max(load(boxes, weights, [p, q]) for p in pts for q in pts)


def independent_bounds(schema, boxes, weights, rel) -> tuple[float, float, float]:
    """The three bounds, by brute force: (projection, K′ × full, Σw)."""
    unit = schema.person_unit
    proj = [project_box(b, unit.separating) for b in boxes]
    f = gamma if rel == "add-remove" else pair
    return f(schema, proj, weights), unit.kept_rows * f(schema, boxes, weights), math.fsum(weights)


@st.composite
def value_set(draw, name):
    col = COLUMNS[name]
    idx = draw(st.sets(st.integers(0, col.size - 1), min_size=1, max_size=col.size))
    return CategorySet.of_indices(col, idx)


@st.composite
def query_box(draw):
    cons = {}
    for name in COLUMNS:
        if draw(st.integers(0, 2)) == 0:
            cons[name] = draw(value_set(name))
    return Box(cons)


workloads = st.lists(st.tuples(query_box(), st.sampled_from([0.25, 0.5, 1.0, 2.0])), min_size=1, max_size=7)
invariants = st.sampled_from([(), ("s",), ("s", "r")])


def accountant_for(schema, rel, budget="epsilon=1000", ledger=None) -> Accountant:
    return Accountant(parse_budget(budget), schema, neighbors=rel, ledger=ledger if ledger is not None else Ledger())


def charge_all(acc: Accountant, work) -> None:
    for i, (b, w) in enumerate(work):
        acc.charge(b, w, sql=f"q{i}", canonical=f"q{i}")


@SETTINGS
@given(work=workloads, invariant=invariants, k=st.integers(1, 3), rel=st.sampled_from(["add-remove", "replace"]))
def test_charged_bound_is_sound_and_the_minimum_of_the_four(work, invariant, k, rel) -> None:
    schema = schema_for(invariant, k)
    boxes, weights = [b for b, _ in work], [w for _, w in work]
    acc = accountant_for(schema, rel)
    charge_all(acc, work)
    charged = acc.charged_weight
    truth = (true_person_max if rel == "add-remove" else true_pair_max)(schema, boxes, weights)
    bounds = independent_bounds(schema, boxes, weights, rel)
    assert charged >= truth  # soundness: every person's loss is within the charge
    pb = acc.person_bounds
    assert pb is not None and (pb.projected, pb.rows, pb.sequential) == bounds
    if rel == "add-remove":
        # the exact bound: solved (tiny programs), so it is the brute-force truth, and the charge with it
        assert pb.exact is not None and pb.exact >= truth
        assert pb.exact == truth
        assert charged == min(*bounds, pb.exact) == truth
    else:  # replace-one person: no exact bound (the pair of persons is not programmed), the three as before
        assert pb.exact is None
        assert charged == min(bounds)  # the tightest of the three, each computed independently
        if truth == min(bounds):
            assert charged == truth


@SETTINGS
@given(work=workloads, invariant=invariants, k=st.integers(1, 3), rel=st.sampled_from(["add-remove", "replace"]))
def test_a_restart_rebuilds_the_same_charge(work, invariant, k, rel, tmp_path_factory) -> None:
    """The ledger keeps the full boxes; the projection is applied as they enter the engine, so a replay agrees."""
    schema = schema_for(invariant, k)
    path = tmp_path_factory.mktemp("ledger") / "l.sqlite"
    acc = accountant_for(schema, rel, ledger=Ledger(path))
    charge_all(acc, work)
    again = accountant_for(schema, rel, ledger=Ledger(path))
    assert again.charged_weight == acc.charged_weight
    assert again.charged_as == acc.charged_as
    assert again.person_bounds == acc.person_bounds


@SETTINGS
@given(work=workloads, probe=query_box(), invariant=invariants, k=st.integers(1, 3))
def test_affordable_is_the_largest_admissible_cost(work, probe, invariant, k) -> None:
    """affordable(box) is admitted, and (when positive) 1% more is refused: the refusal message's figure is right."""
    schema = schema_for(invariant, k)
    acc = accountant_for(schema, "add-remove", budget="epsilon=3")
    boxes, weights = [], []
    for i, (b, w) in enumerate(work):
        if acc.preview(b, w).admissible:
            acc.charge(b, w, sql=f"q{i}", canonical=f"q{i}")
            boxes.append(b)
            weights.append(w)
    left = acc.affordable(probe)
    if left > 0:
        assert acc.preview(probe, left).admissible
        assert not acc.preview(probe, left * 1.01 + 1e-6).admissible
    # brute force: the largest w with the true min bound after adding (probe, w) within 3 (bisection; dyadic
    # weights make the answer a multiple of 2⁻² and 30 halvings of [0, 3] land within 3·2⁻³⁰ of it)
    # (the exact bound is the true worst person, below the three)
    lo, hi = 0.0, 3.0
    for _ in range(30):
        mid = (lo + hi) / 2
        if true_person_max(schema, [*boxes, probe], [*weights, mid]) <= 3.0:
            lo = mid
        else:
            hi = mid
    assert left == pytest.approx(lo, abs=1e-6) or (left == 0.0 and lo < 1e-6)


def test_one_person_in_three_waves_is_charged_for_all_three() -> None:
    """Three queries disjoint only on the non-invariant ``d``: one person (K′ = 3) has a row in each, so the loss is 3,
    where the per-row filter alone charges 1."""
    schema = schema_for(("s",), 3)
    d = COLUMNS["d"]
    work = [(Box({"d": CategorySet.of_values(d, [v])}), 1.0) for v in (1, 2, 3)]
    acc = accountant_for(schema, "add-remove")
    charge_all(acc, work)
    assert true_person_max(schema, [b for b, _ in work], [1.0] * 3) == 3.0
    assert acc.charged_weight == 3.0


def strictly_tighter_case() -> tuple[Schema, list[tuple[Box, float]]]:
    """K′ = 2 rows per person, ``d`` free with three values: queries d=1, d=2, d=3, d=1.  One row sees 2 (d=1), so
    K′·γ = 4; the projection and Σw are 4 (every query may touch one person); a person with rows at d=1 and d=2
    sees 3 — the exact bound, strictly below the other three."""
    d = COLUMNS["d"]
    return schema_for(("s",), 2), [(Box({"d": CategorySet.of_values(d, [v])}), 1.0) for v in (1, 2, 3, 1)]


def test_the_exact_bound_is_strictly_tighter_than_the_three() -> None:
    schema, work = strictly_tighter_case()
    acc = accountant_for(schema, "add-remove")
    charge_all(acc, work)
    boxes, weights = [b for b, _ in work], [w for _, w in work]
    assert true_person_max(schema, boxes, weights) == 3.0
    assert independent_bounds(schema, boxes, weights, "add-remove") == (4.0, 4.0, 4.0)
    assert acc.charged_weight == 3.0 and acc.charged_as == "person: exact"
    pb = acc.person_bounds
    assert pb is not None and pb.which == "exact" and pb.exact == 3.0
    event = acc.ledger.events(acc.key)[-1].body
    assert event["bound"] == "person: exact" and event["details"]["person"]["exact_term"] == 3.0
    summary = acc.summary().to_dict()
    assert summary["person"]["charged_by"] == "exact" and summary["person"]["exact"] == 3.0
    assert "exact_term" not in summary["person"]  # about the last query, not the state
    again = accountant_for(schema, "add-remove", ledger=acc.ledger)  # a restart folds the recorded terms
    assert again.charged_weight == 3.0 and again.person_bounds == pb
    # the budget map: anyone with a row in d=1 is within the exact bound
    assert acc.load_map("d", "s")[2][0] == [3.0, 3.0]
    # affordability: one person's worst case may reach the budget 5 − 3 on a fresh query touching d=1
    acc2 = accountant_for(schema, "add-remove", budget="epsilon=5")
    charge_all(acc2, work)
    assert acc2.affordable(work[0][0]) == 2.0


@pytest.mark.parametrize("cap", ["size", "time"])
def test_a_size_cap_or_timeout_falls_back_to_the_three(cap) -> None:
    """The program not run (too many variables) or without a bound in time: the term is the minimum of the three
    after the query (a proven bound of every person's load), so the charge is the three's and stays sound."""
    schema, work = strictly_tighter_case()
    acc = accountant_for(schema, "add-remove")
    if cap == "size":
        acc.person_exact_max_vars = 0
    else:
        acc.person_exact_time_limit = 0.0
    charge_all(acc, work)
    pb = acc.person_bounds
    assert acc.charged_weight == 4.0 >= 3.0  # the three's minimum, above the truth 3
    assert pb is not None and pb.which == "projection" and pb.exact == 4.0


def test_highs_dual_bound_not_its_incumbent(monkeypatch) -> None:
    """HiGHS stopped early: its dual bound is charged (rounded up), never the incumbent; no finite dual bound:
    no value (the accountant falls back)."""
    import scipy.optimize

    schema, work = strictly_tighter_case()
    store = BoxStore(schema)
    store.extend([b for b, _ in work[:3]], [w for _, w in work[:3]])
    box = work[3][0]
    real = scipy.optimize.milp
    solved = max_person_load_over(store, np.arange(3), box, ("pid", "s"), 2, time_limit=5.0)
    assert solved is not None and solved.exact and solved.upper == 2.0  # d=1 and one more of d=2, d=3

    def stopped(dual):
        def fake(*args, **kwargs):
            res = real(*args, **kwargs)
            res.status, res.fun, res.mip_dual_bound = 1, -0.0, dual  # time limit; a useless incumbent
            return res

        return fake

    # weights are scaled by 1/2 in the program; a load of unit weights is an integer, so a dual bound 2.5 proves ≤ 2
    monkeypatch.setattr(scipy.optimize, "milp", stopped(-2.5 / 2))
    got = max_person_load_over(store, np.arange(3), box, ("pid", "s"), 2, time_limit=5.0)
    assert got is not None and not got.exact and got.upper == 2.0  # the dual bound snapped, not the incumbent 0
    monkeypatch.setattr(scipy.optimize, "milp", stopped(-3.5 / 2))
    got = max_person_load_over(store, np.arange(3), box, ("pid", "s"), 2, time_limit=5.0)
    assert got is not None and got.upper == 3.0  # a loose dual bound: ≤ 3 (the lattice, and Σw = 3)
    monkeypatch.setattr(scipy.optimize, "milp", stopped(float("nan")))
    assert max_person_load_over(store, np.arange(3), box, ("pid", "s"), 2, time_limit=5.0) is None


def true_region_max(schema, boxes, weights, box) -> float:
    """The most any person with a row in ``box`` is loaded with."""
    return max((load(boxes, weights, p) for p in persons(schema) if any(box.contains_row(x) for x in p)), default=0.0)


@SETTINGS
@given(work=workloads, probe=query_box(), invariant=invariants, k=st.integers(1, 3))
def test_person_region_program_against_brute_force(work, probe, invariant, k) -> None:
    """The program's bound over every query (not only the neighbours) equals the brute-force region maximum."""
    schema = schema_for(invariant, k)
    boxes, weights = [b for b, _ in work], [w for _, w in work]
    store = BoxStore(schema)
    store.extend(boxes, weights)
    alive = np.flatnonzero(store.alive[: store.n])
    got = max_person_load_over(store, alive, probe, schema.person_unit.separating, k, time_limit=5.0)
    truth = 0.0 if probe.is_empty() else true_region_max(schema, boxes, weights, probe)
    assert got is not None and got.upper >= truth
    assert got.exact and got.upper == truth


def test_a_charge_without_a_recorded_term_keeps_the_three(tmp_path) -> None:
    """A ledger charge recorded without a term (an older version): the exact bound is unknown until a reset, and
    the three are charged."""
    schema, work = strictly_tighter_case()
    acc = accountant_for(schema, "add-remove", ledger=Ledger(tmp_path / "l.sqlite"))
    acc.person_exact = False  # records no term, as before the exact bound
    charge_all(acc, work[:1])
    again = accountant_for(schema, "add-remove", ledger=Ledger(tmp_path / "l.sqlite"))
    charge_all(again, work[1:])
    assert again.charged_weight == 4.0 and again.person_bounds is not None and again.person_bounds.exact is None


def test_projection_keeps_only_the_separating_constraints() -> None:
    schema = schema_for(("s",), 2)
    b = Box({"s": CategorySet.of_values(COLUMNS["s"], ["F"]), "d": CategorySet.of_values(COLUMNS["d"], [1])})
    assert project_box(b, ("pid", "s")) == Box({"s": CategorySet.of_values(COLUMNS["s"], ["F"])})
    empty = Box({"d": CategorySet.of_values(COLUMNS["d"], [])})
    assert project_box(empty, ("pid", "s")).is_empty()  # an empty query touches nobody
    assert schema.person_unit is not None and schema.person_unit.separating == ("pid", "s")


def test_row_level_accountant_is_unchanged() -> None:
    schema = Schema(dict(COLUMNS), table="t")
    acc = accountant_for(schema, "add-remove")
    d = COLUMNS["d"]
    charge_all(acc, [(Box({"d": CategorySet.of_values(d, [v])}), 1.0) for v in (1, 2, 3)])
    assert acc.charged_weight == 1.0 and acc.person_bounds is None and acc.person_engine is None


# -- a session --------------------------------------------------------------------------------------------------
PANEL_SCHEMA = {
    "table": "panel",
    "privacy_unit": {"id": "pid", "max_rows": 3, "invariant": ["sex"]},
    "columns": {
        "pid": {"type": "int", "lower": 0, "upper": 1000},
        "sex": {"type": "categorical", "values": ["F", "M"]},
        "wave": {"type": "int", "lower": 1, "upper": 3},
    },
}


def panel(max_rows: int) -> Session:
    """40 persons, each with a row in each of three waves; ``sex`` is invariant, ``wave`` is not."""
    rows = [{"pid": p, "sex": "F" if p % 2 else "M", "wave": w} for p in range(40) for w in (1, 2, 3)]
    schema = Schema.from_dict({**PANEL_SCHEMA, "privacy_unit": {**PANEL_SCHEMA["privacy_unit"], "max_rows": max_rows}})
    return Session(pd.DataFrame(rows), schema, "epsilon=10")


def test_session_queries_disjoint_on_an_invariant_column_compose_in_parallel(monkeypatch) -> None:
    s = panel(2)
    acc = s.accountant
    seen: list[tuple[int, bool]] = []
    original = s.backend.evaluate

    def spy(q, *args, **kwargs):  # the charge is durable before the backend reads anything
        seen.append((len(acc.entries()), acc.entries()[-1].status == "charged"))
        return original(q, *args, **kwargs)

    monkeypatch.setattr(s.backend, "evaluate", spy)
    s.query("SELECT COUNT(*) FROM panel WHERE sex = 'F'", epsilon=1.0)
    r = s.query("SELECT COUNT(*) FROM panel WHERE sex = 'M'", epsilon=1.0)
    assert seen == [(1, True), (2, True)]
    assert acc.charged_weight == 1.0  # disjoint on the invariant column: no person is in both
    assert r.charge.person is not None and r.charge.person.which == "projection" and r.charge.person.note is None
    assert acc.ledger.events(acc.key)[-2].body["details"]["person"]["charged_by"] == "projection"


def test_session_queries_disjoint_only_on_a_panel_wave_fall_back() -> None:
    """Disjoint only on ``wave`` (not invariant): one person has a row in every wave.  With K′ = 2 three wave
    queries cost min(projection 3, 2×γ = 2, Σ = 3) = 2; with K′ = 5 the projection (= Σ = 3) is charged."""
    s = panel(2)
    s.query("SELECT COUNT(*) FROM panel WHERE wave = 1", epsilon=1.0)
    ch = s.preview("SELECT COUNT(*) FROM panel WHERE wave = 2", epsilon=1.0).charge
    assert ch.person is not None and ch.person.note is not None
    assert "'wave'" in ch.person.note and "both sides" in ch.person.note
    s.query("SELECT COUNT(*) FROM panel WHERE wave = 2", epsilon=1.0)
    r = s.query("SELECT COUNT(*) FROM panel WHERE wave = 3", epsilon=1.0)
    assert s.accountant.charged_weight == 2.0 and r.charge.charged_as == "person: 2×exact"
    s5 = panel(5)
    for w in (1, 2, 3):
        s5.query(f"SELECT COUNT(*) FROM panel WHERE wave = {w}", epsilon=1.0)
    assert s5.accountant.charged_weight == 3.0  # sequential: every person may be in all three
    pb = s5.accountant.person_bounds
    assert pb is not None and pb.sequential == 3.0 and pb.rows == 5.0


# -- the overlap CLI --------------------------------------------------------------------------------------------
PANEL_QUERIES = """
SELECT COUNT(*) FROM panel WHERE sex = 'F';
SELECT COUNT(*) FROM panel WHERE sex = 'M';
SELECT COUNT(*) FROM panel WHERE wave = 1;
SELECT COUNT(*) FROM panel WHERE wave = 2;
SELECT COUNT(*) FROM panel WHERE wave = 3 AND sex = 'F';
"""


@pytest.mark.parametrize(
    ("max_rows", "neighbors", "charged", "by"),
    [
        # projection: F is in sex=F and every wave → 1 + 3 = 4; 1 × γ(= 2) = 2 with one row per person
        (1, "add-remove", 2.0, "rows"),
        (3, "add-remove", 4.0, "projection"),  # 3 × 2 = 6 > 4; Σ = 5
        (3, "replace", 5.0, "projection"),  # a pair F, M: every query; 3 × pair(3) = 9
    ],
)
def test_overlap_cli_reports_the_person_level_bound(tmp_path, capsys, max_rows, neighbors, charged, by) -> None:
    import json

    from dpmagic.presentation.cli import main

    schema = {**PANEL_SCHEMA, "privacy_unit": {**PANEL_SCHEMA["privacy_unit"], "max_rows": max_rows}}
    (tmp_path / "s.json").write_text(json.dumps(schema))
    (tmp_path / "q.sql").write_text(PANEL_QUERIES)
    args = ["overlap", "--schema", str(tmp_path / "s.json"), str(tmp_path / "q.sql"), "--neighbors", neighbors]
    assert main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["charged"] == charged and result["person"]["charged_by"] == by
    assert result["unit"].startswith("one person (pid)") and result["sequential"] == 5.0
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "one person's worst case" in text and "privacy unit" in text
