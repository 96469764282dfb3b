"""Schema-aware completion in ``%%dpquery`` and ``%%dpbatch`` cells, computed in the kernel (so it works in every
frontend: JupyterLab, Notebook 7, VS Code, terminal IPython).

In a cell that starts with ``%%dpquery`` or ``%%dpbatch``:

* on the first line, the magic's own options (``--e`` → ``--epsilon``) and the choices of an option that has them
  (``--neighbors`` → ``add-remove``, ``replace``);
* after ``col =``, ``col <>``, ``col IN (`` (and ``NOT IN``) on a categorical column, its *declared* categories as
  SQL strings (``'Female'``); the domain is public, so the schema is the only source — never the rows;
* elsewhere the bound session's column names (double-quoted when they are not plain identifiers or are SQL
  keywords: ``"capital-gain"``), its table name, the aggregates and the SQL keywords.

Registered by ``%load_ext dpmagic`` as an IPython (≥ 8.6) context matcher; in any other cell it returns nothing and
leaves IPython's own completion alone.  The candidates come from the public schema only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["AGGREGATES", "KEYWORDS", "complete", "quote_ident", "quote_value", "register"]

CELL = re.compile(r"^\s*%%(dpquery|dpbatch)\b")

#: the aggregates ``%dpquery?`` lists (each a noisy release)
AGGREGATES = (
    "COUNT",
    "SUM",
    "AVG",
    "VAR",
    "VARIANCE",
    "VAR_POP",
    "STDDEV",
    "STDDEV_POP",
    "MEDIAN",
    "QUANTILE",
    "PERCENTILE_CONT",
    "MIN",
    "MAX",
    "CLAMP",
)
#: the SQL keywords of the statements dpmagic answers (``%dpquery?``, ``%%dpbatch?``)
KEYWORDS = (
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP BY",
    "HAVING",
    "ORDER BY",
    "LIMIT",
    "TOP",
    "AS",
    "AND",
    "OR",
    "NOT",
    "IN",
    "BETWEEN",
    "LIKE",
    "IS NULL",
    "IS NOT NULL",
    "DISTINCT",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "CAST",
    "ROUND",
    "FLOOR",
    "WIDTH_BUCKET",
    "LEAST",
    "GREATEST",
    "WITHIN GROUP",
    "ASC",
    "DESC",
)
_RESERVED = {k.split()[0] for k in KEYWORDS} | set(AGGREGATES) | {"NULL", "TRUE", "FALSE", "BY", "ON", "JOIN"}
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: the fragment being completed: a started quoted identifier or string, an option, or a bare word
_FRAGMENT = re.compile(r"""(?:'(?:[^'\n]|'')*|"[^"\n]*|--?[\w-]*|[A-Za-z_]\w*)\Z""")
_COLUMN = r"""(?P<col>"(?:[^"]|"")+"|[A-Za-z_]\w*)"""
_VALUE_AFTER = [
    re.compile(_COLUMN + r"\s*(?:=|<>|!=)\s*\Z"),
    re.compile(_COLUMN + r"\s+(?:NOT\s+)?IN\s*\(\s*(?:(?:'(?:[^']|'')*'|-?[\d.]+)\s*,\s*)*\Z", re.I),
]


def quote_ident(name: str) -> str:
    """``name`` as a SQL identifier: bare when plain and not a keyword, else double-quoted (``"capital-gain"``)."""
    if _PLAIN.match(name) and name.upper() not in _RESERVED:
        return name
    return '"' + name.replace('"', '""') + '"'


