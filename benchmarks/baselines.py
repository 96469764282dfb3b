"""Smith et al. 2022's own algorithms, as baselines for dpmagic's overlap engine.

Every baseline starts from the boxes, so its time includes building the query graph the way Smith et al. 2022 §6–7
does: one pairwise :meth:`~dpmagic.domain.sets.Box.overlaps` test per pair of queries (Prop. 3, O(m t²)) into a
``networkx.Graph``.  Then:

* :func:`dsatur_bound` — ``networkx.algorithms.coloring.greedy_color(G, strategy="DSATUR")`` (Smith et al. 2022
  Algorithm 2, §6.3): a proper colouring, whose weight Σ over colour classes of the class's max weight
  (the number of colours when unweighted) is a safe upper bound χ̃_w ≥ γ_w;
* :func:`networkx_clique` — ``networkx.max_weight_clique(G, weight="weight")`` (exact ω_w; integer weights);
* :func:`algorithm1_clique` — Smith et al. 2022 Algorithm 1 (§6.1): branch and bound for the maximum weight clique,
  branching on a maximum-degree vertex and pruning with ``comp(X) + χ̃_w(G) <= comp(B)`` (a greedy weighted
  colouring of the candidate subgraph);
* :func:`algorithm1_overlap` — its maximum-overlap variant (§6.2): additionally abandon a branch as soon as
  the candidate set X has an empty joint intersection (``Box.intersect(...).is_empty()``).

All take ``time_limit`` seconds of wall clock (graph construction included); the searches check it
cooperatively and return the best found so far with ``timed_out=True``.  A timed-out clique/overlap value is
only a lower bound.  Vertices carry an integer or float ``weight``; an unweighted workload uses 1.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
from networkx.algorithms.clique import MaxWeightClique
from networkx.algorithms.coloring.greedy_coloring import strategy_saturation_largest_first

from dpmagic.domain.sets import Box

__all__ = [
    "BaselineResult",
    "BaselineTimeout",
    "build_graph",
    "dsatur_bound",
    "networkx_clique",
    "algorithm1_clique",
    "algorithm1_overlap",
    "brute_force_overlap",
    "brute_force_clique",
]


class BaselineTimeout(Exception):
    """Raised inside a baseline when its deadline passes."""


@dataclass
class BaselineResult:
    """Outcome of one baseline run.

    ``value`` is the bound found (colouring weight, clique or overlap weight); when ``timed_out`` it is the
    best found before the deadline (a lower bound for clique/overlap, ``None`` if graph building or
    colouring did not finish).  ``graph_seconds`` is the pairwise graph construction part of ``seconds``.
    """

    name: str
    value: float | None
    timed_out: bool
    seconds: float
    graph_seconds: float
    members: list[int] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "timed_out": self.timed_out,
            "seconds": self.seconds,
            "graph_seconds": self.graph_seconds,
            **self.extra,
        }


def _check(deadline: float) -> None:
    if time.perf_counter() > deadline:
        raise BaselineTimeout


def build_graph(
    boxes: Sequence[Box], weights: Sequence[float] | None = None, deadline: float = float("inf")
) -> nx.Graph:
    """The query graph (Smith et al. 2022 §5): a vertex per box (attribute ``weight``), an edge per overlapping pair.

    Pairwise :meth:`Box.overlaps` tests, O(m t²); raises :class:`BaselineTimeout` after ``deadline``
    (a ``time.perf_counter()`` value).
    """
    G = nx.Graph()
    ws = [1] * len(boxes) if weights is None else list(weights)
    G.add_nodes_from((i, {"weight": ws[i]}) for i in range(len(boxes)))
    for i in range(len(boxes)):
        if i % 16 == 0:
            _check(deadline)
        bi = boxes[i]
        if bi.is_empty():
            continue
        for j in range(i + 1, len(boxes)):
            if bi.overlaps(boxes[j]):
                G.add_edge(i, j)
    return G


def _graph(boxes: Sequence[Box], weights: Sequence[float] | None, deadline: float) -> tuple[nx.Graph, float]:
    t0 = time.perf_counter()
    G = build_graph(boxes, weights, deadline)
    return G, time.perf_counter() - t0


def coloring_weight(coloring: dict[int, int], weights: dict[int, float]) -> float:
    """Σ over colour classes of the class's maximum weight (Smith et al. 2022 §5, w(S))."""
    best: dict[int, float] = {}
    for v, c in coloring.items():
        best[c] = max(best.get(c, 0.0), weights[v])
    return float(sum(best.values()))


