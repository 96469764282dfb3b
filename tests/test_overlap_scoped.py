"""The scoped branch and bound (issue 28, :mod:`dpmagic.overlap.scoped`) against brute force on small domains.

Every path is checked for: γ ≤ reported upper, lower ≤ γ, the witness's load = lower, exact only when the two
are equal, and incremental admissions equal to a from-scratch solve; with a floor, with a target, and on a
timeout (the frontier's bound is still proven).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from overlap_support import FAST, SCHEMA, admit_each, assert_sound, boxes, brute_max, problem_of, row_load, weights_st

import dpmagic.overlap.scoped as scoped_mod
from dpmagic.domain.sets import Box, CategorySet
from dpmagic.overlap import OverlapEngine, PortfolioConfig, max_overlap, plan
from dpmagic.overlap.encoding import BoxStore
from dpmagic.overlap.maxoverlap import solve_overlap
from dpmagic.overlap.portfolio import Instance, witness_row
from dpmagic.overlap.rounding import ProblemRounding, is_exact
from dpmagic.overlap.scoped import scoped_search

decimal_weights = st.sampled_from([0.01, 0.037, 0.05, 0.1, 0.083, 0.3, 0.07, 0.011])
any_weights = st.one_of(weights_st, decimal_weights, st.floats(0.01, 3.0))
workloads = st.lists(st.tuples(boxes(), any_weights), min_size=1, max_size=8)
#: the scoped search alone (no tensor, no other step): exact only through it
SCOPED = PortfolioConfig(steps=frozenset({"scoped"}), scoped_max_scope=99.0)


def _sound(r, bx, ws, region=None) -> None:
    assert_sound(r, bx, ws, region=region)


@given(workloads)
@FAST
def test_scoped_alone_is_exact_and_sound(wl) -> None:
    """The scoped search alone: exact, equal to brute force, the witness's load is the lower end."""
    bx, ws = [b for b, _ in wl], [w for _, w in wl]
    r = max_overlap(bx, ws, SCHEMA, config=SCOPED)
    _sound(r, bx, ws)
    assert r.exact
    assert "scoped" in r.method or r.method in ("empty", "none")  # no column: the first witness is exact


@given(workloads, st.one_of(st.none(), boxes()))
@FAST
def test_scoped_search_from_nothing_finds_the_maximum(wl, region) -> None:
    """The search itself, with no incumbent (the portfolio's first witness is often already optimal on small
    domains): its best row's load is the brute-force maximum, its upper bound proven, and it reports exact."""
    bx, ws = [b for b, _ in wl], [w for _, w in wl]
    if region is not None and region.is_empty():
        return
    store, prob = problem_of(bx, ws, region)
    if prob.n == 0:
        return
    truth = brute_max(SCHEMA, bx, ws, region)
    atoms, upper, exact, tag = scoped_search(prob, math.inf, ProblemRounding.of(prob), -1.0)
    assert exact and tag == "scoped"
    row = witness_row(store, prob, atoms)
    assert row_load(bx, ws, row) == pytest.approx(truth, abs=1e-12)
    assert truth <= upper and is_exact(truth, upper)
    if region is not None:
        assert region.contains_row(row)


@given(workloads, boxes(), st.floats(-1.0, 6.0))
@FAST
def test_scoped_region_with_floor(wl, region, floor) -> None:
    """In a region with a floor: sound; exact whenever the maximum is above the floor, else upper is the floor
    (rounded up) or the exact maximum."""
    bx, ws = [b for b, _ in wl], [w for _, w in wl]
    store = BoxStore(SCHEMA)
    store.extend(bx, ws)
    r = solve_overlap(store, region=region, floor=floor, config=SCOPED)
    if region.is_empty():
        assert r.upper == 0.0
        return
    _sound(r, bx, ws, region)
    truth = brute_max(SCHEMA, bx, ws, region)
    if truth > floor + 1e-9:
        assert r.exact
    else:
        assert r.upper <= max(truth, floor) * (1 + 1e-9) + 1e-12


def _stopped_search(prob, rnd, nodes: int):  # type: ignore[no-untyped-def]
    """The scoped search with a clock that reports the deadline passed after ``nodes`` readings."""
    calls = [0]
    real = scoped_mod.time.perf_counter

    class _Clock:
        @staticmethod
        def perf_counter() -> float:
            calls[0] += 1
            return math.inf if calls[0] > nodes else real()

    scoped_mod.time = _Clock  # type: ignore[assignment]
    try:
        return scoped_search(prob, 1e300, rnd, -1.0)
    finally:
        scoped_mod.time = time


