"""Exact γ_w by branch and bound over the query graph, keeping the running intersection of the chosen boxes.

Seed 000 §6.2 (Algorithm 1 restricted to overlapping sets), organised like a modern max-weight-clique
search (Tomita's MCQ / Carraghan–Pardalos with a weighted colouring bound):

* every query is a vertex, relabelled by decreasing weight (ties: decreasing degree), and every vertex set is
  a Python-int bitset; ``adj[v]`` is the overlap neighbourhood of v;
* a search node holds the chosen set X (weight ``wX``), the per-column intersection ``inter[c]`` of the
  chosen boxes (a bitset over the column's atoms) and the candidates P: the vertices whose box meets that
  intersection on every column.  Since every candidate meets the intersection of X, each set explored is an
  *overlapping* set (its boxes share a row), not merely a clique;
* P is greedily partitioned into independent sets in label order; the cumulative sum of the class maxima
  bounds any overlapping set drawn from the first classes, so candidates are expanded from the last class
  backwards and the node is cut as soon as ``wX + bound ≤ best``;
* adding v to X only shrinks ``inter`` on the columns v constrains; a candidate u is dropped when
  ``u_c ∩ inter'_c = ∅`` on one of the columns that changed (u met the old intersection everywhere else);
* connected components are solved separately, largest colouring bound first.

On a timeout the frontier is summarised by a proven bound: the colouring bound of the top-level candidates
not yet finished in the current component, and the colouring bounds of the components not reached.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpmagic.overlap.clique import colour_bound
from dpmagic.overlap.deadline import SearchTimeout
from dpmagic.overlap.encoding import Problem, words_intersect
from dpmagic.overlap.graph import components

__all__ = ["GraphData", "graph_data", "GraphSearchResult", "graph_search", "GRAPH_MAX_N"]

#: largest sub-problem handed to the graph search (the adjacency is built densely)
GRAPH_MAX_N = 6000
#: most hot queries (term above the best) checked against a branch's intersection (:meth:`_Search.hot_meets`)
HOT_MAX = 32
#: rows of the adjacency built between two deadline checks
_BLOCK = 512


class _Reached(Exception):
    """The search found a set as heavy as its target (a proven upper bound): it is optimal."""


@dataclass
class GraphData:
    """The query graph of a :class:`Problem` with per-column atom bitsets (vertices in problem order)."""

    n: int
    adj: np.ndarray  # (n, n) bool, no self loops
    cols: list[int]  # problem column index per searched column
    qbits: list[list[int]]  # qbits[j][q]: atoms of q on column j (full mask when unconstrained)
    cons: list[np.ndarray]  # cons[j]: bool (n,) q constrains column j
    full: list[int]  # full atom mask per column
    seconds: float

    @property
    def density(self) -> float:
        n = self.n
        return float(self.adj.sum()) / (n * (n - 1)) if n > 1 else 1.0


def _bits_rows(packed: np.ndarray) -> list[int]:
    return [int.from_bytes(row.tobytes(), "little") for row in packed]


def graph_data(prob: Problem, deadline: float = math.inf) -> GraphData:
    """Adjacency and atom bitsets of ``prob``.  ``O(Σ_c n_c² ⌈a_c/64⌉)`` (n_c = queries constraining c)."""
    t0 = time.perf_counter()
    n = prob.n
    adj = np.ones((n, n), dtype=bool)
    cols: list[int] = []
    qbits: list[list[int]] = []
    cons: list[np.ndarray] = []
    full: list[int] = []
    for ci, c in enumerate(prob.columns):
        if time.perf_counter() > deadline:
            raise SearchTimeout
        M = c.dense()
        a = c.a
        constrained = ~np.asarray(M.all(axis=1))
        R = np.flatnonzero(constrained)
        if len(R) == 0:
            continue
        MR = M[R]
        packed = np.packbits(MR, axis=1, bitorder="little")
        nbytes = packed.shape[1]
        words = max(1, (nbytes + 7) // 8)
        pad = np.zeros((len(R), 8 * words), dtype=np.uint8)
        pad[:, :nbytes] = packed
        x = pad.view(np.uint64)
        # 64 atoms per AND (a float matmul is slower and at the mercy of the BLAS threads), in row blocks
        # with a deadline check between blocks (a dense 5,000 × 5,000 build is seconds)
        for s0 in range(0, len(R), _BLOCK):
            if time.perf_counter() > deadline:
                raise SearchTimeout
            s1 = min(len(R), s0 + _BLOCK)
            hit = words_intersect(x[s0:s1], x)
            if len(R) == n:
                adj[s0:s1] &= hit
            else:
                rows = R[s0:s1]
                sub = adj[np.ix_(rows, R)]
                sub &= hit
                adj[np.ix_(rows, R)] = sub
        fm = (1 << a) - 1
        row = [fm] * n
        for q, b in zip(R.tolist(), _bits_rows(packed)):
            row[q] = b
        cols.append(ci)
        qbits.append(row)
        cons.append(constrained)
        full.append(fm)
    np.fill_diagonal(adj, False)
    return GraphData(n, adj, cols, qbits, cons, full, time.perf_counter() - t0)


@dataclass
class GraphSearchResult:
    """``best``: weight of the best overlapping set found (a lower bound of γ on the sub-problem);
    ``atoms``: a row (problem column index → atom) covered by that set; ``upper``: proven upper bound."""

    best: float
    atoms: dict[int, int]
    upper: float
    exact: bool
    nodes: int
    seconds: float


def _to_bits(mask: np.ndarray) -> int:
    return int.from_bytes(np.packbits(mask, bitorder="little").tobytes(), "little")


class _Search:
    def __init__(
        self,
        adj: list[int],
        w: list[float],
        qbits: list[list[int]],
        consbits: list[int],
        vcols: list[list[int]],
        deadline: float,
        tol: float,
    ) -> None:
        self.adj = adj
        self.nadj = [~(a | (1 << v)) for v, a in enumerate(adj)]
        self.w = w
        self.qbits = qbits
        self.consbits = consbits
        self.vcols = vcols  # vcols[v]: searched columns v constrains
        self.deadline = deadline
        self.tol = tol
        self.best = -1.0
        self.target = math.inf  # a proven upper bound of the answer: reaching it ends the search
        self.best_inter: list[int] | None = None
        self.calls = 0
        self.top_bound = math.inf
        #: per vertex a proven bound of the load of every row whose last covering node it is (None: unknown)
        self.terms: list[float] | None = None
        self._hot_for = math.nan
        self._hot: list[int] | None = None

    def hot_meets(self, inter: list[int]) -> bool:
        """Whether some *hot* vertex (term above ``best + tol``) meets the running intersection ``inter``.  When
        none does, every row of the intersection has a cold last covering node, so its load is at most that
        node's term ≤ best: nothing better lies below (the caller prunes).  True when terms are unknown or more
        than ``HOT_MAX`` vertices are hot (not worth checking).  ``O(|hot| · columns)``."""
        terms = self.terms
        if terms is None:
            return True
        thr = self.best + self.tol
        if thr != self._hot_for:  # best only grows: the hot set only shrinks (recomputed O(n) when it does)
            hot = [h for h, t in enumerate(terms) if t > thr]
            self._hot, self._hot_for = (hot if len(hot) <= HOT_MAX else None), thr
        if self._hot is None:
            return True
        qbits, vcols = self.qbits, self.vcols
        for h in self._hot:
            for j in vcols[h]:
                if not qbits[j][h] & inter[j]:
                    break
            else:
                return True
        return False

    def expand(self, P: int, wX: float, inter: list[int], top: bool = False) -> None:
        """Branch and bound below the candidate set ``P`` (chosen weight ``wX``, running intersection ``inter``),
        depth first with an explicit stack (no recursion, so no interpreter limit to raise)."""
        adj, w, qbits, consbits, vcols, nadj = self.adj, self.w, self.qbits, self.consbits, self.vcols, self.nadj
        stack: list[list[Any]] = []  # [P, wX, inter, order, bounds, next index, top]

        def push(P: int, wX: float, inter: list[int], top: bool) -> None:
            self.calls += 1
            if self.calls & 7 == 1 and time.perf_counter() > self.deadline:  # the first node, then every 8th
                raise SearchTimeout
            order, bounds = colour_bound(P, adj, w, self.best + self.tol - wX, nadj)
            stack.append([P, wX, inter, order, bounds, len(order) - 1, top])

        push(P, wX, inter, top)
        while stack:
            f = stack[-1]
            P, wX, inter, order, bounds, i, top = f
            if i >= 0 and top:
                self.top_bound = wX + bounds[i]
            if i < 0 or wX + bounds[i] <= self.best + self.tol:
                if top and i < 0:
                    self.top_bound = self.best
                stack.pop()
                continue
            v = order[i]
            f[5] = i - 1
            P &= ~(1 << v)
            f[0] = P
            NP = P & adj[v]
            ninter = inter
            copied = False
            for j in vcols[v]:
                cur = ninter[j]
                nb = cur & qbits[j][v]
                if nb != cur:
                    if not copied:
                        ninter = list(inter)
                        copied = True
                    ninter[j] = nb
                    cand = NP & consbits[j]
                    if cand:
                        qj = qbits[j]
                        while cand:
                            low = cand & -cand
                            cand ^= low
                            if not qj[low.bit_length() - 1] & nb:
                                NP ^= low
            nw = wX + w[v]
            if copied and not self.hot_meets(ninter):
                continue  # no hot vertex meets the intersection: every row of it has load ≤ best
            if NP:
                push(NP, nw, ninter, False)
            elif nw > self.best + self.tol:
                self.best = nw
                self.best_inter = ninter
                if nw >= self.target:
                    raise _Reached


def graph_search(
    prob: Problem,
    deadline: float,
    *,
    data: GraphData | None = None,
    best: float = -1.0,
    tol: float = 0.0,
    target: float = math.inf,
    terms: np.ndarray | None = None,
) -> GraphSearchResult:
    """Exact max-weight overlapping set of ``prob`` (γ_w of the sub-problem) by graph branch and bound.

    ``best`` is a known lower bound (a witness's load): only strictly better sets are searched for, so the
    result may then have ``atoms == {}`` with ``best`` unchanged (nothing better exists).  Raises nothing on
    a timeout: the result is ``exact=False`` with a proven ``upper``.  ``target``: a proven upper bound of
    the answer (e.g. the current γ for a region of it); a set reaching it is optimal and ends the search.
    ``terms`` (per query, optional): a proven bound of the load of every row whose last covering query (in
    registration order) is that one (the engine's admission terms, issue 28): a branch whose intersection meets
    no query with a term above the best is cut (:meth:`_Search.hot_meets`).
    """
    t0 = time.perf_counter()
    n = prob.n
    w = prob.weights
    if data is None:
        try:
            data = graph_data(prob, deadline)
        except SearchTimeout:
            return GraphSearchResult(best, {}, math.inf, False, 0, time.perf_counter() - t0)
    A = data.adj
    deg = A.sum(axis=1)
    # label order: weight desc, then degree desc
    order = np.lexsort((-deg, -w))
    Ao = A[order][:, order]
    adj = _bits_rows(np.packbits(Ao, axis=1, bitorder="little"))
    wl = w[order].tolist()
    ol = order.tolist()  # Python ints: indexing with numpy scalars costs ≈ 10× more (≈ 20 ms at n = 800, 14 columns)
    qbits = [[row[q] for q in ol] for row in data.qbits]
    consbits = [_to_bits(c[order]) for c in data.cons]
    vcols: list[list[int]] = [[] for _ in range(n)]
    for j, c in enumerate(data.cons):
        for v in np.flatnonzero(c[order]).tolist():
            vcols[v].append(j)
    search = _Search(adj, wl, qbits, consbits, vcols, deadline, tol)
    search.best = best
    search.target = target
    if terms is not None:
        search.terms = np.asarray(terms, dtype=np.float64)[order].tolist()
    comps: list[tuple[float, int]] = []
    for ids in components(Ao):  # as bit sets over the label order
        mask = np.zeros(n, dtype=bool)
        mask[ids] = True
        P = int.from_bytes(np.packbits(mask, bitorder="little").tobytes(), "little")
        _, bnds = colour_bound(P, search.adj, search.w, nadj=search.nadj)
        comps.append((bnds[-1] if bnds else 0.0, P))
    comps.sort(key=lambda x: -x[0])
    upper = -math.inf
    exact = True
    full = list(data.full)
    for k, (cb, P) in enumerate(comps):
        if cb <= search.best + tol:
            break
        search.top_bound = cb
        try:
            search.expand(P, 0.0, full, top=True)
        except _Reached:
            break  # optimal: nothing exceeds the target
        except SearchTimeout:
            exact = False
            upper = max(upper, search.top_bound)
            for cb2, _ in comps[k + 1 :]:
                upper = max(upper, cb2)
            break
    atoms: dict[int, int] = {}
    if search.best_inter is not None:
        for j, S in enumerate(search.best_inter):
            atoms[data.cols[j]] = (S & -S).bit_length() - 1
    upper = max(upper, search.best)
    return GraphSearchResult(search.best, atoms, upper, exact, search.calls, time.perf_counter() - t0)
