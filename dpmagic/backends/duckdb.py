"""The DuckDB backend: exact aggregates of Parquet / CSV files (or a DuckDB table or relation) computed in-process
by DuckDB, without loading the rows into pandas (the default for files; :mod:`dpmagic.backends.bind`).

Binding opens the source lazily (a DuckDB relation over ``read_parquet`` / ``read_csv``, a table of a given
connection, or a given relation), validates the declared domain with one aggregate query and fixes the
normalised view (:mod:`dpmagic.backends.compiler`).  Each query is one aggregate statement (one more per quantile).
Paths opened by dpmagic get their own connection with a ``memory_limit`` (default 512 MB): DuckDB spills to a
temporary directory beyond it, so tables larger than memory work.  The data set's identity is the schema's
``dataset`` id (the ledger key): no row is hashed.
"""

from __future__ import annotations

import glob as globmod
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
from sqlglot import exp

from dpmagic.backends.compiler import EngineBackend, SourceColumn, _pandas_string_dtype
from dpmagic.domain.schema import OutOfRangePolicy, Schema
from dpmagic.errors import ConfigurationError, DataValidationError

__all__ = ["DuckDBBackend", "data_files", "DEFAULT_MEMORY_LIMIT"]

DEFAULT_MEMORY_LIMIT = "512MB"
_SOURCE = "dpmagic_source"
_GLOB = set("*?[")
_PARQUET = (".parquet", ".pq", ".parq")
_CSV = (".csv", ".tsv", ".txt", ".csv.gz", ".tsv.gz", ".csv.zst")


def _kind(t: Any) -> tuple[str, str]:
    tid = getattr(t, "id", str(t)).lower()
    if tid in ("tinyint", "smallint", "integer", "bigint", "hugeint"):
        return "int", tid
    if tid in ("utinyint", "usmallint", "uinteger", "ubigint", "uhugeint"):
        return "uint", tid
    if tid in ("float", "double"):
        return "float", tid
    if tid == "decimal":
        return "decimal", "object"
    if tid == "varchar":
        return "string", _pandas_string_dtype()
    if tid == "boolean":
        return "bool", "bool"
    return "other", str(t).lower()


def data_files(data: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> tuple[list[str], str]:
    """The files a path, glob or list names, and their format (``parquet`` or ``csv``); a clear error naming a
    missing file, an empty glob or an unknown extension."""
    items = [data] if isinstance(data, (str, os.PathLike)) else list(data)
    if not items:
        raise DataValidationError("no data file given")
    files: list[str] = []
    for item in items:
        p = os.fspath(item)
        if _GLOB & set(p):
            found = sorted(globmod.glob(p, recursive=True))
            if not found:
                raise DataValidationError(f"no data file matches {p!r}", hint="check the path and the pattern")
            files += found
        elif Path(p).is_dir():
            raise DataValidationError(
                f"data path {p!r} is a directory, not a file",
                hint=f"bind the files in it with a glob, e.g. {os.path.join(p, '*.parquet')!r}",
            )
        elif not Path(p).is_file():
            raise DataValidationError(f"data file {p!r} does not exist", hint="check the path")
        else:
            files.append(p)
    kinds = set()
    for f in files:
        low = f.lower()
        if low.endswith(_PARQUET):
            kinds.add("parquet")
        elif low.endswith(_CSV):
            kinds.add("csv")
        else:
            raise DataValidationError(
                f"data file {f!r} is neither Parquet nor CSV", hint="name it .parquet or .csv (DuckDB reads both)"
            )
    if len(kinds) > 1:
        raise DataValidationError("the data files mix Parquet and CSV", hint="bind one format at a time")
    return files, kinds.pop()


class DuckDBBackend(EngineBackend):
    """Exact aggregates by DuckDB over files, a connection's table or a relation (no row enters the kernel).

    ``data``: a path, a glob, a list of paths (Parquet or CSV), a ``duckdb.DuckDBPyRelation``, or a
    ``duckdb.DuckDBPyConnection`` with ``table`` (a table or view name in it).
    """

    dialect = "duckdb"

    def __init__(
        self,
        data: Any,
        schema: Schema,
        *,
        table: str | None = None,
        out_of_range: OutOfRangePolicy = "error",
        memory_limit: str = DEFAULT_MEMORY_LIMIT,
        threads: int | None = None,
    ) -> None:
        if isinstance(data, duckdb.DuckDBPyConnection):
            if not table:
                raise ConfigurationError("a DuckDB connection is bound with the name of its table (table=...)")
            try:
                rel = data.table(table)
            except duckdb.Error:
                raise DataValidationError(f"the DuckDB connection has no table {table!r}") from None
            self.files: list[str] = []
        elif isinstance(data, duckdb.DuckDBPyRelation):
            rel = data
            self.files = []
        else:
            files, fmt = data_files(data)
            # beyond memory_limit DuckDB spills to temp_directory: tables larger than memory work
            config: dict[str, Any] = {
                "memory_limit": memory_limit,
                "temp_directory": os.path.join(tempfile.gettempdir(), f"dpmagic_duckdb_{os.getpid()}"),
            }
            if threads is not None:
                config["threads"] = threads
            con = duckdb.connect(":memory:", config=config)
            try:
                rel = con.read_parquet(files) if fmt == "parquet" else con.read_csv(files)
            except duckdb.Error as e:
                raise DataValidationError(f"DuckDB cannot read {files[0]!r}: {type(e).__name__}") from None
            self.files = files
            self._con = con
        self._rel = rel
        self._check_collation()
        columns = [SourceColumn(str(n), *_kind(t)) for n, t in zip(rel.columns, rel.types, strict=True)]
        self._init(schema, exp.to_table(_SOURCE), columns, out_of_range)

    def _check_collation(self) -> None:
        """Refuse a connection with a default collation (e.g. ``nocase``): categories are compared and grouped as
        exact strings, so 'f' and 'F' would merge into one engine group and a declared cell would read 0."""
        ((collation,),) = self._select("SELECT current_setting('default_collation')")
        if collation:
            raise ConfigurationError(
                f"the DuckDB connection sets default_collation={collation!r}: dpmagic compares categories exactly",
                hint="SET default_collation = '' on that connection (or bind a file: dpmagic opens its own)",
            )

    def _run(self, statement: exp.Expr) -> list[tuple[Any, ...]]:
        self._check_collation()
        return self._select(self.sql(statement))

    def _select(self, sql: str) -> list[tuple[Any, ...]]:
        """The rows of one SELECT over the source relation (named ``_SOURCE`` in it)."""
        result = self._rel.query(_SOURCE, sql)
        if result is None:  # DuckDB returns no relation only for a statement without a result set
            raise RuntimeError("a DuckDB statement of dpmagic returned no result set")
        return result.fetchall()

    def __repr__(self) -> str:
        where = f"{len(self.files)} file(s)" if self.files else "a DuckDB relation"
        return f"<DuckDBBackend {self.schema.table!r} over {where}, {self.n_rows:,} rows>"
