"""Person-level sensitivities against brute force (docs/people.md §2, issue 26 part S).

A tiny person-level table: ``pid`` (the unit's id), ``g`` (categorical a/b/c, optionally per-group bounded),
``s`` (categorical m/f, optionally declared invariant), ``x`` (int in [-1, 2]) and ``f`` (float in [-0.5, 1.5]).
A person is any multiset of at most K rows over the 12 domain rows (g, s, (x, f) ∈ {(-1, -0.5), (2, 1.5)})
that respects the declared bounds (≤ K rows, ≤ c rows per g value, ≤ g_max values of g, s constant when it is
invariant): exactly the truncated tables.  Every release is checked over *every* neighbouring pair:

* additive releases (COUNT, SUM int and float, AVG's two, VAR / STDDEV's three; quantile histograms): the
  release of a data set is the sum over its rows of each row's release (evaluated by the pandas backend on the
  one-row table), so adding a person P changes it by f(P) and replacing P by P′ by f(P′) − f(P) — whatever the
  other persons (data sets of 1–3 persons and more are covered at once).  A coarse grid of k units rounds
  ⌊s/k + 1/2⌋; over all other data sets s the rounded change of an entry d is at most ⌈|d|/k⌉ (and attains it),
  which is what is compared.
* COUNT(DISTINCT x): not additive: every base data set of 0–2 persons (by the per-cell value sets it holds) plus
  the added person, or 0–1 persons plus the replaced pair;
* COUNT(DISTINCT pid): persons have distinct ids, so the change is the indicator of the person's cells
  (add/remove) or the difference of two indicators (replace), whatever the base.

The oracle (cells of a row, distinct sets) is checked against the pandas backend on whole data sets.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests_support import assert_change_covered, bounded_persons

from dpmagic.accountant.currency import CURRENCIES
from dpmagic.aggregates import quantile as qmod
from dpmagic.backends.pandas import PandasBackend
from dpmagic.domain.schema import Schema
from dpmagic.domain.unit import Contribution
from dpmagic.errors import DPMagicError
from dpmagic.noise.sensitivity import NormSensitivity, coverage_of
from dpmagic.query.sql import parse_query
from dpmagic.releases.plan import cost_for_target, plan_noise, units_of

COLUMNS = {
    "pid": {"type": "int", "lower": 0, "upper": 9},
    "g": {"type": "categorical", "values": ["a", "b", "c"]},
    "s": {"type": "categorical", "values": ["m", "f"]},
    "x": {"type": "int", "lower": -1, "upper": 2},
    "f": {"type": "float", "lower": -0.5, "upper": 1.5},
}
ROWS = [{"g": g, "s": s, "x": x, "f": f} for g, s, (x, f) in itertools.product("abc", "mf", ((-1, -0.5), (2, 1.5)))]
WHERES = ["", "WHERE x >= 0", "WHERE g <> 'c'", "WHERE s = 'm'", "WHERE g = 'a' OR x >= 0"]
GROUPS = ["", "g", "s", "g, s"]
SUMS = "COUNT(*) AS n, SUM(x) AS sx, SUM(f) AS sf, AVG(x) AS ax, VAR(x) AS vx, STDDEV(f) AS sdf, "
DISTINCT = "COUNT(DISTINCT x) AS dx, COUNT(DISTINCT pid) AS dp"
QUANTILES = "MEDIAN(x) AS mx, MIN(x) AS lo, MAX(f) AS hi, QUANTILE(f, 0.25) AS qf"
COSTS = {"pure": 0.7, "zcdp": 0.3, "gdp": 0.9}


def schema_of(k: int, groups: int | None, per: int | None, invariant: bool) -> Schema:
    unit: dict[str, Any] = {"id": "pid", "max_rows": k, "invariant": ["s"] if invariant else []}
    bound = {key: v for key, v in (("max_groups", groups), ("max_rows", per)) if v is not None}
    if bound:
        unit["per_group"] = {"g": bound}
    return Schema.from_dict({"table": "t", "privacy_unit": unit, "columns": COLUMNS})


def persons(schema: Schema) -> list[tuple[int, ...]]:
    """Every person (a multiset of row indices of ROWS) that respects the schema's bounds."""
    return bounded_persons(schema, ROWS)


