"""The pairwise-marginal LP relaxation of max overlap, with a certified dual bound (issue 28: drill-down regions).

The integer program of :mod:`.milp` (one-hot ``y[c, atom]``, ``z_q ≤ Σ_{atom ∈ q_c} y[c, atom]`` per constrained
column) has a weak relaxation on dense analyst regions: a fractional ``y`` spread over a column satisfies every
complement (``NOT IN``, ``!=``, ``age < a OR age > b``) at once, and its LP optimum is 6–18 % above the maximum
on the drill-down family.  Here every *pair* of columns ``(c, d)`` that some query constrains together gets a
joint distribution ``p_cd`` over (classes of) its atoms, tied to the columns' ``y`` by its two marginals, and a
query constraining columns ``C`` is bounded by its mass in every pair of ``C``:

    z_q ≤ Σ_{(i, j) ∈ q_c × q_d} p_cd[i, j]        for every pair {c, d} ⊆ C.

This is the level-2 Sherali–Adams lift restricted to co-constrained pairs (H. D. Sherali and W. P. Adams, "A
hierarchy of relaxations between the continuous and convex hull representations for zero-one programming
problems", SIAM Journal on Discrete Mathematics 3(3):411–430, 1990), i.e. the local-consistency polytope of the
pairwise marginals (M. J. Wainwright and M. I. Jordan, "Graphical models, exponential families, and variational
inference", Foundations and Trends in Machine Learning 1(1–2), 2008, §8.4).  It is exact for any integral
point (a one-hot ``y`` forces ``p`` to the product of its two atoms), so its optimum is an upper bound of the
maximum load; on the captured drill-down regions (287–660 live queries, 9 columns of up to 108 atoms) it equals
the maximum on every instance measured, where HiGHS's integer program took 1–6 s.

Size: a pair's atoms are merged into classes that no query constraining both columns distinguishes (the same
compression as :mod:`.encoding`, per pair); a query's row uses the cheapest of four equal forms of its mass
(``p(S×T)``, ``y(S) − p(S×T̄)``, ``y(T) − p(S̄×T)``, ``y(S) + y(T) − 1 + p(S̄×T̄)``).  Variables
``Σ_c a_c + n + Σ_pairs K_c K_d``.

The bound is never HiGHS's objective.  From HiGHS's dual solution ``(u ≥ 0, v)`` weak duality gives, for
``max cᵀx, A x ≤ b, E x = e, 0 ≤ x ≤ 1``, the bound ``bᵀu + eᵀv + Σ_j max(0, (c − Aᵀu − Eᵀv)_j)`` for *any* such
``(u, v)`` (A. Neumaier and O. Shcherbina, "Safe bounds in linear and mixed-integer linear programming",
Mathematical Programming 99:283–296, 2004); it is evaluated here with every floating-point error bounded
(Higham 2002, §3.1) and rounded up, so a dual solution that HiGHS left slightly infeasible only loosens it.
Complexity: building is ``O(Σ_pairs (n_cd K_c K_d))``; the LP is solved by HiGHS's dual simplex through highspy
(presolve off: measured 2–3× faster on these models), within a time limit, stopping early once its bound passes the
caller's target; the multipliers it holds when it stops, optimal or not, give the bound.  With a target, a cheaper
LP (the small pairs' joints only, a relaxation of this one) may be solved first, and this one only when that bound
is above the target (``first_pair_max``).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dpmagic.overlap.encoding import Problem
from dpmagic.overlap.milp import fold
from dpmagic.overlap.rounding import grid_of, proven_upper, sum_up

if TYPE_CHECKING:  # scipy is imported only when the LP is built (the CLI's import time: issue 11)
    import scipy.sparse as sp

__all__ = ["pair_lp_bound", "PAIRLP_MAX_VARS", "PAIRLP_MAX_NNZ"]

#: the LP is only built up to this many variables / constraint non-zeros (measured: 5,000–12,000 variables and
#: 35,000–100,000 non-zeros on the drill-down regions, solved in 0.1–0.5 s)
PAIRLP_MAX_VARS = 60_000
PAIRLP_MAX_NNZ = 600_000
#: ... and while one pair's rows take at most this many booleans (queries × classes × classes) to build
PAIRLP_MAX_CELLS = 20_000_000
#: HiGHS stops up to about this long after its time limit per non-zero (dual simplex, presolve off, through highspy;
#: passing the model included): measured 0.11–0.31 µs on the drill-down-wide regions (60,000–210,000 non-zeros) ...
PAIRLP_OVERRUN_PER_NNZ = 4e-7
#: ... and is not started with less than this many seconds
PAIRLP_MIN_SECONDS = 0.02
_U = 2.0**-53
_ETA = 2.0**-1074


def _classes(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Atoms of one column merged by membership in the rows of ``M`` (queries × atoms): ``(class of each atom,
    membership queries × classes)``.  ``O(|Q| a log a)``."""
    _, first, inv = np.unique(np.packbits(M.T, axis=1), axis=0, return_index=True, return_inverse=True)
    return inv.ravel(), M[:, first]