def dsatur_bound(
    boxes: Sequence[Box],
    weights: Sequence[float] | None = None,
    time_limit: float = 60.0,
    graph: nx.Graph | None = None,
) -> BaselineResult:
    """Smith et al. 2022 Algorithm 2: networkx DSatur colouring of the query graph; value = colouring weight."""
    t0 = time.perf_counter()
    deadline = t0 + time_limit
    try:
        if graph is None:
            G, gsec = _graph(boxes, weights, deadline)
        else:
            G, gsec = graph, 0.0

        def strategy(G_: nx.Graph, colors: dict[int, int]) -> Any:
            for k, v in enumerate(strategy_saturation_largest_first(G_, colors)):
                if k % 64 == 0:
                    _check(deadline)
                yield v

        coloring = nx.algorithms.coloring.greedy_color(G, strategy=strategy)
    except BaselineTimeout:
        return BaselineResult("dsatur", None, True, time.perf_counter() - t0, time.perf_counter() - t0)
    w = {v: float(G.nodes[v]["weight"]) for v in G.nodes}
    value = coloring_weight(coloring, w)
    return BaselineResult(
        "dsatur",
        value,
        False,
        time.perf_counter() - t0,
        gsec,
        extra={"colors": len(set(coloring.values())), "edges": G.number_of_edges()},
    )


class _TimedMaxWeightClique(MaxWeightClique):
    """networkx's MaxWeightClique with a cooperative deadline check in ``expand``."""

    def __init__(self, G: nx.Graph, weight: str | None, deadline: float) -> None:
        super().__init__(G, weight)
        self.deadline = deadline
        self.calls = 0

    def expand(self, C: list[Any], C_weight: int, P: list[Any]) -> None:  # type: ignore[override]
        self.calls += 1
        if self.calls % 32 == 0:
            _check(self.deadline)
        super().expand(C, C_weight, P)


def networkx_clique(
    boxes: Sequence[Box], weights: Sequence[int] | None = None, time_limit: float = 60.0, graph: nx.Graph | None = None
) -> BaselineResult:
    """``networkx.max_weight_clique(G, weight="weight")`` on the query graph (integer weights), with a deadline."""
    t0 = time.perf_counter()
    deadline = t0 + time_limit
    try:
        G, gsec = (graph, 0.0) if graph is not None else _graph(boxes, weights, deadline)
    except BaselineTimeout:
        return BaselineResult("nx_clique", None, True, time.perf_counter() - t0, time.perf_counter() - t0)
    solver = _TimedMaxWeightClique(G, "weight", deadline)
    timed_out = False
    try:
        solver.find_max_weight_clique()
    except BaselineTimeout:
        timed_out = True
    return BaselineResult(
        "nx_clique",
        float(solver.incumbent_weight),
        timed_out,
        time.perf_counter() - t0,
        gsec,
        members=sorted(solver.incumbent_nodes),
    )


# --------------------------------------------------------------------------------------------------
# Smith et al. 2022 Algorithm 1 (and the §6.2 maximum-overlap variant), on bitset adjacency


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


class _Algorithm1:
    """Smith et al. 2022 Algorithm 1: max weight clique with colouring-based pruning and max-degree branching.

    The graph is kept as Python-int bitsets (``adj[v]`` has bit u set iff u ~ v); a sub-problem is the
    bitset ``P`` of candidate vertices.  At every node the bound is ``comp(X) + χ̃_w(G[P])`` where χ̃_w is a
    greedy weighted colouring (vertices by decreasing weight, each to the first colour class it has no
    neighbour in; weight Σ of class maxima).  With ``boxes`` given, the §6.2 variant also abandons X when
    the joint intersection of its boxes is empty.
    """

    def __init__(self, adj: list[int], w: list[float], deadline: float, boxes: Sequence[Box] | None = None) -> None:
        self.adj = adj
        self.w = w
        self.deadline = deadline
        self.boxes = boxes
        self.best_w = 0.0
        self.best: list[int] = []
        self.nodes = 0
        # vertex order by decreasing weight for the greedy colouring
        self.by_weight = sorted(range(len(w)), key=lambda v: -w[v])
        self.global_ub = sum(w)

    def color_bound(self, P: int) -> float:
        classes: list[int] = []
        total = 0.0
        adj = self.adj
        for v in self.by_weight:
            if not (P >> v) & 1:
                continue
            a = adj[v]
            for k in range(len(classes)):
                if not a & classes[k]:
                    classes[k] |= 1 << v
                    break
            else:
                classes.append(1 << v)
                total += self.w[v]  # first (heaviest) member fixes the class weight
        return total

    def search(self, P: int, X: list[int], wX: float, inter: Box | None) -> bool:
        """Explore cliques X ∪ S with S ⊆ P.  Returns True when the global optimum has been proven."""
        while True:
            self.nodes += 1
            if self.nodes % 16 == 0:
                _check(self.deadline)
            if not P:
                if wX > self.best_w:
                    self.best_w, self.best = wX, list(X)
                return self.best_w >= self.global_ub
            ub = wX + self.color_bound(P)
            if ub <= self.best_w:
                return False
            # max-degree vertex of G[P]
            q, qdeg = -1, -1
            for v in _bits(P):
                d = (self.adj[v] & P).bit_count()
                if d > qdeg:
                    q, qdeg = v, d
            new_inter = inter
            feasible = True
            if self.boxes is not None:
                new_inter = self.boxes[q] if inter is None else inter.intersect(self.boxes[q])
                feasible = not new_inter.is_empty()
            if feasible and self.search(P & self.adj[q], [*X, q], wX + self.w[q], new_inter):
                return True
            if self.best_w >= ub:  # line 15: the bound is attained, nothing better below
                return False
            P &= ~(1 << q)


