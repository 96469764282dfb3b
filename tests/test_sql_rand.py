"""RAND() / RANDOM() (a peer corpus shape: ``SELECT PI(), RAND(), POWER(AVG(age), 2) FROM PUMS.PUMS``): a public
uniform number per output row, drawn from the OS entropy and never from the rows, allowed where it only sits beside
released values (the SELECT list, HAVING, ORDER BY).  In WHERE, GROUP BY or inside an aggregate it would select or
weigh rows at random (a sample, whose privacy this subset does not model): refused at parse time, nothing charged.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpmagic import Session
from dpmagic.errors import UnsupportedQueryError

SCHEMA = {
    "table": "t",
    "columns": {"g": {"type": "categorical", "values": ["a", "b"]}, "x": {"type": "int", "lower": 0, "upper": 9}},
}


@pytest.fixture()
def session() -> Session:
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"g": rng.choice(["a", "b"], 100), "x": rng.integers(0, 10, 100)})
    return Session(df, SCHEMA, "epsilon=10")


def test_rand_in_the_select_list_is_a_public_number_beside_the_answer(session: Session) -> None:
    r = session.query("SELECT PI() AS p, RAND() AS r, POWER(AVG(x), 2) AS a2 FROM t", epsilon=1.0)
    assert 0.0 <= r.df["r"][0] < 1.0 and r.df["p"][0] == pytest.approx(np.pi)
    assert r.df["a2_ci_low"][0] <= r.df["a2"][0] <= r.df["a2_ci_high"][0]
    r = session.query("SELECT RANDOM() AS u, g, COUNT(*) AS n FROM t GROUP BY g ORDER BY u", epsilon=1.0)
    assert sorted(r.df["g"]) == ["a", "b"] and list(r.df["u"]) == sorted(r.df["u"])


@pytest.mark.parametrize(
    ("sql", "where"),
    [
        ("SELECT COUNT(*) FROM t WHERE RAND() < 0.5", "in WHERE"),
        ("SELECT SUM(RAND() * x) FROM t", "in an aggregate"),
        ("SELECT COUNT(*) FROM t GROUP BY RAND()", "in GROUP BY"),
        ("SELECT RAND(7) AS r, COUNT(*) FROM t", "seed"),
    ],
)
def test_rand_elsewhere_is_refused_before_anything_is_charged(session: Session, sql: str, where: str) -> None:
    with pytest.raises(UnsupportedQueryError, match="RAND") as info:
        session.query(sql, epsilon=1.0)
    assert where in str(info.value)
    assert session.spent == 0 and session.ledger_frame().empty


def test_an_aggregate_of_an_aggregate_is_refused_by_name(session: Session) -> None:
    """``SUM(SUM(age))`` (a peer corpus refusal) names the construct, not a row-expression operator."""
    with pytest.raises(UnsupportedQueryError, match="an aggregate inside an aggregate"):
        session.query("SELECT SUM(SUM(x)) FROM t", epsilon=1.0)
    assert session.spent == 0
