"""Error types raised by dpmagic.

Every error a user can provoke with bad input is a subclass of :class:`DPMagicError` and carries one
message that names the problem.  Raising any of them guarantees that nothing was charged and nothing was
released (invariant 5 of the design).
"""

from __future__ import annotations

__all__ = [
    "DPMagicError",
    "SchemaError",
    "DataValidationError",
    "QueryError",
    "UnsupportedQueryError",
    "UnknownColumnError",
    "QueryTypeError",
    "BudgetError",
    "BudgetExceededError",
    "ConfigurationError",
]


class DPMagicError(Exception):
    """Base class of every error dpmagic raises on bad input or a refused request."""

    #: a short hint shown under the message in notebooks
    hint: str | None = None

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint


class SchemaError(DPMagicError):
    """The schema is malformed (unknown type, missing bounds, empty category list ...)."""


class DataValidationError(DPMagicError):
    """The DataFrame does not fit the declared schema (missing column, value outside the domain ...)."""


class QueryError(DPMagicError):
    """The SQL text cannot be turned into a supported query."""


class UnsupportedQueryError(QueryError):
    """The SQL uses a construct outside dpmagic's subset (JOIN, subquery, LIMIT, a function ...)."""


class UnknownColumnError(QueryError):
    """The query names a column the schema does not declare."""


class QueryTypeError(QueryError):
    """A literal or an aggregate does not fit the column's declared type."""


class BudgetError(DPMagicError):
    """A privacy parameter or budget is invalid (negative, zero, NaN, wrong currency ...)."""


class BudgetExceededError(BudgetError):
    """Admitting the query would push the session's privacy loss above its budget."""


class ConfigurationError(DPMagicError):
    """A session or magic option is invalid."""