class _Rows:
    """Sparse rows collected as coordinate arrays."""

    def __init__(self) -> None:
        self.r: list[np.ndarray] = []
        self.c: list[np.ndarray] = []
        self.v: list[np.ndarray] = []
        self.b: list[float] = []

    def add(self, cols: np.ndarray, vals: np.ndarray, rhs: float) -> None:
        self.r.append(np.full(len(cols), len(self.b), dtype=np.int64))
        self.c.append(np.asarray(cols, dtype=np.int64))
        self.v.append(np.asarray(vals, dtype=np.float64))
        self.b.append(rhs)

    def add_many(self, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, rhs: np.ndarray) -> None:
        base = len(self.b)
        self.r.append(base + np.asarray(rows, dtype=np.int64))
        self.c.append(np.asarray(cols, dtype=np.int64))
        self.v.append(np.asarray(vals, dtype=np.float64))
        self.b.extend(float(x) for x in rhs)

    @property
    def nnz(self) -> int:
        return sum(len(c) for c in self.c)

    def matrix(self, nvar: int) -> tuple[sp.csr_matrix, np.ndarray]:
        import scipy.sparse as sp

        if not self.b:
            return sp.csr_matrix((0, nvar)), np.zeros(0)
        A = sp.csr_matrix(
            (np.concatenate(self.v), (np.concatenate(self.r), np.concatenate(self.c))), shape=(len(self.b), nvar)
        )
        return A, np.asarray(self.b, dtype=np.float64)


def _pair_rows(
    ub: _Rows, B1: np.ndarray, B2: np.ndarray, A1: np.ndarray, A2: np.ndarray, z: np.ndarray, o: int, y1: int, y2: int
) -> None:
    """The rows ``z_q ≤ p(S_q × T_q)`` of one pair, each in its cheapest form (see the module docstring).

    ``B1``/``B2``: class membership (queries × classes), ``A1``/``A2``: atom membership (queries × atoms),
    ``z``: the queries' variable indices, ``o``: the first ``p`` variable (row-major ``K1 × K2``), ``y1``/``y2``:
    the first ``y`` variable of each column.
    """
    K2 = B2.shape[1]
    n1, n2 = B1.sum(axis=1), B2.sum(axis=1)
    m1, m2 = B1.shape[1] - n1, K2 - n2
    a1, a2 = A1.sum(axis=1), A2.sum(axis=1)
    cost = np.stack([n1 * n2, a1 + n1 * m2, a2 + m1 * n2, a1 + a2 + m1 * m2], axis=1)
    form = np.argmin(cost, axis=1)
    Q = len(z)
    base = len(ub.b)
    rows: list[np.ndarray] = [np.arange(Q)]
    cols: list[np.ndarray] = [z]
    vals: list[np.ndarray] = [np.ones(Q)]
    rhs = np.where(form == 3, -1.0, 0.0)
    for f, (s1, s2, sign) in enumerate(
        ((True, True, -1.0), (True, False, 1.0), (False, True, 1.0), (False, False, -1.0))
    ):
        sel = form == f
        if not sel.any():
            continue
        C1 = B1[sel] if s1 else ~B1[sel]
        C2 = B2[sel] if s2 else ~B2[sel]
        q, i, j = np.nonzero(C1[:, :, None] & C2[:, None, :])
        qs = np.flatnonzero(sel)
        rows.append(qs[q])
        cols.append(o + i * K2 + j)
        vals.append(np.full(len(q), sign))
        if f in (1, 3):  # − y(S)
            qq, aa = np.nonzero(A1[sel])
            rows.append(qs[qq])
            cols.append(y1 + aa)
            vals.append(-np.ones(len(qq)))
        if f in (2, 3):  # − y(T)
            qq, aa = np.nonzero(A2[sel])
            rows.append(qs[qq])
            cols.append(y2 + aa)
            vals.append(-np.ones(len(qq)))
    ub.r.append(base + np.concatenate(rows))
    ub.c.append(np.concatenate(cols).astype(np.int64))
    ub.v.append(np.concatenate(vals))
    ub.b.extend(rhs.tolist())


