"""The ledger's events and the entries they fold into: what a charged query looks like to the accountant,
the reports and the re-run cache (:class:`LedgerEntry`), replayed from the event log (:class:`EntryFold`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EntryFold", "LedgerEntry", "LedgerEvent", "entries_from_events"]


@dataclass(frozen=True)
class LedgerEvent:
    """One row of the event log."""

    seq: int
    key: str
    kind: str
    created: float
    body: dict[str, Any]
    prev: str
    hash: str


@dataclass(frozen=True)
class LedgerEntry:
    """One charged query (a ``charge`` event) with its release, if any."""

    id: int
    created: float
    sql: str
    canonical: str
    coverage: dict[str, Any]
    cost: float
    weight: float
    bound: str
    charged_after: float
    details: dict[str, Any]
    answer: Any | None = None
    released_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def released(self) -> bool:
        return self.released_at is not None

    @property
    def status(self) -> str:
        return "released" if self.released else "charged"


class EntryFold:
    """Folds one key's events, incrementally, into its current entries (charges since the last reset).

    Keeps an index of the charges' cache keys, so that a re-run lookup never re-reads the ledger.
    """

    def __init__(self, *, keep_reset: bool = False) -> None:
        self.keep_reset = keep_reset
        self.entries: dict[int, LedgerEntry] = {}
        self.by_cache_key: dict[str, int] = {}

    def apply(self, ev: LedgerEvent) -> None:
        if ev.kind == "charge":
            b = ev.body
            self.entries[ev.seq] = LedgerEntry(
                id=ev.seq,
                created=ev.created,
                sql=b["sql"],
                canonical=b["canonical"],
                coverage=b["coverage"],
                cost=float(b["cost"]),
                weight=float(b["weight"]),
                bound=b["bound"],
                charged_after=float(b["charged_after"]),
                details=b.get("details", {}),
            )
            key = b.get("details", {}).get("cache_key")
            if key is not None:
                self.by_cache_key[key] = ev.seq
        elif ev.kind == "release":
            e = self.entries.get(int(ev.body["entry"]))
            if e is not None:
                self.entries[e.id] = dataclasses.replace(e, answer=ev.body.get("answer"), released_at=ev.created)
        elif ev.kind == "reset":
            if self.keep_reset:
                self.entries = {k: dataclasses.replace(v, extra={"reset": True}) for k, v in self.entries.items()}
            else:
                self.entries, self.by_cache_key = {}, {}

    def released(self, cache_key: str) -> LedgerEntry | None:
        """The latest released entry with this cache key, if any."""
        seq = self.by_cache_key.get(cache_key)
        e = None if seq is None else self.entries.get(seq)
        return e if e is not None and e.released else None


def entries_from_events(events: list[LedgerEvent], *, keep_reset: bool = False) -> list[LedgerEntry]:
    """Fold one key's events into its current entries (charges after the last reset, with releases)."""
    fold = EntryFold(keep_reset=keep_reset)
    for ev in events:
        fold.apply(ev)
    return list(fold.entries.values())
