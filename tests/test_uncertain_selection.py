"""Selections on noisy values are labelled (issue 27, item 4): HAVING and ORDER BY … LIMIT show the noisy values
they read, with their intervals, and say which memberships, cuts and orders the 95% intervals do not settle.

The labelling is post-processing of a released frame (:func:`dpmagic.query.outputs.finish`), so it is checked
deterministically on hand-made released frames, and end to end on data where the answer is certain."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dpmagic import Session
from dpmagic.domain.schema import Schema
from dpmagic.query.outputs import finish
from dpmagic.query.sql import parse_query
from dpmagic.releases.postprocess import answer_notes

SCHEMA = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "g": {"type": "categorical", "values": ["a", "b", "c", "d"]},
            "x": {"type": "int", "lower": 0, "upper": 100},
        },
    }
)


def released(query_sql: str, rows: list[tuple[str, float, float, float]]) -> pd.DataFrame:
    """A released frame of ``query_sql``'s single AVG(x) per group g: (g, value, ci_low, ci_high) rows."""
    q = parse_query(query_sql, SCHEMA)
    (agg,) = q.aggregates
    frame = pd.DataFrame(rows, columns=["g", agg.alias, f"{agg.alias}_ci_low", f"{agg.alias}_ci_high"])
    return finish(q, frame), q


def test_having_shows_the_hidden_value_and_labels_uncertain_membership() -> None:
    rows = [("a", 60.0, 55.0, 65.0), ("b", 52.0, 45.0, 59.0), ("c", 48.0, 41.0, 55.0), ("d", 20.0, 15.0, 25.0)]
    df, q = released("SELECT g FROM t GROUP BY g HAVING AVG(x) > 50", rows)
    assert list(df["g"]) == ["a", "b"]
    assert list(df.columns) == ["g", "avg(x)", "avg(x)_ci_low", "avg(x)_ci_high"]
    notes = answer_notes(q, df)
    assert len(notes) == 1
    assert "membership is uncertain for 2 groups" in notes[0]
    assert "kept but uncertain: b" in notes[0] and "left out but uncertain: c" in notes[0]
    assert "--fnr" in notes[0]


def test_having_settled_by_the_intervals_has_no_note() -> None:
    rows = [("a", 60.0, 55.0, 65.0), ("b", 30.0, 25.0, 35.0), ("c", 80.0, 79.0, 81.0), ("d", 20.0, 15.0, 25.0)]
    df, q = released("SELECT g, AVG(x) AS m FROM t GROUP BY g HAVING m > 50", rows)
    assert list(df["g"]) == ["a", "c"] and answer_notes(q, df) == []


def test_having_on_a_value_without_interval_is_not_assessed() -> None:
    rows = [("a", 60.0, np.nan, np.nan), ("b", 30.0, np.nan, np.nan), ("c", 80.0, np.nan, np.nan), ("d", 2.0, 1.0, 3.0)]
    df, q = released("SELECT g FROM t GROUP BY g HAVING AVG(x) > 50", rows)
    assert any("not assessed" in n for n in answer_notes(q, df))


def test_limit_cut_and_order_are_labelled() -> None:
    rows = [("a", 60.0, 55.0, 65.0), ("b", 58.0, 50.0, 66.0), ("c", 52.0, 49.0, 54.0), ("d", 20.0, 15.0, 25.0)]
    df, q = released("SELECT g, AVG(x) AS m FROM t GROUP BY g ORDER BY m DESC LIMIT 2", rows)
    assert list(df["g"]) == ["a", "b"]
    notes = answer_notes(q, df)
    assert any("the cut is uncertain" in n and "c (left out)" in n for n in notes)
    assert any("order of the rows shown is uncertain" in n and "a / b" in n for n in notes)
    rows = [("a", 90.0, 89.0, 91.0), ("b", 70.0, 69.0, 71.0), ("c", 52.0, 49.0, 54.0), ("d", 20.0, 15.0, 25.0)]
    df, q = released("SELECT g, AVG(x) AS m FROM t GROUP BY g ORDER BY m DESC LIMIT 2", rows)
    assert answer_notes(q, df) == []
    df, q = released("SELECT g, AVG(x) AS m FROM t GROUP BY g ORDER BY m ASC LIMIT 1", rows)
    assert list(df["g"]) == ["d"] and answer_notes(q, df) == []


