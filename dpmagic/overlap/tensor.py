"""The load tensor: γ of a compressed problem evaluated cell by cell (Smith et al. 2022 §6; docs/design.md §2).

The axis with most atoms is the *ordered axis* B; the other axes A are combined into a Khatri–Rao (row-wise
Kronecker) membership matrix ``K`` (n × Π_A a_c); the loads are ``cumsum(Dᵀ (w·K))`` where D is the sparse ±1
difference matrix of the queries' runs along B (a prefix is two non-zeros).  Cost ``O(n·cells_A + nnz(D)·cells_A
+ cells)``; :func:`tensor_cost` gives the two sizes so a caller can decide whether to start it (one numpy
computation, not interruptible).  The Khatri–Rao product is built here only.  Large tensors are evaluated one value
of a split column at a time, each slice from the queries containing it (:data:`SPLIT_MIN_ENTRIES`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

import numpy as np

from dpmagic.overlap.encoding import Problem

__all__ = ["tensor_cost", "tensor_max", "khatri_rao"]


def tensor_cost(prob: Problem) -> tuple[float, float]:
    """(cells, Khatri–Rao entries) of evaluating ``prob`` as one tensor."""
    if not prob.columns:
        return 1.0, 0.0
    a = [float(c.a) for c in prob.columns]
    b = int(np.argmax(a))
    cells_a = math.prod(x for i, x in enumerate(a) if i != b) if len(a) > 1 else 1.0  # inf on overflow
    return cells_a * a[b], cells_a * max(prob.n, 1)


def khatri_rao(prob: Problem, axes: Sequence[int] | None = None) -> np.ndarray:
    """Row-wise Kronecker product of the membership matrices of the columns ``axes`` (default all): entry
    ``[q, cell]`` says whether query q covers the cell (cells in C order of ``axes``).  ``O(n · Π a_c)``."""
    n = prob.n
    K = np.ones((n, 1), dtype=bool)
    for i in range(len(prob.columns)) if axes is None else axes:
        K = (K[:, :, None] & prob.columns[i].dense()[:, None, :]).reshape(n, -1)
    return K


#: below this many (run ends × cells) the difference rows are summed by numpy; above it (or once scipy is loaded)
#: by scipy's sparse product, whose import (~0.13 s) costs more than a small product
_NUMPY_DIFF_MAX = 4_000_000


def _difference_rows(
    r: np.ndarray, qi: np.ndarray, Kw: np.ndarray, rows: int, *, use_scipy: bool | None = None
) -> np.ndarray:
    """``D @ Kw`` for the ±1 difference matrix ``D`` (``+1`` at ``(r[i], qi[i])`` for the first ``len(qi)``
    entries of ``r``, ``-1`` at the rest): row ``b`` is the sum of the ``Kw`` rows of the runs starting at ``b``
    minus those ending there.  Either way at most ``2n`` additions of terms of magnitude ≤ Σw per cell (the
    bound :class:`~.rounding.ProblemRounding` allows); the order differs, so results may differ in the last
    bits only, within that bound."""
    m = len(qi)
    cells = Kw.shape[1]
    if use_scipy is None:
        use_scipy = "scipy.sparse" in sys.modules or 2 * m * cells > _NUMPY_DIFF_MAX
    if use_scipy:
        import scipy.sparse as sp

        data = np.concatenate([np.ones(m), -np.ones(m)])
        D = sp.csr_matrix((data, (r, np.concatenate([qi, qi]))), shape=(rows, Kw.shape[0]))
        return np.asarray(D @ Kw)
    out = np.empty((rows, cells))
    KT = np.ascontiguousarray(Kw[qi].T)
    start, end = r[:m], r[m:]
    for j in range(cells):
        out[:, j] = np.bincount(start, weights=KT[j], minlength=rows) - np.bincount(end, weights=KT[j], minlength=rows)
    return out


#: the tensor is evaluated one value of a split column at a time once it has more than this many Khatri–Rao entries
#: (queries × cells of the other columns): each slice takes only the queries containing that value, which on the
#: PUMS drill-down regions (416–844 queries, 6 columns, 2–5·10⁷ entries) took 0.03–0.06 s instead of 0.13–0.68 s
#: (session 17, benchmarks/results/bench_session_issue28_s17_NOTES.md)
SPLIT_MIN_ENTRIES = 1 << 20


def _tensor_atoms(prob: Problem) -> tuple[float, dict[int, int]]:
    """Maximum load over the whole compressed domain of ``prob`` and one maximising atom per column.

    The load of a cell is the weight of the queries covering it, so a query not containing value ``v`` of a column
    contributes nothing to the cells with ``v``: above :data:`SPLIT_MIN_ENTRIES` the cells are evaluated per value
    of the largest column besides the cumulative-sum axis, each from the queries containing it only (the same terms
    with the zero ones left out, so the same rounding bound).  ``O(n · Π a_c)`` in the worst case, and memory for one
    slice."""
    cols = prob.columns
    w = prob.weights
    n = prob.n
    if not cols:
        return float(w.sum()), {}
    b = int(np.argmax([c.a for c in cols]))
    A = [i for i in range(len(cols)) if i != b]
    cb = cols[b]
    dims = [cols[i].a for i in A]
    cells_a = math.prod(dims) if dims else 1
    split: int | None = None
    if A and n > 0 and cells_a * n > SPLIT_MIN_ENTRIES:
        split = max(A, key=lambda i: cols[i].a)
        if cols[split].a < 2:
            split = None
    if cb.is_runs:
        rs, re = cb.runs()
        slots = rs.shape[1]
        qi_all = np.repeat(np.arange(n), slots)
        keep = (rs < re).ravel()
        qi_all = qi_all[keep]
        starts, ends = rs.ravel()[keep], re.ravel()[keep]

    big = split is not None and cb.is_runs and 2 * len(qi_all) * cells_a > _NUMPY_DIFF_MAX

    def slice_loads(K: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        """Loads (b atoms × cells of ``K``) from the queries ``rows`` (None: all; ``K``: their Khatri–Rao rows)."""
        Kw = K * (w if rows is None else w[rows])[:, None]
        if cb.is_runs:
            if rows is None:
                qi, s0, e0 = qi_all, starts, ends
            else:
                pos = np.full(n, -1, dtype=np.int64)
                pos[rows] = np.arange(len(rows))
                m = pos[qi_all] >= 0
                qi, s0, e0 = pos[qi_all[m]], starts[m], ends[m]
            r = np.concatenate([s0, e0])
            if big:  # the whole tensor's size decides once (red team 17: per small slice numpy loops over cells)
                return np.cumsum(_difference_rows(r, qi, Kw, cb.a + 1, use_scipy=True), axis=0)[:-1]
            return np.cumsum(_difference_rows(r, qi, Kw, cb.a + 1), axis=0)[:-1]
        Mb = cb.dense() if rows is None else cb.dense()[rows]
        return Mb.T.astype(np.float64) @ Kw

    if split is None:
        L = slice_loads(khatri_rao(prob, A), None)
        flat = int(np.argmax(L))
        value = float(L.flat[flat])
        ib, ia = divmod(flat, cells_a)
        idx = [int(v) for v in np.unravel_index(ia, dims)] if dims else []
    else:
        rest = [i for i in A if i != split]
        rdims = [cols[i].a for i in rest]
        K_rest = khatri_rao(prob, rest)  # n × cells of the other columns, shared by every slice
        Ms = cols[split].dense()
        value, ib, idx = -math.inf, 0, []
        for v in range(cols[split].a):
            rows = np.flatnonzero(Ms[:, v])
            if len(rows) == 0:
                L = np.zeros((cb.a, 1))  # no query holds v: every cell with it has load 0
            else:
                L = slice_loads(K_rest[rows], rows)
            flat = int(np.argmax(L))
            val = float(L.flat[flat])
            if val > value:
                ib, ir = divmod(flat, L.shape[1])
                sub = dict(zip(rest, (int(x) for x in np.unravel_index(ir, rdims)))) if rest and len(rows) else {}
                sub[split] = v
                value, idx = val, [sub.get(i, 0) for i in A]
    atoms = {b: int(ib)}
    for i, v in zip(A, idx):
        atoms[i] = int(v)
    return value, atoms


def tensor_max(prob: Problem) -> tuple[float, dict[str, int]]:
    """:func:`_tensor_atoms` with the maximising atoms keyed by column name."""
    value, atoms = _tensor_atoms(prob)
    return value, {prob.columns[i].name: v for i, v in atoms.items()}
