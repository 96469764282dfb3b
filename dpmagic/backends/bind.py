"""Which backend a session's data gets (one small function the session and the magics call).

* a pandas ``DataFrame`` → :class:`~dpmagic.backends.pandas.PandasBackend` (validated by :meth:`Schema.validate`,
  as before);
* a path, a glob or a list of Parquet / CSV files, a ``duckdb.DuckDBPyRelation``, or a
  ``duckdb.DuckDBPyConnection`` with ``table=`` (or the pair ``(connection, "table")``) →
  :class:`~dpmagic.backends.duckdb.DuckDBBackend` (the default for files: rows never enter the kernel);
* a Spark ``DataFrame``, or a table name with ``spark=`` a ``SparkSession`` (or the pair ``(spark, "table")``)
  → :class:`~dpmagic.backends.spark.SparkBackend`.

``Session(data, ...)`` passes ``data`` here unchanged, so every form above binds a session.

Binding errors name the column and the kind of problem but no value and no count of the data; ``diagnostics=True``
(the data custodian's switch, for fixing the data) adds the first undeclared values and the number of values out
of bounds (:func:`dpmagic.domain.columns.categories_error`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from dpmagic.domain.schema import OutOfRangePolicy, Schema
from dpmagic.errors import ConfigurationError
from dpmagic.releases.backend import Backend

__all__ = ["backend_for", "is_file_source"]


def is_file_source(data: Any) -> bool:
    """True for a path, a glob or a list of paths (a DuckDB binding)."""
    if isinstance(data, (str, os.PathLike)):
        return True
    return (
        isinstance(data, Sequence)
        and not isinstance(data, (bytes, bytearray))
        and len(data) > 0
        and all(isinstance(x, (str, os.PathLike)) for x in data)
    )


def _is_spark_frame(data: Any) -> bool:
    mod = type(data).__module__
    return mod.startswith("pyspark.") and type(data).__name__ == "DataFrame"


def backend_for(
    data: Any,
    schema: Schema,
    *,
    out_of_range: OutOfRangePolicy = "error",
    table: str | None = None,
    spark: Any = None,
    diagnostics: bool = False,
) -> Backend:
    """The backend of ``data`` under ``schema``, validated (the same errors on every backend; values and counts
    of the data in them only with ``diagnostics``)."""
    import pandas as pd

    if isinstance(data, tuple) and len(data) == 2 and isinstance(data[1], str) and not isinstance(data[0], str):
        owner, name = data  # (a DuckDB connection or a SparkSession, a table name)
        if type(owner).__module__.startswith("pyspark."):
            return backend_for(name, schema, out_of_range=out_of_range, spark=owner, diagnostics=diagnostics)
        return backend_for(owner, schema, out_of_range=out_of_range, table=name, diagnostics=diagnostics)
    if isinstance(data, pd.DataFrame):
        from dpmagic.backends.pandas import PandasBackend

        return PandasBackend(schema.validate(data, out_of_range=out_of_range, diagnostics=diagnostics), schema)
    if _is_spark_frame(data) or spark is not None:
        from dpmagic.backends.spark import SparkBackend

        return SparkBackend(data, schema, spark=spark, out_of_range=out_of_range, diagnostics=diagnostics)
    duck = sys.modules.get("duckdb")
    if is_file_source(data) or (
        duck is not None and isinstance(data, (duck.DuckDBPyRelation, duck.DuckDBPyConnection))
    ):
        from dpmagic.backends.duckdb import DuckDBBackend

        return DuckDBBackend(data, schema, table=table, out_of_range=out_of_range, diagnostics=diagnostics)
    raise ConfigurationError(
        f"cannot bind a {type(data).__name__}",
        hint="bind a pandas DataFrame, a Parquet/CSV path, glob or list, a DuckDB relation or connection + table, "
        "or a Spark DataFrame",
    )
