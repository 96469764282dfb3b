"""Declared columns: a categorical column's values and a numeric column's type and bounds, their canonical
forms, and the validation of a DataFrame column against them (:meth:`dpmagic.domain.schema.Schema.validate`)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

from dpmagic.domain.temporal import Temporal
from dpmagic.errors import DataValidationError, SchemaError

__all__ = [
    "clamp_bounds",
    "CategoricalColumn",
    "Column",
    "INT64_MAX",
    "INT64_MIN",
    "NumericColumn",
    "OutOfRangePolicy",
    "UnsafeInferenceWarning",
    "canonical_number",
    "canonical_value",
    "column_from_dict",
    "py_value",
    "validate_column",
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
            nums: dict[object, int] = {v: i for i, v in enumerate(vals) if not isinstance(v, str)}
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
    #: a ``date`` (day numbers) or ``timestamp`` (microseconds) column, held as the ``int`` column it is
    #: (:mod:`dpmagic.domain.temporal`); None for a plain number
    temporal: Temporal | None = None

    def __post_init__(self) -> None:
        if self.temporal is not None and (self.temporal not in ("date", "timestamp") or self.kind != "int"):
            raise SchemaError(f"column {self.name!r}: a date or timestamp column is held as an int column")
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
    def type_name(self) -> str:
        """The declared type: ``int``, ``float``, ``date`` or ``timestamp``."""
        return self.temporal or self.kind

    def show(self, v: Any) -> str:
        """A value of the column as the analyst writes it (ISO text on a date / timestamp column)."""
        if self.temporal is not None:
            from dpmagic.domain.temporal import format_value

            return format_value(int(v), self.temporal)
        return f"{v:g}" if isinstance(v, float) else str(v)

    @property
    def max_abs(self) -> float:
        """max(|lower|, |upper|): the add/remove-one sensitivity of a clamped SUM (rounded up to a double)."""
        return _float_up(max(abs(self.lower), abs(self.upper)))

    @property
    def width(self) -> float:
        """upper - lower: the replace-one sensitivity of a clamped SUM (rounded up to a double)."""
        return _float_up(self.upper - self.lower)

    def to_dict(self) -> dict[str, Any]:
        if self.temporal is not None:
            return {"type": self.temporal, "lower": self.show(self.lower), "upper": self.show(self.upper)}
        lo, hi = (int(self.lower), int(self.upper)) if self.is_int else (self.lower, self.upper)
        return {"type": self.kind, "lower": lo, "upper": hi}


Column = CategoricalColumn | NumericColumn


def _float_up(x: float | int) -> float:
    """The least double >= ``x``: an exact int beyond 2^53 never rounds down (a sensitivity stays an upper
    bound)."""
    f = float(x)
    return math.nextafter(f, math.inf) if f < x else f


def _number_key(value: Any) -> numbers.Real | None:
    """A number's identity for category lookup: the Python number itself (numpy scalars unwrapped), which
    dict lookup compares exactly by value (``3 == 3.0``; ints beyond 2^53 or beyond float range stay
    exact); None for anything that is not a real number (booleans included)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return value


def canonical_number(v: Any) -> str:
    """A number's exact value as text, the same for ``0``, ``0.0`` and ``np.int64(0)``: ``"0"``, ``"-3/4"``."""
    from fractions import Fraction

    return str(Fraction(v.item() if isinstance(v, np.generic) else v))


def canonical_value(v: Any) -> str:
    """A category's canonical text: ``s:`` + a string, or ``n:`` + an exact number (so ``"1"`` differs from ``1``)."""
    return f"s:{v}" if isinstance(v, str) else f"n:{canonical_number(v)}"


def column_from_dict(name: str, spec: Any) -> Column:
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
    if ctype in ("date", "timestamp"):
        from dpmagic.domain.temporal import bound_of

        if "lower" not in spec or "upper" not in spec:
            raise SchemaError(
                f"column {name!r}: a {ctype} column needs inclusive 'lower' and 'upper' bounds (ISO strings)"
            )
        lo, hi = (bound_of(name, k, spec[k], ctype) for k in ("lower", "upper"))
        return NumericColumn(name, "int", lo, hi, temporal=ctype)
    raise SchemaError(
        f"column {name!r}: unknown type {ctype!r} (expected 'categorical', 'int', 'float', 'date' or 'timestamp')"
    )


