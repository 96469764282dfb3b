"""The session's event bus: what the live panel and the terminal progress line listen to.

Events are display only: a listener that raises is ignored, so a display problem can never affect accounting.
Kinds: ``computing``, ``progress`` (``elapsed``, ``limit`` in seconds), ``charged``, ``cached``, ``refused``,
``failed``.  Their payloads are public (costs, query numbers, fixed messages), never a function of the rows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

__all__ = ["EventBus", "Listener"]

#: ``callback(kind, info)``
Listener = Callable[[str, dict[str, Any]], None]


class EventBus:
    """Calls every subscribed listener on every event, in subscription order."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def subscribe(self, callback: Listener) -> None:
        self._listeners.append(callback)

    def emit(self, kind: str, **info: Any) -> None:
        for cb in list(self._listeners):
            with contextlib.suppress(Exception):  # a display problem must never affect accounting
                cb(kind, info)
