"""Partition composition of statistical privacy (Theorems 5.1 and 5.3) against brute force on tiny databases.

The brute force enumerates every value of the other rows (categorical prior, exact Fractions) and every order of
the row indices (each of the n! orders equally likely gives the uniform secret partition), builds the exact
distribution of the transcript of answers for each value of the critical row, and takes the hockey-stick
divergence over every ordered pair of values.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from fractions import Fraction

import pytest

from dpmagic.errors import ConfigurationError
from dpmagic.statistical import (
    CategoricalPrior,
    check_part_sizes,
    equal_part_sizes,
    equal_partition_delta,
    partition_delta,
    property_delta,
)

PROBS = {0: Fraction(1, 2), 1: Fraction(1, 3), 2: Fraction(1, 6)}
PRIOR = CategoricalPrior({k: float(v) for k, v in PROBS.items()})

# a query policy: given the answers so far, the set of values the next query counts
Policy = Callable[[tuple[int, ...]], frozenset[int]]


def transcript_distribution(n: int, sizes: Sequence[int], policy: Policy, critical_value: int) -> dict:
    """Exact distribution of the answers (exact counts per part) when row 0 equals ``critical_value``."""
    dist: dict[tuple[int, ...], Fraction] = defaultdict(Fraction)
    orders = list(itertools.permutations(range(n)))
    w_order = Fraction(1, len(orders))
    for others in itertools.product(PROBS, repeat=n - 1):
        rows = (critical_value, *others)
        w_rows = math.prod((PROBS[v] for v in others), start=Fraction(1))
        for order in orders:
            answers: tuple[int, ...] = ()
            start = 0
            for s in sizes:
                chosen = policy(answers)
                answers += (sum(1 for i in order[start : start + s] if rows[i] in chosen),)
                start += s
            dist[answers] += w_rows * w_order
    return dist


def hockey(p: dict, q: dict, eps: float) -> Fraction:
    e = Fraction(math.exp(eps))
    return sum(
        (max(Fraction(0), p.get(a, Fraction(0)) - e * q.get(a, Fraction(0))) for a in set(p) | set(q)), Fraction(0)
    )


def brute_delta(n: int, sizes: Sequence[int], policy: Policy, eps: float) -> Fraction:
    dists = {v: transcript_distribution(n, sizes, policy, v) for v in PROBS}
    return max(hockey(dists[v], dists[w], eps) for v in PROBS for w in PROBS if v != w)


def prob(values: frozenset[int]) -> float:
    return PRIOR.probability(values)


@pytest.mark.parametrize(
    ("n", "sizes", "queries"),
    [
        (5, (5,), [{0}]),
        (5, (3, 2), [{0}, {1, 2}]),
        (5, (2, 2, 1), [{1}, {0, 2}, {2}]),
        (5, (2, 1), [{0}, {0}]),  # parts need not cover every row
        (4, (2, 2), [{2}, {0, 1}]),
    ],
)
@pytest.mark.parametrize("eps", [0.0, 0.2, 1.0])
def test_nonadaptive_composition_bounds_brute_force(n: int, sizes, queries, eps: float) -> None:
    qs = [frozenset(q) for q in queries]
    brute = float(brute_delta(n, sizes, lambda a: qs[len(a)], eps))
    formula = partition_delta(n, sizes, [property_delta(s, prob(q), eps) for s, q in zip(sizes, qs)])
    assert brute <= formula + 1e-12
    if len(sizes) == 1 and sizes[0] == n:  # one query on every row: the curve itself, exactly
        assert brute == pytest.approx(formula, rel=1e-9)


def test_each_term_is_exact_given_the_part_of_the_critical_row() -> None:
    # Conditioned on the critical row being in part k, the divergence is exactly δ(n_k, p_k, ε) (proof of Lemma 5.1).
    n, sizes, qs, eps = 4, (3, 1), [frozenset({0}), frozenset({1})], 0.3
    for k in range(2):
        start = sum(sizes[:k])
        dists = {}
        for v in PROBS:
            d: dict = defaultdict(Fraction)
            for others in itertools.product(PROBS, repeat=n - 1):
                rows = (v, *others)
                w = math.prod((PROBS[x] for x in others), start=Fraction(1))
                for order in itertools.permutations(range(n)):
                    if 0 not in order[start : start + sizes[k]]:
                        continue
                    ans, st = (), 0
                    for s, q in zip(sizes, qs):
                        ans += (sum(1 for i in order[st : st + s] if rows[i] in q),)
                        st += s
                    d[ans] += w
            total = sum(d.values())
            dists[v] = {a: x / total for a, x in d.items()}
        got = max(float(hockey(dists[v], dists[w], eps)) for v in PROBS for w in PROBS if v != w)
        assert got == pytest.approx(property_delta(sizes[k], prob(qs[k]), eps), rel=1e-9)


@pytest.mark.parametrize("eps", [0.0, 0.25, 0.8])
def test_adaptive_composition_bounds_brute_force(eps: float) -> None:
    # Theorem 5.3: δ = Σ_k (n_k/n) E_X[Δ_{n_k}^{F_k(X)}], X the earlier answers from parts without the critical row.
    n, sizes = 5, (2, 2, 1)

    def policy(a: tuple[int, ...]) -> frozenset[int]:
        if not a:
            return frozenset({0})
        if len(a) == 1:
            return frozenset({1}) if a[0] >= 1 else frozenset({1, 2})
        return frozenset({2}) if a[0] + a[1] >= 2 else frozenset({0, 2})

    brute = float(brute_delta(n, sizes, policy, eps))

    # E over the answers of earlier parts (i.i.d. rows, critical row elsewhere): exact binomials
    def binom(s: int, p: float) -> list[float]:
        return [math.comb(s, c) * p**c * (1 - p) ** (s - c) for c in range(s + 1)]

    def expected_delta(k: int) -> float:
        total = 0.0
        for prefix in itertools.product(*(range(s + 1) for s in sizes[:k])):
            w, a = 1.0, ()
            for s, c in zip(sizes, prefix):
                w *= binom(s, prob(policy(a)))[c]
                a += (c,)
            total += w * property_delta(sizes[k], prob(policy(a)), eps)
        return total

    theorem = sum(s / n * expected_delta(k) for k, s in enumerate(sizes))
    assert brute <= theorem + 1e-12
    # the accountant's per-transcript charge is at least the expectation on the worst transcript
    worst = 0.0
    for prefix in itertools.product(*(range(s + 1) for s in sizes)):
        a: tuple[int, ...] = ()
        charge = 0.0
        for k, s in enumerate(sizes):
            charge += s / n * property_delta(s, prob(policy(a)), eps)
            a += (prefix[k],)
        worst = max(worst, charge)
    assert theorem <= worst + 1e-12


def test_equal_parts_reduce_to_one_curve() -> None:
    assert equal_partition_delta(2**15, 32, 0.5, 0.005) == pytest.approx(property_delta(1024, 0.5, 0.005), rel=1e-14)
    assert equal_part_sizes(10, 3) == (4, 3, 3)
    d = equal_partition_delta(10, 3, 0.5, 0.1)
    assert d == pytest.approx(0.4 * property_delta(4, 0.5, 0.1) + 0.6 * property_delta(3, 0.5, 0.1), rel=1e-14)


def test_partition_delta_is_never_understated() -> None:
    sizes, deltas = (3, 3, 4), (0.1, 0.2, 0.3)
    exact = Fraction(3, 10) * Fraction(0.1) + Fraction(3, 10) * Fraction(0.2) + Fraction(4, 10) * Fraction(0.3)
    assert Fraction(partition_delta(10, sizes, deltas)) >= exact


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: check_part_sizes(10, (6, 5)), "sum to 11"),
        (lambda: check_part_sizes(10, ()), "non-empty"),
        (lambda: check_part_sizes(10, (3, 0)), "part size #2"),
        (lambda: equal_part_sizes(3, 4), "non-empty parts"),
        (lambda: partition_delta(10, (5, 5), (0.1,)), "2 part sizes but 1"),
        (lambda: partition_delta(10, (5, 5), (0.1, 1.5)), "δ_k"),
    ],
)
def test_bad_composition_input(call, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        call()