def frame(rows: list[dict[str, Any]], pids: list[int]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["g", "s", "x", "f"]).assign(pid=pids)
    return df[list(COLUMNS)].astype({"pid": "int64", "x": "int64", "f": "float64"})


def per_row(q, plan, schema: Schema) -> list[dict[str, np.ndarray]]:
    """Every integer release (and quantile histogram) of each one-row table, by release name."""
    out = []
    for r in ROWS:
        cells = PandasBackend(frame([r], [0]), schema).evaluate(q, units_of(plan), extended=plan.extra)
        rel: dict[str, np.ndarray] = {}
        if plan.count is not None:
            rel["count"] = np.asarray(cells.counts, dtype=np.int64)
        for name in plan.sums:
            rel[f"sum:{name}"] = _int64([int(v) for v in cells.sums[name]])
        for alias, u in plan.extra.items():
            for name, v in u.unit.integer_releases(u, cells.extra[alias]).items():
                rel[f"{alias}:{name}"] = _int64([int(a) for a in v])
            if u.agg.func == "quantile":  # a quantile: its histogram per cell (the pick's input)
                rel[f"hist:{alias}"] = np.asarray(cells.extra[alias], dtype=np.int64)
        rel["cell"] = np.asarray(cells.counts, dtype=np.int64)  # the row's cell (one 1, or none: outside the box)
        out.append(rel)
    return out


def _int64(v: list[int]) -> np.ndarray:
    assert all(abs(a) < 2**59 for a in v)  # sums of ≤ 6 rows and their differences stay exact in int64
    return np.asarray(v, dtype=np.int64)


def noises(plan) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if plan.count is not None:
        out["count"] = plan.count
    for name, n in plan.sums.items():
        out[f"sum:{name}"] = n
    for alias, u in plan.extra.items():
        for name, n in u.unit.sensitivities(u).items():
            out[f"{alias}:{name}"] = n
    return out