def certified_dual_bound(
    c: np.ndarray, A: sp.csr_matrix, b: np.ndarray, E: sp.csr_matrix, e: np.ndarray, u: np.ndarray, v: np.ndarray
) -> float:
    """A float proven ≥ ``max {cᵀx : A x ≤ b, E x = e, 0 ≤ x ≤ 1}`` from any multipliers ``u`` (clipped to ≥ 0) and
    ``v`` (Neumaier and Shcherbina 2004): ``bᵀu + eᵀv + Σ_j max(0, r_j)``, ``r = c − Aᵀu − Eᵀv``, each ``r_j`` raised
    by a bound on its floating-point error (a dot product of ``k`` terms errs by at most ``γ_k Σ|terms|``, Higham
    2002 §3.1; doubled, and one η per term for underflow), the sum rounded up.  ``O(nnz)``."""
    u = np.maximum(np.asarray(u, dtype=np.float64), 0.0)
    v = np.asarray(v, dtype=np.float64)
    if not (np.all(np.isfinite(u)) and np.all(np.isfinite(v))):
        return math.inf
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is caught below: the bound is then inf
        r = c - A.T @ u - E.T @ v
        mag = np.abs(c) + abs(A).T @ u + abs(E).T @ np.abs(v)
        k = np.diff(A.tocsc().indptr) + np.diff(E.tocsc().indptr) + 2
        err = 2.0 * (k + 2) * (_U * mag + _ETA)
        pos = np.maximum(r + err, 0.0)
        pos = np.nextafter(pos, math.inf) * (pos > 0)  # the addition r + err rounded up
        # bᵀu, eᵀv: every b, e is 0 or ±1 here, so each product is exact; the sums are rounded up
        terms = np.concatenate([pos, b * u, e * v])
    if not np.all(np.isfinite(terms)):
        return math.inf
    try:
        return sum_up(terms[terms != 0.0].tolist())
    except OverflowError:  # huge multipliers: an intermediate sum past the float range (red team 15)
        return math.inf


def _single_rows(
    ub: _Rows, dense: list[np.ndarray], cons: np.ndarray, multi: np.ndarray, zoff: int, yoff: np.ndarray
) -> None:
    """The integer program's rows ``z_q ≤ y_c(S_qc)`` of the multi-column queries, each as ``z_q − y(S) ≤ 0`` or
    ``z_q + y(S̄) ≤ 1``, whichever has fewer non-zeros."""
    for ci, M in enumerate(dense):
        ks = np.flatnonzero(cons[multi, ci])
        if not len(ks):
            continue
        S = M[multi[ks]]
        comp = S.sum(axis=1) * 2 > S.shape[1]
        T = np.where(comp[:, None], ~S, S)
        q, a = np.nonzero(T)
        base = len(ub.b)
        ub.r.append(base + np.concatenate([np.arange(len(ks)), q]))
        ub.c.append(np.concatenate([zoff + ks, yoff[ci] + a]).astype(np.int64))
        ub.v.append(np.concatenate([np.ones(len(ks)), np.where(comp[q], 1.0, -1.0)]))
        ub.b.extend(np.where(comp, 1.0, 0.0).tolist())


