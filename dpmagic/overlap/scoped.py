"""Branch and bound over columns in a fixed order with scope-partitioned bounds (issue 28: dense analyst sessions).

The instance: few columns of few atoms (an admission's region problem on Adult: ≤ 16 atoms per categorical
column, a few dozen per numeric one), each query constraining few of them (≤ 3 columns plus the region).  The
load is a sum of factors, one per query, each a product of indicators over the query's constrained columns
(its *scope*).  Columns are fixed one at a time in one static order (most constrained first).  At a node
fixing the first ``j`` columns, a live query (consistent with the fixed atoms) whose scope holds no free
column adds its whole weight; every other live query is *assigned* to the first free column of its scope
and relaxed to its one-column indicator there.  So

    max load below the node ≤ fixed weight + Σ_{free c} max_a Σ_{q assigned to c, q covers a} w_q,

a valid bound (the maximum of a sum is at most the sum of the maxima, and dropping a factor's other
indicators only raises it).  This is the mini-bucket bound of i-bound 1 for the static order (Dechter and
Rish, "Mini-buckets: a general scheme for bounded inference", Journal of the ACM 50(2):107–153, 2003;
used as a search heuristic by Kask and Dechter, "A general scheme for automatic generation of search
heuristics from specification dependencies", Artificial Intelligence 129:91–131, 2001), and exact once a
query's scope is all fixed.  Because the order is static, the assignment at depth ``j`` depends only on the
query and ``j``; each level's tables are cut once.  A node's sums are mostly its parent's: a live query whose
first free column is ``c > j`` does not constrain ``j``, so it is live in every child of the node and its sums
over ``c`` pass down unchanged (the parent's star table below is the child's column sums); a node computes only
the sums of the queries whose first free column is its own (one product with their weighted memberships), not
a product over all live queries.  Children (atoms of column ``j``) are visited by decreasing bound and cut
against the incumbent (or the caller's ``floor``); the first descent is the greedy row; the memo is consulted
only at nodes that branch.

The search runs on an explicit stack of frames (:meth:`_Search.run`), so a timed-out search keeps its state and
:func:`scoped_search` ``state=`` resumes it later on the same problem (a pending term re-tightened commit after
commit, issue 28).  With the engine's per-query *terms* (a proven bound of every row a query covers last), a node
none of whose live queries has a term above the incumbent is pruned, and only atoms some such *hot* query covers
are branched on (:meth:`_Search.cold`).

Compared with :mod:`.columns` (bound: min over free columns of one column's sums of *all* live queries) the
partitioned bound charges each query once, which is what makes it tight when each query constrains a few of
many columns.  Exponential in the worst case (NP-hard, Smith et al. 2022 §4); the deadline is checked at
every node (:class:`~.deadline.SearchTimeout`) and a timed-out search reports its frontier's bound.

Floating point: bounds are float64 sums compared with the incumbent as in :mod:`.columns`; the reported
upper bound goes through :meth:`~.rounding.ProblemRounding.up` (the caller snaps it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpmagic.overlap.deadline import SearchTimeout
from dpmagic.overlap.encoding import Problem
from dpmagic.overlap.rounding import ProblemRounding

__all__ = ["scoped_search", "scoped_fits", "scoped_state_nbytes", "SCOPED_MAX_ENTRIES"]

#: nodes above this depth that branch may also be tested against :func:`split_bound` (a cut there removes a large
#: subtree; deeper, the partitioned bound is nearly as tight and far cheaper)
SPLIT_DEPTH = 3
#: ... once the search has visited this many nodes (easy searches never pay for it) ...
SPLIT_AFTER = 1500
#: ... at nodes whose partitioned bound is at most this factor above ``best`` (measured on captured dense searches:
#: the split bound is ≈ 0.9 of the partitioned one there, so a node much further above is never cut)
SPLIT_RATIO = 1.2
#: subgradient steps of the first split (the root's; it then warm-starts every later one) and of the later ones
SPLIT_ROOT_STEPS = 30
SPLIT_STEPS = 1
#: a branching node computes its children's entry bounds (and tables) at once (:meth:`_Search._children_tops`) ...
#: OFF by default (issue 28, session 12): on, the held-out session's CPU p99 / max fell 411 / 819 → 326 / 537 ms (same
#: time, load ≈ 2) and it stayed exact, but with 10,000 registered the bulk γ came out far tighter (upper/lower 1.25 →
#: 1.003–1.007) and every later admission then searched to its cap: p50 / p99 207 / 327 → 645–800 / 860–956 ms and
#: peak RSS 570 → 1,283–1,449 MB (over the 600 MB target).  Turn on once the engine caps that regime.
LOOKAHEAD = False
#: ... once the search has visited this many nodes (easy searches, done after a few descents, never pay for it) ...
LOOKAHEAD_AFTER = 50
#: ... when that product has at most this many multiplications (nodes ÷ 2–4 on the captured held-out and complements
#: searches; at 10^7 the large products of 1,000-query sessions ran on BLAS's threads and doubled the CPU time:
#: held-out CPU p99 829 against 347 ms) ...
LOOKAHEAD_MAX = 1_000_000
#: ... and its tables at most this many float64 entries (1.6 MB) ...
LOOKAHEAD_MAX_ENTRIES = 200_000
#: ... on problems of at most this many queries (with 10,000 registered queries, regions of thousands: the look-ahead
#: made p50 / p99 226 / 346 → 326 / 916 ms and the peak RSS 599 → 1,283 MB)
LOOKAHEAD_MAX_QUERIES = 2_000
#: relative margin added to :func:`split_bound`'s float sums (a split's Σ_c λ_{q,c} is 1 up to rounding; sums of at
#: most 10^6 products of numbers ≤ 1 carry a relative error below 10^6·2^-52 ≈ 2·10^-10)
SPLIT_MARGIN = 1e-8
#: the smallest subnormal float64: a product ``λ·w`` below the normal range has an absolute error up to η/2, which no
#: relative margin covers (``η·½`` rounds to 0), so :func:`split_bound` adds η per product (red team 12)
_ETA = 2.0**-1074

#: the ufunc methods of the per-node tables, bound once (the ndarray methods add a Python wrapper per call)
_MAX = np.maximum.reduce
_MAXAT = np.maximum.reduceat
_ADD = np.add.reduce
_EMPTY = np.zeros(0)

#: largest ``queries × Σ_j Σ_{c ≥ j} a_c`` held as per-level membership blocks (float64 entries: ≤ 96 MB)
SCOPED_MAX_ENTRIES = 12_000_000


def scoped_fits(prob: Problem, max_atoms: int, max_columns: int) -> bool:
    """Whether the instance is small enough: at most ``max_columns`` columns of at most ``max_atoms`` atoms
    each, and per-level blocks within :data:`SCOPED_MAX_ENTRIES`.  ``O(m)``."""
    cols = prob.columns
    if not cols or len(cols) > max_columns:
        return False
    widths = sorted((c.a for c in cols), reverse=True)
    if widths[0] > max_atoms:
        return False
    return prob.n * sum((i + 1) * a for i, a in enumerate(widths)) <= SCOPED_MAX_ENTRIES


def split_bound(
    cover: np.ndarray,
    cons: np.ndarray,
    offsets: np.ndarray,
    w: np.ndarray,
    lam: np.ndarray | None = None,
    steps: int = SPLIT_ROOT_STEPS,
) -> tuple[float, np.ndarray]:
    """A proven upper bound of ``max_x Σ_q w_q Π_{c : cons[q, c]} [q covers x_c]`` over rows ``x`` (one atom per
    column), by splitting each query's weight between the columns it constrains (Lagrangian decomposition); returns
    the bound and the last split (to warm-start the next call).

    ``cover`` (n, Σ_c a_c) 0/1 float64: the queries' memberships, the columns' atoms side by side starting at
    ``offsets``; ``cons`` (n, m) bool: the columns each query constrains; ``w`` (n,) ≥ 0; ``lam`` (n, m): a
    starting split (any non-negative values: only its shape over each query's constrained columns is used;
    None: even).  Queries constraining no column add their whole weight.

    Proof.  For any split ``λ_{q,c} ≥ 0`` over ``q``'s constrained columns with ``Σ_c λ_{q,c} = 1``, and any row
    ``x``: a product of 0/1 indicators is at most each of them, hence at most their ``λ``-weighted mean, so
    ``w_q Π_c [q covers x_c] ≤ Σ_c λ_{q,c} w_q [q covers x_c]``.  Summing over ``q`` and exchanging the sums, the
    load of ``x`` is at most ``Σ_c T_c[x_c]`` with ``T_c[b] = Σ_q λ_{q,c} w_q [q covers b]``, and a sum is at most
    the sum of its terms' maxima: ``load(x) ≤ Σ_c max_b T_c[b]`` for every ``x``.  Every split gives a bound, so the
    least over several is one too.  Each step moves the queries' weight away from the columns whose maximising
    atom they cover (a projected subgradient step of the Lagrangian dual: Lemaréchal, "Lagrangian relaxation", in
    Computational Combinatorial Optimization, LNCS 2241, Springer 2001, pp. 112–156; the same weight shifting
    tightens mini-buckets in Liu and Ihler, "Bounding the partition function using Hölder's inequality", ICML
    2011).  A step's components sum to 0 over the query's columns and clipping at 0 only raises them, so the
    split sums to at least 1 before it is renormalised; the float sums are raised by :data:`SPLIT_MARGIN`.  The
    static assignment of :class:`_Search` (a query's whole weight on its first free column) is one split.
    Products ``λ·w`` in the subnormal range have an *absolute* error up to η/2 (η = 2⁻¹⁰⁷⁴; ``η·½`` rounds to 0),
    so ``n·m + 2`` times η is added too (each row's bound sums at most one product per query and column).
    ``O(steps · n · Σ_c a_c)``."""
    underflow = (cons.shape[0] * cons.shape[1] + 2) * _ETA
    nf = cons.sum(axis=1)
    live = nf > 0
    total = 0.0
    if not live.all():
        total = float(w[~live].sum())
        if not live.any():
            return total * (1.0 + SPLIT_MARGIN) + underflow, np.zeros(cons.shape)
        cover, cons, nf, w = cover[live], cons[live], nf[live], w[live]
        lam = lam[live] if lam is not None else None
    lay = _SplitLayout.of(offsets, cover.shape[1])
    best, lam = _split_steps(
        cons.astype(np.float64),
        nf,
        w,
        lam,
        steps,
        lay,
        # T_b = Σ_q λ_{q,c(b)} w_q [q covers b], summed in the order of q; elementwise, not a matrix product: BLAS's
        # threads on a loaded machine made one small product take 10–20 ms
        lambda v: np.einsum("qb,qb->b", np.repeat(v, lay.counts, axis=1), cover),
        lambda cols: cover.take(cols, axis=1),
    )
    if not live.all():
        out = np.zeros((len(live), cons.shape[1]))
        out[live] = lam
        lam = out
    return (total + best) * (1.0 + SPLIT_MARGIN) + underflow, lam


@dataclass(frozen=True)
class _SplitLayout:
    """Where :func:`split_bound`'s sums go: the columns' offsets, each membership column's column (``col``), its
    atom's position in that column (``pos``), the column widths (``counts``) and the width of the padded table."""

    offsets: np.ndarray
    col: np.ndarray
    pos: np.ndarray
    counts: np.ndarray
    pad_width: int

    @staticmethod
    def of(offsets: np.ndarray, width: int) -> _SplitLayout:
        counts = np.diff(np.append(offsets, width))
        col = np.repeat(np.arange(len(offsets)), counts)
        pos = np.arange(width) - offsets[col]
        return _SplitLayout(offsets, col, pos, counts, int(pos.max()) + 1)


def _split_steps(
    consf: np.ndarray,
    nf: np.ndarray,
    w: np.ndarray,
    lam: np.ndarray | None,
    steps: int,
    lay: _SplitLayout,
    sums_of: Callable[[np.ndarray], np.ndarray],
    covers: Callable[[np.ndarray], np.ndarray],
) -> tuple[float, np.ndarray]:
    """:func:`split_bound`'s subgradient steps on live queries only (every row of ``consf``, the constrained columns
    as 0/1 float64, has ``nf > 0`` ones): the least ``Σ_c max_b T_c[b]`` seen (before margins) and the last split.

    ``sums_of(v)``: for ``v = λ·w`` (queries × columns), ``T_b = Σ_q v_{q,c(b)} [q covers b]`` over the membership
    columns ``b``, added in the order of the queries (zero terms may be skipped: adding +0 changes nothing, so every
    such order gives the same floats); ``covers(cols)``: the memberships at one column ``b`` per column (a new
    C-ordered queries × columns float64 array)."""
    if lam is not None:
        lam = lam * consf
        sums = lam.sum(axis=1)
        if not (sums > 0.0).all():
            lam[sums <= 0.0] = consf[sums <= 0.0]
            sums = lam.sum(axis=1)
        lam /= sums[:, None]
    else:
        lam = consf / nf[:, None]
    offsets, col, pos = lay.offsets, lay.col, lay.pos
    m = len(offsets)
    rows = np.arange(m)
    ones = np.ones(m)
    pad = np.full((m, lay.pad_width), -math.inf)
    best = math.inf
    for it in range(steps + 1):
        pad[col, pos] = sums_of(lam * w[:, None])  # T_c[b], one row of ``pad`` per column c
        if it == steps:
            best = min(best, float(pad.max(axis=1).sum()))
            break
        am = pad.argmax(axis=1)
        best = min(best, float(pad[rows, am].sum()))
        g = covers(offsets + am)
        g *= consf  # [q covers column c's maximising atom]
        # lam ← max(lam − step·(g − mean_c g)·cons, 0), in place on g (the same operations); g's row sums are
        # integers (exact in any order: a product with ones)
        np.subtract(g, (np.dot(g, ones) / nf)[:, None], out=g)
        np.multiply(g, 0.5 / (1 + it), out=g)
        np.multiply(g, consf, out=g)
        lam = np.maximum(np.subtract(lam, g, out=g), 0.0, out=g)
        lam /= lam.sum(axis=1)[:, None]
    return best, lam


@dataclass(frozen=True, slots=True)
class _Level:
    """The per-level tables of :meth:`_Search._level`."""

    unary: np.ndarray  # queries whose only free column is j
    unary_tw: np.ndarray  # (a_j, |unary|) their memberships in j times their weights
    pair: np.ndarray  # queries whose first free column is j with a second c > j
    pair_tw: np.ndarray  # (a_j, |pair|) their memberships in j times their weights
    pair_block: np.ndarray  # (|pair|, Σ_{c > j} a_c) their rows in their second column
    offsets: np.ndarray  # the columns' offsets after j in pair_block / rest
    free: np.ndarray  # queries with any free column (the memo key)


@dataclass(frozen=True)
class _SplitLevel:
    """What :meth:`_Search._split_cut` needs at level ``j``: the queries with a free column, and over the columns
    from ``j`` on their memberships, constrained columns (0/1 float64) and their number, and the layout."""

    free: np.ndarray  # (n,) bool
    cat_t: np.ndarray  # (Σ_{c ≥ j} a_c, n) bool: the memberships, one row per atom (a view of _Search._cat)
    consf: np.ndarray  # (n, k − j) float64
    nf: np.ndarray  # (n,) int
    layout: _SplitLayout
    #: the memberships of the queries in the columns they constrain, as (query, atom) pairs in the order of the
    #: queries: each pair's atom and its query's entry ``q·(k − j) + c`` in a queries × columns array
    nz_atom: np.ndarray
    nz_entry: np.ndarray

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.free, self.consf, self.nf, self.nz_atom, self.nz_entry))


