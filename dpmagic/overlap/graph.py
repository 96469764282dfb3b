"""Query graph utilities: overlap adjacency, weighted colouring bounds (DSatur), components.

Smith et al. 2022 §5–6.3, docs/design.md §2: any proper colouring gives the safe upper bound
``χ_w = Σ over colour classes of the class's max weight ≥ ω_w ≥ γ_w``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dpmagic.domain.schema import Schema
from dpmagic.domain.sets import Box
from dpmagic.overlap.deadline import check
from dpmagic.overlap.encoding import BoxStore
from dpmagic.overlap.rounding import sum_up

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = [
    "overlap_adjacency",
    "CSRGraph",
    "adjacency_graph",
    "as_csr",
    "weighted_coloring_bound",
    "dsatur_coloring",
    "greedy_coloring",
    "coloring_value",
    "cheapest_color",
]


@dataclass(frozen=True, eq=False)
class CSRGraph:
    """An undirected simple graph as numpy CSR index arrays: the neighbours of ``v`` are
    ``indices[indptr[v]:indptr[v + 1]]`` (sorted, no self-loop).  The graph routines of this package read only
    these two arrays, so the accountant's path needs no scipy (whose import costs ~0.13 s); :meth:`to_scipy`
    gives the equivalent ``scipy.sparse.csr_matrix`` for the public API and plots."""

    indptr: np.ndarray
    indices: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        n = len(self.indptr) - 1
        return (n, n)

    @classmethod
    def from_edges(cls, n: int, rows: np.ndarray, cols: np.ndarray) -> CSRGraph:
        """From directed edge lists (both directions given; duplicates and self-loops dropped).  ``O(E log E)``."""
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        if len(rows) and (min(rows.min(), cols.min()) < 0 or max(rows.max(), cols.max()) >= n):
            raise ValueError(f"edge endpoints must be vertex ids 0..{n - 1}")
        keep = rows != cols
        rows, cols = rows[keep], cols[keep]
        key = np.unique(rows * max(n, 1) + cols)
        rows, cols = np.divmod(key, max(n, 1))
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
        return cls(indptr, cols.astype(np.int64))

    @classmethod
    def from_dense(cls, adjacency: np.ndarray) -> CSRGraph:
        """From a dense boolean ``(n, n)`` matrix (the diagonal ignored).  ``O(n²)``."""
        a = np.asarray(adjacency, dtype=bool)
        r, c = np.nonzero(a)
        keep = r != c
        r, c = r[keep], c[keep]  # row-major: already sorted by (row, column)
        n = a.shape[0]
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(r, minlength=n), out=indptr[1:])
        return cls(indptr, c.astype(np.int64))

    def dense(self, order: np.ndarray | Sequence[int] | None = None) -> np.ndarray:
        """The boolean adjacency matrix of the induced subgraph on ``order`` (relabelled 0..k-1; default all).
        ``O(k + Σ deg)``."""
        n = self.shape[0]
        order = np.arange(n) if order is None else np.asarray(order, dtype=np.int64)
        uniq, inv = np.unique(order, return_inverse=True)
        if len(uniq) < len(order):  # a repeated vertex: its copies are not adjacent to each other
            sub = self.dense(uniq)[inv][:, inv]
            sub[inv[:, None] == inv[None, :]] = False
            return sub
        k = len(order)
        pos = np.full(n, -1, dtype=np.int64)
        pos[order] = np.arange(k)
        starts, ends = self.indptr[order], self.indptr[order + 1]
        lens = ends - starts
        src = np.repeat(np.arange(k), lens)
        dst = pos[self.indices[_ranges(starts, lens)]]
        out = np.zeros((k, k), dtype=bool)
        ok = dst >= 0
        out[src[ok], dst[ok]] = True
        return out

    def to_scipy(self) -> sp.csr_matrix:
        import scipy.sparse as sp

        n = self.shape[0]
        return sp.csr_matrix((np.ones(len(self.indices), dtype=bool), self.indices, self.indptr), shape=(n, n))


def adjacency_graph(
    boxes: Sequence[Box] | BoxStore,
    schema: Schema | None = None,
    *,
    ids: np.ndarray | None = None,
    block: int = 1024,
) -> CSRGraph:
    """The query graph (edge iff the boxes overlap, Smith et al. 2022 Prop. 3) as a :class:`CSRGraph`.

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
    counts = np.zeros(n, dtype=np.int64)
    cols: list[np.ndarray] = []
    for s in range(0, n, block):
        blk = store.pairwise(ids[s : s + block], ids)
        k = blk.shape[0]
        blk[np.arange(k), np.arange(s, s + k)] = False
        r, c = np.nonzero(blk)  # row-major: sorted by (row, column)
        counts[s : s + k] = np.bincount(r, minlength=k)
        cols.append(c.astype(np.int64))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return CSRGraph(indptr, np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64))


