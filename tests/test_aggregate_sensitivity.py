"""Brute-force checks of the new aggregates' sensitivities on small domains, for both neighbouring relations.

For every small data set over a tiny domain and every neighbour (add/remove one row; replace one row), the
change of the released statistic — per GROUP BY cell, L1 and L2 over the cells — must stay within what
:mod:`dpmagic.aggregates` calibrates for (pure ε uses L1, zCDP L2, GDP per-cell with μ/√2 across two cells).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmagic.aggregates.common import calibration, sum_sensitivity
from dpmagic.aggregates.variance import center

VALUES = [-2, -1, 0, 1, 3]  # a small int domain [lo, hi] = [-2, 3]
LO, HI = -2, 3
CELLS = [0, 1]

rows = st.lists(st.tuples(st.sampled_from(CELLS), st.sampled_from(VALUES)), max_size=6)


def _neighbours(data: list[tuple[int, int]], replace: bool):
    domain = list(itertools.product(CELLS, VALUES))
    if not replace:
        for i in range(len(data)):
            yield data[:i] + data[i + 1 :]
        for r in domain:
            yield [*data, r]
    else:
        for i in range(len(data)):
            for r in domain:
                yield data[:i] + [r] + data[i + 1 :]


def _per_cell(data, f, grouped: bool) -> np.ndarray:
    if not grouped:
        return np.array([f([v for _, v in data])], dtype=float)
    return np.array([f([v for c, v in data if c == k]) for k in CELLS], dtype=float)


def _check(f, bound_for, data, replace: bool, grouped: bool) -> None:
    """bound_for(definition) → the per-cell sensitivity the unit calibrates for (with its spread)."""
    base = _per_cell(data, f, grouped)
    for nb in _neighbours(data, replace):
        d = _per_cell(nb, f, grouped) - base
        for definition in ("pure", "zcdp", "gdp"):
            cal = calibration(definition, 1.0, replace_one=replace, grouped=grouped)
            sens = bound_for(cal)
            if definition == "pure":
                assert np.abs(d).sum() <= sens + 1e-9
            elif definition == "zcdp":
                assert math.sqrt((d**2).sum()) <= sens + 1e-9
            else:  # each cell a separate μ/√2 release when two can move: per-cell change within sens
                assert np.abs(d).max() <= sens + 1e-9
                if not cal.grouped:
                    assert math.sqrt((d**2).sum()) <= sens + 1e-9


@settings(max_examples=150, derandomize=True, deadline=None)
@given(rows, st.booleans(), st.booleans())
def test_count_distinct_sensitivity(data, replace, grouped) -> None:
    _check(lambda vs: len(set(vs)), lambda cal: cal.spread * 1.0, data, replace, grouped)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(rows, st.booleans(), st.booleans())
def test_variance_centred_sum_sensitivity(data, replace, grouped) -> None:
    c = center(LO, HI, True)
    _check(lambda vs: sum(v - c for v in vs), lambda cal: sum_sensitivity(LO - c, HI - c, cal), data, replace, grouped)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(rows, st.booleans(), st.booleans())
def test_variance_sum_of_squares_sensitivity(data, replace, grouped) -> None:
    c = center(LO, HI, True)
    q = max((LO - c) ** 2, (HI - c) ** 2)
    _check(lambda vs: sum((v - c) ** 2 for v in vs), lambda cal: sum_sensitivity(0.0, q, cal), data, replace, grouped)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(rows, st.booleans(), st.booleans(), st.sampled_from([(-1, 1), (0, 3), (-2, 0), (1, 1)]))
def test_clamped_sum_sensitivity(data, replace, grouped, clamp) -> None:
    lo, hi = clamp
    _check(
        lambda vs: sum(min(max(v, lo), hi) for v in vs),
        lambda cal: sum_sensitivity(float(lo), float(hi), cal) or 1.0,
        data,
        replace,
        grouped,
    )


def test_sensitivities_are_tight_somewhere() -> None:
    """The bounds are attained: COUNT(DISTINCT) moves by 1, replace across cells by 2 (L1)."""
    base = [(0, 1)]
    assert len({v for _, v in base}) - len({v for _, v in []}) == 1
    moved = _per_cell([(1, 1)], lambda vs: len(set(vs)), True) - _per_cell(base, lambda vs: len(set(vs)), True)
    assert np.abs(moved).sum() == 2.0