def solve_lp(
    c: np.ndarray, A: sp.csr_matrix, b: np.ndarray, E: sp.csr_matrix, e: np.ndarray, time_limit: float, stop: float
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray] | None:
    """``max {cᵀx : A x ≤ b, E x = e, 0 ≤ x ≤ 1}`` by HiGHS's dual simplex (presolve off): ``(x, u, v)``
    — a primal point (None when HiGHS has none) and the multipliers of the rows of ``A`` (≥ 0 at an optimum) and
    ``E`` — or None when the run failed (an error, or a status other than optimal, stopped at the target, at the
    time or at the iteration limit) or HiGHS reports no multipliers.

    The multipliers are whatever HiGHS holds when it stops: at an optimum, when its dual bound has fallen below
    ``stop`` (HiGHS's ``objective_bound``: every dual-simplex iterate is dual feasible up to its tolerances, so its
    objective bounds the maximum), or at ``time_limit``.  Callers never trust them: :func:`certified_dual_bound`
    turns *any* multipliers into a proven bound, tight at an optimum and looser before.
    """
    import highspy
    import scipy.sparse as sp
    from highspy._core import _Highs  # the bare solver: ``highspy.Highs()`` prints HiGHS's banner to fd 1 once

    t0 = time.perf_counter()
    M = sp.vstack([A, E]).tocsc()  # HiGHS's column-wise format
    n, m_a = M.shape[1], A.shape[0]
    h = _Highs()
    for key, val in (
        ("output_flag", False), ("solver", "simplex"), ("simplex_strategy", 1), ("presolve", "off"),
        ("time_limit", max(float(time_limit), 1e-6)),  # set again below, net of the model's passing
    ):  # fmt: skip
        h.setOptionValue(key, val)
    if math.isfinite(stop):
        # minimising −cᵀx, the dual simplex's objective rises to −max: it stops once that passes −stop
        h.setOptionValue("objective_bound", -float(stop))
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n, M.shape[0]
    lp.col_cost_ = -np.asarray(c, dtype=np.float64)
    lp.col_lower_, lp.col_upper_ = np.zeros(n), np.ones(n)
    lp.row_lower_ = np.concatenate([np.full(m_a, -highspy.kHighsInf), np.asarray(e, dtype=np.float64)])
    lp.row_upper_ = np.concatenate([np.asarray(b, dtype=np.float64), np.asarray(e, dtype=np.float64)])
    mat = lp.a_matrix_
    mat.format_ = highspy.MatrixFormat.kColwise
    mat.num_col_, mat.num_row_ = n, M.shape[0]
    mat.start_, mat.index_, mat.value_ = M.indptr, M.indices, M.data
    if h.passModel(lp) == highspy.HighsStatus.kError:
        return None
    # the time limit counts from this call: stacking and passing the model (≈ 0.1 µs per non-zero) are not HiGHS's
    # to overrun (red team 16 measured up to 0.49 µs per non-zero past the limit without this)
    h.setOptionValue("time_limit", max(float(time_limit) - (time.perf_counter() - t0), 1e-6))
    # (``threads`` is left at its default: HiGHS keeps one scheduler per OS thread, and a run asking for another thread
    # count than that scheduler's fails — with the analyst's own highspy solves in the kernel thread, either way round)
    if h.run() == highspy.HighsStatus.kError:
        return None  # a failed run still reports zero multipliers of the right length: not a solve (red team 16)
    if h.getModelStatus() not in (
        highspy.HighsModelStatus.kOptimal, highspy.HighsModelStatus.kObjectiveBound,
        highspy.HighsModelStatus.kTimeLimit, highspy.HighsModelStatus.kIterationLimit,
    ):  # fmt: skip
        return None
    sol = h.getSolution()
    rd = np.asarray(sol.row_dual, dtype=np.float64)
    if len(rd) != M.shape[0]:
        return None
    xs = np.asarray(sol.col_value, dtype=np.float64)
    x = xs if sol.value_valid and len(xs) == n else None
    # HiGHS's row duals of the minimisation are ≤ 0 on binding ≤ rows: the maximisation's multipliers are their negation
    return x, -rd[:m_a], -rd[m_a:]


@dataclass
class _Pair:
    """One co-constrained pair of columns: the multi-column queries constraining both (indices into ``multi``),
    their atom and class memberships, and the class of each kept atom."""

    c1: int
    c2: int
    ks: list[int]
    A1: np.ndarray
    A2: np.ndarray
    g1: np.ndarray
    B1: np.ndarray
    g2: np.ndarray
    B2: np.ndarray

    @property
    def cells(self) -> int:
        return int(self.B1.shape[1] * self.B2.shape[1])


