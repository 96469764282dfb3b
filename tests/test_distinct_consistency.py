"""COUNT(DISTINCT) never shows an impossible value (issue 27, item 5): clipped into [0, the declared values of the
column inside the WHERE box], its interval intersected with the same range (coverage kept), and --nonneg /
--integer apply to it as to COUNT."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests_support import DATA

from dpmagic import Session
from dpmagic.accountant.currency import Definition
from dpmagic.aggregates.distinct import release
from dpmagic.noise.calibration import calibrate
from dpmagic.noise.sensitivity import Sensitivity


@pytest.fixture(scope="module")
def pums() -> Session:
    return Session(pd.read_csv(DATA / "pums.csv"), DATA / "pums.schema.json", budget=1e9)


@pytest.mark.parametrize(
    ("sql", "cap"),
    [
        ("SELECT COUNT(DISTINCT sex) AS d FROM pums", 2),
        ("SELECT COUNT(DISTINCT educ) AS d FROM pums WHERE educ IN (1, 2, 3)", 3),
        ("SELECT COUNT(DISTINCT age) AS d FROM pums WHERE age BETWEEN 10 AND 19", 10),
        ("SELECT married, COUNT(DISTINCT race) AS d FROM pums GROUP BY married", 6),
    ],
)
def test_distinct_counts_stay_within_the_declared_values(pums: Session, sql: str, cap: int) -> None:
    for _ in range(20):  # at a tiny ε the raw noise is far beyond the cap: every answer must be clipped
        df = pums.query(sql, epsilon=0.001, fresh=True).df
        assert ((df["d"] >= 0) & (df["d"] <= cap)).all()
        assert ((df["d_ci_low"] >= 0) & (df["d_ci_high"] <= cap) & (df["d_ci_low"] <= df["d_ci_high"])).all()


def test_nonneg_and_integer_apply_to_distinct(pums: Session) -> None:
    df = pums.query("SELECT COUNT(DISTINCT age) AS d FROM pums", epsilon=1.0, postprocess=("integer",)).df
    assert df["d"].dtype.kind == "i" and df["d_ci_low"].dtype.kind == "i"


@settings(max_examples=300, deadline=None)
@given(
    truth=st.integers(0, 12),
    cap=st.integers(0, 12),
    offset=st.floats(-40.0, 40.0),
    scale=st.sampled_from([0.5, 3.0, 30.0]),
)
def test_clipping_keeps_the_exact_value_inside_whenever_the_raw_interval_held_it(
    truth: int, cap: int, offset: float, scale: float
) -> None:
    """With the noisy value fixed at truth + offset: the clipped value and interval lie in [0, cap], and whenever
    the raw interval [noisy ± h] held the exact value, the clipped interval holds it too (coverage kept)."""
    truth = min(truth, cap)  # an exact distinct count never exceeds the cap
    noise = calibrate(Definition.PURE, 1.0 / scale, Sensitivity(((1,),)))
    h = noise.ci_halfwidth(0.95)
    noisy = float(truth) + offset
    with patch("dpmagic.aggregates.distinct.release_integer", return_value=np.array([noisy])):
        value, low, high = release(np.array([truth]), noise, 0.95, float(cap))
    assert 0.0 <= value[0] <= cap and 0.0 <= low[0] <= high[0] <= cap
    if noisy - h <= truth <= noisy + h:
        assert low[0] <= truth <= high[0]
