"""Linear query workloads (and strategies) over a vectorised domain, implicit where possible.

A *workload* is a matrix W (m × n): each row is a linear counting query over the data vector x (the histogram
of the rows over the n cells of the domain), answered as W x.  Following McKenna, Miklau, Hay and
Machanavajjhala, "Optimizing error of high-dimensional statistical queries under differential privacy",
PVLDB 11(10), 2018, doi:10.14778/3231751.3231769 (HDMM, §2 and §5), the error of every data-independent
mechanism in this package depends on W only through its Gram matrix WᵀW, so workloads are represented
*implicitly*:

* :class:`Dense` — a one-dimensional block given by its Gram matrix (closed form where known) and, for small
  n, its explicit matrix: :func:`prefix`, :func:`all_range`, :func:`width_range`, :func:`identity`,
  :func:`total`, :func:`permuted_range`, :func:`explicit`;
* :class:`Kron` — a Kronecker product W₁ ⊗ … ⊗ W_d (a product of per-attribute predicate sets, HDMM Thm 2):
  stored by its factors, never expanded;
* :class:`Stack` — a weighted union (vertical stack) c₁W₁; …; c_kW_k of Kronecker products over the same
  attributes (HDMM Eq. 3); :func:`marginals` builds all ≤k-way marginals this way.

The same classes describe *strategies* (the queries actually measured), see :mod:`dpmagic.batch.strategies`.
Everything here is pure numpy and has no session dependency.

Size: one module (a little over 400 lines) because the implicit workloads share one Gram-matrix algebra.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from dpmagic.errors import ConfigurationError

__all__ = [
    "Dense",
    "Kron",
    "Stack",
    "prefix",
    "all_range",
    "width_range",
    "identity",
    "total",
    "permuted_range",
    "explicit",
    "kron",
    "union",
    "marginals",
    "as_union",
    "EXPLICIT_LIMIT",
]

#: largest number of explicit matrix entries (m·n) materialised on request
EXPLICIT_LIMIT = 50_000_000


def _check_n(n: int, what: str) -> int:
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
        raise ConfigurationError(f"{what}: domain size must be a positive integer, got {n!r}")
    return int(n)


@dataclass(eq=False)
class Dense:
    """A one-dimensional query block over a domain of size ``n``.

    ``gram_fn`` returns WᵀW (n × n) and ``matrix_fn`` the explicit W (m × n); either may be derived from the
    other.  ``kind`` names the family ("identity", "total", "prefix", …) so that optimisers can skip blocks
    for which Identity/Total are already optimal.
    """

    n: int
    m: int
    name: str
    kind: str = "explicit"
    gram_fn: Callable[[], np.ndarray] | None = None
    matrix_fn: Callable[[], np.ndarray] | None = None
    rmul_fn: Callable[[np.ndarray], np.ndarray] | None = None
    _matrix: np.ndarray | None = field(default=None, repr=False)

    @property
    def domain(self) -> tuple[int, ...]:
        return (self.n,)

    @property
    def num_queries(self) -> int:
        return self.m

    @cached_property
    def _gram(self) -> np.ndarray:
        if self.gram_fn is not None:
            g = np.asarray(self.gram_fn(), dtype=np.float64)
        else:
            a = self.matrix()
            g = a.T @ a
        g.setflags(write=False)
        return g

    def gram(self) -> np.ndarray:
        """WᵀW as a read-only n × n array (closed form where known; O(n²) memory)."""
        return self._gram

    def gram_rmul(self, v: np.ndarray) -> np.ndarray:
        """v·WᵀW for a k × n array v: O(kn) by prefix sums for ranges (exact formulas, no n × n Gram)."""
        v = np.asarray(v, dtype=np.float64)
        return self.rmul_fn(v) if self.rmul_fn is not None else v @ self.gram()

    @property
    def fast_rmul(self) -> bool:
        """True when :meth:`gram_rmul` avoids the O(n²) Gram."""
        return self.rmul_fn is not None

    def matrix(self) -> np.ndarray:
        """The explicit m × n matrix (refused beyond :data:`EXPLICIT_LIMIT` entries)."""
        if self._matrix is None:
            if self.matrix_fn is None:
                raise ConfigurationError(f"{self.name}: no explicit matrix available")
            if self.m * self.n > EXPLICIT_LIMIT:
                raise ConfigurationError(
                    f"{self.name}: the explicit matrix would have {self.m * self.n:,} entries",
                    hint="use the implicit Gram matrix (all error formulas need only WᵀW)",
                )
            mat = np.asarray(self.matrix_fn(), dtype=np.float64)
            mat.setflags(write=False)
            self._matrix = mat
        return self._matrix

    def column_norm(self, p: int) -> np.ndarray:
        """Per-column L_p norm (p = 1 or 2) of W: the sensitivity of each cell."""
        if p == 2:
            return np.sqrt(np.clip(np.diag(self.gram()), 0.0, None))
        return np.abs(self.matrix()).sum(axis=0)

    def __repr__(self) -> str:
        return f"{self.name}"


def _range_rows(n: int, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    cols = np.arange(n)
    return ((cols[None, :] >= starts[:, None]) & (cols[None, :] <= ends[:, None])).astype(float)


def _suffix_excl(b: np.ndarray) -> np.ndarray:
    """Σ_{i > j} b_i along the last axis."""
    return np.cumsum(b[..., ::-1], axis=-1)[..., ::-1] - b


def _prefix_rmul(v: np.ndarray) -> np.ndarray:
    """(v G)_j = (n − j) Σ_{i≤j} v_i + Σ_{i>j} (n − i) v_i for G_ij = n − max(i, j)."""
    n = v.shape[-1]
    c = n - np.arange(n)
    return c * np.cumsum(v, axis=-1) + _suffix_excl(v * c)


def _all_range_rmul(v: np.ndarray) -> np.ndarray:
    """(v G)_j = (n − j) Σ_{i≤j} (i+1) v_i + (j+1) Σ_{i>j} (n − i) v_i for G_ij = (min+1)(n − max)."""
    n = v.shape[-1]
    i = np.arange(n)
    return (n - i) * np.cumsum(v * (i + 1), axis=-1) + (i + 1) * _suffix_excl(v * (n - i))


def _width_rmul(v: np.ndarray, k: int) -> np.ndarray:
    """v WᵀW = (W vᵀ)ᵀ W for the n − k + 1 ranges [s, s + k − 1], both products by prefix sums."""
    n = v.shape[-1]
    z = np.zeros(v.shape[:-1] + (1,))
    c = np.concatenate([z, np.cumsum(v, axis=-1)], axis=-1)
    u = c[..., k:] - c[..., : n - k + 1]
    cu = np.concatenate([z, np.cumsum(u, axis=-1)], axis=-1)
    j = np.arange(n)
    return cu[..., np.minimum(j, n - k) + 1] - cu[..., np.maximum(j - k + 1, 0)]


def identity(n: int) -> Dense:
    """The n point queries (one per cell); Gram I."""
    n = _check_n(n, "identity")
    return Dense(n, n, f"Identity({n})", "identity", lambda: np.eye(n), lambda: np.eye(n))


def total(n: int) -> Dense:
    """The single query counting every cell; Gram 11ᵀ."""
    n = _check_n(n, "total")
    return Dense(n, 1, f"Total({n})", "total", lambda: np.ones((n, n)), lambda: np.ones((1, n)))


def prefix(n: int) -> Dense:
    """The n prefix ranges [0, j] (an empirical CDF); Gram (WᵀW)_ij = n − max(i, j) (0-based)."""
    n = _check_n(n, "prefix")
    idx = np.arange(n)

    def gram() -> np.ndarray:
        return (n - np.maximum.outer(idx, idx)).astype(float)

    return Dense(n, n, f"Prefix({n})", "prefix", gram, lambda: _range_rows(n, np.zeros(n, int), idx), _prefix_rmul)


def _all_range_gram(n: int) -> np.ndarray:
    idx = np.arange(n)
    return ((np.minimum.outer(idx, idx) + 1) * (n - np.maximum.outer(idx, idx))).astype(float)


def all_range(n: int) -> Dense:
    """All n(n+1)/2 ranges [i, j]; Gram (WᵀW)_ij = (min(i,j)+1)(n − max(i,j)) (0-based)."""
    n = _check_n(n, "all_range")

    def matrix() -> np.ndarray:
        s, e = np.triu_indices(n)
        return _range_rows(n, s, e)

    return Dense(
        n, n * (n + 1) // 2, f"AllRange({n})", "all_range", lambda: _all_range_gram(n), matrix, _all_range_rmul
    )


def width_range(n: int, k: int) -> Dense:
    """The n − k + 1 ranges of width k; Gram (WᵀW)_ij = #{s : max(i,j) − k < s ≤ min(i,j), 0 ≤ s ≤ n − k}."""
    n = _check_n(n, "width_range")
    k = _check_n(k, "width_range width")
    if k > n:
        raise ConfigurationError(f"width_range: width {k} exceeds the domain size {n}")
    idx = np.arange(n)

    def gram() -> np.ndarray:
        lo = np.maximum(0, np.maximum.outer(idx, idx) - k + 1)
        hi = np.minimum(np.minimum.outer(idx, idx), n - k)
        return np.clip(hi - lo + 1, 0, None).astype(float)

    starts = np.arange(n - k + 1)
    return Dense(
        n,
        n - k + 1,
        f"WidthRange({n},{k})",
        "width_range",
        gram,
        lambda: _range_rows(n, starts, starts + k - 1),
        lambda v: _width_rmul(v, k),
    )


