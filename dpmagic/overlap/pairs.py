"""Replace-one neighbours: the worst pair of rows (Inan et al. 2017, bounded DP).

Under replace-one neighbours a data set D' differs from D by changing one row x into x'.  A mechanism whose
coverage contains neither x nor x' answers identically on both, so the pair's privacy loss is the weight of
the queries covering x *or* x'::

    pair(Q) = max_{x, x'} Σ_{q : x ∈ C_q or x' ∈ C_q} w_q,      γ_w ≤ pair(Q) ≤ min(2 γ_w, Σ w).

:func:`max_pair_load` computes it exactly on the compressed domain (docs/design.md §2, "atoms") when that is
small: every compressed cell gets its *signature* (the set of queries covering it), and for signatures S_i,
S_j the union weight is W(S_i) + W(S_j) − W(S_i ∩ S_j), one matrix product over the distinct signatures.
Complexity O(n·C + U²·n) for n queries, C compressed cells and U ≤ C distinct signatures.  A compressed
cell is a set of declared values, so two distinct rows exist whenever the domain has at least two rows; the
pair (i, i) is then a real pair of distinct rows or is dominated by another pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpmagic.domain.schema import Schema
from dpmagic.domain.sets import Box
from dpmagic.overlap.encoding import BoxStore, build_problem
from dpmagic.overlap.rounding import grid_of, proven_upper, sum_up
from dpmagic.overlap.tensor import khatri_rao

__all__ = ["PairResult", "max_pair_load", "MAX_PAIR_CELLS"]

#: Largest compressed domain (cells) on which the exact pair search runs.
MAX_PAIR_CELLS = 2048


@dataclass(frozen=True)
class PairResult:
    """The worst replace-one pair: its loss and the two witness rows (``None`` rows when unconstrained)."""

    value: float
    rows: tuple[dict[str, Any], dict[str, Any]]


def max_pair_load(
    boxes: Sequence[Box], weights: Sequence[float], schema: Schema, *, max_cells: int = MAX_PAIR_CELLS
) -> PairResult | None:
    """Exact replace-one loss ``max_{x,x'} W({q : x ∈ C_q or x' ∈ C_q})``, or None if the domain is too large.

    Reference: Inan, Gursoy & Saygin, *Sensitivity Analysis for Non-Interactive DP* (Inan et al. 2017), bounded vs
    unbounded neighbours; docs/design.md §2 "Neighbouring relation".
    """
    w_all = np.asarray(weights, dtype=float)
    store = BoxStore(schema)
    if len(boxes):
        store.extend(list(boxes), w_all)
    ids = np.flatnonzero(store.alive[: store.n]) if store.n else np.zeros(0, dtype=np.int64)
    if len(ids) == 0:
        return PairResult(0.0, ({}, {}))
    prob = build_problem(store, ids)
    if prob.cells() > max_cells:
        return None
    n = prob.n
    w = prob.weights
    cover = khatri_rao(prob)
    sig, first = np.unique(cover.T, axis=0, return_index=True)
    s = sig.astype(float)
    load = s @ w
    inter = (s * w) @ s.T
    union = load[:, None] + load[None, :] - inter
    i, j = np.unravel_index(int(np.argmax(union)), union.shape)
    qi = np.flatnonzero(sig[i] | sig[j])
    # a proven upper bound of every pair's exact union weight: the float matrix products carry rounding errors of
    # at most ~3n additions of partial sums bounded by Σw (near-ties may even hide the true argmax), so the float
    # maximum is rounded outward; the chosen pair's exact weight rounded up is a bound too
    value = max(
        sum_up(w[qi].tolist()),
        proven_upper(float(union[i, j]), n_terms=3 * n + 2, scale=float(np.sum(w)), grid=grid_of(w)),
    )
    return PairResult(value, (_row(prob, int(first[i])), _row(prob, int(first[j]))))


def _row(prob: Any, cell: int) -> dict[str, Any]:
    shape = [c.a for c in prob.columns]
    idx = np.unravel_index(cell, shape) if shape else ()
    row = {c.name: c.values[int(k)] for c, k in zip(prob.columns, idx)}
    row.update({k: v for k, v in prob.defaults.items() if k not in row})
    return row
