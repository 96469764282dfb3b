"""Red team, session 11: two analyst clamps that differ beyond six significant digits are different quantities.

``Aggregate.sum_key`` named a clamped column with ``:g`` (six significant digits), so ``CLAMP(x, 0, 1234567)`` and
``CLAMP(x, 0, 1234568)`` shared one key: the second SUM was released as the first's value (a wrong value whose
interval need not cover its own truth), and the consistent estimates treated the two as one quantity (an
invented identity).  Exact checks only: no randomness is asserted on.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import dpmagic
from dpmagic.domain.schema import Schema
from dpmagic.query.model import Aggregate

SCHEMA = Schema.of(
    {
        "dataset": "d",
        "table": "t",
        "columns": {
            "g": {"type": "categorical", "values": ["a", "b"]},
            "x": {"type": "int", "lower": 0, "upper": 10_000_000},
        },
    }
)


@example(0, 1234567, 0, 1234568)
@given(
    st.integers(-(10**12), 10**12),
    st.integers(-(10**12), 10**12),
    st.integers(-(10**12), 10**12),
    st.integers(-(10**12), 10**12),
)
def test_sum_keys_of_different_clamps_differ(a: int, b: int, c: int, d: int) -> None:
    x = Aggregate("sum", "x", "s", (float(a), float(b)))
    y = Aggregate("sum", "x", "s", (float(c), float(d)))
    assert (x.sum_key == y.sum_key) == ((a, b) == (c, d))
    assert (str(x) == str(y)) == ((a, b) == (c, d))


def test_short_clamps_keep_their_short_keys() -> None:
    assert Aggregate("sum", "x", "s", (0.0, 100.0)).sum_key == "x[0:100]"
    assert Aggregate("sum", "x", "s", (float("-inf"), 2.5)).sum_key == "x[-inf:2.5]"


@pytest.fixture(scope="module")
def session() -> dpmagic.Session:
    rng = np.random.default_rng(11)
    df = pd.DataFrame({"g": rng.choice(["a", "b"], 500), "x": rng.integers(0, 10_000_000, 500)})
    return dpmagic.Session(df, SCHEMA, "epsilon=100.0")


def test_two_close_clamps_in_one_query_are_two_releases(session: dpmagic.Session) -> None:
    r = session.query(
        "SELECT SUM(LEAST(GREATEST(x, 0), 1234567)) AS a, SUM(LEAST(GREATEST(x, 0), 1234568)) AS b FROM t",
        epsilon=1.0,
    )
    keys = {a.sum_key for a in r.query.aggregates}
    assert len(keys) == 2
    assert set(r.drawn.raw) == keys  # one noisy release per clamp, not one shared by both


def test_two_close_clamps_across_queries_are_two_quantities(session: dpmagic.Session) -> None:
    session.query("SELECT SUM(LEAST(GREATEST(x, 0), 2345678)) AS a FROM t", epsilon=1.0)
    session.query("SELECT SUM(LEAST(GREATEST(x, 0), 2345679)) AS b FROM t", epsilon=1.0)
    names = {k for r in session.results if getattr(r, "drawn", None) is not None for k in r.drawn.raw}
    assert "x[0:2345678]" in names and "x[0:2345679]" in names
