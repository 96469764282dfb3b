"""The maximum-overlap engine: incremental bounds on γ_w for the accountant.

docs/design.md §2: a query's coverage is a box, its weight an additive cost (ε, ρ or μ²); the session's loss is
``γ_w = max_x Σ_{q covers x} w_q``.  :class:`OverlapEngine` keeps the registered (box, weight) nodes and four
bounds, ``γ_w ≤ ω_w ≤ χ_w ≤ Σw``:

========================  =====================================================================================
bound                      how it is maintained
========================  =====================================================================================
sequential ``Σw``          ``math.fsum`` of the weights (empty boxes included: it is what sequential composition
                           would charge)
chromatic ``χ_w``          a proper colouring of the query graph; a new vertex takes its cheapest free colour
                           (:func:`~dpmagic.overlap.graph.cheapest_color`, O(t) per add); whenever the graph has
                           doubled since the last full recolouring (and t ≤ ``RECOLOR_MAX``) weighted DSatur and a
                           largest-weight-first greedy colouring are run and the best of the three kept
clique ``ω_w``             ``ω_new = max(ω_old, w_q + ω(N(q)))``.  When q and all its neighbours are *Helly boxes*
                           (each constraint a single interval or a single category), a clique in N(q) ∪ {q} has a
                           common point inside q's box, so ``ω(N(q)) = max_load_over(q's box)`` — no clique search
                           at all (census-style workloads).  Otherwise an exact branch and bound on N(q)
                           (:func:`~dpmagic.overlap.clique.max_weight_clique`) with the time limit; a timed-out
                           search is reported ``clique_exact=False`` and only its proven *upper* bound is used
exact ``γ_w``              ``γ_new = max(γ_old, w_q + max_load_over(q's box))`` (only q's neighbours restricted to
                           its box matter), solved by :func:`~dpmagic.overlap.maxoverlap.solve_overlap`: a
                           compressed-domain load tensor when the product of atom counts is small (one ordered
                           axis as a difference array), otherwise a portfolio within the wall-clock limit: on
                           few small columns with small scopes (dense analyst sessions, issue 28) first the
                           scoped branch and bound (:mod:`~dpmagic.overlap.scoped`), then
                           branch and bound over columns (column-sum bounds, tensor leaves) and branch and
                           bound over the query graph keeping the running intersection of the chosen boxes
                           (colouring bounds; :mod:`~dpmagic.overlap.gsearch`), ordered by the atom product,
                           then HiGHS (MILP or LP relaxation) for a proven bound on a timeout
========================  =====================================================================================

Admission (issue 11) is one computation: :meth:`OverlapEngine.admit` returns an :class:`Admission` (the
bounds after the add, plus the state to install); :meth:`OverlapEngine.commit` installs it without solving
again, or recomputes it when the engine changed in between (``state``: identity and a change counter).
``add = commit(admit(...))`` and ``preview = admit(...).bounds``.  With ``charged`` set (the accountant's
bound), an admission computes what that bound needs first: ``sequential`` no search at all (γ keeps its
old witness as a lower bound, its upper is the colouring / Σw); ``chromatic`` the colour and γ within
``display_time_limit``; ``exact`` γ exactly, ω display-only (its lower bound is the witness's members, its
upper χ).  :meth:`bounds` refines non-exact display-only bounds from scratch within ``display_time_limit``
each (once per state).  Before any search an admission tries cheap certificates: no neighbour (R = 0); the
exact γ witness inside the box (R = γ, exact); a *pool* of heavy rows (witnesses seen, their loads kept as
lower bounds), each moved into the box column by column — a row reaching γ_old makes R exact, otherwise
its load seeds the search's floor.  When ω is not derived from R, the search itself only needs R above
``γ_old.lower − w`` (``solve_overlap(floor=...)``) and stops on reaching ``γ_old`` (``target``).

Hard instances degrade gracefully (issue 28).  Under a ``charged`` bound the region search first gets
``quick_time_limit``; an inexact result gets up to ``hard_time_limit`` in all only when the interval after the
add would be wider than ``charge_rel_slack`` (relative), and up to ``near_time_limit`` (0.9 s, so no admission
waits for ``time_limit``) only when the admission is near the budget (``admit(budget=...)``: the upper end above
it, the lower end not).  On by default for charged engines (``quick_time_limit=None`` restores one search with the
whole ``time_limit``).  With ``charge_rel_slack`` 0 (the default) every inexact quick result would search on, so
the first search gets ``hard_time_limit`` at once (a second search starts from scratch: measured on the sparse
generator, the quick try cost +40 ms on every admission that needed more, and its restart ran out of time on
admissions the graph search solves in 0.4–0.5 s).  Every node keeps its *term* (``_term_up``: a proven bound of
``w_k`` + the max load over ``box_k`` before k); a row's load is at most the term of its last covering node, so
a region whose neighbours' terms are all at most the floor needs no search (:meth:`OverlapEngine._term_bound`),
and the graph and scoped searches cut branches meeting no node with a term above their best.  γ's interval is kept as
*pending terms* (:class:`_Term`): ``γ = max over admissions k of (w_k + max load over box_k before k)``
(the last node covering a row of maximum load is some admitted k; a bulk load is one global term), so
``γ.upper = max(exact part, pending terms)``.  A term drops out when the witness's load passes it (later
admissions recover exactness without solving again), and each commit spends up to ``retighten_seconds``
re-solving the largest term's unchanging historical problem (:meth:`retighten`).  A timed-out region search is
kept with its term (the encoded problem and the paused scoped search, :func:`~.maxoverlap.solve_overlap`
``resume``; at most ``RESUME_MAX`` terms hold one): the admission's second search and every later re-tightening
continue it where it stopped (before session 11 each try re-encoded the problem and restarted the search, so a
term needing more than one commit's ``retighten_seconds`` was never closed and γ stayed inexact for the rest of
the session).  Where the machine has a second core, the largest admission term goes to a worker process instead
(:mod:`.background`, session 14: the engine's ``background``; the accountant's engines use the process's shared one):
it solves the term with 0.5–8 s per try, keeps the paused search between tries, and its result is applied at the
next admit, commit or :meth:`OverlapEngine.bounds` — or between cells by the accountant's pump thread
(:func:`~.background.start_pump`, :meth:`OverlapEngine.background_step`), which keeps the worker busy while the
kernel is idle; meanwhile the kernel does not re-tighten (a bulk load's global term stays in the kernel, which
holds its paused search).

Bulk loading (:meth:`OverlapEngine.extend`, :meth:`OverlapEngine.from_boxes`) encodes all boxes at once and
defers the bounds: γ is then solved once from scratch, the colouring is DSatur on the whole graph (t ≤
``DSATUR_MAX``) or greedy in insertion order in vectorised blocks, and ω is γ for all-Helly workloads or a
branch and bound on the whole graph.

Size: this module is one class (≈ 700 lines) because its parts share one state that must stay consistent
— the colouring, γ with its witness, ω, the row pool and the state counter that validates admissions; the
algorithms themselves live in :mod:`.maxoverlap`, :mod:`.gsearch`, :mod:`.clique` and :mod:`.graph`.

Reported numbers keep ``overlap.lower ≤ γ ≤ overlap.upper ≤ clique ≤ chromatic ≤ sequential``:
``overlap.upper`` is the minimum of every proven bound, a non-exact clique is replaced by its proven upper bound.
Incremental γ and ω equal a from-scratch computation (same values; the witness may differ on ties); the
colouring depends on the history (any proper colouring is a valid bound).

Measured on this 2-core machine (shared, so ±50%; ``python benchmarks/bench_overlap.py --mode full``,
2026-11-21; box construction excluded, encoding included; see docs/benchmarks.md):

* census workload (docs/design.md §4), exact γ from scratch (load tensor over Income atoms × 280 categorical
  cells): t = 2,000 ≈ 0.02–0.03 s, t = 20,000 ≈ 0.2–0.3 s.  All four bounds: t = 2,000 ≈ 0.12 s,
  t = 20,000 ≈ 1.1 s (the colouring needs the whole graph: block-wise bit-mask overlap rows + greedy;
  ω = γ by Helly);
* census admission with 10,000 registered (``preview`` + ``add`` of one query): median ≈ 2 ms, p99 ≈ 6 ms;
* uniform synthetic (Smith et al. 2022 §7.1), time limit 10 s: 10–12 columns of 2–5 values, γ exact up to t = 2,000
  in ≤ 0.65 s (graph-search probe, then the load tensor or the column search); 30 / 100 columns (sparse
  query graphs, graph search of :mod:`~dpmagic.overlap.gsearch`): t = 100 ≈ 5–13 ms, m = 30, t = 500 ≈
  0.2–2.4 s, m = 100, t = 1,000 ≈ 0.7 s; paper-style 1,000 columns of 10–1,000 values: t = 50 ≈ 0.2 s,
  t = 200 ≈ 0.65 s; all exact.  The exact clique search is the weak spot there (t ≥ 500 times out; ω is then
  reported as its proven upper bound, ≤ χ).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Literal, TypeVar

import numpy as np

from dpmagic.domain.schema import CategoricalColumn, Schema
from dpmagic.domain.sets import Box, CategorySet
from dpmagic.overlap.background import BackgroundSolver, RegionTask, TopTask
from dpmagic.overlap.clique import max_weight_clique
from dpmagic.overlap.encoding import BoxStore, is_helly_box
from dpmagic.overlap.graph import (
    CSRGraph,
    adjacency_graph,
    cheapest_color,
    coloring_value,
    greedy_coloring,
    weighted_coloring_bound,
)
from dpmagic.overlap.maxoverlap import solve_overlap
from dpmagic.overlap.portfolio import PortfolioConfig
from dpmagic.overlap.result import OverlapResult
from dpmagic.overlap.rounding import add_up, is_exact, sum_down, sum_up
from dpmagic.overlap.scoped import scoped_state_nbytes
from dpmagic.overlap.topset import TOP_CAP, TopCells, TopSet, enumerate_top

__all__ = ["OverlapEngine", "Admission", "Bounds", "ChargeKind", "DSATUR_MAX"]

ChargeKind = Literal["exact", "clique", "chromatic", "sequential"]

#: largest graph recoloured from scratch with DSatur after a bulk load
DSATUR_MAX = 6000
#: largest graph recoloured during ``add`` (a recolouring at t = 2,048 costs ≈ 0.1 s once; 4,096 ≈ 0.4 s)
RECOLOR_MAX = 2048
_ENGINE_TOKENS = itertools.count(1)
#: largest graph whose display-only clique is searched from scratch by ``bounds()`` (dense t × t adjacency)
DISPLAY_CLIQUE_MAX = 2000
#: heavy rows kept (with a lower bound of their load) as cheap certificates for admissions
POOL_SIZE = 32
#: default ``hard_time_limit`` (seconds): the most an admission's region search gets in all unless it is near the
#: budget (with 0.6 s and a slack of 0.004 the dense variants' γ went inexact from query 165–266 on, under load
#: 7–10 on 2 cores: bench_session_issue28_s9b.md, first run)
HARD_TIME_LIMIT = 0.8
#: default ``quick_time_limit`` (seconds): what a charged admission's region search gets first (graceful
#: degradation, issue 28; on by default since session 9b).  An inexact result searches on only when its slack
#: could matter (wider than ``charge_rel_slack``: up to ``hard_time_limit`` in all; straddling the budget: up to
#: ``near_time_limit``), and later commits re-tighten the pending terms (:meth:`OverlapEngine.retighten`)
QUICK_TIME_LIMIT = 0.05
#: default ``near_time_limit`` (seconds): the most an admission's region search gets when its proven interval
#: straddles the budget (the charge decides admission).  Below 1 s so that no admission waits for ``time_limit``;
#: still straddling after it, the proven upper end is charged (and the query refused if it does not fit)
NEAR_TIME_LIMIT = 0.9
#: default ``charge_rel_slack``: after the quick search, a proven interval with upper ≤ (1 + this)·lower is kept
#: (charged at its upper) instead of searching on, unless the admission is near the budget.  0: every inexact
#: quick result searches on (up to ``hard_time_limit``).  Measured (bench_session_issue28_s9b.md, first run):
#: 0.004 left γ inexact after 32% of the sparse generator's admissions, and an inexact γ disables the
#: witness-in-box certificate of every later admission (each then searches): slack accepted once costs later
CHARGE_REL_SLACK = 0.0
#: default ``retighten_seconds``: re-tightening of pending terms after each commit (seconds)
RETIGHTEN_SECONDS = 0.015
#: γ's interval is *degraded* when its upper end exceeds its lower end by more than this (relative): an admission
#: then searches only for region loads that would raise the upper end (not for a better witness inside the
#: interval), unless it is near the budget.  The dense sessions' intervals stay within 0.5% (the issue's target),
#: so this only acts after a bulk load or a hard instance; measured: bench_session_issue28_s11_engine_prefilled.md
DEGRADED_REL_GAP = 0.01
#: default ``degraded_time_limit`` (seconds): the most a degraded admission's region search gets (not near the budget):
#: the 10,000-registered target is p99 ≤ 250 ms; with the raised floor most such searches end in 0.04–0.4 s
#: (measured on ``dense_prefilled``, session 11)
DEGRADED_TIME_LIMIT = 0.2
#: once an admission's region search has used its whole cap (``hard_time_limit``) without closing γ, the later
#: admissions are degraded too (even with γ's interval within ``DEGRADED_REL_GAP``) until γ is exact again: without
#: it a hard session with a tight interval made every later admission search to the cap (issue 28: "do not make every
#: later cell pay the cap")
DEGRADE_AFTER_CAP = True
#: pending terms that keep their paused scoped search for :meth:`OverlapEngine.retighten` (the largest ones)
RESUME_MAX = 4
#: the memory those paused searches may hold in all (bytes)
RESUME_MAX_BYTES = 64 * 2**20
#: the first time limit (seconds) of a pending term solved in the background worker (:mod:`.background`), doubled
#: with each try of the term (its paused search continues there), up to ``BACKGROUND_MAX_SECONDS``
BACKGROUND_SECONDS = 0.5
#: the most one background try gets (the worker solves one term at a time: a long try delays the others)
BACKGROUND_MAX_SECONDS = 8.0
#: tries of one term the worker gets (0.5 + 1 + 2 + 4 + 8 × 4 ≈ 40 s in all): a term it cannot close does not keep the
#: second core busy for the rest of the kernel's life (red team 14b); the kernel's ``retighten_seconds`` take it over
BACKGROUND_MAX_TRIES = 8
#: the worker solves γ of every node registered so far from scratch (a *snapshot*, :meth:`OverlapEngine._bg_submit`)
#: instead of one term while at least ``SNAPSHOT_MIN_TERMS`` terms are pending (or the largest one was tried once),
#: up to this many nodes (session 18: on the drill-down sessions the snapshot took 0.6 s at 400 nodes, 1.8 s at 650,
#: 3.4 s at 800 and 8.2 s at 1,000, exact each time)
SNAPSHOT_MAX_NODES = 3000
SNAPSHOT_MIN_TERMS = 2
#: the time limit of one snapshot (a timed-out one that bounds no term backs off: 2, 4, 8, ... submissions skip it)
SNAPSHOT_SECONDS = 8.0
#: top sets (:mod:`.topset`): computed by the worker when it has no pending term to re-tighten, for engines of at
#: least ``TOP_MIN_NODES`` nodes charging γ, again after every ``TOP_REFRESH`` admissions, with cells above
#: ``(1 − TOP_REL) · γ.lower`` (at most ``TOP_CAP``) within ``TOP_SECONDS``; a set more than ``TOP_MAX_GAP`` nodes
#: behind the engine is not installed (every later node would be added to it).  3,000 (= ``SNAPSHOT_MAX_NODES``; 300
#: in session 18): below it the scoped search answers admissions about as fast, and keeping the set up to date cost
#: more than it saved — measured back to back (session 19, 2-core VM): held-out dense p50 / p99 14.0 / 188 ms with
#: 300, 12.2 / 157 ms with 3,000; drill-down 7.0 / 149 → 5.8 / 143 ms, both exact; drill-down-wide 1.068 / 1.073
#: (benchmarks/results/bench_session_issue28_s19_NOTES.md, change 6).
#: Smaller engines still get top sets standing in for snapshots (``TOP_AS_SNAPSHOT``)
TOP_MIN_NODES = 3000
TOP_REFRESH = 16
TOP_REL = 0.15
TOP_SECONDS = 8.0
TOP_MAX_GAP = 1024
#: the later nodes' maximum overlap within a box (:meth:`OverlapEngine._top_bound`): for at most this many, searched
#: for at most this long
TOP_LATER_MAX = 256
TOP_LATER_SECONDS = 0.02
TOP_LATER_MARGIN = 1e-9
#: a bulk load's top set, in the kernel (:meth:`OverlapEngine._bulk_top`)
TOP_BULK_MIN_NODES = 2000
TOP_BULK_SECONDS = 4.0
#: a due snapshot is a top task (:meth:`OverlapEngine._bg_top`) where the scoped enumeration applies: measured on the
#: drill-down sessions (session 19, 800 queries of drilldown/seed11) the enumeration above 0.99·γ took 0.29 s
#: where the search from scratch took 0.28 s (scoped) and 1.08 s (before the scoped search applied to 118 atoms)
TOP_AS_SNAPSHOT = True
#: pooled rows moved into a new box (column by column) before any search
PROJECT_ROWS = 4
#: rows of the overlap matrix computed at once when colouring in bulk
_BLOCK = 512


_F = TypeVar("_F", bound=Callable[..., Any])
_BLAS: Any = None


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """The BLAS thread pools limited to one thread inside (threadpoolctl; nothing without it).

    An engine with a background worker runs its searches on one core while the worker has the other: numpy's default
    pool of two OpenBLAS threads spins against the worker.  Measured (2-core VM, session 18, the 10,000-query dense
    prefill, 300 more admissions): p50 221 → 16 ms and γ exact throughout instead of inexact from the first
    admission, the worker's top sets 8.4 → 2.0 s with the kernel busy (the worker's own pool: ``WORKER_THREADS_ENV``
    in :mod:`.background`).  Cost: about 11 µs per call."""
    global _BLAS
    if _BLAS is None:
        try:
            from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

            _BLAS = ThreadpoolController()
        except Exception:  # noqa: BLE001 - no threadpoolctl (or no pool it knows): the default pools
            _BLAS = False
    if _BLAS is False:
        yield
        return
    with _BLAS.limit(limits=1, user_api="blas"):
        yield


def _kernel_threads(method: _F) -> _F:
    """Run ``method`` with one BLAS thread when the engine has a background worker (:func:`_one_blas_thread`)."""

    @functools.wraps(method)
    def wrapper(self: OverlapEngine, *args: Any, **kwargs: Any) -> Any:
        if self.background is None:
            return method(self, *args, **kwargs)
        with _one_blas_thread():
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


@dataclass(frozen=True)
class Bounds:
    """The four bounds ``γ_w ≤ ω_w ≤ χ_w ≤ Σw`` as reported (see the module docstring).

    ``clique`` is the exact ω_w when ``clique_exact``, else a proven upper bound of it (a clique found by a
    timed-out search is only ``clique_lower``).
    """

    sequential: float
    chromatic: float
    clique: float
    clique_exact: bool
    overlap: OverlapResult
    clique_lower: float = 0.0

    def charge(self, kind: ChargeKind) -> tuple[float, str]:
        """The value to charge for accounting mode ``kind`` and which bound it really is.

        ``'exact'`` → ``overlap.upper`` (labelled ``'exact'`` when proven exact, else ``'overlap-upper'``);
        ``'clique'`` → the exact clique, or the best proven upper bound when the clique search timed out;
        ``'chromatic'``, ``'sequential'`` → those bounds.  Every returned value is ≥ the true γ_w.
        """
        if kind == "exact":
            return self.overlap.upper, "exact" if self.overlap.exact else "overlap-upper"
        if kind == "clique":
            if self.clique_exact:
                return self.clique, "clique"
            return self.overlap.upper, "overlap-upper (clique not exact)"
        if kind == "chromatic":
            return self.chromatic, "chromatic"
        if kind == "sequential":
            return self.sequential, "sequential"
        raise ValueError(f"unknown charge kind {kind!r}")


def _omega(lower: float, upper: float, exact: bool, members: tuple[int, ...]) -> OverlapResult:
    """ω's interval (the one result type; no witness row)."""
    return OverlapResult(lower, upper, exact, None, members, "clique")


