"""Constant sub-expressions in WHERE (``PI()``, arithmetic of literals) and quoted numbers for numeric categories
(``educ = '8'``): issue 29's small constructs.  Folding happens at parse time, so the box (and with it the
coverage and the sensitivity) is the one of the folded literal on every backend."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests_support import DATA

from dpmagic.domain.schema import Schema
from dpmagic.errors import QueryTypeError
from dpmagic.query.regions import QueryNoteWarning
from dpmagic.query.sql import parse_query

PUMS = Schema.from_json(DATA / "pums.schema.json")


def box_of(sql: str) -> object:
    return parse_query(sql, PUMS).where


@pytest.mark.parametrize(
    ("folded", "plain"),
    [
        ("age > PI()", "age > 3.141592653589793"),
        ("age BETWEEN PI() AND 10 * PI()", "age BETWEEN 3.141592653589793 AND 31.41592653589793"),
        ("income > 1000 * PI()", "income > 3141.592653589793"),
        ("income < -(2 + 3) * 1000", "income < -5000"),
        ("age >= (1 + 2) * 3", "age >= 9"),
        ("age > 7 / 2", "age > 3"),  # int / int truncates, as everywhere in dpmagic's SQL
        ("age > 7.0 / 2", "age > 3.5"),
        ("age IN (2 * 5, 3 * 5)", "age IN (10, 15)"),
    ],
)
def test_a_constant_expression_is_the_box_of_its_value(folded: str, plain: str) -> None:
    assert box_of(f"SELECT COUNT(*) FROM pums WHERE {folded}") == box_of(f"SELECT COUNT(*) FROM pums WHERE {plain}")


@settings(max_examples=60, deadline=None)
@given(a=st.integers(-50, 150), b=st.integers(1, 9), c=st.integers(-20, 20), op=st.sampled_from(["<", "<=", ">", ">="]))
def test_folded_arithmetic_matches_python_on_the_int_domain(a: int, b: int, c: int, op: str) -> None:
    """`age op a * b + c` selects exactly the declared ages x with x op (a·b + c) (brute force over 0..100)."""
    box = box_of(f"SELECT COUNT(*) FROM pums WHERE age {op} {a} * {b} + {c}")
    t = a * b + c
    cmp = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal}[op]
    want = {x for x in range(0, 101) if cmp(x, t)}
    s = box.get("age")
    got = set(range(0, 101)) if s is None else {x for x in range(0, 101) if s.contains(x)}
    if box.is_empty():
        got = set()
    assert got == want


def test_a_column_inside_the_expression_is_not_folded() -> None:
    # `age * 2 > 10` names a column: it is a predicate on age, enumerated over the domain (not folded)
    assert box_of("SELECT COUNT(*) FROM pums WHERE age * 2 > 10") == box_of("SELECT COUNT(*) FROM pums WHERE age > 5")


def test_a_quoted_number_for_numeric_categories_is_read_as_the_number_with_a_note() -> None:
    with pytest.warns(QueryNoteWarning, match=r"'8' was read as the number 8"):
        q = parse_query("SELECT COUNT(*) FROM pums WHERE educ = '8'", PUMS)
    assert q.where == box_of("SELECT COUNT(*) FROM pums WHERE educ = 8")
    with pytest.warns(QueryNoteWarning):
        q = parse_query("SELECT COUNT(*) FROM pums WHERE educ IN ('8', '9')", PUMS)
    assert q.where == box_of("SELECT COUNT(*) FROM pums WHERE educ IN (8, 9)")


@pytest.mark.parametrize("literal", ["'17'", "'x'", "'8x'"])
def test_a_quoted_value_that_names_no_declared_number_is_still_refused(literal: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", QueryNoteWarning)  # no note for a value that is refused
        with pytest.raises(QueryTypeError, match="numeric categories"):
            parse_query(f"SELECT COUNT(*) FROM pums WHERE educ = {literal}", PUMS)


def test_pi_is_pi() -> None:
    box = box_of("SELECT COUNT(*) FROM pums WHERE income <= PI()")
    s = box.get("income")
    assert s is not None and s.intervals[-1].hi == math.pi


def test_unbinned_float_group_by_shows_a_binned_form_that_works() -> None:
    """Issue 29: the refusal of GROUP BY on a float column names a binned form with real numbers, and that
    form parses."""
    from dpmagic.errors import UnsupportedQueryError

    with pytest.raises(UnsupportedQueryError) as e:
        parse_query("SELECT income, COUNT(*) FROM pums GROUP BY income", PUMS)
    hint = e.value.hint or ""
    assert "FLOOR(income / 10000) * 10000" in hint and "WIDTH_BUCKET(income, 0, 500000, 10)" in hint
    for form in ("FLOOR(income / 10000) * 10000", "WIDTH_BUCKET(income, 0, 500000, 10)"):
        q = parse_query(f"SELECT {form} AS b, COUNT(*) FROM pums GROUP BY {form}", PUMS)
        assert q.n_cells > 1