def py_value(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


# -- validation messages (one wording for every backend: pandas, DuckDB, Spark) ------------------------------
# Binding errors name the column and the kind of problem, never a value of the data or an exact count: binding
# may be done by a server, or under a schema an analyst supplied, and an error that quoted the rows would be a
# free read of them.  ``diagnostics=True`` — the data custodian's switch, for fixing the data — adds the first
# undeclared values and the number of values out of bounds (``Session(..., diagnostics=True)``,
# ``Schema.validate(df, diagnostics=True)``).
_DIAGNOSTICS_HINT = "the data custodian sees the offending values by binding with diagnostics=True"


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


def missing_id_error(name: str) -> DataValidationError:
    """The person-level unit's id column has missing values: a row of no one cannot be bounded per person."""
    return DataValidationError(
        f"column {name!r}, the privacy unit's id (the person each row belongs to), has missing values",
        hint=f"every row must name its person: drop those rows (df.dropna(subset=[{name!r}])) or give each its "
        "person's id; a row with no id cannot be bounded per person",
    )


def categories_error(name: str, bad: list[Any] | None = None, *, diagnostics: bool = False) -> DataValidationError:
    """A column holds undeclared categories.  With ``diagnostics`` (the custodian's switch), ``bad`` — the
    distinct undeclared values in order of first appearance — are shown (at most 5); otherwise no value is."""
    if diagnostics and bad:
        shown = ", ".join(repr(b) for b in bad[:5]) + (" ..." if len(bad) > 5 else "")
        return DataValidationError(f"column {name!r} has value(s) outside its declared categories: {shown}")
    return DataValidationError(f"column {name!r} holds values outside its declared categories", hint=_DIAGNOSTICS_HINT)


def dtype_error(col: NumericColumn, dtype: str) -> DataValidationError:
    if col.temporal is not None:
        return DataValidationError(
            f"column {col.name!r} is declared {col.temporal} but holds {dtype} values",
            hint=f"bind it as {col.temporal} values (pandas datetime64, datetime.date objects or ISO strings; a "
            f"DATE / TIMESTAMP column of DuckDB or Spark)",
        )
    return DataValidationError(f"column {col.name!r} is declared {col.kind} but holds {dtype} values")


def nonfinite_error(name: str) -> DataValidationError:
    return DataValidationError(f"column {name!r} has non-finite values")


def fractional_error(name: str) -> DataValidationError:
    return DataValidationError(f"column {name!r} is declared int but holds fractional values")


def time_of_day_error(name: str) -> DataValidationError:
    return DataValidationError(
        f"column {name!r} is declared date but holds times of day",
        hint="declare it a timestamp, or bind the dates alone (df[col].dt.normalize() checks nothing: drop the times)",
    )


def outside_error(col: NumericColumn, n: int, *, diagnostics: bool = False) -> DataValidationError:
    """A column holds values outside its declared bounds; their number ``n`` only with ``diagnostics``."""
    hint = "fix the data or bind with out_of_range='clamp' (a custodian's decision)"
    bounds = (
        f"[{col.lower}, {col.upper}]" if col.temporal is None else f"[{col.show(col.lower)}, {col.show(col.upper)}]"
    )
    if diagnostics:
        return DataValidationError(
            f"column {col.name!r} has {n} value(s) outside its declared bounds {bounds}", hint=hint
        )
    return DataValidationError(
        f"column {col.name!r} holds values outside its declared bounds {bounds}",
        hint=f"{hint}; {_DIAGNOSTICS_HINT}",
    )


def _validate_categorical(col: CategoricalColumn, series: pd.Series, diagnostics: bool = False) -> pd.Series:
    import pandas as pd

    values = series.astype(object) if isinstance(series.dtype, pd.CategoricalDtype) else series
    present = pd.unique(values)
    bad = [py_value(v) for v in present if col.index_of(py_value(v)) is None]
    if bad:
        raise categories_error(col.name, bad, diagnostics=diagnostics)
    # Normalise to the declared values (e.g. 1.0 -> 1) so that comparisons with literals are exact.
    mapping: dict[Any, Any] = {}
    for v in present:
        i = col.index_of(py_value(v))
        assert i is not None  # every present value is declared (checked above)
        mapping[v] = col.values[i]
    return values.map(mapping).astype(object)


def _validate_numeric(
    col: NumericColumn, series: pd.Series, policy: OutOfRangePolicy, diagnostics: bool = False
) -> pd.Series:
    import pandas as pd

    if col.temporal is not None:
        from dpmagic.domain.temporal import to_integers

        ints = to_integers(series, col.temporal)
        if ints is None:
            raise dtype_error(col, str(series.dtype))
        if ints.isna().any():
            raise missing_values_error(col.name)
        if ints.dtype.kind == "f":  # a date column given times other than midnight
            raise time_of_day_error(col.name)
        series = ints
    if not pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series):
        raise dtype_error(col, str(series.dtype))
    if col.is_int:
        return _validate_int(col, series, policy, diagnostics)
    arr = series.to_numpy(dtype=float)
    if not np.isfinite(arr).all():
        raise nonfinite_error(col.name)
    outside = (arr < col.lower) | (arr > col.upper)
    if outside.any():
        if policy == "error":
            raise outside_error(col, int(outside.sum()), diagnostics=diagnostics)
        arr = np.clip(arr, col.lower, col.upper)
    return pd.Series(arr, index=series.index)


def _validate_int(
    col: NumericColumn, series: pd.Series, policy: OutOfRangePolicy, diagnostics: bool = False
) -> pd.Series:
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
        raise outside_error(col, int(outside.sum()), diagnostics=diagnostics)
    out = np.where(above, 0, arr).astype(np.int64)  # uint64 above int64's range is "above" (0 is a placeholder)
    out[below] = lo
    out[above] = hi
    return pd.Series(out, index=series.index)


def validate_column(
    col: Column, series: pd.Series, policy: OutOfRangePolicy, *, diagnostics: bool = False
) -> pd.Series:
    """``series`` checked against the declared column (numbers outside the bounds: ``policy``); the errors quote
    values and counts only with ``diagnostics`` (the custodian's switch)."""
    if isinstance(col, CategoricalColumn):
        return _validate_categorical(col, series, diagnostics)
    return _validate_numeric(col, series, policy, diagnostics)


def clamp_bounds(col: NumericColumn, clamp: tuple[float, float] | None) -> tuple[float, float]:
    """The bounds the backend clamps a column's values into: the declared bounds, or the analyst's clamp
    (a, b) moved into them, in the column's type (exact Python ints for int columns: no double round trip)."""
    lower, upper = (int(col.lower), int(col.upper)) if col.is_int else (float(col.lower), float(col.upper))
    if clamp is None:
        return lower, upper
    a, b = (int(clamp[0]), int(clamp[1])) if col.is_int else (float(clamp[0]), float(clamp[1]))
    return min(max(a, lower), upper), min(max(b, lower), upper)
