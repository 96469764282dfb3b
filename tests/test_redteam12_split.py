"""Red team 12 (issue 28): the weight-splitting bound (:func:`~dpmagic.overlap.scoped.split_bound`) and its cut,
against an *exact* brute force (Fraction sums, no float tolerance), with adversarial weights: tiny (subnormal),
huge, equal, ties; queries constraining no column, full rows; any starting split and any number of steps.

Finding: a split multiplies each weight by fractions ``λ < 1``; in the subnormal range a product has an absolute
error up to half the smallest subnormal ``η = 2⁻¹⁰⁷⁴`` (here the whole of it: ``η·½`` rounds to 0), which the
relative ``SPLIT_MARGIN`` does not cover — the "proven" bound was 0 for a query of weight ``η``, and the cut then
removed the true maximum (a scoped search reported exact with an upper end below γ).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from overlap_support import FAST

import dpmagic.overlap.scoped as scoped_mod
from dpmagic.overlap.encoding import Problem, ProblemColumn
from dpmagic.overlap.rounding import ProblemRounding
from dpmagic.overlap.scoped import scoped_search, split_bound

ETA = 2.0**-1074  # the smallest subnormal float64
#: adversarial weights: subnormal (products with λ < 1 underflow), tiny normal, ordinary, huge (sums overflow)
weights = st.one_of(
    st.sampled_from([ETA, 2 * ETA, 5 * ETA, 30 * ETA, 1e-310, 2.0**-1000, 0.1, 1 / 3, 1.0, 1e300, 1.7e308]),
    st.floats(min_value=ETA, max_value=1e308, allow_nan=False, allow_infinity=False),
)


@st.composite
def _instances(draw):  # type: ignore[no-untyped-def]
    """1–12 columns of 1–3 atoms, 0–7 queries each constraining any subset (nonempty rows there, all ones
    elsewhere: a full row constrains nothing), equal or independent weights, a starting split or None, 0–6 steps."""
    m = draw(st.integers(1, 12))
    widths = [draw(st.integers(1, 3)) for _ in range(m)]
    n = draw(st.integers(0, 7))
    cons = np.zeros((n, m), dtype=bool)
    cover = np.ones((n, sum(widths)))
    offsets = np.cumsum([0] + widths[:-1]).astype(np.intp)
    for q in range(n):
        for c in range(m):
            if draw(st.booleans()):
                row = np.array(draw(st.lists(st.booleans(), min_size=widths[c], max_size=widths[c])), dtype=float)
                row[draw(st.integers(0, widths[c] - 1))] = 1.0
                cover[q, offsets[c] : offsets[c] + widths[c]] = row
                cons[q, c] = not row.all()
    if draw(st.booleans()):
        w = np.full(n, draw(weights))
    else:
        w = np.array(draw(st.lists(weights, min_size=n, max_size=n)), dtype=np.float64)
    lam = None
    if draw(st.booleans()):
        lam = np.array(draw(st.lists(st.floats(0.0, 5.0), min_size=n * m, max_size=n * m))).reshape(n, m)
    return cover, cons, offsets, widths, w, lam, draw(st.integers(0, 6))


def _exact_max(cover: np.ndarray, offsets: np.ndarray, widths: list[int], w: np.ndarray) -> Fraction:
    best = Fraction(0)
    for row in itertools.product(*[range(a) for a in widths]):
        alive = np.ones(len(w), dtype=bool)
        for c, a in enumerate(row):
            alive &= cover[:, offsets[c] + a] > 0
        best = max(best, sum((Fraction(x) for x in w[alive].tolist()), Fraction(0)))
    return best


def test_split_bound_of_one_subnormal_weight() -> None:
    """One query of weight η constraining two columns: every row of its box has load η; the even split gives
    each column ``η·½``, which rounds to 0 — the bound was 0 (< η) before the fix."""
    cover = np.array([[1.0, 0.0, 1.0, 1.0, 0.0]])
    cons = np.array([[True, False, True]])
    ub, _ = split_bound(cover, cons, np.array([0, 2, 3], dtype=np.intp), np.array([ETA]), None, 0)
    assert ub >= ETA


@given(_instances())
@FAST
def test_split_bound_is_proven_for_adversarial_weights(inst) -> None:
    """From any starting split and after any number of steps, the bound is at least the exact maximum load
    (Fractions), for subnormal, tiny, ordinary and huge weights (an overflowing sum may only give ∞)."""
    cover, cons, offsets, widths, w, lam, steps = inst
    ub, split = split_bound(cover, cons, offsets, w, lam, steps)
    assert not math.isnan(ub)
    if math.isfinite(ub):
        assert _exact_max(cover, offsets, widths, w) <= Fraction(ub)
    live = cons.any(axis=1)
    assert (split >= 0.0).all() and (split[~cons] == 0.0).all()
    assert np.allclose(split[live].sum(axis=1), 1.0)


def test_split_cut_keeps_the_maximum_of_subnormal_weights(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """30 queries of weight 30η, each the box {atom 0} of 12 two-atom columns (γ = 900η), searched with a floor of
    750η (only rows above it matter).  The even split puts ``30η/12 = 2.5η`` on each column, rounded to 2η, so the
    split bound was 720η ≤ 750η: the root was cut and the search reported exact with upper 888η < γ.  With the
    default depth and ratio of the cut; only ``SPLIT_AFTER`` is lowered (a long search passes it anyway)."""
    monkeypatch.setattr(scoped_mod, "SPLIT_AFTER", 0)
    n, m = 30, 12
    cols = [ProblemColumn(f"c{c}", 2, None, M=np.tile(np.array([True, False]), (n, 1))) for c in range(m)]
    prob = Problem(np.arange(n), np.full(n, 30 * ETA), cols)  # type: ignore[arg-type]
    truth = Fraction(30 * ETA) * n
    atoms, upper, exact, _ = scoped_search(prob, math.inf, ProblemRounding.of(prob), 750 * ETA)
    assert Fraction(upper) >= truth
    if exact and atoms:
        assert atoms == {c.name: 0 for c in cols}
