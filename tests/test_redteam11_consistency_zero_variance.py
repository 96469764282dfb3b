"""Red team, session 11: a consistent estimate when some noise variances underflow to 0.

A discrete Laplace of scale b < 1/745 (an ε-session with a large per-query ε) has a variance that underflows to
0.0 in floating point; ``blue`` then solved a singular NᵀDN and ``Session.consistent`` crashed with numpy's
``LinAlgError``.  Exact, deterministic checks only (no randomness is asserted on).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

import dpmagic
from dpmagic.domain.schema import Schema
from dpmagic.domain.sets import Box, CategorySet
from dpmagic.noise.calibration import Noise
from dpmagic.releases.consistency import Consistent, Measurement, blue

SCHEMA = Schema.of({"dataset": "d", "table": "t", "columns": {"a": {"type": "categorical", "values": ["x", "y"]}}})


def _count(values: list[str], value: float, b: float, cell: int) -> Measurement:
    box = Box({"a": CategorySet.of_values(SCHEMA["a"], values)})
    return Measurement(0, "count", cell, (), box, {"n": Fraction(1)}, value, Noise("discrete_laplace", b, 1.0))


def test_blue_with_zero_variances_is_unbiased_and_consistent() -> None:
    basis = np.array([[1.0], [1.0], [-1.0]])  # y0 + y1 = y2
    for variances in ([0.0, 0.0, 0.0], [0.0, 1.0, 2.0], [0.0, 0.0, 5.0]):
        est, a = blue(np.array([3.0, 4.0, 7.0]), np.array(variances), basis)
        assert np.allclose(est, [3.0, 4.0, 7.0], rtol=0, atol=1e-9)  # consistent input: unchanged
        t = np.array([10.0, 20.0, 30.0])
        assert np.allclose(a @ t, t, rtol=0, atol=1e-9)  # A t = t: unbiased
        assert abs(float(basis[:, 0] @ (a @ np.array([1.0, 2.0, 4.0])))) < 1e-9  # the output is consistent


def test_consistent_with_underflowing_variances() -> None:
    ms = [_count(["x"], 5.0, 1e-3, 0), _count(["y"], 6.0, 1e-3, 1), _count(["x", "y"], 11.0, 1e-3, 2)]
    assert all(m.variance == 0.0 for m in ms)
    c = Consistent(ms, SCHEMA)
    assert c.dependencies == 1
    assert np.allclose(c.estimate, [5.0, 6.0, 11.0], rtol=0, atol=1e-9)
    assert 0.0 <= c.halfwidth({0: 1.0}) < 0.01


def test_session_consistent_at_a_large_epsilon() -> None:
    df, schema = dpmagic.load_adult()
    s = dpmagic.Session(df, schema, "epsilon=100000.0")
    s.query("SELECT COUNT(*) FROM adult", epsilon=1000.0)
    s.query("SELECT sex, COUNT(*) FROM adult GROUP BY sex", epsilon=1000.0)
    table = s.consistent()
    assert table.attrs["dependencies"] == 1
    assert (table["consistent"] - table["raw"]).abs().max() < 1e-6
