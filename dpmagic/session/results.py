"""What the session hands back: a released answer (:class:`QueryResult`) and a dry run (:class:`Preview`).

Plain values with their rendering delegated to :mod:`dpmagic.session.rendering`; nothing here reads data or charges.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from dpmagic.accountant.accountant import Charge
from dpmagic.accountant.currency import Currency
from dpmagic.noise.calibration import Noise
from dpmagic.query.model import Query
from dpmagic.releases.postprocess import answer_notes
from dpmagic.session import rendering as display

__all__ = ["QueryResult", "PublicResult", "Preview", "ScalarPreview", "ComposedResult", "ComposedPreview", "Released"]


@dataclass
class QueryResult:
    """A released answer: the noisy values with 95% intervals, and what it cost."""

    query: Query
    df: pd.DataFrame
    cost: float
    currency: Currency
    charge: Charge
    noise: dict[str, Noise]
    entry_id: int
    #: seconds spent before the data was read (parsing, planning, overlap check): never data-dependent
    seconds: float
    spent: float
    budget: float
    cached: bool = False
    number: int = 0  # the query's number as the analyst sees it (1..n in charging order; 0 = unknown)
    default_cost: bool = False  # no cost was named: the session's default was spent
    #: a scalar subquery's release, whose noisy value the WHERE clause compares with (:mod:`dpmagic.session.scalar`)
    threshold: QueryResult | None = None
    #: notes of the session on this answer (a scalar subquery's noisy threshold)
    extra_notes: tuple[str, ...] = ()
    #: the noisy shared releases behind the answer (noised output only: :meth:`Session.consistent` refines them)
    drawn: Any = field(default=None, repr=False, compare=False)

    @property
    def notes(self) -> list[str]:
        """Plain-language notes on the answer (an AVG not shown, a negative count…), from released values only."""
        return [*self.extra_notes, *answer_notes(self.query, self.df)]

    def summary(self) -> str:
        """The one-line cost summary shown under a cell's result."""
        return display.result_summary(self)

    def noise_description(self) -> str:
        return "; ".join(f"{k}: {v}" for k, v in self.noise.items())

    def _repr_html_(self) -> str:
        return display.result_html(self)

    def __repr__(self) -> str:
        return display.result_text(self)


@dataclass
class PublicResult:
    """The answer of a SELECT of GROUP BY keys alone: the declared keys inside the WHERE region.

    Public (from the schema and the query, never from the rows), so it costs nothing, reads no data and is not
    recorded in the ledger; its rows are every declared key of the region, whether or not a row holds it."""

    query: Query
    df: pd.DataFrame
    cost: float = 0.0
    cached: bool = False
    notes: tuple[str, ...] = ()

    def summary(self) -> str:
        n = len(self.df)
        return (
            f"public: the {display.plural(n, 'declared key', 'declared keys')} inside the WHERE region, from the "
            "schema alone (not from the data: a key may hold no row); no data was read and nothing was charged"
        )

    def _repr_html_(self) -> str:
        return f"<div>{self.df.to_html(index=False)}<p><i>{html.escape(self.summary())}</i></p></div>"

    def __repr__(self) -> str:
        return f"{self.df.to_string(index=False)}\n{self.summary()}"


@dataclass
class Preview:
    """What a query would cost and do, computed without reading data or spending anything."""

    query: Query
    cost: float
    currency: Currency
    charge: Charge
    affordable: float
    overlapping: pd.DataFrame
    noise: dict[str, Noise]
    halfwidth: dict[str, float]
    cached: bool
    spent: float
    budget: float

    @property
    def admissible(self) -> bool:
        return self.charge.admissible

    @property
    def increase(self) -> float:
        """How much the charged loss would grow, in the session's parameter."""
        cur = self.currency
        return cur.cost(self.charge.after) - cur.cost(self.charge.before)

    def summary(self) -> str:
        cur = self.currency
        if self.cached:
            return "dry run: this exact query was already answered; re-running it returns the stored answer for free"
        verdict = "would be admitted" if self.admissible else "would be REFUSED (over budget)"
        person = self.charge.person
        row = display.row_text(self.charge.worst_row, "any row" if person is None else "anyone")
        worst = "worst-case row" if person is None else "one person's worst case"
        loss = "charged loss" if person is None else "one person's charged loss"
        total = self.budget

        def amount(x: float) -> str:
            return display.fmt(x, total)

        return (
            f"dry run ({cur.symbol}={amount(self.cost)}): {verdict}; {loss} {amount(cur.cost(self.charge.before))}"
            f" → {amount(cur.cost(self.charge.after))} (+{amount(self.increase)}, {self.charge.charged_as}); overlaps "
            f"{display.plural(self.charge.overlaps, 'registered query', 'registered queries')}; {worst} "
            f"after it: {row}{display.person_note(person)}; at most {cur.symbol}={amount(self.affordable)} is affordable on this query's region. "
            "Nothing was spent and no data was read."
        )

    def _repr_html_(self) -> str:
        noise = "; ".join(f"{k}: {v} (95% ±{self.halfwidth[k]:.4g})" for k, v in self.noise.items())
        shown = self.overlapping.drop(columns=["id"], errors="ignore").assign(
            cost=[display.fmt(c, self.budget) for c in self.overlapping["cost"]]
        )
        table = shown.to_html(index=False) if len(shown) else "<p>no overlapping queries</p>"
        return f"<div><b>{html.escape(self.summary())}</b><br>noise: {html.escape(noise)}</div>{table}"

    def __repr__(self) -> str:
        return self.summary()


