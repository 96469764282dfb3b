"""Top sets: every cell of the compressed domain whose load exceeds a threshold, as an admission certificate
(issue 28, session 18: the accountant with 10,000 registered queries).

An admission of ``(box, w)`` only needs ``R = max over box of the load`` when ``R > γ.lower − w`` (the floor).  On
dense sessions γ is usually exact and the floor is within a few weights of it, so ``R ≤ floor`` says that no row of
the box is among the few heaviest ones.  The scoped search proves that from scratch at every admission (0.05–0.5 s
with 10,000 registered).  A *top set* proves it once for many admissions:

* :func:`enumerate_top` (run in the background worker, :mod:`.background`) lists every cell of the compressed
  domain of the nodes ``[0, n)`` (a product of one atom per constrained column, or a product of atoms on a prefix of
  the search's columns below which no node's indicator varies) whose load exceeds a threshold ``T``, with its load,
  and proves that every other row has load at most ``T``.  It is the scoped branch and bound
  (:mod:`.scoped`) with the incumbent held at ``T`` and every leaf above it collected instead of raising it; when
  more than ``cap`` cells are found, the lightest ones are dropped and ``T`` rises to the largest dropped load (the
  subtrees already pruned had loads at most the old ``T``).  The memo is not used (its entries claim "nothing below
  beats the incumbent", false for a subtree whose cells were collected).
* :class:`TopSet` (kept by the engine) holds the cells' geometry (per categorical column the declared values of
  each cell, per numeric column its interval's keys), their proven loads, and per cell ``acc``: a proven bound of the
  weight of the nodes registered since ``n`` that meet it.  A row in cell ``C`` has load at most
  ``load(C) + acc(C)``; a row in no cell has load at most ``T + (weight of the later nodes meeting the box)``.  So

      R ≤ max( max over the cells C meeting the box of load(C) + acc(C),  T + L ),

  where ``L`` bounds the load of the later nodes alone over the box: the weight of those meeting it
  (``O(cells · constraints)`` in all), or, when that is not enough, their maximum overlap within the box (a search
  over tens of nodes instead of thousands).  When the bound is at most the floor the admission needs no search;
  otherwise it searches as before.

The cells' loads are the search's float sums through :meth:`~.rounding.ProblemRounding.up` (proven upper bounds), and
so is ``T``; ``acc`` and the sums above are rounded up.  A top set also bounds γ of its nodes: ``γ_{<n} ≤ max(T,
loads)`` (the engine applies it as a snapshot, :meth:`~.engine.OverlapEngine._install_snapshot`).

Measured (2-core VM, session 18): the 10,000-query dense prefill, threshold γ − 3 with a cap of 4,096 cells, took
1.8 s (T rose to γ − 0.99); γ − 0.5 gave 384 cells in 1.05 s.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpmagic.domain.schema import CategoricalColumn, NumericColumn, Schema
from dpmagic.domain.sets import Box, CategorySet, IntervalSet
from dpmagic.overlap.deadline import SearchTimeout
from dpmagic.overlap.encoding import BoxStore, Problem, _CatStore, _LazyNumericValues, _NumStore, build_problem
from dpmagic.overlap.portfolio import PortfolioConfig
from dpmagic.overlap.rounding import ProblemRounding, add_up, sum_up
from dpmagic.overlap.scoped import _Search, scoped_fits

__all__ = ["TopCells", "TopSet", "enumerate_top", "TOP_CAP"]

#: the most cells a top set keeps (the threshold rises to keep within it)
TOP_CAP = 4096


@dataclass
class TopCells:
    """What :func:`enumerate_top` proves about the nodes ``[0, n)``: every row outside the cells has load at most
    ``threshold``; cell ``i`` has load at most ``loads[i]`` (all proven).  Geometry: ``cat[name]`` (cells × declared
    values, bool) and ``num[name]`` (the cells' start and end keys, half-open, as :class:`~.encoding.BoxStore`'s
    numeric keys); a column in neither is unconstrained in every cell.  ``rows[i]``: a row of cell ``i``."""

    n: int
    threshold: float
    loads: np.ndarray
    cat: dict[str, np.ndarray]
    num: dict[str, tuple[np.ndarray, np.ndarray]]
    rows: list[dict[str, Any]]

    @property
    def upper(self) -> float:
        """A proven bound of γ of the nodes ``[0, n)``."""
        return max(self.threshold, float(self.loads.max()) if len(self.loads) else -math.inf)


class _NoMemo(dict[Any, Any]):
    """A memo that keeps nothing (see the module docstring)."""

    def __setitem__(self, key: Any, value: Any) -> None:
        return None


class _Collect(_Search):
    """The scoped search with the incumbent held at the threshold: cells above it are collected (a heap of at most
    ``cap``; an overflow raises the threshold to the dropped cell's load)."""

    def __init__(self, prob: Problem, deadline: float, threshold: float, cap: int, slack: float) -> None:
        super().__init__(prob, deadline, threshold, math.inf, slack, None)
        self.memo = [_NoMemo() for _ in self.memo]
        self.cap = cap
        #: (load, tiebreak, atoms of the search's first len(atoms) columns) of the cells found
        self.cells: list[tuple[float, int, tuple[int, ...]]] = []
        self._count = 0

    def _collect(self, fixed: float, depth: int) -> None:
        self._count += 1
        heapq.heappush(self.cells, (fixed, self._count, tuple(self.x[:depth])))
        if len(self.cells) > self.cap:
            lo = heapq.heappop(self.cells)[0]
            self.best = max(self.best, lo)  # every cell left out now has load at most the threshold

    def _enter(
        self,
        j: int,
        alive: np.ndarray,
        fixed: float,
        rest: np.ndarray,
        pre: tuple[np.ndarray, np.ndarray | None, np.ndarray] | None = None,
    ) -> bool | None:
        if j == self.k:
            if fixed > self.best:
                self._collect(fixed, j)
            return False
        return super()._enter(j, alive, fixed, rest, pre)

    def _flat(self, j: int, fixed: float) -> bool:
        # every row below this node has load ``fixed`` (> the threshold): one cell, free from column j on
        self._collect(fixed, j)
        return False


def enumerate_top(
    store: BoxStore,
    threshold: float,
    deadline: float,
    *,
    cap: int = TOP_CAP,
    max_atoms: int = PortfolioConfig.scoped_max_atoms,
    max_columns: int = PortfolioConfig.scoped_max_columns,
) -> TopCells | None:
    """Every cell of the nodes of ``store`` with load above ``threshold`` (see the module docstring), or None when
    the problem does not fit the scoped search (``max_atoms``, ``max_columns``) or the deadline passes first.
    ``O(search)``: exponential in the worst case, like :func:`~.scoped.scoped_search`."""
    ids = np.flatnonzero(store.alive[: store.n])
    prob = build_problem(store, ids, None)
    if not prob.columns:
        # no node constrains anything: every row has the same load (one cell, the whole domain)
        total = sum_up(store.weights[ids].tolist())
        t = max(0.0, float(threshold))
        if total > t:
            return TopCells(store.n, t, np.array([total]), {}, {}, [dict(prob.defaults)])
        return TopCells(store.n, t, np.zeros(0), {}, {}, [])
    if not scoped_fits(prob, max_atoms, max_columns):
        return None
    rnd = ProblemRounding.of(prob)
    # loads are sums of positive weights: below 0 a threshold only adds the cells of load 0
    s = _Collect(prob, deadline, max(0.0, threshold), cap, rnd.slack)
    try:
        s.run()
    except SearchTimeout:
        return None
    cells = sorted(s.cells, reverse=True)
    t_up = rnd.up(s.best) if math.isfinite(s.best) else s.best
    loads = np.array([rnd.up(c[0]) for c in cells], dtype=np.float64)
    cat, num, rows = _geometry(store, prob, ids, [s.order[p] for p in range(s.k)], [c[2] for c in cells])
    return TopCells(store.n, float(t_up), loads, cat, num, rows)


def _geometry(
    store: BoxStore, prob: Problem, ids: np.ndarray, order: list[int], atoms: list[tuple[int, ...]]
) -> tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]], list[dict[str, Any]]]:
    """The cells' extent per problem column (columns not fixed by a cell span their whole domain) and a row of each."""
    ncell = len(atoms)
    pos_of = {ci: p for p, ci in enumerate(order)}
    cat: dict[str, np.ndarray] = {}
    num: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    rows: list[dict[str, Any]] = [dict(prob.defaults) for _ in range(ncell)]
    for ci, pc in enumerate(prob.columns):
        p = pos_of.get(ci)
        chosen = [a[p] if p is not None and p < len(a) else -1 for a in atoms]  # -1: the whole column
        cs = store.cols[pc.name]
        col = cs.column
        if isinstance(col, CategoricalColumn):
            assert pc.M is not None and isinstance(cs, _CatStore)
            # each declared value belongs to the atom whose membership column it shares (the deduplicated atoms)
            full = cs.mask[:, ids]  # (values, queries)
            key = {np.packbits(pc.M[:, a]).tobytes(): a for a in range(pc.a)}
            group = np.array([key[np.packbits(full[v]).tobytes()] for v in range(col.size)], dtype=np.int64)
            m = np.ones((ncell, col.size), dtype=bool)
            for i, a in enumerate(chosen):
                if a >= 0:
                    m[i] = group == a
                rows[i][pc.name] = col.values[int(np.flatnonzero(m[i])[0])]
            cat[pc.name] = m
        else:
            assert isinstance(col, NumericColumn) and isinstance(pc.values, _LazyNumericValues)
            assert isinstance(cs, _NumStore)
            cuts, ai = pc.values.cuts, pc.values.atom_index
            lo, hi = cs.domain_keys()
            st = np.full(ncell, lo, dtype=cs.dtype)
            en = np.full(ncell, hi, dtype=cs.dtype)
            for i, a in enumerate(chosen):
                if a >= 0:
                    st[i] = cuts[int(ai[a])]
                    en[i] = cuts[int(ai[a + 1])] if a + 1 < pc.a else cuts[-1]
                    rows[i][pc.name] = pc.values[a]
                else:
                    rows[i][pc.name] = pc.values[0]
            num[pc.name] = (st, en)
    return cat, num, rows


