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
import math
import numbers
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

from dpmagic.errors import DataValidationError, SchemaError

__all__ = [
    "CategoricalColumn",
    "NumericColumn",
    "Column",
    "Schema",
    "OutOfRangePolicy",
    "UnsafeInferenceWarning",
]

OutOfRangePolicy = Literal["error", "clamp"]

#: The value range of an ``int`` column: declared bounds must lie in it (the data are held as int64).
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class UnsafeInferenceWarning(UserWarning):
    """Raised (as a warning) when a domain is read from the rows: that leaks information."""


@dataclass(frozen=True)
class CategoricalColumn:
    """A column whose domain is a declared, finite list of values (strings or numbers)."""

    name: str
    values: tuple[Any, ...]

    kind: Literal["categorical"] = field(default="categorical", init=False)

    def __post_init__(self) -> None:
        if len(self.values) == 0:
            raise SchemaError(f"column {self.name!r}: a categorical column needs a non-empty 'values' list")
        for v in self.values:
            if not isinstance(v, (str, int, float)) or isinstance(v, bool):
                raise SchemaError(f"column {self.name!r}: category {v!r} is not a string or a number")
            if isinstance(v, float) and not math.isfinite(v):
                raise SchemaError(f"column {self.name!r}: category {v!r} is not finite")
        if len(set(self.values)) != len(self.values):
            raise SchemaError(f"column {self.name!r}: the 'values' list has duplicates")

    @property
    def size(self) -> int:
        return len(self.values)

    @property
    def is_numeric_valued(self) -> bool:
        """True when every category is a number (so ``<``/``>`` comparisons make sense)."""
        return all(isinstance(v, (int, float)) for v in self.values)

    def index_of(self, value: Any) -> int | None:
        """Position of ``value`` among the declared values, else None.  O(1) after a first O(k) call.

        Strings match strings by text; numbers match numbers by value (``3 == 3.0``, numpy scalars too);
        booleans, NaN and other types match nothing.
        """
        lookup = self.__dict__.get("_lookup")
        if lookup is None:  # built on first use; a frozen dataclass, so set through __dict__
            vals = self.values
            # Python numbers as dict keys compare exactly by value (3 == 3.0, but 2**53 + 1 != 2.0**53), so
            # int categories beyond 2^53 (or beyond float range) stay distinct; the declared values are
            # pairwise unequal (checked on construction), so no two keys collide.
            strs: dict[str, int] = {v: i for i, v in enumerate(vals) if isinstance(v, str)}
            nums: dict[float | int, int] = {v: i for i, v in enumerate(vals) if not isinstance(v, str)}
            lookup = self.__dict__["_lookup"] = (strs, nums)
        if isinstance(value, str):
            return lookup[0].get(str(value))
        if isinstance(value, (bool, np.bool_)):
            return None
        key = _number_key(value)
        return None if key is None else lookup[1].get(key)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "categorical", "values": list(self.values)}


