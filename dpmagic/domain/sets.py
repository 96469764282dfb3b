"""Coverage algebra: per-column value sets and boxes over the declared domain.

A predicate on one column has a *coverage*: the set of declared values that satisfy it (Smith et al. 2022 §3.1).
dpmagic represents it exactly:

* :class:`CategorySet` — a subset of a categorical column's declared values, stored as a bit mask over
  their positions (one big-integer operation per set operation);
* :class:`IntervalSet` — a union of disjoint intervals inside a numeric column's ``[lower, upper]``, with
  correct open/closed ends.  On ``int`` columns every interval is normalised to closed ends that are exact
  Python ints (never doubles, so values beyond 2^53 such as nanosecond timestamps keep their last digit),
  and ``x > 4 AND x < 5`` is empty there; on ``float`` columns the ends are doubles.

A conjunction of such predicates is a :class:`Box`: a product over columns of value sets, where a column
that is not constrained is the whole domain (a tautology).  Two boxes overlap iff their sets intersect on
every column (Smith et al. 2022, Prop. 3) — an O(m) test.

One module (a little over 400 lines) because the three set types and the box are one algebra: each operation
is defined on all of them together, and their JSON form (:func:`box_to_json`) must round-trip them all.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpmagic.domain.schema import CategoricalColumn, Column, NumericColumn, Schema

__all__ = [
    "Interval",
    "IntervalSet",
    "CategorySet",
    "ValueSet",
    "Box",
    "full_set",
    "empty_set",
    "box_to_json",
    "box_from_json",
]


@dataclass(frozen=True, order=True)
class Interval:
    """One interval ``lo..hi``; ``lo_closed``/``hi_closed`` say whether each end belongs to it.

    Ends are Python numbers compared exactly (Python compares ints and floats by value, without rounding):
    ints on int columns after :meth:`IntervalSet.of`, doubles on float columns, ``±inf`` for half-lines.
    """

    lo: float | int
    hi: float | int
    lo_closed: bool = True
    hi_closed: bool = True

    def is_empty(self) -> bool:
        if self.lo > self.hi:
            return True
        return self.lo == self.hi and not (self.lo_closed and self.hi_closed)

    def contains(self, x: float | int) -> bool:
        if x < self.lo or x > self.hi:
            return False
        if x == self.lo and not self.lo_closed:
            return False
        return not (x == self.hi and not self.hi_closed)

    def __str__(self) -> str:
        if self.lo == self.hi:
            return f"{{{_num(self.lo)}}}"
        return f"{'[' if self.lo_closed else '('}{_num(self.lo)}, {_num(self.hi)}{']' if self.hi_closed else ')'}"


def _num(x: float | int) -> str:
    if isinstance(x, int):
        return str(x)
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _as_float(x: float | int) -> float:
    """``float(x)``, with a number beyond the double range mapped to ``±inf`` (it is clipped to the domain)."""
    try:
        return float(x)
    except OverflowError:
        return math.inf if x > 0 else -math.inf


def _domain(column: NumericColumn) -> Interval:
    """The declared ``[lower, upper]``: exact ints on an int column, doubles on a float column."""
    if column.is_int:
        return Interval(int(column.lower), int(column.upper), True, True)
    return Interval(float(column.lower), float(column.upper), True, True)


@dataclass(frozen=True)
class IntervalSet:
    """A normalised union of disjoint, sorted intervals within a numeric column's declared bounds."""

    column: NumericColumn
    intervals: tuple[Interval, ...]

    # -- construction ---------------------------------------------------------------------------------
    @classmethod
    def of(cls, column: NumericColumn, intervals: Iterable[Interval]) -> IntervalSet:
        """Normalise: clip to ``[lower, upper]``, exact integer ends on int columns (an end given as a
        double rounds inward exactly: ``x > 1.7e18`` starts at the int after that double), double ends on
        float columns, sort and merge."""
        dom = _domain(column)
        pieces: list[Interval] = []
        for iv in intervals:
            if not column.is_int:
                iv = Interval(_as_float(iv.lo), _as_float(iv.hi), iv.lo_closed, iv.hi_closed)
            clipped = _intersect(iv, dom)
            if clipped is None:
                continue
            iv = clipped
            if column.is_int:
                lo = math.ceil(iv.lo) if iv.lo_closed else math.floor(iv.lo) + 1
                hi = math.floor(iv.hi) if iv.hi_closed else math.ceil(iv.hi) - 1
                if lo > hi:
                    continue
                iv = Interval(int(lo), int(hi), True, True)
            if not iv.is_empty():
                pieces.append(iv)
        pieces.sort(key=lambda i: (i.lo, not i.lo_closed))
        merged: list[Interval] = []
        for iv in pieces:
            if merged and _touches(merged[-1], iv, column.is_int):
                last = merged[-1]
                if (iv.hi, iv.hi_closed) > (last.hi, last.hi_closed):
                    merged[-1] = Interval(last.lo, iv.hi, last.lo_closed, iv.hi_closed)
            else:
                merged.append(iv)
        return cls(column, tuple(merged))

    # -- algebra -----------------------------------------------------------------------------------------
    def is_empty(self) -> bool:
        return not self.intervals

    def is_full(self) -> bool:
        # the full set is the declared domain itself (``IntervalSet.of(c, [_domain(c)])``), or nothing when
        # an int column's bounds hold no integer: compared without normalising it again
        dom = _domain(self.column)
        if dom.is_empty():
            return self.intervals == IntervalSet.of(self.column, [dom]).intervals
        return len(self.intervals) == 1 and self.intervals[0] == dom

    # ``other`` is a set of the same column (a column's value sets are all of its kind: asserted)
    def intersect(self, other: ValueSet) -> IntervalSet:
        assert isinstance(other, IntervalSet)
        out = [iv for a in self.intervals for b in other.intervals if (iv := _intersect(a, b)) is not None]
        return IntervalSet.of(self.column, out)

    def union(self, other: ValueSet) -> IntervalSet:
        assert isinstance(other, IntervalSet)
        return IntervalSet.of(self.column, self.intervals + other.intervals)

    def complement(self) -> IntervalSet:
        c = self.column
        out: list[Interval] = []
        dom = _domain(c)
        lo, lo_closed = dom.lo, True
        for iv in self.intervals:
            out.append(Interval(lo, iv.lo, lo_closed, not iv.lo_closed))
            lo, lo_closed = iv.hi, not iv.hi_closed
        out.append(Interval(lo, dom.hi, lo_closed, True))
        return IntervalSet.of(c, out)

    def overlaps(self, other: ValueSet) -> bool:
        assert isinstance(other, IntervalSet)
        return any(_intersect(a, b) is not None for a in self.intervals for b in other.intervals)

    def contains(self, x: float | int) -> bool:
        return any(iv.contains(x) for iv in self.intervals)

    def some_value(self) -> float | int:
        """A concrete member (used for witness rows)."""
        iv = self.intervals[0]
        if self.column.is_int:
            return int(iv.lo)
        if iv.lo_closed:
            return iv.lo
        if iv.hi_closed and iv.hi == iv.lo:
            return iv.hi
        return (iv.lo + iv.hi) / 2.0

    def __str__(self) -> str:
        return " ∪ ".join(str(iv) for iv in self.intervals) if self.intervals else "∅"