@dataclass
class ScalarPreview:
    """The dry run of a query with a scalar subquery: the inner query's, then the outer's over its widest region
    (the condition on the threshold dropped: the region of every possible noisy threshold)."""

    inner: Preview
    outer: Preview
    shown: str

    @property
    def admissible(self) -> bool:
        return self.inner.admissible and self.outer.admissible

    @property
    def cost(self) -> tuple[float, float]:
        return (self.inner.cost, self.outer.cost)

    def summary(self) -> str:
        return (
            f"two releases in sequence for {self.shown}: (1) the threshold — {self.inner.summary()} (2) the outer "
            f"query, shown over its widest region (without the condition on the threshold: the actual region, "
            f"fixed by the noisy threshold, lies inside it) and before (1) is charged — {self.outer.summary()}"
        )

    def _repr_html_(self) -> str:
        return (
            f"<div><b>two releases in sequence for {html.escape(self.shown)}</b></div>"
            f"<div>(1) the threshold:</div>{self.inner._repr_html_()}"
            "<div>(2) the outer query over its widest region (before (1) is charged):</div>"
            f"{self.outer._repr_html_()}"
        )

    def __repr__(self) -> str:
        return self.summary()


@dataclass
class ComposedResult:
    """Conditional aggregates of different conditions: one release per condition (``parts``, in charging order),
    joined on the GROUP BY keys; ``cost`` is the whole query's, split over the parts."""

    df: pd.DataFrame
    parts: list[QueryResult]
    cost: float

    @property
    def notes(self) -> list[str]:
        notes = [n for r in self.parts for n in r.notes] + list(self.df.attrs.get("dp_notes", []))
        return list(dict.fromkeys(notes))

    def summary(self) -> str:
        cur = self.parts[0].currency
        each = ", ".join(f"query #{r.number} ({r.query.canonical})" for r in self.parts)
        return (
            f"{len(self.parts)} releases, one per condition, {cur.format(self.parts[0].cost)} each "
            f"({cur.format(self.cost)} in all, sequential composition): {each}; a key a condition excludes holds 0 "
            f"there (known from the schema). {self.parts[-1].summary()}"
        )

    def _repr_html_(self) -> str:
        notes = "".join(f"<div>⚠ note: {html.escape(n)}</div>" for n in self.notes)
        return f"<div>{self.df.to_html(index=False)}{notes}<p><i>{html.escape(self.summary())}</i></p></div>"

    def __repr__(self) -> str:
        return "\n".join([self.df.to_string(index=False), *(f"note: {n}" for n in self.notes), self.summary()])


@dataclass
class ComposedPreview:
    """The dry runs of the parts of a query with conditional aggregates of different conditions."""

    parts: list[Preview]
    conditions: list[str | None]

    @property
    def admissible(self) -> bool:
        return all(p.admissible for p in self.parts)

    def summary(self) -> str:
        lines = [
            f"({i}) {'WHERE … AND ' + c if c else 'no condition'}: {p.summary()}"
            for i, (c, p) in enumerate(zip(self.conditions, self.parts, strict=True), 1)
        ]
        return (
            f"{len(self.parts)} releases in sequence, one per condition (each dry run before the others' charges): "
            + " ".join(lines)
        )

    def _repr_html_(self) -> str:
        return "".join(p._repr_html_() for p in self.parts)

    def __repr__(self) -> str:
        return self.summary()


@dataclass(frozen=True)
class Released:
    """What :meth:`dpmagic.Session.run` returns for any mechanism: its ledger entry, the charge, the noisy
    answer, and the seconds of public work before the data was read."""

    entry_id: int
    charge: Charge
    df: pd.DataFrame
    seconds: float
