"""Parsing of every supported construct into the right per-column sets, and refusal of the rest."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmagic.domain.schema import Schema
from dpmagic.domain.sets import Box, CategorySet, IntervalSet
from dpmagic.errors import QueryError, QueryTypeError, UnknownColumnError, UnsupportedQueryError
from dpmagic.query import canonical_sql, parse_query, split_statements


def where(sql_where: str, schema: Schema) -> Box:
    return parse_query(f"SELECT COUNT(*) FROM t WHERE {sql_where}", schema).where


def ints(box: Box, col: str) -> list[int]:
    s = box.get(col)
    assert isinstance(s, IntervalSet)
    return [x for x in range(int(s.column.lower), int(s.column.upper) + 1) if s.contains(x)]


def cats(box: Box, col: str) -> list[object]:
    s = box.get(col)
    assert isinstance(s, CategorySet)
    return s.values


@pytest.mark.parametrize(
    "pred, expected",
    [
        ("age = 3", [3]),
        ("age != 3", [0, 1, 2, 4, 5, 6, 7, 8, 9, 10]),
        ("age <> 3", [0, 1, 2, 4, 5, 6, 7, 8, 9, 10]),
        ("age < 3", [0, 1, 2]),
        ("age <= 3", [0, 1, 2, 3]),
        ("age > 8", [9, 10]),
        ("age >= 8", [8, 9, 10]),
        ("3 > age", [0, 1, 2]),
        ("age BETWEEN 2 AND 4", [2, 3, 4]),
        ("age NOT BETWEEN 2 AND 9", [0, 1, 10]),
        ("age IN (1, 5, 99)", [1, 5]),
        ("age NOT IN (1, 5)", [0, 2, 3, 4, 6, 7, 8, 9, 10]),
        ("NOT age > 2", [0, 1, 2]),
        ("(age < 2 OR age > 8)", [0, 1, 9, 10]),
        ("age < 2 OR age = 5 OR age BETWEEN 9 AND 20", [0, 1, 5, 9, 10]),
        ("NOT (age < 2 OR age > 8)", [2, 3, 4, 5, 6, 7, 8]),
        ("age > 2 AND age < 6 AND age != 4", [3, 5]),
        ("age > 2.5", [3, 4, 5, 6, 7, 8, 9, 10]),
        ("age < -1 OR age = 4", [4]),
        ("age >= 0.1 AND age <= 0.9 OR age = 10", [10]),
    ],
)
def test_int_predicates(pred: str, expected: list[int], small_schema: Schema) -> None:
    box = where(pred, small_schema)
    if not expected:
        assert box.is_empty()
    elif len(expected) == 11:
        assert box.get("age") is None
    else:
        assert ints(box, "age") == expected


def test_int_open_interval_between_consecutive_integers_is_empty(small_schema: Schema) -> None:
    assert where("age > 4 AND age < 5", small_schema).is_empty()
    assert where("age BETWEEN 5 AND 4", small_schema).is_empty()


def test_float_endpoints(small_schema: Schema) -> None:
    box = where("income > 4 AND income < 5", small_schema)
    s = box.get("income")
    assert isinstance(s, IntervalSet) and not s.is_empty()
    assert not s.contains(4.0) and s.contains(4.5) and not s.contains(5.0)
    box = where("income >= 4 AND income <= 4", small_schema)
    assert box.get("income").contains(4.0)  # type: ignore[union-attr]
    box = where("income != 50", small_schema)
    s = box.get("income")
    assert s.contains(49.999) and not s.contains(50.0) and s.contains(50.001)  # type: ignore[union-attr]
    assert where("income > 100", small_schema).is_empty()
    assert where("income > 4 AND income < 4", small_schema).is_empty()
    box = where("income BETWEEN 10 AND 20", small_schema)
    assert box.get("income").contains(10.0) and box.get("income").contains(20.0)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "pred, expected",
    [
        ("sex = 'M'", ["M"]),
        ("sex <> 'M'", ["F"]),
        ("city IN ('a', 'c')", ["a", "c"]),
        ("city NOT IN ('a')", ["b", "c"]),
        ("city = 'a' OR city = 'b'", ["a", "b"]),
        ("NOT city = 'b'", ["a", "c"]),
        ("city IN ('a', 'b') AND city IN ('b', 'c')", ["b"]),
        ("grade >= 2", [2, 3]),
        ("grade BETWEEN 1 AND 2", [1, 2]),
        ("grade < 2 OR grade = 3", [1, 3]),
    ],
)
def test_categorical_predicates(pred: str, expected: list[object], small_schema: Schema) -> None:
    col = pred.replace("NOT ", "").split()[0]
    assert cats(where(pred, small_schema), col) == expected


def test_out_of_domain_literal_is_empty_not_error(small_schema: Schema) -> None:
    assert where("city = 'zzz'", small_schema).is_empty()
    assert where("grade = 7", small_schema).is_empty()
    assert where("age = 1000", small_schema).is_empty()
    assert where("city <> 'zzz'", small_schema) == Box.everything()


def test_conjunction_over_columns(small_schema: Schema) -> None:
    box = where("age >= 5 AND sex = 'F' AND (city = 'a' OR city = 'b')", small_schema)
    assert set(box.constraints) == {"age", "sex", "city"}
    assert box.contains_row({"age": 6, "sex": "F", "city": "b"})
    assert not box.contains_row({"age": 6, "sex": "M", "city": "b"})


def test_aggregates_and_group_by(adult_schema: Schema) -> None:
    q = parse_query(
        'select sex, race, count(*) as n, sum(age), AVG("capital-gain") AS g from adult '
        "where age >= 30 group by sex, race",
        adult_schema,
    )
    assert q.group_by == ("sex", "race")
    assert [(a.func, a.column, a.alias) for a in q.aggregates] == [
        ("count", None, "n"),
        ("sum", "age", "sum_age"),
        ("avg", "capital-gain", "g"),
    ]
    # distinct releases (issue 32): the count (shared by COUNT and AVG), SUM(age)'s raw sum, AVG's centred sum
    assert q.releases_per_cell == 3
    assert q.table == "adult"


def test_dashed_columns_unquoted(adult_schema: Schema) -> None:
    q = parse_query(
        "SELECT SUM(hours-per-week) FROM adult WHERE marital-status = 'Divorced' AND education-num >= 13",
        adult_schema,
    )
    assert q.aggregates[0].column == "hours-per-week"
    assert set(q.where.constraints) == {"marital-status", "education-num"}


def test_count_column_is_count_star(small_schema: Schema) -> None:
    q = parse_query("SELECT COUNT(age) FROM t", small_schema)
    assert q.aggregates[0].func == "count" and q.aggregates[0].column is None


def test_case_insensitive_column_names(small_schema: Schema) -> None:
    assert ints(where("AGE = 3", small_schema), "age") == [3]


def test_canonical_normalises_whitespace_and_keyword_case() -> None:
    a = canonical_sql("select   count(*)\nfrom t where age = 3")
    b = canonical_sql("SELECT COUNT(*) FROM t WHERE age = 3")
    assert a == b
    assert canonical_sql("SELECT COUNT(*) FROM t WHERE age = 4") != b


def test_split_statements() -> None:
    text = "-- a comment\nSELECT COUNT(*) FROM t;\n\nSELECT COUNT(*) FROM t WHERE age = 1; -- done\n"
    assert len(split_statements(text)) == 2


@pytest.mark.parametrize(
    "sql, error, fragment",
    [
        ("", QueryError, "empty"),
        ("SELEC", QueryError, "expected a SELECT"),
        ("SELECT COUNT(* FROM t", QueryError, "cannot parse"),
        ("DROP TABLE t", UnsupportedQueryError, "only SELECT"),
        ("SELECT COUNT(*) FROM t; SELECT COUNT(*) FROM t", UnsupportedQueryError, "one statement"),
        ("SELECT COUNT(*) FROM t JOIN u ON t.a = u.b", UnsupportedQueryError, "JOIN"),
        ("SELECT COUNT(*) FROM (SELECT * FROM t LIMIT 5) s", UnsupportedQueryError, "limits"),
        ("SELECT COUNT(*) FROM t WHERE age IN (SELECT 1)", UnsupportedQueryError, "subquery"),
        ("SELECT MAX(*) FROM t", UnsupportedQueryError, "MAX"),
        ("SELECT * FROM t", UnsupportedQueryError, "SELECT \\*"),
        ("SELECT age FROM t", UnsupportedQueryError, "without an aggregate"),
        ("SELECT COUNT(*) FROM t WHERE age = income", UnsupportedQueryError, "several columns"),
        ("SELECT COUNT(*) FROM t WHERE city < 'b'", UnsupportedQueryError, "ordering comparison"),
        ("SELECT COUNT(*) FROM t WHERE agee = 3", UnknownColumnError, "unknown column 'agee'"),
        ("SELECT SUM(salary) FROM t", UnknownColumnError, "salary"),
        ("SELECT COUNT(*) FROM t GROUP BY nope", UnknownColumnError, "nope"),
        ("SELECT SUM(city) FROM t", QueryTypeError, "categorical"),
        ("SELECT COUNT(*) FROM t WHERE age = 'x'", QueryTypeError, "string"),
        ("SELECT COUNT(*) FROM t WHERE city = 3", QueryTypeError, "quote the value"),
        ("SELECT COUNT(*) FROM t WHERE grade = 'three'", QueryTypeError, "numeric categories"),
        ("SELECT COUNT(*) AS n, SUM(age) AS n FROM t", UnsupportedQueryError, "two outputs"),
        ("SELECT COUNT(*) FROM t WHERE 1 = 1", UnsupportedQueryError, "column"),
        ("WITH x AS (SELECT 1) SELECT COUNT(*) FROM x", UnsupportedQueryError, "WITH"),
        ("SELECT COUNT(*) FROM t UNION SELECT COUNT(*) FROM t", UnsupportedQueryError, "UNION"),
    ],
)
def test_refused(sql: str, error: type[Exception], fragment: str, small_schema: Schema) -> None:
    with pytest.raises(error, match=fragment):
        parse_query(sql, small_schema)


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["=", "!=", "<", "<=", ">", ">="]), st.integers(-3, 13)), min_size=1, max_size=4
    ),
    joiner=st.sampled_from(["AND", "OR"]),
    negate=st.booleans(),
)
def test_int_predicate_semantics_match_python(ops, joiner, negate, small_schema: Schema) -> None:
    """The parsed set equals evaluating the predicate on every value of the declared domain."""
    parts = [f"age {op} {v}" for op, v in ops]
    text = f" {joiner} ".join(parts)
    if negate:
        text = f"NOT ({text})"
    box = where(text, small_schema)
    pyops = {"=": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
    pytext = f" {joiner.lower()} ".join(f"(x {pyops[op]} {v})" for op, v in ops)
    if negate:
        pytext = f"not ({pytext})"
    for x in range(0, 11):
        assert box.contains_row({"age": x}) == eval(pytext), (text, x)  # noqa: S307


def test_malformed_number_literal(small_schema: Schema) -> None:
    """Found by the fuzz run: sqlglot reads '3E' as a number token."""
    with pytest.raises(QueryError, match="not a valid number"):
        parse_query("SELECT COUNT(*) FROM t WHERE age > 3E", small_schema)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT COUNT(*) FROM t LIMIT 5",
        "SELECT COUNT(*) FROM t ORDER BY 1",
        "SELECT sex, COUNT(*) FROM t GROUP BY sex HAVING COUNT(*) > 2",
        "SELECT COUNT(DISTINCT age) FROM t",
        "SELECT COUNT(*) FROM t WHERE lower(city) = 'a'",
        "SELECT COUNT(*) FROM t WHERE city LIKE 'a%'",
        "SELECT COUNT(*) FROM t WHERE age IS NULL",
        "SELECT COUNT(*) FROM t WHERE age > 3 OR sex = 'M'",
        "SELECT COUNT(*) FROM t WHERE NOT (age > 3 AND sex = 'M')",
        "SELECT age, COUNT(*) FROM t GROUP BY age",
        "SELECT COUNT(*) FROM t WHERE age = TRUE",
        "SELECT COUNT(*) FROM t WHERE age",
    ],
)
def test_formerly_refused_now_supported(sql: str, small_schema: Schema) -> None:
    """Issue 13: these constructs are answered now (tests/test_sql_corpus.py checks their answers)."""
    parse_query(sql, small_schema)


# -- issue 30: errors that say what to write -------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql, token, fragment",
    [
        ("SELEC COUNT(*) FROM t", "SELEC", "a query starts with SELECT, not 'SELEC'"),
        ("COUNT(*) FROM t", "COUNT", "a query starts with SELECT, not 'COUNT'"),
        ("SELECT COUNT(*) FROM t WHERE age >", ">", "expected a value after >"),
        ("SELECT COUNT(*) FROM t WHERE > 3", ">", "expected a column or value before >"),
        ("SELECT COUNT(*) FROM t WHERE age =< 3", "<", "expected a column or value before <"),
        ("SELECT COUNT(*) FROM t WHERE age > 3 AND", "AND", "expected a condition after AND"),
        ("SELECT COUNT(*) FROM t WHERE age BETWEEN 3", "3", "BETWEEN needs a lower and an upper bound"),
        ("SELECT COUNT(*) FROM t GROUP age", "age", "expected BY after GROUP"),
        ("SELECT COUNT(*) FORM t", "FORM", "unexpected 'FORM'"),
        ("SELECT COUNT(* FROM t", "FROM", "expected ')' to close the '(' at column 13, found 'FROM'"),
        ("SELECT COUNT(*) FROM t WHERE age > 3)", ")", "this ')' closes no '('"),
        ("SELECT COUNT(*) FROM t LIMIT", "LIMIT", "expected a whole number after LIMIT"),
        ("SELECT COUNT(*) FROM t WHERE sex = 'F", "'", "this string is not closed: add the closing '"),
        ('SELECT COUNT(*) FROM t WHERE "sex = 1', '"', 'this quoted name is not closed: add the closing "'),
    ],
)
def test_syntax_errors_show_the_statement_a_caret_and_what_was_expected(
    small_schema: Schema, sql: str, token: str, fragment: str
) -> None:
    with pytest.raises(QueryError) as exc:
        parse_query(sql, small_schema)
    message = str(exc.value)
    head, shown, caret = message.split("\n")
    assert head.startswith(f"cannot parse the SQL: {fragment} (column ")
    assert shown == f"    {sql}"
    assert set(caret.strip()) == {"^"} and sql[caret.index("^") - 4 :].startswith(token), message
    for internal in ("sqlglot", "Invalid expression", "Required keyword", "Col:", "Expecting"):
        assert internal not in message + str(exc.value.hint)


@pytest.mark.parametrize(
    "sql, hint",
    [
        ("SELEC COUNT(*) FROM t", "did you mean SELECT?"),
        ("SELECT COUNT(*) FROM t WHERE age =< 3", "the operator is written <= (not =<)"),
        ("SELECT COUNT(*) FROM t GROUP age", "GROUP BY age"),
        ("SELECT COUNT(*) FORM t", "did you mean FROM?"),
    ],
)
def test_syntax_error_hints(small_schema: Schema, sql: str, hint: str) -> None:
    with pytest.raises(QueryError) as exc:
        parse_query(sql, small_schema)
    assert exc.value.hint == hint


def test_a_syntax_error_on_a_later_line_shows_that_line(small_schema: Schema) -> None:
    with pytest.raises(QueryError) as exc:
        parse_query("SELECT COUNT(*)\nFROM t\nWHERE age >\n", small_schema)
    assert str(exc.value).split("\n") == [
        "cannot parse the SQL: expected a value after > (line 3, column 11)",
        "    WHERE age >",
        "              ^",
    ]


def test_literal_hints_say_what_to_write(small_schema: Schema) -> None:
    with pytest.raises(QueryTypeError) as exc:
        parse_query("SELECT COUNT(*) FROM t WHERE age = 'forty'", small_schema)
    assert "age = forty" not in exc.value.hint and "numbers from 0 to 10" in exc.value.hint
    with pytest.raises(QueryTypeError) as exc:  # '4' alone is read as 4 (tests/test_sql_numeric_text.py)
        parse_query("SELECT COUNT(*) FROM t WHERE age = ' 4'", small_schema)
    assert exc.value.hint == "write age = 4 (no quotes)"
    with pytest.raises(QueryTypeError) as exc:
        parse_query("SELECT COUNT(*) FROM t WHERE grade = 'two'", small_schema)
    assert "grade = two" not in exc.value.hint and "1, 2, 3" in exc.value.hint
    for func in ("AVG", "SUM"):
        with pytest.raises(UnsupportedQueryError) as exc:
            parse_query(f"SELECT {func}('age') FROM t", small_schema)
        assert "single quotes make the string 'age', not a column" in str(exc.value)
        assert exc.value.hint.endswith(f'{func}(age) or {func}("age")')


def test_a_near_miss_category_is_empty_for_schema_tools_and_refused_in_a_session(small_schema, small_df) -> None:
    """The decision of issue 30: parsing (the schema-only tools, e.g. ``dpmagic overlap``) keeps an undeclared
    category a valid, empty predicate; a session refuses one that differs from a declared category only by case
    or a letter or two (a typo), naming it, before anything is charged.  Other undeclared values stay valid and
    empty there too (the empty-region warning)."""
    from dpmagic import Session

    assert where("sex = 'f'", small_schema).is_empty()
    s = Session(small_df, small_schema, "epsilon=1")
    for pred, hint in [
        ("sex = 'f'", "did you mean 'F'? (categories are case-sensitive)"),
        ("city IN ('a', 'B')", "did you mean 'b'? (categories are case-sensitive)"),
        ("NOT (sex <> 'm')", "did you mean 'M'? (categories are case-sensitive)"),
    ]:
        with pytest.raises(QueryTypeError) as exc:
            s.query(f"SELECT COUNT(*) FROM t WHERE {pred}", epsilon=0.1)
        assert exc.value.hint == hint
    assert s.spent == 0.0 and len(s.accountant.entries()) == 0
    from dpmagic.query.regions import EmptyRegionWarning

    with pytest.warns(EmptyRegionWarning):
        s.query("SELECT COUNT(*) FROM t WHERE city = 'zzz'", epsilon=0.1)
