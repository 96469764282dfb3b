"""One wall-clock deadline for the overlap searches (issue 12: one timeout type instead of three).

Every exact method of :mod:`dpmagic.overlap` (column and graph branch and bound, the clique search, the
component and query-graph builders) works until an absolute ``time.perf_counter()`` instant and raises
:class:`SearchTimeout` when it passes it; the caller then reports the proven interval of what was explored.
"""

from __future__ import annotations

import time

__all__ = ["SearchTimeout", "check"]


class SearchTimeout(Exception):
    """An overlap search reached its deadline (caught inside :mod:`dpmagic.overlap`, never seen by users)."""


def check(deadline: float) -> None:
    """Raise :class:`SearchTimeout` when ``time.perf_counter()`` has passed ``deadline``.  ``O(1)``."""
    if time.perf_counter() > deadline:
        raise SearchTimeout
