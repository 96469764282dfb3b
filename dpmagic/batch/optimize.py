"""Strategy optimisation: HDMM's OPT₀, OPT⊗, OPT₊ and OPT_M (formulas from the paper only).

McKenna, Miklau, Hay, Machanavajjhala, "Optimizing error of high-dimensional statistical queries under
differential privacy", PVLDB 11(10), 2018, doi:10.14778/3231751.3231769.

* :func:`opt_p_identity` (OPT₀, Def. 14): re-exported from :mod:`dpmagic.batch.pidentity` (projected
  L-BFGS on B ≥ 0, Woodbury objective, O(p²n) per evaluation for range workloads).
* :func:`opt_kron` (OPT⊗, Defs. 17–18): a single Kronecker-product strategy; for a union of products the
  error Σ_j c_j² Π_i tr(G_ij (A_iᵀA_i)⁻¹) is minimised by cyclic block updates, each an OPT₀ on the surrogate
  Gram Σ_j c_j² (Π_{k≠i} tr(G_kj (A_kᵀA_k)⁻¹)) G_ij.
* :func:`opt_union` (OPT₊, Def. 19): one OPT⊗ strategy per sub-workload, stacked with budget shares that
  minimise Σ_j e_j / c_j² subject to Σ c_j = 1 (Laplace: c_j ∝ e_j^{1/3}) or Σ c_j² = 1 (Gaussian:
  c_j² ∝ e_j^{1/2}) — Lagrange multipliers, closed form.
* :func:`opt_marginals` (OPT_M, Def. 22): weights θ on the 2^d marginals; see :mod:`dpmagic.batch.marginal`.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize

from dpmagic.batch.pidentity import default_p, opt_p_identity
from dpmagic.batch.strategies import (
    ExplicitStrategy,
    KronStrategy,
    MarginalStrategy,
    PIdentity,
    UnionStrategy,
    _subset_tables,
    marginal_workload_spectrum,
)
from dpmagic.batch.workloads import Dense, Kron, Stack, Workload, as_union
from dpmagic.noise.families import NoiseFamily, laplace

__all__ = ["opt_p_identity", "opt_kron", "opt_union", "opt_marginals", "default_p"]


def _factor_traces(kron_terms: list[tuple[float, Kron]], factors: list) -> np.ndarray:
    """T[j, i] = tr(G_ij (A_iᵀA_i)⁺)."""
    return np.array([[a.trace(f) for f, a in zip(t.factors, factors, strict=True)] for _, t in kron_terms])


def _is_trivial(blocks: list[Dense]) -> bool:
    return all(b.kind in ("identity", "total") for b in blocks)


def opt_kron(
    workload: Workload,
    *,
    noise: NoiseFamily | None = None,
    restarts: int = 2,
    seed: int = 0,
    cycles: int = 5,
    maxiter: int = 500,
    ps: list[int] | None = None,
) -> KronStrategy:
    """OPT⊗: a single Kronecker product of p-Identity factors (HDMM Defs. 17–18).

    Factor i uses p = 1 when every sub-workload's i-th block is Identity or Total (HDMM §9 convention), else
    nᵢ/16.  For one product a single pass is exact (the error factorises, Thm 4); for a union the block
    updates are repeated ``cycles`` times (each update cannot increase the error, it re-optimises one factor
    on the exact surrogate Gram with the others fixed).
    """
    noise = noise or laplace(1.0)
    u = as_union(workload)
    terms = list(u.terms)
    d = len(u.domain)
    norm = noise.p
    if ps is None:
        ps = [1 if _is_trivial([t.factors[i] for _, t in terms]) else max(1, u.domain[i] // 16) for i in range(d)]
    factors: list = [ExplicitStrategy(np.eye(ni), f"Identity({ni})") for ni in u.domain]
    rounds = 1 if len(terms) == 1 else max(1, cycles)
    prev = np.inf
    for c in range(rounds):
        for i in range(d):
            tr = _factor_traces(terms, factors)
            surrogate = np.zeros((u.domain[i], u.domain[i]))
            for j, (cj, t) in enumerate(terms):
                others = float(np.prod(np.delete(tr[j], i)))
                surrogate += cj * cj * others * t.factors[i].gram()
            init = factors[i].B if isinstance(factors[i], PIdentity) and factors[i].norm == norm else None
            factors[i] = opt_p_identity(
                surrogate,
                ps[i],
                norm=norm,
                restarts=restarts if c == 0 else 1,
                seed=seed + 7919 * i + c,
                maxiter=maxiter,
                init=init,
            )
        err = float(
            np.sum([cj * cj * np.prod(r) for (cj, _), r in zip(terms, _factor_traces(terms, factors), strict=True)])
        )
        if err >= prev * (1 - 1e-6):
            break
        prev = err
    return KronStrategy(tuple(factors), name="OPT⊗")


def opt_union(
    workload: Workload,
    *,
    noise: NoiseFamily | None = None,
    restarts: int = 2,
    seed: int = 0,
    maxiter: int = 500,
) -> UnionStrategy:
    """OPT₊: one OPT⊗ strategy per sub-workload, stacked with Lagrange-optimal weights (HDMM Def. 19).

    Each sub-strategy A_j answers only its sub-workload W_j by local least squares; with e_j = Δ_p(A_j)²·
    tr(G_j (A_jᵀA_j)⁺) and weight c_j the error is Σ e_j / c_j², minimised under Σ c_j Δ₁(A_j) = 1 (Laplace:
    c_j ∝ e_j^{1/3}, total (Σ e_j^{1/3})³) or Σ c_j² Δ₂(A_j)² = 1 (Gaussian: total (Σ √e_j)²).  The global
    least-squares estimate used by :func:`dpmagic.batch.reconstruct.reconstruct` is never worse (Gauss–Markov).
    """
    noise = noise or laplace(1.0)
    u = as_union(workload)
    subs = []
    e_unit = []
    for j, (cj, t) in enumerate(u.terms):
        sub_w = Stack(((cj, t),))
        a = opt_kron(sub_w, noise=noise, restarts=restarts, seed=seed + 104729 * j, maxiter=maxiter)
        subs.append(a)
        e_unit.append(a.sensitivity(noise.p) ** 2 * a.trace(sub_w))  # error of A_j / Δ_p(A_j) on W_j
    e = np.array(e_unit)
    sens = np.array([a.sensitivity(noise.p) for a in subs])
    if noise.p == 1:
        c = np.cbrt(e) / np.cbrt(e).sum()
    else:
        c = np.sqrt(np.sqrt(e) / np.sqrt(e).sum())
    weights = c / sens
    return UnionStrategy(
        tuple((float(wj), a) for wj, a in zip(weights, subs, strict=True)),
        name="OPT₊",
        assignment=tuple(range(len(subs))),
    )


def _marginal_objective(theta: np.ndarray, t: np.ndarray, sub: np.ndarray, outer: np.ndarray, p: int):
    """f(θ) = Δ_p(θ)²·Σ_b t_b/κ_b with κ = sub·(θ²∘outer) (HDMM Thm 11) and its gradient."""
    th2 = theta * theta
    kap = sub @ (th2 * outer)
    need = t > 0
    if np.any(kap[need] <= 0):
        return 1e300, np.zeros_like(theta)
    q = np.where(need, t / np.where(kap > 0, kap, 1.0), 0.0)
    tr = float(q.sum())
    dq_dkap = np.where(need, -t / np.where(kap > 0, kap, 1.0) ** 2, 0.0)
    dtr = (sub.T @ dq_dkap) * outer * 2.0 * theta
    if p == 1:
        s = float(theta.sum())
        return s * s * tr, 2.0 * s * tr + s * s * dtr
    s2 = float(th2.sum())
    return s2 * tr, 2.0 * theta * tr + s2 * dtr


def opt_marginals(
    workload: Workload,
    *,
    noise: NoiseFamily | None = None,
    restarts: int = 3,
    seed: int = 0,
    maxiter: int = 2000,
) -> MarginalStrategy:
    """OPT_M: non-negative weights θ on the 2^d marginals minimising Δ_p(θ)²·tr(WᵀW X(θ)⁺) (HDMM Def. 22).

    The workload may be any union of products: only tr(P_b WᵀW) enters (HDMM Thm 10).  L-BFGS-B with analytic
    gradient; starts: θ = 1 on every marginal, Identity alone (θ = 1 on the full table), then random starts in
    which the full table keeps a positive weight — all supporting.  O(4^d) per evaluation.
    """
    noise = noise or laplace(1.0)
    dom, t, _ = marginal_workload_spectrum(workload)
    sub, outer = _subset_tables(dom)
    k = len(t)
    scale = float(t.sum()) or 1.0
    tn = t / scale
    rng = np.random.default_rng(seed)
    best: tuple[float, np.ndarray] | None = None
    for r in range(max(1, restarts)):
        if r == 0:
            x0 = np.ones(k)  # every marginal: supports any workload
        elif r == 1:
            x0 = np.zeros(k)  # the full table alone (Identity): a KKT point that is sometimes optimal
        else:
            x0 = rng.random(k)
        x0[k - 1] = 1.0
        res = minimize(
            lambda x: _marginal_objective(x, tn, sub, outer, noise.p),
            x0,
            jac=True,
            method="L-BFGS-B",
            bounds=[(0.0, None)] * k,
            options={"maxiter": maxiter, "ftol": 1e-12, "gtol": 1e-12},
        )
        f, _ = _marginal_objective(res.x, tn, sub, outer, noise.p)
        if best is None or f < best[0]:
            best = (f, res.x.copy())
    assert best is not None
    theta = best[1]
    theta = theta / (theta.sum() if noise.p == 1 else np.sqrt((theta**2).sum()))
    theta[theta < 1e-12] = 0.0
    return MarginalStrategy(dom, theta, name="OPT_M")
