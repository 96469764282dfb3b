"""Issue 30: the frictions a new user hit in the magics, each driven through a real IPython shell.

Every refusal is checked to happen before anything is charged: the session's spent budget, its entries and its
ledger's events are the same after it.
"""

from __future__ import annotations

import re

import pytest
from IPython.core.interactiveshell import InteractiveShell
from tests_support import run_cell as run

import dpmagic
from dpmagic.errors import QueryTypeError
from dpmagic.presentation.magics import current_session

NOT_INTERNALS = ("sqlglot", "Invalid expression", "Required keyword", "Col:", "Traceback")


@pytest.fixture
def bound(ip: InteractiveShell) -> InteractiveShell:
    df, schema = dpmagic.load_adult()
    ip.user_ns.update(adult=df, schema=schema)
    result, cap = run(ip, "%dpsession adult --schema schema --budget epsilon=1.0 --ledger memory --panel none")
    assert result.success, cap.stderr
    return ip


def state() -> tuple[float, int, int]:
    """What a refusal must leave unchanged: spent, counted entries, ledger events."""
    s = current_session()
    return s.spent, len(s.accountant.entries()), len(s.ledger.events())


def refused(ip: InteractiveShell, cell: str) -> str:
    before = state()
    result, cap = run(ip, cell)
    text = cap.stderr + cap.stdout
    assert not result.success, text
    assert state() == before, f"a refusal changed the session: {cell!r}"
    assert "Traceback" not in text
    return text


def caret_under(text: str, token: str) -> None:
    """The message shows a statement line and, under it, carets starting exactly under ``token``."""
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        below = lines[i + 1]
        if below.strip() and set(below.strip()) == {"^"}:
            assert line[below.index("^") :].startswith(token), (line, below)
            return
    raise AssertionError(f"no caret line in {text!r}")


# -- 4: syntax errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql, token, fragment, hint",
    [
        ("SELEC COUNT(*) FROM adult", "SELEC", "a query starts with SELECT, not 'SELEC'", "did you mean SELECT?"),
        ("SELECT COUNT(*) FROM adult WHERE age >", ">", "expected a value after >", None),
        ("SELECT COUNT(*) FROM adult WHER age > 3", "WHER", "unexpected 'WHER'", "did you mean WHERE?"),
        ("SELECT COUNT(* FROM adult", "FROM", "expected ')' to close the '(' at column 13", None),
        ("SELECT COUNT(*) FROM adult WHERE sex = 'Female", "'", "this string is not closed", None),
    ],
)
def test_syntax_error_shows_the_statement_a_caret_and_what_was_expected(
    bound: InteractiveShell, sql: str, token: str, fragment: str, hint: str | None
) -> None:
    text = refused(bound, f"%%dpquery --epsilon 0.1\n{sql}\n")
    assert f"QueryError: cannot parse the SQL: {fragment}" in text
    caret_under(text, token)
    assert not any(x in text for x in NOT_INTERNALS), text
    if hint is not None:
        assert f"hint: {hint}" in text


def test_syntax_error_on_a_later_line_names_the_line(bound: InteractiveShell) -> None:
    text = refused(bound, "%%dpquery --epsilon 0.1\nSELECT COUNT(*)\nFROM adult\nWHERE age >\n")
    assert "expected a value after > (line 3, column 11)" in text
    caret_under(text, ">")


# -- 5: hints that do not mislead ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql, fragments, absent",
    [
        (
            "SELECT COUNT(*) FROM adult WHERE age = 'forty'",
            ["cannot be compared with the string 'forty'", "age holds numbers from 17 to 90", "without quotes"],
            ["age = forty"],
        ),
        # '40' alone is read as the number 40, with a note (tests/test_sql_numeric_text.py); with a space it is not
        ("SELECT COUNT(*) FROM adult WHERE age = '40 '", ["write age = 40 (no quotes)"], []),
        (
            "SELECT COUNT(*) FROM adult WHERE sex = 'female'",
            ["'female' is not a declared category of column 'sex'", "did you mean 'Female'?"],
            [],
        ),
        (
            "SELECT race, COUNT(*) FROM adult WHERE race IN ('Whit', 'Black') GROUP BY race",
            ["'Whit' is not a declared category of column 'race'", "did you mean 'White'?"],
            [],
        ),
        (
            "SELECT AVG('age') FROM adult",
            ["single quotes make the string 'age', not a column", 'AVG(age) or AVG("age")'],
            [],
        ),
    ],
)
def test_hints_say_what_to_write(bound: InteractiveShell, sql: str, fragments: list[str], absent: list[str]) -> None:
    text = refused(bound, f"%%dpquery --epsilon 0.1\n{sql}\n")
    for f in fragments:
        assert f in text, text
    for a in absent:
        assert a not in text, text


