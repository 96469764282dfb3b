"""Query graph utilities: overlap adjacency, weighted colouring bounds (DSatur), components.

Smith et al. 2022 §5–6.3, docs/design.md §2: any proper colouring gives the safe upper bound
``χ_w = Σ over colour classes of the class's max weight ≥ ω_w ≥ γ_w``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from dpmagic.schema import Schema
from dpmagic.sets import Box

from .deadline import check
from .encoding import BoxStore
from .rounding import sum_up

__all__ = [
    "overlap_adjacency",
    "as_csr",
    "weighted_coloring_bound",
    "dsatur_coloring",
    "greedy_coloring",
    "coloring_value",
    "cheapest_color",
]


def overlap_adjacency(
    boxes: Sequence[Box] | BoxStore,
    schema: Schema | None = None,
    *,
    ids: np.ndarray | None = None,
    block: int = 1024,
) -> sp.csr_matrix:
    """Adjacency of the query graph (edge iff the boxes overlap, Smith et al. 2022 Prop. 3) as a boolean CSR matrix.

    Symmetric, no self-loops; empty boxes are isolated.  Vectorised per column and computed in blocks of
    rows: ``O(t² m)`` elementary operations, ``O(block · t)`` memory plus the edges.
    """
    if isinstance(boxes, BoxStore):
        store = boxes
    else:
        store = BoxStore(schema)
        store.extend(list(boxes), np.ones(len(boxes)))
    if ids is None:
        ids = np.arange(store.n)
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    for s in range(0, n, block):
        blk = store.pairwise(ids[s : s + block], ids)
        r, c = np.nonzero(blk)
        r = r + s
        keep = r != c
        rows.append(r[keep])
        cols.append(c[keep])
    r = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
    return sp.csr_matrix((np.ones(len(r), dtype=bool), (r, c)), shape=(n, n))


def as_csr(adjacency: Any) -> sp.csr_matrix:
    """Accept a scipy sparse matrix, a dense (n, n) array or a networkx graph (nodes 0..n-1)."""
    if sp.issparse(adjacency):
        A = sp.csr_matrix(adjacency, dtype=bool)
    elif hasattr(adjacency, "nodes") and hasattr(adjacency, "edges"):
        import networkx as nx

        n = adjacency.number_of_nodes()
        A = sp.csr_matrix(nx.to_scipy_sparse_array(adjacency, nodelist=range(n), dtype=bool))
    else:
        A = sp.csr_matrix(np.asarray(adjacency, dtype=bool))
    A.setdiag(False)
    A.eliminate_zeros()
    return A


def components(adjacency: Any, deadline: float = math.inf) -> list[np.ndarray]:
    """Connected components (sorted vertex ids each) of an undirected graph: the one component routine of the
    package.  A dense boolean matrix is searched breadth first on its rows (each row read once, ``O(n²)``
    bit operations, no sparse conversion — which costs ~30 ms at n = 900); a sparse matrix goes to scipy's
    ``connected_components`` (``O(n + nnz)``).  ``deadline`` is checked once per BFS level (raises
    :class:`~.deadline.SearchTimeout`)."""
    if isinstance(adjacency, np.ndarray):
        n = adjacency.shape[0]
        labels = np.full(n, -1, dtype=np.int64)
        k = 0
        for s0 in range(n):
            if labels[s0] >= 0:
                continue
            labels[s0] = k
            frontier = np.array([s0])
            while len(frontier):
                check(deadline)
                reach = adjacency[frontier].any(axis=0)
                reach &= labels < 0
                frontier = np.flatnonzero(reach)
                labels[frontier] = k
            k += 1
    else:
        from scipy.sparse.csgraph import connected_components

        A = as_csr(adjacency)
        if A.shape[0] == 0:
            return []
        k, labels = connected_components(A, directed=False)
    if k <= 1:
        return [np.arange(len(labels))] if len(labels) else []
    order = np.argsort(labels, kind="stable")
    cuts = np.flatnonzero(np.diff(labels[order])) + 1
    return np.split(order, cuts)


def coloring_value(colors: np.ndarray, weights: np.ndarray) -> float:
    """Σ over colour classes of the class's max weight, rounded up (a proven bound, :func:`.rounding.sum_up`)."""
    if len(colors) == 0:
        return 0.0
    ncol = int(colors.max()) + 1
    cm = np.zeros(ncol)
    np.maximum.at(cm, colors, weights)
    return sum_up(cm.tolist())


