"""Parsing the text of magic lines and cells (no session, no data): quoting, cost options, ``name <<``
assignments and ``%%dpbatch`` bodies.  Errors are :class:`~dpmagic.errors.ConfigurationError` naming the option."""

from __future__ import annotations

import re

from dpmagic.errors import ConfigurationError

__all__ = ["ASSIGN", "SELECT", "cost_arg", "split_batch_cell", "unquote"]

ASSIGN = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*<<\s*(.*)$", re.S)
SELECT = re.compile(r"\bselect\b", re.I)


def unquote(text: str) -> str:
    """Remove one pair of matching outer quotes (magic_arguments keeps them)."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


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