@dataclass(frozen=True)
class _Term:
    """One pending term of γ's upper bound (issue 28): ``weight + max load over box`` of the nodes registered
    before ``n`` (``box`` None: the maximum over the whole domain, weight 0) is at most ``upper``.

    γ = max over these terms' true values and the exact ones (each ≤ γ.lower): the last node covering a row
    of maximum load is either bulk-loaded (the global term bounds it) or admitted with a region search (its
    term bounds it), so ``γ.upper = max(γ.lower, terms)``.  A term ≤ γ.lower is dropped; a term is
    re-tightened by solving its (historical, unchanging) problem again with more time.
    """

    n: int
    box: Box | None
    weight: float
    upper: float
    tries: int = 0
    #: the encoded problem and the paused scoped search of this term's (unchanging) problem, when its last search
    #: timed out (:func:`~.maxoverlap.solve_overlap` ``resume``): re-tightening continues it
    resume: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    #: a global term from the worker's snapshot (``box`` None): only a later snapshot re-solves it (the kernel never
    #: re-tightens the whole problem; a bulk load's global term is the kernel's)
    snapshot: bool = False


@dataclass
class _Admission:
    box: Box
    weight: float
    qid: int
    empty: bool
    neighbors: np.ndarray
    region: OverlapResult | None
    color: int
    clique: OverlapResult | None
    #: the region search's resumable state (see :class:`_Term`)
    resume: dict[str, Any] | None = None
    #: the region search used its whole (not degraded, not near-budget) cap and is still inexact
    capped: bool = False


