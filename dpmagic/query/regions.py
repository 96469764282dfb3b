"""Public checks of a query's region made before anything is charged (from the query's box and the schema only)."""

from __future__ import annotations

import warnings

from dpmagic.query.model import Query

__all__ = ["QueryNoteWarning", "EmptyRegionWarning", "empty_region_message", "warn_if_empty"]


class QueryNoteWarning(UserWarning):
    """How dpmagic read a part of the query that could be misread (e.g. ``educ = '8'`` read as the number 8)."""


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
