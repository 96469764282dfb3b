"""Exact weighted maximum overlap γ_w = max_x Σ_{q covers x} w_q, with a witness row.

docs/design.md §2; Smith et al. 2022 §4–6 (γ is NP-hard; §6.2 adapts clique branch and bound to overlaps).  The solver
works on the compressed domain of :func:`dpmagic.overlap.encoding.build_problem` and chooses, per
(sub-)instance:

1. **Load tensor** (``_tensor``) when the product of atom counts is small: the axis with most atoms is
   the *ordered axis* B; the other axes A are combined into a Khatri–Rao (row-wise Kronecker) membership
   matrix ``K`` (n × Π_A a_c); the loads are ``cumsum(Dᵀ (w·K))`` where D is the sparse ±1 difference
   matrix of the queries' runs along B (a prefix is two non-zeros).  Cost ``O(n·cells_A + nnz(D)·cells_A +
   cells)``.  The census workload (Income × 5·4·7·2 cells) is one such product.
2. **Branch and bound over columns** (``_BranchAndBound``): fix one column to one atom at a time
   (atoms in order of decreasing compatible weight), dropping the queries that miss it.  Bound at a node:
   ``min over free columns c of max over atoms v of the alive weight covering v`` (column sums; docs/design.md
   §2).  A node whose bound equals its alive weight is a leaf (all alive queries share a point); a node whose
   remaining tensor is small is finished by (1).  Connected components of the query graph are solved
   separately, heaviest first.  Strong when few columns carry many constraints (small atom product).
3. **Branch and bound over the query graph** (:mod:`dpmagic.overlap.gsearch`): Smith et al. 2022's Algorithm 1 /
   MCQ with a weighted colouring bound, keeping the per-column intersection of the chosen boxes so that
   only *overlapping* sets are explored.  Strong on sparse query graphs (many columns, each query
   constraining some of them): e.g. 30–1,000 columns, t = 100–1,000 in milliseconds to ~1 s.
4. **MILP** (:func:`milp_overlap`, HiGHS through ``scipy.optimize.milp``): one-hot ``y[c, atom]``,
   ``z_q ≤ Σ_{atom ∈ q_c} y[c, atom]``, maximise ``Σ w_q z_q``.  Its incumbent is a candidate witness, its
   dual bound plus a tolerance margin a proven upper bound; so is the LP relaxation's optimum plus margin.

Portfolio (:func:`_portfolio`, steps chosen by :func:`_plan` from instance features):

* the load tensor alone when it is cheap (estimated under ``PROBE_MIN_SECONDS``: the census workload);
* otherwise, when the query graph is cheap to build, a short *probe* of the graph search first, capped at
  ``PROBE_SHARE`` of the tensor's estimated time (``TENSOR_SECONDS_PER_ENTRY`` per Khatri–Rao entry).  On
  analyst logs (many columns, mostly single ranges and categories) it is exact in milliseconds where the
  tensor or the column search take 0.1–0.6 s; where it does not finish (dense graphs over small domains) it
  costs at most that share and hands its witness on as the incumbent;
* then the tensor if it fits (``TENSOR_CELLS``, ``KR_ENTRIES``), else the searches (2) and (3) one after the
  other — the column search first when ``log₁₀ Π a_c ≤ COLUMN_FIRST_LOG10`` (few, small columns), the graph
  search first otherwise — the first with ``FIRST_SHARE`` of the time left, each seeded with the best
  witness load so far; then HiGHS (MILP, or the LP relaxation when less than ``MILP_MIN_SECONDS`` is left)
  on what remains, if the problem is small enough for it (``MILP_MAX_VARS``, ``MILP_MAX_NNZ``).

The time limit is a wall-clock budget for the whole call, encoding included: no phase is started after the
deadline, and HiGHS only gets the time left.  The cost constants only choose the order of exact methods;
they never affect a result.

On a timeout the result is the best proven interval ``[lower, upper]`` with ``exact=False``: ``lower`` is
the exact load of a concrete witness row, ``upper`` the smallest proven bound (branch-and-bound frontier,
LP relaxation, and whatever the caller passes in ``upper_hint`` — e.g. an exact clique or a colouring).

Size (≈ 800 lines): the tensor, the column branch and bound, HiGHS and the portfolio share the compressed
problem, its rounding (:class:`_Rounding`) and the witness evaluation; splitting them would export those
private pieces (issue 12 asks for fewer cross-module private imports, not more).

Floating point (:mod:`.rounding`): loads inside the solvers are float64 sums.  Every reported ``upper`` goes
through one function, :func:`~.rounding.proven_upper` (via :class:`_Rounding`): the computed value plus twice
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from dpmagic.schema import Schema
from dpmagic.sets import Box

from .deadline import SearchTimeout
from .encoding import BoxStore, Problem, _packed_words, build_problem, words_intersect
from .graph import components
from .gsearch import GRAPH_MAX_N, GraphData, graph_data, graph_search
from .rounding import grid_of, is_exact, proven_upper, sum_down, sum_up

__all__ = ["OverlapResult", "max_overlap", "solve_overlap", "milp_overlap", "float_slack"]

#: cells of a load tensor evaluated in one piece
TENSOR_CELLS = 6_000_000
#: entries of the Khatri–Rao matrix n × cells_A built in one piece
KR_ENTRIES = 24_000_000
#: a tensor leaf of the column branch and bound at the size limits takes up to about this long (seconds)
TENSOR_LEAF_SECONDS = 1.0
#: try connected components when the sub-problem is at most this large (pairwise test is O(n² m))
COMPONENT_MAX_N = 4000
#: rows of the pairwise overlap test computed between two deadline checks
_COMP_BLOCK = 512
#: atoms of categorical columns are merged (identical membership) when at most this many columns are used
DEDUPE_MAX_COLUMNS = 200
#: share of the remaining time given to the first search of the portfolio
FIRST_SHARE = 0.5
#: share of the time then left given to the second search when HiGHS follows (it gets the rest)
MILP_RESERVE_FROM = 0.6
#: the column branch and bound goes first when log10 of the atom product is at most this
COLUMN_FIRST_LOG10 = 7.0
#: HiGHS is only tried on problems up to this size (variables, non-zeros of the constraint matrix)
MILP_MAX_VARS = 60_000
MILP_MAX_NNZ = 2_000_000
#: measured costs on this 2-core machine (for choosing steps, not for safety): seconds per Khatri–Rao entry
#: or cell of a load tensor, and per 64-bit word AND of the query-graph build
TENSOR_SECONDS_PER_ENTRY = 1e-8
GRAPH_SECONDS_PER_WORD = 2e-9
#: a graph-search probe before a tensor or column search gets this share of that search's estimated time
#: (at least PROBE_MIN_SECONDS); it is only tried when building the query graph costs at most this share of it
PROBE_SHARE = 0.25
PROBE_MIN_SECONDS = 0.01
#: HiGHS relative gap (the dual bound, not the incumbent, is used) and the per-term tolerance of its margin
MILP_REL_GAP = 1e-9
MILP_TOL = 1e-6
#: HiGHS gets this share of the time left minus this many seconds (it stops up to ~20% late)
MILP_TIME_SHARE = 0.8
MILP_TIME_OVERHEAD = 0.02
#: HiGHS's overrun of its time limit per non-zero of the constraint matrix (MILP / LP), measured on this
#: 2-core machine with presolve off, and the least time worth giving it
MILP_OVERRUN_PER_NNZ = 1.2e-5
LP_OVERRUN_PER_NNZ = 3e-6
HIGHS_MIN_SECONDS = 0.05
#: HiGHS's presolve (not interruptible) is only used when the time left is at least this per non-zero
#: (measured: 7 s at 48k non-zeros, 22 s at 87k, for a 1 s limit)
PRESOLVE_SECONDS_PER_NNZ = 3e-4
#: a bounded step that cannot be interrupted (a load tensor) may end this late after the deadline:
#: ``OVERRUN_SHARE · time_limit + OVERRUN_SECONDS`` (it is skipped when its estimate exceeds that)
OVERRUN_SHARE = 0.05
OVERRUN_SECONDS = 0.1
#: seconds needed to start the MILP / the LP relaxation at all
MILP_MIN_SECONDS = 0.3
LP_MIN_SECONDS = 0.05


@dataclass(frozen=True)
class OverlapResult:
    """Result of a maximum-overlap computation.

    ``lower`` is the exact load of ``witness`` (a concrete row, one value per constrained column);
    ``upper`` is a proven upper bound (charge this); ``members`` are the node ids covering the witness.
    """

    lower: float
    upper: float
    exact: bool
    witness: dict[str, Any] | None
    members: tuple[int, ...]
    method: str
    seconds: float

    @property
    def value(self) -> float:
        """The value an accountant charges: ``upper``."""
        return self.upper


@dataclass(frozen=True)
class _Rounding:
    """Proven upper bounds for the float64 values computed on one problem (:mod:`.rounding`).

    Every value a solver computes (a load, a column sum, a colouring bound, a tensor cell) is a float64
    evaluation with at most ``n_terms`` additions of ± weights whose partial sums are bounded by ``total``
    (Σw rounded up): ``n`` for a sum of weights, ``n`` more for the tensor's difference rows and the pruning
    comparisons, plus the longest cumulative-sum axis.  :meth:`up` turns such a value into a proven bound.
    """

    n_terms: int
    total: float
    grid: float

    @classmethod
    def of(cls, prob: Problem) -> _Rounding:
        w = np.asarray(prob.weights, dtype=np.float64)
        longest = max((c.a for c in prob.columns), default=0)
        return cls(2 * len(w) + longest + 4, sum_up(w.tolist()), grid_of(w))

    def up(self, x: float) -> float:
        """A float ≥ the exact value whose float64 evaluation on this problem gave ``x``."""
        return proven_upper(x, self.n_terms, self.total, self.grid)

    @property
    def slack(self) -> float:
        """An absolute bound on the rounding error of any such evaluation (0 for exact lattice sums)."""
        if self.grid > 0.0 and self.total / self.grid < 2.0**52:
            return 0.0
        return 2.0 * (self.n_terms + 2) * 2.0**-53 * self.total


def float_slack(weights: np.ndarray) -> float:
    """Absolute bound on the rounding error of float64 sums of ``weights`` (0 when every such sum is exact)."""
    w = np.asarray(weights, dtype=np.float64)
    if len(w) == 0:
        return 0.0
    grid = grid_of(w)
    total = sum_up(w.tolist())
    if grid > 0.0 and total / grid < 2.0**52:
        return 0.0
    return 2.0 * (2 * len(w) + 4) * 2.0**-53 * total


# ---------------------------------------------------------------------------------------------------------
# load tensor
# ---------------------------------------------------------------------------------------------------------
def _tensor_cost(prob: Problem) -> tuple[float, float]:
    """(cells, Khatri–Rao entries) of evaluating ``prob`` as one tensor."""
    if not prob.columns:
        return 1.0, 0.0
    a = [float(c.a) for c in prob.columns]
    b = int(np.argmax(a))
    cells_a = math.prod(x for i, x in enumerate(a) if i != b) if len(a) > 1 else 1.0  # inf on overflow
    return cells_a * a[b], cells_a * max(prob.n, 1)


def _tensor(prob: Problem) -> tuple[float, dict[int, int]]:
    """Maximum load over the whole compressed domain of ``prob`` and one maximising atom per column."""
    cols = prob.columns
    w = prob.weights
    n = prob.n
    if not cols:
        return float(w.sum()), {}
    b = int(np.argmax([c.a for c in cols]))
    A = [i for i in range(len(cols)) if i != b]
    K = np.ones((n, 1), dtype=bool)
    for i in A:
        K = (K[:, :, None] & cols[i].dense()[:, None, :]).reshape(n, -1)
    cells_a = K.shape[1]
    Kw = K * w[:, None]
    cb = cols[b]
    if cb.is_runs:
        rs, re = cb.rs, cb.re
        slots = rs.shape[1]  # type: ignore[union-attr]
        qi = np.repeat(np.arange(n), slots)
        keep = (rs < re).ravel()  # type: ignore[operator]
        qi = qi[keep]
        r = np.concatenate([rs.ravel()[keep], re.ravel()[keep]])  # type: ignore[union-attr]
        data = np.concatenate([np.ones(len(qi)), -np.ones(len(qi))])
        D = sp.csr_matrix((data, (r, np.concatenate([qi, qi]))), shape=(cb.a + 1, n))
        L = np.cumsum(D @ Kw, axis=0)[:-1]
    else:
        L = cb.M.T.astype(np.float64) @ Kw  # type: ignore[union-attr]
    flat = int(np.argmax(L))
    value = float(L.flat[flat])
    ib, ia = divmod(flat, cells_a)
    atoms = {b: ib}
    dims = [cols[i].a for i in A]
    if dims:
        for i, v in zip(A, np.unravel_index(ia, dims)):
            atoms[i] = int(v)
    return value, atoms


def _tensor_named(prob: Problem) -> tuple[float, dict[str, int]]:
    """:func:`_tensor` with the maximising atoms keyed by column name."""
    value, atoms = _tensor(prob)
    return value, {prob.columns[i].name: v for i, v in atoms.items()}


# ---------------------------------------------------------------------------------------------------------
# branch and bound over columns
# ---------------------------------------------------------------------------------------------------------
def _components(
    prob: Problem, adjacency: np.ndarray | None = None, deadline: float = math.inf
) -> list[np.ndarray] | None:
    """Connected components of the query graph of ``prob`` (None if not worth computing).

    The pairwise test is built in blocks of ``_COMP_BLOCK`` rows, checking ``deadline`` between blocks
    (raises :class:`SearchTimeout`).  ``O(n² m)`` elementary operations, ``O(n²)`` bits of memory.
    """
    n = prob.n
    if adjacency is not None and n >= 2:
        return _dense_components(adjacency, deadline)
    if n < 2 or n > COMPONENT_MAX_N:
        return None
    packed = [_packed_words(c.M.T) if c.M is not None else None for c in prob.columns]
    adj = np.ones((n, n), dtype=bool)
    for s0 in range(0, n, _COMP_BLOCK):
        s1 = min(n, s0 + _COMP_BLOCK)
        blk = adj[s0:s1]
        for c, x in zip(prob.columns, packed):
            if time.perf_counter() > deadline:
                raise SearchTimeout
            if x is not None:
                blk &= words_intersect(x[s0:s1], x)
            else:
                rs, re = c.rs, c.re
                hit = np.zeros((s1 - s0, n), dtype=bool)
                for i in range(rs.shape[1]):  # type: ignore[union-attr]
                    for j in range(rs.shape[1]):  # type: ignore[union-attr]
                        hit |= (rs[s0:s1, i, None] < re[None, :, j]) & (rs[None, :, j] < re[s0:s1, i, None])  # type: ignore[index]
                blk &= hit
    return _dense_components(adj, deadline)


def _dense_components(adj: np.ndarray, deadline: float) -> list[np.ndarray] | None:
    """Connected components of a dense boolean adjacency (None if connected): :func:`.graph.components`."""
    comps = components(adj, deadline)
    return None if len(comps) <= 1 else comps


class _BranchAndBound:
    def __init__(self, deadline: float, slack: float) -> None:
        self.deadline = deadline
        self.slack = slack
        self.best = -1.0
        self.best_atoms: dict[str, int] = {}
        self.frames: list[list[Any]] = []  # [bound, sorted child bounds, next index]
        self.nodes = 0
        self.used_tensor = False

    def _record(self, value: float, atoms: dict[str, int]) -> None:
        if value > self.best:
            self.best = value
            self.best_atoms = dict(atoms)

    def frontier_upper(self) -> float:
        if not self.frames:
            return math.inf
        ub = self.best
        for bound, children, i in self.frames:
            if children is None:
                ub = max(ub, bound)
            elif i < len(children):
                ub = max(ub, min(bound, float(children[i:].max())))
        return ub

    def solve(self, prob: Problem, fixed: dict[str, int], parent_bound: float) -> None:
        self.nodes += 1
        w = prob.weights
        if prob.n == 0:
            return
        total = float(w.sum())
        if total <= self.best:
            return
        cols = prob.columns
        if not cols:
            self._record(total, fixed)
            return
        frame: list[Any] = [min(total, parent_bound), None, 0]
        self.frames.append(frame)
        self._expand(prob, fixed, parent_bound, frame, total)
        self.frames.pop()  # not reached on a timeout: the frames describe the unexplored frontier

    def _expand(
        self, prob: Problem, fixed: dict[str, int], parent_bound: float, frame: list[Any], total: float
    ) -> None:
        w = prob.weights
        cols = prob.columns
        sums = [c.colsum(w) for c in cols]
        maxes = [float(s.max()) for s in sums]
        bound = min(min(maxes), total, parent_bound)
        frame[0] = bound
        if bound <= self.best:
            return
        if time.perf_counter() > self.deadline:
            raise SearchTimeout  # this node stays on the frontier with its bound
        if min(maxes) >= total - self.slack - 1e-300:
            picks = {c.name: int(np.argmax(s)) for c, s in zip(cols, sums)}
            if all(c.covers(picks[c.name]).all() for c in cols):
                self._record(total, {**fixed, **picks})
                return
        cells, kr = _tensor_cost(prob)
        # a tensor leaf is one uninterruptible numpy call: only start it if it fits before the deadline
        scale = min(1.0, (self.deadline - time.perf_counter()) / TENSOR_LEAF_SECONDS)
        if cells <= TENSOR_CELLS * scale and kr <= KR_ENTRIES * scale:
            self.used_tensor = True
            value, named = _tensor_named(prob)
            self._record(value, {**fixed, **named})
            return
        # branch on the most discriminating column (ties: fewest atoms); keep a long axis for tensors
        order = sorted(range(len(cols)), key=lambda i: (maxes[i], cols[i].a))
        if len(cols) > 1:
            longest = max(range(len(cols)), key=lambda i: cols[i].a)
            if cols[longest].a > 64:
                order = [i for i in order if i != longest] or order
        j = order[0]
        cs = sums[j]
        atoms_sorted = np.argsort(-cs, kind="stable")
        child_bounds = np.minimum(cs[atoms_sorted], bound)
        frame[1] = child_bounds
        rest = [c for i, c in enumerate(cols) if i != j]
        name = cols[j].name
        for k, v in enumerate(atoms_sorted):
            frame[2] = k
            cb = float(child_bounds[k])
            if cb <= self.best:
                break
            rows = np.flatnonzero(cols[j].covers(int(v)))
            child = Problem(prob.ids[rows], w[rows], [c.sub(rows) for c in rest], prob.defaults)
            self.solve(child, {**fixed, name: int(v)}, cb)
        frame[2] = len(child_bounds)


# ---------------------------------------------------------------------------------------------------------
# MILP (docs/design.md §2) and its LP relaxation
# ---------------------------------------------------------------------------------------------------------
def milp_overlap(
    prob: Problem, time_limit: float, *, relax: bool = False
) -> tuple[float | None, dict[str, int] | None, float | None]:
    """Solve the max-overlap integer program of ``prob`` with HiGHS.

    Returns ``(incumbent objective or None, atoms of the incumbent or None, proven upper bound or None)``.
    The incumbent is only a *candidate* witness (its load is recomputed exactly by the caller); the upper
    bound is never the incumbent's objective but HiGHS's dual bound (``mip_dual_bound``; with ``relax=True``
    the LP relaxation's optimum) plus :func:`milp_margin`, rounded up (:func:`~.rounding.proven_upper`).
    Weights are scaled by a power of two (exact) so the largest is in ``[0.5, 1)`` before HiGHS sees them:
    its tolerances are absolute.  ``time_limit`` (seconds, wall clock) covers building the model and the
    solve; HiGHS gets only what is left.  Variables: ``y[c, v]`` (one-hot per column), ``z_q ∈ [0, 1]``.
    Size ``Σ a_c + n`` variables and ``Σ_c (1 + #queries constraining c)`` rows.
    """
    from scipy.optimize import Bounds as LBounds
    from scipy.optimize import LinearConstraint, milp

    deadline = time.perf_counter() + time_limit
    n = prob.n
    cols = prob.columns
    w = np.asarray(prob.weights, dtype=np.float64)
    grid = grid_of(w)
    if n == 0:
        return 0.0, {}, 0.0
    if not cols:  # no query constrains any column: every row is covered by all of them
        return float(w.sum()), {}, sum_up(w.tolist())
    wmax = float(w.max())
    scale = math.ldexp(1.0, -math.frexp(wmax)[1]) if wmax > 0 else 1.0  # largest scaled weight in [0.5, 1)
    ws = w * scale
    offs = np.cumsum([0] + [c.a for c in cols])
    ny = int(offs[-1])
    nvar = ny + n
    rows_i: list[np.ndarray] = []
    rows_j: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    lo: list[np.ndarray] = []
    hi: list[np.ndarray] = []
    r = 0
    for ci, c in enumerate(cols):
        if time.perf_counter() > deadline:
            return None, None, None
        # one-hot
        rows_i.append(np.full(c.a, r))
        rows_j.append(np.arange(offs[ci], offs[ci + 1]))
        vals.append(np.ones(c.a))
        lo.append(np.array([1.0]))
        hi.append(np.array([1.0]))
        r += 1
        M = c.dense()
        constrained = np.flatnonzero(~M.all(axis=1))
        if len(constrained) == 0:
            continue
        sub = M[constrained]
        qq, vv = np.nonzero(sub)
        row_of = r + np.arange(len(constrained))
        rows_i.append(row_of)
        rows_j.append(ny + constrained)
        vals.append(np.ones(len(constrained)))
        rows_i.append(row_of[qq])
        rows_j.append(offs[ci] + vv)
        vals.append(-np.ones(len(qq)))
        lo.append(np.full(len(constrained), -np.inf))
        hi.append(np.zeros(len(constrained)))
        r += len(constrained)
    A = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows_i), np.concatenate(rows_j))), shape=(r, nvar))
    cobj = np.concatenate([np.zeros(ny), -ws])
    integrality = np.zeros(nvar)
    if not relax:
        integrality[:ny] = 1
    # HiGHS overruns its own limit: its MIP presolve is not interrupted (a 1 s limit ran 7-22 s on dense
    # t = 2,000-3,000 instances), so presolve is only on when the time left covers PRESOLVE_SECONDS_PER_NNZ per
    # non-zero (it pays on small hard models); without it HiGHS still stops late, by about
    # ``*_OVERRUN_PER_NNZ · nnz`` (measured: a 0.3 s limit ran 0.5 s at 48k non-zeros, 1.5 s at 120k), so it
    # only gets the time left minus that, and is not started when that is below ``HIGHS_MIN_SECONDS``
    nnz = float(sum(len(v) for v in vals))
    per_nnz = LP_OVERRUN_PER_NNZ if relax else MILP_OVERRUN_PER_NNZ
    left = MILP_TIME_SHARE * (deadline - time.perf_counter()) - MILP_TIME_OVERHEAD - per_nnz * nnz
    if left < HIGHS_MIN_SECONDS:
        return None, None, None
    presolve = left >= PRESOLVE_SECONDS_PER_NNZ * nnz
    res = milp(
        cobj,
        constraints=LinearConstraint(A, np.concatenate(lo), np.concatenate(hi)),
        integrality=integrality,
        bounds=LBounds(np.zeros(nvar), np.ones(nvar)),
        options={"time_limit": left, "disp": False, "mip_rel_gap": MILP_REL_GAP, "presolve": presolve},
    )
    margin = milp_margin(nvar, r)
    bound_s: float | None = None  # proven (up to HiGHS's tolerances) upper bound, scaled units
    if relax:
        if res.status == 0 and res.fun is not None and np.isfinite(res.fun):
            bound_s = -float(res.fun)
    else:
        dual = getattr(res, "mip_dual_bound", None)
        if dual is not None and np.isfinite(dual):
            bound_s = -float(dual)
    upper = None
    if bound_s is not None:
        # scaled → unscaled is exact (power of two); the margin covers HiGHS's absolute tolerances
        upper = proven_upper((bound_s + margin) / scale, 2, grid=grid)
    if relax or res.x is None:
        return None, None, upper
    x = res.x
    atoms = {c.name: int(np.argmax(x[offs[i] : offs[i + 1]])) for i, c in enumerate(cols)}
    return (float(-res.fun) / scale if res.fun is not None else None), atoms, upper


def milp_margin(nvar: int, nrows: int) -> float:
    """Margin added to HiGHS's dual bound (in scaled units, largest weight in ``[0.5, 1)``).

    HiGHS's bounds hold up to its absolute tolerances (primal/dual feasibility 1e-7, MIP feasibility and
    absolute gap 1e-6): a dual solution infeasible by δ per variable or row moves the weak-duality bound by at
    most δ per variable (all in ``[0, 1]``) and per row.  ``MILP_TOL`` (≥ every such tolerance) times the
    number of variables and rows, plus the absolute gap, is a margin covering all of them together.
    """
    return MILP_TOL * (nvar + nrows + 2)


# ---------------------------------------------------------------------------------------------------------
# portfolio: column branch and bound, graph search, HiGHS
# ---------------------------------------------------------------------------------------------------------
def _column_bb(
    prob: Problem, deadline: float, rnd: _Rounding, incumbent: float, adjacency: np.ndarray | None
) -> tuple[dict[str, int], float, bool, str]:
    """Column branch and bound (per component); returns (atoms or {}, proven upper, exact, method tag)."""
    bb = _BranchAndBound(deadline, rnd.slack)
    bb.best = incumbent
    used = "branch-and-bound"
    exact = True
    try:
        comps = _components(prob, adjacency, deadline)
        if comps is not None:
            used += "+components"
            comps.sort(key=lambda r: -float(prob.weights[r].sum()))
            totals = np.array([float(prob.weights[r].sum()) for r in comps])
            top: list[Any] = [math.inf, totals, 0]
            bb.frames.append(top)  # unexplored components stay on the frontier
            for k, rows in enumerate(comps):
                top[2] = k
                if totals[k] <= bb.best:
                    break
                bb.solve(prob.sub(rows), {}, math.inf)
            bb.frames.pop()
        else:
            bb.solve(prob, {}, math.inf)
        upper = rnd.up(bb.best)
    except SearchTimeout:
        exact = False
        upper = rnd.up(bb.frontier_upper())
        bb.frames.clear()
    if bb.used_tensor:
        used += "+tensor"
    return bb.best_atoms, upper, exact, used


def _milp_size(prob: Problem) -> tuple[int, float]:
    """(variables, estimated non-zeros) of the MILP of ``prob``."""
    nvar = sum(c.a for c in prob.columns) + prob.n
    nnz = 0.0
    for c in prob.columns:
        if c.M is not None:
            nnz += float(c.M.sum())
        else:
            nnz += float(np.sum(c.re - c.rs))  # type: ignore[operator]
    return nvar, nnz


def _graph_data_cost(store: BoxStore, prob: Problem, ids: np.ndarray) -> float:
    """Estimated seconds of :func:`graph_data` on ``prob``: ``Σ_c n_c² ⌈a_c/64⌉`` word ANDs."""
    words = 0.0
    for c in prob.columns:
        st = store.cols.get(c.name)
        n_c = float(st.constrained[ids].sum()) if st is not None else float(prob.n)
        words += n_c * n_c * math.ceil(c.a / 64)
    return GRAPH_SECONDS_PER_WORD * words


def _plan(store: BoxStore, prob: Problem, ids: np.ndarray, method: str) -> list[tuple[str, float | None]]:
    """The steps of :func:`_portfolio`: ``(name, time cap in seconds or None)``; see the module docstring."""
    cells, kr = _tensor_cost(prob)
    tensor_ok = cells <= TENSOR_CELLS and kr <= KR_ENTRIES
    graph_ok = prob.n <= GRAPH_MAX_N
    if method == "bb":
        return [("tensor", None)] if tensor_ok else [("bb", None)]
    if method == "graph":
        return [("tensor", None)] if tensor_ok else [("graph", None)] if graph_ok else [("bb", None)]
    tensor_s = TENSOR_SECONDS_PER_ENTRY * (cells + kr)  # inf when the atom product overflows
    log_cells = float(sum(math.log10(max(c.a, 1)) for c in prob.columns))
    if graph_ok and not tensor_ok and log_cells > COLUMN_FIRST_LOG10:
        return [("graph", None), ("bb", None)]
    steps: list[tuple[str, float | None]] = []
    if graph_ok and tensor_s > PROBE_MIN_SECONDS:
        probe = max(PROBE_MIN_SECONDS, PROBE_SHARE * tensor_s)
        if _graph_data_cost(store, prob, ids) <= PROBE_SHARE * probe:
            steps.append(("graph", probe))
    if tensor_ok:
        steps.append(("tensor", None))
    else:
        steps.append(("bb", None))
        if graph_ok:
            steps.append(("graph", None))
    return steps


def _portfolio(
    store: BoxStore,
    prob: Problem,
    ids: np.ndarray,
    deadline: float,
    rnd: _Rounding,
    method: str,
    grace: float,
    floor: float = -math.inf,
    target: float = math.inf,
) -> tuple[dict[str, int], float, bool, str]:
    """Exact γ of a compressed problem within ``deadline`` (wall clock).

    Steps (:func:`_plan`, from instance features): the load tensor when it is small; otherwise a short
    graph-search probe (capped at ``PROBE_SHARE`` of the tensor's estimated time, and only when the query
    graph is cheap to build) before the tensor or the column branch and bound; the graph search first when
    the atom product is large.  Each search is seeded with the best witness so far; then HiGHS (MILP, or
    its LP relaxation when little time is left) if the problem is small enough.  Returns (atoms of the
    best witness, proven upper bound, exact, tag).  ``grace``: seconds a bounded tensor step may run past
    the deadline (it is skipped when its estimated time exceeds the time left plus ``grace``).
    """
    best_val = -math.inf
    best_atoms: dict[str, int] = {}
    upper = math.inf
    exact = False
    tags: list[str] = []

    def offer(at: dict[str, int]) -> None:
        nonlocal best_val, best_atoms
        if not at and best_atoms:
            return
        val = _load(store, ids, _witness(store, prob, at))  # rounded down
        if val > best_val:
            best_val, best_atoms = val, at

    steps = _plan(store, prob, ids, method)
    if steps == [("tensor", None)]:
        value, named = _tensor_named(prob)
        return named, rnd.up(value), True, "tensor"
    # a cheap first witness: a row inside the heaviest box, per column its atom of largest covering weight
    q0 = int(np.argmax(prob.weights))
    first: dict[str, int] = {}
    for c in prob.columns:
        if c.M is not None:
            inside = c.M[q0]
        else:
            inside = np.zeros(c.a, dtype=bool)
            for a0, b0 in zip(c.rs[q0].tolist(), c.re[q0].tolist()):  # type: ignore[index]
                inside[a0:b0] = True
        first[c.name] = int(np.argmax(np.where(inside, c.colsum(prob.weights) + 1.0, 0.0)))
    offer(first)
    nvar, nnz = _milp_size(prob)
    use_milp = method == "auto" and nvar <= MILP_MAX_VARS and nnz <= MILP_MAX_NNZ
    gdata: GraphData | None = None
    for k, (m, cap) in enumerate(steps):
        if m == "tensor":
            # one bounded numpy computation (TENSOR_CELLS, KR_ENTRIES): it may run past the deadline by ``grace``
            cells, kr = _tensor_cost(prob)
            if TENSOR_SECONDS_PER_ENTRY * (cells + kr) > deadline - time.perf_counter() + grace:
                continue
            value, named = _tensor_named(prob)
            tags.append("tensor")
            offer(named)
            upper = min(upper, rnd.up(value))
            exact = True
            break
        now = time.perf_counter()
        left = deadline - now
        if left <= 0:
            continue  # no time for a search; a tensor step later in the plan still runs
        if cap is not None:
            share = min(cap, left * FIRST_SHARE)
        elif k == len(steps) - 1:
            share = left * (MILP_RESERVE_FROM if use_milp else 1.0)
        else:
            share = left * FIRST_SHARE
        sub_deadline = now + share
        if m == "graph":
            if gdata is None:
                try:
                    gdata = graph_data(prob, sub_deadline)
                except SearchTimeout:
                    continue
            r = graph_search(prob, sub_deadline, data=gdata, best=max(best_val, floor), target=target)
            tags.append("graph-search" if cap is None else "graph-probe")
            offer({prob.columns[ci].name: a for ci, a in r.atoms.items()} if r.atoms else {})
            upper = min(upper, rnd.up(r.upper))
            if r.exact:
                exact = True
                break
        else:
            at, ub, ex, tag = _column_bb(prob, sub_deadline, rnd, max(best_val, floor), gdata.adj if gdata else None)
            tags.append(tag)
            offer(at)
            upper = min(upper, ub)
            if ex:
                exact = True
                break
    if not exact and method == "auto":
        left = deadline - time.perf_counter()
        try:
            ub = None
            if use_milp and left > MILP_MIN_SECONDS:
                val, at, ub = milp_overlap(prob, left)
                if at is not None or ub is not None:
                    tags.append("milp")
                if at is not None:
                    offer(at)
                if ub is not None:
                    upper = min(upper, ub)
            left = deadline - time.perf_counter()
            if ub is None and nvar <= MILP_MAX_VARS and nnz <= MILP_MAX_NNZ and left > LP_MIN_SECONDS:
                _, _, lp = milp_overlap(prob, left, relax=True)
                if lp is not None:
                    upper = min(upper, lp)
                    tags.append("lp")
        except Exception:  # pragma: no cover - HiGHS is an optional tightening
            pass
    if best_val > -math.inf and is_exact(best_val, upper):
        exact = True
    if exact and best_val < floor:
        exact = False  # proven: nothing above the floor (upper is the floor, rounded up); the max itself unknown
    return best_atoms, upper, exact, "+".join(tags) if tags else "none"


# ---------------------------------------------------------------------------------------------------------
# driver
# ---------------------------------------------------------------------------------------------------------
def _witness(store: BoxStore, prob: Problem, atoms: Mapping[str, int]) -> dict[str, Any]:
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


def solve_overlap(
    store: BoxStore,
    ids: np.ndarray | None = None,
    region: Box | None = None,
    *,
    time_limit: float = 10.0,
    upper_hint: float = math.inf,
    method: str = "auto",
    floor: float = -math.inf,
) -> OverlapResult:
    """Max over rows x (in ``region``) of the load of the nodes ``ids`` (default: all registered).

    ``upper_hint`` is any proven upper bound the caller knows (exact clique, colouring, Σw); it only
    tightens ``upper`` on a timeout.  ``method``: ``"auto"`` (tensor, else the portfolio of
    :func:`_portfolio`: column branch and bound and graph search in a feature-chosen order, then HiGHS),
    ``"bb"`` (tensor / column branch and bound only), ``"graph"`` (tensor / graph search only) or
    ``"milp"`` (HiGHS only).  ``time_limit`` is a wall-clock budget for the whole call (encoding included);
    on a timeout ``upper`` is the smallest *proven* bound (search frontier, LP / MILP dual bound,
    ``upper_hint``, Σw) and ``lower`` the exact load of the best witness row found.

    ``floor``: the caller only needs the maximum when it exceeds ``floor`` (an admission: γ_new =
    max(γ_old, w + max over the box), so loads ≤ γ_old − w do not matter).  The branch and bounds then prune
    against it from the start; the result is either exact (a witness above the floor) or the proven
    interval ``[witness load, floor rounded up]``.  Only the searches use it (the tensor is exact anyway).
    """
    t0 = time.perf_counter()
    deadline = t0 + time_limit
    if ids is None:
        ids = np.flatnonzero(store.alive[: store.n])
    ids = np.asarray(ids, dtype=np.int64)
    if region is not None:
        if region.is_empty():
            return OverlapResult(0.0, 0.0, True, None, (), "empty-region", time.perf_counter() - t0)
        ids = ids[store.overlap_mask(region)[ids]]
    else:
        ids = ids[store.alive[ids]]
    # many constrained columns: graph-search territory, where merging indistinguishable values (one sort per
    # column) costs more than it saves
    used_cols = sum(1 for st in store.cols.values() if len(ids) and bool(st.constrained[ids].any()))
    prob = build_problem(store, ids, region, dedupe=used_cols <= DEDUPE_MAX_COLUMNS)
    rnd = _Rounding.of(prob)
    atoms: dict[str, int] = {}
    upper = math.inf
    used = "empty"
    if prob.n > 0:
        if method == "milp":
            _, at, ub = milp_overlap(prob, deadline - time.perf_counter())
            atoms = at or {}
            used = "milp"
            if ub is None and deadline - time.perf_counter() > LP_MIN_SECONDS:
                _, _, ub = milp_overlap(prob, deadline - time.perf_counter(), relax=True)  # no dual bound: the LP's
                used += "+lp"
            upper = ub if ub is not None else math.inf
        else:
            grace = OVERRUN_SHARE * time_limit + OVERRUN_SECONDS
            atoms, upper, _, used = _portfolio(store, prob, ids, deadline, rnd, method, grace, floor, upper_hint)
    else:
        upper = 0.0
    witness = _witness(store, prob, atoms)
    mask = store.contains_mask(witness)
    members = ids[mask[ids]]
    lower = sum_down(store.weights[members].tolist())  # the exact load of the witness, rounded down
    upper = min(upper, upper_hint, rnd.total)  # Σw (rounded up) always bounds γ
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
    return solve_overlap(store, time_limit=left, method=method)
