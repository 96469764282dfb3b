"""The privacy unit: one row, or one person with bounded contributions (docs/people.md).

A schema's ``privacy_unit`` is free text for a row-level table (``"one row"``) and an object for a person-level
one (docs/design.md §3.1, docs/schema.md)::

    "privacy_unit": {"id": "patient_id", "max_rows": 40, "invariant": ["sex", "birth_year", "region"],
                     "per_group": {"diagnosis": {"max_groups": 3, "max_rows": 10}},
                     "invariant_mode": "check", "salt": "claims-2026"}

* ``id`` — the declared column that identifies a person (never NULL);
* ``max_rows`` — K, the most rows one person keeps (a positive integer); the engine keeps at most K rows per
  person, chosen by an order that depends only on that person's rows (stable truncation, docs/people.md §1);
* ``invariant`` — declared columns constant within a person (checked when the table is bound, or made constant
  with ``"invariant_mode": "first"``: each person's value in the first of their kept rows); queries disjoint on
  these columns touch disjoint sets of persons and compose in parallel (docs/people.md §3);
* ``per_group`` — optional per-column bounds in the style of Tumult Analytics (``MaxGroupsPerID``,
  ``MaxRowsPerGroupPerID``) and OpenDP (``truncate_num_groups``, ``truncate_per_group``): a person keeps rows
  in at most ``max_groups`` values of the column and at most ``max_rows`` rows per value;
* ``invariant_mode`` — ``"check"`` (default: a declared invariant column that varies within a person is refused
  at binding) or ``"first"``;
* ``salt`` — a string mixed into the truncation order's hash (default: the data set's id, else the table name).

Any other key is an error: a person-level declaration that is only partly understood would silently protect
rows instead of persons.

This module is arithmetic on the declaration only (no rows): :meth:`PersonUnit.contribution` gives the bounds
the sensitivities of :mod:`dpmagic.noise.sensitivity` are derived from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dpmagic.errors import SchemaError

__all__ = ["Contribution", "GroupBound", "InvariantMode", "PersonUnit", "parse_privacy_unit"]

InvariantMode = Literal["check", "first"]

_KEYS = ("id", "max_rows", "invariant", "per_group", "invariant_mode", "salt")
_GROUP_KEYS = ("max_groups", "max_rows")


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SchemaError(
            f"{what} must be a positive integer, got {value!r}",
            hint="a contribution bound is a count of rows or groups: 1, 2, 40, ...",
        )
    return value


@dataclass(frozen=True)
class GroupBound:
    """Per-person bounds on one column's groups: at most ``max_groups`` distinct values, ``max_rows`` rows each."""

    max_groups: int | None = None
    max_rows: int | None = None

    def to_dict(self) -> dict[str, int]:
        out: dict[str, int] = {}
        if self.max_groups is not None:
            out["max_groups"] = self.max_groups
        if self.max_rows is not None:
            out["max_rows"] = self.max_rows
        return out


@dataclass(frozen=True)
class Contribution:
    """How much one person can contribute to one release (all from the declaration and the query, no rows).

    * ``rows`` — the most rows of one person inside the query's region (K, or less with per-group bounds);
    * ``per_cell`` — the most of those rows in one GROUP BY cell (``rows`` without a bounded GROUP BY column);
    * ``cells`` — the most GROUP BY cells one person's rows fall in (≤ ``rows``; 1 without GROUP BY).
    """

    rows: int
    per_cell: int
    cells: int

    def __post_init__(self) -> None:
        if self.rows < 1 or self.per_cell < 1 or self.cells < 1:
            raise ValueError(f"a contribution bound must be positive: {self}")
        object.__setattr__(self, "per_cell", min(self.per_cell, self.rows))
        object.__setattr__(self, "cells", min(self.cells, self.rows))

    @property
    def total(self) -> int:
        """The most rows one person has in the cells: min(rows, cells × per_cell)."""
        return min(self.rows, self.cells * self.per_cell)

    def l2_rows(self) -> float:
        """max ‖n‖₂ over per-cell row counts n with Σn ≤ total, nᵢ ≤ per_cell, at most ``cells`` non-zero:
        concentrating rows is worst (‖·‖₂² is convex, so its maximum over the polytope is at a vertex), i.e.
        ⌊T/c⌋ full cells and one with the remainder."""
        t, c = self.total, self.per_cell
        q, r = divmod(t, c)
        return math.sqrt(q * c * c + r * r)


