"""The coverage algebra of :mod:`dpmagic.domain.sets`: category sets as bit masks, against Python sets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmagic.domain.schema import CategoricalColumn, Schema
from dpmagic.domain.sets import CategorySet, box_from_json, box_to_json, empty_set, full_set

# sizes around the byte and 64-bit word boundaries the masks are packed into
SIZES = [1, 7, 8, 9, 63, 64, 65, 130]
COLUMNS = {k: CategoricalColumn(f"c{k}", tuple(f"v{i}" for i in range(k))) for k in SIZES}


@st.composite
def two_sets(draw: st.DrawFn) -> tuple[CategoricalColumn, set[int], set[int]]:
    col = COLUMNS[draw(st.sampled_from(SIZES))]
    idx = st.sets(st.integers(0, col.size - 1))
    return col, draw(idx), draw(idx)


@settings(max_examples=300, deadline=None)
@given(two_sets())
def test_algebra_matches_python_sets(case: tuple[CategoricalColumn, set[int], set[int]]) -> None:
    col, a, b = case
    A, B = CategorySet.of_indices(col, a), CategorySet.of_indices(col, b)
    assert A.indices == tuple(sorted(a)) and len(A) == len(a)
    assert A.intersect(B).indices == tuple(sorted(a & b))
    assert A.union(B).indices == tuple(sorted(a | b))
    assert A.complement().indices == tuple(sorted(set(range(col.size)) - a))
    assert A.overlaps(B) == bool(a & b)
    assert A.is_empty() == (not a) and A.is_full() == (len(a) == col.size)
    mask = A.to_mask()
    assert mask.dtype == bool and mask.shape == (col.size,) and set(np.flatnonzero(mask).tolist()) == a
    assert CategorySet.from_mask(col, mask) == A
    assert CategorySet.of_values(col, A.values) == A
    assert all(A.contains(f"v{i}") == (i in a) for i in range(col.size))
    if a:
        assert A.some_value() == f"v{min(a)}"
    # equal sets are equal and hash alike, whatever way they were built
    assert hash(A) == hash(CategorySet(col, sum(1 << i for i in a)))


def test_full_and_empty() -> None:
    col = COLUMNS[65]
    assert full_set(col).is_full() and len(full_set(col)) == 65  # type: ignore[arg-type]
    assert empty_set(col).is_empty() and empty_set(col).indices == ()
    with pytest.raises(ValueError, match="no values"):
        empty_set(col).some_value()  # type: ignore[union-attr]


def test_bad_construction_is_refused() -> None:
    col = COLUMNS[8]
    with pytest.raises(ValueError, match="outside column 'c8'"):
        CategorySet(col, 1 << 8)
    with pytest.raises(ValueError, match="outside"):
        CategorySet(col, -1)
    with pytest.raises(TypeError, match="int bit mask"):
        CategorySet(col, frozenset({1}))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="out of range"):
        CategorySet.of_indices(col, [8])
    with pytest.raises(ValueError, match="has 8 values"):
        CategorySet.from_mask(col, np.ones(9, dtype=bool))


def test_of_values_ignores_undeclared_literals_and_compares_numbers_by_value() -> None:
    col = CategoricalColumn("n", (1, 2.5, "3"))
    assert CategorySet.of_values(col, [1.0, 2.5, 3, "nope", True]).values == [1, 2.5]
    assert CategorySet.of_values(col, ["3"]).values == ["3"]
    assert col.index_of(np.int64(1)) == 0 and col.index_of(np.float64(2.5)) == 1
    assert col.index_of(float("nan")) is None and col.index_of(None) is None


def test_json_roundtrip() -> None:
    schema = Schema.from_dict({"columns": {"c": {"type": "categorical", "values": [f"v{i}" for i in range(70)]}}})
    box = box_from_json({"c": {"values": ["v0", "v64", "v69"]}}, schema)
    assert box_to_json(box) == {"c": {"values": ["v0", "v64", "v69"]}}


def test_index_of_with_ints_beyond_float_range() -> None:
    col = CategoricalColumn("big", (1, 10**400, 2.5))
    assert col.index_of(10**400) == 1 and col.index_of(1.0) == 0 and col.index_of(2.5) == 2
    assert col.index_of(10**401) is None and col.index_of("1") is None
    mixed = CategoricalColumn("mixed", ("a", 3, 10**400))
    assert mixed.index_of("a") == 0 and mixed.index_of(3.0) == 1 and mixed.index_of(10**400) == 2
    assert col.index_of(np.True_) is None and col.index_of(True) is None  # booleans are not categories
