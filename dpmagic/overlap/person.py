"""The exact person-level maximum load over a region: an integer program over the overlap encoding.

docs/people.md §3 ("The exact bound").  A person is at most K′ domain points sharing one value s of the
*separating* columns S (the id and the invariant columns).  For a new query with box B, the persons whose load it
raises are those with a row in B; the most any of them is already loaded with is

    R(B) = max over s ∈ π_S(B), x₁ ∈ B with S-values s, x₂ … x_K′ with S-values s  of
           Σ_q w_q · [q touches one of x₁ … x_K′].

:func:`max_person_load_over` solves this as a mixed integer program over the compressed atoms of
:func:`~.encoding.build_problem` (the same encoding the row-level MILP uses, :mod:`.milp`), with

* one one-hot block ``y[c, atom]`` per separating column c (shared by the person's rows);
* K copies of the free columns' one-hot blocks: copy 1 over the atoms of B (``build_problem`` with region B),
  copies 2 … K over the whole free domain (region π_S(B));
* ``u[q, k] ≤ Σ_{atom ∈ q_c} y_k[c, atom]`` for every free column c that q constrains in copy k (q touches copy
  k on the free columns), ``z_q ≤ Σ_k u[q, k]`` and ``z_q ≤ Σ_{atom ∈ q_c} y[c, atom]`` for every separating
  column c that q constrains; maximise ``Σ w_q z_q``.

With binary y the best z_q is exactly [q touches the person], so the optimum is R(B).  Only a *proven* upper
bound is returned: HiGHS's dual bound (``mip_dual_bound``, equal to the optimum within the gap when optimality is
proven), plus :func:`~.milp.milp_margin` for its absolute tolerances, rounded up (:func:`~.rounding.proven_upper`)
and snapped to the weights' lattice (so an optimally solved program on dyadic or short-decimal weights gives
the exact value); never the incumbent.  The number of copies is capped at ``1 + Π_c a_c`` over the free columns
(more copies cannot touch more cells).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from dpmagic.domain.sets import Box
from dpmagic.overlap.encoding import BoxStore, ProblemColumn, build_problem
from dpmagic.overlap.milp import PRESOLVE_SECONDS_PER_NNZ, milp_margin
from dpmagic.overlap.rounding import DecimalLattice, grid_of, proven_upper, sum_up

__all__ = ["PersonLoad", "max_person_load_over", "PERSON_MAX_VARS"]

#: the program is only built when it has at most this many variables (size cap: admissions stay fast)
PERSON_MAX_VARS = 20_000


@dataclass(frozen=True)
class PersonLoad:
    """A proven upper bound ``upper`` of R(B); ``exact`` when HiGHS proved optimality (``upper`` is then the
    optimum, up to the rounding margin snapped away on a lattice); ``variables`` the program's size."""

    upper: float
    exact: bool
    variables: int


def _project(box: Box, separating: tuple[str, ...]) -> Box:
    if box.is_empty():
        return box
    return Box({c: s for c, s in box.constraints.items() if c in separating})