def test_a_typo_in_a_category_is_refused_through_the_api_too(bound: InteractiveShell) -> None:
    s = current_session()
    with pytest.raises(QueryTypeError) as exc:
        s.query("SELECT COUNT(*) FROM adult WHERE sex = 'female'", epsilon=0.1)
    assert exc.value.hint == "did you mean 'Female'? (categories are case-sensitive)"
    assert s.spent == 0.0 and len(s.accountant.entries()) == 0


def test_data_outside_its_bounds_names_the_clamp_option(bound: InteractiveShell) -> None:
    df = bound.user_ns["adult"].copy()
    df.loc[5, "age"] = 200
    bound.user_ns["too_old"] = df
    result, cap = run(bound, "%dpsession too_old --schema schema --budget epsilon=1 --ledger memory --panel none")
    text = cap.stderr + cap.stdout
    assert not result.success and "outside its declared bounds" in text
    assert "--clamp" in text and "out_of_range" not in text
    result, cap = run(
        bound, "%dpsession too_old --schema schema --budget epsilon=1 --ledger memory --panel none --clamp"
    )
    assert result.success, cap.stderr


def test_refusal_with_nothing_left_says_so(bound: InteractiveShell) -> None:
    result, _ = run(bound, "%%dpquery --epsilon 0.6\nSELECT COUNT(*) FROM adult WHERE age < 30\n")
    assert result.success
    text = refused(bound, "%%dpquery --epsilon 0.6\nSELECT COUNT(*) FROM adult WHERE age < 25\n")
    assert "at most ε=0.4 is left" in text and "hint: lower the cost to at most ε=0.4" in text
    result, _ = run(bound, "%%dpquery --epsilon 0.4\nSELECT COUNT(*) FROM adult WHERE age < 30\n")
    assert result.success
    text = refused(bound, "%%dpquery --epsilon 0.1\nSELECT COUNT(*) FROM adult WHERE age < 25\n")
    assert "at most ε=0 is left" in text and "lower the cost" not in text
    assert "no epsilon is left on this part of the domain" in text
    assert "%dpbudget --map COL1 COL2 shows where" in text  # the magic's spelling of the budget map
    # another region still has the whole budget: it is answered
    result, _ = run(bound, "%%dpquery --epsilon 0.1\nSELECT COUNT(*) FROM adult WHERE age > 60\n")
    assert result.success


# -- 7: display rounding -------------------------------------------------------------------------------------


