"""Red team, session 11: the consistent estimates' intervals cover at their stated level, and the estimate is
unbiased, by simulation with OpenDP's own samplers on a realistic hierarchy of counts (a total, two marginals and
their cross-tabulation: 20 counts, 8 dependencies), with discrete Laplace noises of three scales, and with
discrete Laplace and discrete Gaussian noises mixed.

False-failure probability: the seed is fixed, so the test is deterministic and cannot flake; were the seed drawn
at random, each output's miss count exceeds ``MISS_LIMIT`` with probability ≤ 1e-9 when its true miss rate is at
most 5% (binomial tail), so the coverage check would fail falsely with probability ≤ 2 · 20 · 1e-9 (union bound over both tests),
and the unbiasedness check (|mean error| ≤ 6 estimated standard errors per output; by the normal approximation
of a mean of 3,000 independent light-tailed errors, a 6σ tail is about 2e-9) likewise about 20 · 2e-9.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from scipy import stats

from dpmagic.domain.schema import Schema
from dpmagic.domain.sets import Box, CategorySet
from dpmagic.noise.calibration import Noise
from dpmagic.noise.samplers import vector_measurement
from dpmagic.releases.consistency import Consistent, Measurement

A, B = ["a0", "a1", "a2"], ["b0", "b1", "b2", "b3"]
SCHEMA = Schema.of(
    {
        "dataset": "d",
        "table": "t",
        "columns": {"a": {"type": "categorical", "values": A}, "b": {"type": "categorical", "values": B}},
    }
)
SPECS: list[tuple[list[str] | None, list[str] | None]] = (
    [(None, None)] + [([a], None) for a in A] + [(None, [b]) for b in B] + [([a], [b]) for a in A for b in B]
)
TRIALS = 3000
MISS_LIMIT = int(stats.binom.isf(1e-9, TRIALS, 0.05))


def _box(a: list[str] | None, b: list[str] | None) -> Box:
    cons = {}
    if a:
        cons["a"] = CategorySet.of_values(SCHEMA["a"], a)
    if b:
        cons["b"] = CategorySet.of_values(SCHEMA["b"], b)
    return Box(cons)


def _run(noises: list[Noise]) -> None:
    truth = np.random.default_rng(11).integers(0, 500, (len(A), len(B)))
    t = np.array(
        [float(truth[np.ix_([A.index(x) for x in (a or A)], [B.index(x) for x in (b or B)])].sum()) for a, b in SPECS]
    )
    ms = [
        Measurement(0, "count", i, (), _box(a, b), {"n": Fraction(1)}, t[i], noises[i])
        for i, (a, b) in enumerate(SPECS)
    ]
    c = Consistent(ms, SCHEMA)
    assert c.dependencies == 8
    hw = np.array([c.halfwidth({i: 1.0}) for i in range(len(ms))])
    errors = np.stack(
        [np.array(vector_measurement(n.kind, n.scale)([0] * TRIALS), dtype=float) for n in noises], axis=1
    )
    err = (t[None, :] + errors) @ c.a.T - t[None, :]  # the estimate's error in every trial
    misses = (np.abs(err) > hw[None, :]).sum(axis=0)
    assert misses.max() <= MISS_LIMIT, (misses, MISS_LIMIT)
    se = err.std(axis=0) / math.sqrt(TRIALS)
    assert (np.abs(err.mean(axis=0)) <= 6 * se).all()
    raw = np.array([n.ci_halfwidth(0.95) for n in noises])
    assert (hw[:1] < raw[:1]).all()  # the total (the noisiest) gains from its 19 refinements


def test_coverage_discrete_laplace_three_scales() -> None:
    scales = [20.0] + [5.0] * 7 + [2.0] * 12
    _run([Noise("discrete_laplace", b, 1.0) for b in scales])


def test_coverage_laplace_and_gaussian_mixed() -> None:
    _run(
        [
            Noise("discrete_laplace", 3.0, 1.0) if i % 2 else Noise("discrete_gaussian", 12.0, 1.0)
            for i in range(len(SPECS))
        ]
    )