@dataclass(frozen=True, eq=False)
class Admission:
    """One admission computed by :meth:`OverlapEngine.admit`: the bounds after adding ``(box, weight)`` and the
    engine state that :meth:`OverlapEngine.commit` installs without solving anything again.

    ``state`` is the engine's identity and state counter when it was computed; committing it to an engine that changed
    since (another add, a bulk load, a recolouring) recomputes it instead.
    """

    box: Box
    weight: float
    bounds: Bounds
    neighbors: np.ndarray
    state: tuple[int, int]
    charged: ChargeKind | None
    _color: int
    _cm: np.ndarray
    _gamma: OverlapResult
    _clique: OverlapResult
    _rows: tuple[tuple[dict[str, Any], float], ...] = ()
    _pending: tuple[float, tuple[_Term, ...]] = (0.0, ())
    _term: float = math.inf
    _capped: bool = False


class OverlapEngine:
    """Registered (box, weight) nodes with incremental bounds on the weighted maximum overlap.

    ``time_limit`` (seconds) bounds each exact computation; one admission (``preview`` or ``add``) keeps it as
    a whole: the clique search gets only what the γ sub-problem left (capped by ``clique_time_limit`` if
    given); beyond it the results are intervals with ``exact=False``.  Once
    ω is only bounded (a search timed out), later additions bound ``ω(N(q))`` by a greedy colouring
    instead of searching again, so one hard instance does not make every admission wait for the limit.

    Graceful degradation (issue 28): an admission's region search first gets ``quick_time_limit``; a result
    that is not exact then gets up to ``hard_time_limit`` in all only when its interval is wider than
    ``charge_rel_slack`` or the admission is near the budget (``admit(budget=...)``: the upper end exceeds it
    and the lower end does not — then up to ``near_time_limit``).  The proven interval of γ is kept as pending
    terms (:class:`_Term`): they drop out when γ's lower bound (a witness) passes them, and each commit spends
    up to ``retighten_seconds`` re-solving the largest one, so later admissions recover exactness.  While γ's
    interval is wider than ``DEGRADED_REL_GAP``, or after an admission's search used its whole cap without closing
    γ (:data:`DEGRADE_AFTER_CAP`), admissions not near the budget are *degraded*: they search only for region loads
    that would raise the upper end, for at most ``degraded_time_limit``, until γ is exact again.
    """

    def __init__(
        self,
        schema: Schema,
        *,
        time_limit: float = 10.0,
        recolor: bool = True,
        clique_time_limit: float | None = None,
        charged: ChargeKind | None = None,
        display_time_limit: float = 0.05,
        hard_time_limit: float = HARD_TIME_LIMIT,
        solver: PortfolioConfig | None = None,
        quick_time_limit: float | None = QUICK_TIME_LIMIT,
        near_time_limit: float = NEAR_TIME_LIMIT,
        charge_rel_slack: float = CHARGE_REL_SLACK,
        retighten_seconds: float = RETIGHTEN_SECONDS,
        degraded_time_limit: float = DEGRADED_TIME_LIMIT,
        background: BackgroundSolver | None = None,
    ) -> None:
        self.schema = schema
        #: the configuration of every γ computation's portfolio (:class:`~.portfolio.PortfolioConfig`)
        self.solver = solver if solver is not None else PortfolioConfig()
        #: the bound the caller charges (None: keep every bound exact).  Admissions compute what it needs
        #: first; display-only bounds get at most ``display_time_limit`` seconds (``sequential``: no search at
        #: all), so they never delay an answer (their reported values stay proven bounds, maybe intervals).
        self.charged: ChargeKind | None = charged
        self.display_time_limit = float(display_time_limit)
        #: once γ is only bounded (a from-scratch or region search timed out: a hard instance), an admission's
        #: region search gets at most this long, so one hard instance does not make every admission wait for
        #: ``time_limit`` (γ_new stays a proven interval; the colouring usually bounds it more tightly anyway)
        self.hard_time_limit = float(hard_time_limit)
        #: the first search of an admission's region; see the class docstring (graceful degradation)
        #: (None: one search with the whole ``time_limit``, the behaviour before issue 28)
        self.quick_time_limit = None if quick_time_limit is None else float(quick_time_limit)
        #: the cap of an admission's region search when its interval straddles the budget (``admit(budget=...)``)
        self.near_time_limit = float(near_time_limit)
        self.charge_rel_slack = float(charge_rel_slack)
        self.retighten_seconds = float(retighten_seconds)
        #: the cap of a region search while γ's interval is degraded (wider than ``DEGRADED_REL_GAP``) and the
        #: admission is not near the budget (only region loads raising the upper end are searched for then)
        self.degraded_time_limit = float(degraded_time_limit)
        #: pending terms of γ's upper bound (see :class:`_Term`), and a proven bound of every other term
        self._pending: tuple[_Term, ...] = ()
        self._exact_up = 0.0
        #: the worker process that re-tightens pending terms on a second core (:mod:`.background`; None: the kernel
        #: re-tightens them itself, ``retighten_seconds`` per commit), this engine's task in it (id, term key) and
        #: the term keys whose problem the worker was sent
        self.background = background
        self._bg_task: tuple[int, tuple[Any, ...]] | None = None
        self._bg_sent: set[tuple[Any, ...]] = set()
        #: snapshots (:data:`SNAPSHOT_MAX_NODES`): the node count of the last one sent, and its back-off (submissions
        #: still to skip, and the failures in a row that set it)
        self._snap_n = 0
        self._snap_skip = 0
        self._snap_fails = 0
        #: the top set (:mod:`.topset`) admissions check before a region search; the node count the worker holds for
        #: the next top task (:class:`~.background.TopTask`), that of the last one sent, and the back-off after one
        #: that found nothing (submissions still to skip, failures in a row)
        self._top: TopSet | None = None
        self._top_sent_n = 0
        self._top_asked_n = 0
        self._top_skip = 0
        self._top_snap = False  # the top task in flight stands in for a snapshot
        self._top_fails = 0
        #: an admission's region search ran to its cap and γ stayed inexact: later admissions are degraded (as
        #: with a wide interval) until γ is exact again (:data:`DEGRADE_AFTER_CAP`; cleared by the ``_gamma`` setter)
        self._stalled = False
        self._version = 0
        self._refined: tuple[int, int] | None = None
        self._wsum, self._wsum_n = Fraction(0), 0  # exact Σw of nodes [0, _wsum_n)
        #: [row, lower bound of its load] of heavy rows seen (witnesses), heaviest first
        self._pool: list[list[Any]] = []
        self._token = next(_ENGINE_TOKENS)
        self.time_limit = float(time_limit)
        self.clique_time_limit = self.time_limit if clique_time_limit is None else float(clique_time_limit)
        self.recolor = recolor
        self._store = BoxStore(schema)
        self._colors = np.zeros(0, dtype=np.int64)
        self._cm = np.zeros(0)
        self._colored = 0  # nodes [0, _colored) have a colour (or -1 for empty boxes)
        self._last_recolor = 0
        #: per node k a proven upper bound of ``w_k + max over box_k of the load of the nodes before k`` (its
        #: *term*; ``inf`` when unknown): a row's load is at most the term of the last node covering it
        #: (:meth:`_hot_split`)
        self._term_up = np.zeros(0)
        self._gamma_value: OverlapResult | None = _EMPTY_RESULT
        self._clique: OverlapResult | None = _omega(0.0, 0.0, True, ())

    # -- construction -------------------------------------------------------------------------------------
    @classmethod
    def from_boxes(
        cls,
        schema: Schema,
        boxes: Sequence[Box],
        weights: Sequence[float] | np.ndarray | None = None,
        *,
        time_limit: float = 10.0,
        recolor: bool = True,
    ) -> OverlapEngine:
        """An engine holding ``boxes`` (weights default to 1), loaded in bulk (see :meth:`extend`)."""
        eng = cls(schema, time_limit=time_limit, recolor=recolor)
        eng.extend(boxes, np.ones(len(boxes)) if weights is None else weights)
        return eng

    def extend(self, boxes: Sequence[Box], weights: Sequence[float] | np.ndarray) -> np.ndarray:
        """Register many nodes at once; bounds are recomputed lazily on the next request."""
        ids = self._store.extend(list(boxes), weights)
        if len(ids):
            self._ensure_term_cap()
            self._term_up[ids] = math.inf
            self._version += 1
            self._pool = []
            self._gamma = None
            self._clique = None
            self._pending, self._exact_up = (), 0.0
            self._top = None  # (a top set in the worker meanwhile is installed only within TOP_MAX_GAP nodes)
        return ids

    # -- the container ------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._store.n

    @property
    def boxes(self) -> list[Box]:
        return list(self._store.boxes)

    @property
    def weights(self) -> np.ndarray:
        return self._store.weights[: self._store.n].copy()

    @property
    def store(self) -> BoxStore:
        """The column-wise encoding (read-only use)."""
        return self._store

    def neighbors(self, box: Box) -> np.ndarray:
        """Ids of the registered nodes whose boxes overlap ``box``.  ``O(t·m)`` vectorised."""
        return np.flatnonzero(self._store.overlap_mask(box))

    def load_at(self, row: Mapping[str, Any]) -> float:
        """Exact load (``math.fsum``) of a concrete row: the weight of the nodes whose boxes contain it."""
        m = self._store.contains_mask(row)
        return math.fsum(self._store.weights[: self._store.n][m].tolist())

    def coloring(self) -> np.ndarray:
        """Colour index per node (``-1`` for empty boxes, which are not in the graph)."""
        self._sync_coloring()
        return self._colors[: self._store.n].copy()

    def max_clique_members(self) -> tuple[int, ...]:
        """Members of the heaviest clique found (the exact ω_w when ``bounds().clique_exact``)."""
        return self._current_clique().members

    def overlap_members(self) -> tuple[int, ...]:
        """Nodes covering the γ witness row."""
        return self._current_gamma().members

    # -- queries ------------------------------------------------------------------------------------------
    @_kernel_threads
    def max_load_over(self, box: Box, *, time_limit: float | None = None) -> OverlapResult:
        """``max over x in box`` of the current load, with ``[lower, upper]``, exactness and a witness in the box.

        Only the neighbours of ``box`` matter, each restricted to it (docs/design.md §2, incremental admission).
        ``time_limit`` (default the engine's ``time_limit``) caps the search; the upper end stays proven.
        """
        hint = self._gamma.upper if self._gamma is not None else math.inf
        limit = self.time_limit if time_limit is None else min(float(time_limit), self.time_limit)
        return solve_overlap(self._store, region=box, time_limit=limit, upper_hint=hint, config=self.solver)

    @_kernel_threads
    def overlap(self) -> OverlapResult:
        """γ_w alone (cheaper than :meth:`bounds` after a bulk load: no colouring or clique needed)."""
        return self._current_gamma()

    @_kernel_threads
    def bounds(self, *, refine: bool = True) -> Bounds:
        """All four bounds, consistently ordered (see the module docstring).

        When a ``charged`` bound lets the display-only bounds lag behind (intervals), they are refined here,
        from scratch, within ``display_time_limit`` each (once per engine state; ω only for t ≤
        ``DISPLAY_CLIQUE_MAX``): for display, never on an admission's path.  The refinement tightens γ's interval
        (and the pending and node terms) in place; ``refine=False`` reads the bounds as they are, changing nothing
        (what a refusal's message computes: a refused query changes nothing, red team 12).
        """
        self._sync_coloring()
        if refine and self._bg_task is not None:
            self._bg_submit()  # a result the worker finished is applied, and its next problem sent
        if refine and self.charged is not None and self._refined != self.state:
            self._refine_display()
        g = self._current_gamma()
        c = self._current_clique()
        seq = _float_up(self._weight_sum())
        chi = sum_up(self._cm.tolist())
        return _compose(seq, chi, c, g)

    @property
    def state(self) -> tuple[int, int]:
        """(this engine's identity, a counter bumped by every change of its nodes or of its colouring)."""
        return self._token, self._version

    @_kernel_threads
    def admit(self, box: Box, weight: float, *, budget: float | None = None) -> Admission:
        """Compute, once, what adding ``(box, weight)`` does to every bound; the engine's nodes do not change (only an
        answer the background worker finished meanwhile is applied first: bounds tighten, as the next admission would
        have them anyway).

        ``admission.bounds`` is what :meth:`preview` returns; :meth:`commit` applies it.  Cost: the region
        sub-problem ``max_load_over(box)`` (skipped when the charged bound does not need it, see ``charged``)
        plus ``O(t·m)`` for the neighbours and the colour.  ``budget`` (the total the charged bound is checked
        against, same unit as the weights): an admission whose proven interval straddles it searches for up to
        ``near_time_limit``, the others for at most ``hard_time_limit`` (class docstring).
        """
        self._check_weight(weight)
        self._bg_collect()  # a term the worker closed meanwhile (only bounds change; done before reading the state)
        g = self._current_gamma()
        c = self._current_clique()
        self._sync_coloring()
        adm = self._admission(box, float(weight), budget)
        seq = _float_up(self._weight_sum() + Fraction(float(weight)))
        cm = self._cm_after(adm)
        chi = sum_up(cm.tolist())
        g2 = self._gamma_after(g, adm, committed=False)
        ex = self._exact_up
        if not adm.empty and adm.region is not None and adm.region.exact:
            ex = max(ex, add_up(float(weight), adm.region.upper))  # an exactly solved term, rounded up
        g2, ex, terms = _settle(g2, ex, self._pending + self._new_terms(adm, g2))
        terms = _keep_resumes(terms)
        c2 = _clique_after(c, adm)
        rows: tuple[tuple[dict[str, Any], float], ...] = ()
        if adm.region is not None and adm.region.witness is not None and g2.witness is not None:
            rows = ((g2.witness, g2.lower),)
            if adm.region.witness is not g2.witness:  # the region's best row, with the new node's weight
                rows += ((dict(adm.region.witness), sum_down([adm.region.lower, float(weight)])),)
        term = math.inf  # the new node's term (see ``_term_up``): w + the region's proven upper bound
        if adm.empty:
            term = 0.0
        elif adm.region is not None:
            term = add_up(float(weight), adm.region.upper)
        return Admission(
            box, float(weight), _compose(seq, chi, c2, g2), adm.neighbors, self.state, self.charged,
            adm.color, cm, g2, c2, rows, (ex, terms), term, adm.capped,
        )  # fmt: skip

    def preview(self, box: Box, weight: float) -> Bounds:
        """The bounds as if ``(box, weight)`` were added, without changing the engine."""
        return self.admit(box, weight).bounds

    @_kernel_threads
    def commit(self, admission: Admission) -> int:
        """Register the admitted node, installing the state computed by :meth:`admit` (nothing is solved again
        when the engine did not change since; otherwise the admission is recomputed first).  Returns its id."""
        adm = admission
        if adm.state != self.state or adm.charged != self.charged:
            adm = self.admit(adm.box, adm.weight)
        q = int(self._store.extend([adm.box], [adm.weight])[0])
        self._version += 1
        self._cm = adm._cm
        self._ensure_color_cap()
        self._colors[q] = adm._color
        self._colored = q + 1
        self._ensure_term_cap()
        self._term_up[q] = adm._term
        self._gamma = adm._gamma
        self._exact_up, self._pending = adm._pending
        self._clique = adm._clique
        if adm._capped and DEGRADE_AFTER_CAP and not adm._gamma.exact:
            self._stalled = True
        self._update_pool(adm.box, adm.weight, adm._rows)
        if self._top is not None:
            try:
                self._top.add(adm.box, adm.weight)
            except Exception:  # noqa: BLE001 - a top set that missed a node must not be used again (red team 19)
                self._top = None
        if self.recolor and q + 1 >= max(64, 2 * self._last_recolor) and q + 1 <= RECOLOR_MAX:
            self._full_recolor(keep_better=True)
        # the worker re-tightens the largest pending term on the second core; without it the kernel does, briefly
        if self._retightens() and not self._bg_submit() and self.retighten_seconds > 0:
            self.retighten(self.retighten_seconds)
        self._bg_top()
        return q

    @_kernel_threads
    def retighten(self, seconds: float) -> bool:
        """Spend up to ``seconds`` re-solving the largest pending term of γ's upper bound (:class:`_Term`): its
        paused scoped search resumed with all of it when it has one, else a fresh solve with twice the time of its
        previous try (capped by ``seconds``); returns whether γ is now exact.

        Only bounds change (never the nodes): a tighter term, or a better witness (its load now is a lower bound).
        Callers with idle time (between cells) may call it with a larger ``seconds``.
        """
        g = self._gamma
        if g is None or not self._pending:
            return g is not None and g.exact
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            g = self._gamma
            assert g is not None
            # a snapshot's global term is the worker's (only a later snapshot re-solves the whole problem)
            own = [t for t in self._pending if not t.snapshot]
            if not own:
                break
            term = max(own, key=lambda t: t.upper)
            left = seconds - (time.perf_counter() - t0)
            base = self.quick_time_limit if self.quick_time_limit is not None else QUICK_TIME_LIMIT
            # (a zero quick limit would never grow: the doubling tries start from at least a millisecond, and the
            # exponent is capped — 2.0**1024 overflows)
            base = max(base, 1e-3) * 2.0 ** min(term.tries, 40)
            resume = term.resume if term.resume is not None else {}
            # a paused search repeats no work: it gets whatever time is left (a fresh one: doubling tries)
            resuming = resume.get("search") is not None
            limit = left if resuming else min(left, base)
            st = self._store
            ids = np.flatnonzero(st.alive[: term.n])
            floor = g.lower - term.weight
            hint = term.upper - term.weight if term.box is not None else term.upper
            # the nodes before term.n keep their terms (each about its own history): they prune here too
            vt = self._term_up if term.box is not None and math.isfinite(floor) else None
            r = solve_overlap(
                st, ids, region=term.box, time_limit=limit, upper_hint=hint, floor=floor, config=self.solver,
                terms=vt, resume=resume,
            )  # fmt: skip
            self._install(term, r.upper, r.witness, resume if resume.get("search") is not None else None)
            if resuming or limit < base:
                break  # the time left did not cover this try: the next call gets it (a paused search resumes)
        self._version += 1
        return self._gamma is not None and self._gamma.exact

    def _install(self, term: _Term, region_upper: float, witness: dict[str, Any] | None, resume: Any) -> None:
        """A re-solve of pending ``term`` found ``region_upper`` (a proven bound of its region's maximum) and maybe
        a row: tighten the term (and its node's term), raise γ's lower end to the row's load now, settle γ."""
        g = self._gamma
        assert g is not None
        st = self._store
        up = min(term.upper, add_up(term.weight, region_upper))
        new = replace(term, upper=up, tries=term.tries + 1, resume=resume)
        self._ensure_term_cap()
        if term.box is not None and term.n < st.n:  # the term of node term.n (admitted with a region search)
            self._term_up[term.n] = min(self._term_up[term.n], new.upper)
        elif term.box is None:  # the global term bounds every node registered before term.n
            self._term_up[: term.n] = np.minimum(self._term_up[: term.n], new.upper)
        best = g
        if witness is not None:
            row = self._complete_row(witness, term.box) if term.box is not None else dict(witness)
            lr, mr, _ = self._row_load(row, None)  # its load now (loads only grow)
            if lr > g.lower:
                best = OverlapResult(lr, max(lr, g.upper), False, row, mr, g.method, g.seconds)
        terms = tuple(new if t is term else t for t in self._pending)
        self._gamma, self._exact_up, self._pending = _settle(best, self._exact_up, terms)
        # a fresh search that timed out keeps its paused state: the held ones stay within RESUME_MAX and
        # RESUME_MAX_BYTES here too, not only after the next admission (red team 12)
        self._pending = _keep_resumes(self._pending)

    # -- the second core (:mod:`.background`) ----------------------------------------------------------------
    def _term_key(self, term: _Term) -> tuple[Any, ...]:
        return (self._token, term.n, term.box is None)

    def _bg_collect(self) -> bool:
        """Apply the worker's finished result (if any); returns whether one was applied."""
        bg = self.background
        if bg is None or self._bg_task is None:
            return False
        tid, key = self._bg_task
        done, res = bg.result(tid)
        if not done:
            return False
        self._bg_task = None
        # failed, or the worker no longer holds the problem: the next try sends it; an answer to another problem (a
        # result is taken on its key, never on its task id alone: red team 14) is not applied
        if res is None or res.missing or res.key != key:
            self._bg_sent.discard(key)
            if key[2] == "top":
                self._top_sent_n = 0  # the worker may hold none of the nodes now: the next top task sends them all
            return False
        if key[2] == "top":
            return self._install_top(res.cells)
        if key[2] == "snapshot":
            if self._gamma is None:  # a bulk load meanwhile: γ is solved from scratch anyway
                return False
            self._install_snapshot(key[1], res.upper, res.witness)
            self._version += 1
            return True
        term = next((t for t in self._pending if self._term_key(t) == key), None)
        if term is None or self._gamma is None:  # dropped meanwhile (a witness passed it; a bulk load)
            return False
        self._install(term, res.upper, res.witness, term.resume)
        self._version += 1
        return True

    def _install_snapshot(self, n: int, upper: float, witness: dict[str, Any] | None, *, backoff: bool = True) -> None:
        """The worker's snapshot: ``upper`` is a proven bound of the maximum load among the nodes before ``n``.

        A row whose last covering node is before ``n`` has at most that load (no node from there up to the last one
        covers it), so one global term ``(n, upper)`` replaces every term of a node before ``n`` (and a global term
        of at most ``n`` nodes); the terms of later admissions stay.  It is applied only when it is below the largest
        term it replaces (else the snapshot backs off: :data:`SNAPSHOT_SECONDS`).  Every node before ``n`` gets a
        term of at most ``upper`` (the same argument), and the witness's load now raises γ's lower end."""
        g = self._gamma
        assert g is not None
        self._ensure_term_cap()
        self._term_up[:n] = np.minimum(self._term_up[:n], upper)
        best = g
        if witness is not None:
            row = self._complete_all(witness)
            lr, mr, _ = self._row_load(row, None)  # its load now (loads only grow)
            if lr > g.lower:
                best = OverlapResult(lr, max(lr, g.upper), False, row, mr, g.method, g.seconds)
        covered = [t for t in self._pending if (t.n < n if t.box is not None else t.n <= n)]
        terms = self._pending
        if covered and upper < max(t.upper for t in covered):
            terms = tuple(t for t in terms if all(t is not c for c in covered))
            terms += (_Term(n, None, 0.0, upper, snapshot=True),)
            self._snap_fails = 0
        elif backoff:
            self._snap_fails += 1
            self._snap_skip = 2 ** min(self._snap_fails, 10)
        self._gamma, self._exact_up, self._pending = _settle(best, self._exact_up, terms)
        self._pending = _keep_resumes(self._pending)

    def _install_top(self, cells: TopCells | None) -> bool:
        """The worker's top set: installed (its ``acc`` brought up to date with the nodes registered since) unless
        it found nothing (back-off), is older than the one held, or is more than :data:`TOP_MAX_GAP` nodes behind;
        its bound of γ of its nodes is applied as a snapshot (:meth:`_install_snapshot`).  Returns whether it was
        installed."""
        st = self._store
        if cells is None:
            self._top_fails += 1
            self._top_skip = 2 ** min(self._top_fails, 10)
            return False
        self._top_fails = 0
        if self._gamma is None or cells.n > st.n or st.n - cells.n > TOP_MAX_GAP:
            return False
        if self._top is not None and self._top.cells.n >= cells.n:
            return False
        top = TopSet(cells, self.schema)
        try:
            for k in range(cells.n, st.n):
                if st.alive[k]:
                    top.add(st.boxes[k], float(st.weights[k]))
        except Exception:  # noqa: BLE001 - a set missing a later node's weight is not installed
            return False
        self._top = top
        self._install_snapshot(cells.n, cells.upper, cells.rows[0] if cells.rows else None, backoff=False)
        self._version += 1
        return True

    def _bulk_top(self) -> None:
        """After γ of a bulk load (:meth:`extend`) of at least ``TOP_BULK_MIN_NODES`` nodes is solved from scratch:
        the kernel enumerates the top set itself, for at most ``TOP_BULK_SECONDS`` (the worker's first would come
        only after several admissions, each searching thousands of nodes: measured at 10,000 registered, the first
        nine took 0.1–0.4 s each, the rest 25 ms at the median)."""
        g = self._gamma
        st = self._store
        if g is None or self.charged not in ("exact", "chromatic") or st.n < TOP_BULK_MIN_NODES:
            return
        threshold = max(0.0, (1.0 - TOP_REL) * g.lower)
        cfg = self.solver
        self._install_top(
            enumerate_top(
                st, threshold, time.perf_counter() + TOP_BULK_SECONDS, cap=TOP_CAP, max_atoms=cfg.scoped_max_atoms,
                max_columns=cfg.scoped_max_columns,
            )
        )  # fmt: skip
        self._top_asked_n = st.n

    def _bg_top(self, *, snapshot: bool = False) -> bool:
        """Send the worker a top task (:class:`~.background.TopTask`) when it is idle and has nothing else of this
        engine to do: at least ``TOP_MIN_NODES`` nodes, γ charged with a floor (``charged`` "exact" or
        "chromatic"), ``TOP_REFRESH`` admissions since the last one, not backing off.  Returns whether one was
        sent.  Only the nodes the worker does not hold yet are shipped.

        ``snapshot``: the top task stands in for a snapshot (:meth:`_bg_submit`: its bound of γ of its nodes is one,
        and the scoped enumeration is as fast as the scoped search from scratch where both apply); then any number
        of nodes and any new node since the last top task will do."""
        bg = self.background
        st = self._store
        g = self._gamma
        if bg is None or bg.broken or self._bg_task is not None or g is None:
            return False
        if self.charged not in ("exact", "chromatic"):
            return False
        if snapshot:
            if st.n <= self._top_asked_n:
                return False
        elif st.n < TOP_MIN_NODES or st.n < self._top_asked_n + TOP_REFRESH:
            return False
        if self._top_skip > 0:
            self._top_skip -= 1
            return False
        if not bg.idle():
            return False
        n, base = st.n, self._top_sent_n
        if base > n:
            base = 0
        key = (self._token, n, "top")
        task = TopTask(
            key, self.schema, base, list(st.boxes[base:n]), st.weights[base:n].copy(),
            max(0.0, (1.0 - TOP_REL) * g.lower), TOP_CAP, TOP_SECONDS, self.solver.scoped_max_atoms,
            self.solver.scoped_max_columns,
        )  # fmt: skip
        tid = bg.submit(task)
        if tid is None:
            return False
        self._top_asked_n = n
        self._top_sent_n = n
        self._top_snap = snapshot
        self._bg_task = (tid, key)
        return True

    def _complete_all(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """``row`` with a declared value for every column some node constrains (a witness found among fewer nodes
        may lack the later ones' columns)."""
        out = dict(row)
        for name, cs in self._store.cols.items():
            if name not in out:
                col = cs.column
                out[name] = (
                    col.values[0]
                    if isinstance(col, CategoricalColumn)
                    else (int(col.lower) if col.is_int else float(col.lower))
                )
        return out

    @property
    def background_busy(self) -> bool:
        """Whether a problem of this engine is in the background worker."""
        return self._bg_task is not None

    @_kernel_threads
    def background_step(self) -> bool:
        """Apply the worker's finished answer and send it the next problem (what a commit does, without a node):
        for an idle kernel (:func:`~.background.start_pump`); returns whether a problem is in the worker now."""
        if not self._retightens():
            self._bg_collect()
        else:
            self._bg_submit()
        self._bg_top()
        return self._bg_task is not None

    def _retightens(self) -> bool:
        """Whether γ's pending terms are worth re-tightening now: some are pending and the charged bound uses γ."""
        return bool(self._pending) and self.charged in (None, "exact", "clique")

    def _bg_submit(self) -> bool:
        """Give the worker its next problem when it is idle; returns whether a problem of this engine is in the
        worker now (then the kernel does not re-tighten: the second core does).  The problem is the largest pending
        term when it is an admission's (a bulk load's global term stays in the kernel); the worker keeps its paused
        search, and each later try of the same term continues it with twice the time (``BACKGROUND_SECONDS``
        doubling up to ``BACKGROUND_MAX_SECONDS``).

        (Tried and dropped, session 14: γ of all nodes from scratch while the interval is wide, which bounds every
        pending term at once.  On the drill-down sessions it was exact but took 2.3 s at 500 nodes, 11 s at 700 and
        26 s at 1,000, so each result bounded only terms that later admissions had long overtaken: the slack
        stayed 1.22, back to back and with 8 s pauses every 50 queries alike.)"""
        bg = self.background
        if bg is None or bg.broken:
            return False
        self._bg_collect()
        if self._bg_task is not None:
            # a top task re-tightens no term unless it stands in for a snapshot (it bounds every earlier term)
            return self._bg_task[1][2] != "top" or self._top_snap
        g = self._gamma
        if not self._pending or g is None or not bg.idle():
            return False
        st = self._store
        if st.n > SNAPSHOT_MAX_NODES and self._bg_top():
            # too many nodes for a snapshot: a top set bounds every earlier term at once (and certifies admissions);
            # the kernel re-tightens meanwhile (a top task is not a term's re-solve)
            return False
        term = max(self._pending, key=lambda t: t.upper)
        if self._snapshot_due(term):
            # a top set bounds γ of its nodes as a snapshot does and certifies later admissions too; the scoped
            # search from scratch when the enumeration does not apply (backing off after it found nothing)
            if TOP_AS_SNAPSHOT:
                if self._top_skip > 0:
                    self._top_skip -= 1
                elif self._bg_top(snapshot=True):
                    return True
            return self._bg_snapshot(bg, g)
        own = [t for t in self._pending if not t.snapshot]  # a snapshot's global term: only a later snapshot
        if not own:
            return False
        term = max(own, key=lambda t: t.upper)
        if term.tries >= BACKGROUND_MAX_TRIES:
            return False  # the worker had its share (≈ 40 s): the kernel's brief re-tightening goes on with it
        if term.box is None:
            # a bulk load's global term stays in the kernel: its paused search (from the bulk solve) lives there, and
            # its problem — every node — is the costliest to ship (measured at 10,000 registered: p50 44 ms with the
            # kernel re-tightening it, 156 ms with the worker restarting it from scratch)
            return False
        key = self._term_key(term)
        floor = g.lower - term.weight
        hint = term.upper - term.weight if term.box is not None else term.upper
        limit = min(BACKGROUND_MAX_SECONDS, BACKGROUND_SECONDS * 2.0 ** min(term.tries, 20))
        boxes = weights = vt = None
        if key not in self._bg_sent:
            ids = np.flatnonzero(st.alive[: term.n])
            if term.box is not None:
                ids = ids[st.overlap_mask(term.box, term.n)[ids]]
            boxes = [st.boxes[i] for i in ids.tolist()]
            weights = st.weights[ids].copy()
            if term.box is not None and math.isfinite(floor):
                vt = self._term_up[ids].copy()
        task = RegionTask(key, self.schema, boxes, weights, vt, term.box, hint, floor, limit, self.solver)
        tid = bg.submit(task)
        if tid is None:
            return False
        self._bg_sent.add(key)
        self._bg_task = (tid, key)
        return True

    def _snapshot_due(self, largest: _Term) -> bool:
        """Whether the worker's next problem is a snapshot (γ of every node so far from scratch, bounding all the
        pending terms at once) rather than the largest term: several terms pending, or the largest one tried
        before or a snapshot's own; new nodes since the last snapshot; at most ``SNAPSHOT_MAX_NODES``; no bulk
        load's global term pending (the kernel holds its paused search); not backing off."""
        n = self._store.n
        if n > SNAPSHOT_MAX_NODES or n <= self._snap_n:
            return False
        if any(t.box is None and not t.snapshot for t in self._pending):
            return False
        if not (len(self._pending) >= SNAPSHOT_MIN_TERMS or largest.tries >= 1 or largest.snapshot):
            return False
        if self._snap_skip > 0:
            self._snap_skip -= 1
            return False
        return True

    def _bg_snapshot(self, bg: BackgroundSolver, g: OverlapResult) -> bool:
        """Send the worker the snapshot of every node so far, needed only above γ's lower end (an answer at most
        that proves γ exact up to the later admissions' terms); γ's upper end is its proven hint."""
        st = self._store
        n = st.n
        ids = np.flatnonzero(st.alive[:n])
        key = (self._token, n, "snapshot")
        boxes = [st.boxes[i] for i in ids.tolist()]
        task = RegionTask(
            key, self.schema, boxes, st.weights[ids].copy(), None, None, g.upper, g.lower, SNAPSHOT_SECONDS,
            self.solver,
        )  # fmt: skip
        tid = bg.submit(task)
        if tid is None:
            return False
        self._snap_n = n
        self._bg_task = (tid, key)
        return True

    def add(self, box: Box, weight: float) -> int:
        """Register one node and update all bounds incrementally; returns its id (``commit(admit(...))``)."""
        return self.commit(self.admit(box, weight))

    # -- internals ----------------------------------------------------------------------------------------
    def _weight_sum(self) -> Fraction:
        """The exact sum of the registered weights (kept incrementally: ``O(1)`` per added node)."""
        n = self._store.n
        if self._wsum_n != n:
            self._wsum = self._wsum + sum(
                (Fraction(x) for x in self._store.weights[self._wsum_n : n].tolist()), Fraction(0)
            )
            self._wsum_n = n
        return self._wsum

    def _project(self, row: dict[str, Any], box: Box) -> dict[str, Any]:
        """``row`` moved into ``box``: each column it violates gets the box's value of largest load, the other
        columns fixed (one pass, coordinate-wise).  ``O(t)`` per candidate value, vectorised."""
        st = self._store
        n = st.n
        w = st.weights[:n]
        out = dict(row)
        for c, vs in box.constraints.items():
            if vs.contains(out[c]):
                continue
            cands = _values_in(vs)
            col = st.cols.get(c)
            if col is None or len(cands) == 1:
                out[c] = cands[0]
                continue
            others = st.alive[:n].copy()
            for name, cs in st.cols.items():
                if name != c:
                    others &= cs.contains(out[name], n) if name in out else ~cs.constrained[:n]
            loads = [float(w[others & col.contains(v, n)].sum()) for v in cands]
            out[c] = cands[int(np.argmax(loads))]
        return out

    def _update_pool(self, box: Box, w: float, rows: tuple[tuple[dict[str, Any], float], ...]) -> None:
        """After registering (box, w): the pooled rows inside it gain w (as a lower bound); add ``rows``."""
        pool = self._pool
        if box.is_empty():
            return
        for item in pool:
            r = _complete_in(item[0], box)
            if box.contains_row(r):
                item[0], item[1] = r, sum_down([item[1], w])
        for row, load in rows:
            if all(row != item[0] for item in pool):
                pool.append([row, load])
        pool.sort(key=lambda it: -it[1])
        del pool[POOL_SIZE:]

    def _refine_display(self) -> None:
        """Tighten non-exact display-only γ and ω from scratch within ``display_time_limit`` each."""
        self._refined = self.state
        st = self._store
        n = st.n
        limit = min(self.display_time_limit, self.time_limit)
        g = self._current_gamma()
        if not g.exact and n:
            chi = sum_up(self._cm.tolist())
            r = solve_overlap(st, time_limit=limit, upper_hint=min(g.upper, chi), config=self.solver)
            best = r if r.lower >= g.lower else g
            upper = max(min(r.upper, g.upper), best.lower)
            self._gamma = replace(best, upper=upper, exact=is_exact(best.lower, upper))
            # a from-scratch bound of γ bounds every term's true value: clip them
            self._ensure_term_cap()
            self._term_up[:n] = np.minimum(self._term_up[:n], upper)
            self._gamma, self._exact_up, self._pending = _settle(
                self._gamma,
                min(self._exact_up, upper),
                tuple(replace(t, upper=min(t.upper, upper)) for t in self._pending),
            )
        c = self._current_clique()
        if not c.exact and 0 < n <= DISPLAY_CLIQUE_MAX:
            gamma = self._gamma
            assert gamma is not None
            ids = np.flatnonzero(st.alive[:n])
            A = adjacency_graph(st, ids=ids)
            pos = np.searchsorted(ids, np.array(gamma.members, dtype=np.int64))
            chi = sum_up(self._cm.tolist())
            cr = max_weight_clique(A, st.weights[ids], limit, upper_hint=min(chi, c.upper), initial=pos)
            if cr.lower >= c.lower:
                members, lower = tuple(int(ids[i]) for i in cr.members), cr.lower
            else:
                members, lower = c.members, c.lower
            upper = max(min(cr.upper, c.upper), lower)
            self._clique = _omega(lower, upper, cr.exact or is_exact(lower, upper), members)

    @staticmethod
    def _check_weight(weight: float) -> None:
        if not (isinstance(weight, (int, float, np.floating)) and math.isfinite(weight) and weight > 0):
            raise ValueError(f"a node's weight must be a positive finite number, got {weight!r}")

    def _needs(self) -> tuple[float | None, bool]:
        """(time limit of the region sub-problem or None to skip it, whether ω must be searched exactly)."""
        if self.charged is None:
            return self.time_limit, True
        if self.charged == "sequential":
            return None, False
        if self.charged == "chromatic":
            return min(self.display_time_limit, self.time_limit), False
        return self.time_limit, self.charged == "clique"

    def _region(
        self,
        box: Box,
        nb: np.ndarray,
        limit: float,
        floor: float = -math.inf,
        helly: bool = False,
        resume: dict[str, Any] | None = None,
        soft_floor: float = -math.inf,
    ) -> OverlapResult:
        """``max_load_over(box)`` restricted to the neighbours ``nb``, with cheap certificates first.  ``resume``:
        the search's resumable state (a second call with it continues the first one's timed-out search);
        ``soft_floor``: see :func:`~.maxoverlap.solve_overlap`."""
        st = self._store
        if len(nb) == 0:
            row = {name: vs.some_value() for name, vs in box.constraints.items()}  # any row of the box
            return OverlapResult(0.0, 0.0, True, row, (), "no-neighbour", 0.0)
        old = self._gamma
        if old is not None and old.exact and old.witness is not None:
            # the exact γ witness lies in the box: max over the box ≤ γ = load(witness), so it is exact
            row = self._complete_row(old.witness, box)
            if box.contains_row(row):
                return OverlapResult(old.lower, old.upper, True, row, old.members, "witness-in-box", 0.0)
        # R ≤ γ_old ≤ χ_old: a proven target for the searches (and the top set's bound, when there is one)
        hint = min(old.upper if old is not None else math.inf, sum_up(self._cm.tolist()))
        top = self._top_upper(box, nb, floor, helly)
        top_rows: list[tuple[dict[str, Any], float]] = []
        if top is not None:
            hint = min(hint, top[0])
            top_rows = [(r, math.inf) for r in top[1]]
        # known heavy rows (the pool, after the rows of the top set's heaviest cells in the box), moved into the box
        # column by column (the value of largest load with the other columns fixed): the best one's exact load is a
        # lower bound of R; when it reaches the hint, R is exact
        best_row, best = None, -math.inf
        members: tuple[int, ...] = ()
        tried = 0
        for row, load in top_rows + self._pool:
            if load <= best:
                break
            r = _complete_in(row, box)
            if not box.contains_row(r):
                if helly or tried >= PROJECT_ROWS:  # Helly regions: the load tensor is cheaper than projecting
                    continue
                tried += 1
                r = self._project(r, box)
            lr, mr, _ = self._row_load(r, None)
            if lr > best:
                best_row, best, members = r, lr, mr
                if is_exact(best, hint) or best >= hint:
                    return OverlapResult(best, max(best, hint), True, best_row, members, "pool-row-in-box", 0.0)
        if best_row is not None:
            floor = max(floor, best)
        res = self._term_bound(box, nb, floor, helly, best_row)
        if res is None and top is not None and top[0] <= floor:
            res = self._floor_result(box, top[0], best_row, "top-set")
        if res is None:
            res = solve_overlap(
                st, nb, region=box, time_limit=limit, upper_hint=hint, floor=floor, config=self.solver,
                terms=self._term_up if math.isfinite(floor) else None, resume=resume, soft_floor=soft_floor,
            )  # fmt: skip
        if best_row is not None and res.lower < best:
            up = max(res.upper, best)
            res = OverlapResult(best, up, is_exact(best, up), best_row, members, res.method + "+pool", res.seconds)
        return res

    def _term_bound(
        self, box: Box, nb: np.ndarray, floor: float, helly: bool, row: dict[str, Any] | None = None
    ) -> OverlapResult | None:
        """R = ``max_load_over(box)`` proven at most ``floor`` from the earlier admissions' terms, without a
        search (issue 28: reuse of the earlier region solutions); None when some neighbour's term exceeds the
        floor (or there is no finite floor, or the region is Helly: the load tensor is cheap there).

        A row's load is at most the term of the last node k covering it (``_term_up[k]`` ≥ w_k + max over box_k
        of the load of the nodes before k, and no later node covers the row).  Every node covering a row of
        ``box`` is a neighbour, so ``R ≤ max over the neighbours of their terms``; when that is at most
        ``floor`` nothing above the floor exists in the box.  ``row``: a known row of the box (its load is the
        lower end; default any row of the box).  Cost ``O(|nb|)`` plus one row load ``O(t·m)``.

        (Searching only the sub-regions ``box ∩ box_h`` of the neighbours h whose term exceeds the floor is
        also exact, but measured on the sparse generator each sub-search cost as much as the whole region's:
        not done.)
        """
        if not math.isfinite(floor) or helly or len(nb) == 0:
            return None
        upper = float(self._term_up[nb].max())
        if not upper <= floor:
            return None
        if row is None:
            row = {name: vs.some_value() for name, vs in box.constraints.items()}  # any row of the box
        lower, members, _ = self._row_load(row, None)
        upper = max(upper, lower)
        return OverlapResult(lower, upper, is_exact(lower, upper), row, members, "term-bound", 0.0)

    def _top_upper(
        self, box: Box, nb: np.ndarray, floor: float, helly: bool
    ) -> tuple[float, list[dict[str, Any]]] | None:
        """A proven bound of R = ``max_load_over(box)`` from the top set (:meth:`.topset.TopSet.bound`: the cells
        the box meets, the threshold plus the load of the neighbours registered since the set's nodes), and rows of
        the (at most two) heaviest cells the box meets; None without a top set, a finite floor or in a Helly region
        (the load tensor is cheap there).  The later neighbours' own maximum overlap within the box is searched (for
        at most ``TOP_LATER_SECONDS``) only when their weight would decide the bound.  Cost ``O(cells ·
        constraints + |nb|)``."""
        top = self._top
        if top is None or not math.isfinite(floor) or helly or len(nb) == 0:
            return None
        later = nb[nb >= top.cells.n]
        wl = sum_up(self._store.weights[later].tolist())
        m = top.meets(box)
        inside = top.inside(box)
        target = max(inside, floor)
        if add_up(top.cells.threshold, wl) > target and 0 < len(later) <= TOP_LATER_MAX:
            # needed only above target − T, lowered by far more than a search's rounding slack (its proven bound of
            # a load at most the floor may exceed the floor by a few ulps; T + that would then miss the target)
            need = -sum_up((top.cells.threshold, -target)) - TOP_LATER_MARGIN * max(1.0, abs(target))
            r = solve_overlap(
                self._store, later, region=box, time_limit=TOP_LATER_SECONDS, upper_hint=wl, floor=need,
                config=self.solver,
            )  # fmt: skip
            wl = min(wl, r.upper)
        upper = top.bound(box, wl)
        rows: list[dict[str, Any]] = []
        if m.any():
            ids = np.flatnonzero(m)
            heavy = ids[np.argsort(-(top.cells.loads[ids] + top.acc[ids]), kind="stable")[:2]]
            rows = [dict(top.cells.rows[int(i)]) for i in heavy]
        return upper, rows

    def _floor_result(self, box: Box, upper: float, row: dict[str, Any] | None, method: str) -> OverlapResult:
        """R proven at most ``upper`` (at most the floor): ``row``'s load (default any row of the box) is the
        lower end."""
        if row is None:
            row = {name: vs.some_value() for name, vs in box.constraints.items()}  # any row of the box
        lower, members, _ = self._row_load(row, None)
        upper = max(upper, lower)
        return OverlapResult(lower, upper, is_exact(lower, upper), row, members, method, 0.0)

    def _admission(self, box: Box, w: float, budget: float | None = None) -> _Admission:
        st = self._store
        qid = st.n
        if box.is_empty():
            return _Admission(box, w, qid, True, np.zeros(0, dtype=np.int64), None, -1, None)
        t0 = time.perf_counter()
        nb = np.flatnonzero(st.overlap_mask(box))
        col_nb = self._colors[nb] if len(nb) else np.zeros(0, dtype=np.int64)
        color = cheapest_color(col_nb, w, self._cm)
        limit, need_clique = self._needs()
        if limit is None:  # nothing but Σw is charged: no search at all
            return _Admission(box, w, qid, False, nb, None, color, _omega(w, math.inf, False, (qid,)))
        # γ_new = max(γ_old, w + R): when ω is not derived from R, only R > γ_old.lower − w matters (an R below
        # it leaves the interval as it was: its term w + floor is at most γ_old.lower and drops out)
        floor = soft = -math.inf
        degraded = False
        g = self._gamma
        if not need_clique and g is not None:
            floor = g.lower - w
            # degraded (γ's interval wider than DEGRADED_REL_GAP, e.g. after a bulk load) and not near the budget:
            # only an R that would raise the charged upper end matters (R > γ.upper − w); a better witness inside
            # the interval is not worth a capped search on every admission (issue 28, graceful degradation)
            near = budget is not None and g.lower <= budget < g.upper + w
            wide = g.upper > (1.0 + DEGRADED_REL_GAP) * g.lower
            if not g.exact and (wide or self._stalled) and not near:
                # the pairwise LP's bound still stops at the old floor when it gets there in time (then the admission
                # adds no pending term: the interval can close again without the worker)
                floor, soft = max(floor, g.upper - w), floor
                degraded = True
        helly = is_helly_box(box) and bool(st.helly[nb].all())
        # uncharged engines (every bound exact) search for the whole limit at once
        quick = limit if self.charged is None or self.quick_time_limit is None else min(limit, self.quick_time_limit)
        if quick < limit and self.charge_rel_slack <= 0:
            # no slack is ever kept, so every inexact quick result would search on: one search up to
            # ``hard_time_limit`` instead (a second search starts from scratch and repeats the first one's work:
            # measured on the sparse generator, +40 ms on every admission needing more than the quick limit)
            quick = min(limit, max(quick, self.hard_time_limit))
        if degraded and quick < limit:
            # the one search a degraded admission gets (a timed-out one keeps its paused search with its term,
            # which later commits resume: the upper end it raised comes back down)
            quick = min(quick, self.degraded_time_limit)
        resume: dict[str, Any] = {}
        capped = False
        region = self._region(box, nb, quick, floor, helly, resume, soft)
        if not region.exact and limit > quick:
            lo = max(self._gamma.lower if self._gamma is not None else 0.0, region.lower + w)
            up = max(self._gamma.upper if self._gamma is not None else 0.0, add_up(w, region.upper))
            near = budget is not None and lo <= budget < up
            cap = min(limit, self.near_time_limit if near else self.hard_time_limit)
            # a second search resumes the first one's scoped search (other steps start from scratch)
            on = (near or (not degraded and up > (1.0 + self.charge_rel_slack) * lo)) and cap > quick
            if on:
                more = self._region(box, nb, max(0.0, cap - (time.perf_counter() - t0)), floor, helly, resume, soft)
                region = _tighter(region, more)
            # the cap was used: searched on up to it, or the one search already had it (a result within
            # ``charge_rel_slack`` that did not search on is not capped: red team 13)
            capped = not region.exact and not degraded and not near and (on or cap <= quick)
        # one admission keeps one time limit: the clique search only gets what the γ step left
        clique_limit = min(self.clique_time_limit, max(0.0, self.time_limit - (time.perf_counter() - t0)))
        if helly:
            members = tuple(region.members) + (qid,)
            lower = sum_down(st.weights[list(region.members)].tolist() + [w])
            clique = _omega(lower, max(lower, add_up(w, region.upper)), region.exact, members)
        elif len(nb) == 0:
            clique = _omega(w, w, True, (qid,))
        elif not need_clique:
            # ω is display-only here: the witness's members form a clique (lower); ω ≤ χ bounds it (upper)
            members = tuple(region.members) + (qid,)
            lower = sum_down(st.weights[list(region.members)].tolist() + [w])
            clique = _omega(lower, math.inf, False, members)
        elif self._clique is not None and not self._clique.exact:
            # ω is already only bounded: do not search again, bound ω(N(q)) by a greedy colouring
            adj = st.pairwise(nb)
            np.fill_diagonal(adj, False)
            chi_nb = coloring_value(greedy_coloring(CSRGraph.from_dense(adj), st.weights[nb]), st.weights[nb])
            members = tuple(region.members) + (qid,)
            lower = sum_down(st.weights[list(region.members)].tolist() + [w])
            clique = _omega(lower, max(lower, add_up(w, chi_nb)), False, members)
        else:
            adj = st.pairwise(nb)
            np.fill_diagonal(adj, False)
            seed = np.searchsorted(nb, np.array(region.members, dtype=np.int64))
            cr = max_weight_clique(adj, st.weights[nb], clique_limit, initial=seed)
            members = tuple(int(nb[i]) for i in cr.members) + (qid,)
            lower = sum_down(st.weights[list(members[:-1])].tolist() + [w])
            clique = _omega(lower, max(lower, add_up(w, cr.upper)), cr.exact, members)
        return _Admission(box, w, qid, False, nb, region, color, clique, resume, capped)

    @property
    def _gamma(self) -> OverlapResult | None:
        """γ's current proven interval (None: to be solved from scratch)."""
        return self._gamma_value

    @_gamma.setter
    def _gamma(self, value: OverlapResult | None) -> None:
        # the one place γ changes: an exact γ, or one to be solved again from scratch, ends a stall (the stall was
        # the old interval's; :data:`DEGRADE_AFTER_CAP`)
        self._gamma_value = value
        if value is None or value.exact:
            self._stalled = False

    def _new_terms(self, adm: _Admission, g2: OverlapResult) -> tuple[_Term, ...]:
        """The pending term an admission adds when its region result is not exact (not searched: unbounded)."""
        if adm.empty:
            return ()
        res = adm.region
        if res is None:
            return (_Term(adm.qid, adm.box, adm.weight, math.inf),)
        if res.exact:
            return ()
        resume = adm.resume if adm.resume and adm.resume.get("search") is not None else None
        return (_Term(adm.qid, adm.box, adm.weight, add_up(adm.weight, res.upper), resume=resume),)

    def _cm_after(self, adm: _Admission) -> np.ndarray:
        cm = self._cm.copy()
        if adm.empty:
            return cm
        if adm.color == len(cm):
            return np.append(cm, adm.weight)
        cm[adm.color] = max(cm[adm.color], adm.weight)
        return cm

    def _row_load(
        self, row: dict[str, Any], extra: tuple[Box, float] | None
    ) -> tuple[float, tuple[int, ...], list[float]]:
        st = self._store
        m = st.contains_mask(row)
        members = tuple(np.flatnonzero(m).tolist())
        ws = st.weights[: st.n][m].tolist()
        if extra is not None and extra[0].contains_row(row):
            members = members + (st.n,)
            ws.append(extra[1])
        return sum_down(ws), members, ws

    def _complete_row(self, row: dict[str, Any] | None, box: Box) -> dict[str, Any]:
        out = dict(row or {})
        for name, vs in box.constraints.items():
            if name not in out:
                col = self._store.column_of(name, vs)
                out[name] = (
                    col.values[0]
                    if isinstance(col, CategoricalColumn)
                    else (int(col.lower) if col.is_int else float(col.lower))
                )
        return out

    def _gamma_after(self, old: OverlapResult, adm: _Admission, *, committed: bool) -> OverlapResult:
        if adm.empty:
            return old
        t0 = time.perf_counter()
        res = adm.region
        extra = None if committed else (adm.box, adm.weight)
        old_row = self._complete_row(old.witness, adm.box)
        lo, mo, _ = self._row_load(old_row, extra)
        if res is None:  # not searched (sequential charge): the old witness still bounds γ from below
            return OverlapResult(lo, max(lo, math.inf), False, old_row, mo, "not-searched", time.perf_counter() - t0)
        # candidate: the best row of the new box; incumbent: the old witness (completed for new columns)
        cand_row = dict(res.witness or {})
        lc, mc, _ = self._row_load(cand_row, extra)
        if lc >= lo:
            lower, members, witness = lc, mc, cand_row
        else:
            lower, members, witness = lo, mo, old_row
        # γ_new = max(γ_old, w + max load over the new box): both proven upper bounds, the sum rounded up
        upper = max(old.upper, add_up(adm.weight, res.upper), lower)
        exact = is_exact(lower, upper)
        return OverlapResult(
            lower, upper, exact, witness, members, f"incremental({res.method})", res.seconds + time.perf_counter() - t0
        )

    def _current_gamma(self) -> OverlapResult:
        if self._gamma is None:
            limit, _ = self._needs()
            limit = min(self.display_time_limit, self.time_limit) if limit is None else limit
            self._gamma = solve_overlap(self._store, time_limit=limit, config=self.solver)
            g = self._gamma
            # every node's term is at most γ of all the nodes (loads only grow as nodes are added)
            self._ensure_term_cap()
            n = self._store.n
            self._term_up[:n] = np.minimum(self._term_up[:n], g.upper)
            if g.exact:
                self._pending, self._exact_up = (), g.upper
            else:
                self._pending, self._exact_up = (_Term(self._store.n, None, 0.0, g.upper),), 0.0
            self._bulk_top()
        return self._gamma

    def _current_clique(self) -> OverlapResult:
        if self._clique is None:
            g = self._current_gamma()
            st = self._store
            n = st.n
            alive = st.alive[:n]
            if bool(st.helly[:n][alive].all()):
                self._clique = _omega(g.lower, g.upper, g.exact, g.members)
            elif not self._needs()[1]:
                self._clique = _omega(g.lower, math.inf, False, g.members)  # display-only: ω ≤ χ
            else:
                self._sync_coloring()
                chi = sum_up(self._cm.tolist())
                if g.exact and chi <= g.lower:
                    # squeezed: γ ≤ ω ≤ χ
                    self._clique = _omega(g.lower, g.lower, True, g.members)
                    return self._clique
                ids = np.flatnonzero(alive)
                A = adjacency_graph(st, ids=ids)
                pos = np.searchsorted(ids, np.array(g.members, dtype=np.int64))
                cr = max_weight_clique(A, st.weights[ids], self.clique_time_limit, upper_hint=chi, initial=pos)
                self._clique = _omega(cr.lower, cr.upper, cr.exact, tuple(int(ids[i]) for i in cr.members))
        return self._clique

    def _ensure_term_cap(self) -> None:
        cap = self._store.cap
        if len(self._term_up) < cap:
            t = np.full(cap, math.inf)
            t[: len(self._term_up)] = self._term_up
            self._term_up = t

    def _ensure_color_cap(self) -> None:
        cap = self._store.cap
        if len(self._colors) < cap:
            c = np.full(cap, -1, dtype=np.int64)
            c[: len(self._colors)] = self._colors
            self._colors = c

    def _sync_coloring(self) -> None:
        st = self._store
        n = st.n
        if self._colored >= n:
            return
        self._ensure_color_cap()
        if self._colored == 0 and n <= DSATUR_MAX:
            self._full_recolor(keep_better=False)
            return
        # greedy in insertion order, overlap rows computed in vectorised blocks
        start = self._colored
        cm = list(self._cm.tolist())
        cma = np.array(cm)
        colors = self._colors
        w = st.weights
        alive = st.alive
        for s in range(start, n, _BLOCK):
            e = min(n, s + _BLOCK)
            blk = st.pairwise(np.arange(s, e), np.arange(e))
            for i in range(s, e):
                if not alive[i]:
                    colors[i] = -1
                    continue
                row = blk[i - s, :i]
                c = cheapest_color(colors[:i][row], float(w[i]), cma)
                if c == len(cma):
                    cma = np.append(cma, w[i])
                else:
                    cma[c] = max(cma[c], w[i])
                colors[i] = c
        self._cm = cma
        self._colored = n

    def _full_recolor(self, *, keep_better: bool) -> None:
        st = self._store
        n = st.n
        self._ensure_color_cap()
        ids = np.flatnonzero(st.alive[:n])
        A = adjacency_graph(st, ids=ids)
        value, colors = weighted_coloring_bound(A, st.weights[ids])
        self._version += 1
        current = sum_up(self._cm.tolist()) if keep_better else math.inf
        self._last_recolor = n
        if value < current or not keep_better:
            new = np.full(len(self._colors), -1, dtype=np.int64)
            new[ids] = colors
            self._colors = new
            ncol = int(colors.max()) + 1 if len(colors) else 0
            cm = np.zeros(ncol)
            np.maximum.at(cm, colors, st.weights[ids])
            self._cm = cm
        self._colored = n


_EMPTY_RESULT = OverlapResult(0.0, 0.0, True, {}, (), "empty", 0.0)


def _float_up(x: Fraction) -> float:
    """The smallest float64 ≥ the exact rational ``x`` (as :func:`~.rounding.sum_up` of the summands)."""
    f = float(x)  # correctly rounded to nearest
    return f if Fraction(f) >= x else math.nextafter(f, math.inf)


def _values_in(vs: Any) -> list[Any]:
    """Candidate values of a value set: every category of a category set; for an interval set one value per
    interval (its closed ends, else an inner point)."""
    if isinstance(vs, CategorySet):
        return [v for i, v in enumerate(vs.column.values) if vs.bits >> i & 1]
    out: list[Any] = []
    for iv in vs.intervals:
        pts = [p for p in (iv.lo, iv.hi) if math.isfinite(p)]
        pts = [p for p in pts if vs.contains(p)]
        out.extend(pts[:1] if pts else [])
    return out or [vs.some_value()]


def _complete_in(row: dict[str, Any], box: Box) -> dict[str, Any]:
    """``row`` with a value inside ``box`` for each of its columns the row lacks (no registered node constrains
    them, so the row's load does not depend on them)."""
    missing = [c for c in box.constraints if c not in row]
    if not missing:
        return row
    out = dict(row)
    for c in missing:
        out[c] = box.constraints[c].some_value()
    return out


def _settle(
    g: OverlapResult, exact_up: float, terms: tuple[_Term, ...]
) -> tuple[OverlapResult, float, tuple[_Term, ...]]:
    """γ's interval from the pending terms and ``exact_up``, a proven bound of every other term (the exactly
    solved ones, the dropped ones): ``upper = max(exact_up, terms)``, never above ``g.upper`` (both proven).

    The witness's exact load (``g.lower`` is it rounded down, so the next float is above it) is itself a load,
    at most γ: ``exact_up`` may be raised to it, and a term at or below ``exact_up`` drops out.
    """
    if math.isfinite(g.lower):
        exact_up = max(exact_up, math.nextafter(g.lower, math.inf))
    # a term within REL_TOL of exact_up (e.g. "nothing above the floor", the floor rounded up) is absorbed:
    # raising exact_up to it keeps every bound proven and leaves nothing pending
    near = [t.upper for t in terms if t.upper > exact_up and is_exact(exact_up, t.upper)]
    if near:
        exact_up = max(near)
    keep = tuple(t for t in terms if t.upper > exact_up)
    upper = max([exact_up] + [t.upper for t in keep])
    upper = max(min(upper, g.upper), g.lower)
    exact = is_exact(g.lower, upper)
    if upper == g.upper and exact == g.exact:
        return g, exact_up, keep
    return replace(g, upper=upper, exact=exact), exact_up, keep


def _keep_resumes(terms: tuple[_Term, ...]) -> tuple[_Term, ...]:
    """``terms`` with the paused searches of all but the ``RESUME_MAX`` largest dropped, and of any beyond
    ``RESUME_MAX_BYTES`` in all (memory: a paused search holds its per-level tables, up to ≈ 100 MB on the largest
    instances it takes; :meth:`OverlapEngine.retighten` works on the largest term first)."""
    held = [t for t in terms if t.resume is not None]
    if not held:
        return terms
    keep: set[int] = set()
    used = 0
    for t in sorted(held, key=lambda t: -t.upper)[:RESUME_MAX]:
        size = scoped_state_nbytes(t.resume)
        if used + size <= RESUME_MAX_BYTES:
            keep.add(id(t))
            used += size
    if len(keep) == len(held):
        return terms
    return tuple(t if t.resume is None or id(t) in keep else replace(t, resume=None) for t in terms)


def _tighter(a: OverlapResult, b: OverlapResult) -> OverlapResult:
    """The intersection of two proven intervals of the same maximum (the witness of the larger lower bound)."""
    best = b if b.lower > a.lower else a
    upper = max(min(a.upper, b.upper), best.lower)
    return replace(best, upper=upper, exact=is_exact(best.lower, upper), method=f"{a.method}|{b.method}")


def _clique_after(old: OverlapResult, adm: _Admission) -> OverlapResult:
    c = adm.clique
    if adm.empty or c is None:
        return old
    if c.lower > old.lower:
        lower, members = c.lower, c.members
    else:
        lower, members = old.lower, old.members
    exact = old.exact and c.exact
    upper = max(old.upper, c.upper, lower)
    return _omega(lower, upper, exact, members)


def _compose(seq: float, chi: float, c: OverlapResult, g: OverlapResult) -> Bounds:
    chrom = min(chi, seq)
    if c.exact:
        clique = max(c.upper, g.lower)  # the exact ω, rounded up
        chrom = max(chrom, clique)
    else:
        clique = min(max(c.upper, g.lower), chrom)
    chrom = min(chrom, seq)
    clique = min(clique, chrom)
    upper = min(g.upper, clique, chrom, seq)
    upper = max(upper, g.lower)
    exact = is_exact(g.lower, upper)
    ov = g if (upper == g.upper and exact == g.exact) else replace(g, upper=upper, exact=exact)
    return Bounds(seq, chrom, clique, c.exact, ov, clique_lower=c.lower)
