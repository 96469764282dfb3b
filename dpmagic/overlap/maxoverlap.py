"""Exact weighted maximum overlap γ_w = max_x Σ_{q covers x} w_q, with a witness row.

docs/design.md §2; Smith et al. 2022 §4–6 (γ is NP-hard; §6.2 adapts clique branch and bound to overlaps).  The solver
works on the compressed domain of :func:`dpmagic.overlap.encoding.build_problem` and chooses, per
(sub-)instance:

Methods, each in its own module: the load tensor (:mod:`.tensor`), branch and bound over columns
(:mod:`.columns`), branch and bound over the query graph (:mod:`.gsearch`), HiGHS (:mod:`.milp`); which run
and in what order is decided per instance by the portfolio (:mod:`.portfolio`, configured by one
:class:`~.portfolio.PortfolioConfig`).  This module holds the one result type (:class:`OverlapResult`) and the
driver (:func:`solve_overlap`: encoding, portfolio, witness, rounding).

The time limit is a wall-clock budget for the whole call, encoding included: no phase is started after the
deadline, and HiGHS only gets the time left.  The cost constants only choose the order of exact methods;
they never affect a result.

On a timeout the result is the best proven interval ``[lower, upper]`` with ``exact=False``: ``lower`` is
the exact load of a concrete witness row, ``upper`` the smallest proven bound (branch-and-bound frontier,
LP relaxation, and whatever the caller passes in ``upper_hint`` — e.g. an exact clique or a colouring).

Floating point (:mod:`.rounding`): loads inside the solvers are float64 sums.  Every reported ``upper`` goes
through one function, :func:`~.rounding.proven_upper` (via :class:`~.rounding.ProblemRounding`): the computed value plus twice
the standard rounding-error bound of its evaluation (``≤ 2n + a_max + 4`` additions of ± weights whose
partial sums are bounded by Σw), rounded up, then snapped down to the weights' power-of-two lattice when
they have one (integers, halves …: the result is then exact).  ``lower`` is the exact load of the witness
row (its covering queries' weights, ``math.fsum`` rounded *down*), so ``lower ≤ γ ≤ upper`` always holds.
HiGHS sees the weights scaled by a power of two to ``[0.5, 1)`` (exact) and only its dual bound is used,
plus a margin ``MILP_TOL·(variables + rows + 2)`` covering its absolute tolerances; its incumbent is only a
candidate witness.  ``exact`` means ``upper - lower <= REL_TOL·upper`` (``REL_TOL = 1e-9``).

Time: the limit covers the whole call.  Component and query-graph construction check the deadline between
blocks of rows; HiGHS gets the time left minus its measured overrun (presolve, which it does not interrupt,
only when the time left is ample); a load-tensor step is skipped when its estimate exceeds the time left
plus ``OVERRUN_SHARE·limit + OVERRUN_SECONDS``.  Measured: ``benchmarks/results/time_limits.md``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpmagic.domain.schema import Schema
from dpmagic.domain.sets import Box
from dpmagic.overlap.encoding import BoxStore, build_problem
from dpmagic.overlap.milp import milp_overlap
from dpmagic.overlap.portfolio import Instance, PortfolioConfig, run_portfolio, witness_row
from dpmagic.overlap.result import OverlapResult
from dpmagic.overlap.rounding import ProblemRounding, float_slack, is_exact, sum_down

__all__ = ["OverlapResult", "max_overlap", "solve_overlap", "milp_overlap", "float_slack", "PortfolioConfig"]

#: atoms of categorical columns are merged (identical membership) when at most this many columns are used
DEDUPE_MAX_COLUMNS = 200
#: a bounded step that cannot be interrupted (a load tensor) may end this late after the deadline:
#: ``OVERRUN_SHARE · time_limit + OVERRUN_SECONDS`` (it is skipped when its estimate exceeds that)
OVERRUN_SHARE = 0.05
OVERRUN_SECONDS = 0.1


def solve_overlap(
    store: BoxStore,
    ids: np.ndarray | None = None,
    region: Box | None = None,
    *,
    time_limit: float = 10.0,
    upper_hint: float = math.inf,
    method: str = "auto",
    floor: float = -math.inf,
    config: PortfolioConfig | None = None,
    terms: np.ndarray | None = None,
    resume: dict[str, Any] | None = None,
    soft_floor: float = -math.inf,
) -> OverlapResult:
    """Max over rows x (in ``region``) of the load of the nodes ``ids`` (default: all registered).

    ``upper_hint`` is any proven upper bound the caller knows (exact clique, colouring, Σw); it only
    tightens ``upper`` on a timeout.  ``method``: ``"auto"`` (tensor, else the portfolio of
    :mod:`.portfolio`: column branch and bound and graph search in a feature-chosen order, then HiGHS),
    ``"bb"`` (tensor / column branch and bound only), ``"graph"`` (tensor / graph search only) or
    ``"milp"`` (HiGHS only).  ``time_limit`` is a wall-clock budget for the whole call (encoding included);
    on a timeout ``upper`` is the smallest *proven* bound (search frontier, LP / MILP dual bound,
    ``upper_hint``, Σw) and ``lower`` the exact load of the best witness row found.

    ``floor``: the caller only needs the maximum when it exceeds ``floor`` (an admission: γ_new =
    max(γ_old, w + max over the box), so loads ≤ γ_old − w do not matter).  The branch and bounds then prune
    against it from the start; the result is either exact (a witness above the floor) or the proven
    interval ``[witness load, floor rounded up]``.  Only the searches use it (the tensor is exact anyway).
    ``config``: the portfolio's configuration (default :class:`~.portfolio.PortfolioConfig`), restricted to
    the steps of ``method``.  ``terms`` (indexed by node id, optional): per node a proven bound of the load of
    every row whose last covering node it is (the engine's admission terms); the graph search cuts branches
    that meet no node with a term above its best (:func:`~.gsearch.graph_search`) and the scoped search prunes
    live sets without one.  ``resume`` (optional, the caller's, one per problem: the same ``store`` nodes ``ids``
    and ``region`` at every call): the encoded problem and a timed-out scoped search are kept there, and the next
    call resumes that search instead of encoding and searching again (issue 28: re-tightening a pending term).
    ``soft_floor`` (≤ ``floor``): a bound worth proving if it comes cheaply, not needed (a degraded admission: a
    region proven at most γ.lower − w leaves no pending term); only the pairwise LP's stopping target uses it.
    """
    cfg = (config or PortfolioConfig()).with_method(method)
    t0 = time.perf_counter()
    deadline = t0 + time_limit
    if region is not None and region.is_empty():
        return OverlapResult(0.0, 0.0, True, None, (), "empty-region", time.perf_counter() - t0)
    if resume is not None and "prob" in resume:
        ids, prob = resume["ids"], resume["prob"]
    else:
        if ids is None:
            ids = np.flatnonzero(store.alive[: store.n])
        ids = np.asarray(ids, dtype=np.int64)
        if region is not None:
            ids = ids[store.overlap_mask(region)[ids]]
        else:
            ids = ids[store.alive[ids]]
        # many constrained columns: graph-search territory, where merging indistinguishable values (one sort per
        # column) costs more than it saves
        used_cols = sum(1 for st in store.cols.values() if len(ids) and bool(st.constrained[ids].any()))
        prob = build_problem(store, ids, region, dedupe=used_cols <= DEDUPE_MAX_COLUMNS)
        if resume is not None:
            resume["ids"], resume["prob"] = ids, prob
    rnd = ProblemRounding.of(prob)
    atoms: dict[str, int] = {}
    upper = math.inf
    used = "empty"
    if prob.n > 0:
        grace = OVERRUN_SHARE * time_limit + OVERRUN_SECONDS
        inst = Instance.of(store, prob, ids)
        vterms = None if terms is None else np.asarray(terms, dtype=np.float64)[ids]
        atoms, upper, _, used = run_portfolio(
            inst, deadline, rnd, cfg, grace, floor, upper_hint, vterms, resume, soft_floor=min(soft_floor, floor)
        )
    else:
        upper = 0.0
    witness = witness_row(store, prob, atoms)
    mask = store.contains_mask(witness)
    members = ids[mask[ids]]
    lower = sum_down(store.weights[members].tolist())  # the exact load of the witness, rounded down
    upper = rnd.snap(min(upper, upper_hint, rnd.total))  # Σw (rounded up) always bounds γ
    upper = max(upper, lower)
    exact = is_exact(lower, upper)
    return OverlapResult(lower, upper, exact, witness, tuple(int(i) for i in members), used, time.perf_counter() - t0)


def max_overlap(
    boxes: Sequence[Box],
    weights: Sequence[float] | np.ndarray | None = None,
    schema: Schema | None = None,
    time_limit: float = 10.0,
    *,
    method: str = "auto",
    config: PortfolioConfig | None = None,
) -> OverlapResult:
    """Weighted maximum overlap γ_w of ``boxes`` (weights default to 1), with a witness row.

    Reference: docs/design.md §2, Smith et al. 2022 §4 and §6.2.  Complexity: the load tensor costs
    ``O(n·cells_A + cells)``; otherwise exponential in the worst case (NP-hard), bounded by ``time_limit``
    after which ``exact=False`` and ``[lower, upper]`` is the best proven interval.
    """
    t0 = time.perf_counter()
    store = BoxStore(schema)
    w = np.ones(len(boxes)) if weights is None else np.asarray(weights, dtype=np.float64)
    store.extend(list(boxes), w)
    left = time_limit - (time.perf_counter() - t0)  # the limit covers the encoding of the boxes too
    return solve_overlap(store, time_limit=left, method=method, config=config)
