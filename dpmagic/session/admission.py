"""A further admission check on the one release path: a custodian server's per-analyst quota.

:meth:`dpmagic.Session.run` admits a release against the session's (global) accountant.  A server that shares one
session between analysts also checks each analyst's own quota (their own overlap accountant,
:mod:`dpmagic.presentation.server`): it installs an :class:`Admission` for the duration of one request with
:func:`admitting` (a context variable: per thread, so concurrent requests never see each other's).  Under the
session's lock, :meth:`Session.run` then asks :meth:`Admission.admit` before the global charge (a refusal raises and
changes nothing), writes the global charge with :meth:`Admission.details`, and calls :meth:`Admission.commit` —
both charges in one ledger transaction — before any row is read.  :meth:`Session.affordable` (``max``, ``--ci``)
is the smaller of the two allowances.  Without an installed admission nothing changes.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any, Protocol

from dpmagic.domain.sets import Box

__all__ = ["Admission", "admitting", "current_admission"]


class Admission(Protocol):
    """What a further budget (an analyst's quota) must answer; every method reads no data."""

    def affordable(self, coverage: Box) -> float:
        """The largest cost this budget still admits on ``coverage``."""
        ...

    def admit(self, coverage: Box, cost: float) -> None:
        """Raise :class:`~dpmagic.errors.BudgetExceededError` (changing nothing) if ``cost`` on ``coverage`` is over."""
        ...

    def details(self) -> dict[str, Any]:
        """Public fields recorded with the global charge (who asked, the request's idempotency key)."""
        ...

    def commit(self, coverage: Box, cost: float, *, sql: str, canonical: str, entry_id: int) -> None:
        """Record the charge against this budget (inside the global charge's ledger transaction)."""
        ...


_CURRENT: contextvars.ContextVar[Admission | None] = contextvars.ContextVar("dpmagic_admission", default=None)


def current_admission() -> Admission | None:
    """The admission installed for this thread's request, if any."""
    return _CURRENT.get()


@contextlib.contextmanager
def admitting(admission: Admission) -> Iterator[None]:
    """Install ``admission`` for the releases made inside the block (this thread / task only)."""
    token = _CURRENT.set(admission)
    try:
        yield
    finally:
        _CURRENT.reset(token)
