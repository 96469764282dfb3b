"""The mechanism interface: what every kind of release declares before it may read data.

A *mechanism* is one release the session charges as one node of the overlap accountant.  Whatever it is —
today's per-query noise on COUNT/SUM/AVG cells (:class:`~dpmagic.releases.query.QueryMechanism`), and in the
same way a batch answered by the matrix mechanism, a decision query, a quantile — it declares, when it is
constructed and without touching any row:

* its **coverage**: a :class:`~dpmagic.domain.sets.Box` containing every domain row its output can depend on (the
  accountant's node; a release whose parts are disjoint boxes covers their bounding box);
* its **cost** in the session's currency (ε, ρ or μ) — the accountant charges its additive weight;
* a public **description** of its noise, stored in the ledger with the charge.

Only then, after the session has checked the cost against the budget and recorded the charge durably
(invariant 2), does the session call :meth:`Mechanism.release` with the **backend** — the only layer that
reads rows, and only returns exact aggregates — and the mechanism adds noise from OpenDP's exact samplers.
Anything that goes wrong inside ``release`` reaches the analyst as one fixed, data-independent message
(invariant 5); the charge stays recorded.

Adding a mechanism is one new module with a :class:`Mechanism` subclass and its tests: the accountant, the
ledger, the re-run cache, the panel and the CLI see only this interface (:meth:`dpmagic.Session.run`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from dpmagic.releases.backend import Backend  # re-exported: the one backend interface

if TYPE_CHECKING:
    import pandas as pd

    from dpmagic.domain.sets import Box
    from dpmagic.noise.calibration import Noise
    from dpmagic.query.model import Query

__all__ = ["Backend", "Mechanism", "QueryBoxMechanism"]


class Mechanism(ABC):
    """One release, charged as one node: coverage and cost fixed before any data is read."""

    #: a short name of the kind of release (shown in the ledger and the panel)
    kind: ClassVar[str] = "release"

    @property
    @abstractmethod
    def coverage(self) -> Box:
        """Every domain row the released output can depend on (the accountant's node)."""

    @property
    @abstractmethod
    def cost(self) -> float:
        """The cost in the session's parameter (ε, ρ or μ); the accountant charges its additive weight."""

    @property
    def noise(self) -> dict[str, Noise]:
        """The calibrated noise of each release, by output name (public; for display and the ledger)."""
        return {}

    def describe(self) -> dict[str, Any]:
        """Public, JSON-serialisable details stored with the charge (no data: computed before any read)."""
        return {"kind": self.kind}

    def check(self, backend: Backend) -> None:
        """Refuse, before the charge, what ``backend`` cannot answer, from public information only (the query,
        the schema, the engine's settings — never a row): the session calls it before it charges.  Default:
        nothing to check."""
        return None

    @abstractmethod
    def release(self, backend: Backend) -> pd.DataFrame:
        """Read the exact aggregates from ``backend`` and return the noisy answer.

        Called by the session exactly once, only after the charge is recorded in the ledger.
        """


class QueryBoxMechanism(Mechanism):
    """A release over one parsed query's WHERE box at a cost fixed when it is built (the per-query noise, a
    workload batch, one decision read): subclasses set ``self.query`` and ``self._cost`` in ``__init__``."""

    query: Query
    _cost: float

    @property
    def coverage(self) -> Box:
        return self.query.coverage

    @property
    def cost(self) -> float:
        return self._cost

    def check(self, backend: Backend) -> None:
        """The backend's own check of the query (an engine backend's ``check``: its settings, its memory limit);
        a row expression inside an aggregate (:attr:`Query.derived <dpmagic.query.model.Query.derived>`) is
        refused here, before the charge, on a backend that does not compute them."""
        if self.query.derived and not backend.row_expressions:
            from dpmagic.errors import UnsupportedQueryError

            raise UnsupportedQueryError(
                f"{type(backend).__name__} does not compute row expressions inside aggregates "
                f"({', '.join(name for name, _ in self.query.derived)})",
                hint="aggregate a column of the table, or bind the data with pandas, DuckDB or Spark",
            )
        backend.check(self.query, self._extended())

    def _extended(self) -> Mapping[str, Any] | None:
        """The plans of the query's non-basic aggregates (none by default)."""
        return None