def test_budget_display_is_rounded_numbered_and_readable(ip: InteractiveShell) -> None:
    df, schema = dpmagic.load_adult()
    ip.user_ns.update(adult=df, schema=schema)
    run(ip, "%dpsession adult --schema schema --budget epsilon=1 --ledger memory --panel none --bound sequential")
    result, cap = run(ip, "%dpbudget")
    html = cap.outputs[0].data["text/html"]
    assert "worst-case row: none yet" in html and "—" not in html
    run(ip, "%%dpquery --epsilon 0.1\nSELECT COUNT(*) FROM adult WHERE age < 30\n")
    result, cap = run(ip, "%dpbudget")
    html = cap.outputs[0].data["text/html"]
    assert "1 query," in html and "1 queries" not in html
    run(ip, "%%dpquery --epsilon 0.05\nSELECT COUNT(*) FROM adult WHERE age >= 30\n")
    s = current_session()
    assert s.spent == 0.1 + 0.05 == 0.15000000000000002  # the charge itself keeps the exact float
    result, cap = run(ip, "%dpbudget")
    html, text = cap.outputs[0].data["text/html"], cap.outputs[0].data["text/plain"]
    for shown in (html, text, repr(s)):
        assert "0.15000000000000002" not in shown and "0.150000" not in shown
        assert not re.search(r"\d\d:\d\d:\d\d\.\d", shown)  # times to the second, not nanoseconds
    assert "<td>0.15</td>" in html and "<td>0.05</td>" in html and "2 queries" in html
    # the SQL wraps between words at a readable width; the table scrolls sideways in a narrow output area
    assert "min-width:32ch" in html and "word-break:normal" in html and "overflow-x:auto" in html
    preview, _ = run(ip, "%%dpquery --dry-run --epsilon 0.05\nSELECT COUNT(*) FROM adult WHERE age >= 40\n")
    assert "0.15000000000000002" not in repr(preview.result) + preview.result._repr_html_()


# -- 10: the option parser -----------------------------------------------------------------------------------

SELECT = "SELECT COUNT(*) FROM adult WHERE age < 30"
HAVING = "SELECT sex FROM adult GROUP BY sex HAVING COUNT(*) > 1000"


@pytest.mark.parametrize(
    "cell, fragment",
    [
        (f"%%dpquery --epsilon 0.1 --epsilon 0.2\n{SELECT}\n", "--epsilon is given twice"),
        (f"%%dpquery -e 0.1 --epsilon 0.2\n{SELECT}\n", "-e and --epsilon (one option) are both given"),
        (f"%%dpquery --eps 0.1 --epsilon=0.2\n{SELECT}\n", "--epsilon is given twice"),
        (f"%dpquery --epsilon 0.1 --epsilon 0.2 {SELECT}", "--epsilon is given twice"),
        (f"%%dpquery --epsilon 0.1 --out 1bad\n{SELECT}\n", "--out '1bad' is not a usable variable name"),
        (f"%%dpquery --epsilon 0.1 --out class\n{SELECT}\n", "--out 'class' is not a usable variable name"),
        (f"%%dpquery a << --epsilon 0.1 --out b\n{SELECT}\n", "two names for the answer"),
        (f"%%dpquery --fpr 0.1\n{HAVING}\n", "--fpr applies to a decision query, which needs --fnr"),
        (f"%%dpquery --max-group-size 100 --epsilon 0.1\n{SELECT}\n", "--max-group-size applies to a decision query"),
        (f"%%dpquery --fnr 0.05 --fresh\n{HAVING}\n", "does not take --fresh"),
        (f"%%dpquery --fnr 0.05 --epsilon 0.1\n{HAVING}\n", "does not take --epsilon"),
        (f"%%dpquery --min-rows 10 --epsilon 0.1\n{SELECT}\n", "--min-rows applies with --ci"),
        (f"%%dpquery --dry-run --fresh --epsilon 0.1\n{SELECT}\n", "--dry-run and --fresh together"),
        ("%%dpbatch --epsilon 0.1 --epsilon 0.2\nidentity(sex)\n", "--epsilon is given twice"),
        ("%%dpbatch --epsilon 0.1 --out 2x\nidentity(sex)\n", "--out '2x' is not a usable variable name"),
        ("%%dpbatch --rmse 5 --epsilon 0.1\nidentity(sex)\n", "--rmse and --epsilon together"),
        ("%dpbudget --json --widget", "--json and --widget together"),
        ("%dpplot graph age", "takes no column names"),
        (
            "%dpsession adult --schema schema --budget epsilon=1 --budget epsilon=2 --ledger memory",
            "--budget is given twice",
        ),
        (
            "%dpsession adult --schema schema --budget epsilon=1 --ledger memory --parts 4",
            "--parts applies only to --privacy statistical",
        ),
    ],
)
def test_options_are_refused_before_anything_is_charged(bound: InteractiveShell, cell: str, fragment: str) -> None:
    session = current_session()
    names = set(bound.user_ns)
    text = refused(bound, cell)
    assert fragment in text, text
    assert current_session() is session  # a refused %dpsession binds nothing
    assert set(bound.user_ns) == names  # and nothing is assigned