@given(workloads, st.integers(0, 40))
@FAST
def test_scoped_timeout_and_target_are_proven(wl, nodes) -> None:
    """A search stopped after a few nodes (deadline) or on a target reports a proven upper bound and a witness
    whose load is at most the maximum."""
    bx, ws = [b for b, _ in wl], [w for _, w in wl]
    store, prob = problem_of(bx, ws)
    if prob.n == 0:
        return
    rnd = ProblemRounding.of(prob)
    truth = brute_max(SCHEMA, bx, ws)
    atoms, upper, exact, tag = _stopped_search(prob, rnd, nodes)
    assert truth <= upper
    if atoms:
        row = witness_row(store, prob, atoms)
        assert row_load(bx, ws, row) <= truth + 1e-12
    if exact:
        assert tag == "scoped"
        assert row_load(bx, ws, witness_row(store, prob, atoms)) == pytest.approx(truth, abs=1e-12)
    # a target at the true maximum stops the search with the maximum found
    atoms, upper, exact, _ = scoped_search(prob, math.inf, rnd, -1.0, target=truth)
    assert exact and truth <= upper


@given(workloads, boxes(), decimal_weights)
@FAST
def test_scoped_admission_equals_from_scratch(wl, box, w) -> None:
    """Incremental admissions with the scoped search (exact charge) = a from-scratch solve = brute force."""
    eng = OverlapEngine(SCHEMA, charged="exact", solver=SCOPED)
    for ov, bx, ws in admit_each(eng, [*wl, (box, w)]):
        _sound(ov, bx, ws)
        assert ov.exact
        scratch = max_overlap(bx, ws, SCHEMA, config=SCOPED)
        assert scratch.exact and ov.lower == pytest.approx(scratch.lower, abs=1e-12)


def test_scoped_is_planned_first_on_small_scopes_only() -> None:
    """The plan runs the scoped search first on few small columns with small scopes, not otherwise."""
    rng = np.random.default_rng(5)
    bx = []
    for _ in range(40):
        name = str(rng.choice(["c3", "c4"]))
        col = SCHEMA[name]
        bx.append(Box({name: CategorySet.of_indices(col, rng.choice(col.size, size=2, replace=False).tolist())}))
    store, prob = problem_of(bx, [0.05] * len(bx))
    inst = Instance.of(store, prob, np.arange(len(bx)))
    cfg = PortfolioConfig(tensor_cells=1)
    assert plan(inst, cfg)[0][0].name == "scoped"
    assert plan(inst, PortfolioConfig(tensor_cells=1, scoped_max_scope=0.5))[0][0].name != "scoped"
    assert plan(inst, PortfolioConfig(tensor_cells=1, scoped_max_atoms=1))[0][0].name != "scoped"


def _random_problem(rng: np.random.Generator):
    """A random instance built directly: up to 6 columns of up to 5 atoms, up to 30 queries constraining each
    column with probability ½ (to a random, possibly empty, set of atoms), weights on a grid or not."""
    from dpmagic.overlap.encoding import Problem, ProblemColumn

    k = int(rng.integers(1, 7))
    n = int(rng.integers(1, 31))
    cols = []
    for c in range(k):
        a = int(rng.integers(1, 6))
        m = np.ones((n, a), dtype=bool)
        for q in range(n):
            if rng.random() < 0.5:
                m[q] = rng.random(a) < 0.6
        cols.append(ProblemColumn(f"c{c}", a, None, M=m))  # type: ignore[arg-type]
    w = rng.choice([0.25, 0.5, 1.0, 1.5, 0.037, 0.1], size=n) if rng.random() < 0.5 else rng.uniform(0.01, 3.0, n)
    return Problem(np.arange(n), np.asarray(w, dtype=np.float64), cols)


def _loads(prob) -> np.ndarray:
    """Every row's load, by brute force over the product of the columns' atoms."""
    import itertools

    out = []
    for row in itertools.product(*[range(c.a) for c in prob.columns]):
        alive = np.ones(prob.n, dtype=bool)
        for c, a in zip(prob.columns, row):
            alive &= c.M[:, a]
        out.append(float(prob.weights[alive].sum()))
    return np.array(out)


