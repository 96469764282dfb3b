"""MEASURE and RECONSTRUCT: noisy strategy answers, least squares, consistent workload answers, variances.

x̂ = A⁺ y is the least-squares estimate of the data vector from y = A x + z; the workload answers W x̂ are
consistent by construction (they are exact answers on one vector x̂) and unbiased when A supports W (HDMM
§10, McKenna et al., PVLDB 11(10) 2018, doi:10.14778/3231751.3231769).  The covariance of W x̂ is
v·Δ_p(A)²·W (AᵀA)⁺ Wᵀ for noise of variance v·Δ_p(A)² per answer, so each query's variance is
v·Δ_p(A)²·w_q (AᵀA)⁺ w_qᵀ; for Kronecker workloads and strategies it factorises over the attributes.

NoiseFamily never comes from here in a release: :func:`measure_and_reconstruct` takes the sampler as a callable so
that the session passes OpenDP's exact Laplace/Gaussian samplers (scale = :meth:`Noise.scale`); the numpy
sampler in :func:`numpy_sampler` exists for simulations and tests only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dpmagic.batch.strategies import ExplicitStrategy, KronStrategy, PIdentity, kron_matvec
from dpmagic.batch.workloads import Dense, Kron, Stack, Workload, as_union
from dpmagic.errors import ConfigurationError
from dpmagic.noise.families import NoiseFamily

__all__ = [
    "workload_answers",
    "reconstruct",
    "measure_and_reconstruct",
    "answer_variances",
    "BatchRelease",
    "numpy_sampler",
]


def workload_answers(workload: Workload, x: np.ndarray) -> np.ndarray:
    """W x (implicitly for products and unions)."""
    x = np.asarray(x, dtype=float).reshape(-1)
    u = as_union(workload)
    if u.n != x.shape[0]:
        raise ConfigurationError(f"data vector has {x.shape[0]} cells, the workload expects {u.n}")
    return np.concatenate([c * kron_matvec([f.matrix() for f in t.factors], x) for c, t in u.terms])


def reconstruct(strategy, y: np.ndarray) -> np.ndarray:
    """x̂ = A⁺ y (least squares; factor-wise for Kronecker strategies, eigen-algebra for marginals)."""
    y = np.asarray(y, dtype=float).reshape(-1)
    if y.shape[0] != strategy.num_queries:
        raise ConfigurationError(f"{y.shape[0]} noisy answers for a strategy of {strategy.num_queries} queries")
    return strategy.reconstruct(y)


@dataclass(frozen=True)
class BatchRelease:
    """Noisy strategy answers y, the estimate x̂ and the consistent workload answers W x̂."""

    y: np.ndarray
    x_hat: np.ndarray
    answers: np.ndarray
    noise_scale: float


def measure_and_reconstruct(
    workload: Workload,
    strategy,
    x_exact: np.ndarray,
    noise: NoiseFamily,
    noise_sampler: Callable[[np.ndarray, float], np.ndarray],
) -> BatchRelease:
    """y = noise_sampler(A x, scale) with scale = noise.scale(Δ_p(A)); returns x̂ = A⁺y and W x̂.

    ``noise_sampler(values, scale)`` must return ``values`` plus i.i.d. noise of the model's distribution
    (Laplace scale b, or Gaussian standard deviation σ) — in a release, OpenDP's samplers.
    """
    x = np.asarray(x_exact, dtype=float).reshape(-1)
    if x.shape[0] != strategy.n:
        raise ConfigurationError(f"data vector has {x.shape[0]} cells, the strategy expects {strategy.n}")
    scale = noise.scale(strategy.sensitivity(noise.p))
    exact = strategy.measure(x)
    y = np.asarray(noise_sampler(exact, scale), dtype=float).reshape(-1)
    if y.shape != exact.shape:
        raise ConfigurationError("the noise sampler must return one value per strategy answer")
    x_hat = reconstruct(strategy, y)
    return BatchRelease(y, x_hat, workload_answers(workload, x_hat), scale)


def numpy_sampler(kind: str, seed: int | None = None) -> Callable[[np.ndarray, float], np.ndarray]:
    """A numpy noise sampler for simulations and tests (never for a release: it is not an exact sampler)."""
    rng = np.random.default_rng(seed)
    if kind == "laplace":
        return lambda v, b: v + rng.laplace(0.0, b, size=np.shape(v))
    if kind == "gaussian":
        return lambda v, s: v + rng.normal(0.0, s, size=np.shape(v))
    raise ConfigurationError(f"unknown noise kind {kind!r}")


def _gram_pinv_1d(a) -> np.ndarray:
    if isinstance(a, ExplicitStrategy):
        return a.gram_pinv
    if isinstance(a, PIdentity):
        return a.gram_pinv()
    raise ConfigurationError(f"no explicit (AᵀA)⁺ for {a!r}")


def _row_quadratic(w: Dense, xp: np.ndarray) -> np.ndarray:
    """diag(W X⁺ Wᵀ) for an explicit block (O(m n²))."""
    mat = w.matrix()
    return np.einsum("ij,jk,ik->i", mat, xp, mat)


def answer_variances(workload: Workload, strategy, noise: NoiseFamily) -> np.ndarray:
    """Var((W x̂)_q) = v·Δ_p(A)²·w_q (AᵀA)⁺ w_qᵀ for every workload query (same order as W x).

    Kronecker strategies: the quadratic form factorises, Var = v·Δ²·Π_i (w_qi (A_iᵀA_i)⁺ w_qiᵀ).  Other
    strategies need an explicit (AᵀA)⁺ (small domains).  A 95% normal interval is answer ± 1.96·√Var (the
    estimate is a linear combination of many independent noises; for few Laplace terms it is approximate).
    """
    var = noise.variance(strategy.sensitivity(noise.p))
    u = as_union(workload)
    out = []
    if isinstance(strategy, KronStrategy):
        if strategy.domain != u.domain:
            raise ConfigurationError("workload and strategy domains differ")
        pinvs = [_gram_pinv_1d(a) for a in strategy.factors]
        for c, t in u.terms:
            q = np.ones(1)
            for f, xp in zip(t.factors, pinvs, strict=True):
                q = np.multiply.outer(q, _row_quadratic(f, xp)).reshape(-1)
            out.append(c * c * q)
    else:
        if isinstance(strategy, (ExplicitStrategy, PIdentity)):
            xp = _gram_pinv_1d(strategy)
        elif hasattr(strategy, "explicit"):
            xp = strategy.explicit().gram_pinv
        elif hasattr(strategy, "kappa") and (closed := _marginal_row_quadratics(strategy, u)) is not None:
            return var * np.concatenate(closed)
        elif hasattr(strategy, "kappa") and u.n <= 4096:
            xp = _marginal_pinv(strategy)
        else:
            raise ConfigurationError("answer_variances: domain too large for this strategy")
        for c, t in u.terms:
            mat = Kron(t.factors).matrix() if len(t.factors) > 1 else t.factors[0].matrix()
            out.append(c * c * np.einsum("ij,jk,ik->i", mat, xp, mat))
    return var * np.concatenate(out)


def _marginal_row_quadratics(strategy, u: Stack) -> list[np.ndarray] | None:
    """w_q X⁺ w_qᵀ of every query of a marginal workload (every factor Identity or Total) under a marginal strategy,
    in closed form on the compressed domain: X⁺ = Σ_{κ_b > 0} P_b/κ_b with P_b = ⊗ᵢ(I − J/nᵢ if i ∈ b else J/nᵢ) an
    orthogonal projector (HDMM §7–8, Thms 9–11), and a query w = ⊗ᵢ wᵢ factorises: wP_bwᵀ = Πᵢ wᵢP_{b,i}wᵢᵀ with
    e_vᵀ(I − J/n)e_v = 1 − 1/n, e_vᵀ(J/n)e_v = 1/n (Identity), 1ᵀ(I − J/n)1 = 0, 1ᵀ(J/n)1 = n (Total).  Every query
    of a term has the same value; O(2^d · d) per term, whatever the attribute sizes.  None when some factor is not
    Identity/Total or a needed κ_b is 0 (not supported)."""
    kap = np.asarray(strategy.kappa, dtype=float)
    out = []
    for c, t in u.terms:
        if any(f.kind not in ("identity", "total") for f in t.factors):
            return None
        v = 0.0
        for b in range(len(kap)):
            prod = 1.0
            for i, f in enumerate(t.factors):
                inside = (b >> i) & 1
                if f.kind == "identity":
                    prod *= (1.0 - 1.0 / f.n) if inside else 1.0 / f.n
                else:
                    prod *= 0.0 if inside else float(f.n)
            if prod == 0.0:
                continue
            if kap[b] <= 0:
                return None
            v += prod / kap[b]
        out.append(np.full(t.num_queries, c * c * v))
    return out


def _marginal_pinv(strategy) -> np.ndarray:
    """X⁺ = Σ_{κ_b > 0} P_b / κ_b for a marginal strategy, dense (small domains only)."""
    eye = np.eye(strategy.n)
    kap = strategy.kappa
    out = np.zeros((strategy.n, strategy.n))
    for b in range(len(kap)):
        if kap[b] > 0:
            out += np.column_stack([strategy._project(eye[:, i], b) for i in range(strategy.n)]) / kap[b]
    return out


_ = Stack
