"""Exact expected error of the matrix mechanism and the SVD lower bound.

For a workload W (m queries over n cells) answered from a strategy A by least squares, with i.i.d. noise of
variance v·Δ_p(A)² per strategy answer (v = 2/ε² for Laplace, σ² for Gaussian), the expected total squared error
is v·Δ_p(A)²·tr(WᵀW (AᵀA)⁺) whenever A supports W (Li et al., VLDB J. 2015, doi:10.1007/s00778-015-0398-x;
HDMM Prop. 4, McKenna et al., PVLDB 11(10) 2018, doi:10.14778/3231751.3231769).  HDMM reports the root mean
squared error per query √(TSE/m).  The SVD bound (Li & Miklau, "Measuring the achievable error of query sets
under differential privacy", 2012, arXiv:1202.3399; HDMM Def. 11, Prop. 5) v·(Σᵢ √λᵢ(WᵀW))²/n is a lower
bound of v·Δ₂(A)²·tr(WᵀW (AᵀA)⁺) over all A, hence also of the Laplace error (Δ₁ ≥ Δ₂); for a Kronecker
product it factorises (HDMM Thm 5), for marginal workloads the eigenvalues are closed form (HDMM Thm 12).
"""

from __future__ import annotations

import math

import numpy as np

from dpmagic.batch.strategies import marginal_workload_spectrum
from dpmagic.batch.workloads import Dense, Kron, Stack, Workload, as_union
from dpmagic.errors import ConfigurationError
from dpmagic.noise.families import NoiseFamily

__all__ = ["expected_error", "rmse", "svd_bound", "svd_bound_rmse", "num_queries"]


def num_queries(workload: Workload) -> int:
    return int(workload.num_queries)


def expected_error(workload: Workload, strategy, noise: NoiseFamily) -> float:
    """Expected total squared error v·Δ_p(A)²·tr(WᵀW (AᵀA)⁺) (inf when A does not support W)."""
    tr = strategy.trace(workload)
    if not math.isfinite(tr):
        return math.inf
    return noise.variance(strategy.sensitivity(noise.p)) * tr


def rmse(workload: Workload, strategy, noise: NoiseFamily) -> float:
    """Root mean squared error per query √(TSE/m) (HDMM §11)."""
    return math.sqrt(expected_error(workload, strategy, noise) / num_queries(workload))


def _sum_sqrt_eig(g: np.ndarray) -> float:
    lam = np.linalg.eigvalsh(g)
    return float(np.sqrt(np.clip(lam, 0.0, None)).sum())


def svd_bound(workload: Workload, noise: NoiseFamily) -> float:
    """Lower bound of the expected total squared error of any matrix-mechanism strategy."""
    if isinstance(workload, Dense):
        return noise.unit_variance * _sum_sqrt_eig(workload.gram()) ** 2 / workload.n
    if isinstance(workload, Kron):
        return noise.unit_variance * float(np.prod([_sum_sqrt_eig(f.gram()) ** 2 / f.n for f in workload.factors]))
    u = as_union(workload)
    if len(u.terms) == 1:
        c, t = u.terms[0]
        return c * c * svd_bound(t, noise)
    if all(f.kind in ("identity", "total") for _, t in u.terms for f in t.factors):
        _, eig, dim = marginal_workload_spectrum(u)
        return noise.unit_variance * float(np.sum(np.sqrt(np.clip(eig * dim, 0.0, None)))) ** 2 / u.n
    if u.n <= 4096:
        return noise.unit_variance * _sum_sqrt_eig(u.gram()) ** 2 / u.n
    raise ConfigurationError("svd_bound: only for one product, marginal workloads or small domains")


def svd_bound_rmse(workload: Workload, noise: NoiseFamily) -> float:
    """√(SVD bound / m)."""
    return math.sqrt(svd_bound(workload, noise) / num_queries(workload))


_ = Stack  # re-exported type for annotations
