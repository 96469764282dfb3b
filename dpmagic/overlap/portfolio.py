"""The portfolio of exact maximum-overlap methods, as data (issues 11 and 12).

A :class:`Step` is one method with a name, an applicability test and a cost estimate (seconds, from measured
per-entry costs on this 2-core machine: they only choose the order, never a result).  :func:`plan` orders the
applicable steps by the instance's features (:class:`Instance`), :func:`run_portfolio` runs them within one
deadline, each seeded with the best witness so far, and stops at the first exact one.  One object,
:class:`PortfolioConfig`, configures it (which steps may run, the cost constants, the shares of the time).

Steps (``tensor``, ``scoped``, ``graph``, ``columns``, ``pairlp``, ``milp``, ``lp``):

* ``tensor`` — the load tensor (:mod:`.tensor`): exact, one numpy computation; alone when its estimate is
  below ``probe_min_seconds`` (the census workload);
* ``scoped`` — branch and bound over columns in one static order with each query charged once (:mod:`.scoped`,
  issue 28): first whenever it applies (at most ``scoped_max_columns`` columns of at most ``scoped_max_atoms``
  atoms, queries constraining on average at most ``scoped_max_scope`` of them) and the tensor is not cheap; the
  other steps follow it when it runs out of its ``scoped_share`` of the time;
* ``graph`` — branch and bound over the query graph (:mod:`.gsearch`), also as a short *probe* capped at
  ``probe_share`` of the tensor's estimate when building the query graph is cheap;
* ``columns`` — branch and bound over columns with tensor leaves (:mod:`.columns`);
* ``pairlp`` — the pairwise-marginal LP relaxation (:mod:`.pairlp`, issue 28): a certified dual bound, tight on the
  drill-down regions, and a rounded witness; non-Helly instances of at most ``pairlp_max_columns`` columns;
* ``milp`` / ``lp`` — HiGHS (:mod:`.milp`): a dual bound with a margin (``lp`` only when the MILP gave none).

Dense analyst instances (issue 28: few columns of few atoms, each query constraining about three of them,
non-Helly, no tensor): a graph probe of ``milp_dense_probe`` seconds, then HiGHS with all the time left (the
searches' column-sum and colouring bounds are weak there, the integer program's relaxation is within a few
per cent and its dual bound snaps to the exact value on decimal costs, :class:`~.rounding.DecimalLattice`).

Drill-down regions (issue 28, held-out family 2: hundreds of live queries over at most ``milp_first_max_columns``
columns, non-Helly, a numeric column refined past the scoped search's atom limit — since session 19 256 atoms, so
most drill-down regions go to the scoped search — no tensor, an atom product above
``column_first_log10``): a graph probe of
``milp_first_probe`` seconds, then the pairwise-marginal LP (``pairlp_share`` of the time left), then HiGHS
(presolved: :data:`~.milp.PRESOLVE_SMALL_NNZ`) with all the time left, then the graph and column searches with what
it leaves.

Order otherwise: the graph search first when the atom product is large (``log₁₀ Π a_c > column_first_log10``: many
columns, sparse query graphs), else the column search.  In that second case (few small columns: a dense
domain) *non-Helly* instances (some query has a category set of several values, ``!=``, ``NOT IN`` or several
intervals in a column) whose integer program is small (``milp_early_nnz``) can go to HiGHS right after the
probe (off by default: on the measured workloads the searches beat it, see :class:`PortfolioConfig`).  Helly
(interval-only) instances keep HiGHS last.  Complexity: each step is bounded by the deadline (the
tensor by its size limits); the plan itself is ``O(Σ_c a_c + n)``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from dpmagic.overlap.columns import KR_ENTRIES, TENSOR_CELLS, column_search
from dpmagic.overlap.deadline import SearchTimeout
from dpmagic.overlap.encoding import BoxStore, Problem
from dpmagic.overlap.gsearch import GRAPH_MAX_N, GraphData, graph_data, graph_search
from dpmagic.overlap.milp import MILP_MAX_NNZ, MILP_MAX_VARS, MILP_OVERRUN_PER_NNZ, milp_overlap, milp_size
from dpmagic.overlap.pairlp import PAIRLP_MIN_SECONDS, pair_lp_bound
from dpmagic.overlap.rounding import ProblemRounding, is_exact, sum_down
from dpmagic.overlap.scoped import scoped_fits, scoped_search
from dpmagic.overlap.tensor import tensor_cost, tensor_max

__all__ = ["PortfolioConfig", "Instance", "Step", "STEPS", "plan", "run_portfolio", "witness_row", "METHODS"]

#: the names of the steps
STEP_NAMES = frozenset({"tensor", "scoped", "graph", "columns", "pairlp", "milp", "lp"})
#: ``solve_overlap(method=...)`` → the steps it may use
METHODS: dict[str, frozenset[str]] = {
    "auto": STEP_NAMES,
    "bb": frozenset({"tensor", "columns"}),
    "graph": frozenset({"tensor", "graph", "columns"}),
    "milp": frozenset({"milp", "lp"}),
    "pairlp": frozenset({"pairlp", "milp", "lp"}),
    "scoped": frozenset({"tensor", "scoped"}),
}
#: the search a ``method`` tries first
_PREFER = {"graph": "graph", "bb": "columns"}
#: seconds needed to start the MILP / the LP relaxation at all
MILP_MIN_SECONDS = 0.3
LP_MIN_SECONDS = 0.05


@dataclass(frozen=True)
class PortfolioConfig:
    """Which steps may run and the constants that order them (the one configuration object).

    ``steps``: the allowed step names (:data:`METHODS` maps the ``method`` argument of
    :func:`~.maxoverlap.solve_overlap` to them); the cost constants are measured on this machine and only
    choose the order of exact methods.
    """

    steps: frozenset[str] = STEP_NAMES
    tensor_cells: float = TENSOR_CELLS
    kr_entries: float = KR_ENTRIES
    tensor_seconds_per_entry: float = 1e-8
    graph_seconds_per_word: float = 2e-9
    graph_max_n: int = GRAPH_MAX_N
    probe_share: float = 0.25
    probe_min_seconds: float = 0.01
    column_first_log10: float = 7.0
    first_share: float = 0.5
    milp_reserve_from: float = 0.6
    milp_max_vars: float = MILP_MAX_VARS
    milp_max_nnz: float = MILP_MAX_NNZ
    #: non-Helly instances with a column-first plan go to HiGHS right after the probe up to this many non-zeros.
    #: Off by default (0): measured on this machine (benchmarks/bench_session.py, uniform category sets of 10
    #: columns t = 2,000 and 12 columns t = 1,000), HiGHS early doubled the CPU time (0.6 → 2.1 s, 1.0 → 2.4 s)
    #: and lost exactness on one 12-column instance; the searches it delays win there
    milp_early_nnz: float = 0
    #: the search tried first when both apply (None: chosen by the atom product)
    prefer: str | None = None
    #: dense analyst instances (issue 28): few columns of few atoms each (the integer program has at most
    #: ``milp_dense_vars`` variables over at most ``milp_dense_columns`` columns), each query constraining few
    #: of them (on average at most ``milp_dense_scope``), non-Helly, too many cells for the tensor: the
    #: searches' bounds are weak there (column sums, colourings) while the integer program's relaxation is
    #: tight, so HiGHS runs right after a graph probe of at most ``milp_dense_probe`` seconds.  (Uniform
    #: category sets constrain half the columns on average: there the searches win, see ``milp_early_nnz``.)
    #: Off by default (0; 1500 turns it on): measured (benchmarks/results/bench_session_issue28.md, 2 cores, load
    #: ≈ 4), it kept dense sessions exact about 4× longer (first inexact admission 81–223 instead of 116–186 …) but
    #: slowed the sparse generator (mixed_analyst_log, 500 queries: p99 0.14 s → 0.6–4.8 s), where the graph
    #: search it cuts short solves what HiGHS takes seconds for
    milp_dense_vars: float = 0
    milp_dense_columns: int = 16
    milp_dense_scope: float = 3.5
    milp_dense_probe: float = 0.02
    #: the scoped branch and bound (:mod:`.scoped`, issue 28) runs first, with ``scoped_share`` of the time, on
    #: instances of at most ``scoped_max_columns`` columns of at most ``scoped_max_atoms`` atoms whose queries
    #: constrain on average at most ``scoped_max_scope`` of them (its bound charges each query to one column).
    #: 12 columns: the dense analyst sessions' region problems have at most 11 (7 categorical + 4 numeric); the
    #: sparse generator's (mixed_analyst_log) have 14, where it took 0.2–2 s (CPU) on admissions the graph search
    #: solves in milliseconds (measured: benchmarks/results/bench_session_issue28_s9.md, p99 0.16 s → 7.4 s with 16).
    #: 256 atoms (64 until session 19): the drill-down sessions refine capital-gain past 100 atoms (118 at 800
    #: queries of drilldown/seed11), and there the scoped search solved γ from scratch in 0.02 / 0.28 / 0.91 s at
    #: 500 / 800 / 1,000 queries where the drill-down plan (probe, pairwise LP) took 0.32 / 1.08 / 2.55 s
    #: (drilldown-wide/seed12 at 1,000: 1.99 s against 8.92 s; PUMS: 0.18 against 0.36 s); back to back, the
    #: drill-down session stayed exact to the end (benchmarks/results/bench_session_issue28_s19_NOTES.md)
    scoped_max_columns: int = 12
    scoped_max_atoms: int = 256
    scoped_max_scope: float = 3.5
    scoped_share: float = 0.8
    #: the share of the time the graph search gets when it runs first (``log₁₀ Π a_c > column_first_log10``:
    #: sparse query graphs over many columns), before the column search and HiGHS.  0.9: on the sparse
    #: generator's admissions (14 columns) the graph search is what finishes (0.4–0.9 s on the hardest), the
    #: column search takes 5–7 s there and HiGHS does not close the gap; with half of an admission's 0.8 s cap
    #: the graph search timed out on admissions it solves in 0.42–0.53 s, and each timeout left γ inexact
    #: (measured: benchmarks/results/bench_session_issue28_s10.md)
    graph_first_share: float = 0.9
    #: drill-down regions (issue 28, held-out family 2; since session 19 mostly the scoped search's, above): many
    #: live queries (at least ``milp_first_min_n``) over at
    #: most ``milp_first_max_columns`` columns, queries constraining on average at most ``milp_first_scope`` of
    #: them, non-Helly, neither the tensor nor the scoped search applicable (a numeric column refined past
    #: ``scoped_max_atoms`` atoms): a graph probe of ``milp_first_probe`` seconds, then HiGHS with all the time
    #: left (it keeps a share of it: the graph and column searches get the rest).  Measured on the captured
    #: region solves of drilldown/seed11 (queries 360–399: 287–390 live queries, 9 columns, 14–87 atoms, 0.8 s):
    #: the graph search proved nothing within 5 s, the column search was inexact after 5 s on 363, HiGHS (presolve
    #: on, :data:`~.milp.PRESOLVE_SMALL_NNZ`) closed every one (exact, or proven under the floor) in 0.13–0.51 s.
    #: 12 columns: the sparse generator's regions (14 columns) keep the graph search first.  Only where the graph
    #: search would run first (``log₁₀ Π a_c > column_first_log10``): below, the column search with tensor leaves
    #: finishes (PUMS regions of 6 columns, 892 live queries, log₁₀ cells 6.8: HiGHS could not start within 0.8 s)
    milp_first_min_n: int = 150
    milp_first_max_columns: int = 12
    milp_first_scope: float = 3.5
    milp_first_probe: float = 0.03
    #: the pairwise-marginal LP (:mod:`.pairlp`, issue 28 session 15) runs in the drill-down plan right after the
    #: probe, before HiGHS's integer program, with ``pairlp_share`` of the time left: on the captured drill-down
    #: regions (drilldown/seed 11, queries 360–700) its certified bound equalled the maximum on every instance
    #: measured, in 0.1–0.6 s, where the integer program took 1–6 s (benchmarks/results/
    #: bench_session_issue28_s15_NOTES.md).  It applies to non-Helly instances of at most ``pairlp_max_columns``
    #: columns (its pairs grow with the square of the columns); it is planned only there (``method="pairlp"`` runs it
    #: alone with the integer program)
    pairlp_share: float = 0.9
    pairlp_max_columns: int = 12
    #: the pairwise LP first solves the cheaper LP with only the pairs of at most this many cells (classes ×
    #: classes; None: the full LP at once), and the full one only when that bound is not at most the target (the
    #: floor or the best load).  Measured on 35 degraded drill-down-wide regions (session 17) within 0.15 s: the full LP
    #: proved the floor on 9, the cheap one first on 25 (400 cells: 20, 100: 22); without a limit the two stages
    #: took 15 % less time in all than the full LP alone (benchmarks/results/bench_session_issue28_s17_NOTES.md)
    pairlp_first_cells: float | None = 200.0

    @classmethod
    def for_method(cls, method: str, **overrides: Any) -> PortfolioConfig:
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}: use one of {sorted(METHODS)}")
        return cls(**overrides).with_method(method)

    def with_method(self, method: str) -> PortfolioConfig:
        """This configuration restricted to the steps of ``method`` (``"auto"``: unchanged)."""
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}: use one of {sorted(METHODS)}")
        if method == "auto":
            return self
        return replace(self, steps=self.steps & METHODS[method], prefer=_PREFER.get(method, self.prefer))


class Instance:
    """Features of one compressed problem; each computed on first use (the census tensor shortcut needs only
    the tensor's size: ``O(m)``; the others ``O(Σ_c n·a_c)``)."""

    def __init__(self, store: BoxStore, prob: Problem, ids: np.ndarray) -> None:
        self.store, self.prob, self.ids = store, prob, ids
        self.cells, self.kr = tensor_cost(prob)

    @classmethod
    def of(cls, store: BoxStore, prob: Problem, ids: np.ndarray) -> Instance:
        return cls(store, prob, ids)

    @cached_property
    def log_cells(self) -> float:
        return float(sum(math.log10(max(c.a, 1)) for c in self.prob.columns))

    @cached_property
    def graph_words(self) -> float:
        """64-bit word ANDs of building the query graph: ``Σ_c n_c² ⌈a_c/64⌉``."""
        words = 0.0
        for c in self.prob.columns:
            st = self.store.cols.get(c.name)
            n_c = float(st.constrained[self.ids].sum()) if st is not None else float(self.prob.n)
            words += n_c * n_c * math.ceil(c.a / 64)
        return words

    @cached_property
    def helly(self) -> bool:
        """Every query's set in every column is one interval or one category (or the whole column)."""
        for c in self.prob.columns:
            if c.M is not None:
                k = c.M.sum(axis=1)
                if not bool(np.all((k <= 1) | (k == c.a))):
                    return False
            elif c.rs is not None and c.rs.shape[1] > 1:
                return False
        return True

    @cached_property
    def mean_scope(self) -> float:
        """The mean number of columns a query constrains (inside the problem's domain).  ``O(Σ_c n·a_c)``."""
        n = self.prob.n
        if n == 0:
            return 0.0
        total = 0
        for c in self.prob.columns:
            if c.M is not None:
                total += int((~c.M.all(axis=1)).sum())
            else:
                whole = (c.rs[:, 0] <= 0) & (c.re[:, 0] >= c.a)  # type: ignore[index]
                total += int((~whole).sum())
        return total / n

    @cached_property
    def _milp(self) -> tuple[float, float]:
        nvar, nnz = milp_size(self.prob)
        return float(nvar), float(nnz)

    @property
    def nvar(self) -> float:
        return self._milp[0]

    @property
    def nnz(self) -> float:
        return self._milp[1]

    def tensor_seconds(self, cfg: PortfolioConfig) -> float:
        return cfg.tensor_seconds_per_entry * (self.cells + self.kr)  # inf when the atom product overflows

    def tensor_fits(self, cfg: PortfolioConfig) -> bool:
        return self.cells <= cfg.tensor_cells and self.kr <= cfg.kr_entries

    def milp_fits(self, cfg: PortfolioConfig) -> bool:
        return self.nvar <= cfg.milp_max_vars and self.nnz <= cfg.milp_max_nnz


@dataclass
class _State:
    """The best witness (exact load, rounded down) and the smallest proven upper bound found so far."""

    inst: Instance
    rnd: ProblemRounding
    floor: float
    target: float
    best_val: float = -math.inf
    best_atoms: dict[str, int] = field(default_factory=dict)
    upper: float = math.inf
    tags: list[str] = field(default_factory=list)
    gdata: GraphData | None = None
    milp_upper: float | None = None
    probing: bool = False
    terms: np.ndarray | None = None
    resume: dict[str, Any] | None = None
    cfg: PortfolioConfig = field(default_factory=lambda: PortfolioConfig())
    soft_floor: float = -math.inf

    def offer(self, atoms: dict[str, int]) -> None:
        if not atoms and self.best_atoms:
            return
        inst = self.inst
        val = _load(inst.store, inst.ids, witness_row(inst.store, inst.prob, atoms))
        if val > self.best_val:
            self.best_val, self.best_atoms = val, atoms

    def bound(self, ub: float) -> None:
        self.upper = min(self.upper, self.rnd.snap(ub))


@dataclass(frozen=True)
class Step:
    """One method of the portfolio: ``run(state, deadline) -> exact?`` (it offers witnesses and bounds)."""

    name: str
    applies: Callable[[Instance, PortfolioConfig], bool]
    cost: Callable[[Instance, PortfolioConfig], float]
    run: Callable[[_State, float], bool]


def _run_tensor(s: _State, deadline: float) -> bool:
    value, named = tensor_max(s.inst.prob)
    s.tags.append("tensor")
    s.offer(named)
    s.bound(s.rnd.up(value))
    return True


def _run_graph(s: _State, deadline: float) -> bool:
    prob = s.inst.prob
    if s.gdata is None:
        try:
            s.gdata = graph_data(prob, deadline)
        except SearchTimeout:
            return False
    r = graph_search(prob, deadline, data=s.gdata, best=max(s.best_val, s.floor), target=s.target, terms=s.terms)
    s.tags.append("graph-probe" if s.probing else "graph-search")
    s.offer({prob.columns[ci].name: a for ci, a in r.atoms.items()} if r.atoms else {})
    s.bound(s.rnd.up(r.upper))
    return r.exact


def _run_columns(s: _State, deadline: float) -> bool:
    adj = s.gdata.adj if s.gdata is not None else None
    at, ub, ex, tag = column_search(s.inst.prob, deadline, s.rnd, max(s.best_val, s.floor), adj)
    s.tags.append(tag)
    s.offer(at)
    s.bound(ub)
    return ex


def _run_scoped(s: _State, deadline: float) -> bool:
    at, ub, ex, tag = scoped_search(s.inst.prob, deadline, s.rnd, max(s.best_val, s.floor), s.target, s.terms, s.resume)
    s.tags.append(tag)
    s.offer(at)
    s.bound(ub)
    return ex


def _scoped_applies(i: Instance, c: PortfolioConfig) -> bool:
    return scoped_fits(i.prob, c.scoped_max_atoms, c.scoped_max_columns) and i.mean_scope <= c.scoped_max_scope


def _run_milp(s: _State, deadline: float) -> bool:
    left = deadline - time.perf_counter()
    # HiGHS overruns its limit by about MILP_OVERRUN_PER_NNZ per non-zero: small models may start with less time
    if left <= min(MILP_MIN_SECONDS, 0.03 + 2.0 * MILP_OVERRUN_PER_NNZ * s.inst.nnz):
        return False
    try:
        _, at, ub = milp_overlap(s.inst.prob, left)
    except Exception:  # pragma: no cover - HiGHS is an optional tightening
        return False
    if at is not None or ub is not None:
        s.tags.append("milp")
    if at is not None:
        s.offer(at)
    if ub is not None:
        s.milp_upper = ub
        s.bound(ub)
    return s.best_val > -math.inf and is_exact(s.best_val, s.upper)


def _run_pairlp(s: _State, deadline: float) -> bool:
    left = deadline - time.perf_counter()
    if left < PAIRLP_MIN_SECONDS:
        return False
    # the soft floor when there is one (the LP's bound usually passes it soon after the floor), else the floor
    floor = s.soft_floor if math.isfinite(s.soft_floor) else s.floor
    target = max(s.best_val, floor)
    lat = s.rnd.lattice
    if lat is not None and s.best_val >= floor:
        # on a decimal lattice (δ = 10^-digits) a bound less than half a step above the best load snaps to it
        # (:meth:`~.rounding.DecimalLattice.snap`), which proves the best load exact; the LP optimum is never below
        # the best load, so a stop at the best load itself would never fire.  (Where neg + pos, the lattice's
        # float error, is not far below half a step, the snap may not reach it: the bound is still proven.)
        target = s.best_val + 0.5 * 10.0**-lat.digits
    try:
        # a bound at the floor (nothing above it) is all this step needs, or one that snaps to the best load
        # the cheap first stage only where the target is a floor above the best load: a tight target (the best load)
        # is seldom within reach of the weaker LP, which would then only delay the full one (red team 17)
        first = s.cfg.pairlp_first_cells if floor > s.best_val else None
        ub, at = pair_lp_bound(s.inst.prob, left, target=target, first_pair_max=first)
    except Exception:  # pragma: no cover - HiGHS is an optional tightening
        return False
    if ub is None:
        return False
    s.tags.append("pairlp")
    if at is not None:
        s.offer(at)
    s.bound(ub)
    return s.best_val > -math.inf and is_exact(s.best_val, s.upper)


def _pairlp_applies(i: Instance, c: PortfolioConfig) -> bool:
    return len(i.prob.columns) <= c.pairlp_max_columns and not i.helly


def _run_lp(s: _State, deadline: float) -> bool:
    if s.milp_upper is not None or deadline - time.perf_counter() <= LP_MIN_SECONDS:
        return False
    try:
        _, _, lp = milp_overlap(s.inst.prob, deadline - time.perf_counter(), relax=True)
    except Exception:  # pragma: no cover - HiGHS is an optional tightening
        return False
    if lp is not None:
        s.bound(lp)
        s.tags.append("lp")
    return s.best_val > -math.inf and is_exact(s.best_val, s.upper)


def _graph_cost(i: Instance, c: PortfolioConfig) -> float:
    return c.graph_seconds_per_word * i.graph_words


STEPS: dict[str, Step] = {
    "tensor": Step("tensor", lambda i, c: i.tensor_fits(c), lambda i, c: i.tensor_seconds(c), _run_tensor),
    "scoped": Step("scoped", _scoped_applies, lambda i, c: math.inf, _run_scoped),
    "graph": Step("graph", lambda i, c: i.prob.n <= c.graph_max_n, _graph_cost, _run_graph),
    "columns": Step("columns", lambda i, c: True, lambda i, c: math.inf, _run_columns),
    "pairlp": Step("pairlp", _pairlp_applies, lambda i, c: math.inf, _run_pairlp),
    "milp": Step("milp", lambda i, c: i.milp_fits(c), lambda i, c: math.inf, _run_milp),
    "lp": Step("lp", lambda i, c: i.milp_fits(c), lambda i, c: math.inf, _run_lp),
}


def plan(inst: Instance, cfg: PortfolioConfig) -> list[tuple[Step, float | None]]:
    """The steps to run, in order, each with a time cap in seconds (None: its share of the time left)."""
    memo: dict[str, bool] = {}

    def ok(name: str) -> bool:  # applicability, computed only when the plan asks (features are lazy)
        if name not in memo:
            memo[name] = name in cfg.steps and STEPS[name].applies(inst, cfg)
        return memo[name]

    tensor_s = STEPS["tensor"].cost(inst, cfg)
    if ok("tensor") and tensor_s <= cfg.probe_min_seconds:
        return [(STEPS["tensor"], None)]
    out: list[tuple[Step, float | None]] = []
    if ok("scoped"):
        out.append((STEPS["scoped"], None))  # few small columns, small scopes: the scoped search first
    if (
        not ok("tensor")
        and ok("milp")
        and len(inst.prob.columns) <= cfg.milp_dense_columns
        and inst.nvar <= cfg.milp_dense_vars
        and not inst.helly
        and inst.mean_scope <= cfg.milp_dense_scope
    ):
        if ok("graph"):
            out.append((STEPS["graph"], cfg.milp_dense_probe))
        out.append((STEPS["milp"], None))  # all the time left: the searches after it would not finish here
        if ok("lp"):
            out.append((STEPS["lp"], None))
        return out
    if (
        not out
        and not ok("tensor")
        and ok("milp")
        and inst.prob.n >= cfg.milp_first_min_n
        and len(inst.prob.columns) <= cfg.milp_first_max_columns
        and not inst.helly
        and inst.mean_scope <= cfg.milp_first_scope
        and inst.log_cells > cfg.column_first_log10
    ):
        if ok("graph"):
            out.append((STEPS["graph"], cfg.milp_first_probe))
        if ok("pairlp"):
            out.append((STEPS["pairlp"], None))  # its bound is the maximum on these regions: before the integer program
        out.append((STEPS["milp"], None))  # all the time left (HiGHS keeps a share): the searches get the rest
        out.extend((STEPS[n], None) for n in ("graph", "columns", "lp") if ok(n))
        return out
    if not ok("tensor") and ok("graph") and inst.log_cells > cfg.column_first_log10:
        searches = ["graph", "columns"]
    else:
        if tensor_s > cfg.probe_min_seconds and ok("graph"):
            probe = max(cfg.probe_min_seconds, cfg.probe_share * tensor_s)
            if STEPS["graph"].cost(inst, cfg) <= cfg.probe_share * probe:
                out.append((STEPS["graph"], probe))
        searches = ["tensor"] if ok("tensor") else ["columns", "graph"]
    if not out and searches == ["tensor"]:
        return [(STEPS["tensor"], None)]  # no probe worth trying: the bounded tensor alone (exact)
    if cfg.prefer in searches:
        searches.remove(cfg.prefer)
        searches.insert(0, cfg.prefer)
    if searches[0] == "columns" and ok("milp") and not inst.helly and inst.nnz <= cfg.milp_early_nnz:
        out.append((STEPS["milp"], None))  # few small columns (dense domain), non-Helly: the integer program early
    out.extend((STEPS[n], None) for n in searches if ok(n))
    # the pairwise LP is in the tail only of plans without the searches (``method="pairlp"``): it was measured in the
    # drill-down plan only (in every tail, 10,000 registered looked slower, p50 251 ms, but the code before was as
    # slow at the same time, 245 ms: benchmarks/results/bench_session_issue28_s15_NOTES.md)
    tail = ("milp", "lp") if ok("columns") else ("pairlp", "milp", "lp")
    for n in tail:
        if ok(n) and all(s.name != n for s, _ in out):
            out.append((STEPS[n], None))
    return out


def run_portfolio(
    inst: Instance,
    deadline: float,
    rnd: ProblemRounding,
    cfg: PortfolioConfig,
    grace: float,
    floor: float = -math.inf,
    target: float = math.inf,
    terms: np.ndarray | None = None,
    resume: dict[str, Any] | None = None,
    soft_floor: float = -math.inf,
) -> tuple[dict[str, int], float, bool, str]:
    """Exact γ of ``inst`` within ``deadline``: (atoms of the best witness, proven upper bound, exact, tag).

    ``grace``: seconds a tensor step may run past the deadline (skipped when its estimate exceeds the time left
    plus ``grace``).  ``floor``: only loads above it matter (the searches prune against it); ``target``: a
    proven bound at which a search may stop.  ``resume``: the caller's state for this problem (see
    :func:`~.scoped.scoped_search`); a paused scoped search there is resumed with all the time (it is closest to
    finishing: the other steps would start from scratch).  ``soft_floor`` (≤ ``floor``): the pairwise LP stops at it
    rather than at the floor (a bound there is worth its time: see :func:`~.maxoverlap.solve_overlap`).
    """
    steps = plan(inst, cfg)
    if [s.name for s, _ in steps] == ["tensor"]:
        value, named = tensor_max(inst.prob)
        return named, rnd.up(value), True, "tensor"
    s = _State(inst, rnd, floor, target, terms=terms, resume=resume, cfg=cfg, soft_floor=min(soft_floor, floor))
    resuming = resume is not None and resume.get("search") is not None
    s.offer(_first_witness(inst.prob))
    exact = False
    for k, (step, cap) in enumerate(steps):
        now = time.perf_counter()
        left = deadline - now
        if step.name == "tensor":
            # bounded and exact: it runs when its estimate fits in the time left plus ``grace`` (time already
            # overrun by uninterruptible work before it is not held against it, as when it is the whole plan)
            if step.cost(inst, cfg) > max(left, 0.0) + grace:
                continue
        elif left <= 0:
            continue
        rest = [t.name for t, _ in steps[k + 1 :]]
        if cap is not None:
            share = min(cap, left * cfg.first_share)
        elif not rest or (step.name in ("milp", "lp") and all(n == "lp" for n in rest)):
            share = left  # HiGHS keeps a share of what it gets for itself; the LP only runs without a MILP bound
        elif all(n in ("milp", "lp") for n in rest):
            share = left * cfg.milp_reserve_from
        else:
            share = left * cfg.first_share
        before = [c for t, c in steps[:k] if t.name != "pairlp"]
        if step.name == "milp" and before and before[-1] is not None and "graph" in rest:
            share = left  # the drill-down plan (probe, HiGHS, searches): HiGHS stops early enough for the rest
        if step.name == "pairlp" and rest:
            share = left * cfg.pairlp_share
        if step.name == "scoped" and rest:
            share = left if resuming else left * cfg.scoped_share
        elif step.name == "graph" and cap is None and "columns" in rest:
            share = left * cfg.graph_first_share  # graph first: sparse query graphs, where it is what finishes
        s.probing = cap is not None
        if step.run(s, now + share):
            exact = True
            break
        if s.upper <= floor:
            break  # proven: nothing above the floor (e.g. HiGHS's dual bound); the searches after it would not know
    if s.best_val > -math.inf and is_exact(s.best_val, s.upper):
        exact = True
    if exact and s.best_val < floor:
        exact = False  # proven: nothing above the floor (upper is the floor, rounded up); the max itself unknown
    return s.best_atoms, s.upper, exact, "+".join(s.tags) if s.tags else "none"


def _first_witness(prob: Problem) -> dict[str, int]:
    """A cheap first witness: a row inside the heaviest box, per column its atom of largest covering weight."""
    q0 = int(np.argmax(prob.weights))
    first: dict[str, int] = {}
    for c in prob.columns:
        if c.M is not None:
            inside = c.M[q0]
        else:
            inside = np.zeros(c.a, dtype=bool)
            rs, re = c.runs()
            for a0, b0 in zip(rs[q0].tolist(), re[q0].tolist()):
                inside[a0:b0] = True
        first[c.name] = int(np.argmax(np.where(inside, c.colsum(prob.weights) + 1.0, 0.0)))
    return first


def witness_row(store: BoxStore, prob: Problem, atoms: Mapping[str, int]) -> dict[str, Any]:
    """The concrete row of the atoms ``atoms`` (one value per column of ``store``; defaults elsewhere)."""
    row: dict[str, Any] = {}
    for name in store.cols:
        row[name] = prob.defaults.get(name)
    for c in prob.columns:
        v = atoms.get(c.name, 0)
        row[c.name] = c.values[v]
    return {k: v for k, v in row.items() if v is not None or k in prob.defaults}


def _load(store: BoxStore, ids: np.ndarray, row: Mapping[str, Any]) -> float:
    mask = store.contains_mask(row)
    return sum_down(store.weights[ids[mask[ids]]].tolist())