def permuted_range(n: int, seed: int = 0) -> Dense:
    """All ranges right-multiplied by a random permutation P (seeded): W P, Gram Pᵀ (WᵀW) P (HDMM §11.1)."""
    n = _check_n(n, "permuted_range")
    perm = np.random.default_rng(seed).permutation(n)

    def gram() -> np.ndarray:
        return _all_range_gram(n)[np.ix_(perm, perm)]

    def matrix() -> np.ndarray:
        s, e = np.triu_indices(n)
        return _range_rows(n, s, e)[:, perm]

    def rmul(v: np.ndarray) -> np.ndarray:
        u = np.empty_like(v)
        u[..., perm] = v
        return _all_range_rmul(u)[..., perm]

    return Dense(n, n * (n + 1) // 2, f"PermutedRange({n},seed={seed})", "permuted_range", gram, matrix, rmul)


def explicit(matrix: np.ndarray | Sequence[Sequence[float]], name: str = "Explicit") -> Dense:
    """Any explicit query matrix (m × n)."""
    mat = np.array(matrix, dtype=float, ndmin=2)
    if mat.ndim != 2 or mat.size == 0 or not np.all(np.isfinite(mat)):
        raise ConfigurationError(f"{name}: a workload matrix must be a finite non-empty 2-D array")
    return Dense(mat.shape[1], mat.shape[0], name, "explicit", None, lambda: mat)


@dataclass(eq=False)
class Kron:
    """W₁ ⊗ … ⊗ W_d (implicit; the data vector is the row-major flattening of the d-dimensional histogram)."""

    factors: tuple[Dense, ...]

    def __post_init__(self) -> None:
        self.factors = tuple(self.factors)
        if not self.factors:
            raise ConfigurationError("kron: at least one factor is needed")

    @property
    def domain(self) -> tuple[int, ...]:
        return tuple(f.n for f in self.factors)

    @property
    def n(self) -> int:
        return int(np.prod(self.domain))

    @property
    def num_queries(self) -> int:
        return int(np.prod([f.m for f in self.factors]))

    def gram(self) -> np.ndarray:
        """The explicit Gram matrix (Kronecker product of the factor Grams; only for small domains)."""
        if self.n * self.n > EXPLICIT_LIMIT:
            raise ConfigurationError(f"kron: the Gram matrix of a domain of {self.n:,} cells is too large")
        g = np.ones((1, 1))
        for f in self.factors:
            g = np.kron(g, f.gram())
        return g

    def matrix(self) -> np.ndarray:
        if self.num_queries * self.n > EXPLICIT_LIMIT:
            raise ConfigurationError(f"kron: the explicit matrix would have {self.num_queries * self.n:,} entries")
        a = np.ones((1, 1))
        for f in self.factors:
            a = np.kron(a, f.matrix())
        return a

    def __repr__(self) -> str:
        return " ⊗ ".join(repr(f) for f in self.factors)


class WeightedTerms:
    """What a weighted union c₁X₁; …; c_kX_k over one domain knows of itself (workloads and strategies alike):
    ``terms`` is a tuple of (weight, part) with every part over the same domain."""

    terms: tuple

    @property
    def domain(self) -> tuple[int, ...]:
        return self.terms[0][1].domain

    @property
    def n(self) -> int:
        return int(np.prod(self.domain))

    @property
    def num_queries(self) -> int:
        return sum(part.num_queries for _, part in self.terms)


@dataclass(eq=False)
class Stack(WeightedTerms):
    """A weighted union c₁W₁; …; c_kW_k of Kronecker products over the same domain (HDMM Eq. 3)."""

    terms: tuple[tuple[float, Kron], ...]

    def __post_init__(self) -> None:
        self.terms = tuple((float(c), t) for c, t in self.terms)
        if not self.terms:
            raise ConfigurationError("union: at least one sub-workload is needed")
        doms = {t.domain for _, t in self.terms}
        if len(doms) != 1:
            raise ConfigurationError(f"union: sub-workloads are over different domains {sorted(doms)}")
        if any(not np.isfinite(c) or c <= 0 for c, _ in self.terms):
            raise ConfigurationError("union: weights must be positive and finite")

    def gram(self) -> np.ndarray:
        (c, t), *rest = self.terms  # never empty (__post_init__)
        g = c * c * t.gram()
        for c, t in rest:
            g = g + c * c * t.gram()
        return g

    def matrix(self) -> np.ndarray:
        return np.vstack([c * t.matrix() for c, t in self.terms])

    def __repr__(self) -> str:
        return " ; ".join(f"{c:g}·({t!r})" for c, t in self.terms)


Workload = Dense | Kron | Stack


def kron(*factors: Dense) -> Kron:
    """W₁ ⊗ … ⊗ W_d."""
    for f in factors:
        if not isinstance(f, Dense):
            raise ConfigurationError("kron: factors must be one-dimensional blocks (Dense)")
    return Kron(tuple(factors))


def as_union(w: Workload) -> Stack:
    """View any workload as a union of Kronecker products."""
    if isinstance(w, Stack):
        return w
    if isinstance(w, Kron):
        return Stack(((1.0, w),))
    if isinstance(w, Dense):
        return Stack(((1.0, Kron((w,))),))
    raise ConfigurationError(f"not a workload: {type(w).__name__}")


def union(parts: Iterable[Workload | tuple[float, Workload]]) -> Stack:
    """Weighted union (stack) of workloads; a part is a workload or a (weight, workload) pair."""
    terms: list[tuple[float, Kron]] = []
    for p in parts:
        c, w = p if isinstance(p, tuple) else (1.0, p)
        for c2, t in as_union(w).terms:
            terms.append((float(c) * c2, t))
    return Stack(tuple(terms))


def marginals(
    domain_sizes: Sequence[int], k: int | None = None, subsets: Iterable[Iterable[int]] | None = None
) -> Stack:
    """All marginals on at most ``k`` attributes (or the given attribute subsets) as a union of products.

    The marginal on attribute set S is ⊗ᵢ (Identity(nᵢ) if i ∈ S else Total(nᵢ)); the 0-way marginal is the
    grand total.
    """
    sizes = tuple(_check_n(s, "marginals") for s in domain_sizes)
    d = len(sizes)
    if d == 0:
        raise ConfigurationError("marginals: at least one attribute is needed")
    if subsets is None:
        if k is None or k < 0:
            raise ConfigurationError("marginals: give k ≥ 0 or an explicit list of attribute subsets")
        subs = [s for r in range(min(k, d) + 1) for s in itertools.combinations(range(d), r)]
    else:
        subs = [tuple(sorted(set(s))) for s in subsets]
        if not subs or any(i < 0 or i >= d for s in subs for i in s):
            raise ConfigurationError(f"marginals: attribute subsets must index 0..{d - 1}")
    terms = []
    for s in subs:
        terms.append((1.0, Kron(tuple(identity(n) if i in s else total(n) for i, n in enumerate(sizes)))))
    return Stack(tuple(terms))
