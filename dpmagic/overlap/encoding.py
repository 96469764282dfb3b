"""Column-wise encoding of boxes: vectorised overlap tests and compressed atom domains.

docs/design.md §2 ("Facts worth using"): two boxes overlap iff their per-column sets intersect on every column
(Smith et al. 2022, Prop. 3), and per column the values that no predicate distinguishes can be merged into *atoms*.

Two layers live here (≈ 680 lines, one module on purpose: the compressed :class:`Problem` is cut from the
store's per-column arrays, and both share the column encodings — splitting them would export those internals).

:class:`BoxStore` — the registered boxes, one growable array store per column ever constrained, so that
appending a query never re-encodes the others:

* a categorical column keeps a boolean matrix ``mask[value, query]`` (value-major, so selecting the values of
  a new predicate touches contiguous memory);
* a numeric column keeps every query's union of intervals as padded arrays of *cut keys*
  ``start[q, j] <= x < end[q, j]`` over the ordered set of cuts (``K`` = the largest number of intervals
  of any query on that column; padding slots are empty).  On an ``int`` column a cut is an exact integer
  (``[lo, hi]`` is ``lo .. hi+1``): held as a double only while every key of the declared domain is within
  ±2^53 (where doubles are exact; above it ``hi + 1.0 == hi`` would drop the last value of every interval),
  else in an ``int64`` array, or — only when the declared bounds touch the int64 limits so that ``upper + 1``
  or the padding sentinels do not fit — in an object array of Python ints (:func:`_int_key_dtype`);
  on a ``float`` column a cut is ``v + 0j`` ("just before v") or
  ``v + 1j`` ("just after v"), compared lexicographically, so open and closed ends are exact over the
  reals: ``[a, b)`` is ``a+0j .. b+0j`` and ``(a, b]`` is ``a+1j .. b+1j``.

New endpoints therefore need no re-encoding at all: atoms are only built, lazily, for the sub-problem a
solver is asked about (:func:`build_problem`).  Testing one new box against all ``t`` registered boxes is
a handful of numpy operations per column (``O(t)``; about 10–40 µs per column at t = 10,000).

:func:`build_problem` — the compressed domain of a sub-problem (a subset of the queries, optionally
restricted to a region box): per column the atoms are

* categorical: groups of declared values (inside the region) that no selected query distinguishes
  (identical membership columns merged; ``O(k n)``);
* numeric: the elementary pieces between the sorted distinct cuts of the selected queries and the region
  (points and open gaps on float columns, integer ranges on int columns), restricted to the region and with
  adjacent pieces that no query separates merged; each query is kept as *runs* ``[rs, re)`` of atom
  indices, so a prefix over 5,000 atoms costs two integers, not 5,000 booleans.

Every atom maps back to a concrete declared value (:meth:`ProblemColumn.value`) for witness rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from dpmagic.domain.schema import CategoricalColumn, Column, NumericColumn, Schema
from dpmagic.domain.sets import Box, CategorySet, Interval, IntervalSet, ValueSet

__all__ = [
    "BoxStore",
    "ProblemColumn",
    "Problem",
    "build_problem",
    "is_helly_box",
]

_INF = float("inf")


def _grow(arr: np.ndarray, cap: int, axis: int, fill: Any) -> np.ndarray:
    shape = list(arr.shape)
    shape[axis] = cap
    out = np.full(shape, fill, dtype=arr.dtype)
    sl = [slice(None)] * arr.ndim
    sl[axis] = slice(0, arr.shape[axis])
    out[tuple(sl)] = arr
    return out


# ---------------------------------------------------------------------------------------------------------
# per-column stores
# ---------------------------------------------------------------------------------------------------------
class _CatStore:
    """Membership ``mask[value, query]`` of a categorical column (unconstrained queries: all True)."""

    kind = "categorical"

    def __init__(self, column: CategoricalColumn, n: int, cap: int) -> None:
        self.column = column
        self.k = column.size
        self.mask = np.ones((self.k, cap), dtype=bool)
        self.constrained = np.zeros(cap, dtype=bool)
        self.singleton = np.ones(cap, dtype=bool)  # singleton or full (Helly-friendly)
        # k <= 64: each query's set as a bit mask too (pairwise tests are then one AND per pair)
        self.bdtype = next(
            (d for d, b in ((np.uint8, 8), (np.uint16, 16), (np.uint32, 32), (np.uint64, 64)) if self.k <= b), None
        )
        if self.bdtype is not None:
            self.full_bits = self.bdtype((1 << self.k) - 1) if self.k < 64 else self.bdtype(2**64 - 1)
            self.bits: np.ndarray = np.full(cap, self.full_bits, dtype=self.bdtype)

    def resize(self, cap: int) -> None:
        self.mask = _grow(self.mask, cap, 1, True)
        self.constrained = _grow(self.constrained, cap, 0, False)
        self.singleton = _grow(self.singleton, cap, 0, True)
        if self.bdtype is not None:
            self.bits = _grow(self.bits, cap, 0, self.full_bits)

    def set(self, q: int, vs: CategorySet) -> None:
        self.mask[:, q] = vs.to_mask()
        self.constrained[q] = True
        self.singleton[q] = len(vs) <= 1
        if self.bdtype is not None:
            self.bits[q] = vs.bits

    def set_many(self, qs: list[int], vss: list[CategorySet]) -> None:
        """:meth:`set` for many queries at once: one byte buffer, one ``unpackbits``, one scatter."""
        q = np.asarray(qs, dtype=np.intp)
        nbytes = (self.k + 7) // 8
        buf = b"".join([vs.bits.to_bytes(nbytes, "little") for vs in vss])
        raw = np.frombuffer(buf, dtype=np.uint8).reshape(len(vss), nbytes)
        rows = np.unpackbits(raw, axis=1, count=self.k, bitorder="little").view(bool)  # (len(qs), k)
        self.mask[:, q] = rows.T
        self.constrained[q] = True
        self.singleton[q] = np.fromiter((vs.bits.bit_count() <= 1 for vs in vss), dtype=bool, count=len(vss))
        if self.bdtype is not None:
            self.bits[q] = np.array([vs.bits for vs in vss], dtype=np.uint64).astype(self.bdtype)

    def overlap(self, vs: ValueSet, n: int) -> np.ndarray:
        assert isinstance(vs, CategorySet)  # a categorical column's sets
        if vs.is_empty():
            return np.zeros(n, dtype=bool)
        if self.bdtype is not None:
            return np.asarray((self.bits[:n] & self.bdtype(vs.bits)) != 0)
        idx = vs.indices
        if len(idx) == 1:
            return self.mask[idx[0], :n].copy()
        return np.asarray(self.mask[list(idx), :n].any(axis=0))

    def contains(self, value: Any, n: int) -> np.ndarray:
        i = self.column.index_of(value)
        if i is None:
            return np.zeros(n, dtype=bool)
        return self.mask[i, :n].copy()

    def pairwise(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if self.bdtype is not None:
            return (self.bits[a][:, None] & self.bits[b][None, :]) != 0
        # 64 values per AND (a float matmul is slower here and at the mercy of the BLAS threads)
        xa = packed_words(self.mask[:, a])
        xb = xa if b is a else packed_words(self.mask[:, b])
        return words_intersect(xa, xb)


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_EXACT = 2**53  # every integer of magnitude <= 2^53 is a double


def _int_key_dtype(column: NumericColumn) -> tuple[Any, Any, Any]:
    """Key dtype and padding sentinels (start, end) of an int column's store; the keys are exact in all three.

    * ``float64`` with ``(+inf, -inf)`` when every real key ``lower .. upper + 1`` lies in ``[-2^53, 2^53]``,
      where every integer is a double (ordinary int columns: numpy compares doubles fastest);
    * else ``int64`` with ``(INT64_MAX, INT64_MIN)`` when every real key lies strictly between them
      (e.g. nanosecond timestamps);
    * else (bounds touching the int64 limits) an object array of Python ints with ``(+inf, -inf)``
      (Python compares ints with floats exactly).
    """
    lo, end = int(column.lower), int(column.upper) + 1
    if lo >= -_EXACT and end <= _EXACT:
        return np.float64, _INF, -_INF
    if lo > _I64_MIN and end < _I64_MAX:
        return np.int64, _I64_MAX, _I64_MIN
    return object, _INF, -_INF


class _NumStore:
    """Padded interval cut keys of a numeric column (see module docstring).

    Padding slots hold ``start = pad_start``, ``end = pad_end`` (``pad_start`` above and ``pad_end`` below
    every real key), so they are empty and overlap nothing under the half-open tests ``s < E and S < e``.
    """

    kind = "numeric"

    def __init__(self, column: NumericColumn, n: int, cap: int) -> None:
        self.column = column
        self.is_int = column.is_int
        if self.is_int:
            self.dtype, self.pad_start, self.pad_end = _int_key_dtype(column)
        else:
            self.dtype, self.pad_start, self.pad_end = np.complex128, _INF, -_INF
        lo, hi = self.domain_keys()
        self.K = 1
        self.start = np.full((cap, 1), lo, dtype=self.dtype)
        self.end = np.full((cap, 1), hi, dtype=self.dtype)
        self.constrained = np.zeros(cap, dtype=bool)
        self.single = np.ones(cap, dtype=bool)  # at most one interval (Helly-friendly)

    def domain_keys(self) -> tuple[Any, Any]:
        c = self.column
        if self.is_int:
            return int(c.lower), int(c.upper) + 1
        return complex(float(c.lower), 0.0), complex(float(c.upper), 1.0)

    def keys(self, iv: Interval) -> tuple[Any, Any]:
        if self.is_int:  # normalised int intervals have exact int ends
            return int(iv.lo), int(iv.hi) + 1
        return complex(iv.lo, 0.0 if iv.lo_closed else 1.0), complex(iv.hi, 1.0 if iv.hi_closed else 0.0)

    def set_keys(self, vs: IntervalSet) -> tuple[np.ndarray, np.ndarray]:
        ks = [self.keys(iv) for iv in vs.intervals]
        s = np.array([k[0] for k in ks], dtype=self.dtype)
        e = np.array([k[1] for k in ks], dtype=self.dtype)
        return s, e

    def resize(self, cap: int) -> None:
        lo, hi = self.domain_keys()
        old = self.start.shape[0]
        self.start = _grow(self.start, cap, 0, self.pad_start)
        self.end = _grow(self.end, cap, 0, self.pad_end)
        self.start[old:, 0] = lo
        self.end[old:, 0] = hi
        self.constrained = _grow(self.constrained, cap, 0, False)
        self.single = _grow(self.single, cap, 0, True)

    def _widen(self, K: int) -> None:
        self.start = _grow(self.start, K, 1, self.pad_start)
        self.end = _grow(self.end, K, 1, self.pad_end)
        self.K = K

    def set(self, q: int, vs: IntervalSet) -> None:
        m = len(vs.intervals)
        if m > self.K:
            self._widen(m)
        s, e = self.set_keys(vs)
        self.start[q, :] = self.pad_start
        self.end[q, :] = self.pad_end
        self.start[q, :m] = s
        self.end[q, :m] = e
        self.constrained[q] = True
        self.single[q] = m <= 1

    def overlap(self, vs: ValueSet, n: int) -> np.ndarray:
        assert isinstance(vs, IntervalSet)  # a numeric column's sets
        s, e = self.set_keys(vs)
        if len(s) == 0:
            return np.zeros(n, dtype=bool)
        S = self.start[:n]
        E = self.end[:n]
        out = np.zeros(n, dtype=bool)
        for j in range(len(s)):
            if self.K == 1:
                out |= (S[:, 0] < e[j]) & (s[j] < E[:, 0])
            else:
                out |= ((e[j] > S) & (s[j] < E)).any(axis=1)
        return out

    def point_key(self, x: float | int) -> tuple[Any, Any]:
        if self.is_int:
            return int(x), int(x) + 1
        return complex(float(x), 0.0), complex(float(x), 1.0)

    def contains(self, value: Any, n: int) -> np.ndarray:
        x: float | int
        if self.is_int and isinstance(value, (int, np.integer)):
            x = int(value)  # exact: no double round trip
        else:
            try:
                x = float(value)
            except (TypeError, ValueError, OverflowError):
                return np.zeros(n, dtype=bool)
            if not math.isfinite(x):
                return np.zeros(n, dtype=bool)
            if self.is_int:
                if not x.is_integer():
                    return np.zeros(n, dtype=bool)
                x = int(x)
        if x < self.column.lower or x > self.column.upper:
            return np.zeros(n, dtype=bool)
        a, b = self.point_key(x)
        return ((self.start[:n] <= a) & (b <= self.end[:n])).any(axis=1)

    def pairwise(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        Sa, Ea = self.start[a], self.end[a]
        Sb, Eb = self.start[b], self.end[b]
        out = np.zeros((len(a), len(b)), dtype=bool)
        for i in range(self.K):
            for j in range(self.K):
                out |= (Sa[:, i, None] < Eb[None, :, j]) & (Sb[None, :, j] < Ea[:, i, None])
        return out


_Store = _CatStore | _NumStore


def words_intersect(xa: np.ndarray, xb: np.ndarray, block: int = 1024) -> np.ndarray:
    """``out[i, j]`` = bit rows ``xa[i]`` and ``xb[j]`` (uint64 words) share a bit; row blocks bound memory."""
    out = np.empty((xa.shape[0], xb.shape[0]), dtype=bool)
    for s in range(0, xa.shape[0], block):
        a = xa[s : s + block]
        hit = (a[:, None, 0] & xb[None, :, 0]) != 0
        for j in range(1, xa.shape[1]):
            hit |= (a[:, None, j] & xb[None, :, j]) != 0
        out[s : s + block] = hit
    return out


def packed_words(mask: np.ndarray) -> np.ndarray:
    """``mask[value, q]`` → ``(q, words)`` uint64 bit rows (64 values per word)."""
    packed = np.packbits(mask.T, axis=1, bitorder="little")
    words = max(1, (packed.shape[1] + 7) // 8)
    pad = np.zeros((packed.shape[0], 8 * words), dtype=np.uint8)
    pad[:, : packed.shape[1]] = packed
    return pad.view(np.uint64)


def is_helly_box(box: Box) -> bool:
    """Whether every constraint of ``box`` is a single interval or a single category (or empty).

    Families of such boxes have Helly number 2 (pairwise overlapping ⇒ a common point), docs/design.md §2.
    """
    for vs in box.constraints.values():
        if isinstance(vs, CategorySet):
            if len(vs) > 1:
                return False
        elif len(vs.intervals) > 1:
            return False
    return True


class BoxStore:
    """Registered boxes encoded column-wise (append-only); see the module docstring.

    Empty boxes are stored with ``alive[q] = False``: they cover nothing and overlap nothing.
    """

    def __init__(self, schema: Schema | None = None) -> None:
        self.schema = schema
        self.n = 0
        self.cap = 0
        self.alive = np.zeros(0, dtype=bool)
        self.weights = np.zeros(0, dtype=np.float64)
        self.helly = np.zeros(0, dtype=bool)
        self.cols: dict[str, _Store] = {}
        self.boxes: list[Box] = []

    # -- growth ---------------------------------------------------------------------------------------
    def _reserve(self, extra: int) -> None:
        need = self.n + extra
        if need <= self.cap:
            return
        cap = max(64, self.cap * 2, need)
        self.alive = _grow(self.alive, cap, 0, False)
        self.weights = _grow(self.weights, cap, 0, 0.0)
        self.helly = _grow(self.helly, cap, 0, True)
        for st in self.cols.values():
            st.resize(cap)
        self.cap = cap

    def column_of(self, name: str, vs: Any) -> Column:
        if self.schema is not None and name in self.schema:
            return self.schema[name]
        return vs.column

    def _store(self, name: str, vs: Any) -> _Store:
        st = self.cols.get(name)
        if st is None:
            col = self.column_of(name, vs)
            if isinstance(col, CategoricalColumn):
                st = _CatStore(col, self.n, self.cap)
            else:
                st = _NumStore(col, self.n, self.cap)
            self.cols[name] = st
        return st

    def extend(self, boxes: Sequence[Box], weights: Sequence[float] | np.ndarray) -> np.ndarray:
        """Append boxes (with positive finite weights); returns their node ids.  ``O(Σ constraints)``."""
        weights = np.asarray(weights, dtype=np.float64).reshape(-1)
        if len(boxes) != len(weights):
            raise ValueError("boxes and weights differ in length")
        if len(weights) and (not np.all(np.isfinite(weights)) or np.any(weights <= 0)):
            raise ValueError("weights must be positive and finite")
        self._reserve(len(boxes))
        start = self.n
        pending: dict[str, tuple[list[int], list[Any]]] = {}
        for off, box in enumerate(boxes):
            q = start + off
            empty = box.is_empty()
            self.alive[q] = not empty
            self.weights[q] = weights[off]
            self.helly[q] = is_helly_box(box)
            self.boxes.append(box)
            if empty:
                continue
            for name, vs in box.constraints.items():
                entry = pending.get(name)
                if entry is None:
                    pending[name] = ([q], [vs])
                else:
                    entry[0].append(q)
                    entry[1].append(vs)
        for name, (qs, vss) in pending.items():
            st = self._store(name, vss[0])
            if isinstance(st, _CatStore) and len(qs) > 1:
                st.set_many(qs, vss)
            else:
                for q, vs in zip(qs, vss):
                    st.set(q, vs)
        self.n = start + len(boxes)
        return np.arange(start, self.n)

    # -- queries --------------------------------------------------------------------------------------
    def overlap_mask(self, box: Box, n: int | None = None) -> np.ndarray:
        """``mask[q]`` = registered box q (among the first ``n``) overlaps ``box``.  ``O(n · |box|)``."""
        n = self.n if n is None else n
        if box.is_empty():
            return np.zeros(n, dtype=bool)
        out = self.alive[:n].copy()
        for name, vs in box.constraints.items():
            st = self.cols.get(name)
            if st is None:
                continue  # nobody constrains it: every registered set is the full column
            out &= st.overlap(vs, n)
        return out

    def contains_mask(self, row: Mapping[str, Any], n: int | None = None) -> np.ndarray:
        """``mask[q]`` = registered box q contains the concrete row (as :meth:`Box.contains_row`)."""
        n = self.n if n is None else n
        out = self.alive[:n].copy()
        for name, st in self.cols.items():
            if name in row:
                out &= st.contains(row[name], n)
            else:
                out &= ~st.constrained[:n]
        return out

    def pairwise(self, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        """Boolean overlap matrix between node sets ``a`` and ``b`` (default ``b = a``).  ``O(|a||b| m)``."""
        b = a if b is None else b
        out = self.alive[a][:, None] & self.alive[b][None, :]
        for st in self.cols.values():
            if not st.constrained[a].any() or not st.constrained[b].any():
                continue
            out &= st.pairwise(a, b)
        return out


# ---------------------------------------------------------------------------------------------------------
# compressed sub-problems
# ---------------------------------------------------------------------------------------------------------
class AtomValues(Protocol):
    """``values[i]``: a concrete declared value in atom i (a list, or computed on demand)."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int, /) -> Any: ...