def norms(diffs: np.ndarray, k: int) -> tuple[float, float, float, int]:
    """max L1, L2, L∞ and changed cells of the rows of ``diffs`` after rounding to a grid of k (⌈|d|/k⌉)."""
    a = np.abs(diffs)
    if k != 1:
        a = -(-a // k)
    a = a.astype(float)
    return (
        float(a.sum(axis=1).max()),
        float(np.sqrt((a**2).sum(axis=1)).max()),
        float(a.max()),
        int((a > 0).sum(axis=1).max()),
    )


def person_vectors(rel: list[dict[str, np.ndarray]], people: list[tuple[int, ...]], name: str) -> np.ndarray:
    """Each person's release: the sum of their rows' (persons × the release's shape)."""
    inc = np.zeros((len(people), len(ROWS)), dtype=np.int64)
    for j, p in enumerate(people):
        for i in p:
            inc[j, i] += 1
    per = np.stack([rel[i][name] for i in range(len(ROWS))])
    return np.tensordot(inc, per, axes=1)


def changes(vec: np.ndarray, replace_one: bool) -> np.ndarray:
    if not replace_one:
        return vec
    vec = np.unique(vec, axis=0)  # persons with the same release add no pair (the maxima are unchanged)
    return (vec[:, None, :] - vec[None, :, :]).reshape(-1, vec.shape[1])


def check_additive(q, schema: Schema, people, definition: str, replace_one: bool) -> int:
    plan = plan_noise(q, schema, CURRENCIES[definition], COSTS[definition], replace_one=replace_one)
    rel = per_row(q, plan, schema)
    checked = 0
    for name, noise in noises(plan).items():
        if name.startswith(("count_distinct", "dx:", "dp:")):
            continue
        vec = person_vectors(rel, people, name)
        assert_change_covered(noise, *norms(changes(vec, replace_one), noise.factor), definition)
        checked += 1
    return checked


def cell_of(rel: dict[str, np.ndarray]) -> int | None:
    hit = np.flatnonzero(rel["cell"])
    return int(hit[0]) if len(hit) else None


def check_distinct(q, schema: Schema, people, definition: str, replace_one: bool) -> None:
    plan = plan_noise(q, schema, CURRENCIES[definition], COSTS[definition], replace_one=replace_one)
    rel = per_row(q, plan, schema)
    n_cells = len(rel[0]["cell"])
    cells = [cell_of(r) for r in rel]
    # COUNT(DISTINCT x): a person's per-cell value sets; a base data set is a union of persons' sets
    sig = sorted({tuple(frozenset(ROWS[i]["x"] for i in p if cells[i] == j) for j in range(n_cells)) for p in people})
    empty = tuple(frozenset() for _ in range(n_cells))

    def union(*ss):
        return tuple(frozenset().union(*(s[j] for s in ss)) for j in range(n_cells))

    bases = {empty, *sig} | ({union(a, b) for a, b in itertools.combinations(sig, 2)} if not replace_one else set())
    rows_dx = []
    for b in bases:
        with_p = np.array([[len(c) for c in union(b, s)] for s in sig])
        rows_dx.append(changes(with_p, True) if replace_one else with_p - np.array([len(c) for c in b]))
    dx = np.vstack(rows_dx)
    # COUNT(DISTINCT pid): the indicator of a person's cells
    ind = np.array([[int(any(cells[i] == j for i in p)) for j in range(n_cells)] for p in people])
    dp = changes(ind, replace_one)
    for name, d in (("dx:count_distinct", dx), ("dp:count_distinct", dp)):
        noise = noises(plan)[name]
        assert_change_covered(noise, *norms(d, noise.factor), definition)


def _unique_columns(a: np.ndarray) -> np.ndarray:
    """``a`` (persons × cells × candidates) with duplicate candidate columns dropped (maxima over candidates of
    any function of a column are unchanged)."""
    flat = a.transpose(2, 0, 1).reshape(a.shape[2], -1)
    return np.unique(flat, axis=0).reshape(-1, a.shape[0], a.shape[1]).transpose(1, 2, 0)


def check_quantiles(q, schema: Schema, people, definition: str, replace_one: bool) -> int:
    """Σ over cells of OpenDP's map at each cell's distance ≤ the release's cost, for every neighbouring pair."""
    plan = plan_noise(q, schema, CURRENCIES[definition], COSTS[definition], replace_one=replace_one)
    rel = per_row(q, plan, schema)
    checked = 0
    for alias, u in plan.extra.items():
        p = u.plan
        hist = person_vectors(rel, people, f"hist:{alias}")  # persons × cells × bins
        k = len(p.candidates)
        extreme = p.alpha in (0.0, 1.0)
        if extreme:
            chain = qmod._extreme_chain(k, p.measure, p.scale)
            cum = np.cumsum(hist, axis=2)
            # #{x < c_i} (bins 0..2i) or #{x > c_i} (bins 2i+2..): the candidate's count score
            score = cum[:, :, 0::2] if p.alpha == 0.0 else hist.sum(axis=2, keepdims=True) - cum[:, :, 1::2]
            data = _unique_columns(score)
            if replace_one:
                d = np.abs(data[:, None] - data[None, :]).max(axis=3).reshape(-1, hist.shape[1])
            else:
                d = data.max(axis=2)
        else:
            chain = qmod._chain(p.candidates, p.alpha, p.measure, p.scale)
            data = hist[:, :, hist.any(axis=(0, 1))]  # bins no row reaches are 0 everywhere
            if replace_one:
                d = np.abs(data[:, None] - data[None, :]).sum(axis=3).reshape(-1, hist.shape[1])
            else:
                d = data.sum(axis=2)
        cost: dict[int, float] = {}
        for v in np.unique(d):
            cost[int(v)] = float(chain.map(float(v) if extreme else int(v))) if v else 0.0
        loss = np.vectorize(cost.__getitem__)(d).sum(axis=1).max()
        assert loss <= plan.share_cost * (1 + 1e-9), (alias, loss, plan.share_cost)
        checked += 1
    return checked


def query(select: str, where: str, group: str, schema: Schema):
    head = f"{group}, " if group else ""
    tail = f" GROUP BY {group}" if group else ""
    return parse_query(f"SELECT {head}{select} FROM t {where}{tail}", schema)


BOUNDS = st.tuples(
    st.integers(1, 3),
    st.one_of(st.none(), st.integers(1, 2)),
    st.one_of(st.none(), st.integers(1, 2)),
    st.booleans(),
)
#: hypothesis budgets: a quick run by default, the full one under the ``slow`` marker (``-m slow``; scripts/test.sh
#: runs both), so that the default run stays near a minute on a 2-core machine and the full strength is kept
QUICK, FULL = 3, 12
EXAMPLES = [QUICK, pytest.param(FULL, marks=pytest.mark.slow)]


def hypothesis_run(examples: int):
    """``settings`` of a property run at ``examples`` examples (no deadline: the brute force is slow)."""
    return settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def split_slow(cases: list[tuple[Any, ...]], default: list[tuple[Any, ...]]) -> list[Any]:
    """``cases`` as pytest parameters: those in ``default`` plain, the others marked ``slow`` (every case still
    runs in a full run, none twice)."""
    assert set(default) <= set(cases)
    return [c if c in default else pytest.param(*c, marks=pytest.mark.slow) for c in cases]


@pytest.mark.parametrize("examples", EXAMPLES)
def test_additive_releases_cover_every_person_step(examples: int) -> None:
    @hypothesis_run(examples)
    @given(BOUNDS, st.sampled_from(WHERES), st.sampled_from(GROUPS))
    def run(bounds, where, group) -> None:
        schema = schema_of(*bounds)
        people = persons(schema)
        q = query(SUMS + DISTINCT, where, group, schema)
        for definition, replace_one in itertools.product(("pure", "zcdp", "gdp"), (False, True)):
            # the count, and n, S, Q of x and of f (issue 32: SUM(x), AVG(x), VAR(x) share n and S_x; SUM(f) and
            # STDDEV(f) share S_f; n is listed with each column's centred plan)
            assert check_additive(q, schema, people, definition, replace_one) >= 7

    run()


@pytest.mark.parametrize("examples", EXAMPLES)
def test_count_distinct_covers_every_person_step(examples: int) -> None:
    @hypothesis_run(examples)
    @given(BOUNDS, st.sampled_from(WHERES), st.sampled_from(GROUPS))
    def run(bounds, where, group) -> None:
        schema = schema_of(*bounds)
        people = persons(schema)
        q = query(DISTINCT, where, group, schema)
        for definition, replace_one in itertools.product(("pure", "zcdp", "gdp"), (False, True)):
            check_distinct(q, schema, people, definition, replace_one)

    run()


@pytest.mark.parametrize("examples", EXAMPLES)
def test_quantile_maps_cover_every_person_step(examples: int) -> None:
    @hypothesis_run(examples)
    @given(BOUNDS, st.sampled_from(WHERES), st.sampled_from(GROUPS))
    def run(bounds, where, group) -> None:
        schema = schema_of(*bounds)
        people = persons(schema)
        q = query(QUANTILES, where, group, schema)
        for definition, replace_one in itertools.product(("pure", "zcdp"), (False, True)):
            assert check_quantiles(q, schema, people, definition, replace_one) == 4

    run()


#: the deterministic grid's default cases: every WHERE and every GROUP BY at least once (the rest: ``slow``)
GRID = list(itertools.product(WHERES, GROUPS))
GRID_DEFAULT = [
    ("", "g"),
    ("WHERE x >= 0", "s"),
    ("WHERE g <> 'c'", "g, s"),
    ("WHERE s = 'm'", ""),
    ("WHERE g = 'a' OR x >= 0", "g"),
]


@pytest.mark.parametrize(("where", "group"), split_slow(GRID, GRID_DEFAULT))
def test_every_box_and_grouping_at_the_largest_bounds(where, group) -> None:
    """The deterministic grid: K = 3, no per-group bound, s varying (the most persons), every relation and
    definition, every aggregate family."""
    schema = schema_of(3, None, None, False)
    people = persons(schema)
    for definition, replace_one in itertools.product(("pure", "zcdp", "gdp"), (False, True)):
        check_additive(query(SUMS + DISTINCT, where, group, schema), schema, people, definition, replace_one)
        check_distinct(query(DISTINCT, where, group, schema), schema, people, definition, replace_one)
        if definition != "gdp":
            check_quantiles(query(QUANTILES, where, group, schema), schema, people, definition, replace_one)


def test_oracle_agrees_with_the_backend() -> None:
    """The per-row decomposition and the distinct oracle equal the pandas backend on whole data sets."""
    schema = schema_of(3, 2, 2, False)
    people = persons(schema)
    rng = np.random.default_rng(7)
    q = query(SUMS + DISTINCT, "WHERE x >= 0 OR g = 'a'", "g", schema)
    plan = plan_noise(q, schema, CURRENCIES["pure"], 0.7)
    rel = per_row(q, plan, schema)
    cells = [cell_of(r) for r in rel]
    for _ in range(20):
        chosen = [people[int(i)] for i in rng.choice(len(people), 3)]
        rows = [ROWS[i] for p in chosen for i in p]
        pids = [j for j, p in enumerate(chosen) for _ in p]
        got = PandasBackend(frame(rows, pids), schema).evaluate(q, units_of(plan), extended=plan.extra)
        assert list(got.counts) == list(sum(rel[i]["count"] for p in chosen for i in p))
        key = plan.moments["x"].key  # SUM(x) is S_x + c·n (issue 32): its centred sum, shared with AVG / VAR
        assert [int(v) for v in got.extra[key]["s"]] == list(sum(rel[i][f"{key}:s"] for p in chosen for i in p))
        for j in range(3):
            xs = {ROWS[i]["x"] for p in chosen for i in p if cells[i] == j}
            ids = {k for k, p in enumerate(chosen) if any(cells[i] == j for i in p)}
            assert int(got.extra["dx"][j]) == len(xs)
            assert int(got.extra["dp"][j]) == len(ids)


def test_bounds_are_attained() -> None:
    """Where docs/people.md §2 claims tightness the brute force reaches the bound: add/remove L1 = T·M and
    L∞ = c·M; replace over ≥ 2n cells L1 = 2T·M; COUNT(DISTINCT pid) L1 = n (add/remove)."""
    schema = schema_of(3, None, None, False)
    people = persons(schema)
    q = query("COUNT(*) AS n, SUM(x) AS sx, COUNT(DISTINCT pid) AS dp", "", "g", schema)
    for replace_one in (False, True):
        plan = plan_noise(q, schema, CURRENCIES["pure"], 0.7, replace_one=replace_one)
        rel = per_row(q, plan, schema)
        for name, noise in noises(plan).items():
            if name.startswith("dp:"):
                cells = [cell_of(r) for r in rel]
                ind = np.array([[int(any(cells[i] == j for i in p)) for j in range(3)] for p in people])
                brute = norms(changes(ind, replace_one), 1)
            else:
                brute = norms(changes(person_vectors(rel, people, name), replace_one), 1)
            assert brute[0] == noise.calibrated, (name, replace_one, brute, noise)
    cov = coverage_of(q, schema)
    assert cov.contribution == Contribution(rows=3, per_cell=3, cells=3)
    plan = plan_noise(q, schema, CURRENCIES["gdp"], 0.9)
    assert plan.count.calibrated == 3 and plan.sums["x"].calibrated == 6  # L∞ = c·M
    assert plan.extra["dp"].plan.cells == 3


def test_invariant_group_by_puts_a_person_in_one_cell() -> None:
    """GROUP BY an invariant column: a person's rows share its value, so one cell changes (add/remove)."""
    inv = schema_of(3, None, None, True)
    var = schema_of(3, None, None, False)
    assert coverage_of(query("COUNT(*)", "", "s", inv), inv).contribution.cells == 1
    assert coverage_of(query("COUNT(*)", "", "s", var), var).contribution.cells == 2
    g = schema_of(3, 1, None, False)  # at most one g value per person
    assert coverage_of(query("COUNT(*)", "", "g, s", g), g).contribution.cells == 2


@pytest.mark.parametrize(("where", "group"), split_slow(GRID, GRID_DEFAULT))
def test_row_level_is_unchanged_and_one_row_persons_are_rows(where, group) -> None:
    """K = 1: a person is one row, and every release is planned exactly as at row level."""
    row = Schema.from_dict({"table": "t", "columns": COLUMNS})
    one = schema_of(1, None, None, False)
    for definition, replace_one in itertools.product(("pure", "zcdp", "gdp"), (False, True)):
        a = plan_noise(query(SUMS + DISTINCT, where, group, row), row, CURRENCIES[definition], 0.5)
        b = plan_noise(query(SUMS + DISTINCT, where, group, one), one, CURRENCIES[definition], 0.5)
        assert noises(a) == noises(b)
        if definition != "gdp":
            qa = plan_noise(
                query(QUANTILES, where, group, row), row, CURRENCIES[definition], 0.5, replace_one=replace_one
            )
            qb = plan_noise(
                query(QUANTILES, where, group, one), one, CURRENCIES[definition], 0.5, replace_one=replace_one
            )
            assert [u.plan.scale for u in qa.extra.values()] == [u.plan.scale for u in qb.extra.values()]


def test_ci_target_and_dry_run_use_the_person_level_sensitivity() -> None:
    """``--ci`` (cost_for_target) and dry runs call the same plan: a person with K rows needs K× the ε."""
    row = Schema.from_dict({"table": "t", "columns": COLUMNS})
    three = schema_of(3, None, None, False)
    eps_row = cost_for_target(query("COUNT(*)", "", "", row), row, CURRENCIES["pure"], 10.0)
    eps_person = cost_for_target(query("COUNT(*)", "", "", three), three, CURRENCIES["pure"], 10.0)
    assert eps_person == pytest.approx(3 * eps_row, rel=1e-5)


# ---- coarsening -------------------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 10**7), min_size=1, max_size=6), st.integers(2, 5000))
def test_norm_sensitivity_coarsens_to_proven_bounds(d, k) -> None:
    """For any change vector within the norms, the rounded change ⌈|d|/k⌉ stays within the coarsened norms."""
    n = sum(1 for v in d if v)
    sens = NormSensitivity((), sum(d), math.sqrt(sum(v * v for v in d)), max(d), max(1, n))
    c = sens.coarsen(k)
    a = [-(-v // k) for v in d]
    assert sum(a) <= c.l1 and math.sqrt(sum(v * v for v in a)) <= c.l2 * (1 + 1e-12) and max(a) <= c.linf
    assert sum(1 for v in a if v) <= c.max_cells


def test_entrywise_coarsening_of_patterns_would_be_unsound() -> None:
    """The docstring's counter-example: (3, 1) coarsened by 2 is (2, 1), L2 √5, above both (4) → 2 and
    (1, 1, 1, 1) → 2 — the norm bounds cover it."""
    c = NormSensitivity((), 4, 4.0, 4, 4).coarsen(2)
    assert c.l2 >= math.sqrt(5) and c.l1 >= 3


def test_statistical_mode_refuses_a_person_level_schema() -> None:
    from dpmagic.statistical.sp_session import StatisticalSession

    schema = schema_of(3, None, None, False)
    df = frame([ROWS[0]], [0])
    with pytest.raises(DPMagicError, match="person"):
        StatisticalSession(df, schema, prior="bernoulli(0.5)", column="s", parts=4, epsilon=0.05, delta=0.13)
