"""dpmagic: differentially private exploratory data analysis in Jupyter, with overlap-aware accounting.

Public API (usable without IPython)::

    from dpmagic import Session, Schema
    s = Session(df, "adult.schema.json", "epsilon=1.0")
    s.query("SELECT sex, COUNT(*) FROM adult GROUP BY sex", epsilon=0.1).df

In IPython / Jupyter: ``%load_ext dpmagic``, then ``%dpsession``, ``%%dpquery`` and ``%dpbudget``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dpmagic.errors import (
    BudgetError,
    BudgetExceededError,
    ConfigurationError,
    DataValidationError,
    DPMagicError,
    QueryError,
    QueryTypeError,
    SchemaError,
    UnknownColumnError,
    UnsupportedQueryError,
)

if TYPE_CHECKING:
    from dpmagic.accountant.currency import Budget, parse_budget
    from dpmagic.domain.schema import Schema
    from dpmagic.query import Query, parse_query
    from dpmagic.session.session import QueryResult, Session

__version__ = "0.1.0"

__all__ = [
    "Budget",
    "BudgetError",
    "BudgetExceededError",
    "ConfigurationError",
    "DPMagicError",
    "DataValidationError",
    "Query",
    "QueryError",
    "QueryResult",
    "QueryTypeError",
    "Schema",
    "SchemaError",
    "Session",
    "UnknownColumnError",
    "UnsupportedQueryError",
    "load_adult",
    "load_ipython_extension",
    "parse_budget",
    "parse_query",
]


_LAZY = {
    "Session": "dpmagic.session.session",
    "QueryResult": "dpmagic.session.results",
    "Preview": "dpmagic.session.results",
    "Budget": "dpmagic.accountant.currency",
    "parse_budget": "dpmagic.accountant.currency",
    "Query": "dpmagic.query",
    "parse_query": "dpmagic.query",
    "Schema": "dpmagic.domain.schema",
}


def __getattr__(name: str) -> Any:
    # numpy, pandas, sqlglot, scipy, OpenDP and the overlap engine are imported on first use, so that
    # `import dpmagic` stays light (≈ the interpreter's start-up; `python -X importtime -c "import dpmagic"`).
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dpmagic' has no attribute {name!r}")


def load_adult() -> tuple[Any, Schema]:
    """The UCI Adult data set shipped with dpmagic (32,561 rows, CC BY 4.0) and its public schema."""
    from importlib.resources import files

    import pandas as pd

    from dpmagic.domain.schema import Schema

    base = files("dpmagic") / "data"
    with (base / "adult.csv").open("rb") as fh:
        df = pd.read_csv(fh)
    return df, Schema.from_json(str(base / "adult.schema.json"))


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext dpmagic``: register the magics and the schema-aware completion of ``%%dpquery`` /
    ``%%dpbatch`` cells (:mod:`dpmagic.presentation.completion`)."""
    from dpmagic.presentation.completion import register
    from dpmagic.presentation.magics import DPMagic

    magics = DPMagic(ipython)
    ipython.register_magics(magics)
    register(ipython, magics)