def overlap_adjacency(
    boxes: Sequence[Box] | BoxStore,
    schema: Schema | None = None,
    *,
    ids: np.ndarray | None = None,
    block: int = 1024,
) -> sp.csr_matrix:
    """:func:`adjacency_graph` as a boolean ``scipy.sparse.csr_matrix`` (for plots and networkx)."""
    return adjacency_graph(boxes, schema, ids=ids, block=block).to_scipy()


def as_csr(adjacency: Any) -> CSRGraph:
    """Accept a :class:`CSRGraph`, a scipy sparse matrix, a dense (n, n) array or a networkx graph (nodes
    0..n-1).  The graph is undirected: a matrix entry in either direction is an edge (the matrix is
    symmetrised, as scipy's ``connected_components(directed=False)`` reads it); the diagonal is ignored."""
    if isinstance(adjacency, CSRGraph):
        return adjacency
    if hasattr(adjacency, "nodes") and hasattr(adjacency, "edges"):
        n = adjacency.number_of_nodes()
        if set(adjacency.nodes()) != set(range(n)):
            raise ValueError("a networkx graph's nodes must be 0..n-1 (the weights are indexed by them)")
        edges = np.array([(u, v) for u, v in adjacency.edges() if u != v], dtype=np.int64).reshape(-1, 2)
        r, c = edges[:, 0], edges[:, 1]
    elif hasattr(adjacency, "tocoo"):  # scipy sparse (not imported unless the caller already has it)
        coo = adjacency.tocoo()
        nz = np.asarray(coo.data, dtype=bool)
        n, r, c = coo.shape[0], coo.row[nz], coo.col[nz]
    else:
        a = np.asarray(adjacency, dtype=bool)
        n = a.shape[0]
        r, c = np.nonzero(a | a.T)
    return CSRGraph.from_edges(n, np.r_[r, c], np.r_[c, r])


def _ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(starts[i], starts[i] + lens[i])`` over i, vectorised.  ``O(Σ lens)``."""
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    return np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lens) - lens - starts, lens)


def components(adjacency: Any, deadline: float = math.inf) -> list[np.ndarray]:
    """Connected components (sorted vertex ids each) of an undirected graph: the one component routine of the
    package.  Breadth first search, one vectorised step per BFS level: on a dense boolean matrix each row is
    read once (``O(n²)`` bit operations, no sparse conversion — which costs ~30 ms at n = 900); on CSR
    adjacency (:class:`CSRGraph`, or anything :func:`as_csr` accepts) each edge is read once (``O(n + E)``,
    isolated vertices labelled in bulk).  ``deadline`` is checked once per BFS level (raises
    :class:`~.deadline.SearchTimeout`)."""
    dense = isinstance(adjacency, np.ndarray)
    if dense:
        n = adjacency.shape[0]
        isolated = np.zeros(n, dtype=bool)
    else:
        A = as_csr(adjacency)
        n = A.shape[0]
        indptr, indices = A.indptr, A.indices
        isolated = np.diff(indptr) == 0
    labels = np.full(n, -1, dtype=np.int64)
    iso = np.flatnonzero(isolated)
    labels[iso] = np.arange(len(iso))
    k = len(iso)
    for s0 in np.flatnonzero(~isolated).tolist():
        if labels[s0] >= 0:
            continue
        labels[s0] = k
        frontier = np.array([s0], dtype=np.int64)
        while len(frontier):
            check(deadline)
            if dense:
                reach = adjacency[frontier].any(axis=0)
                reach &= labels < 0
                frontier = np.flatnonzero(reach)
            else:
                starts = indptr[frontier]
                nb = indices[_ranges(starts, indptr[frontier + 1] - starts)]
                frontier = np.unique(nb[labels[nb] < 0])
            labels[frontier] = k
        k += 1
    if k <= 1:
        return [np.arange(n)] if n else []
    first = np.full(k, n, dtype=np.int64)
    np.minimum.at(first, labels, np.arange(n))
    rank = np.empty(k, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(k)
    labels = rank[labels]  # components numbered by their smallest vertex
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


def greedy_coloring(A: CSRGraph, weights: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
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


def dsatur_coloring(A: CSRGraph, weights: np.ndarray) -> np.ndarray:
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
