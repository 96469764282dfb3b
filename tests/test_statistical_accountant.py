"""The statistical-privacy accountant: charging before reading, refusals, the secret partition."""

from __future__ import annotations

import copy
import itertools
import math
import pickle
import random
from collections import Counter

import numpy as np
import pytest

from dpmagic.errors import BudgetError, BudgetExceededError, ConfigurationError, DataValidationError
from dpmagic.statistical import (
    BernoulliPrior,
    CategoricalPrior,
    StatisticalPrivacyAccountant,
    draw_partition,
    property_delta,
)


class Replay:
    """A 'generator' replaying a fixed sequence of randrange results (to enumerate every possible draw)."""

    def __init__(self, choices: tuple[int, ...]) -> None:
        self.choices = list(choices)
        self.calls: list[int] = []

    def randrange(self, k: int) -> int:
        self.calls.append(k)
        j = self.choices.pop(0)
        assert 0 <= j < k
        return j


@pytest.mark.parametrize(("n", "sizes"), [(5, (2, 2, 1)), (5, (2, 1)), (4, (1, 1, 1, 1)), (6, (3, 3))])
def test_partition_is_exactly_uniform_over_all_generator_outcomes(n: int, sizes: tuple[int, ...]) -> None:
    outcomes: Counter = Counter()
    draws = list(itertools.product(*(range(i + 1) for i in range(n - 1, 0, -1))))
    for choices in draws:
        rng = Replay(choices)
        parts = draw_partition(n, sizes, rng)
        assert rng.calls == list(range(n, 1, -1))  # randrange(n), …, randrange(2): n − 1 uniform calls
        assert [len(p) for p in parts] == list(sizes)
        flat = np.concatenate(parts)
        assert len(set(flat.tolist())) == sum(sizes) and set(flat.tolist()) <= set(range(n))
        outcomes[tuple(tuple(p.tolist()) for p in parts)] += 1
    n_partitions = math.factorial(n) // (math.prod(math.factorial(s) for s in sizes) * math.factorial(n - sum(sizes)))
    assert len(outcomes) == n_partitions  # every ordered partition of the declared format occurs …
    assert set(outcomes.values()) == {len(draws) // n_partitions}  # … equally often


def test_default_generator_is_the_system_cryptographic_one_and_sizes_hold() -> None:
    parts = draw_partition(1000, (300, 300, 399))
    assert [len(p) for p in parts] == [300, 300, 399]
    assert len(set(np.concatenate(parts).tolist())) == 999


def make(**kw) -> StatisticalPrivacyAccountant:
    args = {"prior": BernoulliPrior(0.5), "n": 1024, "parts": 32, "epsilon": 0.05, "delta": 0.2}
    args.update(kw)
    return StatisticalPrivacyAccountant(args.pop("prior"), args.pop("n"), **args)


def test_charges_follow_theorem_5_3_and_refuse_over_target() -> None:
    acc = make(delta=0.1215 * 3 / 32 + 1e-9)
    d32 = property_delta(32, 0.5, 0.05)
    for k in range(3):
        c = acc.charge({1})
        assert (c.part, c.part_size, c.delta_part) == (k, 32, d32)
        assert c.delta_total == pytest.approx((k + 1) * d32 / 32, rel=1e-12)
        assert c.delta_total >= (k + 1) * d32 / 32
    before = acc.public_state()
    with pytest.raises(BudgetExceededError, match="above the target"):
        acc.charge({1})
    assert acc.public_state() == before  # a refused query changes nothing
    assert len(acc.charges) == 3 and acc.parts_left == 29


def test_all_parts_used_is_refused_and_equal_parts_reach_one_curve() -> None:
    acc = make(n=64, parts=4, delta=1.0)
    for _ in range(4):
        acc.charge([1])
    assert acc.delta_spent == pytest.approx(property_delta(16, 0.5, 0.05), rel=1e-12)
    with pytest.raises(BudgetExceededError, match="all 4 parts"):
        acc.charge([1])


def test_answer_is_the_exact_rescaled_count_of_the_secret_part() -> None:
    rows = np.array([1] * 600 + [0] * 424)
    seed = 12345
    acc = make(rng=random.Random(seed), delta=1.0)
    parts = draw_partition(1024, acc.sizes, random.Random(seed))
    for k in range(5):
        est, c = acc.answer(rows, {1})
        assert c.part == k
        assert est == rows[parts[k]].sum() * 1024 / 32  # exact count on part k, rescaled by n / n_k, no noise
    est0, _ = acc.answer(rows, {0, 1})
    assert est0 == 1024.0


def test_categorical_prior_and_query_probability() -> None:
    prior = CategoricalPrior({"a": 0.5, "b": 0.25, "c": 0.25})
    acc = StatisticalPrivacyAccountant(prior, 100, sizes=(50, 30), epsilon=0.5, delta=1.0)
    c = acc.charge({"b"})
    assert c.p == 0.25 and c.delta_part == property_delta(50, 0.25, 0.5)
    with pytest.raises(ConfigurationError, match="not in the prior's domain"):
        acc.charge({"z"})
    assert len(acc.charges) == 1


def test_invalid_data_is_refused_before_charging() -> None:
    acc = make(delta=1.0)
    with pytest.raises(DataValidationError, match="1024 row values"):
        acc.answer([1, 0], {1})
    with pytest.raises(DataValidationError, match="outside the prior's public domain"):
        acc.answer([2] * 1024, {1})
    assert acc.charges == () and acc.delta_spent == 0.0


def test_partition_never_leaves_through_repr_state_or_pickle() -> None:
    acc = make(rng=random.Random(7))
    parts = draw_partition(1024, acc.sizes, random.Random(7))
    text = repr(acc) + str(acc) + repr(acc.public_state())
    assert "partition=<secret>" in repr(acc)
    assert str(parts[0].tolist()[:4])[1:-1] not in text
    for attempt in (lambda: pickle.dumps(acc), lambda: copy.copy(acc), lambda: copy.deepcopy(acc)):
        with pytest.raises(TypeError, match="secret partition"):
            attempt()
    assert "partition" not in acc.public_state()
    assert acc.public_state()["notion"].startswith("statistical privacy (not differential privacy)")


@pytest.mark.parametrize(
    ("kw", "err", "match"),
    [
        ({"prior": {"p": 0.5}}, ConfigurationError, "only for i.i.d."),
        ({"parts": None}, ConfigurationError, "exactly one of parts"),
        ({"sizes": (10, 10)}, ConfigurationError, "exactly one of parts"),
        ({"parts": 2000}, ConfigurationError, "non-empty parts"),
        ({"delta": 0.0}, BudgetError, "δ target"),
        ({"delta": 1.5}, BudgetError, "δ target"),
        ({"epsilon": -0.1}, ConfigurationError, "ε must be"),
        ({"n": 0}, ConfigurationError, "n must be"),
    ],
)
def test_bad_configuration(kw: dict, err: type, match: str) -> None:
    with pytest.raises(err, match=match):
        make(**kw)