def test_valid_options_still_work(bound: InteractiveShell) -> None:
    result, cap = run(bound, f"%%dpquery --eps 0.1 --out by_age\n{SELECT}\n")
    assert result.success, cap.stderr
    assert "by_age" in bound.user_ns and current_session().spent == pytest.approx(0.1)
    result, _ = run(bound, f"%%dpquery same << --epsilon 0.1 --out same\n{SELECT} AND sex = 'Male'\n")
    assert result.success and "same" in bound.user_ns


def test_help_describes_the_sql_and_the_workloads_of_today(ip: InteractiveShell) -> None:
    doc = ip.find_cell_magic("dpquery").__doc__
    for construct in (
        "HAVING",
        "ORDER BY",
        "LIMIT n",
        "COUNT(DISTINCT col)",
        "STDDEV",
        "MEDIAN",
        "MIN, MAX",
        "FLOOR(age / 10) * 10",
        "OR across columns",
        "--fnr",
        "--ci",
    ):
        assert construct in doc, construct
    assert "categorical columns]" not in doc and "OR allowed between predicates on the same column" not in doc
    batch = ip.find_cell_magic("dpbatch").__doc__
    for term in ("identity(a, b, ...)", "prefix(a)", "marginals([a, b, c], k)", "WHERE", "--strategy", "--rmse"):
        assert term in batch, term


def test_dpsession_binds_replace_one_neighbours(bound: InteractiveShell) -> None:
    result, cap = run(
        bound, "%dpsession adult --schema schema --budget epsilon=1 --ledger memory --panel none --neighbors replace"
    )
    assert result.success, cap.stderr
    assert current_session().neighbors == "replace" and "replace-one neighbours" in cap.stdout
    result, _ = run(bound, f"%%dpquery --epsilon 0.1\n{SELECT}\n")
    assert result.success and current_session().spent == pytest.approx(0.1)
    result, cap = run(bound, "%dpsession adult --schema schema --budget epsilon=1 --ledger memory --neighbors other")
    assert not result.success and "invalid choice" in cap.stderr + cap.stdout
    assert current_session().neighbors == "replace"


def test_statistical_privacy_refuses_the_options_it_has_no_use_for(ip: InteractiveShell) -> None:
    """The statistical-privacy variants (one dispatch, :mod:`dpmagic.presentation.magics.statistical`) refuse
    decision-query options and ``--neighbors`` as they refuse the DP costs: nothing charged, no part used."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(3)
    ip.user_ns.update(
        sp_df=pd.DataFrame({"smoker": rng.integers(0, 2, 120)}),
        sp_schema={
            "dataset": "sp-frictions",
            "table": "t",
            "columns": {"smoker": {"type": "int", "lower": 0, "upper": 1}},
        },
    )
    bind = (
        '%dpsession sp_df --schema sp_schema --privacy statistical --prior "bernoulli(0.5)" --parts 4 '
        "--epsilon 0.2 --delta 0.5 --ledger memory"
    )
    result, cap = run(ip, f"{bind} --neighbors replace")
    assert not result.success and "--neighbors applies only to differential privacy" in cap.stderr + cap.stdout
    result, cap = run(ip, bind)
    assert result.success, cap.stderr
    s = current_session()
    for cell, fragment in [
        ("%%dpquery --fnr 0.1\nSELECT COUNT(*) FROM t WHERE smoker = 1\n", "--fnr does not apply"),
        ("%%dpquery --max-group-size 9\nSELECT COUNT(*) FROM t WHERE smoker = 1\n", "--max-group-size does not apply"),
        ("%%dpquery --out 1x\nSELECT COUNT(*) FROM t WHERE smoker = 1\n", "not a usable variable name"),
    ]:
        result, cap = run(ip, cell)
        assert not result.success and fragment in cap.stderr + cap.stdout
    assert s.parts_left == 4 and s.delta_spent == 0.0
