"""The Apache Spark backend: exact aggregates computed by Spark SQL (a cluster, or ``local[2]``).

Binds a Spark ``DataFrame``, or the name of a table in a ``SparkSession`` (``spark=``).  The source is
registered as a temporary view and every statement is the engine-neutral compiler's
(:mod:`dpmagic.backends.sql`) rendered in the ``spark`` dialect and run with ``spark.sql``; only aggregate rows
are collected.  Validation and errors are the pandas path's.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlglot import exp

from dpmagic.backends.sql import EngineBackend, SourceColumn, _pandas_string_dtype
from dpmagic.errors import ConfigurationError, DataValidationError
from dpmagic.schema import OutOfRangePolicy, Schema

__all__ = ["SparkBackend"]


def _kind(simple: str) -> tuple[str, str]:
    t = simple.lower()
    if t in ("tinyint", "smallint", "int", "bigint"):
        return "int", t
    if t in ("float", "double"):
        return "float", t
    if t.startswith("decimal"):
        return "decimal", "object"
    if t == "string" or t.startswith("varchar") or t.startswith("char"):
        return "string", _pandas_string_dtype()
    if t == "boolean":
        return "bool", "bool"
    return "other", t


class SparkBackend(EngineBackend):
    """Exact aggregates by Spark SQL over a Spark DataFrame or a table of ``spark`` (a ``SparkSession``)."""

    dialect = "spark"
    # Spark's hash aggregation has a fast path for primitive keys only: a categorical GROUP BY key is grouped by
    # its declared position (an int CASE), not by its string value
    coded_keys = True

    def __init__(
        self, data: Any, schema: Schema, *, spark: Any = None, out_of_range: OutOfRangePolicy = "error"
    ) -> None:
        if isinstance(data, str):
            if spark is None:
                raise ConfigurationError("a Spark table is bound with its SparkSession (spark=...)")
            try:
                frame = spark.table(data)
            except Exception:
                raise DataValidationError(f"the SparkSession has no table {data!r}") from None
        else:
            frame = data
            spark = frame.sparkSession
        self.spark = spark
        self._check_parser()
        self.view_name = f"dpmagic_src_{uuid.uuid4().hex}"
        frame.createOrReplaceTempView(self.view_name)
        columns = [SourceColumn(str(n), *_kind(t)) for n, t in frame.dtypes]
        self._init(schema, exp.to_table(self.view_name), columns, out_of_range)

    def _position(self) -> exp.Expression:
        return exp.Anonymous(this="monotonically_increasing_id", expressions=[])

    def _check_parser(self) -> None:
        """String literals are rendered with backslash escapes (Spark's default parser): with
        ``spark.sql.parser.escapedStringLiterals`` on, Spark keeps the escapes in the value, so a category holding
        a backslash or a quote would silently match nothing; such a session is refused (checked before every
        statement: the setting can change after binding)."""
        if str(self.spark.conf.get("spark.sql.parser.escapedStringLiterals", "false")).lower() == "true":
            raise ConfigurationError(
                "spark.sql.parser.escapedStringLiterals is on: dpmagic's SQL needs Spark's default string literals",
                hint='spark.conf.set("spark.sql.parser.escapedStringLiterals", "false")',
            )

    def _run(self, statement: exp.Expression) -> list[tuple[Any, ...]]:
        self._check_parser()
        return [tuple(r) for r in self.spark.sql(self.sql(statement)).collect()]

    def __repr__(self) -> str:
        return f"<SparkBackend {self.schema.table!r} over {self.view_name}, {self.n_rows:,} rows>"
