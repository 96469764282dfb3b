"""Measurement strategies A for the matrix mechanism, and their least-squares algebra.

Every strategy exposes

* ``domain`` — attribute domain sizes (the data vector is the row-major flattening of the histogram);
* ``sensitivity(p)`` — Δ_p(A), the largest column L_p norm (p = 1: Laplace; p = 2: Gaussian);
* ``trace(workload)`` — tr(WᵀW (AᵀA)⁺), the factor of the expected total squared error (HDMM Prop. 4);
* ``supports(workload)`` — whether W = W A⁺A (the least-squares estimate is unbiased);
* ``measure(x)`` = A x and ``reconstruct(y)`` = A⁺ y (least squares), ``num_queries``.

Families (McKenna et al., PVLDB 11(10) 2018, doi:10.14778/3231751.3231769, "HDMM"):

* :class:`ExplicitStrategy` — any explicit matrix (Identity, the workload itself, hierarchical trees);
* :class:`PIdentity` — HDMM Def. 13: A = [I; B]·D, B ≥ 0 (p × n), D = diag(1/(1 + 1ᵀB)) (Laplace; for
  Gaussian D = diag(1/√(1 + 1ᵀ(B∘B))) so that every column has unit L2 norm).  AᵀA = D(I + BᵀB)D, so
  (AᵀA)⁻¹ = S M⁻¹ S with S = D⁻¹, M = I + BᵀB, and M⁻¹ = I − Bᵀ(I_p + BBᵀ)⁻¹B by Woodbury: every trace,
  solve and gradient costs O(n²p + np²) instead of O(n³);
* :class:`KronStrategy` — A₁ ⊗ … ⊗ A_d: Δ_p and the trace factor over the factors (HDMM Thm 3, Thm 4),
  A⁺ = ⊗ A_i⁺ (Prop. 6);
* :class:`UnionStrategy` — a weighted stack of Kronecker strategies (OPT₊, HDMM Def. 19);
* :class:`MarginalStrategy` — weighted marginals (OPT_M, HDMM §7–8) with the closed-form eigen-algebra.

Size: one module (≈ 670 lines) because every strategy implements the same small algebra (sensitivity,
trace, supports, measure, reconstruct) and the Kronecker and union strategies are built from the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.linalg as sla

from dpmagic.batch.workloads import Dense, Stack, WeightedTerms, Workload, as_union
from dpmagic.errors import ConfigurationError

__all__ = [
    "ExplicitStrategy",
    "PIdentity",
    "KronStrategy",
    "UnionStrategy",
    "MarginalStrategy",
    "identity_strategy",
    "workload_strategy",
    "hierarchical",
    "hb_branching",
    "hb_strategy",
    "kron_matvec",
]

_RANK_TOL = 1e-10


def kron_matvec(mats: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    """(M₁ ⊗ … ⊗ M_d) x without forming the product (HDMM Thm 14; O(Σ rᵢ · Πnⱼ) for square factors)."""
    shape = [m.shape[1] for m in mats]
    t = np.asarray(x, dtype=float).reshape(shape)
    for axis, m in enumerate(mats):
        t = np.moveaxis(np.tensordot(m, t, axes=([1], [axis])), 0, axis)
    return t.reshape(-1)


def _gram_of(w: Workload, n: int) -> np.ndarray:
    if isinstance(w, Dense):
        g = w.gram()
    else:
        g = w.gram()
    if g.shape != (n, n):
        raise ConfigurationError(f"workload over {g.shape[0]} cells does not match a strategy over {n} cells")
    return g


# ------------------------------------------------------------------------------------------------------
# explicit strategies
# ------------------------------------------------------------------------------------------------------


@dataclass(eq=False)
class ExplicitStrategy:
    """An explicit strategy matrix A (r × n); pseudo-inverses by eigendecomposition of AᵀA (O(n³) once)."""

    matrix: np.ndarray
    name: str = "Explicit"
    domain: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        a = np.array(self.matrix, dtype=float, ndmin=2)
        if a.ndim != 2 or a.size == 0 or not np.all(np.isfinite(a)):
            raise ConfigurationError(f"{self.name}: a strategy must be a finite non-empty 2-D array")
        a.setflags(write=False)
        self.matrix = a
        if not self.domain:
            self.domain = (a.shape[1],)
        if int(np.prod(self.domain)) != a.shape[1]:
            raise ConfigurationError(f"{self.name}: domain {self.domain} does not match {a.shape[1]} columns")

    @property
    def n(self) -> int:
        return self.matrix.shape[1]

    @property
    def num_queries(self) -> int:
        return self.matrix.shape[0]

    def sensitivity(self, p: int) -> float:
        a = np.abs(self.matrix)
        return float(a.sum(axis=0).max()) if p == 1 else float(np.sqrt((a * a).sum(axis=0).max()))

    def column_norms(self, p: int) -> np.ndarray:
        a = np.abs(self.matrix)
        return a.sum(axis=0) if p == 1 else np.sqrt((a * a).sum(axis=0))

    @cached_property
    def _eig(self) -> tuple[np.ndarray, np.ndarray]:
        x = self.matrix.T @ self.matrix
        lam, v = np.linalg.eigh(x)
        return lam, v

    @cached_property
    def gram_pinv(self) -> np.ndarray:
        """(AᵀA)⁺ (eigenvalues below 1e-10 · max treated as zero)."""
        lam, v = self._eig
        keep = lam > _RANK_TOL * max(lam.max(), 1e-300)
        return (v[:, keep] / lam[keep]) @ v[:, keep].T

    @cached_property
    def _row_projector(self) -> np.ndarray:
        lam, v = self._eig
        keep = lam > _RANK_TOL * max(lam.max(), 1e-300)
        return v[:, keep] @ v[:, keep].T

    def trace(self, workload: Workload) -> float:
        return float(np.sum(_gram_of(workload, self.n) * self.gram_pinv))

    def supports(self, workload: Workload) -> bool:
        g = _gram_of(workload, self.n)
        p = self._row_projector
        resid = g - p @ g @ p
        return bool(np.abs(resid).max() <= 1e-7 * max(1.0, np.abs(g).max()))

    def measure(self, x: np.ndarray) -> np.ndarray:
        return self.matrix @ np.asarray(x, dtype=float).reshape(-1)

    def reconstruct(self, y: np.ndarray) -> np.ndarray:
        return self.gram_pinv @ (self.matrix.T @ np.asarray(y, dtype=float))

    def pinv(self) -> np.ndarray:
        return self.gram_pinv @ self.matrix.T

    def __repr__(self) -> str:
        return self.name


def identity_strategy(n: int) -> ExplicitStrategy:
    """A = I (answer every cell): the Laplace/Gaussian mechanism on the histogram."""
    return ExplicitStrategy(np.eye(n), f"Identity({n})")


def workload_strategy(w: Dense) -> ExplicitStrategy:
    """A = W (the plain Laplace/Gaussian mechanism on the workload's own queries)."""
    return ExplicitStrategy(w.matrix(), f"Workload[{w.name}]")


def hierarchical(n: int, b: int, include_root: bool = True) -> ExplicitStrategy:
    """Hierarchical ranges with branching b: level ℓ holds the blocks [k·bˡ, (k+1)·bˡ − 1] ∩ [0, n).

    Leaves (ℓ = 0) are the identity; the top level is a single block (the total) when ``include_root``.
    Every level partitions the domain, so Δ₁ = number of levels with uniform weights (Hay et al., VLDB 2010,
    doi:10.14778/1920841.1920970; Qardaji, Yang, Li, PVLDB 6(14) 2013, doi:10.14778/2556549.2556576).
    """
    if b < 2 or n < 1:
        raise ConfigurationError(f"hierarchical: need n ≥ 1 and branching b ≥ 2, got n={n}, b={b}")
    rows = []
    size = 1
    while True:
        starts = np.arange(0, n, size)
        if len(starts) == 1 and not include_root:
            break
        cols = np.arange(n)
        rows.append(((cols[None, :] >= starts[:, None]) & (cols[None, :] < starts[:, None] + size)).astype(float))
        if len(starts) == 1:
            break
        size *= b
    return ExplicitStrategy(np.vstack(rows), f"Hierarchical({n},b={b})")


def hb_branching(n: int) -> int:
    """HB's branching factor (Qardaji et al. 2013, §4): minimise the average range-query variance proxy
    (b − 1)·h³ with h = ⌈log_b n⌉ over b ≥ 2; returns n (a flat histogram, i.e. Identity) when the flat
    proxy n/… is not beaten, i.e. when h = 1 is optimal."""
    best_b, best_v = n, float(n - 1)  # h = 1: (n − 1)·1
    for b in range(2, max(n, 2)):
        h, size = 0, 1
        while size < n:
            size *= b
            h += 1
        v = (b - 1) * h**3
        if v < best_v:
            best_b, best_v = b, v
    return best_b


def hb_strategy(n: int) -> ExplicitStrategy:
    """HB: the hierarchical strategy with the branching of :func:`hb_branching` (Identity if flat)."""
    b = hb_branching(n)
    if b >= n:
        return ExplicitStrategy(np.eye(n), f"HB({n},flat)")
    s = hierarchical(n, b, include_root=False)
    s.name = f"HB({n},b={b})"
    return s


# ------------------------------------------------------------------------------------------------------
# p-Identity (HDMM Def. 13)
# ------------------------------------------------------------------------------------------------------


@dataclass(eq=False)
class PIdentity:
    """A = [I; B]·D with B ≥ 0 (p × n): Δ₁(A) = 1 (``norm=1``) or Δ₂(A) = 1 (``norm=2``)."""

    B: np.ndarray
    norm: int = 1
    name: str = "p-Identity"

    def __post_init__(self) -> None:
        b = np.array(self.B, dtype=float, ndmin=2)
        if np.any(b < 0) or not np.all(np.isfinite(b)):
            raise ConfigurationError("p-Identity: B must be finite and non-negative")
        self.B = b
        if self.norm not in (1, 2):
            raise ConfigurationError("p-Identity: norm must be 1 or 2")

    @property
    def n(self) -> int:
        return self.B.shape[1]

    @property
    def domain(self) -> tuple[int, ...]:
        return (self.n,)

    @property
    def num_queries(self) -> int:
        return self.n + self.B.shape[0]

    @cached_property
    def s(self) -> np.ndarray:
        """S = D⁻¹ (column scale before normalisation)."""
        if self.norm == 1:
            return 1.0 + self.B.sum(axis=0)
        return np.sqrt(1.0 + (self.B * self.B).sum(axis=0))

    @cached_property
    def matrix(self) -> np.ndarray:
        return np.vstack([np.eye(self.n), self.B]) / self.s[None, :]

    def column_norms(self, p: int) -> np.ndarray:
        a = np.abs(self.matrix)
        return a.sum(axis=0) if p == 1 else np.sqrt((a * a).sum(axis=0))

    def sensitivity(self, p: int) -> float:
        if p == self.norm:
            return 1.0  # by construction; the dense check is in the tests
        return float(self.column_norms(p).max())

    @cached_property
    def _chol(self) -> tuple[np.ndarray, bool]:
        b = self.B
        return sla.cho_factor(np.eye(b.shape[0]) + b @ b.T)

    def _minv(self, v: np.ndarray) -> np.ndarray:
        """M⁻¹ v with M = I + BᵀB (Woodbury: v − Bᵀ (I + BBᵀ)⁻¹ B v); v may be n × k (B with p = 0 rows: v)."""
        if self.B.shape[0] == 0:
            return np.array(v, dtype=float)
        return v - self.B.T @ sla.cho_solve(self._chol, self.B @ v)

    def trace(self, workload: Workload) -> float:
        """tr(G (AᵀA)⁻¹): in O(p²n) without the n × n Gram when the workload is a union of one-column terms with a
        fast Gram product (:func:`dpmagic.batch.implicit.pid_trace`), else by the dense Woodbury formula."""
        from dpmagic.batch.implicit import one_column_block, pid_trace

        block = one_column_block(workload) if not isinstance(workload, np.ndarray) else None
        if block is not None:
            return pid_trace(block, self)
        g = _gram_of(workload, self.n)
        if self.B.shape[0] == 0:
            return float(np.diag(g) @ (self.s * self.s))
        return float(_pid_objective(g, self.B, self.norm, grad=False)[0])

    def supports(self, workload: Workload) -> bool:
        return True  # A has full column rank (it contains a scaled identity)

    def measure(self, x: np.ndarray) -> np.ndarray:
        """A x = [x / s; B (x / s)] in O(pn) (the (n + p) × n matrix is not formed)."""
        u = np.asarray(x, dtype=float).reshape(-1) / self.s
        return np.concatenate([u, self.B @ u])

    def reconstruct(self, y: np.ndarray) -> np.ndarray:
        """x̂ = (AᵀA)⁻¹Aᵀy = S M⁻¹ (y₁ + Bᵀy₂) (because S·D = I); O(np).  y may be (n + p) × k (k estimates)."""
        y = np.asarray(y, dtype=float)
        n = self.n
        v = y[:n] + self.B.T @ y[n:]
        s = self.s if v.ndim == 1 else self.s[:, None]
        return s * self._minv(v)

    def gram_pinv(self) -> np.ndarray:
        """(AᵀA)⁻¹ = S M⁻¹ S (dense n × n)."""
        return self.s[:, None] * self._minv(np.diag(self.s))

    def pinv(self) -> np.ndarray:
        return self.gram_pinv() @ self.matrix.T

    def __repr__(self) -> str:
        return f"{self.name}(n={self.n}, p={self.B.shape[0]})"


def _pid_objective(
    g: np.ndarray, b: np.ndarray, norm: int, grad: bool = True, g_fast: np.ndarray | None = None
) -> tuple[float, np.ndarray | None]:
    """f(B) = tr(S G S M⁻¹) and ∂f/∂B for the p-Identity strategy, by Woodbury in O(n²p + np²).

    With C = I_p + BBᵀ, R = C⁻¹B (= B M⁻¹), Gs = S G S and Y = B Gs = ((B S) G) S:
    f = tr(Gs) − ⟨R, Y⟩;  ∂f/∂B = −2 (C⁻¹Y − (C⁻¹Y Bᵀ) R) + 1_p g_sᵀ ∘ ∂s/∂B,
    with ∂f/∂s_k = 2 (G_kk s_k − Σ_l Y_lk R_lk / s_k); ∂s_k/∂B_lk = 1 (L1) or B_lk / s_k (L2).
    The only O(n²p) step is B S G; ``g_fast`` (e.g. G in float32) is used for it when given.
    """
    if norm == 1:
        s = 1.0 + b.sum(axis=0)
    else:
        s = np.sqrt(1.0 + (b * b).sum(axis=0))
    bs = b * s[None, :]
    if g_fast is not None:
        y = (bs.astype(g_fast.dtype) @ g_fast).astype(float) * s[None, :]
    else:
        y = (bs @ g) * s[None, :]
    dg = np.diag(g)
    c = np.eye(b.shape[0]) + b @ b.T
    cf = sla.cho_factor(c)
    r = sla.cho_solve(cf, b)
    f = float(dg @ (s * s) - np.sum(r * y))
    if not grad:
        return f, None
    cy = sla.cho_solve(cf, y)
    d_m = -2.0 * (cy - (cy @ b.T) @ r)
    g_s = 2.0 * (dg * s - (y * r).sum(axis=0) / s)
    d_s = g_s[None, :] if norm == 1 else g_s[None, :] * b / s[None, :]
    return f, d_m + d_s


# ------------------------------------------------------------------------------------------------------
# Kronecker products, unions, marginals
# ------------------------------------------------------------------------------------------------------


def _factor_matrix(a: ExplicitStrategy | PIdentity) -> np.ndarray:
    return a.matrix


def _factor_pinv(a: ExplicitStrategy | PIdentity) -> np.ndarray:
    return a.pinv()


def _factor_gram(a: ExplicitStrategy | PIdentity) -> np.ndarray:
    m = a.matrix
    return m.T @ m


@dataclass(eq=False)
class KronStrategy:
    """A₁ ⊗ … ⊗ A_d of one-dimensional strategies (HDMM Defs. 16–17).

    Δ_p(A) = Π Δ_p(A_i) and, for W = ⊗W_i, tr(WᵀW (AᵀA)⁺) = Π tr(W_iᵀW_i (A_iᵀA_i)⁺) (HDMM Thms 3–4); for a
    union Σ_j c_j² Π_i tr(G_ij (A_iᵀA_i)⁺) (Thm 6).  Cost O(Σ nᵢ³) for the traces, never O(N³).
    """

    factors: tuple
    name: str = "Kron"

    @property
    def domain(self) -> tuple[int, ...]:
        return tuple(f.n for f in self.factors)

    @property
    def n(self) -> int:
        return int(np.prod(self.domain))

    @property
    def num_queries(self) -> int:
        return int(np.prod([f.num_queries for f in self.factors]))

    def sensitivity(self, p: int) -> float:
        return float(np.prod([f.sensitivity(p) for f in self.factors]))

    def column_norms(self, p: int) -> np.ndarray:
        out = np.ones(1)
        for f in self.factors:
            out = np.multiply.outer(out, f.column_norms(p)).reshape(-1)
        return out

    def _check(self, w: Workload) -> Stack:
        u = as_union(w)
        if u.domain != self.domain:
            raise ConfigurationError(f"workload domain {u.domain} does not match strategy domain {self.domain}")
        return u

    def trace(self, workload: Workload) -> float:
        u = self._check(workload)
        return float(
            sum(c * c * np.prod([a.trace(f) for f, a in zip(t.factors, self.factors, strict=True)]) for c, t in u.terms)
        )

    def supports(self, workload: Workload) -> bool:
        u = self._check(workload)
        return all(a.supports(f) for _, t in u.terms for f, a in zip(t.factors, self.factors, strict=True))

    def measure(self, x: np.ndarray) -> np.ndarray:
        return kron_matvec([_factor_matrix(f) for f in self.factors], x)

    def rmatvec(self, y: np.ndarray) -> np.ndarray:
        return kron_matvec([_factor_matrix(f).T for f in self.factors], y)

    def gram_matvec(self, x: np.ndarray) -> np.ndarray:
        return kron_matvec([_factor_gram(f) for f in self.factors], x)

    def reconstruct(self, y: np.ndarray) -> np.ndarray:
        """x̂ = (⊗A_i⁺) y (HDMM Prop. 6, Thm 14)."""
        return kron_matvec([_factor_pinv(f) for f in self.factors], y)

    def __repr__(self) -> str:
        return f"{self.name}(" + " ⊗ ".join(repr(f) for f in self.factors) + ")"


@dataclass(eq=False)
class UnionStrategy(WeightedTerms):
    """A weighted stack c₁A₁; …; c_kA_k of Kronecker strategies (OPT₊, HDMM Def. 19).

    ``assignment[j]`` (optional) names the sub-workload A_j was optimised for; :meth:`trace` then returns the
    local-least-squares error when the domain is too large for the exact global one (an upper bound of the
    global least-squares error by Gauss–Markov).  Reconstruction is global least squares (conjugate gradient
    on AᵀA x = Aᵀy, started at 0, so it converges to the minimum-norm solution A⁺y): consistent answers.
    """

    terms: tuple
    name: str = "Union"
    assignment: tuple[int, ...] | None = None
    exact_limit: int = 4096

    def __post_init__(self) -> None:
        self.terms = tuple((float(c), a if isinstance(a, KronStrategy) else KronStrategy((a,))) for c, a in self.terms)
        if not self.terms or len({a.domain for _, a in self.terms}) != 1:
            raise ConfigurationError("union strategy: sub-strategies must share one domain")

    def sensitivity(self, p: int) -> float:
        """Exact max column norm when the domain fits in memory, else the sum bound (an upper bound)."""
        if self.n <= 50_000_000:
            if p == 1:
                return float(sum(abs(c) * a.column_norms(1) for c, a in self.terms).max())
            return float(np.sqrt(sum(c * c * a.column_norms(2) ** 2 for c, a in self.terms).max()))
        if p == 1:
            return float(sum(abs(c) * a.sensitivity(1) for c, a in self.terms))
        return float(np.sqrt(sum(c * c * a.sensitivity(2) ** 2 for c, a in self.terms)))

    def explicit(self) -> ExplicitStrategy:
        mats = []
        for c, a in self.terms:
            m = np.ones((1, 1))
            for f in a.factors:
                m = np.kron(m, f.matrix)
            mats.append(c * m)
        return ExplicitStrategy(np.vstack(mats), self.name, self.domain)

    def trace(self, workload: Workload) -> float:
        u = as_union(workload)
        if self.n <= self.exact_limit:
            return self.explicit().trace(u)
        if self.assignment is None or len(self.assignment) != len(self.terms):
            raise ConfigurationError("union strategy: exact error needs a small domain or a sub-workload assignment")
        total = 0.0
        for j, (cw, t) in enumerate(u.terms):
            owners = [k for k, a in enumerate(self.assignment) if a == j]
            if not owners:
                raise ConfigurationError(f"union strategy: sub-workload {j} has no sub-strategy")
            c, a = self.terms[owners[0]]
            if c == 0:
                return float("inf")
            total += a.trace(Stack(((cw, t),))) / (c * c)
        return float(total)

    def supports(self, workload: Workload) -> bool:
        u = as_union(workload)
        if self.n <= self.exact_limit:
            return self.explicit().supports(u)
        return self.assignment is not None and all(
            self.terms[self.assignment.index(j)][1].supports(Stack(((cw, t),))) for j, (cw, t) in enumerate(u.terms)
        )

    def measure(self, x: np.ndarray) -> np.ndarray:
        return np.concatenate([c * a.measure(x) for c, a in self.terms])

    def rmatvec(self, y: np.ndarray) -> np.ndarray:
        out = np.zeros(self.n)
        off = 0
        for c, a in self.terms:
            k = a.num_queries
            out += c * a.rmatvec(y[off : off + k])
            off += k
        return out

    def reconstruct(self, y: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
        from scipy.sparse.linalg import LinearOperator, cg

        n = self.n
        op = LinearOperator((n, n), matvec=lambda v: sum(c * c * a.gram_matvec(v) for c, a in self.terms), dtype=float)
        rhs = self.rmatvec(np.asarray(y, dtype=float))
        x, info = cg(op, rhs, rtol=rtol, atol=0.0, maxiter=10 * n)
        if info != 0:
            raise ConfigurationError("union strategy: least squares did not converge")
        return x

    def __repr__(self) -> str:
        return f"{self.name}[" + "; ".join(f"{c:.3g}·{a!r}" for c, a in self.terms) + "]"


def _subset_tables(domain: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """sub[b, a] = [b ⊆ a]; outer[a] = Π_{i ∉ a} n_i (bit i of a ↔ attribute i kept)."""
    d = len(domain)
    k = 1 << d
    idx = np.arange(k)
    sub = ((idx[:, None] & idx[None, :]) == idx[:, None]).astype(float)
    outer = np.array([np.prod([domain[i] for i in range(d) if not (a >> i) & 1]) for a in range(k)], dtype=float)
    return sub, outer


def marginal_workload_spectrum(workload: Workload) -> tuple[tuple[int, ...], np.ndarray, np.ndarray]:
    """For W a union of products: (domain, t, dim) with t_b = tr(P_b WᵀW) and dim_b = Π_{i∈b}(n_i − 1).

    P_b = ⊗_i (I − J/n_i if i ∈ b else J/n_i) are the common eigenspace projectors of all marginal Gram
    matrices (HDMM Thm 9); for a product, tr(P_b ⊗G_i) = Π_i (tr G_i − 1ᵀG_i1/n_i if i ∈ b else 1ᵀG_i1/n_i).
    """
    u = as_union(workload)
    dom = u.domain
    d = len(dom)
    if d > 14:
        raise ConfigurationError(f"marginal algebra: {d} attributes is too many (at most 14)")
    k = 1 << d
    t = np.zeros(k)
    for c, term in u.terms:
        ins, outs = [], []
        for f in term.factors:
            g = f.gram()
            s = float(g.sum()) / f.n
            ins.append(max(float(np.trace(g)) - s, 0.0))
            outs.append(s)
        for b in range(k):
            t[b] += c * c * np.prod([ins[i] if (b >> i) & 1 else outs[i] for i in range(d)])
    dim = np.array([np.prod([dom[i] - 1 for i in range(d) if (b >> i) & 1]) for b in range(k)], dtype=float)
    return dom, t, dim


@dataclass(eq=False)
class MarginalStrategy:
    """Weighted marginals: θ_a times the marginal on attribute set a (bit i ↔ attribute i) (HDMM Def. 20).

    Gram X = Σ_a θ_a² ⊗_i (I if i ∈ a else J).  On the eigenspace b (HDMM Thm 9) X acts as
    κ_b = Σ_{a ⊇ b} θ_a² Π_{i∉a} n_i, so tr(WᵀW X⁺) = Σ_b tr(P_b WᵀW)/κ_b (HDMM Thm 11) and
    X⁺ = Σ_{κ_b > 0} P_b / κ_b: O(4^d) to evaluate, independent of the attribute sizes.
    Δ₁ = Σ|θ_a| and Δ₂ = √(Σθ_a²) (HDMM Prop. 7: every cell is in exactly one cell of each marginal).
    """

    domain: tuple[int, ...]
    theta: np.ndarray
    name: str = "Marginals"

    def __post_init__(self) -> None:
        self.domain = tuple(int(x) for x in self.domain)
        th = np.asarray(self.theta, dtype=float).reshape(-1)
        if th.shape[0] != 1 << len(self.domain) or not np.all(np.isfinite(th)):
            raise ConfigurationError("marginal strategy: θ needs one finite weight per attribute subset (2^d)")
        self.theta = th

    @property
    def n(self) -> int:
        return int(np.prod(self.domain))

    @cached_property
    def _tables(self) -> tuple[np.ndarray, np.ndarray]:
        return _subset_tables(self.domain)

    @property
    def kappa(self) -> np.ndarray:
        sub, outer = self._tables
        return sub @ (self.theta**2 * outer)

    @property
    def num_queries(self) -> int:
        d = len(self.domain)
        return int(
            sum(
                np.prod([self.domain[i] for i in range(d) if (a >> i) & 1]) for a in range(1 << d) if self.theta[a] != 0
            )
        )

    def sensitivity(self, p: int) -> float:
        return float(np.abs(self.theta).sum()) if p == 1 else float(np.sqrt((self.theta**2).sum()))

    def column_norms(self, p: int) -> np.ndarray:
        return np.full(self.n, self.sensitivity(p))

    def _spectrum(self, workload: Workload) -> tuple[np.ndarray, np.ndarray]:
        dom, t, _ = marginal_workload_spectrum(workload)
        if dom != self.domain:
            raise ConfigurationError(f"workload domain {dom} does not match strategy domain {self.domain}")
        return t, self.kappa

    def trace(self, workload: Workload) -> float:
        t, kap = self._spectrum(workload)
        tol = 1e-9 * max(t.max(), 1e-300)
        if np.any((t > tol) & (kap <= 0)):
            return float("inf")
        pos = kap > 0
        return float(np.sum(t[pos] / kap[pos]))

    def supports(self, workload: Workload) -> bool:
        return bool(np.isfinite(self.trace(workload)))

    def _marginal(self, x: np.ndarray, a: int) -> np.ndarray:
        d = len(self.domain)
        axes = tuple(i for i in range(d) if not (a >> i) & 1)
        return x.reshape(self.domain).sum(axis=axes).reshape(-1)

    def measure(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        return np.concatenate(
            [self.theta[a] * self._marginal(x, a) for a in range(len(self.theta)) if self.theta[a] != 0]
        )

    def rmatvec(self, y: np.ndarray) -> np.ndarray:
        d = len(self.domain)
        out = np.zeros(self.domain)
        off = 0
        for a in range(1 << d):
            if self.theta[a] == 0:
                continue
            shp = [self.domain[i] if (a >> i) & 1 else 1 for i in range(d)]
            k = int(np.prod(shp))
            out = out + self.theta[a] * np.asarray(y[off : off + k]).reshape(shp)
            off += k
        return out.reshape(-1)

    def _project(self, v: np.ndarray, b: int) -> np.ndarray:
        t = v.reshape(self.domain)
        for i in range(len(self.domain)):
            m = t.mean(axis=i, keepdims=True)
            t = t - m if (b >> i) & 1 else np.broadcast_to(m, t.shape)
        return np.asarray(t).reshape(-1)

    def reconstruct(self, y: np.ndarray) -> np.ndarray:
        """x̂ = X⁺ Aᵀ y = Σ_{κ_b > 0} P_b Aᵀy / κ_b (O(2^d · N · d))."""
        v = self.rmatvec(np.asarray(y, dtype=float))
        kap = self.kappa
        out = np.zeros(self.n)
        for b in range(len(kap)):
            if kap[b] > 0:
                out += self._project(v, b) / kap[b]
        return out

    def __repr__(self) -> str:
        d = len(self.domain)
        parts = [
            f"{self.theta[a]:.3g}·{{{','.join(str(i) for i in range(d) if (a >> i) & 1)}}}"
            for a in range(1 << d)
            if self.theta[a] > 1e-9 * np.abs(self.theta).max()
        ]
        return f"{self.name}[" + " ".join(parts) + "]"