def _row_load(prob, atoms: dict[str, int]) -> float:
    alive = np.ones(prob.n, dtype=bool)
    for c in prob.columns:
        alive &= c.M[:, atoms.get(c.name, 0)]
    return float(prob.weights[alive].sum())


@pytest.mark.parametrize("seed", range(300))
def test_scoped_random_problems_against_brute_force(seed: int) -> None:
    """Deeper instances than the schema's (up to 6 columns, 30 queries, scopes of any size): the search from
    nothing, with a floor, with a target, and stopped after a few nodes: γ ≤ upper, the witness's load ≤ γ and
    = γ when exact, exact only on reaching the maximum (or the floor)."""
    rng = np.random.default_rng(seed)
    prob = _random_problem(rng)
    rnd = ProblemRounding.of(prob)
    truth = float(_loads(prob).max())
    atoms, upper, exact, tag = scoped_search(prob, math.inf, rnd, -1.0)
    assert exact and tag == "scoped"
    assert truth <= upper
    assert truth == 0.0 or is_exact(truth, upper)  # (at γ = 0 with off-grid weights up(0) > 0: not "exact")
    assert _row_load(prob, atoms) == pytest.approx(truth, abs=1e-12)
    floor = float(rng.uniform(0.0, 1.2)) * truth
    atoms, upper, exact, _ = scoped_search(prob, math.inf, rnd, floor)
    assert exact and truth <= upper
    if truth > floor + 1e-9:
        assert _row_load(prob, atoms) == pytest.approx(truth, abs=1e-12)
    else:
        assert upper <= max(truth, floor) * (1 + 1e-9) + 1e-12
    atoms, upper, exact, _ = scoped_search(prob, math.inf, rnd, -1.0, target=truth)
    assert exact and truth <= upper and _row_load(prob, atoms) == pytest.approx(truth, abs=1e-12)
    nodes = int(rng.integers(0, 12))
    atoms, upper, exact, tag = _stopped_search(prob, rnd, nodes)
    assert truth <= upper
    if atoms:
        assert _row_load(prob, atoms) <= truth + 1e-12
        if exact:
            assert _row_load(prob, atoms) == pytest.approx(truth, abs=1e-12)


def _true_terms(prob) -> np.ndarray:
    """Per query k (registration order = index): ``w_k`` + the maximum over k's box of the load of the queries
    before k, by brute force (the engine's admission terms, exact)."""
    import itertools

    rows = list(itertools.product(*[range(c.a) for c in prob.columns]))
    cov = np.ones((len(rows), prob.n), dtype=bool)
    for r, row in enumerate(rows):
        for c, a in zip(prob.columns, row):
            cov[r] &= c.M[:, a]
    out = np.zeros(prob.n)
    for k in range(prob.n):
        inside = cov[:, k]
        before = cov[inside][:, :k] @ prob.weights[:k] if k else np.zeros(int(inside.sum()))
        out[k] = prob.weights[k] + (float(before.max()) if len(before) else 0.0)
    return out


@pytest.mark.parametrize("seed", range(200))
def test_scoped_with_terms_against_brute_force(seed: int) -> None:
    """With per-query terms (proven bounds of the rows each query covers last; here the exact ones, some raised:
    any upper bound is valid), the search prunes live sets without a hot query and never branches outside the
    hot queries' boxes: still γ ≤ upper, the witness's load ≤ γ (= γ when above the floor), exact on completion;
    stopped after a few nodes, still proven."""
    rng = np.random.default_rng(1000 + seed)
    prob = _random_problem(rng)
    rnd = ProblemRounding.of(prob)
    truth = float(_loads(prob).max())
    # proven bounds: the float sums raised by a margin above their rounding error, some raised further
    terms = _true_terms(prob) + 1e-12 + np.where(rng.random(prob.n) < 0.3, rng.uniform(0.0, 1.0, prob.n), 0.0)
    for floor in (-1.0, float(rng.uniform(0.0, 1.1)) * truth, truth):
        atoms, upper, exact, tag = scoped_search(prob, math.inf, rnd, floor, terms=terms)
        assert exact and tag == "scoped"
        assert truth <= upper + 1e-12  # (upper may snap to the weights' lattice: the exact sum, not the float one)
        if truth > floor + 1e-9:
            assert _row_load(prob, atoms) == pytest.approx(truth, abs=1e-12)
            assert is_exact(truth, upper) or truth == 0.0
        else:
            assert upper <= max(truth, floor) * (1 + 1e-9) + 1e-12
        if atoms:
            assert _row_load(prob, atoms) <= truth + 1e-12
    nodes = int(rng.integers(0, 12))
    calls = [0]

    class _Clock:
        @staticmethod
        def perf_counter() -> float:
            calls[0] += 1
            return math.inf if calls[0] > nodes else 0.0

    scoped_mod.time = _Clock  # type: ignore[assignment]
    try:
        atoms, upper, exact, _ = scoped_search(prob, 1e300, rnd, -1.0, terms=terms)
    finally:
        scoped_mod.time = time
    assert truth <= upper + 1e-12
    if atoms:
        assert _row_load(prob, atoms) <= truth + 1e-12
        if exact:
            assert _row_load(prob, atoms) == pytest.approx(truth, abs=1e-12)