def quote_value(value: Any) -> str:
    """A declared category as a SQL literal: strings single-quoted (``'O''Brien'``), numbers as written."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def _prefixed(candidates: Iterable[tuple[str, str]], fragment: str) -> list[tuple[str, str]]:
    """The candidates whose text starts with ``fragment`` (case-insensitively; a leading quote is optional)."""
    frag = fragment.lower()
    bare = frag.lstrip("'\"")
    out = []
    for text, kind in candidates:
        low = text.lower()
        if low.startswith(frag) or low.lstrip("'\"").startswith(bare):
            out.append((text, kind))
    return out


def _options(parser: Any) -> list[tuple[str, str, Any]]:
    """(long option, kind, choices) of an argparse parser (``magic_arguments``)."""
    out = []
    for action in getattr(parser, "_actions", []):
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs and longs[0] != "--help":
            out.append((longs[0], "option", action.choices))
    return out


def complete(
    cell: str, offset: int, schema: Any = None, parsers: dict[str, Any] | None = None
) -> tuple[str, list[tuple[str, str]]] | None:
    """Completions at ``offset`` in ``cell``: ``(fragment, [(text, type), ...])`` where ``fragment`` is the text
    before the cursor that each completion replaces; ``None`` when ``cell`` is not a ``%%dpquery`` /
    ``%%dpbatch`` cell.  ``schema`` is the bound session's :class:`~dpmagic.domain.schema.Schema` (``None``:
    keywords and options only); ``parsers`` maps a magic name to its option parser."""
    m = CELL.match(cell)
    if m is None:
        return None
    before = cell[:offset]
    fm = _FRAGMENT.search(before)
    fragment = fm.group(0) if fm else ""
    head = before[: len(before) - len(fragment)]
    if "\n" not in before:  # the magic's own line: its options, or the choices of the option before the cursor
        if len(head) <= m.end():  # still on the magic's name
            return None
        options = _options((parsers or {}).get(m.group(1)))
        prev = re.search(r"(--[\w-]+)\s+\Z", head)
        if prev:
            choices = next((c for o, _, c in options if o == prev.group(1)), None)
            if choices:
                return fragment, _prefixed([(str(c), "value") for c in choices], fragment)
        if fragment.startswith("-") or not fragment:
            return fragment, _prefixed([(o, k) for o, k, _ in options], fragment)
        return fragment, []
    columns = list(schema) if schema is not None else []
    line = head.rsplit("\n", 1)[-1]
    for pattern in _VALUE_AFTER:
        vm = pattern.search(line)
        if vm is None:
            continue
        col = vm.group("col")
        name = col[1:-1].replace('""', '"') if col.startswith('"') else col
        match = next((c for c in columns if c == name), None) or next(
            (c for c in columns if c.lower() == name.lower()), None
        )
        if match is not None and getattr(schema[match], "kind", None) == "categorical":
            values = [(quote_value(v), "category") for v in schema[match].values]
            return fragment, _prefixed(values, fragment)
    if fragment.startswith("'"):  # inside a string that is not a declared category: nothing to offer
        return fragment, []
    items: list[tuple[str, str]] = [(quote_ident(c), "column") for c in columns]
    if schema is not None and getattr(schema, "table", None):
        items.append((quote_ident(schema.table), "table"))
    if not fragment.startswith('"'):
        items += [(a + "(", "function") for a in AGGREGATES]
        items += [(k, "keyword") for k in KEYWORDS]
    return fragment, _prefixed(items, fragment)


def _session_schema() -> Any:
    from dpmagic.presentation.magics.base import _STATE

    session = _STATE.get("session")
    return getattr(session, "schema", None) if session is not None else None


def register(ipython: Any, magics: Any) -> None:
    """Add the ``%%dpquery`` / ``%%dpbatch`` matcher to ``ipython``'s completer (once; IPython ≥ 8.6)."""
    completer = getattr(ipython, "Completer", None)
    if completer is None or not hasattr(completer, "custom_matchers"):
        return
    try:
        from IPython.core.completer import SimpleCompletion, context_matcher
    except ImportError:  # IPython < 8.6: no context matchers (pyproject requires >= 8.10)
        return
    completer.custom_matchers[:] = [
        f for f in completer.custom_matchers if getattr(f, "matcher_identifier", "") != "dpmagic.sql"
    ]

    def parsers() -> dict[str, Any]:
        return {name: getattr(getattr(magics, name, None), "parser", None) for name in ("dpquery", "dpbatch")}

    @context_matcher(identifier="dpmagic.sql")
    def dpmagic_matcher(context: Any) -> dict[str, Any]:
        lines = context.full_text.split("\n")
        offset = sum(len(ln) + 1 for ln in lines[: context.cursor_line]) + context.cursor_position
        found = complete(context.full_text, offset, _session_schema(), parsers())
        if found is None:
            return {"completions": [], "suppress": False}
        fragment, items = found
        return {
            "completions": [SimpleCompletion(text, type=kind) for text, kind in items],
            "matched_fragment": fragment,
            "suppress": True,  # in a dpmagic cell, Python names and file paths are noise
            "ordered": True,
        }

    completer.custom_matchers.append(dpmagic_matcher)