def pair_lp_bound(
    prob: Problem,
    time_limit: float,
    pair_max: float = math.inf,
    target: float = math.inf,
    first_pair_max: float | None = None,
) -> tuple[float | None, dict[str, int] | None]:
    """A proven upper bound of the maximum load of ``prob`` from the pairwise-marginal LP, and a candidate
    witness (per column the atom of largest ``y``; its load is recomputed exactly by the caller).

    ``(None, None)`` when the model is over :data:`PAIRLP_MAX_VARS` / :data:`PAIRLP_MAX_NNZ`, the time runs out
    while building it (``time_limit`` seconds, wall clock, building included) or HiGHS reports no multipliers.  The
    bound is :func:`certified_dual_bound` of the multipliers HiGHS holds when it stops (:func:`solve_lp`: at an
    optimum, at ``target``, or at the time limit, when it is looser), unscaled (a power of two: exact), plus the
    weight of the queries constraining no column, through :func:`~.rounding.proven_upper` (which also covers the
    float sums folding the one-column queries' weights into ``y``'s objective).

    ``pair_max``: pairs of more than this many cells (classes × classes) get no joint; every multi-column query
    then keeps its one-column rows too (a weaker relaxation, still an upper bound).  ``target``: a bound below
    which the exact LP optimum is not needed (the caller's floor: nothing above it matters); the dual simplex stops
    once its bound passes it (measured on the drill-down-wide regions: 20 % less time in all).

    ``first_pair_max``: with a finite ``target``, first solve the cheaper LP with only the pairs of at most that many
    cells (when it drops some), and the full one only when that bound is above ``target``.  The cheaper LP is a relaxation of the full
    one, so each bound is proven; the smaller of the two is returned.  On regions where ``target`` is the floor, far
    above the LP optimum, the cheap LP is often enough (measured on the drill-down-wide degraded regions:
    benchmarks/results/bench_session_issue28_s17_NOTES.md).
    """
    deadline = time.perf_counter() + time_limit
    n = prob.n
    cols = prob.columns
    w = np.asarray(prob.weights, dtype=np.float64)
    if n == 0:
        return 0.0, {}
    if not cols:
        return sum_up(w.tolist()), {}
    grid = grid_of(w)
    # largest scaled weight in [0.5, 1) (exact); weights below 2^-1023 keep scale 2^1023 (2^1024 overflows: red team 15)
    scale = math.ldexp(1.0, min(-math.frexp(float(w.max()))[1], 1023)) if float(w.max()) > 0 else 1.0
    # folded as for the integer program (the LP over the kept atoms relaxes the integer program over them, whose
    # optimum is the maximum; on drill-down regions dropping dominated atoms halves the numeric columns)
    f = fold(prob)
    dense, cons, multi = f.dense, f.cons, f.multi
    groups: dict[tuple[int, int], list[int]] = {}
    for k, q in enumerate(multi):
        for pr in itertools.combinations(np.flatnonzero(cons[q]).tolist(), 2):
            groups.setdefault(pr, []).append(k)
    pairs: list[_Pair] = []
    for (c1, c2), ks in groups.items():
        if time.perf_counter() > deadline:
            return None, None
        Q = multi[ks]
        A1, A2 = dense[c1][Q], dense[c2][Q]
        g1, B1 = _classes(A1)
        g2, B2 = _classes(A2)
        pairs.append(_Pair(c1, c2, ks, A1, A2, g1, B1, g2, B2))
    caps = [pair_max]
    if (
        first_pair_max is not None
        and math.isfinite(target)
        and any(first_pair_max < p.cells <= pair_max for p in pairs)
    ):
        caps.insert(0, min(pair_max, first_pair_max))
    best: tuple[float | None, dict[str, int] | None] = (None, None)
    for cap in caps:
        upper, atoms = _solve_stage(prob, f, pairs, cap, scale, grid, target, deadline)
        if upper is not None and (best[0] is None or upper < best[0]):
            best = (upper, atoms if atoms is not None else best[1])
        elif atoms is not None and best[1] is None:
            best = (best[0], atoms)
        if best[0] is not None and best[0] <= target:
            break  # proven at most the target: the full LP is not needed (never so without a target: one stage)
    return best