@dataclass(frozen=True)
class NumericColumn:
    """An ``int`` or ``float`` column with inclusive declared bounds ``lower <= x <= upper``.

    On an ``int`` column the bounds are stored as exact Python ints within the int64 range (a whole float
    such as ``1.6e18`` becomes the integer it denotes), and every layer — value sets, the overlap engine's
    keys, the backend's row masks — compares int values exactly, also beyond 2^53 (e.g. nanosecond
    timestamps).
    """

    name: str
    kind: Literal["int", "float"]
    lower: float
    upper: float

    def __post_init__(self) -> None:
        if self.kind not in ("int", "float"):
            raise SchemaError(f"column {self.name!r}: numeric type must be 'int' or 'float', not {self.kind!r}")
        for label, b in (("lower", self.lower), ("upper", self.upper)):
            if isinstance(b, bool) or not isinstance(b, (int, float)):
                raise SchemaError(f"column {self.name!r}: {label!r} must be a finite number, got {b!r}")
            if isinstance(b, float) and not math.isfinite(b):
                raise SchemaError(f"column {self.name!r}: {label!r} must be a finite number, got {b!r}")
            if self.kind == "int":
                if isinstance(b, float) and not b.is_integer():
                    raise SchemaError(f"column {self.name!r}: {label!r} of an int column must be whole, got {b!r}")
                # exact Python ints from here on: a bound like 1.6e18 is the integer that double denotes
                exact = int(b)
                if not INT64_MIN <= exact <= INT64_MAX:
                    raise SchemaError(
                        f"column {self.name!r}: {label!r} {exact} of an int column is outside the int64 range "
                        f"[{INT64_MIN}, {INT64_MAX}]",
                        hint="int columns hold 64-bit integers; declare a float or categorical column instead",
                    )
                object.__setattr__(self, label, exact)
            elif isinstance(b, int):
                try:
                    float(b)
                except OverflowError:
                    raise SchemaError(
                        f"column {self.name!r}: {label!r} {b} of a float column is beyond the double range"
                    ) from None
        if self.lower > self.upper:
            raise SchemaError(f"column {self.name!r}: lower bound {self.lower!r} is above upper bound {self.upper!r}")

    @property
    def is_int(self) -> bool:
        return self.kind == "int"

    @property
    def max_abs(self) -> float:
        """max(|lower|, |upper|): the add/remove-one sensitivity of a clamped SUM (rounded up to a double)."""
        return _float_up(max(abs(self.lower), abs(self.upper)))

    @property
    def width(self) -> float:
        """upper - lower: the replace-one sensitivity of a clamped SUM (rounded up to a double)."""
        return _float_up(self.upper - self.lower)

    def to_dict(self) -> dict[str, Any]:
        lo, hi = (int(self.lower), int(self.upper)) if self.is_int else (self.lower, self.upper)
        return {"type": self.kind, "lower": lo, "upper": hi}


Column = CategoricalColumn | NumericColumn


def _float_up(x: float | int) -> float:
    """The least double >= ``x``: an exact int beyond 2^53 never rounds down (a sensitivity stays an upper
    bound)."""
    f = float(x)
    return math.nextafter(f, math.inf) if f < x else f


def _number_key(value: Any) -> float | int | None:
    """A number's identity for category lookup: the Python number itself (numpy scalars unwrapped), which
    dict lookup compares exactly by value (``3 == 3.0``; ints beyond 2^53 or beyond float range stay
    exact); None for anything that is not a real number (booleans included)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return value  # type: ignore[return-value]


def _canonical_number(v: Any) -> str:
    """A number's exact value as text, the same for ``0``, ``0.0`` and ``np.int64(0)``: ``"0"``, ``"-3/4"``."""
    from fractions import Fraction

    return str(Fraction(v.item() if isinstance(v, np.generic) else v))


def _canonical_value(v: Any) -> str:
    """A category's canonical text: ``s:`` + a string, or ``n:`` + an exact number (so ``"1"`` differs from ``1``)."""
    return f"s:{v}" if isinstance(v, str) else f"n:{_canonical_number(v)}"


def _column_from_dict(name: str, spec: Any) -> Column:
    if not isinstance(spec, Mapping):
        raise SchemaError(f"column {name!r}: its declaration must be an object, got {type(spec).__name__}")
    ctype = spec.get("type")
    if ctype == "categorical":
        values = spec.get("values")
        if not isinstance(values, list):
            raise SchemaError(f"column {name!r}: a categorical column needs a 'values' list")
        return CategoricalColumn(name, tuple(values))
    if ctype in ("int", "float"):
        if "lower" not in spec or "upper" not in spec:
            raise SchemaError(f"column {name!r}: an {ctype} column needs inclusive 'lower' and 'upper' bounds")
        return NumericColumn(name, ctype, spec["lower"], spec["upper"])
    raise SchemaError(f"column {name!r}: unknown type {ctype!r} (expected 'categorical', 'int' or 'float')")


