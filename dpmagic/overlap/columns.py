"""Branch and bound over columns (Smith et al. 2022 §6.2 adapted to boxes; docs/design.md §2).

Fix one column to one atom at a time (atoms in order of decreasing compatible weight), dropping the queries
that miss it.  Bound at a node: ``min over free columns c of max over atoms v of the alive weight covering v``
(column sums).  A node whose bound equals its alive weight is a leaf (all alive queries share a point); a node
whose remaining load tensor is small is finished by :func:`~.tensor.tensor_max`.  Connected components of the
query graph are solved separately, heaviest first (:func:`.graph.components`, the one implementation).  Strong
when few columns carry many constraints (small atom product).  Exponential in the worst case; the deadline is
checked at every node (:class:`~.deadline.SearchTimeout`) and a timed-out search reports its frontier's bound.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from dpmagic.overlap.deadline import SearchTimeout
from dpmagic.overlap.encoding import Problem, packed_words, words_intersect
from dpmagic.overlap.graph import components
from dpmagic.overlap.rounding import ProblemRounding
from dpmagic.overlap.tensor import tensor_cost, tensor_max

__all__ = ["column_search", "TENSOR_CELLS", "KR_ENTRIES", "TENSOR_LEAF_SECONDS"]

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
    packed = [packed_words(c.M.T) if c.M is not None else None for c in prob.columns]
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
                rs, re = c.runs()
                hit = np.zeros((s1 - s0, n), dtype=bool)
                for i in range(rs.shape[1]):
                    for j in range(rs.shape[1]):
                        hit |= (rs[s0:s1, i, None] < re[None, :, j]) & (rs[None, :, j] < re[s0:s1, i, None])
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
        cells, kr = tensor_cost(prob)
        # a tensor leaf is one uninterruptible numpy call: only start it if it fits before the deadline
        scale = min(1.0, (self.deadline - time.perf_counter()) / TENSOR_LEAF_SECONDS)
        if cells <= TENSOR_CELLS * scale and kr <= KR_ENTRIES * scale:
            self.used_tensor = True
            value, named = tensor_max(prob)
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


def column_search(
    prob: Problem, deadline: float, rnd: ProblemRounding, incumbent: float, adjacency: np.ndarray | None
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
