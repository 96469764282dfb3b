"""Parsing the text of magic lines and cells (no session, no data): quoting, cost options, ``name <<``
assignments, variable names, options given twice and ``%%dpbatch`` bodies.  Errors are
:class:`~dpmagic.errors.ConfigurationError` naming the option; all of them happen before anything is charged."""

from __future__ import annotations

import argparse
import keyword
import re

from dpmagic.errors import ConfigurationError

__all__ = ["ASSIGN", "SELECT", "check_name", "cost_arg", "parse_options", "split_batch_cell", "unquote"]

ASSIGN = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*<<\s*(.*)$", re.S)
SELECT = re.compile(r"\bselect\b", re.I)


def unquote(text: str) -> str:
    """Remove one pair of matching outer quotes (magic_arguments keeps them)."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def check_name(name: str, option: str) -> str:
    """``name`` if a notebook variable can be called so (an identifier, not a keyword), else an error naming
    ``option`` (an answer stored under ``1bad`` could never be read back)."""
    name = unquote(name)
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ConfigurationError(
            f"{option} {name!r} is not a usable variable name",
            hint="a Python identifier: letters, digits and _, not starting with a digit (e.g. --out by_sex)",
        )
    return name


_NUMBER = re.compile(r"^-\d|^-\.\d")


def _dest(parser: argparse.ArgumentParser, token: str) -> tuple[str, str] | None:
    """(destination, option as spelled) of a token that names an option of ``parser``, as argparse reads it:
    ``--opt``, ``--opt=value``, an unambiguous prefix of a long option, ``-x`` or ``-xVALUE``; None otherwise."""
    if not token.startswith("-") or token == "-" or token == "--" or _NUMBER.match(token):
        return None
    actions = parser._option_string_actions  # argparse's option table (public since Python 2.7 in practice)
    name = token.split("=", 1)[0]
    if name in actions:
        return actions[name].dest, name
    if name.startswith("--"):
        hits = {(a.dest, s) for s, a in actions.items() if s.startswith(name)}
        return min(hits) if len({d for d, _ in hits}) == 1 else None
    if len(name) > 2 and name[:2] in actions:  # -e0.1
        return actions[name[:2]].dest, name[:2]
    return None


def parse_options(parser: argparse.ArgumentParser, line: str) -> argparse.Namespace:
    """Parse a magic's option line with its ``magic_arguments`` parser, refusing an option given twice
    (argparse would silently keep the last: ``--epsilon 0.1 --epsilon 0.2`` must not charge 0.2)."""
    from IPython.utils.process import arg_split

    tokens = arg_split(line)
    seen: dict[str, str] = {}
    for token in tokens:
        hit = _dest(parser, token)
        if hit is None:
            continue
        dest, spelled = hit
        if dest in seen:
            first = seen[dest]
            what = (
                f"{spelled} is given twice"
                if first == spelled
                else f"{first} and {spelled} (one option) are both given"
            )
            raise ConfigurationError(f"{what}: each option may be given once", hint="keep the one you mean")
        seen[dest] = spelled
    return parser.parse_args(tokens)


def cost_arg(value: str | None, name: str) -> float | str | None:
    if value is None:
        return None
    v = unquote(value)
    if v.lower() == "max":
        return "max"
    try:
        return float(v)
    except ValueError:
        raise ConfigurationError(f"--{name} must be a number or 'max', got {value!r}") from None


_WHERE_LINE = re.compile(r"^\s*where\b", re.I)


def split_batch_cell(cell: str) -> tuple[str, str | None]:
    """A ``%%dpbatch`` body: the workload spec and an optional ``WHERE ...`` line (SELECT bodies are kept whole)."""
    if SELECT.search(cell):
        return cell, None
    spec: list[str] = []
    where: list[str] = []
    for raw in cell.splitlines():
        ln = raw.split("--", 1)[0] if raw.lstrip().startswith("--") else raw
        if not ln.strip():
            continue
        if where or _WHERE_LINE.match(ln):
            where.append(ln)
        else:
            spec.append(ln)
    w = " ".join(" ".join(where).split())
    return " ".join(spec), (re.sub(r"^where\s+", "", w, flags=re.I) or None) if where else None