def max_person_load_over(
    store: BoxStore,
    ids: np.ndarray,
    box: Box,
    separating: tuple[str, ...],
    copies: int,
    *,
    time_limit: float,
    max_vars: int = PERSON_MAX_VARS,
) -> PersonLoad | None:
    """A proven upper bound of R(box) (module docstring) over the registered queries ``ids`` of ``store`` (the
    caller passes every query that can touch a person with a row in ``box``: those whose projection on the
    separating columns meets the box's), for persons of at most ``copies`` rows.

    ``None`` when the program is larger than ``max_vars`` variables or HiGHS found no finite dual bound within
    ``time_limit`` seconds (the caller then falls back to its other bounds).
    """
    ids = np.asarray(ids, dtype=np.int64)
    if box.is_empty() or len(ids) == 0:
        return PersonLoad(0.0, True, 0)
    if copies < 1:
        raise ValueError("a person has at least one row")
    deadline = time.perf_counter() + time_limit
    first = build_problem(store, ids, box)  # copy 1: a row inside the box
    rest = build_problem(store, ids, _project(box, separating))  # copies 2..K: any row with the same S-values
    sep1 = {c.name: c for c in first.columns if c.name in separating}
    sep2 = {c.name: c for c in rest.columns if c.name in separating}
    free1 = [c for c in first.columns if c.name not in separating]
    free2 = [c for c in rest.columns if c.name not in separating]
    # the separating columns have the same region (π(box) agrees with box there), so the same atoms
    if set(sep1) != set(sep2) or any(sep1[n].a != sep2[n].a for n in sep1):
        return None
    cells = math.prod(c.a for c in free2) if free2 else 1
    k = max(1, min(int(copies), 1 + cells))
    n = len(ids)
    w = np.asarray(store.weights[ids], dtype=np.float64)
    blocks: list[list[ProblemColumn]] = [list(sep1.values()), free1] + [free2] * (k - 1)
    cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # copies 2..K share their columns: encode once
    for blk in blocks:
        for col in blk:
            if id(col) not in cache:
                M = col.dense()
                # q constrains the column: its row is not all True (all False: disjoint, its u or z is forced to 0)
                cache[id(col)] = (M, np.asarray(~M.all(axis=1), dtype=bool))
    dense = [[cache[id(col)][0] for col in blk] for blk in blocks]
    cons = [[cache[id(col)][1] for col in blk] for blk in blocks]
    free_copies = list(range(1, len(blocks)))
    touch = np.zeros((n, len(free_copies)), dtype=bool)  # q constrains some free column of copy k
    for j, bi in enumerate(free_copies):
        for cm in cons[bi]:
            touch[:, j] |= cm
    needs_u = np.asarray(
        touch.all(axis=1), dtype=bool
    )  # a copy with no free constraint on q touches q whenever s does: no u needed
    ny = sum(c.a for blk in blocks for c in blk)
    nu = int(needs_u.sum()) * len(free_copies)
    nvar = ny + n + nu
    if nvar > max_vars:
        return None
    offs: list[list[int]] = []
    pos = 0
    for blk in blocks:
        o = []
        for c in blk:
            o.append(pos)
            pos += c.a
        offs.append(o)
    zoff = ny
    uidx = np.full((n, len(free_copies)), -1, dtype=np.int64)
    uq = np.flatnonzero(needs_u)
    if len(uq):
        uidx[uq, :] = ny + n + np.arange(len(uq) * len(free_copies)).reshape(len(uq), len(free_copies))
    ri: list[np.ndarray] = []
    rj: list[np.ndarray] = []
    rv: list[np.ndarray] = []
    lo: list[float] = []
    hi: list[float] = []
    r = 0

    def row(cols: np.ndarray, vals: np.ndarray, lower: float, upper: float) -> None:
        nonlocal r
        ri.append(np.full(len(cols), r))
        rj.append(cols)
        rv.append(vals)
        lo.append(lower)
        hi.append(upper)
        r += 1

    for bi, blk in enumerate(blocks):  # one-hot per column of every block
        for ci, c in enumerate(blk):
            row(offs[bi][ci] + np.arange(c.a), np.ones(c.a), 1.0, 1.0)
    for q in range(n):
        if time.perf_counter() > deadline:
            return None
        for ci, M in enumerate(dense[0]):  # z_q ≤ Σ_{atom ∈ q_c} y[c, atom] on each separating column
            if cons[0][ci][q]:
                atoms = np.flatnonzero(M[q])
                row(
                    np.concatenate([[zoff + q], offs[0][ci] + atoms]),
                    np.concatenate([[1.0], -np.ones(len(atoms))]),
                    -np.inf,
                    0.0,
                )
        if not needs_u[q]:
            continue
        us = uidx[q]
        row(np.concatenate([[zoff + q], us]), np.concatenate([[1.0], -np.ones(len(us))]), -np.inf, 0.0)
        for j, bi in enumerate(free_copies):
            for ci, M in enumerate(dense[bi]):
                if cons[bi][ci][q]:
                    atoms = np.flatnonzero(M[q])
                    row(
                        np.concatenate([[us[j]], offs[bi][ci] + atoms]),
                        np.concatenate([[1.0], -np.ones(len(atoms))]),
                        -np.inf,
                        0.0,
                    )
    if r == 0:  # no query constrains any column: each touches everybody
        return PersonLoad(sum_up(w.tolist()), True, nvar)
    import scipy.sparse as sp
    from scipy.optimize import Bounds as LBounds
    from scipy.optimize import LinearConstraint, milp

    A = sp.csr_matrix((np.concatenate(rv), (np.concatenate(ri), np.concatenate(rj))), shape=(r, nvar))
    scale = math.ldexp(1.0, -math.frexp(float(w.max()))[1])  # largest scaled weight in [0.5, 1): exact
    objective = np.zeros(nvar)
    objective[zoff : zoff + n] = -w * scale
    integrality = np.zeros(nvar)
    integrality[:ny] = 1
    left = deadline - time.perf_counter()
    if left <= 0:
        return None
    res = milp(
        objective,
        constraints=LinearConstraint(A, np.asarray(lo), np.asarray(hi)),
        integrality=integrality,
        bounds=LBounds(np.zeros(nvar), np.ones(nvar)),
        options={
            "time_limit": left,
            "disp": False,
            "mip_rel_gap": 1e-9,
            "presolve": bool(left >= PRESOLVE_SECONDS_PER_NNZ * A.nnz),
        },
    )
    dual = getattr(res, "mip_dual_bound", None)
    if dual is None or not np.isfinite(dual):
        return None
    # scaled → unscaled is exact (a power of two); the margin covers HiGHS's absolute tolerances; then rounded up
    # and snapped to the weights' lattice (a proven bound within one lattice step of the optimum is the optimum)
    total = sum_up(w.tolist())
    upper = proven_upper((-float(dual) + milp_margin(nvar, r)) / scale, 2 * n + 4, scale=total + 1.0, grid=grid_of(w))
    lattice = DecimalLattice.of(w)
    if lattice is not None:
        upper = lattice.snap(upper)
    return PersonLoad(min(max(upper, 0.0), total), bool(res.status == 0), nvar)
