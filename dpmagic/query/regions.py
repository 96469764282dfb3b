"""Public checks of a query's region made before anything is charged (from the query's box and the schema only)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from dpmagic.query.model import Query

__all__ = [
    "QueryNoteWarning",
    "EmptyRegionWarning",
    "collecting_notes",
    "empty_region_message",
    "note",
    "warn_if_empty",
]

#: the notes of the query being parsed in this thread / task (None: nobody collects them)
_NOTES: ContextVar[list[str] | None] = ContextVar("dpmagic_query_notes", default=None)


class QueryNoteWarning(UserWarning):
    """How dpmagic read a part of the query that could be misread (e.g. ``educ = '8'`` read as the number 8)."""


def note(message: str, *, stacklevel: int = 2) -> None:
    """How a part of the query was read: a :class:`QueryNoteWarning`, and kept for the answer when the parser
    collects notes (:func:`collecting_notes`; a context variable, so concurrent parses never see each other's)."""
    warnings.warn(message, QueryNoteWarning, stacklevel=stacklevel + 1)
    collected = _NOTES.get()
    if collected is not None:
        collected.append(message)


@contextmanager
def collecting_notes() -> Iterator[list[str]]:
    """The notes :func:`note` gives in this context (this thread or task only)."""
    collected: list[str] = []
    token = _NOTES.set(collected)
    try:
        yield collected
    finally:
        _NOTES.reset(token)


class EmptyRegionWarning(UserWarning):
    """A query's WHERE clause matches no row of the declared domain (found from the schema alone)."""


def empty_region_message(q: Query) -> str | None:
    """Why ``q``'s WHERE clause is empty on the declared domain (public: the query's box and the schema), or None."""
    if not q.is_empty:
        return None
    cols = [c for c, s in q.where.constraints.items() if s.is_empty()]
    return (
        f"the WHERE clause matches no row of the declared domain (on {', '.join(map(repr, cols))}): every true "
        "value is 0, so the answer will be pure noise — check the condition against the schema's declared "
        "bounds and categories"
    )


def warn_if_empty(q: Query) -> None:
    """Warn (:class:`EmptyRegionWarning`, attributed to the caller's caller) when ``q``'s region is empty."""
    msg = empty_region_message(q)
    if msg is not None:
        warnings.warn(msg, EmptyRegionWarning, stacklevel=3)
