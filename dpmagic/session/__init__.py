"""The session layer: one release path (parse, cost, preview, charge, read, release, cache, events, results).

:class:`~dpmagic.session.session.Session` is the orchestration; its parts live beside it: the costs as the analyst
asks for them (:mod:`.costs`), the re-run cache (:mod:`.cache`), the event bus the panel listens to
(:mod:`.events`), the results (:mod:`.results`) and the accountant's progress ticker (:mod:`.progress`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpmagic.session.session import Session

__all__ = ["Session"]


def __getattr__(name: str) -> Any:
    # lazy, so that importing one part (events, results) does not import the whole session
    if name == "Session":
        from dpmagic.session.session import Session

        return Session
    raise AttributeError(f"module 'dpmagic.session' has no attribute {name!r}")
