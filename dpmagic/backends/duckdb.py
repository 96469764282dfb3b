"""The DuckDB backend: exact aggregates of Parquet / CSV files (or a DuckDB table or relation) computed in-process
by DuckDB, without loading the rows into pandas (the default for files; :mod:`dpmagic.backends.bind`).

Binding opens the source lazily (a DuckDB relation over ``read_parquet`` / ``read_csv``, a table of a given
connection, or a given relation), validates the declared domain with one aggregate query and fixes the
normalised view (:mod:`dpmagic.backends.compiler`).  Each query is one aggregate statement (one more per quantile).
The data set's identity is the schema's ``dataset`` id (the ledger key): no row is hashed.

**Spill files are raw data.**  Paths opened by dpmagic get their own connection with a ``memory_limit``
(default 512 MB): beyond it DuckDB spills intermediate results — the rows' values themselves — to a temporary
directory, so tables larger than memory work.  That directory is private: made by :func:`tempfile.mkdtemp`
(mode 0700, an unpredictable name, in ``TMPDIR``), and removed with its files when the backend is closed
(:meth:`DuckDBBackend.close`), dropped, or at interpreter exit.  A connection or relation the caller binds spills
wherever the caller configured it (its ``temp_directory``): that directory holds raw data too.

**Collations.**  Every generated comparison and GROUP BY key of a string column is ``COLLATE "binary"`` (byte
for byte, as pandas: :attr:`~dpmagic.backends.compiler.Compiler.collation`), so no collation can merge categories;
and a source whose string column carries a collation (``VARCHAR COLLATE NOCASE``) or a connection with a
``default_collation`` is refused — at binding, before every charge and before every statement that no charge's
check has just preceded.

**Memory.**  Before the charge, a query whose aggregate state, bounded from public information alone (GROUP BY
cells × the quantiles' candidate bins: :meth:`~dpmagic.backends.compiler.EngineBackend.aggregate_groups`), would
exceed the connection's ``memory_limit`` is refused; any engine failure after the charge reaches the analyst as
the session's one fixed message.
"""

from __future__ import annotations

import contextlib
import glob as globmod
import os
import re
import shutil
import tempfile
import uuid
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
from sqlglot import exp

from dpmagic.aggregates.sqlexpr import col
from dpmagic.backends.compiler import SourceColumn
from dpmagic.backends.engine import EngineBackend, _pandas_string_dtype
from dpmagic.domain.schema import OutOfRangePolicy, Schema
from dpmagic.errors import ConfigurationError, DataValidationError
from dpmagic.query.model import Query
from dpmagic.releases.cells import Cells

__all__ = ["DuckDBBackend", "data_files", "DEFAULT_MEMORY_LIMIT", "BYTES_PER_GROUP"]