@pytest.mark.parametrize("seed", range(100))
def test_scoped_timeout_reports_its_frontier(seed: int) -> None:
    """A search stopped once its root is expanded reports the frontier's bound (finite, ≥ γ), not ∞: before the
    fix the root's own unbounded entry stayed in the frontier, so every timed-out scoped search reported ∞."""
    rng = np.random.default_rng(5000 + seed)
    prob = _random_problem(rng)
    rnd = ProblemRounding.of(prob)
    truth = float(_loads(prob).max())
    for nodes in (2, 3, 5, 8):
        atoms, upper, exact, tag = _stopped_search(prob, rnd, nodes)
        assert truth <= upper + 1e-12
        assert math.isfinite(upper)
        if not exact:
            assert tag == "scoped-timeout"


class _Budget:
    """A clock for the scoped search that reports the deadline passed after ``n`` readings (then reset)."""

    def __init__(self) -> None:
        self.left = 0

    def perf_counter(self) -> float:
        self.left -= 1
        return math.inf if self.left < 0 else 0.0


@pytest.mark.parametrize("seed", range(200))
def test_scoped_resumed_equals_uninterrupted(seed: int) -> None:
    """A search paused every few nodes and resumed (``state``), with the floor raised between slices, ends with
    the uninterrupted search's answer: exact, γ ≤ upper, the witness's load = γ when above the floor; every
    intermediate upper bound is proven (≥ γ) and the node count is the uninterrupted one's (no work repeated)."""
    rng = np.random.default_rng(9000 + seed)
    prob = _random_problem(rng)
    rnd = ProblemRounding.of(prob)
    truth = float(_loads(prob).max())
    terms = (_true_terms(prob) + 1e-12) if rng.random() < 0.5 else None
    floor = -1.0 if rng.random() < 0.5 else float(rng.uniform(0.0, 0.9)) * truth
    whole = scoped_mod._Search(prob, math.inf, floor, math.inf, rnd.slack, terms)
    whole.run()
    clock = _Budget()
    state: dict = {}
    kept, slices, raised = None, 0, False
    scoped_mod.time = clock  # type: ignore[assignment]
    try:
        for _ in range(10_000):
            clock.left = int(rng.integers(0, 4))
            slices += 1
            atoms, upper, exact, tag = scoped_search(prob, 1e300, rnd, floor, terms=terms, state=state)
            kept = state.get("search", kept)
            assert truth <= upper + 1e-12
            if atoms:
                assert _row_load(prob, atoms) <= truth + 1e-12
            if exact:
                break
            assert "search" in state and tag.endswith("-timeout")
            if rng.random() < 0.2:  # a floor known later (e.g. the engine's γ grew): only rows above it matter
                new = max(floor, float(rng.uniform(0.0, 1.0)) * truth)
                raised = raised or new > floor
                floor = new
    finally:
        scoped_mod.time = time
    assert exact and "search" not in state
    assert truth <= upper + 1e-12
    if kept is not None and not raised:  # each slice re-enters at most the node it stopped on
        assert kept.nodes <= whole.nodes + slices
    if truth > floor + 1e-9:
        assert _row_load(prob, atoms) == pytest.approx(truth, abs=1e-12)
    else:
        assert upper <= max(truth, floor) * (1 + 1e-9) + 1e-12


