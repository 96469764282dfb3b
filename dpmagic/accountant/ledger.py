"""The durable record of what a session has charged and released (sqlite3).

Ordering guarantee (invariant 2): :meth:`Ledger.charge` commits the entry — its coverage, cost and the
bound it was charged under — in its own transaction *before* the session reads any row; the noisy answer is
attached afterwards by :meth:`Ledger.record_release`.  A crash in between leaves the budget charged
(never under-charged) and the answer unreleased.

With ``path=None`` the ledger lives in an in-memory sqlite database (it lasts as long as the session); with
a path it is a file in WAL mode that survives the process.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Ledger", "LedgerEntry"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    status TEXT NOT NULL,            -- 'charged' (committed before data access) or 'released'
    sql TEXT NOT NULL,
    canonical TEXT NOT NULL,
    coverage TEXT NOT NULL,          -- JSON of the coverage box
    cost REAL NOT NULL,              -- in the session's parameter (epsilon, rho or mu)
    weight REAL NOT NULL,            -- additive weight (epsilon, rho or mu^2)
    bound TEXT NOT NULL,             -- which bound was charged ('exact', 'clique', ...)
    charged_after REAL NOT NULL,     -- charged additive weight of the session after this entry
    details TEXT NOT NULL,           -- JSON: bounds, noise, options
    answer TEXT                      -- JSON of the released answer, NULL until released
);
"""


@dataclass(frozen=True)
class LedgerEntry:
    """One charged query as stored in the ledger."""

    id: int
    created: float
    status: str
    sql: str
    canonical: str
    coverage: dict[str, Any]
    cost: float
    weight: float
    bound: str
    charged_after: float
    details: dict[str, Any]
    answer: Any | None

    @property
    def released(self) -> bool:
        return self.status == "released"


class Ledger:
    """An append-only log of charged queries in sqlite."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = None if path is None else Path(path)
        target = ":memory:" if self.path is None else str(self.path)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False, timeout=30.0)
        if self.path is not None:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.executescript(_SCHEMA)

    # -- metadata ----------------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            self._conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    # -- entries --------------------------------------------------------------------------------------
    def charge(
        self,
        *,
        sql: str,
        canonical: str,
        coverage: dict[str, Any],
        cost: float,
        weight: float,
        bound: str,
        charged_after: float,
        details: dict[str, Any],
    ) -> int:
        """Commit one charge durably and return its entry id."""
        with self._lock:
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                cur.execute(
                    "INSERT INTO entries (created, status, sql, canonical, coverage, cost, weight, bound, "
                    "charged_after, details) VALUES (?, 'charged', ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        time.time(),
                        sql,
                        canonical,
                        json.dumps(coverage, sort_keys=True),
                        cost,
                        weight,
                        bound,
                        charged_after,
                        json.dumps(details, sort_keys=True, default=str),
                    ),
                )
                entry_id = int(cur.lastrowid or 0)
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
        return entry_id

    def record_release(self, entry_id: int, answer: Any) -> None:
        """Attach the released (noisy) answer to a charged entry."""
        with self._lock:
            self._conn.execute(
                "UPDATE entries SET status = 'released', answer = ? WHERE id = ? AND status = 'charged'",
                (json.dumps(answer, default=_json_default), entry_id),
            )

    def entries(self) -> list[LedgerEntry]:
        rows = self._conn.execute(
            "SELECT id, created, status, sql, canonical, coverage, cost, weight, bound, charged_after, details, "
            "answer FROM entries ORDER BY id"
        ).fetchall()
        return [
            LedgerEntry(
                id=r[0],
                created=r[1],
                status=r[2],
                sql=r[3],
                canonical=r[4],
                coverage=json.loads(r[5]),
                cost=r[6],
                weight=r[7],
                bound=r[8],
                charged_after=r[9],
                details=json.loads(r[10]),
                answer=None if r[11] is None else json.loads(r[11]),
            )
            for r in rows
        ]

    def __iter__(self) -> Iterator[LedgerEntry]:
        return iter(self.entries())

    def __len__(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0])

    def close(self) -> None:
        self._conn.close()


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)