#: a conservative estimate of the memory one aggregate group needs (DuckDB's hash table entry with its keys and
#: a few sums, measured at 40–80 bytes, and the row fetched into the kernel): the bound checked before the charge
BYTES_PER_GROUP = 128
_UNITS = {"bytes": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15}
_UNITS.update({"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50})

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
    if tid == "date":
        return "date", "date"
    if tid.startswith("timestamp"):  # TIMESTAMP, _S, _MS, _NS, WITH TIME ZONE: read at their wall-clock time
        return "timestamp", tid
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
    collation = "binary"

    def __init__(
        self,
        data: Any,
        schema: Schema,
        *,
        table: str | None = None,
        out_of_range: OutOfRangePolicy = "error",
        memory_limit: str = DEFAULT_MEMORY_LIMIT,
        threads: int | None = None,
        diagnostics: bool = False,
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
            # beyond memory_limit DuckDB spills to temp_directory (raw data: a private directory, removed on close)
            spill = tempfile.mkdtemp(prefix="dpmagic_duckdb_")  # mode 0700, an unpredictable name
            config: dict[str, Any] = {"memory_limit": memory_limit, "temp_directory": spill}
            if threads is not None:
                config["threads"] = threads
            try:
                con = duckdb.connect(":memory:", config=config)
            except BaseException:
                shutil.rmtree(spill, ignore_errors=True)
                raise
            #: the private spill directory (None: the caller's connection spills where it is configured to)
            self.spill_directory = spill
            # closes the connection and removes the directory: on close(), when the backend is dropped, or at exit
            self._finalizer = weakref.finalize(self, _close_and_remove, con, spill)
            try:
                rel = con.read_parquet(files) if fmt == "parquet" else con.read_csv(files)
            except duckdb.Error as e:
                self.close()
                raise DataValidationError(f"DuckDB cannot read {files[0]!r}: {type(e).__name__}") from None
            self.files = files
            self._con = con
        self._rel = rel
        columns = [SourceColumn(str(n), *_kind(t)) for n, t in zip(rel.columns, rel.types, strict=True)]
        #: the source's string columns (probed for a collation before every charge and unchecked statement)
        self._strings = [c.name for c in columns if c.kind == "string"]
        self._prechecked: Query | None = None  # the query whose check() last probed the collation
        self._skip_probe = False
        try:
            self._check_collation()
            self._init(schema, exp.to_table(_SOURCE), columns, out_of_range, diagnostics)
        except BaseException:
            self.close()
            raise

    spill_directory: str | None = None
    _finalizer: Any = None

    def _materialise(self, select: exp.Select) -> exp.Expr:
        """A person-level table's truncated, coded rows as a TEMP table of the source's connection, made once at
        binding (every query reads it; a temp table is never written to a database file, and spills where the
        connection spills: dpmagic's private directory for files).  Dropped when the backend is."""
        name = f"dpmagic_people_{uuid.uuid4().hex}"
        self._rel.query(_SOURCE, f"CREATE TEMP TABLE {name} AS {self.sql(select)}")
        fin = weakref.finalize(self, _drop_table, self._rel, name)
        fin.atexit = False
        #: the temp table every query of a person-level table reads
        self.people_table = name
        return exp.to_table(name)

    def close(self) -> None:
        """Close dpmagic's own connection and remove its spill directory with every file in it (no-op for a
        connection or relation the caller bound, and when already closed)."""
        if self._finalizer is not None:
            self._finalizer()

    def _check_collation(self) -> None:
        """Refuse a connection with a default collation (e.g. ``nocase``), or a string column with a collation of
        its own (``VARCHAR COLLATE NOCASE``, in a table, a view or an expression): under it 'ab' and 'AB' compare
        equal, so disjoint boxes would share rows and GROUP BY would merge declared cells.  Every generated
        comparison is ``COLLATE "binary"`` anyway (:attr:`~dpmagic.backends.compiler.Compiler.collation`); this makes
        the configuration an error rather than a silent difference from pandas.

        One statement that reads no row: the setting, and each string column compared with a binary-collated
        literal in a ``LIMIT 0`` scan — a binder error exactly when a column carries another collation (DuckDB
        shows no collation in ``DESCRIBE``); only then is each column probed alone, to name it."""
        try:
            collation = self._select(self._probe(self._strings))[0][0]
        except duckdb.BinderException as e:
            if "collation" not in str(e).lower():
                raise DataValidationError(f"duckdb cannot read the data: {type(e).__name__}") from None
            bad = next((n for n in self._strings if not self._binary(n)), "?")
            raise ConfigurationError(
                f"column {bad!r} has a collation (e.g. VARCHAR COLLATE NOCASE): dpmagic compares categories byte "
                "for byte, and under a collation two declared categories could match the same value",
                hint=f"bind it without: ALTER TABLE ... ALTER {bad} SET DATA TYPE VARCHAR, or a relation selecting "
                f'{bad} COLLATE "binary" AS {bad}',
            ) from None
        except duckdb.Error as e:
            raise DataValidationError(f"duckdb cannot read the data: {type(e).__name__}") from None
        if collation:
            raise ConfigurationError(
                f"the DuckDB connection sets default_collation={collation!r}: dpmagic compares categories exactly",
                hint="SET default_collation = '' on that connection (or bind a file: dpmagic opens its own)",
            )

    @staticmethod
    def _probe(names: list[str]) -> str:
        """SELECT the default collation, and (when ``names``) a count over a LIMIT 0 scan comparing each string
        column with ``'' COLLATE "binary"`` (a binder error if one carries another collation; no row is read)."""
        setting = exp.alias_(
            exp.Anonymous(this="current_setting", expressions=[exp.Literal.string("default_collation")]), "d"
        )
        if not names:
            return exp.select(setting).sql(dialect="duckdb")
        binary = exp.Collate(this=exp.Literal.string(""), expression=exp.to_identifier("binary", quoted=True))
        scan = (
            exp.select(
                *[
                    exp.alias_(exp.EQ(this=col(n), expression=exp.paren(binary.copy())), f"p{i}")
                    for i, n in enumerate(names)
                ]
            )
            .from_(_SOURCE)
            .limit(0)
        )
        probe = exp.Subquery(
            this=exp.select(exp.Count(this=exp.Star())).from_(exp.alias_(exp.Subquery(this=scan), "s"))
        )
        return exp.select(setting, exp.alias_(probe, "n")).sql(dialect="duckdb")

    def _binary(self, name: str) -> bool:
        """True when the string column ``name`` carries no collation (reads no row)."""
        try:
            self._select(self._probe([name]))
        except duckdb.BinderException as e:
            if "collation" in str(e).lower():
                return False
            raise DataValidationError(f"duckdb cannot read the data: {type(e).__name__}") from None
        except duckdb.Error as e:
            raise DataValidationError(f"duckdb cannot read the data: {type(e).__name__}") from None
        return True

    def memory_limit(self) -> int | None:
        """The connection's ``memory_limit`` in bytes (a setting: public), None when it cannot be read."""
        try:
            ((text,),) = self._select("SELECT current_setting('memory_limit')")
        except duckdb.Error:
            return None
        m = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]+)\s*", str(text))
        if m is None or m.group(2).lower() not in _UNITS:
            return None
        return int(float(m.group(1)) * _UNITS[m.group(2).lower()])

    def check(self, query: Query, extended: Any = None) -> None:
        """Before the charge, from public information only: refuse a collation (:meth:`_check_collation`) and a
        query whose aggregate state — :meth:`~dpmagic.backends.compiler.EngineBackend.aggregate_groups` ×
        :data:`BYTES_PER_GROUP`, a bound from the schema and the query — exceeds the connection's memory limit,
        so that the engine does not run out of memory after the charge, a data-dependent failure."""
        self._check_collation()
        self._prechecked = query  # its own evaluate, right after the charge, need not probe again (below)
        limit = self.memory_limit()
        groups = self.aggregate_groups(query, extended)
        if limit is not None and groups * BYTES_PER_GROUP > limit:
            raise ConfigurationError(
                f"this query's aggregates may need up to {groups:,} groups (about {groups * BYTES_PER_GROUP:,} "
                f"bytes), more than the DuckDB memory limit of {limit:,} bytes",
                hint="group by fewer keys, clamp a quantile's column to a narrower range, or bind with a larger "
                "memory_limit",
            )

    def evaluate(
        self, query: Query, units: Mapping[str, float] | None = None, *, extended: Mapping[str, Any] | None = None
    ) -> Cells:
        """:meth:`EngineBackend.evaluate`, every statement preceded by the collation probe — except the statements
        of the query whose :meth:`check` has just probed before its charge (a saving of one probe, ~5–10 ms, per
        query: every comparison is ``COLLATE "binary"`` anyway, so the probe is a guard, not what keeps the
        answer byte for byte)."""
        self._skip_probe = self._prechecked is query
        self._prechecked = None
        try:
            return super().evaluate(query, units, extended=extended)
        finally:
            self._skip_probe = False

    def _run(self, statement: exp.Expr) -> list[tuple[Any, ...]]:
        if not self._skip_probe:
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


def _close_and_remove(con: duckdb.DuckDBPyConnection, spill: str) -> None:
    """Close dpmagic's own connection and remove its private spill directory (the files in it are raw data)."""
    try:
        con.close()
    finally:
        shutil.rmtree(spill, ignore_errors=True)


def _drop_table(rel: duckdb.DuckDBPyRelation, name: str) -> None:
    """Drop a person-level backend's temp table (nothing when its connection is already closed)."""
    with contextlib.suppress(Exception):  # the connection is closed: the temp table went with it
        rel.query(_SOURCE, f"DROP TABLE IF EXISTS {name}")
