"""A SQL syntax error for people: the statement's line, a caret under the offending token, and what was expected.

sqlglot reports a :class:`~sqlglot.errors.ParseError` with the line, column and highlighted token of each problem
(``errors``), but its message names parser internals ("Invalid expression / Unexpected token", "Required
keyword: 'expression' missing for <class 'sqlglot.expressions.core.GT'>").  :func:`syntax_error` turns the
first problem into one :class:`~dpmagic.errors.QueryError` every front end shows as is (the Python API, the
magics, ``dpmagic overlap``); a :class:`~sqlglot.errors.TokenError` (an unclosed quote) likewise.  Text only: no
schema, no data.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from dpmagic.errors import QueryError

__all__ = ["syntax_error"]

#: SQL keywords a misspelt word is compared with ("FORM" → FROM)
KEYWORDS = (
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "ORDER",
    "BY",
    "HAVING",
    "LIMIT",
    "AND",
    "OR",
    "NOT",
    "IN",
    "BETWEEN",
    "LIKE",
    "DISTINCT",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
)
#: sqlglot expression classes → how the analyst wrote them
_SYMBOLS = {
    "GT": ">",
    "GTE": ">=",
    "LT": "<",
    "LTE": "<=",
    "EQ": "=",
    "NEQ": "<>",
    "And": "AND",
    "Or": "OR",
    "Not": "NOT",
    "In": "IN",
    "Like": "LIKE",
    "Is": "IS",
    "Add": "+",
    "Sub": "-",
    "Mul": "*",
    "Div": "/",
    "Mod": "%",
    "Limit": "LIMIT",
}
_REQUIRED = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]*?\.?(\w+)'>")
_FIRST_WORD = re.compile(r"(?:\s|--[^\n]*(?:\n|$)|/\*.*?\*/)*([A-Za-z_]\w*|\S)", re.S)
_WIDTH = 100  # characters of the statement's line shown around the caret


def syntax_error(text: str, exc: Exception) -> QueryError:
    """The :class:`QueryError` for a statement ``text`` that sqlglot could not read (``exc``)."""
    errors: list[dict[str, Any]] = list(getattr(exc, "errors", None) or [])
    start = _statement_start(text)
    if start is not None:
        return start
    if not errors:
        return _token_error(text, exc)
    e = errors[0]
    lines = text.split("\n")
    line_no = max(1, min(int(e.get("line") or 1), len(lines)))
    line = lines[line_no - 1]
    highlight = str(e.get("highlight") or "")
    col = int(e.get("col") or len(line))
    begin = _locate(line, highlight, col)
    what, hint, caret = _explain(str(e.get("description") or ""), line, begin, highlight)
    if caret is not None:
        begin, highlight = caret
    return _error(what, text, line_no, begin, max(1, len(highlight)), hint)


def _error(what: str, text: str, line_no: int, begin: int, width: int, hint: str | None) -> QueryError:
    lines = text.split("\n")
    line = lines[line_no - 1].replace("\t", " ")
    where = f"line {line_no}, column {begin + 1}" if "\n" in text.strip() else f"column {begin + 1}"
    shown, offset = _excerpt(line, begin)
    caret = " " * (begin - offset) + "^" * max(1, min(width, len(shown) - (begin - offset)))
    return QueryError(f"cannot parse the SQL: {what} ({where})\n    {shown}\n    {caret}", hint=hint)


def _excerpt(line: str, begin: int) -> tuple[str, int]:
    """At most :data:`_WIDTH` characters of ``line`` around ``begin`` (with ``…`` where cut) and the offset of
    the excerpt's first character in ``line`` (minus the ``…``)."""
    if len(line) <= _WIDTH:
        return line, 0
    lo = max(0, min(begin - _WIDTH // 2, len(line) - _WIDTH))
    shown = line[lo : lo + _WIDTH]
    if lo > 0:
        shown, lo = "…" + shown, lo - 1
    if lo + _WIDTH < len(line):
        shown += "…"
    return shown, lo


def _locate(line: str, highlight: str, col: int) -> int:
    """The 0-based start of ``highlight`` on ``line``; sqlglot's ``col`` is the 1-based column of its last character."""
    begin = max(0, col - len(highlight))
    if highlight and line[begin : begin + len(highlight)] != highlight:
        found = line.rfind(highlight, 0, max(col, len(highlight)))
        begin = found if found >= 0 else begin
    return min(begin, max(0, len(line) - 1)) if line else 0


def _statement_start(text: str) -> QueryError | None:
    """A statement that does not start with SELECT: point at its first word (``SELEC COUNT(*) …``)."""
    m = _FIRST_WORD.match(text)
    if m is None or m.group(1).upper() in ("SELECT", "WITH", "("):
        return None
    word = m.group(1)
    line_no = text.count("\n", 0, m.start(1)) + 1
    begin = m.start(1) - (text.rfind("\n", 0, m.start(1)) + 1)
    close = difflib.get_close_matches(word.upper(), ["SELECT"], n=1, cutoff=0.6)
    rest = text[m.start(1) :].strip().split("\n")[0][:60]
    hint = "did you mean SELECT?" if close else f"begin with SELECT: SELECT {rest}"
    return _error(f"a query starts with SELECT, not {word!r}", text, line_no, begin, len(word), hint)


def _explain(description: str, line: str, begin: int, highlight: str) -> tuple[str, str | None, tuple[int, str] | None]:
    """(what was expected, a hint, a better caret (start, token) or None) for one sqlglot problem."""
    m = _REQUIRED.search(description)
    if m is not None:
        role, kind = m.group(1), m.group(2)
        symbol = _SYMBOLS.get(kind, kind.upper())
        if kind == "Between":
            return "BETWEEN needs a lower and an upper bound", "e.g. age BETWEEN 30 AND 40", None
        if role == "this":  # the left operand is missing: point at the operator
            at = line.rfind(symbol, 0, begin + 1)
            caret = (at, symbol) if at >= 0 else None
            hint = None
            if kind in ("LT", "GT") and at > 0 and line[at - 1] == "=":
                hint = f"the operator is written {symbol}= (not ={symbol})"
            return f"expected a column or value before {symbol}", hint, caret
        if kind in ("And", "Or", "Not"):
            return f"expected a condition after {symbol}", None, None
        if kind == "Limit":
            return "expected a whole number after LIMIT", "e.g. LIMIT 10", None
        return f"expected a value after {symbol}", None, None
    if description.startswith("Expecting )"):
        opened = _unclosed_paren(line, begin)
        where = f" to close the '(' at column {opened + 1}" if opened is not None else ""
        return f"expected ')'{where}, found {highlight!r}", "close every '(' with a ')'", None
    # "Invalid expression / Unexpected token" and anything else
    before = re.findall(r"[A-Za-z_]\w*", line[:begin])
    prev = before[-1] if before else ""
    if prev.upper() in ("GROUP", "ORDER") and highlight.upper() != "BY":
        return f"expected BY after {prev.upper()}", f"{prev.upper()} BY {highlight}", None
    if highlight == ")":
        return "this ')' closes no '('", None, None
    for word in (prev, highlight):
        if word and word.upper() not in KEYWORDS:
            close = difflib.get_close_matches(word.upper(), KEYWORDS, n=1, cutoff=0.75)
            if close:
                at = line.rfind(word, 0, begin + len(highlight))
                caret = (at, word) if at >= 0 else None
                return f"unexpected {word!r}", f"did you mean {close[0]}?", caret
    if highlight == "(":
        return (
            f"unexpected '(' after {prev!r}",
            "is a comma missing between two SELECT items (sex, COUNT(*))?",
            None,
        )
    return (
        f"unexpected {highlight!r}",
        "expected a comma, an operator or a clause (FROM, WHERE, GROUP BY, HAVING, ORDER BY, LIMIT) here",
        None,
    )


def _unclosed_paren(line: str, before: int) -> int | None:
    """The column (0-based) of the last '(' before ``before`` on ``line`` that no ')' closes."""
    depth: list[int] = []
    for i, ch in enumerate(line[:before]):
        if ch == "(":
            depth.append(i)
        elif ch == ")" and depth:
            depth.pop()
    return depth[-1] if depth else None


def _token_error(text: str, exc: Exception) -> QueryError:
    """sqlglot could not split the text into tokens: almost always a quote that is not closed."""
    quote = _unclosed_quote(text)
    if quote is None:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return QueryError(f"cannot read the SQL: {first}")
    pos, q = quote
    line_no = text.count("\n", 0, pos) + 1
    begin = pos - (text.rfind("\n", 0, pos) + 1)
    kind = "string" if q == "'" else "quoted name"
    hint = "string values take single quotes ('Female'); column names double quotes (\"hours-per-week\")"
    return _error(f"this {kind} is not closed: add the closing {q}", text, line_no, begin, 1, hint)


def _unclosed_quote(text: str) -> tuple[int, str] | None:
    """(position, quote) of a quote (', " or `) that is never closed (doubled quotes escape; -- and /* */
    comments skipped)."""
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        if ch in "'\"`":
            j = i + 1
            while True:
                j = text.find(ch, j)
                if j < 0:
                    return i, ch
                if text.startswith(ch * 2, j):
                    j += 2
                    continue
                break
            i = j + 1
            continue
        i += 1
    return None