def _adjacency_bits(G: nx.Graph, n: int) -> list[int]:
    adj = [0] * n
    for u, v in G.edges():
        adj[u] |= 1 << v
        adj[v] |= 1 << u
    return adj


def _algorithm1(
    name: str,
    boxes: Sequence[Box],
    weights: Sequence[float] | None,
    time_limit: float,
    graph: nx.Graph | None,
    overlap: bool,
) -> BaselineResult:
    t0 = time.perf_counter()
    deadline = t0 + time_limit
    try:
        G, gsec = (graph, 0.0) if graph is not None else _graph(boxes, weights, deadline)
    except BaselineTimeout:
        return BaselineResult(name, None, True, time.perf_counter() - t0, time.perf_counter() - t0)
    n = len(boxes)
    w = [float(G.nodes[v]["weight"]) for v in range(n)]
    search = _Algorithm1(_adjacency_bits(G, n), w, deadline, boxes if overlap else None)
    P = 0
    for v in range(n):
        if w[v] > 0 and not boxes[v].is_empty():
            P |= 1 << v
    timed_out = False
    try:
        search.search(P, [], 0.0, None)
    except BaselineTimeout:
        timed_out = True
    return BaselineResult(
        name,
        search.best_w,
        timed_out,
        time.perf_counter() - t0,
        gsec,
        members=sorted(search.best),
        extra={"search_nodes": search.nodes},
    )


def algorithm1_clique(
    boxes: Sequence[Box],
    weights: Sequence[float] | None = None,
    time_limit: float = 60.0,
    graph: nx.Graph | None = None,
) -> BaselineResult:
    """Smith et al. 2022 Algorithm 1 (§6.1): exact maximum weight clique ω_w of the query graph."""
    return _algorithm1("alg1_clique", boxes, weights, time_limit, graph, overlap=False)


def algorithm1_overlap(
    boxes: Sequence[Box],
    weights: Sequence[float] | None = None,
    time_limit: float = 60.0,
    graph: nx.Graph | None = None,
) -> BaselineResult:
    """Smith et al. 2022 §6.2: Algorithm 1 restricted to candidate sets with non-empty joint intersection: exact γ_w."""
    return _algorithm1("alg1_overlap", boxes, weights, time_limit, graph, overlap=True)


# --------------------------------------------------------------------------------------------------
# brute force references (tiny instances only; used by the tests)


def brute_force_overlap(
    boxes: Sequence[Box], rows: Sequence[dict[str, Any]], weights: Sequence[float] | None = None
) -> float:
    """γ_w by enumerating the given domain ``rows`` (every row of a tiny domain): max_x Σ_{q ∋ x} w_q."""
    ws = [1.0] * len(boxes) if weights is None else [float(x) for x in weights]
    best = 0.0
    for row in rows:
        best = max(best, sum(w for b, w in zip(boxes, ws) if not b.is_empty() and b.contains_row(row)))
    return best


def brute_force_clique(G: nx.Graph) -> float:
    """ω_w by enumerating all subsets (tiny graphs only)."""
    nodes = list(G.nodes)
    best = 0.0
    for r in range(1, len(nodes) + 1):
        for S in itertools.combinations(nodes, r):
            if all(G.has_edge(a, b) for a, b in itertools.combinations(S, 2)):
                best = max(best, float(sum(G.nodes[v]["weight"] for v in S)))
    return best