@dataclass
class TopSet:
    """A :class:`TopCells` in the engine, with ``acc`` (per cell, a proven bound of the weight of the nodes registered
    since ``cells.n`` that meet it)."""

    cells: TopCells
    schema: Schema
    acc: np.ndarray = field(init=False)
    _helpers: dict[str, _NumStore] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.acc = np.zeros(len(self.cells.loads))

    def meets(self, box: Box) -> np.ndarray:
        """Which cells the box meets.  ``O(cells · constraints)``."""
        c = self.cells
        out = np.ones(len(c.loads), dtype=bool)
        for name, vs in box.constraints.items():
            if name in c.cat:
                assert isinstance(vs, CategorySet)
                idx = np.asarray(list(vs.indices), dtype=np.intp)
                out &= c.cat[name][:, idx].any(axis=1) if len(idx) else False
            elif name in c.num:
                assert isinstance(vs, IntervalSet)
                h = self._helpers.get(name)
                if h is None:
                    # the column as the store takes it (:meth:`~.encoding.BoxStore.column_of`: a column outside the
                    # schema comes with the value set; red team 19)
                    col = self.schema[name] if name in self.schema else vs.column  # noqa: SIM401 (no .get)
                    assert isinstance(col, NumericColumn)
                    h = self._helpers[name] = _NumStore(col, 0, 0)
                s, e = h.set_keys(vs)
                cs, ce = c.num[name]
                hit = np.zeros(len(c.loads), dtype=bool)
                for j in range(len(s)):
                    hit |= (cs < e[j]) & (s[j] < ce)
                out &= hit
            # a column no cell constrains: every cell spans it
        return out

    def add(self, box: Box, weight: float) -> None:
        """A node registered after ``cells.n``: the cells it meets may gain its weight (rounded up)."""
        if box.is_empty() or len(self.acc) == 0:
            return
        m = self.meets(box)
        self.acc[m] = np.nextafter(self.acc[m] + float(weight), math.inf)

    def inside(self, box: Box) -> float:
        """A proven bound of the maximum load over the rows of ``box`` in the cells (−inf: it meets none)."""
        m = self.meets(box)
        if not m.any():
            return -math.inf
        return float(np.nextafter(self.cells.loads[m] + self.acc[m], math.inf).max())

    def bound(self, box: Box, later: float) -> float:
        """A proven bound of the maximum load over ``box``.  ``later``: a proven bound of the maximum over the box's
        rows of the load of the nodes registered since ``cells.n`` (their weight meeting the box bounds it; so does
        their own maximum overlap within the box, a much smaller problem)."""
        return max(add_up(self.cells.threshold, later), self.inside(box))
