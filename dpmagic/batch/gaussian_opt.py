"""OPT₀ for Gaussian noise: the convex strategy problem over X = AᵀA (HDMM §4.2), solved through its dual.

McKenna, Miklau, Hay, Machanavajjhala, "Optimizing error of high-dimensional statistical queries under
differential privacy", PVLDB 11(10), 2018, doi:10.14778/3231751.3231769, §4.2 (Def. 12): with Gaussian noise
the error ‖A‖₂²·tr(G (AᵀA)⁻¹) depends on A only through X = AᵀA, and

    minimise tr(G X⁻¹)  subject to  X ≻ 0, X_ii ≤ 1  (‖A‖₂² = max_i X_ii)

is convex.  The paper starts from X = G^{1/2} (the SVD-bound strategy) and runs a generic optimiser.  Here the
problem is solved through its Lagrange dual (our derivation): for multipliers λ > 0 (Λ = diag λ, L = Λ^{1/2}),
the minimiser of tr(G X⁻¹) + Σ λ_i (X_ii − 1) satisfies G = XΛX, i.e.

    X(λ) = L⁻¹ H^{1/2} L⁻¹ with H = L G L,   and   tr(G X(λ)⁻¹) = tr(H^{1/2}),

so every λ gives a strategy A = H^{1/4} L⁻¹ (columns rescaled so max ‖A_k‖₂ = 1) with exact error
tr(H^{1/2})·max_i X(λ)_ii, and the dual value 2 tr(H^{1/2}) − Σλ_i bounds the optimum from below.  The dual
gradient is X(λ)_ii − 1, so the multiplicative update λ_i ← λ_i·X(λ)_ii^α drives the diagonal of X to be
constant — the optimality condition; α doubles after an improving step and is quartered (the step retried)
after one that does not improve the error.  λ = 1 is the paper's initialisation (X = G^{1/2}).  Each iteration
is one symmetric eigendecomposition, O(n³); 4–8 iterations bring the error within 0.1% of its limit on the
range workloads of HDMM Table 5.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from dpmagic.batch.strategies import ExplicitStrategy
from dpmagic.batch.workloads import Dense
from dpmagic.errors import ConfigurationError

__all__ = ["opt_gaussian"]


def _step(g: np.ndarray, lam: np.ndarray) -> tuple[float, float, np.ndarray, np.ndarray, np.ndarray]:
    """(error, dual value, diag X(λ), eigenvalues and eigenvectors of H) for multipliers λ."""
    ell = np.sqrt(lam)
    ev, v = np.linalg.eigh(ell[:, None] * g * ell[None, :])
    r = np.sqrt(np.clip(ev, 0.0, None))
    tr = float(r.sum())
    xdiag = np.einsum("ij,j,ij->i", v, r, v) / lam
    return tr * float(xdiag.max()), 2.0 * tr - float(lam.sum()), xdiag, ev, v


def opt_gaussian(
    gram: np.ndarray | Dense,
    *,
    iters: int = 12,
    alpha: float = 1.0,
    rtol: float = 1e-4,
    time_limit: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> ExplicitStrategy:
    """The Gaussian OPT₀ strategy (module docstring): an n × n matrix A with max column L2 norm 1.

    Stops after ``iters`` eigendecompositions, when an accepted step improves the error by less than ``rtol``
    (relative), or
    when ``clock()`` passes ``time_limit`` seconds; returns the best iterate.  Raises for a Gram matrix with a
    zero diagonal entry outside a zero row (not positive semidefinite).  O(iters · n³).
    """
    g = np.asarray(gram.gram() if isinstance(gram, Dense) else gram, dtype=float)
    if g.ndim != 2 or g.shape[0] != g.shape[1] or not np.all(np.isfinite(g)):
        raise ConfigurationError("opt_gaussian: the Gram matrix must be a finite square array")
    n = g.shape[0]
    d = np.diag(g)
    if np.any(d <= 0):
        raise ConfigurationError(
            "opt_gaussian: every cell must be used by some query (a zero column of W)",
            hint="drop unused cells from the domain, or use opt_p_identity",
        )
    g = g / d.mean()
    deadline = None if time_limit is None else clock() + float(time_limit)
    lam = np.ones(n)
    err, _, xdiag, ev, v = _step(g, lam)
    best = (err, lam, ev, v)
    for _ in range(max(0, int(iters) - 1)):
        if deadline is not None and clock() > deadline:
            break
        cand = lam * xdiag**alpha
        cand = cand / cand.mean()
        e2, _, x2, ev2, v2 = _step(g, cand)
        if e2 < err:  # accept; grow the step while it keeps helping
            gain = (err - e2) / err
            lam, err, xdiag = cand, e2, x2
            best = (err, lam, ev2, v2)
            alpha = min(2.0 * alpha, 8.0)
            if gain < rtol:
                break
        else:  # overshoot: halve the step and retry from the same λ
            alpha /= 4.0
            if alpha < 1e-3:
                break
    _, lam, ev, v = best
    a = (v * np.sqrt(np.sqrt(np.clip(ev, 0.0, None)))) @ v.T / np.sqrt(lam)[None, :]  # H^{1/4} L⁻¹
    a /= np.sqrt((a * a).sum(axis=0).max())
    return ExplicitStrategy(a, name="OPT0-Gaussian")
