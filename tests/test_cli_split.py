"""``dpmagic overlap`` splits a ``.sql`` log once, without parsing, then parses each statement once."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmagic.errors import QueryError
from dpmagic.presentation.cli import split_sql
from dpmagic.query import canonical_sql, split_statements


def _norm(statements: list[str]) -> list[str]:
    """The statements as sqlglot regenerates them, without comments (they carry no meaning)."""
    import sqlglot

    return [sqlglot.parse_one(canonical_sql(x)).sql(comments=False) for x in statements]


TEXTS = [
    "SELECT COUNT(*) FROM t WHERE a = 'x;y'; SELECT COUNT(*) FROM t",
    "-- a comment; with a semicolon\nSELECT COUNT(*) FROM t WHERE b = 'it''s';\n/* block ; */ ;;",
    'SELECT COUNT(*) FROM t WHERE "odd;name" = 1;   ;\n-- only a comment\n',
    "SELECT COUNT(*) FROM t /* inline ; comment */ WHERE a IN ('p', 'q;');SELECT SUM(x) FROM t;",
    "",
    "  ;  ; -- nothing\n",
]


@pytest.mark.parametrize("text", TEXTS)
def test_split_matches_sqlglot(text: str) -> None:
    ours = split_sql(text)
    assert _norm(ours) == _norm(split_statements(text))


pieces = st.sampled_from(
    [
        "SELECT COUNT(*) FROM t WHERE a = 'v;w'",
        "SELECT COUNT(*) FROM t WHERE a = 'it''s'",
        "SELECT SUM(x) FROM t WHERE b <= 3",
        "/* c; */",
        "-- c;\n",
        "\n",
        " ",
        ";",
    ]
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(pieces, max_size=12))
def test_split_matches_sqlglot_random(parts: list[str]) -> None:
    text = " ".join(parts)
    try:
        expected = split_statements(text)
    except QueryError:  # not valid SQL as a whole: some statement of ours fails to parse as well
        with pytest.raises(QueryError):
            [canonical_sql(s) for s in split_sql(text)]
        return
    assert _norm(split_sql(text)) == _norm(expected)
