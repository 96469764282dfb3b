"""Implicit one-column batches (issue 32): workloads of any size the p-Identity strategy supports, never materialised.

McKenna, Miklau, Hay, Machanavajjhala, "Optimizing error of high-dimensional statistical queries under
differential privacy", PVLDB 11(10), 2018, doi:10.14778/3231751.3231769 (HDMM), §4.3 (p-Identity, OPT₀) and §10
(reconstruction): everything about a workload W that the matrix mechanism needs is its Gram matrix G = WᵀW, and for
ranges G is semiseparable — all ranges G_ij = (min(i,j)+1)(n − max(i,j)), prefix n − max(i,j) (0-based) — so
v ↦ v G costs O(n) by cumulative sums (:meth:`dpmagic.batch.workloads.Dense.gram_rmul`).  For the p-Identity
strategy A = [I; B]·D (B ≥ 0, p × n, S = D⁻¹, C = I_p + BBᵀ = L Lᵀ) Woodbury gives
(AᵀA)⁻¹ = S (I − Bᵀ C⁻¹ B) S, hence, with Z = L⁻¹ B S (p × n):

* the error factor tr(G (AᵀA)⁻¹) = Σ_k G_kk s_k² − ⟨C⁻¹B, (BS) G S⟩ in O(p²n) (:func:`pid_trace`);
* the variance factor of any linear query q: qᵀ(AᵀA)⁻¹q = ‖S q‖² − ‖Z q‖², and of a range [a, b] the same from
  cumulative sums of s² and of Z's columns in O(p) (:class:`PIdentityCovariance`);
* the estimate x̂ = (AᵀA)⁻¹Aᵀy = S M⁻¹ (y₁ + Bᵀy₂) in O(pn) (:meth:`PIdentity.reconstruct`), and any range of x̂
  as a difference of two prefix sums, O(1) after one O(n) cumulative sum.

Nothing here reads data; the release path is :mod:`dpmagic.batch.release`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.linalg as sla

from dpmagic.batch.strategies import ExplicitStrategy, KronStrategy, MarginalStrategy, PIdentity, kron_matvec
from dpmagic.batch.workloads import Dense, Workload, as_union
from dpmagic.errors import ConfigurationError

__all__ = [
    "one_column_block",
    "gram_diag",
    "pid_trace",
    "PIdentityCovariance",
    "quadratic_form",
    "full_rank",
    "supports_vector",
    "range_sums",
]

Rmul = Callable[[np.ndarray], np.ndarray]


def _identity_rmul(v: np.ndarray) -> np.ndarray:
    return np.array(v, dtype=float)


def _total_rmul(v: np.ndarray) -> np.ndarray:
    return np.broadcast_to(v.sum(axis=-1, keepdims=True), v.shape).copy()


def _block_rmul(f: Dense) -> Rmul | None:
    if f.fast_rmul:
        return f.gram_rmul
    if f.kind == "identity":
        return _identity_rmul
    if f.kind == "total":
        return _total_rmul
    return None


def one_column_block(workload: Workload) -> Dense | None:
    """The workload as one block with an O(n) Gram product, when it is a (weighted) union of one-column terms that
    each have one (prefix, all ranges, width-k, permuted ranges, identity, total); else None.

    Its Gram is Σ_j c_j² G_j (a union's Gram is the sum of its parts'), never formed except on request."""
    u = as_union(workload)
    if len(u.domain) != 1:
        return None
    parts: list[tuple[float, Rmul, Dense]] = []
    for c, t in u.terms:
        f = t.factors[0]
        rm = _block_rmul(f)
        if rm is None:
            return None
        parts.append((c * c, rm, f))
    if len(parts) == 1 and parts[0][0] == 1.0 and parts[0][2].fast_rmul:
        return parts[0][2]
    n = u.n

    def rmul(v: np.ndarray) -> np.ndarray:
        v = np.asarray(v, dtype=float)
        out = parts[0][0] * parts[0][1](v)
        for c2, rm, _ in parts[1:]:
            out = out + c2 * rm(v)
        return out

    def gram() -> np.ndarray:
        return rmul(np.eye(n))

    name = " + ".join(f.name for _, _, f in parts)
    return Dense(n, u.num_queries, name, "union", gram, None, rmul)


def gram_diag(block: Dense, chunk: int = 256) -> np.ndarray:
    """diag(WᵀW) (read-only; kept on the block): from the dense Gram, or for a block with a fast product by applying
    it to rows of the identity ``chunk`` at a time (O(n²) time, O(chunk·n) memory; the n × n Gram is never held)."""
    cached = getattr(block, "_diag_cache", None)
    if cached is not None:
        return cached
    rm = _block_rmul(block) if block.gram_fn is None or block.fast_rmul else None
    if rm is None:
        out = np.diag(block.gram()).astype(float)
    else:
        n = block.n
        out = np.empty(n)
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            e = np.zeros((hi - lo, n))
            e[np.arange(hi - lo), np.arange(lo, hi)] = 1.0
            out[lo:hi] = rm(e)[np.arange(hi - lo), np.arange(lo, hi)]
    out.setflags(write=False)
    block._diag_cache = out  # type: ignore[attr-defined]  # the block is immutable: computed once
    return out


def pid_trace(block: Dense, a: PIdentity, dg: np.ndarray | None = None) -> float:
    """tr(G (AᵀA)⁻¹) = Σ_k G_kk s_k² − ⟨C⁻¹B, (BS) G S⟩ for the p-Identity A (module docstring) in O(p²n) given
    the O(n) product v ↦ v G of ``block``; ``dg`` = diag(G) if known."""
    rm = _block_rmul(block)
    if rm is None:
        raise ConfigurationError(f"{block.name}: no fast Gram product")
    if block.n != a.n:
        raise ConfigurationError(f"workload over {block.n} cells does not match a strategy over {a.n} cells")
    dg = gram_diag(block) if dg is None else dg
    s = a.s
    b = a.B
    if b.shape[0] == 0:
        return float(dg @ (s * s))
    y = rm(b * s[None, :]) * s[None, :]
    r = sla.cho_solve(a._chol, b)
    return float(dg @ (s * s) - np.sum(r * y))


class PIdentityCovariance:
    """qᵀ(AᵀA)⁻¹q for the p-Identity A: ‖S q‖² − ‖Z q‖² with Z = L⁻¹ B S (module docstring).

    Ranges of one column in O(p) each after O(p n) set-up (cumulative sums of s² and of Z along the domain)."""

    def __init__(self, a: PIdentity) -> None:
        s = a.s
        self.s = s
        n, p = a.n, a.B.shape[0]
        if p:
            c = np.eye(p) + a.B @ a.B.T
            low = np.linalg.cholesky(c)
            self.z = sla.solve_triangular(low, a.B * s[None, :], lower=True)
        else:
            self.z = np.zeros((0, n))
        self._cs2 = np.concatenate([[0.0], np.cumsum(s * s)])
        self._cz = np.concatenate([np.zeros((p, 1)), np.cumsum(self.z, axis=1)], axis=1)

    def ranges(self, starts: np.ndarray, ends: np.ndarray, chunk: int = 65_536) -> np.ndarray:
        """qᵀ(AᵀA)⁻¹q for the indicator of every [starts[i], ends[i]] (0-based, inclusive), ≥ 0."""
        starts = np.asarray(starts, dtype=np.int64)
        ends = np.asarray(ends, dtype=np.int64)
        out = np.empty(starts.shape[0])
        for lo in range(0, starts.shape[0], chunk):
            s0, e1 = starts[lo : lo + chunk], ends[lo : lo + chunk] + 1
            d = self._cz[:, e1] - self._cz[:, s0]
            out[lo : lo + chunk] = (self._cs2[e1] - self._cs2[s0]) - np.einsum("ij,ij->j", d, d)
        return np.maximum(out, 0.0)

    def vectors(self, q: np.ndarray) -> np.ndarray:
        """qᵀ(AᵀA)⁻¹q for every row of q (k × n), ≥ 0."""
        q = np.atleast_2d(np.asarray(q, dtype=float))
        sq = q * self.s[None, :]
        zq = q @ self.z.T
        return np.maximum((sq * sq).sum(axis=1) - (zq * zq).sum(axis=1), 0.0)


def full_rank(strategy: object) -> bool:
    """A has full column rank, so every linear query of the cells has an unbiased least-squares estimate."""
    if isinstance(strategy, PIdentity):
        return True
    if isinstance(strategy, ExplicitStrategy):
        lam, _ = strategy._eig
        return bool(lam.min() > 1e-10 * max(lam.max(), 1e-300))
    if isinstance(strategy, KronStrategy):
        return all(full_rank(f) for f in strategy.factors)
    if isinstance(strategy, MarginalStrategy):
        return bool(np.all(strategy.kappa > 0))
    return False


def supports_vector(strategy: object, q: np.ndarray, rtol: float = 1e-9) -> bool:
    """q lies in A's row space (X⁺X q = q, X = AᵀA), so qᵀx̂ is unbiased: PIdentity always; explicit and Kronecker
    strategies by their row projectors; marginal strategies when q has no part in an eigenspace P_b with κ_b = 0."""
    q = np.asarray(q, dtype=float).reshape(-1)
    scale = rtol * max(float(np.linalg.norm(q)), 1e-300)
    if isinstance(strategy, PIdentity):
        return True
    if isinstance(strategy, ExplicitStrategy):
        return float(np.linalg.norm(strategy._row_projector @ q - q)) <= scale
    if isinstance(strategy, KronStrategy):
        mats = [
            np.eye(f.n) if isinstance(f, PIdentity) else f._row_projector
            for f in strategy.factors
            if isinstance(f, (PIdentity, ExplicitStrategy))
        ]
        if len(mats) != len(strategy.factors):
            return False
        return float(np.linalg.norm(kron_matvec(mats, q) - q)) <= scale
    if isinstance(strategy, MarginalStrategy):
        kap = strategy.kappa
        return all(float(np.linalg.norm(strategy._project(q, b))) <= scale for b in range(len(kap)) if kap[b] <= 0)
    return False


def _gram_pinv_apply(strategy: object, q: np.ndarray) -> np.ndarray:
    """(AᵀA)⁺ q for one vector q."""
    if isinstance(strategy, PIdentity):
        return strategy.s * strategy._minv(strategy.s * q)
    if isinstance(strategy, ExplicitStrategy):
        return strategy.gram_pinv @ q
    if isinstance(strategy, KronStrategy):
        mats = [f.gram_pinv if isinstance(f, ExplicitStrategy) else f.gram_pinv() for f in strategy.factors]
        return kron_matvec(mats, q)
    if isinstance(strategy, MarginalStrategy):
        kap = strategy.kappa
        out = np.zeros_like(q)
        for b in range(len(kap)):
            if kap[b] > 0:
                out += strategy._project(q, b) / kap[b]
        return out
    raise ConfigurationError(f"no per-query variance for the strategy {strategy!r}")


def quadratic_form(strategy: object, q: np.ndarray) -> float:
    """qᵀ(AᵀA)⁺q (the variance of qᵀx̂ over the variance of one strategy answer), ≥ 0."""
    q = np.asarray(q, dtype=float).reshape(-1)
    if isinstance(strategy, PIdentity):
        return float(PIdentityCovariance(strategy).vectors(q[None, :])[0])
    return max(float(q @ _gram_pinv_apply(strategy, q)), 0.0)


def range_sums(x: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Σ_{starts[i] ≤ k ≤ ends[i]} x_k for every i: prefix-sum differences (O(n) once, O(1) each)."""
    c = np.concatenate([[0.0], np.cumsum(np.asarray(x, dtype=float))])
    return c[np.asarray(ends, dtype=np.int64) + 1] - c[np.asarray(starts, dtype=np.int64)]
