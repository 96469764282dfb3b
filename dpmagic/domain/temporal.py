"""Dates and timestamps as exact integers: a ``date`` column is held as its day number (days since 1970-01-01),
a ``timestamp`` column as its microseconds since 1970-01-01 00:00:00 (wall-clock time, no time zone), so that
every layer — value sets, coverage, sensitivities, the backends' masks — treats it as the ``int`` column it is,
and nothing is ever float-rounded (a microsecond timestamp is beyond 2^53).

Also the calendar periods a GROUP BY key can name (``EXTRACT(YEAR FROM d)``, ``DATE_TRUNC('month', d)`` …): each
is a list of (label, integer ranges of the column) computed from the *declared* bounds only — the keys are
public.  Proleptic Gregorian calendar (Python's :mod:`datetime`, pandas, DuckDB and Spark agree on it for
years 1–9999).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from dpmagic.errors import QueryTypeError, SchemaError, UnsupportedQueryError

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Temporal",
    "EPOCH",
    "US_PER_DAY",
    "parse_value",
    "format_value",
    "to_integers",
    "EXTRACT_FIELDS",
    "TRUNC_UNITS",
    "extract_bins",
    "trunc_bins",
]

Temporal = Literal["date", "timestamp"]

EPOCH = dt.date(1970, 1, 1)
_EPOCH_DT = dt.datetime(1970, 1, 1)
US_PER_DAY = 86_400 * 1_000_000


def parse_value(text: str, temporal: Temporal, *, what: str = "value") -> int:
    """An ISO date (``2024-01-31``) or timestamp (``2024-01-31 12:00:00[.ffffff]``, ``T`` accepted) as the
    column's integer: its day number, or its microseconds.  A date given for a timestamp is its midnight; a
    timestamp given for a date is refused unless it is midnight (no silent truncation)."""
    s = text.strip()
    try:
        stamp = dt.datetime.fromisoformat(s)
    except ValueError:
        raise QueryTypeError(
            f"{what} {text!r} is not an ISO {temporal}",
            hint="write dates as 'YYYY-MM-DD' and timestamps as 'YYYY-MM-DD HH:MM:SS'",
        ) from None
    if stamp.tzinfo is not None:
        raise QueryTypeError(
            f"{what} {text!r} has a time zone; dpmagic's timestamps are wall-clock times without one",
            hint="write the time without an offset (convert it to the data's time zone first)",
        )
    if temporal == "date":
        if stamp.time() != dt.time(0):
            raise QueryTypeError(
                f"{what} {text!r} has a time of day, but the column is a date", hint="write it as 'YYYY-MM-DD'"
            )
        return (stamp.date() - EPOCH).days
    delta = stamp - _EPOCH_DT
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def format_value(n: int, temporal: Temporal) -> str:
    """The ISO text of a column integer (the inverse of :func:`parse_value`)."""
    if temporal == "date":
        return (EPOCH + dt.timedelta(days=int(n))).isoformat()
    stamp = _EPOCH_DT + dt.timedelta(microseconds=int(n))
    return stamp.isoformat(sep=" ", timespec="microseconds" if stamp.microsecond else "seconds")


def bound_of(name: str, label: str, value: Any, temporal: Temporal) -> int:
    """A declared bound of a date / timestamp column (an ISO string) as the column's integer."""
    if not isinstance(value, str):
        raise SchemaError(
            f"column {name!r}: {label!r} of a {temporal} column must be an ISO string such as "
            f"{'2024-01-01' if temporal == 'date' else '2024-01-01 00:00:00'!r}, got {value!r}"
        )
    try:
        return parse_value(value, temporal, what=f"{label!r}")
    except QueryTypeError as exc:
        raise SchemaError(f"column {name!r}: {exc}", hint=exc.hint) from None