@given(st.lists(st.tuples(boxes(), decimal_weights), min_size=2, max_size=9), st.integers(1, 4))
@FAST
def test_engine_pending_terms_resume_their_search(wl, per_call) -> None:
    """Admissions whose scoped search stops after ``per_call`` nodes leave pending terms holding the paused
    search; after every admission γ's interval is proven (brute force: lower ≤ γ ≤ upper, the witness's load is
    the lower end, exact only when equal); ``retighten`` slices of ``per_call`` nodes each then finish those
    searches (no slice repeats another's work) and recover the exact γ, equal to a from-scratch solve.  (Before
    the searches were resumable, each slice restarted from scratch and never finished.)"""
    clock = _Budget()
    eng = OverlapEngine(SCHEMA, charged="exact", solver=SCOPED, retighten_seconds=0.0)
    bx: list[Box] = []
    ws: list[float] = []
    scoped_mod.time = clock  # type: ignore[assignment]
    try:
        for b, x in wl:
            clock.left = per_call
            eng.commit(eng.admit(b, x))
            bx.append(b)
            ws.append(x)
            _sound(eng.bounds().overlap, bx, ws)
        for _ in range(2000):
            if eng.overlap().exact:
                break
            clock.left = per_call
            eng.retighten(30.0)
            _sound(eng.overlap(), bx, ws)
    finally:
        scoped_mod.time = time
    g = eng.overlap()
    assert g.exact
    _sound(g, bx, ws)
    scratch = max_overlap(bx, ws, SCHEMA, config=SCOPED)
    assert scratch.exact and g.lower == pytest.approx(scratch.lower, abs=1e-12)


def test_paused_searches_held_are_bounded() -> None:
    """Only the largest pending terms keep their paused search, within ``RESUME_MAX`` and ``RESUME_MAX_BYTES``
    (a paused search's size is counted by :func:`~dpmagic.overlap.scoped.scoped_state_nbytes`)."""
    import dpmagic.overlap.engine as eng_mod
    from dpmagic.overlap.scoped import scoped_state_nbytes

    rng = np.random.default_rng(3)
    prob = _random_problem(rng)
    while prob.n < 5 or len(prob.columns) < 2:
        prob = _random_problem(rng)
    rnd = ProblemRounding.of(prob)
    states = []
    for _ in range(eng_mod.RESUME_MAX + 3):
        state: dict = {}
        clock = _Budget()
        clock.left = 1
        scoped_mod.time = clock  # type: ignore[assignment]
        try:
            scoped_search(prob, 1e300, rnd, -1.0, state=state)
        finally:
            scoped_mod.time = time
        if "search" in state:
            states.append(state)
    if not states:
        return
    assert all(scoped_state_nbytes(s) > 0 for s in states) and scoped_state_nbytes({}) == 0
    terms = tuple(eng_mod._Term(i, None, 0.1, 1.0 + i, resume=s) for i, s in enumerate(states))
    kept = eng_mod._keep_resumes(terms)
    held = [t for t in kept if t.resume is not None]
    assert len(held) == min(len(states), eng_mod.RESUME_MAX)
    assert {t.n for t in held} == {t.n for t in sorted(terms, key=lambda t: -t.upper)[: len(held)]}
    assert [t.upper for t in kept] == [t.upper for t in terms]  # only the paused searches are dropped
    old = eng_mod.RESUME_MAX_BYTES
    eng_mod.RESUME_MAX_BYTES = 0
    try:
        assert all(t.resume is None for t in eng_mod._keep_resumes(terms))
    finally:
        eng_mod.RESUME_MAX_BYTES = old