def _intersect(a: Interval, b: Interval) -> Interval | None:
    if (a.lo, not a.lo_closed) >= (b.lo, not b.lo_closed):
        lo, lo_closed = a.lo, a.lo_closed
    else:
        lo, lo_closed = b.lo, b.lo_closed
    if (a.hi, a.hi_closed) <= (b.hi, b.hi_closed):
        hi, hi_closed = a.hi, a.hi_closed
    else:
        hi, hi_closed = b.hi, b.hi_closed
    iv = Interval(lo, hi, lo_closed, hi_closed)
    return None if iv.is_empty() else iv


def _touches(a: Interval, b: Interval, is_int: bool) -> bool:
    """True when ``b`` (which starts at or after ``a``) overlaps or abuts ``a`` without a gap."""
    if is_int:
        return b.lo <= a.hi + 1
    if b.lo < a.hi:
        return True
    if b.lo == a.hi:
        return a.hi_closed or b.lo_closed
    return False


@dataclass(frozen=True)
class CategorySet:
    """A subset of a categorical column's declared values, as a bit mask over ``column.values``.

    Bit ``i`` of ``bits`` (a Python ``int``, so any column size works) is set iff ``column.values[i]``
    belongs to the set.  Intersection, union, complement and the overlap test are single big-integer
    operations (O(k/64) machine words), and :meth:`to_mask` turns a set into a numpy boolean row without a
    Python loop — which is what the overlap engine's column stores are built from.

    Build one with :meth:`of_values` (declared values), :meth:`of_indices` (positions) or
    :meth:`from_mask` (a boolean array); ``CategorySet(column, bits)`` takes the mask directly.
    """

    column: CategoricalColumn
    bits: int

    def __post_init__(self) -> None:
        b = self.bits
        if not isinstance(b, int) or isinstance(b, bool):
            raise TypeError(f"CategorySet bits must be an int bit mask, got {type(b).__name__}")
        if b < 0 or b >> self.column.size:
            raise ValueError(f"CategorySet bits {b:#x} name positions outside column {self.column.name!r}")

    # -- construction ---------------------------------------------------------------------------------
    @classmethod
    def of_values(cls, column: CategoricalColumn, values: Iterable[Any]) -> CategorySet:
        """The declared values among ``values``; a literal outside the domain matches nothing."""
        return cls.of_indices(column, (i for v in values if (i := column.index_of(v)) is not None))

    @classmethod
    def of_indices(cls, column: CategoricalColumn, indices: Iterable[int]) -> CategorySet:
        """The values at positions ``indices`` (each in ``0..size-1``) of ``column.values``."""
        idx = np.fromiter((int(i) for i in indices), dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= column.size):
            raise ValueError(f"category position out of range 0..{column.size - 1} for column {column.name!r}")
        mask = np.zeros(column.size, dtype=bool)
        mask[idx] = True
        return cls.from_mask(column, mask)

    @classmethod
    def from_mask(cls, column: CategoricalColumn, mask: np.ndarray) -> CategorySet:
        """The values whose entry of the boolean array ``mask`` (length ``column.size``) is true."""
        mask = np.asarray(mask, dtype=bool).reshape(-1)
        if mask.size != column.size:
            raise ValueError(f"mask has {mask.size} entries; column {column.name!r} has {column.size} values")
        return cls(column, int.from_bytes(np.packbits(mask, bitorder="little").tobytes(), "little"))

    @classmethod
    def full(cls, column: CategoricalColumn) -> CategorySet:
        return cls(column, (1 << column.size) - 1)

    # -- views ----------------------------------------------------------------------------------------
    def to_mask(self) -> np.ndarray:
        """``mask[i]`` = value ``i`` is in the set (a fresh boolean array of length ``column.size``)."""
        k = self.column.size
        raw = np.frombuffer(self.bits.to_bytes((k + 7) // 8, "little"), dtype=np.uint8)
        return np.unpackbits(raw, count=k, bitorder="little").view(bool)

    @property
    def indices(self) -> tuple[int, ...]:
        """Positions of the members in ``column.values``, ascending."""
        return tuple(np.flatnonzero(self.to_mask()).tolist())

    def __len__(self) -> int:
        return self.bits.bit_count()

    # -- algebra --------------------------------------------------------------------------------------
    def is_empty(self) -> bool:
        return self.bits == 0

    def is_full(self) -> bool:
        return self.bits == (1 << self.column.size) - 1

    # ``other`` is a set of the same column (a column's value sets are all of its kind: asserted)
    def intersect(self, other: ValueSet) -> CategorySet:
        assert isinstance(other, CategorySet)
        return CategorySet(self.column, self.bits & other.bits)

    def union(self, other: ValueSet) -> CategorySet:
        assert isinstance(other, CategorySet)
        return CategorySet(self.column, self.bits | other.bits)

    def complement(self) -> CategorySet:
        return CategorySet(self.column, self.bits ^ ((1 << self.column.size) - 1))

    def overlaps(self, other: ValueSet) -> bool:
        assert isinstance(other, CategorySet)
        return (self.bits & other.bits) != 0

    def contains(self, value: Any) -> bool:
        i = self.column.index_of(value)
        return i is not None and bool((self.bits >> i) & 1)

    @property
    def values(self) -> list[Any]:
        return [self.column.values[i] for i in self.indices]

    def some_value(self) -> Any:
        """The first declared member (the set must not be empty)."""
        if not self.bits:
            raise ValueError("an empty category set has no values")
        return self.column.values[(self.bits & -self.bits).bit_length() - 1]

    def __str__(self) -> str:
        return "{" + ", ".join(repr(v) for v in self.values) + "}"


ValueSet = IntervalSet | CategorySet


def full_set(column: Column) -> ValueSet:
    """The tautology on ``column``: its whole declared domain."""
    if isinstance(column, CategoricalColumn):
        return CategorySet.full(column)
    return IntervalSet.of(column, [_domain(column)])


def empty_set(column: Column) -> ValueSet:
    """The contradiction on ``column``."""
    if isinstance(column, CategoricalColumn):
        return CategorySet(column, 0)
    return IntervalSet(column, ())


@dataclass(frozen=True)
class Box:
    """A conjunction of per-column predicates: ``constraints[c]`` is column c's value set.

    Columns absent from ``constraints`` are unconstrained.  Tautologies are dropped on construction, so
    two boxes with the same coverage compare equal.  ``Box({})`` covers the whole domain.
    """

    constraints: Mapping[str, ValueSet]

    def __post_init__(self) -> None:
        kept = {c: s for c, s in sorted(self.constraints.items()) if not s.is_full()}
        object.__setattr__(self, "constraints", kept)

    @classmethod
    def everything(cls) -> Box:
        return cls({})

    def __hash__(self) -> int:
        return hash(tuple(self.constraints.items()))

    def __iter__(self) -> Iterator[str]:
        return iter(self.constraints)

    def is_empty(self) -> bool:
        return any(s.is_empty() for s in self.constraints.values())

    def get(self, column: str) -> ValueSet | None:
        return self.constraints.get(column)

    def intersect(self, other: Box) -> Box:
        out = dict(self.constraints)
        for c, s in other.constraints.items():
            out[c] = out[c].intersect(s) if c in out else s
        return Box(out)

    def overlaps(self, other: Box) -> bool:
        """Smith et al. 2022 Prop. 3: disjoint iff some column's sets are disjoint; O(m)."""
        if self.is_empty() or other.is_empty():
            return False
        for c, s in self.constraints.items():
            t = other.constraints.get(c)
            if t is not None and not s.overlaps(t):
                return False
        return True

    def contains_row(self, row: Mapping[str, Any]) -> bool:
        """Whether a domain row (a value per constrained column at least) lies in the box."""
        return all(c in row and s.contains(row[c]) for c, s in self.constraints.items())

    def describe(self) -> str:
        if self.is_empty():
            return "nothing (empty predicate)"
        if not self.constraints:
            return "the whole domain"
        return " AND ".join(f"{c} ∈ {s}" for c, s in self.constraints.items())

    def __str__(self) -> str:
        return self.describe()


def box_to_json(box: Box) -> dict[str, Any]:
    """A JSON-able description of a box: ``{col: {"values": [...]}}`` or ``{col: {"intervals": [...]}}``."""
    out: dict[str, Any] = {}
    for c, s in box.constraints.items():
        if isinstance(s, CategorySet):
            out[c] = {"values": s.values}
        else:
            out[c] = {"intervals": [[iv.lo, iv.hi, iv.lo_closed, iv.hi_closed] for iv in s.intervals]}
    return out


def box_from_json(data: Mapping[str, Any], schema: Schema) -> Box:
    """Inverse of :func:`box_to_json` against ``schema``."""
    constraints: dict[str, ValueSet] = {}
    for c, spec in data.items():
        col = schema[c]
        if isinstance(col, CategoricalColumn):
            constraints[c] = CategorySet.of_values(col, spec["values"])
        else:
            assert isinstance(col, NumericColumn)
            constraints[c] = IntervalSet.of(
                col,
                [Interval(_json_number(a), _json_number(b), bool(lc), bool(hc)) for a, b, lc, hc in spec["intervals"]],
            )
    return Box(constraints)


def _json_number(x: Any) -> float | int:
    """A JSON interval end: ints stay exact ints (int columns beyond 2^53), anything else is a double."""
    return x if isinstance(x, int) and not isinstance(x, bool) else float(x)