def _solve_stage(
    prob: Problem,
    f: Any,
    pairs: list[_Pair],
    pair_max: float,
    scale: float,
    grid: float,
    target: float,
    deadline: float,
) -> tuple[float | None, dict[str, int] | None]:
    """The LP with the joints of the pairs of at most ``pair_max`` cells, solved within ``deadline``: its proven
    bound (None: too large, no time, no multipliers) and witness (see :func:`pair_lp_bound`)."""
    n = prob.n
    cols = prob.columns
    w = np.asarray(prob.weights, dtype=np.float64)
    dense, cons, multi, keep, const = f.dense, f.cons, f.multi, f.keep, f.const
    cy = np.concatenate(f.ycol) * scale
    wm = f.wm * scale
    widths = [len(k) for k in keep]
    yoff = np.cumsum([0] + widths)
    ny = int(yoff[-1])
    zoff = ny
    nvar = ny + len(multi)
    eq, ub = _Rows(), _Rows()
    for ci in range(len(cols)):
        eq.add(np.arange(yoff[ci], yoff[ci + 1]), np.ones(widths[ci]), 1.0)
    dropped = False
    for pr in pairs:
        if time.perf_counter() > deadline:
            return None, None
        c1, c2, g1, B1, g2, B2 = pr.c1, pr.c2, pr.g1, pr.B1, pr.g2, pr.B2
        K1, K2 = B1.shape[1], B2.shape[1]
        if pair_max < K1 * K2:
            dropped = True
            continue
        o = nvar
        nvar += K1 * K2
        if nvar > PAIRLP_MAX_VARS or len(pr.ks) * K1 * K2 > PAIRLP_MAX_CELLS:
            return None, None
        # marginals: Σ_j p[i, j] = y(class i of c1), Σ_i p[i, j] = y(class j of c2)
        for K, g, yo, step, inner in ((K1, g1, yoff[c1], K2, 1), (K2, g2, yoff[c2], 1, K2)):
            r_p = np.repeat(np.arange(K), K1 * K2 // K)
            c_p = o + (np.arange(K)[:, None] * step + np.arange(K1 * K2 // K)[None, :] * inner).ravel()
            r_y = g
            c_y = yo + np.arange(len(g))
            eq.add_many(
                np.concatenate([r_p, r_y]),
                np.concatenate([c_p, c_y]),
                np.concatenate([np.ones(len(c_p)), -np.ones(len(c_y))]),
                np.zeros(K),
            )
        ks = np.asarray(pr.ks, dtype=np.int64)
        _pair_rows(ub, B1, B2, pr.A1, pr.A2, zoff + ks, o, int(yoff[c1]), int(yoff[c2]))
        if ub.nnz + eq.nnz > PAIRLP_MAX_NNZ:
            return None, None
    if dropped:  # some pairs have no joint: every multi-column query keeps its one-column rows
        _single_rows(ub, dense, cons, multi, zoff, yoff)
    c = np.concatenate([cy, wm, np.zeros(nvar - ny - len(multi))])
    A, b = ub.matrix(nvar)
    E, e = eq.matrix(nvar)
    nnz = A.nnz + E.nnz
    left = deadline - time.perf_counter() - PAIRLP_OVERRUN_PER_NNZ * nnz
    if left < PAIRLP_MIN_SECONDS:
        return None, None
    # proving the maximum at most ``target`` is enough: the dual simplex may stop once its bound passes it (scaled,
    # less the constant part; the certified bound below decides, never HiGHS's objective)
    stop_s = (target - float(np.sum(const))) * scale if math.isfinite(target) else math.inf
    stop_s -= 1e-9 * abs(stop_s) if math.isfinite(stop_s) else 0.0
    sol = solve_lp(c, A, b, E, e, left, stop_s)
    if sol is None:
        return None, None
    x, u, v = sol
    bound_s = certified_dual_bound(c, A, b, E, e, u, v)
    if not math.isfinite(bound_s):
        return None, None
    upper = proven_upper(sum_up([bound_s / scale, *const.tolist()]), 2 * n + 4, scale=float(w.sum()) + 1.0, grid=grid)
    if x is None or len(x) != nvar:
        return upper, None
    atoms = {col.name: int(keep[i][np.argmax(x[yoff[i] : yoff[i + 1]])]) for i, col in enumerate(cols)}
    return upper, atoms
