"""The one backend interface: exact aggregates over boxes of the declared domain, the only layer that reads rows.

It lives here, next to :class:`~dpmagic.releases.cells.Cells` (what it returns), rather than in
:mod:`dpmagic.backends`, because of the layer order of the import contract (``pyproject.toml``): the mechanisms
(:mod:`dpmagic.releases`, and :mod:`dpmagic.batch` / :mod:`dpmagic.decision` above them) call a backend, and the
backends sit *above* the releases (they import the aggregate units and ``Cells``), so the interface both sides
see must sit at or below :mod:`dpmagic.releases`.  Implementations: :class:`~dpmagic.backends.pandas.PandasBackend`
and :class:`~dpmagic.backends.engine.EngineBackend` (DuckDB, Spark); any new engine is one module implementing it
that passes the conformance suite (``tests/conformance.py``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpmagic.domain.schema import Schema
    from dpmagic.query.model import Query
    from dpmagic.releases.cells import Cells

__all__ = ["Backend"]


class Backend(ABC):
    """Exact aggregates of one bound, validated data set under its declared ``schema``.

    Binding (the constructor, or :func:`dpmagic.backends.bind.backend_for`) validates the data against the schema
    and raises the same :class:`~dpmagic.errors.DataValidationError` on every backend (a missing or undeclared
    column, a NULL, an undeclared category, a value out of bounds under ``out_of_range="error"``, a wrong type,
    more than :data:`~dpmagic.noise.calibration.MAX_ROWS` rows).
    """

    #: the declared domain the data was validated against
    schema: Schema
    #: computes the derived columns of row expressions inside aggregates (:attr:`Query.derived
    #: <dpmagic.query.model.Query.derived>`: each value clamped into its public bounds, bit-identical to
    #: :func:`dpmagic.aggregates.rowvalues.derived_values`); a query with one is refused before the charge otherwise
    row_expressions: bool = False

    @abstractmethod
    def evaluate(
        self, query: Query, units: Mapping[str, float] | None = None, *, extended: Mapping[str, Any] | None = None
    ) -> Cells:
        """For every cell of the query's declared GROUP BY keys (zero-filled, in declared order): the exact count
        and the exact integer sums of the summed columns (float columns in the quantum ``units[sum_key]``), and
        ``extended``'s unit plans (:func:`dpmagic.aggregates.plan_extended`, by alias) answered in
        ``Cells.extra``.  Called only after the charge; its work must not depend on how many rows fall in the box.
        """

    def check(self, query: Query, extended: Mapping[str, Any] | None = None) -> None:
        """Refuse, before the charge and from public information only (the query, the schema, the engine's
        settings — never a row), a query this backend cannot answer.  Default: nothing to refuse."""
        return None