def test_end_to_end_certain_answers_carry_values_and_no_note() -> None:
    rng = np.random.default_rng(0)
    g = np.repeat(["a", "b", "c", "d"], 2000)
    x = np.concatenate(
        [rng.integers(5, 15, 2000), rng.integers(85, 95, 2000), rng.integers(40, 45, 2000), rng.integers(60, 65, 2000)]
    )
    s = Session(pd.DataFrame({"g": g, "x": x}), SCHEMA, budget=1e6)
    r = s.query("SELECT g FROM t GROUP BY g HAVING AVG(x) > 50 ORDER BY AVG(x) DESC", epsilon=1000.0)
    assert list(r.df["g"]) == ["b", "d"] and "avg(x)_ci_low" in r.df.columns and r.notes == []
    low = s.query("SELECT g FROM t GROUP BY g HAVING AVG(x) > 50", epsilon=0.0001)
    assert "avg(x)" in low.df.columns  # the noisy value is shown whatever the noise


def test_avg_interval_at_an_extreme_budget_is_the_value_not_the_whole_range() -> None:
    """Issue 27, item 8: with both releases exact at the 95% level (ε = 10⁷), AVG's interval is the value itself,
    not [lower, upper]; with noise it is never a bound alone."""
    from dpmagic.aggregates.basic import ratio_estimate

    est, low, high = ratio_estimate(np.array([180.0]), 0.0, np.array([10.0]), 0.0, 0.0, 100.0)
    assert est[0] == low[0] == high[0] == 18.0
    est, low, high = ratio_estimate(np.array([5000.0]), 1.0, np.array([10.0]), 1.0, 0.0, 100.0)  # pushed past 100
    assert (low[0], high[0]) == (0.0, 100.0)
    rng = np.random.default_rng(1)
    g = np.repeat(["a", "b", "c", "d"], 50)
    s = Session(pd.DataFrame({"g": g, "x": rng.integers(0, 101, 200)}), SCHEMA, budget=1e8)
    r = s.query("SELECT g, AVG(x) AS m FROM t GROUP BY g", epsilon=1e7)
    assert ((r.df["m_ci_high"] - r.df["m_ci_low"]) < 1.0).all()


def test_a_quantile_states_an_interval_and_no_value_for_a_group_that_may_be_empty() -> None:
    """Issue 27, item 1: a MEDIAN states a 95% interval around its value (end to end: groups of 3,000 rows at
    ε = 1 show a value unless the noise of the interval histogram exceeds ~1,500, probability < 1e-100); a group
    whose noisy histogram cannot rule out that it is empty gets NaN and a note (the notes on a released frame)."""
    rng = np.random.default_rng(2)
    frame = pd.DataFrame({"g": ["a"] * 3000 + ["b"] * 3000, "x": rng.integers(0, 101, 6000)})
    s = Session(frame, SCHEMA, budget=100)
    r = s.query("SELECT g, MEDIAN(x) AS med FROM t WHERE g IN ('a', 'b') GROUP BY g", epsilon=1.0)
    assert list(r.df["g"]) == ["a", "b"]
    assert r.df["med_ci_low"].notna().all() and (r.df["med_ci_low"] <= r.df["med"]).all()
    assert (r.df["med"] <= r.df["med_ci_high"]).all() and not r.notes
    q = parse_query("SELECT g, MEDIAN(x) AS med FROM t GROUP BY g", SCHEMA)
    df = pd.DataFrame({"g": ["a", "b"], "med": [50.0, np.nan], "med_ci_low": [45.0, 0.0], "med_ci_high": [55.0, 100.0]})
    (note,) = answer_notes(q, df)
    assert note.startswith("med: not shown (NaN) for 1 group (b)") and "empty" in note