@dataclass(frozen=True)
class PersonUnit:
    """A person-level privacy unit (module docstring)."""

    id: str
    max_rows: int
    invariant: tuple[str, ...] = ()
    per_group: Mapping[str, GroupBound] = field(default_factory=dict)
    invariant_mode: InvariantMode = "check"
    salt: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise SchemaError(f"the privacy unit's 'id' must be a column name, got {self.id!r}")
        _positive_int(self.max_rows, "the privacy unit's 'max_rows'")
        if self.invariant_mode not in ("check", "first"):
            raise SchemaError(
                f"the privacy unit's 'invariant_mode' must be 'check' or 'first', got {self.invariant_mode!r}"
            )
        if len(set(self.invariant)) != len(self.invariant):
            raise SchemaError(f"the privacy unit's 'invariant' lists a column twice: {list(self.invariant)}")
        if self.id in self.invariant:
            raise SchemaError(
                f"the privacy unit's 'invariant' lists the id column {self.id!r}: the id is invariant by definition",
                hint="leave it out of 'invariant'",
            )
        if self.id in self.per_group:
            raise SchemaError(f"'per_group' bounds the id column {self.id!r}: bound another column")
        object.__setattr__(self, "invariant", tuple(self.invariant))
        object.__setattr__(self, "per_group", dict(self.per_group))

    # -- parsing -----------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PersonUnit:
        """The unit of a schema's ``privacy_unit`` object; any key not understood is an error."""
        unknown = [str(k) for k in data if k not in _KEYS]
        if unknown:
            raise SchemaError(
                f"the privacy unit has key(s) dpmagic does not understand: {unknown}",
                hint=f"known keys: {', '.join(_KEYS)}; a person-level unit is never partly applied",
            )
        if "id" not in data:
            raise SchemaError("the privacy unit object needs an 'id': the column that identifies a person")
        if "max_rows" not in data:
            raise SchemaError(
                "the privacy unit object needs 'max_rows': the most rows one person keeps",
                hint='e.g. "max_rows": 40; rows beyond it are dropped by a stable truncation (docs/people.md)',
            )
        ident = data["id"]
        if not isinstance(ident, str):
            raise SchemaError(f"the privacy unit's 'id' must be a column name (a string), got {ident!r}")
        inv = data.get("invariant", [])
        if isinstance(inv, str) or not isinstance(inv, Sequence) or not all(isinstance(c, str) for c in inv):
            raise SchemaError(f"the privacy unit's 'invariant' must be a list of column names, got {inv!r}")
        groups_raw = data.get("per_group", {})
        if not isinstance(groups_raw, Mapping):
            raise SchemaError(
                f"the privacy unit's 'per_group' must be an object of column: bounds, got {groups_raw!r}",
                hint='e.g. "per_group": {"diagnosis": {"max_groups": 3, "max_rows": 10}}',
            )
        groups: dict[str, GroupBound] = {}
        for col, spec in groups_raw.items():
            if not isinstance(spec, Mapping) or not spec:
                raise SchemaError(
                    f"'per_group' bounds for {col!r} must be an object with 'max_groups' and/or 'max_rows', "
                    f"got {spec!r}"
                )
            bad = [str(k) for k in spec if k not in _GROUP_KEYS]
            if bad:
                raise SchemaError(
                    f"'per_group' bounds for {col!r} have key(s) dpmagic does not understand: {bad}",
                    hint="known keys: max_groups, max_rows",
                )
            g = spec.get("max_groups")
            c = spec.get("max_rows")
            groups[str(col)] = GroupBound(
                None if g is None else _positive_int(g, f"'per_group' {col!r} 'max_groups'"),
                None if c is None else _positive_int(c, f"'per_group' {col!r} 'max_rows'"),
            )
        mode = data.get("invariant_mode", "check")
        salt = data.get("salt")
        if salt is not None and not isinstance(salt, str):
            raise SchemaError(f"the privacy unit's 'salt' must be a string, got {salt!r}")
        return cls(
            id=ident,
            max_rows=_positive_int(data["max_rows"], "the privacy unit's 'max_rows'"),
            invariant=tuple(inv),
            per_group=groups,
            invariant_mode=mode,
            salt=salt,
        )

    def check_columns(self, declared: Sequence[str]) -> None:
        """Every column the unit names must be declared."""
        names = set(declared)
        if self.id not in names:
            raise SchemaError(
                f"the privacy unit's id column {self.id!r} is not a declared column",
                hint="declare it under 'columns' (its type and domain: e.g. an int range or the id values)",
            )
        missing = [c for c in self.invariant if c not in names]
        if missing:
            raise SchemaError(f"the privacy unit's 'invariant' names undeclared column(s): {missing}")
        missing = [c for c in self.per_group if c not in names]
        if missing:
            raise SchemaError(f"the privacy unit's 'per_group' names undeclared column(s): {missing}")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "max_rows": self.max_rows, "invariant": list(self.invariant)}
        if self.per_group:
            out["per_group"] = {c: b.to_dict() for c, b in self.per_group.items()}
        if self.invariant_mode != "check":
            out["invariant_mode"] = self.invariant_mode
        if self.salt is not None:
            out["salt"] = self.salt
        return out

    # -- arithmetic ----------------------------------------------------------------------------------------
    @property
    def separating(self) -> tuple[str, ...]:
        """The columns constant within a person: the id and the invariant columns (docs/people.md §3)."""
        return (self.id, *self.invariant)

    @property
    def kept_rows(self) -> int:
        """K′: the most rows a person keeps after every truncation, min(K, g·c over fully bounded columns)."""
        k = self.max_rows
        for b in self.per_group.values():
            if b.max_groups is not None and b.max_rows is not None:
                k = min(k, b.max_groups * b.max_rows)
        return k

    def contribution(self, group_cells: Mapping[str, int] | None = None) -> Contribution:
        """The bounds of one person's rows over a release whose GROUP BY columns have ``group_cells`` cells each
        (``{}`` or ``None``: no GROUP BY, one cell).

        rows = K′; per_cell = min of ``max_rows`` of the bounded GROUP BY columns (a cell fixes each of their
        values); cells = min(K′, Π cells, and for each GROUP BY column A with ``max_groups`` g_A,
        g_A × Π_{B ≠ A} cells_B).  O(number of GROUP BY columns²).
        """
        k = self.kept_rows
        cells_of = dict(group_cells or {})
        per_cell = k
        cells = 1
        for n in cells_of.values():
            cells *= max(1, n)
        for col in cells_of:
            b = self.per_group.get(col)
            if b is None:
                continue
            if b.max_rows is not None:
                per_cell = min(per_cell, b.max_rows)
            if b.max_groups is not None:
                others = 1
                for c2, n2 in cells_of.items():
                    if c2 != col:
                        others *= max(1, n2)
                cells = min(cells, b.max_groups * others)
        return Contribution(rows=k, per_cell=per_cell, cells=min(cells, k))

    def salt_for(self, dataset: str | None, table: str) -> str:
        """The string mixed into the truncation order (``salt``, else the data set's id, else the table)."""
        return self.salt if self.salt is not None else (dataset or table)

    def describe(self) -> str:
        """One line for the analyst: the unit and its bounds."""
        parts = [f"one person ({self.id}), at most {self.max_rows} row{'s' if self.max_rows != 1 else ''} each"]
        for col, b in self.per_group.items():
            bits = []
            if b.max_groups is not None:
                bits.append(f"{b.max_groups} {col} value{'s' if b.max_groups != 1 else ''}")
            if b.max_rows is not None:
                bits.append(f"{b.max_rows} row{'s' if b.max_rows != 1 else ''} per {col}")
            parts.append(" and ".join(bits))
        return "; ".join(parts)


def parse_privacy_unit(value: Any) -> str | PersonUnit:
    """A schema's ``privacy_unit``: free text (row level) or an object (:class:`PersonUnit`)."""
    if value is None:
        return "one row"
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return PersonUnit.from_dict(value)
    raise SchemaError(
        f"the schema's 'privacy_unit' must be text (row level) or an object (person level), got {value!r}",
        hint='e.g. "privacy_unit": {"id": "patient_id", "max_rows": 40, "invariant": ["sex"]}',
    )
