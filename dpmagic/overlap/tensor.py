"""The load tensor: γ of a compressed problem evaluated cell by cell (Smith et al. 2022 §6; docs/design.md §2).

The axis with most atoms is the *ordered axis* B; the other axes A are combined into a Khatri–Rao (row-wise
Kronecker) membership matrix ``K`` (n × Π_A a_c); the loads are ``cumsum(Dᵀ (w·K))`` where D is the sparse ±1
difference matrix of the queries' runs along B (a prefix is two non-zeros).  Cost ``O(n·cells_A + nnz(D)·cells_A
+ cells)``; :func:`tensor_cost` gives the two sizes so a caller can decide whether to start it (one numpy
computation, not interruptible).  The Khatri–Rao product is built here only.
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


def _tensor_atoms(prob: Problem) -> tuple[float, dict[int, int]]:
    """Maximum load over the whole compressed domain of ``prob`` and one maximising atom per column."""
    cols = prob.columns
    w = prob.weights
    n = prob.n
    if not cols:
        return float(w.sum()), {}
    b = int(np.argmax([c.a for c in cols]))
    A = [i for i in range(len(cols)) if i != b]
    K = khatri_rao(prob, A)
    cells_a = K.shape[1]
    Kw = K * w[:, None]
    cb = cols[b]
    if cb.is_runs:
        rs, re = cb.runs()
        slots = rs.shape[1]
        qi = np.repeat(np.arange(n), slots)
        keep = (rs < re).ravel()
        qi = qi[keep]
        r = np.concatenate([rs.ravel()[keep], re.ravel()[keep]])
        L = np.cumsum(_difference_rows(r, qi, Kw, cb.a + 1), axis=0)[:-1]
    else:
        L = cb.dense().T.astype(np.float64) @ Kw
    flat = int(np.argmax(L))
    value = float(L.flat[flat])
    ib, ia = divmod(flat, cells_a)
    atoms = {b: ib}
    dims = [cols[i].a for i in A]
    if dims:
        for i, v in zip(A, np.unravel_index(ia, dims)):
            atoms[i] = int(v)
    return value, atoms


def tensor_max(prob: Problem) -> tuple[float, dict[str, int]]:
    """:func:`_tensor_atoms` with the maximising atoms keyed by column name."""
    value, atoms = _tensor_atoms(prob)
    return value, {prob.columns[i].name: v for i, v in atoms.items()}
