"""MIN / MAX: an exponential mechanism (OpenDP's report-noisy-max) over a public candidate grid, with a score
whose L∞ sensitivity is 1 under both neighbouring relations and a public tie-break (dpmagic.aggregates.quantile)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmagic import Session
from dpmagic.aggregates.quantile import candidates, extreme_scores
from dpmagic.domain.schema import Schema
from dpmagic.errors import QueryError

SCHEMA = Schema.from_dict(
    {
        "table": "t",
        "dataset": "minmax-test",
        "columns": {
            "g": {"type": "categorical", "values": ["a", "b"]},
            "v": {"type": "int", "lower": 0, "upper": 9},
            "f": {"type": "float", "lower": 0.0, "upper": 1.0},
        },
    }
)
VALUES = list(range(10))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(VALUES), max_size=6), st.sampled_from([0.0, 1.0]))
def test_score_sensitivity_is_one_under_both_relations(data: list[int], alpha: float) -> None:
    """Brute force: every added, removed or replaced row moves every candidate's score by at most 1."""
    cands = candidates(0, 9, True)
    base = np.array(extreme_scores(np.array(data, dtype=float), cands, alpha))
    neighbours = [data + [x] for x in VALUES]  # add
    neighbours += [data[:i] + data[i + 1 :] for i in range(len(data))]  # remove
    neighbours += [data[:i] + [x] + data[i + 1 :] for i in range(len(data)) for x in VALUES]  # replace
    for other in neighbours:
        moved = np.array(extreme_scores(np.array(other, dtype=float), cands, alpha)) - base
        assert np.max(np.abs(moved)) <= 1.0 + 1e-12


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_best_score_is_the_extreme_on_the_grid(alpha: float) -> None:
    cands = candidates(0, 9, True)
    for data in itertools.chain.from_iterable(itertools.combinations(VALUES, k) for k in (1, 2, 3)):
        best = cands[int(np.argmax(extreme_scores(np.array(data, dtype=float), cands, alpha)))]
        assert best == (min(data) if alpha == 0.0 else max(data))


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    return pd.DataFrame(
        {"g": rng.choice(["a", "b"], 200), "v": rng.integers(2, 8, 200), "f": rng.uniform(0.2, 0.7, 200)}
    )


def test_min_max_at_negligible_noise_match_the_data() -> None:
    df = _frame()
    s = Session(df, SCHEMA, "epsilon=1e9")
    r = s.query("SELECT g, MIN(v) AS lo, MAX(v) AS hi, MIN(f) AS flo FROM t GROUP BY g", epsilon=1e8).df
    truth = df.groupby("g").agg(lo=("v", "min"), hi=("v", "max"), flo=("f", "min"))
    for _, row in r.iterrows():
        assert row["lo"] == truth.loc[row["g"], "lo"] and row["hi"] == truth.loc[row["g"], "hi"]
        assert truth.loc[row["g"], "flo"] - 1e-3 - 1e-12 <= row["flo"] <= truth.loc[row["g"], "flo"]  # grid of 1,001


def test_min_max_cost_and_refusals() -> None:
    s = Session(_frame(), SCHEMA, "epsilon=1.0")
    s.query("SELECT MIN(v), MAX(v) FROM t", epsilon=0.5)
    assert s.spent == pytest.approx(0.5)
    gdp = Session(_frame(), SCHEMA, "mu=1.0")
    with pytest.raises(QueryError, match="MIN, MAX"):
        gdp.query("SELECT MAX(v) FROM t", mu=0.5)
    assert gdp.spent == 0.0


@pytest.mark.parametrize("definition", ["pure", "zcdp"])
def test_a_replaced_row_across_two_cells_costs_at_most_the_share(definition: str) -> None:
    """Under replace-one with GROUP BY two cells' scores move by 1 each: each cell is calibrated at half."""
    from dpmagic.aggregates.common import calibration
    from dpmagic.aggregates.quantile import _extreme_chain, plan

    for grouped in (False, True):
        cal = calibration(definition, 0.4, replace_one=True, grouped=grouped)
        p = plan(0, 9, True, 0.0, cal)
        per_cell = float(_extreme_chain(len(p.candidates), definition, p.scale).map(1.0))
        assert (2 if grouped else 1) * per_cell <= 0.4 * (1 + 1e-9)