def cheapest_color(neighbor_colors: np.ndarray, weight: float, class_max: np.ndarray) -> int:
    """The free colour whose class max grows least when a vertex of ``weight`` joins (new: ``len``).

    ``O(deg + #colours)``.  Ties go to the lowest colour index.
    """
    ncol = len(class_max)
    if ncol == 0:
        return 0
    used = np.zeros(ncol, dtype=bool)
    nc = neighbor_colors[(neighbor_colors >= 0) & (neighbor_colors < ncol)]
    used[nc] = True
    if used.all():
        return ncol
    cost = np.maximum(weight - class_max, 0.0)
    cost[used] = np.inf
    return int(np.argmin(cost))


def greedy_coloring(A: sp.csr_matrix, weights: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """Sequential cheapest-colour greedy in ``order`` (default: decreasing weight).  ``O(E + n·χ)``."""
    n = A.shape[0]
    w = np.asarray(weights, dtype=np.float64)
    if order is None:
        order = np.argsort(-w, kind="stable")
    colors = np.full(n, -1, dtype=np.int64)
    cm = np.zeros(0)
    indptr, indices = A.indptr, A.indices
    for v in order:
        c = cheapest_color(colors[indices[indptr[v] : indptr[v + 1]]], w[v], cm)
        if c == len(cm):
            cm = np.append(cm, w[v])
        else:
            cm[c] = max(cm[c], w[v])
        colors[v] = c
    return colors


def dsatur_coloring(A: sp.csr_matrix, weights: np.ndarray) -> np.ndarray:
    """Weighted DSatur (Smith et al. 2022 Algorithm 2): repeatedly colour the uncoloured vertex of largest
    saturation (ties: larger weight, then larger degree) with its cheapest free colour.

    ``O(n² + E + n·χ)`` with numpy vectorised steps.
    """
    n = A.shape[0]
    w = np.asarray(weights, dtype=np.float64)
    colors = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return colors
    indptr, indices = A.indptr, A.indices
    deg = np.diff(indptr)
    static = np.empty(n, dtype=np.float64)
    static[np.lexsort((deg, w))] = np.arange(n)  # rank by (weight, degree)
    sat = np.zeros(n, dtype=np.float64)
    cap = 16
    seen = np.zeros((n, cap), dtype=bool)
    cm = np.zeros(0)
    key = static.copy()
    for _ in range(n):
        v = int(np.argmax(key))
        nb = indices[indptr[v] : indptr[v + 1]]
        c = cheapest_color(colors[nb], w[v], cm)
        if c == len(cm):
            cm = np.append(cm, w[v])
        else:
            cm[c] = max(cm[c], w[v])
        colors[v] = c
        key[v] = -np.inf
        if c >= cap:
            cap *= 2
            seen = np.concatenate([seen, np.zeros((n, cap - seen.shape[1]), dtype=bool)], axis=1)
        if len(nb):
            fresh = ~seen[nb, c]
            seen[nb, c] = True
            sat[nb] += fresh
            unc = nb[colors[nb] < 0]
            key[unc] = sat[unc] * (n + 1) + static[unc]
    return colors


def weighted_coloring_bound(adjacency: Any, weights: Sequence[float] | np.ndarray) -> tuple[float, np.ndarray]:
    """Weighted colouring upper bound χ̃_w ≥ ω_w ≥ γ_w and the colouring (colour index per vertex).

    Runs weighted DSatur and a largest-weight-first greedy colouring and keeps the better (Smith et al. 2022
    §6.3).  ``O(n² + E + n·χ)``.
    """
    A = as_csr(adjacency)
    w = np.asarray(weights, dtype=np.float64)
    best_c = dsatur_coloring(A, w)
    best_v = coloring_value(best_c, w)
    g = greedy_coloring(A, w)
    gv = coloring_value(g, w)
    if gv < best_v:
        best_c, best_v = g, gv
    return best_v, best_c