def to_integers(series: pd.Series, temporal: Temporal) -> pd.Series | None:
    """A pandas column of dates / timestamps (``datetime64``, ``datetime.date`` objects or ISO strings) as the
    column's exact integers (int64; timezone-aware values at their wall-clock time), or None when it holds
    something else (the caller's dtype error).  Missing values stay missing (the caller's NULL error)."""
    import pandas as pd

    s = series
    if isinstance(s.dtype, pd.DatetimeTZDtype):
        s = s.dt.tz_localize(None)
    if not pd.api.types.is_datetime64_any_dtype(s):
        if not (pd.api.types.is_object_dtype(s) or pd.api.types.is_string_dtype(s)):
            return None
        present = s.dropna()
        if not all(isinstance(v, (dt.date, str, np.datetime64)) for v in present):
            return None
        try:
            s = pd.to_datetime(s, format="ISO8601") if all(isinstance(v, str) for v in present) else pd.to_datetime(s)
        except (ValueError, TypeError, OverflowError):
            return None
        if isinstance(s.dtype, pd.DatetimeTZDtype):
            s = s.dt.tz_localize(None)
    us = s.astype("datetime64[us]")
    missing = us.isna()
    ints = us.astype("int64").where(~missing)  # NaT -> NaN, the caller refuses it
    if temporal == "date":
        if missing.any():
            return ints
        whole = ints.to_numpy() % US_PER_DAY == 0
        if not whole.all():
            return pd.Series(ints.to_numpy() / US_PER_DAY, index=series.index)  # fractional: refused as such
        return pd.Series(ints.to_numpy() // US_PER_DAY, index=series.index)
    return ints if missing.any() else pd.Series(ints.to_numpy(), index=series.index)


# ---- calendar periods (GROUP BY keys) ------------------------------------------------------------------

#: EXTRACT fields (and the one-argument functions YEAR(d), MONTH(d) … that name them)
EXTRACT_FIELDS = ("year", "quarter", "month", "day", "dow", "isodow", "doy", "hour", "minute")
#: DATE_TRUNC units
TRUNC_UNITS = ("year", "quarter", "month", "week", "day", "hour", "minute")
_TIME_PARTS = ("hour", "minute")


#: the most calendar periods a declared range is cut into (before the GROUP BY cell limit applies to the bins)
_MAX_PERIODS = 1_000_000


def _too_many(unit: str, n: int) -> UnsupportedQueryError:
    return UnsupportedQueryError(
        f"the declared range holds {n:,} {unit}s, more than {_MAX_PERIODS:,}",
        hint="group by a coarser period (DATE_TRUNC('month', …), EXTRACT(YEAR FROM …)) or narrow the declared bounds",
    )


def _day_range(lo: int, hi: int, temporal: Temporal) -> tuple[dt.date, dt.date]:
    if temporal == "date":
        return EPOCH + dt.timedelta(days=lo), EPOCH + dt.timedelta(days=hi)
    return EPOCH + dt.timedelta(days=lo // US_PER_DAY), EPOCH + dt.timedelta(days=hi // US_PER_DAY)


def _day_span(day: dt.date, temporal: Temporal) -> tuple[int, int]:
    """The column's integers of one calendar day (first, last)."""
    n = (day - EPOCH).days
    return (n, n) if temporal == "date" else (n * US_PER_DAY, (n + 1) * US_PER_DAY - 1)


def _periods(lo: int, hi: int, temporal: Temporal, unit: str) -> list[tuple[int, int, dt.datetime]]:
    """The periods of ``unit`` meeting [lo, hi], each as (first, last) integers clipped to [lo, hi] and its start."""
    step = {"hour": 3_600 * 1_000_000, "minute": 60 * 1_000_000}.get(unit)
    out: list[tuple[int, int, dt.datetime]] = []
    if step is not None:
        if temporal == "date":
            raise QueryTypeError(f"a date column has no {unit}s: DATE_TRUNC('{unit}', …) needs a timestamp")
        first = lo - lo % step
        n = (hi - first) // step + 1
        if n > _MAX_PERIODS:
            raise _too_many(unit, n)
        for k in range(n):
            a = first + k * step
            out.append((max(a, lo), min(a + step - 1, hi), _EPOCH_DT + dt.timedelta(microseconds=a)))
        return out
    d0, d1 = _day_range(lo, hi, temporal)
    if unit == "day":
        start = d0
    elif unit == "week":  # ISO weeks, from Monday (DuckDB's and Spark's DATE_TRUNC('week', …))
        start = d0 - dt.timedelta(days=d0.weekday())
    elif unit == "month":
        start = d0.replace(day=1)
    elif unit == "quarter":
        start = d0.replace(month=3 * ((d0.month - 1) // 3) + 1, day=1)
    else:
        start = d0.replace(month=1, day=1)
    if unit in ("day", "week") and (d1 - start).days // (7 if unit == "week" else 1) > _MAX_PERIODS:
        raise _too_many(unit, (d1 - start).days)
    while start <= d1:
        if unit == "day":
            nxt = start + dt.timedelta(days=1)
        elif unit == "week":
            nxt = start + dt.timedelta(days=7)
        else:
            months = {"month": 1, "quarter": 3, "year": 12}[unit]
            m = start.month - 1 + months
            nxt = dt.date(start.year + m // 12, m % 12 + 1, 1) if start.year + m // 12 <= 9999 else dt.date.max
        a, _ = _day_span(start, temporal)
        _, b = _day_span(nxt - dt.timedelta(days=1), temporal) if nxt != dt.date.max else _day_span(d1, temporal)
        out.append((max(a, lo), min(b, hi), dt.datetime.combine(start, dt.time(0))))
        if nxt == dt.date.max:
            break
        start = nxt
    return out


def trunc_bins(unit: str, lo: int, hi: int, temporal: Temporal) -> list[tuple[str, list[tuple[int, int]]]]:
    """``DATE_TRUNC(unit, col)`` over the declared [lo, hi]: (the period's start as ISO text, its range)."""
    if unit not in TRUNC_UNITS:
        raise QueryTypeError(f"DATE_TRUNC unit {unit!r} is not supported", hint=f"use one of {', '.join(TRUNC_UNITS)}")
    out = []
    for a, b, start in _periods(lo, hi, temporal, unit):
        label = start.date().isoformat() if temporal == "date" else start.isoformat(sep=" ", timespec="seconds")
        out.append((label, [(a, b)]))
    return out


def extract_bins(field: str, lo: int, hi: int, temporal: Temporal) -> list[tuple[int, list[tuple[int, int]]]]:
    """``EXTRACT(field FROM col)`` over the declared [lo, hi]: (the field's value, the ranges giving it), in
    increasing order of value.  ``dow`` is 0 (Sunday) … 6, ``isodow`` 1 (Monday) … 7, as DuckDB and PostgreSQL."""
    if field not in EXTRACT_FIELDS:
        raise QueryTypeError(
            f"EXTRACT({field.upper()} …) is not supported", hint=f"use one of {', '.join(EXTRACT_FIELDS)}"
        )
    if field in _TIME_PARTS:
        if temporal == "date":
            raise QueryTypeError(f"a date column has no {field}: EXTRACT({field.upper()} …) needs a timestamp")
        periods = _periods(lo, hi, temporal, field)
    elif field in ("year", "quarter", "month"):
        periods = _periods(lo, hi, temporal, field)
    else:
        periods = _periods(lo, hi, temporal, "day")
    groups: dict[int, list[tuple[int, int]]] = {}
    for a, b, start in periods:
        value = {
            "year": start.year,
            "quarter": (start.month - 1) // 3 + 1,
            "month": start.month,
            "day": start.day,
            "dow": (start.weekday() + 1) % 7,
            "isodow": start.weekday() + 1,
            "doy": start.timetuple().tm_yday,
            "hour": start.hour,
            "minute": start.minute,
        }[field]
        runs = groups.setdefault(value, [])
        if runs and runs[-1][1] + 1 == a:
            runs[-1] = (runs[-1][0], b)
        else:
            runs.append((a, b))
    return [(k, groups[k]) for k in sorted(groups)]