@st.composite
def _split_instances(draw):  # type: ignore[no-untyped-def]
    """A random small instance for :func:`~dpmagic.overlap.scoped.split_bound`: 1–4 columns of 1–4 atoms, 0–8
    queries each constraining any subset of the columns (nonempty rows there, all ones elsewhere), weights, a
    starting split (or None) and a number of steps."""
    m = draw(st.integers(1, 4))
    widths = [draw(st.integers(1, 4)) for _ in range(m)]
    n = draw(st.integers(0, 8))
    cons = np.zeros((n, m), dtype=bool)
    cover = np.ones((n, sum(widths)))
    offsets = np.cumsum([0] + widths[:-1]).astype(np.intp)
    for q in range(n):
        for c in range(m):
            if draw(st.booleans()):
                row = np.array(draw(st.lists(st.booleans(), min_size=widths[c], max_size=widths[c])), dtype=float)
                row[draw(st.integers(0, widths[c] - 1))] = 1.0  # nonempty
                cover[q, offsets[c] : offsets[c] + widths[c]] = row
                cons[q, c] = not row.all()  # a full row constrains nothing
    w = np.array(draw(st.lists(any_weights, min_size=n, max_size=n)), dtype=np.float64)
    lam = None
    if draw(st.booleans()):
        lam = np.array(draw(st.lists(st.floats(0.0, 5.0), min_size=n * m, max_size=n * m))).reshape(n, m)
    return cover, cons, offsets, widths, w, lam, draw(st.integers(0, 6))


@given(_split_instances())
@FAST
def test_split_bound_is_above_brute_force(inst) -> None:
    """The weight-splitting bound (issue 28, :func:`~dpmagic.overlap.scoped.split_bound`), from any starting split
    and after any number of steps, is at least every row's load (brute force over the product of the atoms), and
    its returned split is a split (non-negative, on each query's constrained columns, summing to 1)."""
    import itertools

    cover, cons, offsets, widths, w, lam, steps = inst
    ub, split = scoped_mod.split_bound(cover, cons, offsets, w, lam, steps)
    truth = 0.0
    for row in itertools.product(*[range(a) for a in widths]):
        alive = np.ones(len(w), dtype=bool)
        for c, a in enumerate(row):
            alive &= cover[:, offsets[c] + a] > 0
        truth = max(truth, float(w[alive].sum()))
    assert truth <= ub
    assert (split >= 0.0).all() and (split[~cons] == 0.0).all()
    live = cons.any(axis=1)
    assert np.allclose(split[live].sum(axis=1), 1.0)


def test_split_bound_is_tighter_than_one_column() -> None:
    """Two unit queries ``q0 = {a0} × {b0}`` and ``q1 = {a0} × {b1}`` (maximum load 1): the search's static
    assignment (each query's whole weight on its first column, A) bounds it by 2; splitting the weights gives 1.5
    at once, and the steps never lose that (the least bound over the steps is kept)."""
    cover = np.array([[1, 0, 1, 0], [1, 0, 0, 1]], dtype=np.float64)
    cons = np.ones((2, 2), dtype=bool)
    offsets = np.array([0, 2], dtype=np.intp)
    static, _ = scoped_mod.split_bound(cover, cons, offsets, np.ones(2), np.array([[1.0, 0.0], [1.0, 0.0]]), 0)
    assert static == pytest.approx(2.0)
    for steps in (0, 1, 10):
        ub, _ = scoped_mod.split_bound(cover, cons, offsets, np.ones(2), None, steps)
        assert 1.0 <= ub <= 1.5 * (1 + 1e-8)


@pytest.mark.parametrize("seed", range(200))
def test_scoped_with_split_cuts_against_brute_force(seed: int) -> None:
    """The search with the weight-splitting cut at every branching node of every depth (from the first node, at
    any gap): exact, the witness's load = γ, with and without a floor and terms, as in the tests above."""
    rng = np.random.default_rng(5000 + seed)
    prob = _random_problem(rng)
    rnd = ProblemRounding.of(prob)
    truth = float(_loads(prob).max())
    saved = scoped_mod.SPLIT_DEPTH, scoped_mod.SPLIT_AFTER, scoped_mod.SPLIT_RATIO
    scoped_mod.SPLIT_DEPTH, scoped_mod.SPLIT_AFTER, scoped_mod.SPLIT_RATIO = 99, 0, math.inf
    try:
        terms = _true_terms(prob) + 1e-12 if seed % 2 else None
        for floor in (-1.0, float(rng.uniform(0.0, 1.1)) * truth):
            atoms, upper, exact, tag = scoped_search(prob, math.inf, rnd, floor, terms=terms)
            assert exact and tag == "scoped"
            assert truth <= upper + 1e-12
            if truth > floor + 1e-9:
                assert _row_load(prob, atoms) == pytest.approx(truth, abs=1e-12)
                assert is_exact(truth, upper) or truth == 0.0
            else:
                assert upper <= max(truth, floor) * (1 + 1e-9) + 1e-12
    finally:
        scoped_mod.SPLIT_DEPTH, scoped_mod.SPLIT_AFTER, scoped_mod.SPLIT_RATIO = saved


