"""A quoted number compared with an int or float column (issue 29): ``"education-num" = '13'`` is read as the number
13 when the whole string is a SQL numeric literal, with a note in the answer saying so; anything else (a word, a
number with spaces or a suffix, ``inf``, ``nan``, hex, digit separators) keeps the one clear refusal, and a refused
query spends nothing.  The box is the one of the unquoted literal (same coverage, same charge)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from dpmagic import Session
from dpmagic.domain.schema import Schema
from dpmagic.errors import QueryTypeError
from dpmagic.query.regions import QueryNoteWarning
from dpmagic.query.sql import parse_query

SCHEMA = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "educ": {"type": "int", "lower": 1, "upper": 16},
            "w": {"type": "float", "lower": 0.0, "upper": 10.0},
            "g": {"type": "categorical", "values": ["a", "b"]},
        },
    }
)

#: quoted → unquoted (the same query)
SAME = {
    "SELECT COUNT(*) FROM t WHERE educ = '13'": "SELECT COUNT(*) FROM t WHERE educ = 13",
    "SELECT COUNT(*) FROM t WHERE educ IN ('9', '13', '+14')": "SELECT COUNT(*) FROM t WHERE educ IN (9, 13, 14)",
    "SELECT COUNT(*) FROM t WHERE educ NOT IN ('9')": "SELECT COUNT(*) FROM t WHERE educ NOT IN (9)",
    "SELECT COUNT(*) FROM t WHERE educ BETWEEN '9' AND '12' AND w > '2.5'": (
        "SELECT COUNT(*) FROM t WHERE educ BETWEEN 9 AND 12 AND w > 2.5"
    ),
    "SELECT COUNT(*) FROM t WHERE w <= '1e1' OR educ >= '-3'": "SELECT COUNT(*) FROM t WHERE w <= 1e1 OR educ >= -3",
}


@pytest.mark.parametrize(("quoted", "plain"), list(SAME.items()))
def test_a_quoted_number_is_read_as_the_number_with_a_note(quoted: str, plain: str) -> None:
    with pytest.warns(QueryNoteWarning, match="was read as the number"):
        q = parse_query(quoted, SCHEMA)
    p = parse_query(plain, SCHEMA)
    assert q.where == p.where and q.filter == p.filter and q.key == p.key
    assert q.notes and all("without quotes" in n for n in q.notes)
    assert not p.notes


def test_the_note_is_shown_with_the_answer_and_the_answer_is_the_unquoted_one() -> None:
    """At ε = 10⁶ the count's discrete Laplace noise (scale 10⁻⁶) is 0 except with probability below 10⁻¹⁰⁰⁰⁰⁰:
    the false-failure probability of this test."""
    rng = np.random.default_rng(0)
    df = pd.DataFrame(
        {"educ": rng.integers(1, 17, 500), "w": rng.uniform(0, 10, 500), "g": rng.choice(["a", "b"], 500)}
    )
    s = Session(df, SCHEMA, budget="epsilon=1e7")
    with pytest.warns(QueryNoteWarning):
        r = s.query("SELECT COUNT(*) AS n FROM t WHERE educ = '13'", epsilon=1e6)
    assert r.df["n"][0] == (df["educ"] == 13).sum()
    assert any("'13' was read as the number 13" in n for n in r.notes)
    assert "'13' was read as the number 13" in str(r)


@pytest.mark.parametrize(
    "literal", ["'thirteen'", "' 13'", "'13 '", "'13x'", "'inf'", "'nan'", "'0x0d'", "'1_3'", "''"]
)
def test_anything_else_stays_refused_and_spends_nothing(literal: str) -> None:
    s = Session(pd.DataFrame({"educ": [1, 2], "w": [0.5, 1.0], "g": ["a", "b"]}), SCHEMA, budget="epsilon=1")
    with warnings.catch_warnings():
        warnings.simplefilter("error", QueryNoteWarning)  # no note for a value that is refused
        with pytest.raises(QueryTypeError, match="cannot be compared with the string"):
            s.query(f"SELECT COUNT(*) FROM t WHERE educ = {literal}", epsilon=0.5)
    assert s.spent == 0 and len(s.accountant) == 0


def test_a_categorical_column_of_strings_still_compares_strings() -> None:
    with pytest.raises(QueryTypeError, match="string categories"):
        parse_query("SELECT COUNT(*) FROM t WHERE g = 1", SCHEMA)
    q = parse_query("SELECT COUNT(*) FROM t WHERE g = 'a'", SCHEMA)
    assert not q.notes


def test_notes_are_collected_per_thread() -> None:
    """A server parses concurrently: a note given in another thread never reaches this thread's collection, and
    each parse keeps its own notes."""
    import threading

    from dpmagic.query.regions import collecting_notes

    with collecting_notes() as mine, warnings.catch_warnings():
        warnings.simplefilter("ignore", QueryNoteWarning)
        t = threading.Thread(target=lambda: parse_query("SELECT COUNT(*) FROM t WHERE educ = '13'", SCHEMA))
        t.start()
        t.join()
        q = parse_query("SELECT COUNT(*) FROM t WHERE educ = '12'", SCHEMA)
    assert mine == []  # neither the other thread's note nor the nested parse's
    assert q.notes == ("'12' was read as the number 12: column 'educ' is int (write educ = 12, without quotes)",)