@dataclass
class ProblemColumn:
    """One column of a compressed sub-problem over ``n`` queries and ``a`` atoms.

    ``dense``: membership matrix ``M`` (n, a) bool.  ``runs``: query q covers atoms ``[rs[q,j], re[q,j])``
    for every slot j (empty slots have ``rs == re``).  ``values[i]`` is a concrete declared value in atom i.
    """

    name: str
    a: int
    values: AtomValues
    M: np.ndarray | None = None
    rs: np.ndarray | None = None
    re: np.ndarray | None = None

    @property
    def is_runs(self) -> bool:
        return self.M is None

    def runs(self) -> tuple[np.ndarray, np.ndarray]:
        """``(rs, re)`` of a runs column (a dense column has none: refused)."""
        if self.rs is None or self.re is None:
            raise ValueError(f"column {self.name!r} of the sub-problem is dense, not runs")
        return self.rs, self.re

    def sub(self, rows: np.ndarray) -> ProblemColumn:
        if self.M is not None:
            return ProblemColumn(self.name, self.a, self.values, M=self.M[rows])
        rs, re = self.runs()
        return ProblemColumn(self.name, self.a, self.values, rs=rs[rows], re=re[rows])

    def colsum(self, w: np.ndarray) -> np.ndarray:
        """Σ of ``w`` over the queries covering each atom.  ``O(n a)`` dense, ``O(n K + a)`` runs."""
        if self.M is not None:
            return w @ self.M
        rs, re = self.runs()
        K = rs.shape[1]
        ww = np.repeat(w, K) if K > 1 else w
        # weighted bincounts are float64
        starts = np.asarray(np.bincount(rs.ravel(), ww, self.a + 1), dtype=np.float64)
        ends = np.asarray(np.bincount(re.ravel(), ww, self.a + 1), dtype=np.float64)
        return np.cumsum((starts - ends)[:-1])

    def covers(self, atom: int) -> np.ndarray:
        if self.M is not None:
            return self.M[:, atom]
        rs, re = self.runs()
        return np.asarray(((rs <= atom) & (re > atom)).any(axis=1))

    def dense(self) -> np.ndarray:
        if self.M is not None:
            return self.M
        rs, re = self.runs()
        n = rs.shape[0]
        d = np.zeros((n, self.a + 1), dtype=np.int32)
        rows = np.repeat(np.arange(n), rs.shape[1])
        np.add.at(d, (rows, rs.ravel()), 1)
        np.add.at(d, (rows, re.ravel()), -1)
        return np.cumsum(d[:, :-1], axis=1) > 0