def _max_below(prob, order: list[int], prefix: list[int]) -> float:
    """The largest load of a row whose first ``len(prefix)`` columns in ``order`` are the atoms ``prefix`` (brute
    force over the rest)."""
    import itertools

    fixed = {order[p]: a for p, a in enumerate(prefix)}
    best = 0.0
    for row in itertools.product(*[[fixed[i]] if i in fixed else range(c.a) for i, c in enumerate(prob.columns)]):
        alive = np.ones(prob.n, dtype=bool)
        for c, a in zip(prob.columns, row):
            alive &= c.M[:, a]
        best = max(best, float(prob.weights[alive].sum()))
    return best


@pytest.mark.parametrize("seed", range(150))
def test_lookahead_children_bounds_against_brute_force(seed: int) -> None:
    """The children's entry bounds computed at once by their parent (:meth:`~dpmagic.overlap.scoped._Search.
    _children_tops`, issue 28): at every node of the first two levels, for every child, (i) the handed-down
    tables equal the child's own (:meth:`_tables`, up to float reordering), (ii) the bound is at least the true
    maximum load below the child (brute force), and the bound is at most the parent's partitioned bound of
    that child (with the margin)."""
    rng = np.random.default_rng(9000 + seed)
    prob = _random_problem(rng)
    s = scoped_mod._Search(prob, math.inf, -1.0, math.inf, 0.0)
    if s.k < 2:
        return
    nodes = [([], np.ones(prob.n, dtype=bool), float(s.w[s.assigned[0] == s.k].sum()), s._root_rest())]
    for _depth in range(2):
        nxt = []
        for prefix, alive, fixed, rest in nodes:
            j = len(prefix)
            if j + 1 >= s.k:
                continue
            lv = s._level(j)
            u, star, s0 = s._tables(j, lv, alive, rest)
            cand = np.arange(s.widths[j])
            tops, pre = s._children_tops(j, alive, fixed, u, star, cand)
            assert (tops <= (s0 + fixed) * (1 + 1e-8) + 1e-12).all()
            for a in cand.tolist():
                child_alive = alive & s.cover_t[j][a]
                child_rest = star[a, s.widths[j + 1] :]
                own = s._tables(j + 1, s._level(j + 1), child_alive, child_rest)
                for got, want in zip(pre[a], own):
                    assert (got is None) == (want is None)
                    if want is not None:
                        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
                assert _max_below(prob, s.order[: j + 1], prefix + [a]) <= tops[a] + 1e-12
                nxt.append((prefix + [a], child_alive, fixed + float(u[a]), child_rest))
        nodes = nxt


@pytest.mark.parametrize("seed", range(150))
def test_lookahead_on_and_off_agree(seed: int) -> None:
    """The search with and without the look-ahead (:data:`~dpmagic.overlap.scoped.LOOKAHEAD`): both exact, the same
    maximum (up to float reordering) and witnesses of that load, from nothing, with a floor and with terms."""
    rng = np.random.default_rng(12000 + seed)
    prob = _random_problem(rng)
    rnd = ProblemRounding.of(prob)
    truth = float(_loads(prob).max())
    terms = _true_terms(prob) + 1e-12 if seed % 2 else None
    floor = -1.0 if seed % 3 else float(rng.uniform(0.0, 1.1)) * truth
    got = []
    saved = scoped_mod.LOOKAHEAD, scoped_mod.LOOKAHEAD_AFTER
    try:
        for on in (True, False):
            scoped_mod.LOOKAHEAD, scoped_mod.LOOKAHEAD_AFTER = on, 0  # from the first node (off by default)
            got.append(scoped_search(prob, math.inf, rnd, floor, terms=terms))
    finally:
        scoped_mod.LOOKAHEAD, scoped_mod.LOOKAHEAD_AFTER = saved
    for atoms, upper, exact, _tag in got:
        assert exact and truth <= upper + 1e-12
        if truth > floor + 1e-9:
            assert _row_load(prob, atoms) == pytest.approx(truth, abs=1e-12)
    assert got[0][1] == pytest.approx(got[1][1], rel=1e-12)
