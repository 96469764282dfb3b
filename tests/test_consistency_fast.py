"""The vectorised exact Gram matrix and null-vector check of dpmagic.releases.consistency (issue 32, speed of
``Session.consistent()``) against the pair-by-pair rational definition, including coefficients large enough that
int64 / float64 arithmetic would overflow or round (the Python-integer fallbacks must take over).  Deterministic
(hypothesis examples, no randomness asserted on): no false failures."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tests_support import TINY_SCHEMA as SCHEMA
from tests_support import linear_coeffs as _coeffs
from tests_support import tiny_box as _box

from dpmagic.domain.sets import full_set
from dpmagic.noise.calibration import Noise
from dpmagic.releases.consistency import (
    Measurement,
    _all_null,
    _atoms,
    _gram_int,
    gram,
    null_space,
    null_space_fractions,
)


def _gram_pairwise(ms: list[Measurement]) -> list[list[Fraction]]:
    """The definition, pair by pair in Fractions: ⟨coeff_i, coeff_j⟩ · Π_columns |atoms(R_i) ∩ atoms(R_j)|."""
    columns = sorted({c for m in ms for c in m.region})
    atoms = {}
    for c in columns:
        distinct = []
        for m in ms:
            s = m.region.get(c)
            if s is not None and s not in distinct:
                distinct.append(s)
        atoms[c] = _atoms(distinct, full_set(SCHEMA[c]))
    g = [[Fraction(0)] * len(ms) for _ in ms]
    for (i, mi), (j, mj) in itertools.product(enumerate(ms), repeat=2):
        inner = sum((v * mj.coeffs.get(k, 0) for k, v in mi.coeffs.items()), Fraction(0))
        if mi.region.is_empty() or mj.region.is_empty():
            continue
        size = 1
        for c in columns:
            si, sj = mi.region.get(c), mj.region.get(c)
            size *= sum(1 for a in atoms[c] if (si is None or a.overlaps(si)) and (sj is None or a.overlaps(sj)))
        g[i][j] = inner * size
    return g


sets_a = st.one_of(st.none(), st.lists(st.sampled_from(["x", "y", "z"]), min_size=1, max_size=3, unique=True))
sets_b = st.one_of(st.none(), st.lists(st.sampled_from(["u", "v"]), min_size=1, max_size=2, unique=True))
ranges_v = st.one_of(st.none(), st.tuples(st.integers(0, 3), st.integers(0, 3)).map(lambda t: (min(t), max(t))))
centres = st.one_of(st.integers(-3, 3), st.integers(-(10**12), 10**12))  # c² ~ 10²⁴: beyond int64
measurement = st.tuples(
    sets_a, sets_b, ranges_v, st.sampled_from(["count", "sum", "s", "q", "half"]), centres, st.booleans()
)


def _measurements(specs: list[tuple]) -> list[Measurement]:
    noise = Noise("discrete_laplace", 1.0, 1.0)
    return [
        Measurement(i, kind, 0, (), _box(a, b, v, empty and i % 4 == 3), _coeffs(kind, c), 0.0, noise)
        for i, (a, b, v, kind, c, empty) in enumerate(specs)
    ]


@settings(max_examples=150, deadline=None)
@given(st.lists(measurement, min_size=1, max_size=8))
def test_vectorised_gram_equals_the_pairwise_definition(specs: list[tuple]) -> None:
    ms = _measurements(specs)
    assert gram(ms, SCHEMA) == _gram_pairwise(ms)


def test_gram_overflowing_int64_falls_back_to_python_integers() -> None:
    c = 10**12  # Q's coefficient c² = 10²⁴ and ⟨q, q⟩ ~ 10⁴⁸: int64 would wrap around
    ms = _measurements([(None, None, None, "q", c, False), (["x"], None, (1, 2), "q", c, False)])
    h, d = _gram_int(ms, SCHEMA)
    assert h.dtype == object and d == 1
    assert gram(ms, SCHEMA) == _gram_pairwise(ms)
    small = _measurements([(None, None, None, "q", 3, False), (["x"], None, (1, 2), "s", 2, False)])
    assert _gram_int(small, SCHEMA)[0].dtype == np.int64  # the fast path when the bound allows it


def test_null_check_does_not_trust_float64_beyond_2_to_the_53() -> None:
    """Row (2⁵³ + 1, 1) · (1, −2⁵³) = 1 ≠ 0, but in float64 2⁵³ + 1 rounds to 2⁵³ and the product to 0."""
    big = 2**53 + 1
    ints = np.array([[big, 1]], dtype=object)
    assert not _all_null(ints, big, [[Fraction(1), Fraction(-(2**53))]])
    assert _all_null(ints, big, [[Fraction(1), Fraction(-big)]])
    rows = [[Fraction(big), Fraction(1)], [Fraction(3), Fraction(7)]]
    assert null_space(rows) == null_space_fractions(rows) == []
