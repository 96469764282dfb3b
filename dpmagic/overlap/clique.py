"""Exact maximum weight clique ω_w by branch and bound with colouring bounds.

Smith et al. 2022 §6.1, Algorithm 1 (after Carraghan–Pardalos / Tomita's MCQ with a weighted colouring bound):
vertices are relabelled by decreasing weight and each candidate set is a Python-int bitset.  At every node
the candidate set P is greedily partitioned into independent sets; the cumulative sum of the class maxima
bounds any clique drawn from the first classes, so vertices are expanded from the last class backwards and
the node is pruned as soon as ``weight(C) + bound ≤ best``.  Connected components are solved separately,
heaviest first.

A run that hits its time limit is **not exact**: ``lower`` is the weight of a clique found (a lower bound of
ω_w that may even be below γ_w — never charge it) and ``upper`` is a proven upper bound (the unexplored
frontier's colouring bound, or a component's total weight).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpmagic.overlap.deadline import SearchTimeout
from dpmagic.overlap.graph import CSRGraph, as_csr, components
from dpmagic.overlap.result import CliqueResult, OverlapResult
from dpmagic.overlap.rounding import grid_of, is_exact, proven_upper, sum_down

__all__ = ["CliqueResult", "max_weight_clique", "DENSE_CLIQUE_MAX"]

#: components larger than this are not searched (their bound is their colouring/total weight)
DENSE_CLIQUE_MAX = 12_000


def colour_bound(
    P: int, adj: list[int], w: list[float], skip: float = -math.inf, nadj: list[int] | None = None
) -> tuple[list[int], list[float]]:
    """Greedy colouring of the candidate bitset ``P`` for weighted clique branch and bound.

    Vertices are taken in bit order (callers number them heaviest first), each colour class greedily; returns
    the vertices in colouring order and, for each, the sum of the class maxima up to its class: an upper bound
    on the weight of any clique among the vertices up to it (Tomita-style colouring bound, weighted).
    Vertices of classes whose bound is ``<= skip`` are coloured but not returned (a caller that prunes at
    that bound would never branch on them: San Segundo et al.'s BBMC ``kmin``).  ``nadj[v]``, if given, is
    ``~(adj[v] | 1 << v)`` (saves one operation per vertex).  O(|P|²/64) word operations.
    """
    if nadj is None:
        nadj = [~(a | (1 << v)) for v, a in enumerate(adj)] if P else []
    order: list[int] = []
    bounds: list[float] = []
    cum = 0.0
    Q = P
    while Q:
        avail = Q
        cum += w[(avail & -avail).bit_length() - 1]  # the class's first vertex is its heaviest
        if cum <= skip:
            while avail:
                low = avail & -avail
                avail &= nadj[low.bit_length() - 1]
                Q ^= low
            continue
        start = len(order)
        while avail:
            low = avail & -avail
            v = low.bit_length() - 1
            avail &= nadj[v]
            Q ^= low
            order.append(v)
        bounds.extend([cum] * (len(order) - start))
    return order, bounds


class _Search:
    def __init__(self, adj: list[int], w: list[float], deadline: float) -> None:
        self.adj = adj
        self.nadj = [~(a | (1 << v)) for v, a in enumerate(adj)]
        self.w = w
        self.deadline = deadline
        self.best = 0.0
        self.best_set: list[int] = []
        self.calls = 0
        self.top_bound = math.inf

    def expand(self, P: int, cw: float, C: list[int], top: bool = False) -> None:
        """Branch and bound below the candidate set ``P`` (clique ``C`` of weight ``cw``), depth first with an
        explicit stack (no recursion, so no interpreter limit to raise); raises :class:`SearchTimeout`."""
        adj, w, nadj = self.adj, self.w, self.nadj
        stack: list[list[Any]] = []  # [P, cw, order, bounds, next index, top]

        def push(P: int, cw: float, top: bool) -> None:
            self.calls += 1
            if self.calls & 15 == 1 and time.perf_counter() > self.deadline:  # the first node, then every 16th
                raise SearchTimeout
            order, bounds = colour_bound(P, adj, w, self.best - cw, nadj)
            stack.append([P, cw, order, bounds, len(order) - 1, top])

        push(P, cw, top)
        while stack:
            f = stack[-1]
            P, cw, order, bounds, i, top = f
            if i >= 0 and top:
                self.top_bound = cw + bounds[i]
            if i < 0 or cw + bounds[i] <= self.best:
                if top and i < 0:
                    self.top_bound = self.best
                stack.pop()
                if stack:  # back in the parent: the vertex it branched on is done
                    stack[-1][0] &= ~(1 << C.pop())
                continue
            v = order[i]
            f[4] = i - 1
            NP = P & adj[v]
            nw = cw + w[v]
            C.append(v)
            if NP:
                push(NP, nw, False)
                continue
            if nw > self.best:
                self.best = nw
                self.best_set = list(C)
            C.pop()
            f[0] = P & ~(1 << v)


def _bitsets(A: CSRGraph, order: np.ndarray) -> list[int]:
    """Adjacency rows of the vertices ``order`` (relabelled 0..k-1) as Python-int bitsets."""
    sub = A.dense(order)
    packed = np.packbits(sub, axis=1, bitorder="little")
    return [int.from_bytes(row.tobytes(), "little") for row in packed]


def max_weight_clique(
    adjacency: Any,
    weights: Any,
    time_limit: float = 10.0,
    *,
    upper_hint: float = math.inf,
    initial: Sequence[int] | np.ndarray | None = None,
) -> OverlapResult:
    """Maximum weight clique of the graph ``adjacency`` (sparse/dense matrix or networkx graph).

    Reference: Smith et al. 2022 §6.1, Algorithm 1.  Complexity: exponential in the worst case (NP-hard), each
    node ``O(|P|²/64)`` for the greedy colouring; bounded by ``time_limit`` (then ``exact=False``).
    ``upper_hint`` (any proven bound such as a colouring) caps ``upper`` on a timeout.  ``initial`` is a
    known clique (e.g. the nodes covering a γ witness) that seeds the incumbent and so the pruning.
    """
    t0 = time.perf_counter()
    deadline = t0 + time_limit
    A = as_csr(adjacency)
    w = np.asarray(weights, dtype=np.float64)
    n = A.shape[0]
    if n == 0:
        return OverlapResult(0.0, 0.0, True, None, (), "clique", time.perf_counter() - t0)
    comps = components(A)
    totals = [float(w[c].sum()) for c in comps]
    order_c = np.argsort(-np.array(totals), kind="stable")
    best = 0.0
    best_set: list[int] = []
    if initial is not None and len(initial):
        init = [int(i) for i in initial]
        sub = A.dense(init)
        np.fill_diagonal(sub, True)
        if sub.all():
            best, best_set = float(np.sum(w[init])), init
    upper = 0.0
    exact = True
    for pos, k in enumerate(order_c):
        comp = comps[k]
        if totals[k] <= best:
            break
        if len(comp) == 1:
            best, best_set = float(w[comp[0]]), [int(comp[0])]
            continue
        if len(comp) > DENSE_CLIQUE_MAX or time.perf_counter() > deadline:
            exact = False
            upper = max(upper, totals[k])
            continue
        vorder = comp[np.argsort(-w[comp], kind="stable")]
        search = _Search(_bitsets(A, vorder), w[vorder].tolist(), deadline)
        search.best = best
        search.top_bound = totals[k]
        try:
            search.expand((1 << len(vorder)) - 1, 0.0, [], top=True)
        except SearchTimeout:
            exact = False
            upper = max(upper, search.top_bound)
            # components not reached: bounded by their total weight
            for k2 in order_c[pos + 1 :]:
                if totals[k2] > max(best, search.best):
                    upper = max(upper, totals[k2])
            if search.best > best:
                best, best_set = search.best, [int(vorder[i]) for i in search.best_set]
            break
        if search.best > best:
            best, best_set = search.best, [int(vorder[i]) for i in search.best_set]
    lower = sum_down(w[best_set].tolist()) if best_set else 0.0
    # the search's sums and pruning comparisons are float64 sums of ≤ 2n non-negative weights: round the
    # best clique (exact) or the frontier bound (timeout) up; a proven hint caps a timed-out search
    grid = grid_of(w)
    if exact:
        upper = proven_upper(max(best, lower), 2 * n + 2, grid=grid)
    else:
        upper = min(proven_upper(max(upper, best, lower), 2 * n + 2, grid=grid), upper_hint)
    upper = max(upper, lower)
    exact = exact and is_exact(lower, upper)
    return OverlapResult(lower, upper, exact, None, tuple(sorted(best_set)), "clique", time.perf_counter() - t0)