class _Search:
    """One search: the static order, the per-level tables, the incumbent, the open frames and the memo."""

    def __init__(
        self,
        prob: Problem,
        deadline: float,
        best: float,
        target: float,
        slack: float,
        terms: np.ndarray | None = None,
    ) -> None:
        self.deadline = deadline
        self.best = best
        self.target = target
        self.slack = slack
        self.best_x: list[int] | None = None
        self.w = np.asarray(prob.weights, dtype=np.float64)
        n = prob.n
        dense = [c.dense() for c in prob.columns]
        cons = [~m.all(axis=1) for m in dense]
        counts = [int(c.sum()) for c in cons]
        # most constrained first; columns no query constrains need no branching (any atom)
        self.order = [i for i in sorted(range(len(dense)), key=lambda i: (-counts[i], prob.columns[i].a)) if counts[i]]
        k = len(self.order)
        self.k = k
        self.cover = [dense[i] for i in self.order]  # (n, a_c) bool, in branching order
        #: per column, its atoms' memberships as contiguous rows (a_c, n): a child's alive mask is one AND
        self.cover_t = [np.ascontiguousarray(m.T) for m in self.cover]
        self.widths = [m.shape[1] for m in self.cover]
        #: for :func:`split_bound` (built on first use): the memberships one row per atom (Σ_c a_c, n) bool, the
        #: columns' offsets there, the constrained columns (n, k), and the last split of each query (warm start)
        self._cat: np.ndarray | None = None
        self._cat_offsets = np.cumsum([0] + self.widths).astype(np.intp)
        self._cons = np.stack([cons[i] for i in self.order], axis=1) if k else np.zeros((n, 0), dtype=bool)
        self._lam: np.ndarray | None = None
        #: per level j < SPLIT_DEPTH, what :meth:`_split_cut` slices out of the above (built on first use)
        self._split_levels: dict[int, _SplitLevel] = {}
        self.split_calls = 0
        self.split_cuts = 0
        # assigned[j][q]: the first column of q's scope at position ≥ j (k: none left, the query is fixed)
        self.assigned = np.full((k + 1, n), k, dtype=np.int64)
        for j in range(k - 1, -1, -1):
            self.assigned[j] = np.where(cons[self.order[j]], j, self.assigned[j + 1])
        self._levels: dict[int, _Level] = {}
        self.frames: list[_Frame] = []  # the open branching nodes, root first
        self.started = False  # the root was entered
        self.done = False  # the search completed (or stopped on the target)
        self.stopped = False  # it stopped on reaching the target
        #: per level: the live queries with free columns (packed bits) → a bound on the load they can add
        self.memo: list[dict[bytes, float]] = [{} for _ in range(k + 1)]
        self.x = [0] * k
        self.nodes = 0
        #: per query a proven bound of the load of every row whose last covering query it is (None: unknown)
        self.terms = None if terms is None else np.asarray(terms, dtype=np.float64)
        self._hot_for = math.nan
        self._hot: np.ndarray | None = None
        #: per branching column, 0 on its atoms some hot query covers and -inf on the others (None: no terms).  A
        #: row beating ``best`` lies in a hot query's box, so its atoms lie in these projections: the other atoms
        #: are never branched on (their bounds are -inf; with one hot query the search is its box's)
        self.mask: list[np.ndarray] | None = None
        if self.terms is not None and best >= 0.0:  # (below 0 a row no query covers, load 0, beats it)
            hot = self.terms > best
            self.mask = [np.where(m[hot].any(axis=0), 0.0, -math.inf) for m in self.cover]
        #: per level, its mask row when it has a -inf (adding a row of zeros changes nothing), else None
        masks: list[np.ndarray | None] = list(self.mask) if self.mask is not None else [None] * k
        self._mask_rows: list[np.ndarray | None] = [
            mk if mk is not None and bool((mk < 0.0).any()) else None for mk in masks
        ]
        #: :meth:`_level`'s tables by level (None: not built yet)
        self._lvs: list[_Level | None] = [None] * k

    def cold(self, alive: np.ndarray) -> bool:
        """Whether no live query is *hot* (its term above ``best``): every row below the node is then covered
        last by a live query whose term is at most ``best`` (or by none: load 0 ≤ best), so no row below beats
        ``best`` and the node is pruned (issue 28, the engine's per-admission terms).  ``O(|hot|)``."""
        terms = self.terms
        if terms is None or self.best < 0.0:  # a row no query covers (load 0) beats a negative best
            return False
        if self._hot_for != self.best:  # best only grows: the hot set only shrinks
            self._hot, self._hot_for = np.flatnonzero(terms > self.best), self.best
        hot = self._hot
        assert hot is not None
        return not bool(alive[hot].any())

    def _split_cut(self, j: int, alive: np.ndarray, fixed: float) -> bool:
        """Whether :func:`split_bound` over the live queries with free columns (from ``j`` on) proves that no row
        below the node beats ``best`` (then the node is cut).  The first call solves the root's split with
        :data:`SPLIT_ROOT_STEPS` steps; every call warm-starts from the splits found so far."""
        if self._cat is None:
            self._cat = np.concatenate(self.cover_t, axis=0)
            free0 = np.flatnonzero(self.assigned[0] < self.k)
            _, lam = self._split(0, free0, None, SPLIT_ROOT_STEPS)  # split_bound's (every such query is live)
            self._lam = np.zeros(self._cons.shape)
            self._lam[free0] = lam
        assert self._lam is not None
        sl = self._split_level(j)
        idx = np.flatnonzero(alive & sl.free)
        if len(idx) == 0:
            return False
        best, lam = self._split(j, idx, self._lam[idx, j:], SPLIT_STEPS)
        # split_bound's margins (none of these queries is dropped as constraining no column)
        ub = (0.0 + best) * (1.0 + SPLIT_MARGIN) + (len(idx) * sl.consf.shape[1] + 2) * _ETA
        self._lam[idx, j:] = lam
        self.split_calls += 1
        if fixed + ub <= self.best:
            self.split_cuts += 1
            return True
        return False

    def _split_level(self, j: int) -> _SplitLevel:
        """:meth:`_split`'s tables of the columns from ``j`` on (built on first use)."""
        sl = self._split_levels.get(j)
        if sl is None:
            assert self._cat is not None
            off = self._cat_offsets[j:-1]
            cons = np.ascontiguousarray(self._cons[:, j:])
            cat_t = self._cat[off[0] :]  # a view
            lay = _SplitLayout.of(off - off[0], cat_t.shape[0])
            nz_q, nz_b = np.nonzero(cat_t.T & cons[:, lay.col])  # in row-major order: by query, then atom
            sl = self._split_levels[j] = _SplitLevel(
                free=self.assigned[j] < self.k,
                cat_t=cat_t,
                consf=cons.astype(np.float64),
                nf=cons.sum(axis=1),
                layout=lay,
                nz_atom=nz_b.astype(np.intp),
                nz_entry=(nz_q * cons.shape[1] + lay.col[nz_b]).astype(np.intp),
            )
        return sl

    def _split(self, j: int, idx: np.ndarray, lam: np.ndarray | None, steps: int) -> tuple[float, np.ndarray]:
        """:func:`split_bound`'s steps over the queries ``idx`` (each constraining a column from ``j`` on) and the
        columns from ``j`` on: the least sum of maxima seen (before the margins) and the last split."""
        sl = self._split_level(j)
        n, m, width = len(self.w), sl.consf.shape[1], sl.cat_t.shape[0]

        def sums(v: np.ndarray) -> np.ndarray:
            # split_bound's einsum over these queries' rows, as a sum over the (query, atom) pairs of all the
            # queries (in the same order; the others' weights are 0 and the pairs outside a query's constrained
            # columns, where its λ is 0, are left out): the same floats from far fewer terms
            full = np.zeros((n, m))
            full[idx] = v
            return np.bincount(sl.nz_atom, weights=full.take(sl.nz_entry), minlength=width)

        def covers(cols: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(sl.cat_t.take(cols, axis=0).take(idx, axis=1).T).astype(np.float64)

        return _split_steps(sl.consf[idx], sl.nf[idx], self.w[idx], lam, steps, sl.layout, sums, covers)

    def _level(self, j: int) -> _Level:
        """Level ``j < k`` (built on first use): the queries whose first free column is ``j``, split into those
        with no other free column (``unary``: their memberships in ``j``) and those with a second one ``c``
        (``pair``: their memberships in ``j`` and their rows in ``c``, laid out over the columns after ``j``),
        the queries with any free column (the memo key) and the columns' offsets after ``j``."""
        got = self._levels.get(j)
        if got is None:
            a = self.assigned[j]
            second = self.assigned[j + 1]
            unary = np.flatnonzero((a == j) & (second == self.k))
            pair = np.flatnonzero((a == j) & (second < self.k))
            widths = self.widths[j + 1 :]
            offsets = np.cumsum([0] + widths[:-1]).astype(np.intp) if widths else np.zeros(0, dtype=np.intp)
            pair_block = np.zeros((len(pair), sum(widths)))
            for c, off, wd in zip(range(j + 1, self.k), offsets.tolist(), widths):
                sel = np.flatnonzero(second[pair] == c)
                pair_block[sel, off : off + wd] = self.cover[c][pair[sel]]
            got = self._levels[j] = _Level(
                unary=unary,
                unary_tw=np.ascontiguousarray(self.cover[j][unary].T * self.w[unary]),
                pair=pair,
                pair_tw=np.ascontiguousarray(self.cover[j][pair].T * self.w[pair]),
                pair_block=pair_block,
                offsets=offsets,
                free=np.flatnonzero(a < self.k),
            )
            self._lvs[j] = got
        return got

    def _root_rest(self) -> np.ndarray:
        """The column sums, over the columns after the first, of the queries whose first scope column is there."""
        a = self.assigned[0]
        parts = []
        for c in range(1, self.k):
            rows = np.flatnonzero(a == c)
            parts.append(self.w[rows] @ self.cover[c][rows].astype(np.float64))
        rest = np.concatenate(parts) if parts else np.zeros(0)
        if self.mask is not None and self.k > 1:
            rest = rest + np.concatenate(self.mask[1:])  # children inherit it through their parent's star table
        return rest

    def frontier_upper(self) -> float:
        """A proven bound of the maximum after a timeout: ``best`` and every open frame's unexplored children
        (∞ before the root's bound is known).

        A frame below the top is exploring its child ``pos`` (the frame above it: that child's own unexplored
        children bound what is left of it), so it counts from ``pos + 1``; the top frame's child ``pos`` was about
        to be entered (the timeout is checked on entering a node), so it counts from ``pos``.  (Counting every
        frame from ``pos`` kept the root's unbounded entry in, and every timed-out search reported ∞.)
        """
        if not self.started:
            return math.inf
        ub = self.best
        last = len(self.frames) - 1
        for f, fr in enumerate(self.frames):
            start = fr.pos if f == last else fr.pos + 1
            if start < len(fr.order):
                ub = max(ub, max(fr.bounds[start:]))
        return ub

    @property
    def nbytes(self) -> int:
        """The memory its tables and open frames hold (bytes; what keeping it paused costs)."""
        total = sum(m.nbytes + t.nbytes for m, t in zip(self.cover, self.cover_t)) + self.assigned.nbytes
        for lv in self._levels.values():
            total += lv.unary_tw.nbytes + lv.pair_tw.nbytes + lv.pair_block.nbytes
        total += self._cons.nbytes + (self._cat.nbytes if self._cat is not None else 0)
        total += sum(sl.nbytes for sl in self._split_levels.values())
        total += self._lam.nbytes if self._lam is not None else 0
        for fr in self.frames:
            total += fr.alive.nbytes + (fr.star.nbytes if fr.star is not None else 0)
            for u1, star1, s1 in (fr.pre or {}).values():
                total += u1.nbytes + s1.nbytes + (star1.nbytes if star1 is not None else 0)
        for memo in self.memo:  # packed-bit keys and their float values, ≈ 100 bytes of overhead each
            if memo:
                total += len(memo) * (100 + len(next(iter(memo))))
        return total

    def resume(self, deadline: float, best: float, target: float) -> None:
        """Continue a paused search (it raised :class:`SearchTimeout`) on the same problem until ``deadline``.

        ``best``: a floor known now (only rows above it matter; raising the incumbent keeps every bound and memo
        entry valid: they all claim "nothing below beats best"); ``target``: a proven bound of the maximum."""
        self.deadline = deadline
        if best > self.best:
            self.best, self.best_x = best, None
        self.target = min(self.target, target)
        self.run()

    def run(self) -> None:
        """Search until done (``done``) or the target is reached (``stopped``); raises :class:`SearchTimeout` at
        the deadline with the state kept (open frames, memo, incumbent): :meth:`resume` continues it.

        Depth first with an explicit stack of frames (one per branching node): a frame's children are visited
        by decreasing bound and cut against the incumbent; a closed frame records its memo entry."""
        if self.done:
            return
        if not self.started:
            self.nodes += 1
            if time.perf_counter() > self.deadline:
                raise SearchTimeout
            self.started = True
            fixed = float(self.w[self.assigned[0] == self.k].sum())
            if self._enter(0, np.ones(len(self.w), dtype=bool), fixed, self._root_rest()):
                self.done = self.stopped = True
                return
        frames = self.frames
        memo, cover_t, x, enter, clock = self.memo, self.cover_t, self.x, self._enter, time.perf_counter
        while frames:
            fr = frames[-1]
            pos = fr.pos
            if pos >= len(fr.order) or fr.bounds[pos] <= self.best:
                frames.pop()
                # every row below has load ≤ best (searched or cut against it): the live queries add ≤ best − fixed
                if self.best > -math.inf:
                    add = self.best - fr.fixed + self.slack
                    memo[fr.j][fr.key] = add if fr.known is None else min(fr.known, add)
                if frames:
                    frames[-1].pos += 1
                continue
            self.nodes += 1
            if clock() > self.deadline:
                raise SearchTimeout
            a = fr.order[pos]
            j = fr.j
            x[j] = a
            star = fr.star
            child_rest = star[a, fr.a_next :] if star is not None else _EMPTY
            pre = fr.pre.get(a) if fr.pre is not None else None
            got = enter(j + 1, fr.alive & cover_t[j][a], fr.fixed + fr.ul[a], child_rest, pre)
            if got:
                self.done = self.stopped = True
                return
            if got is not None:  # closed at once (a leaf, cut, or known from the memo)
                fr.pos = pos + 1
        self.done = True

    def _enter(
        self,
        j: int,
        alive: np.ndarray,
        fixed: float,
        rest: np.ndarray,
        pre: tuple[np.ndarray, np.ndarray | None, np.ndarray] | None = None,
    ) -> bool | None:
        """The node fixing the first ``j`` columns: True when the target is reached (stop), False when nothing
        below needs searching (a leaf, or cut), None when it branches (its frame is pushed).

        ``alive``: the queries consistent with the fixed atoms; ``fixed``: the weight of the alive queries
        whose scope is all fixed; ``rest``: over the columns after ``j``, the sums of the alive queries whose
        first free column is there (computed by the parent: moving to a child only fixes column ``j - 1``, which
        such queries do not constrain, so they are alive in every child and their sums are the parent's);
        ``pre``: the node's ``(u, star, s0)`` as its parent computed them (:meth:`_children_tops`)."""
        best = self.best
        if self.terms is not None and best >= 0.0:  # :meth:`cold`, inline
            if self._hot_for != best:
                self._hot, self._hot_for = np.flatnonzero(self.terms > best), best
            if not np.count_nonzero(alive[self._hot]):
                return False
        if j == self.k:
            if fixed > best:
                self.best, self.best_x = fixed, list(self.x)
            return self.best >= self.target
        lv = self._lvs[j]
        if lv is None:
            lv = self._level(j)
        if pre is not None:
            u, star, s0 = pre
        else:
            u, star, s0 = self._tables(j, lv, alive, rest)
        top = float(_MAX(s0))
        if fixed + top <= best:
            return False
        if top <= 0.0:
            # no live query can add (weights are positive): every completion of the row has load ``fixed``
            return self._flat(j, fixed)
        # the same live queries with free columns below another prefix: their added load is bounded (memo)
        key = np.packbits(alive[lv.free]).tobytes()
        known = self.memo[j].get(key)
        if known is not None and fixed + known <= self.best - self.slack:
            return False
        if (
            j < SPLIT_DEPTH
            and self.nodes > SPLIT_AFTER
            and fixed + top <= self.best * SPLIT_RATIO
            and self._split_cut(j, alive, fixed)
        ):
            return False
        bounds = s0 + fixed
        kids: dict[int, tuple[np.ndarray, np.ndarray | None, np.ndarray]] | None = None
        if LOOKAHEAD and self.k > j + 1 and self.nodes > LOOKAHEAD_AFTER and len(self.w) <= LOOKAHEAD_MAX_QUERIES:
            assert star is not None
            cand = np.flatnonzero(bounds > self.best)
            got = self._children_tops(j, alive, fixed, u, star, cand) if len(cand) else None
            if got is not None:
                tops, kids = got
                bounds[cand] = np.minimum(bounds[cand], tops)
        order = (-bounds).argsort(kind="stable")
        a_next = self.widths[j + 1] if self.k > j + 1 else 0
        self.frames.append(
            _Frame(j, alive, fixed, star, order.tolist(), bounds[order].tolist(), key, known, u.tolist(),
                   a_next, _EMPTY, kids)
        )  # fmt: skip
        return None

    def _flat(self, j: int, fixed: float) -> bool:
        """A node fixing the first ``j`` columns below which every row has load ``fixed`` (> ``best``): it is the new
        incumbent; returns whether the target is reached.  (:mod:`.topset` collects such nodes instead.)"""
        self.best, self.best_x = fixed, list(self.x)
        return self.best >= self.target

    def _tables(
        self, j: int, lv: _Level, alive: np.ndarray, rest: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """The node's tables (:meth:`_enter`): ``u`` (per atom of ``j``, the weight of the live queries whose only
        free column is ``j``), ``star`` (per atom of ``j``, the column sums after ``j``; None at the last column)
        and ``s0`` (per atom of ``j``, the partitioned bound of the load the live queries add, -inf on atoms no
        hot query covers)."""
        # the queries with j alone left: fixed by the child, their weight per atom of j (``np.dot`` is ``@``: the
        # same BLAS call, without the matmul dispatch)
        u = np.dot(lv.unary_tw, alive[lv.unary])
        star = None
        s0 = u
        if self.k > j + 1:
            # given the atom of j the free columns are independent (a star): per column c > j the pair table of
            # the queries whose first two free columns are (j, c), plus c's sums, maximised over c's atoms
            pair = lv.pair
            ap = alive[pair]
            if 2 * np.count_nonzero(ap) < len(pair):
                sel = ap.nonzero()[0]
                star = np.dot(lv.pair_tw[:, sel], lv.pair_block[sel])
            else:
                star = np.dot(lv.pair_tw * ap, lv.pair_block)
            star += rest
            s0 = _ADD(_MAXAT(star, lv.offsets, axis=1), axis=1)
            s0 += u
        mask = self._mask_rows[j]
        if mask is not None:
            s0 = s0 + mask
        return u, star, s0

    def _children_tops(
        self, j: int, alive: np.ndarray, fixed: float, u: np.ndarray, star: np.ndarray, cand: np.ndarray
    ) -> tuple[np.ndarray, dict[int, tuple[np.ndarray, np.ndarray | None, np.ndarray]]] | None:
        """The bounds that the children ``cand`` (atoms of column ``j < k − 1``) of the node would compute on entry
        (``fixed + u[a]`` plus the largest partitioned bound over the atoms of column ``j + 1``, :meth:`_enter`),
        all at once, and each child's tables (:meth:`_tables`, handed to it on entry): one matrix product for all
        of them instead of one :meth:`_enter` per child (most children of a deep node are cut right there).  The
        parent then sorts and cuts its children by these bounds.

        Child ``a`` keeps the live queries that do not constrain ``j`` or cover ``a`` (the parent's ``alive``
        and column ``j``'s memberships: every atom for a query not constraining it); its fixed weight is
        ``fixed + u[a]`` and its column sums after ``j + 1`` are the parent's star row ``a`` (as in :meth:`run`).
        The same sums as the child's own, in another order: the bounds are raised by a relative
        :data:`SPLIT_MARGIN` (non-negative terms: the float error is far below it).  Only the queries live at
        the node take part.  None (nothing computed) when the product would exceed :data:`LOOKAHEAD_MAX`
        multiplications or :data:`LOOKAHEAD_MAX_ENTRIES` entries.
        ``O(|cand| · a_{j+1} · (|unary| + |pair| · Σ_{c > j+1} a_c))`` over the live queries."""
        lv = self._level(j + 1)
        a1, width = self.widths[j + 1], lv.pair_block.shape[1]
        psel = np.flatnonzero(alive[lv.pair]) if self.k > j + 2 else lv.pair[:0]
        block = len(cand) * a1 * max(len(psel), width)
        if block > LOOKAHEAD_MAX_ENTRIES or block * width > LOOKAHEAD_MAX:
            return None
        cj = self.cover[j]
        ulive = np.flatnonzero(alive[lv.unary])
        ua = cj[lv.unary[ulive]][:, cand]  # (|unary live|, |cand|): live in child a
        u1 = np.ascontiguousarray((lv.unary_tw[:, ulive] @ ua).T)  # (|cand|, a_{j+1})
        s1 = u1
        star1 = None
        if self.k > j + 2:
            pa = cj[lv.pair[psel]][:, cand].T  # (|cand|, |pair live|)
            rest1 = star[cand, a1:]  # the children's column sums after j + 1
            lhs = (pa[:, None, :] * lv.pair_tw[None, :, psel]).reshape(len(cand) * a1, -1)
            star1 = (lhs @ lv.pair_block[psel]).reshape(len(cand), a1, width) + rest1[:, None, :]
            s1 = s1 + np.maximum.reduceat(star1, lv.offsets, axis=2).sum(axis=2)
        if self.mask is not None:
            s1 = s1 + self.mask[j + 1]
        tops = (fixed + u[cand] + s1.max(axis=1)) * (1.0 + SPLIT_MARGIN)
        pre = {int(a): (u1[i], None if star1 is None else star1[i], s1[i]) for i, a in enumerate(cand.tolist())}
        return tops, pre


@dataclass(slots=True)
class _Frame:
    """One open branching node of :meth:`_Search.run`: its children (atoms of column ``j``) in visiting order
    with their bounds, the next one to visit (``pos``), and what its children and its memo entry need."""

    j: int
    alive: np.ndarray
    fixed: float
    star: np.ndarray | None
    order: list[int]
    bounds: list[float]
    key: bytes
    known: float | None
    ul: list[float]
    a_next: int
    empty: np.ndarray
    #: the tables of the children whose bounds the node computed (:meth:`_Search._children_tops`), by atom
    pre: dict[int, tuple[np.ndarray, np.ndarray | None, np.ndarray]] | None = None
    pos: int = 0


def scoped_search(
    prob: Problem,
    deadline: float,
    rnd: ProblemRounding,
    incumbent: float,
    target: float = math.inf,
    terms: np.ndarray | None = None,
    state: dict[str, Any] | None = None,
) -> tuple[dict[str, int], float, bool, str]:
    """The scoped branch and bound; returns (atoms of the best row above ``incumbent`` or {}, proven upper
    bound, exact, method tag).

    ``incumbent``: a load already achieved (or a floor: only loads above it matter); rows at or below it are
    pruned, so ``{}`` with ``exact=True`` means no row exceeds it (upper = it, rounded up).  ``target``: a
    proven upper bound of the maximum (the caller's hint); reaching it stops the search (then exact).
    ``terms`` (per query of ``prob``, optional): a proven bound of the load of every row whose last covering
    query (in the order of ``prob``'s queries, their registration order) is that one; nodes meeting no query
    whose term exceeds the incumbent are pruned (:meth:`_Search.cold`).

    ``state`` (optional, the caller's, for one problem): a search that times out is kept there (``"search"``)
    and the next call with the same ``state`` *resumes* it instead of starting again (issue 28: a hard region's
    problem is the same every time its pending term is re-tightened; before, each try repeated the last one's
    work from scratch and timed out again).  The caller guarantees that ``prob`` is the same problem.
    """
    paused = state.get("search") if state is not None else None
    tag = "scoped"
    if isinstance(paused, _Search) and not paused.done:
        s = paused
        tag = "scoped-resumed"
        run = lambda: s.resume(deadline, incumbent, target)  # noqa: E731
    else:
        s = _Search(prob, deadline, incumbent, target, rnd.slack, terms)
        run = s.run
    try:
        if s.k == 0:
            total = float(s.w.sum())
            if total > s.best:
                s.best, s.best_x = total, []
        else:
            run()
        # completed, or stopped on a row reaching the proven ``target`` (then best ≥ target ≥ the maximum)
        upper = rnd.up(s.best)
        exact = True
        if state is not None:
            state.pop("search", None)
    except SearchTimeout:
        upper = rnd.up(s.frontier_upper())
        exact = False
        tag += "-timeout"
        if state is not None:
            state["search"] = s
    atoms: dict[str, int] = {}
    if s.best_x is not None:
        atoms = {prob.columns[i].name: int(s.best_x[p]) for p, i in enumerate(s.order)}
    return atoms, upper, exact, tag


def scoped_state_nbytes(state: dict[str, Any] | None) -> int:
    """The memory a :func:`scoped_search` ``state`` holds in its paused search (bytes; 0 without one)."""
    paused = state.get("search") if state is not None else None
    return paused.nbytes if isinstance(paused, _Search) else 0
