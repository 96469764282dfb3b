"""The public domain: a schema declares every column's possible values, never read from the rows.

The JSON format is docs/design.md §3.1::

    {"dataset": "adult-2026-v1", "table": "adult", "privacy_unit": "one row",
     "columns": {"age": {"type": "int", "lower": 17, "upper": 90},
                 "sex": {"type": "categorical", "values": ["Female", "Male"]}}}

A :class:`Schema` can also be built in Python (:meth:`Schema.from_dataframe` takes the categories of pandas
``Categorical`` columns as declared values and explicit bounds for numeric ones).  :meth:`Schema.validate`
checks a DataFrame against the declared domain when a session binds it.

The optional ``dataset`` is the custodian's identity of the data set: a session's budget (its ledger key)
belongs to that id, whatever rows are bound under it.  Without it the identity is derived from the
*canonical* domain only (:meth:`Schema.domain_fingerprint`), so two data sets with the same domain share one
budget unless the custodian gives them different ids.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import pandas as pd

from dpmagic.domain.columns import (  # re-exported: the declared columns live in dpmagic.domain.columns
    CategoricalColumn,
    Column,
    NumericColumn,
    OutOfRangePolicy,
    UnsafeInferenceWarning,
    canonical_number,
    canonical_value,
    column_from_dict,
    missing_columns_error,
    missing_id_error,
    missing_values_error,
    py_value,
    undeclared_columns_error,
    validate_column,
)
from dpmagic.domain.public import PublicTable, public_tables_from_dict
from dpmagic.domain.unit import PersonUnit, parse_privacy_unit
from dpmagic.errors import DataValidationError, SchemaError

__all__ = [
    "CategoricalColumn",
    "NumericColumn",
    "Column",
    "Schema",
    "OutOfRangePolicy",
    "UnsafeInferenceWarning",
]


def _temporal_bounds(series: pd.Series, bounds: tuple[Any, Any]) -> Literal["date", "timestamp"] | None:
    """The temporal type :meth:`Schema.from_dataframe` declares for a column with these bounds: ``date`` for
    ``datetime.date`` (not ``datetime``) bounds or ISO dates without a time, ``timestamp`` for other
    ``datetime`` / ISO bounds or a ``datetime64`` column; None for numeric bounds."""
    import datetime as dt

    import pandas as pd

    lo, hi = bounds
    if all(isinstance(b, dt.date) and not isinstance(b, dt.datetime) for b in (lo, hi)):
        return "date"
    if all(isinstance(b, str) and len(b.strip()) == 10 for b in (lo, hi)):
        return "date"
    if all(isinstance(b, (dt.datetime, str)) for b in (lo, hi)) or pd.api.types.is_datetime64_any_dtype(series):
        return "timestamp"
    return None


@dataclass(frozen=True)
class Schema:
    """The declared public domain of one table: an ordered mapping of column name to column."""

    columns: Mapping[str, Column]
    table: str = "data"
    #: free text for a row-level table (``"one row"``) or a :class:`~dpmagic.domain.unit.PersonUnit`
    privacy_unit: str | PersonUnit = "one row"
    #: the custodian's identity of the data set (``"dataset"`` in the JSON); the budget belongs to it
    dataset: str | None = None
    #: optional public bound on the rows of one GROUP BY group (``"max_group_size"``), used by decision queries
    max_group_size: int | None = None
    #: public lookup tables (``"public_tables"``), joinable on a private column (:mod:`dpmagic.domain.public`)
    public_tables: Mapping[str, PublicTable] | None = None

    def __post_init__(self) -> None:
        if not self.columns:
            raise SchemaError("the schema declares no columns")
        m = self.max_group_size
        if m is not None and (not isinstance(m, int) or isinstance(m, bool) or m < 1):
            raise SchemaError(
                f"the schema's 'max_group_size' must be a positive integer (a public bound on a group's rows), got {m!r}",
                hint='declare e.g. "max_group_size": 20000, or leave it out',
            )
        if self.dataset is not None and (not isinstance(self.dataset, str) or not self.dataset.strip()):
            raise SchemaError(
                f"the schema's 'dataset' must be a non-empty string (the data set's id), got {self.dataset!r}"
            )
        for name, col in self.columns.items():
            if col.name != name:
                raise SchemaError(f"column key {name!r} does not match its column name {col.name!r}")
        object.__setattr__(self, "columns", dict(self.columns))
        if isinstance(self.privacy_unit, PersonUnit):
            self.privacy_unit.check_columns(list(self.columns))
        elif not isinstance(self.privacy_unit, str):
            object.__setattr__(self, "privacy_unit", parse_privacy_unit(self.privacy_unit))
            if isinstance(self.privacy_unit, PersonUnit):
                self.privacy_unit.check_columns(list(self.columns))

    # -- construction -------------------------------------------------------------------------------
    @classmethod
    def of(cls, schema: Schema | str | Path | Mapping[str, Any]) -> Schema:
        """A schema given as itself, its parsed JSON object, or the path of its JSON file."""
        if isinstance(schema, Schema):
            return schema
        if isinstance(schema, Mapping):
            return cls.from_dict(schema)
        return cls.from_json(schema)

    @classmethod
    def from_dict(cls, data: Any) -> Schema:
        """Build a schema from the parsed JSON object of docs/design.md §3.1 (extra keys are ignored)."""
        if not isinstance(data, Mapping):
            raise SchemaError("a schema must be a JSON object with a 'columns' object")
        cols = data.get("columns")
        if not isinstance(cols, Mapping) or not cols:
            raise SchemaError("the schema needs a non-empty 'columns' object")
        columns = {str(name): column_from_dict(str(name), spec) for name, spec in cols.items()}
        table = data.get("table", "data")
        if not isinstance(table, str):
            raise SchemaError("the schema's 'table' must be a string")
        dataset = data.get("dataset")
        if dataset is not None and not isinstance(dataset, str):
            raise SchemaError(f"the schema's 'dataset' must be a string (the data set's id), got {dataset!r}")
        return cls(
            columns,
            table=table,
            privacy_unit=parse_privacy_unit(data.get("privacy_unit", "one row")),
            dataset=dataset,
            max_group_size=data.get("max_group_size"),
            public_tables=public_tables_from_dict(data.get("public_tables"), table) or None,
        )

    @classmethod
    def from_json(cls, source: str | Path) -> Schema:
        """Load a schema from a JSON file path (or a JSON string starting with ``{``)."""
        text: str
        if isinstance(source, str) and source.lstrip().startswith("{"):
            text = source
        else:
            path = Path(source)
            if not path.is_file():
                raise SchemaError(f"schema file {str(path)!r} does not exist")
            text = path.read_text(encoding="utf-8")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SchemaError(f"the schema is not valid JSON: {exc}") from None
        return cls.from_dict(data)

    @classmethod
    def from_dataframe(
        cls,
        df: pd.DataFrame,
        bounds: Mapping[str, tuple[float, float]] | None = None,
        *,
        categories: Mapping[str, Iterable[Any]] | None = None,
        table: str = "data",
        dataset: str | None = None,
        unsafe_infer: bool = False,
    ) -> Schema:
        """Declare a schema for ``df`` without reading its rows.

        Categorical columns take their declared values from the pandas ``Categorical`` dtype (its
        categories, a public declaration) or from ``categories``; numeric columns need explicit
        ``bounds={"age": (17, 90)}``; ``dataset`` is the data set's id (see the module docstring).  With ``unsafe_infer=True`` anything not declared is read from the
        rows, with an :class:`UnsafeInferenceWarning`: the resulting domain leaks information and the
        privacy guarantee no longer holds for those columns.
        """
        import pandas as pd  # imported where used: `import dpmagic` stays light

        bounds = dict(bounds or {})
        categories = {k: list(v) for k, v in (categories or {}).items()}
        columns: dict[str, Column] = {}
        inferred: list[str] = []
        for name in df.columns:
            name_s = str(name)
            series = df[name]
            if name_s in categories:
                columns[name_s] = CategoricalColumn(name_s, tuple(categories[name_s]))
            elif isinstance(series.dtype, pd.CategoricalDtype):
                columns[name_s] = CategoricalColumn(name_s, tuple(py_value(v) for v in series.cat.categories))
            elif name_s in bounds and _temporal_bounds(series, bounds[name_s]) is not None:
                temporal = _temporal_bounds(series, bounds[name_s])
                assert temporal is not None
                spec = {"type": temporal, "lower": str(bounds[name_s][0]), "upper": str(bounds[name_s][1])}
                columns[name_s] = column_from_dict(name_s, spec)
            elif name_s in bounds:
                lo, hi = bounds[name_s]
                kind: Literal["int", "float"] = "int" if pd.api.types.is_integer_dtype(series) else "float"
                columns[name_s] = NumericColumn(name_s, kind, lo, hi)
            elif unsafe_infer:
                inferred.append(name_s)
                if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
                    kind = "int" if pd.api.types.is_integer_dtype(series) else "float"
                    columns[name_s] = NumericColumn(name_s, kind, py_value(series.min()), py_value(series.max()))
                else:
                    columns[name_s] = CategoricalColumn(
                        name_s, tuple(sorted({py_value(v) for v in series.dropna().unique()}, key=str))
                    )
            else:
                raise SchemaError(
                    f"column {name_s!r} has no declared domain: make it a pandas Categorical, pass "
                    f"categories={{{name_s!r}: [...]}} or bounds={{{name_s!r}: (lower, upper)}}",
                    hint="dpmagic never reads the domain from the rows unless you pass unsafe_infer=True",
                )
        extra = (set(bounds) | set(categories)) - {str(c) for c in df.columns}
        if extra:
            raise SchemaError(f"bounds or categories given for unknown column(s): {sorted(extra)}")
        if inferred:
            warnings.warn(
                f"domain of column(s) {inferred} was read from the data (unsafe_infer=True): this leaks "
                "information and voids the differential privacy guarantee for them",
                UnsafeInferenceWarning,
                stacklevel=2,
            )
        return cls(columns, table=table, dataset=dataset)

    # -- access -----------------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Column:
        return self.columns[name]

    def __contains__(self, name: object) -> bool:
        return name in self.columns

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns)

    def __len__(self) -> int:
        return len(self.columns)

    @property
    def names(self) -> list[str]:
        return list(self.columns)

    @property
    def person_unit(self) -> PersonUnit | None:
        """The person-level unit, or ``None`` for a row-level table."""
        return self.privacy_unit if isinstance(self.privacy_unit, PersonUnit) else None

    @property
    def unit_label(self) -> str:
        """The privacy unit in words: "one row", or "one person (patient_id), at most 40 rows each"."""
        u = self.person_unit
        return u.describe() if u is not None else "one row"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {} if self.dataset is None else {"dataset": self.dataset}
        out.update(
            {
                "table": self.table,
                "privacy_unit": (
                    self.privacy_unit.to_dict() if isinstance(self.privacy_unit, PersonUnit) else self.privacy_unit
                ),
                "columns": {name: col.to_dict() for name, col in self.columns.items()},
            }
        )
        if self.max_group_size is not None:
            out["max_group_size"] = self.max_group_size
        if self.public_tables:
            out["public_tables"] = {name: t.to_dict() for name, t in self.public_tables.items()}
        return out

    def fingerprint(self) -> str:
        """A stable hash of the whole declaration (id, table name, privacy unit and domain, as written)."""
        import hashlib

        blob = json.dumps(self.to_dict(), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()

    def canonical_domain(self) -> list[Any]:
        """The declared domain and nothing else, in a canonical form.

        Columns sorted by name; numbers written exactly and by value (``0`` and ``0.0`` are one number, an int
        beyond float range stays exact); a categorical column's values sorted (their order means nothing);
        the ``int``/``float``/``categorical`` type of each column kept.  Free text (``table``,
        ``privacy_unit``, ``description``, ``dataset``) is left out.  O(Σ k log k) for k values per column.
        """
        out: list[Any] = []
        for name in sorted(self.columns):
            col = self.columns[name]
            if isinstance(col, CategoricalColumn):
                vals = sorted({canonical_value(v) for v in col.values})
                out.append([name, "categorical", vals])
            else:
                out.append([name, col.type_name, canonical_number(col.lower), canonical_number(col.upper)])
        return out

    def domain_fingerprint(self) -> str:
        """SHA-256 of :meth:`canonical_domain`: the identity of a data set that declares no ``dataset`` id."""
        import hashlib

        blob = json.dumps(self.canonical_domain(), separators=(",", ":"), ensure_ascii=True).encode()
        return hashlib.sha256(blob).hexdigest()

    # -- validation ---------------------------------------------------------------------------------------
    def validate(
        self, df: pd.DataFrame, *, out_of_range: OutOfRangePolicy = "error", diagnostics: bool = False
    ) -> pd.DataFrame:
        """Check ``df`` against the declared domain and return the frame the session will query.

        * a column missing from either side, a missing value, a category that is not declared, a
          non-numeric value in a numeric column or a fraction in an int column → :class:`DataValidationError`;
        * a number outside ``[lower, upper]`` → an error with ``out_of_range="error"`` (default), or,
          with ``out_of_range="clamp"`` (a custodian's choice), the value is clamped to the nearest bound.
          Clamping changes no row's membership in the privacy unit and is applied to a copy.

        The errors name the column and the problem, never a value or a count of the data, unless
        ``diagnostics=True`` — the data custodian's switch for fixing the data: then the first undeclared values
        and the number of values out of bounds are shown (:func:`~dpmagic.domain.columns.categories_error`).
        """
        import pandas as pd

        if out_of_range not in ("error", "clamp"):
            raise DataValidationError(f"out_of_range must be 'error' or 'clamp', not {out_of_range!r}")
        if not isinstance(df, pd.DataFrame):
            raise DataValidationError(f"expected a pandas DataFrame, got {type(df).__name__}")
        data_cols = [str(c) for c in df.columns]
        missing = [c for c in self.columns if c not in data_cols]
        if missing:
            raise missing_columns_error(missing)
        undeclared = [c for c in data_cols if c not in self.columns]
        if undeclared:
            raise undeclared_columns_error(undeclared)
        out = df.copy()
        out.columns = data_cols
        for name, col in self.columns.items():
            series = out[name]
            if series.isna().any():
                unit = self.person_unit
                raise missing_id_error(name) if unit is not None and unit.id == name else missing_values_error(name)
            out[name] = validate_column(col, series, out_of_range, diagnostics=diagnostics)
        return out