@dataclass
class Problem:
    """A compressed max-overlap instance: queries ``ids`` with ``weights``, columns of atoms."""

    ids: np.ndarray
    weights: np.ndarray
    columns: list[ProblemColumn]
    defaults: dict[str, Any] = field(default_factory=dict)  # witness values of columns not in the problem

    @property
    def n(self) -> int:
        return len(self.ids)

    def sub(self, rows: np.ndarray) -> Problem:
        return Problem(self.ids[rows], self.weights[rows], [c.sub(rows) for c in self.columns], self.defaults)

    def cells(self) -> float:
        return math.prod(float(c.a) for c in self.columns) if self.columns else 1.0


def _dedupe_dense(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge atoms (columns of M) with identical membership; returns (M', kept atom indices: first of each)."""
    a = M.shape[1]
    if a <= 1:
        return M, np.arange(a)
    packed = np.packbits(M.T, axis=1)
    if packed.shape[1] == 0:
        return M[:, :1], np.arange(1)
    view = np.ascontiguousarray(packed).view(np.dtype((np.void, packed.shape[1])))[:, 0]
    _, first = np.unique(view, return_index=True)
    if len(first) == a:
        return M, np.arange(a)
    first.sort()
    return M[:, first], first


def _numeric_value(col: NumericColumn, lo: Any, hi: Any) -> float | int:
    """A concrete value of the atom between cut keys ``lo`` and ``hi`` (``lo < hi``)."""
    if col.is_int:
        return int(lo)
    a, sa = lo.real, lo.imag
    b, sb = hi.real, hi.imag
    if sa == 0.0:
        return float(a)  # closed start (a point {a} or [a, ...))
    if sb == 1.0:
        return float(b)  # closed end
    mid = a / 2.0 + b / 2.0  # never overflows (a + (b - a) / 2 does for a = -b near the double maximum)
    if a < mid < b:
        return float(mid)
    nxt = float(np.nextafter(a, b))
    if a < nxt < b:
        return nxt
    return float(mid)  # no double strictly inside (a, b): the best concrete stand-in


def build_problem(
    store: BoxStore,
    ids: np.ndarray,
    region: Box | None = None,
    *,
    dedupe: bool = True,
) -> Problem:
    """The compressed domain of the queries ``ids`` restricted to ``region`` (default: everything).

    Columns constrained by none of the queries and not by the region are left out (any value will do;
    ``defaults`` holds one for witness rows).  ``O(Σ_c n K_c log n + n k_c)``.
    """
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    weights = store.weights[ids].copy()
    cols: list[ProblemColumn] = []
    defaults: dict[str, Any] = {}
    rcons = dict(region.constraints) if region is not None else {}
    names = list(store.cols)
    for name in rcons:
        if name not in store.cols:
            names.append(name)
    for name in names:
        st = store.cols.get(name)
        rvs = rcons.get(name)
        used = bool(st is not None and n and st.constrained[ids].any())
        if not used and rvs is None:
            if st is not None:
                defaults[name] = _some_value(st.column)
            continue
        col = st.column if st is not None else store.column_of(name, rvs)
        if isinstance(col, CategoricalColumn):
            # a categorical column's store and sets
            assert (st is None or isinstance(st, _CatStore)) and (rvs is None or isinstance(rvs, CategorySet))
            allowed = list(rvs.indices) if rvs is not None else None
            if st is not None and n:
                if allowed is None:
                    M = np.ascontiguousarray(st.mask[:, ids].T)
                else:
                    M = np.ascontiguousarray(st.mask[np.ix_(np.asarray(allowed, dtype=np.intp), ids)].T)
            else:
                M = np.ones((n, col.size if allowed is None else len(allowed)), dtype=bool)
            keep = np.arange(M.shape[1])
            if dedupe:
                M, keep = _dedupe_dense(M)
            src = keep.tolist() if allowed is None else [allowed[i] for i in keep.tolist()]
            values = [col.values[i] for i in src]
            cols.append(ProblemColumn(name, M.shape[1], values, M=M))
        else:
            # a numeric column's store and sets
            assert (st is None or isinstance(st, _NumStore)) and (rvs is None or isinstance(rvs, IntervalSet))
            cols.append(_numeric_problem_column(name, col, st, ids, rvs))
    return Problem(ids, weights, cols, defaults)


def _some_value(col: Column) -> Any:
    if isinstance(col, CategoricalColumn):
        return col.values[0]
    return int(col.lower) if col.is_int else float(col.lower)


def _numeric_problem_column(
    name: str, col: NumericColumn, st: _NumStore | None, ids: np.ndarray, rvs: IntervalSet | None
) -> ProblemColumn:
    helper = st if st is not None else _NumStore(col, 0, 0)
    dlo, dhi = helper.domain_keys()
    if rvs is not None:
        r_s, r_e = helper.set_keys(rvs)
    else:
        r_s = np.array([dlo], dtype=helper.dtype)
        r_e = np.array([dhi], dtype=helper.dtype)
    n = len(ids)
    if st is not None and n:
        S = st.start[ids]
        E = st.end[ids]
    else:
        S = np.full((n, 1), dlo, dtype=helper.dtype)
        E = np.full((n, 1), dhi, dtype=helper.dtype)
    valid = helper.pad_start != S  # padding slots have start = pad_start (above every real key)
    keys = np.concatenate([S[valid], E[valid], r_s, r_e, np.array([dlo, dhi], dtype=helper.dtype)])
    cuts, inv = np.unique(keys, return_inverse=True)
    nv = int(valid.sum())
    rank_s = np.zeros(S.shape, dtype=np.int64)
    rank_e = np.zeros(S.shape, dtype=np.int64)
    rank_s[valid] = inv[:nv]
    rank_e[valid] = inv[nv : 2 * nv]
    nr = len(r_s)
    rr_s = inv[2 * nv : 2 * nv + nr]
    rr_e = inv[2 * nv + nr : 2 * nv + 2 * nr]
    n_atoms = len(cuts) - 1
    # atoms allowed by the region
    d = np.zeros(n_atoms + 1, dtype=np.int64)
    np.add.at(d, rr_s, 1)
    np.add.at(d, rr_e, -1)
    allowed = np.cumsum(d[:-1]) > 0
    cnt = np.concatenate([[0], np.cumsum(allowed)])
    rs = cnt[rank_s]
    re = cnt[rank_e]
    a = int(cnt[-1])
    atom_index = np.flatnonzero(allowed)  # new atom -> old atom index
    # merge adjacent atoms that no run separates
    used_cut = np.zeros(a + 1, dtype=bool)
    used_cut[0] = used_cut[a] = True
    nonempty = rs < re
    used_cut[rs[nonempty]] = True
    used_cut[re[nonempty]] = True
    if not used_cut.all():
        pos = np.flatnonzero(used_cut)  # kept cut positions
        remap = np.cumsum(used_cut) - 1  # cut position -> new cut index
        rs = remap[rs]
        re = remap[re]
        atom_index = atom_index[pos[:-1]]
        a = len(pos) - 1
    rs = np.where(nonempty, rs, 0)
    re = np.where(nonempty, re, 0)
    values = _LazyNumericValues(col, cuts, atom_index)
    return ProblemColumn(name, a, values, rs=rs.astype(np.int64), re=re.astype(np.int64))


class _LazyNumericValues:
    """``values[i]``: a concrete value in numeric atom i, computed on demand."""

    def __init__(self, col: NumericColumn, cuts: np.ndarray, atom_index: np.ndarray) -> None:
        self.col, self.cuts, self.atom_index = col, cuts, atom_index

    def __len__(self) -> int:
        return len(self.atom_index)

    def __getitem__(self, i: int) -> Any:
        j = int(self.atom_index[i])
        return _numeric_value(self.col, self.cuts[j], self.cuts[j + 1])
