"""The Apache Spark backend: exact aggregates computed by Spark SQL (a cluster, or ``local[2]``).

Binds a Spark ``DataFrame``, or the name of a table in a ``SparkSession`` (``spark=``).  The source is
registered as a temporary view and validated there; then (``cache=True``, the default) the declared columns are
cached by Spark with categories as integer codes (:meth:`SparkBackend._cache_coded`).  Every statement is the
engine-neutral compiler's (:mod:`dpmagic.backends.compiler`) rendered in the ``spark`` dialect and run with
``spark.sql``; only aggregate rows are collected.  Validation and errors are the pandas path's.
"""

from __future__ import annotations

import uuid
import weakref
from typing import Any

from sqlglot import exp

from dpmagic.backends.compiler import SourceColumn
from dpmagic.backends.engine import EngineBackend, _pandas_string_dtype
from dpmagic.backends.pandas import too_many_rows_error
from dpmagic.domain.schema import OutOfRangePolicy, Schema
from dpmagic.errors import ConfigurationError, DataValidationError
from dpmagic.noise.calibration import MAX_ROWS

__all__ = ["SparkBackend"]


def _kind(simple: str) -> tuple[str, str]:
    t = simple.lower()
    if t in ("tinyint", "smallint", "int", "bigint"):
        return "int", t
    if t in ("float", "double"):
        return "float", t
    if t.startswith("decimal"):
        return "decimal", "object"
    if t in ("string", "string collate utf8_binary") or t.startswith("varchar") or t.startswith("char"):
        return "string", _pandas_string_dtype()
    if t == "boolean":
        return "bool", "bool"
    if t == "date":
        return "date", "date"
    if t in ("timestamp", "timestamp_ntz"):  # a TIMESTAMP (local time zone) at its time in the session's zone
        return "timestamp", t
    return "other", t


def _check_collations(dtypes: list[tuple[str, str]], schema: Schema) -> None:
    """Refuse a declared string column with a collation other than Spark's byte-wise ``UTF8_BINARY`` (Spark 4's
    ``STRING COLLATE UTF8_LCASE``, ``UNICODE_CI`` ...): under it 'ab' and 'AB' compare equal, so two declared
    categories could match one value (disjoint boxes sharing rows, GROUP BY merging cells)."""
    for name, t in dtypes:
        low = t.lower()
        if name in schema.columns and low.startswith("string collate") and low != "string collate utf8_binary":
            raise ConfigurationError(
                f"column {name!r} is a {t}: dpmagic compares categories byte for byte, and under a collation two "
                "declared categories could match the same value",
                hint=f"bind it byte-wise: df.withColumn({name!r}, pyspark.sql.functions.collate({name!r}, "
                "'UTF8_BINARY')), or SELECT ... COLLATE UTF8_BINARY in SQL",
            )


class SparkBackend(EngineBackend):
    """Exact aggregates by Spark SQL over a Spark DataFrame or a table of ``spark`` (a ``SparkSession``)."""

    dialect = "spark"
    # Spark's hash aggregation has a fast path for primitive keys only: a categorical GROUP BY key is grouped by
    # its declared position (an int CASE), not by its string value
    coded_keys = True
    # Java's Math.rint rounds half to even exactly, in one call (the IEEE spelling of rint costs a FLOOR and a
    # CASE per row)
    native_rint = True

    def __init__(
        self,
        data: Any,
        schema: Schema,
        *,
        spark: Any = None,
        out_of_range: OutOfRangePolicy = "error",
        cache: bool = True,
        diagnostics: bool = False,
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
        _check_collations(frame.dtypes, schema)
        self.view_name = f"dpmagic_src_{uuid.uuid4().hex}"
        frame.createOrReplaceTempView(self.view_name)
        columns = [SourceColumn(str(n), *_kind(t)) for n, t in frame.dtypes]
        self.cached: Any = None
        self._cache = cache
        # a person-level table is truncated and coded within _init (:meth:`_materialise`)
        self._init(schema, exp.to_table(self.view_name), columns, out_of_range, diagnostics)
        if cache and schema.person_unit is None:
            self._cache_coded(columns, out_of_range)

    def _cache_coded(self, columns: list[SourceColumn], out_of_range: OutOfRangePolicy) -> None:
        """Keep the declared columns in Spark's memory (spilling to disk), each categorical one as its declared
        position and each number clamped to its declared bounds (:meth:`~dpmagic.backends.compiler.Compiler.coding`),
        and compile every query against that copy.

        Spark reads a Parquet string column and compares strings row by row in every query, and its hash
        aggregation is fast for primitive keys only; on the cached integer codes a query reads no file and
        compares integers.  The copy is Spark's own cache (``persist(MEMORY_AND_DISK)``, materialised here, at
        binding): if Spark evicts it, it is recomputed from the source by the same statement, which clamps every
        number, and the queries still discard rows whose code is −1 (an undeclared value) or NULL, so a source
        changed after binding breaks no declared bound (:meth:`unpersist` frees it).
        """
        self._use_coded(self._persist(self.compiler.coding(), cache=True), columns)

    def _materialise(self, select: exp.Select) -> exp.Expr:
        """A person-level table's truncated, coded rows (:func:`~dpmagic.backends.truncate.truncated_select` over
        the coding), cached as the row-level coded copy is (:meth:`_cache_coded`) unless ``cache=False`` (then a
        view: every query truncates again, by the same deterministic statement)."""
        return self._persist(select, cache=self._cache)

    def _persist(self, select: exp.Select, *, cache: bool) -> exp.Expr:
        """``select`` as a temporary view, persisted (``MEMORY_AND_DISK``) and materialised now with ``cache``."""
        from pyspark import StorageLevel

        #: the statement that makes the cached copy from the source view (Spark recomputes it the same way)
        self.coding_sql = self.sql(select)
        frame = self.spark.sql(self.coding_sql)
        if cache:
            frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
            try:
                rows = frame.count()  # materialise the cache now, not in the first query
            except Exception:
                frame.unpersist()
                raise DataValidationError(
                    "spark cannot read the data: caching the declared columns failed",
                    hint="bind with cache=False, or check the source",
                ) from None
            if rows > MAX_ROWS:  # the exact sums' limb widths assume at most MAX_ROWS rows (a source read again)
                frame.unpersist()
                raise too_many_rows_error()
            self.cached = frame
            # freed when the backend is dropped (a notebook that binds again), not at interpreter exit (Spark may be
            # stopped by then)
            fin = weakref.finalize(self, frame.unpersist)
            fin.atexit = False
        self.coded_view = f"dpmagic_coded_{uuid.uuid4().hex}"
        frame.createOrReplaceTempView(self.coded_view)
        return exp.to_table(self.coded_view)

    def unpersist(self) -> None:
        """Free the cached copy (later queries recompute it from the source, with the same coding)."""
        if self.cached is not None:
            self.cached.unpersist()

    def _position(self) -> exp.Expr:
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

    def check(self, query: Any, extended: Any = None) -> None:
        """Before the charge: the parser setting (:meth:`_check_parser`) may have changed since binding."""
        self._check_parser()

    def _run(self, statement: exp.Expr) -> list[tuple[Any, ...]]:
        self._check_parser()
        return [tuple(r) for r in self.spark.sql(self.sql(statement)).collect()]

    def __repr__(self) -> str:
        return f"<SparkBackend {self.schema.table!r} over {self.view_name}, {self.n_rows:,} rows>"
