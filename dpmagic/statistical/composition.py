"""Composition of statistical privacy over a secret random partition (Breutigam & Reischuk, Sec. 5).

The curator draws a uniformly random injective template of format (n_1, …, n_m) — a partition of the n rows
into disjoint parts of the declared sizes (Σ n_k ≤ n; rows outside every part are never used), keeps it secret,
and answers the k-th query on part k only.  Each row lands in part k with probability n_k / n, and rows outside
part k do not depend on the critical row, which gives (for i.i.d. rows):

* Theorem 5.1 (non-adaptive, i.i.d.):  δ(ε) = Σ_k (n_k / n) · Δ̂_{n_k}^{F_k}(ε);
* Theorem 5.3 (adaptive, i.i.d.):      δ(ε) = Σ_k (n_k / n) · E_X[Δ_{n_k}^{F_k(X)}(ε)], X the answers to
  F_1 … F_{k−1}.  Charging the realised Δ of every query and refusing a query that would push the sum above the
  target bounds this expectation on every transcript (a refused query is the constant query, Δ = 0).
* Lemma 5.1 / Theorems 5.2, 5.4 generalise to non-identical rows through sampling privacy curves that are not
  computed here (the accountant refuses such priors).

All functions are pure; :class:`~dpmagic.statistical.accountant.StatisticalPrivacyAccountant` keeps the state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dpmagic.errors import ConfigurationError
from dpmagic.statistical.curves import _check_size, property_delta

__all__ = ["equal_part_sizes", "check_part_sizes", "partition_delta", "equal_partition_delta"]


def equal_part_sizes(n: int, m: int) -> tuple[int, ...]:
    """m part sizes that sum to n and differ by at most one (the larger parts first)."""
    n = _check_size(n, "n")
    m = _check_size(m, "the number of parts m")
    if m > n:
        raise ConfigurationError(f"cannot split {n} rows into {m} non-empty parts", hint="use at most n parts")
    q, r = divmod(n, m)
    return tuple(q + 1 if k < r else q for k in range(m))


def check_part_sizes(n: int, sizes: Sequence[int]) -> tuple[int, ...]:
    """Validate declared part sizes: whole numbers ≥ 1 whose sum is at most n."""
    n = _check_size(n, "n")
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence) or len(sizes) == 0:
        raise ConfigurationError(f"the part sizes must be a non-empty sequence of whole numbers, got {sizes!r}")
    out = tuple(_check_size(s, f"part size #{k + 1}") for k, s in enumerate(sizes))
    if sum(out) > n:
        raise ConfigurationError(
            f"the part sizes sum to {sum(out)}, more than the {n} rows",
            hint="the parts are disjoint: their sizes may add up to at most n",
        )
    return out


def partition_delta(n: int, sizes: Sequence[int], deltas: Sequence[float]) -> float:
    """Σ_k (n_k / n) · δ_k — the composed δ(ε) of Theorems 5.1 / 5.3 given each part's δ_k(ε) at the same ε.

    Summed with ``math.fsum`` and rounded up by one ulp (never understated); capped at 1.
    """
    sizes = check_part_sizes(n, sizes)
    if len(deltas) != len(sizes):
        raise ConfigurationError(f"{len(sizes)} part sizes but {len(deltas)} values of δ")
    for d in deltas:
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not (0.0 <= float(d) <= 1.0):
            raise ConfigurationError(f"every δ_k must be a number in [0, 1], got {d!r}")
    total = math.fsum(s * float(d) for s, d in zip(sizes, deltas)) / n
    return min(1.0, math.nextafter(total, math.inf) if total > 0 else 0.0)


def equal_partition_delta(n: int, m: int, p: float, eps: float) -> float:
    """δ(ε) of m property queries (probability p each) over a secret partition into m equal parts.

    With sizes differing by at most one this is the size-weighted mean of at most two curve values; for m | n
    it equals the single-query curve on n/m rows (this is the δ column of the paper's Tables I and II).
    """
    sizes = equal_part_sizes(n, m)
    cache: dict[int, float] = {}
    deltas = []
    for s in sizes:
        if s not in cache:
            cache[s] = property_delta(s, p, eps)
        deltas.append(cache[s])
    return partition_delta(n, sizes, deltas)