@dataclass(frozen=True)
class Schema:
    """The declared public domain of one table: an ordered mapping of column name to column."""

    columns: Mapping[str, Column]
    table: str = "data"
    privacy_unit: str = "one row"
    #: the custodian's identity of the data set (``"dataset"`` in the JSON); the budget belongs to it
    dataset: str | None = None

    def __post_init__(self) -> None:
        if not self.columns:
            raise SchemaError("the schema declares no columns")
        if self.dataset is not None and (not isinstance(self.dataset, str) or not self.dataset.strip()):
            raise SchemaError(
                f"the schema's 'dataset' must be a non-empty string (the data set's id), got {self.dataset!r}"
            )
        for name, col in self.columns.items():
            if col.name != name:
                raise SchemaError(f"column key {name!r} does not match its column name {col.name!r}")
        object.__setattr__(self, "columns", dict(self.columns))

    # -- construction -------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any) -> Schema:
        """Build a schema from the parsed JSON object of docs/design.md §3.1 (extra keys are ignored)."""
        if not isinstance(data, Mapping):
            raise SchemaError("a schema must be a JSON object with a 'columns' object")
        cols = data.get("columns")
        if not isinstance(cols, Mapping) or not cols:
            raise SchemaError("the schema needs a non-empty 'columns' object")
        columns = {str(name): _column_from_dict(str(name), spec) for name, spec in cols.items()}
        table = data.get("table", "data")
        if not isinstance(table, str):
            raise SchemaError("the schema's 'table' must be a string")
        dataset = data.get("dataset")
        if dataset is not None and not isinstance(dataset, str):
            raise SchemaError(f"the schema's 'dataset' must be a string (the data set's id), got {dataset!r}")
        return cls(columns, table=table, privacy_unit=str(data.get("privacy_unit", "one row")), dataset=dataset)

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
                columns[name_s] = CategoricalColumn(name_s, tuple(_py(v) for v in series.cat.categories))
            elif name_s in bounds:
                lo, hi = bounds[name_s]
                kind: Literal["int", "float"] = "int" if pd.api.types.is_integer_dtype(series) else "float"
                columns[name_s] = NumericColumn(name_s, kind, lo, hi)
            elif unsafe_infer:
                inferred.append(name_s)
                if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
                    kind = "int" if pd.api.types.is_integer_dtype(series) else "float"
                    columns[name_s] = NumericColumn(name_s, kind, _py(series.min()), _py(series.max()))
                else:
                    columns[name_s] = CategoricalColumn(
                        name_s, tuple(sorted({_py(v) for v in series.dropna().unique()}, key=str))
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

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.columns)

    def __len__(self) -> int:
        return len(self.columns)

    @property
    def names(self) -> list[str]:
        return list(self.columns)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {} if self.dataset is None else {"dataset": self.dataset}
        out.update(
            {
                "table": self.table,
                "privacy_unit": self.privacy_unit,
                "columns": {name: col.to_dict() for name, col in self.columns.items()},
            }
        )
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
                vals = sorted({_canonical_value(v) for v in col.values})
                out.append([name, "categorical", vals])
            else:
                out.append([name, col.kind, _canonical_number(col.lower), _canonical_number(col.upper)])
        return out

    def domain_fingerprint(self) -> str:
        """SHA-256 of :meth:`canonical_domain`: the identity of a data set that declares no ``dataset`` id."""
        import hashlib

        blob = json.dumps(self.canonical_domain(), separators=(",", ":"), ensure_ascii=True).encode()
        return hashlib.sha256(blob).hexdigest()

    # -- validation ---------------------------------------------------------------------------------------
    def validate(self, df: pd.DataFrame, *, out_of_range: OutOfRangePolicy = "error") -> pd.DataFrame:
        """Check ``df`` against the declared domain and return the frame the session will query.

        * a column missing from either side, a missing value, a category that is not declared, a
          non-numeric value in a numeric column or a fraction in an int column → :class:`DataValidationError`;
        * a number outside ``[lower, upper]`` → an error with ``out_of_range="error"`` (default), or,
          with ``out_of_range="clamp"`` (a custodian's choice), the value is clamped to the nearest bound.
          Clamping changes no row's membership in the privacy unit and is applied to a copy.
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
                raise missing_values_error(name)
            if isinstance(col, CategoricalColumn):
                out[name] = _validate_categorical(col, series)
            else:
                out[name] = _validate_numeric(col, series, out_of_range)
        return out


# -- validation messages (one wording for every backend: pandas, DuckDB, Spark) ------------------------------
def missing_columns_error(missing: list[str]) -> DataValidationError:
    return DataValidationError(f"column(s) {missing} are declared in the schema but missing from the data")


def undeclared_columns_error(undeclared: list[str]) -> DataValidationError:
    return DataValidationError(
        f"column(s) {undeclared} are in the data but not declared in the schema",
        hint="declare them, or drop them from the DataFrame before binding",
    )


def missing_values_error(name: str) -> DataValidationError:
    return DataValidationError(
        f"column {name!r} has missing values; the declared domain has none",
        hint=f"drop those rows (df.dropna(subset=[{name!r}])), impute a value inside the declared "
        f"domain (df[{name!r}].fillna(...)), or declare a sentinel category such as 'unknown' in the "
        "schema and fill the gaps with it",
    )


def categories_error(name: str, bad: list[Any]) -> DataValidationError:
    """``bad``: the distinct undeclared values in order of first appearance (at most 5 are shown)."""
    shown = ", ".join(repr(b) for b in bad[:5]) + (" ..." if len(bad) > 5 else "")
    return DataValidationError(f"column {name!r} has value(s) outside its declared categories: {shown}")


def dtype_error(col: NumericColumn, dtype: str) -> DataValidationError:
    return DataValidationError(f"column {col.name!r} is declared {col.kind} but holds {dtype} values")


def nonfinite_error(name: str) -> DataValidationError:
    return DataValidationError(f"column {name!r} has non-finite values")


def fractional_error(name: str) -> DataValidationError:
    return DataValidationError(f"column {name!r} is declared int but holds fractional values")


def outside_error(col: NumericColumn, n: int) -> DataValidationError:
    return DataValidationError(
        f"column {col.name!r} has {n} value(s) outside its declared bounds [{col.lower}, {col.upper}]",
        hint="fix the data or bind with out_of_range='clamp' (a custodian's decision)",
    )


def _py(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def _validate_categorical(col: CategoricalColumn, series: pd.Series) -> pd.Series:
    import pandas as pd

    values = series.astype(object) if isinstance(series.dtype, pd.CategoricalDtype) else series
    present = pd.unique(values)
    bad = [_py(v) for v in present if col.index_of(_py(v)) is None]
    if bad:
        raise categories_error(col.name, bad)
    # Normalise to the declared values (e.g. 1.0 -> 1) so that comparisons with literals are exact.
    mapping = {v: col.values[col.index_of(_py(v))] for v in present}  # type: ignore[index]
    return values.map(mapping).astype(object)


def _validate_numeric(col: NumericColumn, series: pd.Series, policy: OutOfRangePolicy) -> pd.Series:
    import pandas as pd

    if not pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series):
        raise dtype_error(col, str(series.dtype))
    if col.is_int:
        return _validate_int(col, series, policy)
    arr = series.to_numpy(dtype=float)
    if not np.isfinite(arr).all():
        raise nonfinite_error(col.name)
    outside = (arr < col.lower) | (arr > col.upper)
    if outside.any():
        if policy == "error":
            n = int(outside.sum())
            raise outside_error(col, n)
        arr = np.clip(arr, col.lower, col.upper)
    return pd.Series(arr, index=series.index)


def _validate_int(col: NumericColumn, series: pd.Series, policy: OutOfRangePolicy) -> pd.Series:
    """An int column's values as exact int64 (never through a double: 2^53 + 1 stays 2^53 + 1)."""
    import pandas as pd

    lo, hi = int(col.lower), int(col.upper)
    if pd.api.types.is_integer_dtype(series):
        unsigned = pd.api.types.is_unsigned_integer_dtype(series)
        arr = series.to_numpy(dtype=np.uint64 if unsigned else np.int64)
        # numpy compares an integer array with a Python int exactly (bounds lie within int64)
        below, above = arr < lo, arr > hi
    else:
        raw = series.to_numpy(dtype=float)
        if not np.isfinite(raw).all():
            raise nonfinite_error(col.name)
        if not np.all(raw == np.round(raw)):
            raise fractional_error(col.name)
        # whole doubles in [-2^63, 2^63) convert to int64 exactly; the rest lie outside every int bound
        below = raw < -(2.0**63)
        above = raw >= 2.0**63
        arr = np.where(below | above, 0.0, raw).astype(np.int64)
        below |= arr < lo
        above |= arr > hi
    outside = below | above
    if outside.any() and policy == "error":
        n = int(outside.sum())
        raise outside_error(col, n)
    out = np.where(above, 0, arr).astype(np.int64)  # uint64 above int64's range is "above" (0 is a placeholder)
    out[below] = lo
    out[above] = hi
    return pd.Series(out, index=series.index)
