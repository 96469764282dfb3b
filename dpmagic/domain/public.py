"""Public lookup tables declared in the schema (``"public_tables"``): region codes → names, a calendar.

The custodian declares them with their rows, which are public like the rest of the schema::

    "public_tables": {"regions": {"key": "code",
                                  "rows": [{"code": 1, "name": "North", "zone": "A"}, ...]}}

``key`` is a column of the lookup whose values are unique (the many-to-one side of a lookup join); every row
has the same columns; values are strings, integers, finite floats or null (the key never null).  A JOIN of the
bound table with a public lookup on a private column = a lookup column does not change the privacy unit:
:mod:`dpmagic.query.joins` rewrites it into the single-table query it equals.  Validated strictly on load:
one :class:`~dpmagic.errors.SchemaError` naming the problem.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpmagic.errors import SchemaError

__all__ = ["PublicTable", "public_tables_from_dict", "MAX_PUBLIC_ROWS"]

#: the most rows a public lookup may declare (its rows are written into the rewritten query)
MAX_PUBLIC_ROWS = 10_000

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class PublicTable:
    """One public lookup table: its name, its declared key column, its column names and its rows (as written)."""

    name: str
    key: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]

    def column(self, name: str) -> str | None:
        """The declared name of column ``name`` (case-insensitive), or None."""
        if name in self.columns:
            return name
        found = [c for c in self.columns if c.lower() == name.lower()]
        return found[0] if len(found) == 1 else None

    def values(self, column: str) -> list[Any]:
        """The column's values, one per row, in declared order."""
        i = self.columns.index(column)
        return [r[i] for r in self.rows]

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "rows": [dict(zip(self.columns, r, strict=True)) for r in self.rows]}


def _value(table: str, column: str, v: Any) -> Any:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SchemaError(
            f"public table {table!r}, column {column!r}: {v!r} is not a string, a number or null",
            hint="write lookup values as JSON strings or numbers",
        )
    if isinstance(v, float) and not math.isfinite(v):
        raise SchemaError(f"public table {table!r}, column {column!r}: {v!r} is not a finite number")
    return v


def public_tables_from_dict(data: Any, private_table: str) -> dict[str, PublicTable]:
    """The schema's ``"public_tables"`` object, validated; ``private_table`` is the bound table's name (a lookup
    may not share it).  Raises :class:`SchemaError` naming the first problem."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise SchemaError('the schema\'s \'public_tables\' must be an object: {name: {"key": ..., "rows": [...]}}')
    out: dict[str, PublicTable] = {}
    for name, spec in data.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise SchemaError(f"public table name {name!r} must be an identifier (letters, digits, _)")
        if name.lower() == private_table.lower() or name.lower() in {n.lower() for n in out}:
            raise SchemaError(f"public table name {name!r} is used twice (or is the bound table's name)")
        if not isinstance(spec, Mapping) or set(spec) - {"key", "rows", "description"}:
            raise SchemaError(
                f"public table {name!r} must be an object with 'key' and 'rows' (and optionally 'description')"
            )
        key, rows = spec.get("key"), spec.get("rows")
        if not isinstance(key, str) or not key:
            raise SchemaError(f"public table {name!r} needs a 'key': the name of its unique key column")
        if not isinstance(rows, list) or not rows:
            raise SchemaError(f"public table {name!r} needs 'rows': a non-empty list of objects")
        if len(rows) > MAX_PUBLIC_ROWS:
            raise SchemaError(f"public table {name!r} has {len(rows):,} rows, more than {MAX_PUBLIC_ROWS:,}")
        first = rows[0]
        if not isinstance(first, Mapping) or not first:
            raise SchemaError(f"public table {name!r}: row 1 is not a non-empty object")
        columns = tuple(str(c) for c in first)
        for c in columns:
            if not _NAME.match(c):
                raise SchemaError(f"public table {name!r}: column name {c!r} must be an identifier")
        if len({c.lower() for c in columns}) != len(columns):
            raise SchemaError(f"public table {name!r}: two columns differ only by case")
        if key not in columns:
            raise SchemaError(f"public table {name!r}: its key {key!r} is not one of its columns {list(columns)}")
        parsed: list[tuple[Any, ...]] = []
        for i, row in enumerate(rows, 1):
            if not isinstance(row, Mapping) or set(row) != set(columns):
                raise SchemaError(
                    f"public table {name!r}: row {i} does not have exactly the columns of row 1 ({list(columns)})"
                )
            parsed.append(tuple(_value(name, c, row[c]) for c in columns))
        k = columns.index(key)
        seen: set[Any] = set()
        for i, r in enumerate(parsed, 1):
            if r[k] is None:
                raise SchemaError(f"public table {name!r}: row {i} has a null key {key!r}")
            if r[k] in seen:
                raise SchemaError(
                    f"public table {name!r}: key {key!r} value {r[k]!r} appears twice; a lookup key is unique",
                    hint="a lookup maps each key to one row (many-to-one); remove the duplicate row",
                )
            seen.add(r[k])
        out[name] = PublicTable(name, key, columns, tuple(parsed))
    return out
