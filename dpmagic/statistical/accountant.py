"""A ledger-like state object for statistical privacy over a secret random partition.

:class:`StatisticalPrivacyAccountant` holds the public parameters (prior, n, part sizes, ε, δ target), the record
of the queries charged so far, and the *secret* partition of the row indices into the declared parts.  Query k is
answered exactly on part k (no noise — Breutigam & Reischuk, Sec. 6, compare SP's un-noised answers, whose only
error is the subsampling error of Example 2) and rescaled by n / n_k to estimate the full-data count.

This is **statistical privacy, not differential privacy**: the guarantee holds only for an adversary who knows
nothing about the rows beyond the declared i.i.d. prior.  Against DP's adversary (who knows every other row) an
exact count of a part reveals the critical row: δ = 1.

Secrecy of the partition.  The assignment is drawn with :class:`secrets.SystemRandom` (the operating system's
cryptographic generator) by a Fisher-Yates shuffle and is never part of any output: ``repr``/``str`` show only
public fields, :meth:`public_state` omits it, and pickling / copying is refused (``TypeError``).  Python offers no
secrecy against code running in the same process; like the data, the accountant must live on the custodian's
side (the kernel), never be sent to the analyst.  A lost partition cannot be redrawn for the remaining parts
(rows already used could be reused), so a restarted session must treat the unused parts as spent.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from dpmagic.errors import BudgetError, BudgetExceededError, ConfigurationError, DataValidationError
from dpmagic.statistical.composition import check_part_sizes, equal_part_sizes
from dpmagic.statistical.curves import _check_epsilon, _check_size, check_prior, property_delta

__all__ = ["RandomIndexSource", "SPCharge", "StatisticalPrivacyAccountant", "draw_partition"]


class RandomIndexSource(Protocol):
    """What :func:`draw_partition` needs from a random generator: a uniform integer in [0, k)."""

    def randrange(self, k: int, /) -> int: ...


def draw_partition(n: int, sizes: Sequence[int], rng: RandomIndexSource | None = None) -> list[np.ndarray]:
    """A uniformly random injective template of format ``sizes``: disjoint sorted index arrays of the given sizes.

    Fisher-Yates shuffle of 0..n−1 (each of the n! orders equally likely when ``rng.randrange`` is uniform), then
    consecutive blocks.  Every ordered partition into parts of the given sizes is hit by exactly
    ∏ n_k! · (n − Σ n_k)! orders, so it is uniform.  ``rng`` defaults to :class:`secrets.SystemRandom`.
    O(n) time, n − 1 calls to the generator.
    """
    sizes = check_part_sizes(n, sizes)
    gen: RandomIndexSource = rng if rng is not None else secrets.SystemRandom()
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = gen.randrange(i + 1)
        order[i], order[j] = order[j], order[i]
    parts = []
    start = 0
    for s in sizes:
        parts.append(np.sort(np.asarray(order[start : start + s], dtype=np.int64)))
        start += s
    return parts


@dataclass(frozen=True)
class SPCharge:
    """One charged query: the part it used, its property probability, its δ_k(ε) and the running total."""

    part: int
    part_size: int
    p: float
    delta_part: float
    delta_total: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "part": self.part,
            "part_size": self.part_size,
            "p": self.p,
            "delta_part": self.delta_part,
            "delta_total": self.delta_total,
        }


class StatisticalPrivacyAccountant:
    """State of one statistical-privacy analysis over a secret random partition (Breutigam & Reischuk, Sec. 5).

    Parameters: the public i.i.d. ``prior`` (:class:`~dpmagic.statistical.BernoulliPrior` or
    :class:`~dpmagic.statistical.CategoricalPrior`), the number of rows ``n``, either ``parts`` (m equal parts)
    or ``sizes`` (fixed part sizes, Σ ≤ n), the ε at which δ is accounted and the target ``delta``.

    Query k (k = 1, 2, … in arrival order, possibly chosen adaptively) is a counting query with property
    probability p_k under the prior; it is charged (n_k / n) · δ(n_k, p_k, ε) (Theorem 5.3) *before* any data is
    read, and refused with :class:`~dpmagic.errors.BudgetExceededError` (nothing charged) when the total would
    exceed the target or when every part has been used.  Per-query cost O(n_k).
    """

    def __init__(
        self,
        prior: object,
        n: int,
        *,
        epsilon: float,
        delta: float,
        parts: int | None = None,
        sizes: Sequence[int] | None = None,
        rng: RandomIndexSource | None = None,
    ) -> None:
        self._prior = check_prior(prior)
        self._n = _check_size(n, "n")
        if parts is not None and sizes is None:
            self._sizes = equal_part_sizes(self._n, parts)
        elif parts is None and sizes is not None:
            self._sizes = check_part_sizes(self._n, sizes)
        else:
            raise ConfigurationError("give exactly one of parts= (m equal parts) or sizes= (fixed part sizes)")
        self._epsilon = _check_epsilon(epsilon)
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not (0.0 < float(delta) <= 1.0):
            raise BudgetError(f"the δ target must be a number in (0, 1], got {delta!r}")
        self._target = float(delta)
        self._charges: list[SPCharge] = []
        self._spent = 0.0
        self._answered = 0
        self.__partition = draw_partition(self._n, self._sizes, rng)

    # ----------------------------------------------------------------------------------------- public state
    @property
    def prior(self) -> object:
        return self._prior

    @property
    def n(self) -> int:
        return self._n

    @property
    def sizes(self) -> tuple[int, ...]:
        return self._sizes

    @property
    def epsilon(self) -> float:
        return self._epsilon

    @property
    def delta_target(self) -> float:
        return self._target

    @property
    def delta_spent(self) -> float:
        """Σ over charged queries of (n_k / n) · δ_k(ε) — the SP guarantee (ε, δ_spent) of the answers so far."""
        return self._spent

    @property
    def charges(self) -> tuple[SPCharge, ...]:
        return tuple(self._charges)

    @property
    def parts_left(self) -> int:
        return len(self._sizes) - len(self._charges)

    def public_state(self) -> dict[str, Any]:
        """Everything a ledger may store or show (JSON-serialisable); never the partition."""
        return {
            "notion": "statistical privacy (not differential privacy)",
            "prior": repr(self._prior),
            "n": self._n,
            "sizes": list(self._sizes),
            "epsilon": self._epsilon,
            "delta_target": self._target,
            "delta_spent": self._spent,
            "charges": [c.to_dict() for c in self._charges],
        }

    def __repr__(self) -> str:
        return (
            f"StatisticalPrivacyAccountant(prior={self._prior!r}, n={self._n}, parts={len(self._sizes)}, "
            f"used={len(self._charges)}, epsilon={self._epsilon!r}, delta_spent={self._spent:.6g}, "
            f"delta_target={self._target!r}, partition=<secret>)"
        )

    __str__ = __repr__

    def __reduce_ex__(self, protocol: object) -> Any:
        raise TypeError("a StatisticalPrivacyAccountant holds a secret partition and cannot be pickled or copied")

    def __copy__(self) -> Any:
        raise TypeError("a StatisticalPrivacyAccountant holds a secret partition and cannot be copied")

    def __deepcopy__(self, memo: object) -> Any:
        raise TypeError("a StatisticalPrivacyAccountant holds a secret partition and cannot be copied")

    # ----------------------------------------------------------------------------------------- accounting
    def query_probability(self, values: Iterable[object]) -> float:
        """Property probability under the prior of the counting query 'rows with a value in ``values``'."""
        return self._prior.probability(values)

    def preview(self, values: Iterable[object]) -> SPCharge:
        """What charging the query would record (part, δ_k, new total), without charging; raises if refused."""
        if not self.parts_left:
            raise BudgetExceededError(
                f"all {len(self._sizes)} parts of the secret partition have been used",
                hint="statistical privacy answers each query on a fresh part; declare more parts up front",
            )
        p = self.query_probability(values)
        k = len(self._charges)
        nk = self._sizes[k]
        dk = property_delta(nk, p, self._epsilon)
        total = min(1.0, math.nextafter(math.fsum([self._spent, nk * dk / self._n]), math.inf))
        if total > self._target:
            raise BudgetExceededError(
                f"this query would raise statistical δ({self._epsilon:g}) to {total:.6g}, above the target "
                f"{self._target:g}",
                hint="nothing was charged; a query with a property probability nearer ½ or fewer queries costs less",
            )
        return SPCharge(part=k, part_size=nk, p=p, delta_part=dk, delta_total=total)

    def charge(self, values: Iterable[object]) -> SPCharge:
        """Charge the next query (records it) and return the record; raises and records nothing if refused."""
        c = self.preview(values)
        self._charges.append(c)
        self._spent = c.delta_total
        return c

    # ----------------------------------------------------------------------------------------- answering
    def answer_part(self, charge: SPCharge, count: Callable[[np.ndarray], int]) -> float:
        """Answer an already charged query: (n / n_k) · ``count(indices of part k)``.

        ``charge`` must be the most recent record returned by :meth:`charge` and not yet answered (each part
        answers exactly one query).  ``count`` receives the sorted row indices of the secret part and returns
        the exact number of them with the property; it is the only place the rows are read, strictly after the
        charge.  The indices are handed to ``count`` only — a caller on the custodian's side (e.g.
        :class:`~dpmagic.statistical.sp_session.StatisticalSession`), never returned.  O(n_k) plus ``count``.
        """
        if not self._charges or self._charges[-1] is not charge:
            raise BudgetError("only the most recent charge can be answered", hint="charge the query first")
        if self._answered >= len(self._charges):
            raise BudgetError("this charge has already been answered; each part answers one query")
        self._answered = len(self._charges)
        value = count(self.__partition[charge.part])
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, np.integer))
            or not 0 <= int(value) <= charge.part_size
        ):
            raise DataValidationError("the part count must be a whole number between 0 and the part size")
        return int(value) * self._n / charge.part_size

    def _validate_rows(self, rows: Sequence[object] | np.ndarray) -> np.ndarray:
        arr = np.asarray(rows, dtype=object)
        if arr.ndim != 1 or arr.shape[0] != self._n:
            raise DataValidationError(f"the data must be a sequence of the declared {self._n} row values")
        domain = set(self._prior.domain)
        if any(v not in domain for v in arr.tolist()):
            raise DataValidationError(
                "the data has a value outside the prior's public domain",
                hint=f"the declared domain is {list(self._prior.domain)!r}",
            )
        return arr

    def answer(self, rows: Sequence[object] | np.ndarray, values: Iterable[object]) -> tuple[float, SPCharge]:
        """Charge the next counting query, then answer it: (n / n_k) · #{rows of part k with a value in values}.

        Order of work: the rows are validated against the public domain and the query is charged first (a refused
        or invalid query reads nothing); then the exact count on the secret part is taken.  No noise is added —
        the privacy is the prior's randomness, per Breutigam & Reischuk.  Returns (estimate, charge record).
        """
        arr = self._validate_rows(rows)
        chosen = frozenset(values) if not isinstance(values, (str, bytes)) else values
        charge = self.charge(chosen)
        self._answered = len(self._charges)
        idx = self.__partition[charge.part]
        count = sum(1 for v in arr[idx].tolist() if v in chosen)
        return count * self._n / charge.part_size, charge
