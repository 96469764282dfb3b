"""The durable, tamper-evident record of what sessions have charged and released (sqlite3, WAL).

One ledger file (a custodian-chosen path; :func:`default_ledger_path` otherwise) holds an append-only log of
*events*, each hash-chained to the previous one.  Events belong to a *ledger key*: the identity of a data set
(fingerprints of its schema and of the bound rows) and a privacy definition.  Kinds:

============  ================================================================================================
``open``      first binding of a key: data set, fingerprints, definition, budget, δ, neighbouring relation
``charge``    one admitted query: SQL, coverage, cost, weight, the bound charged — committed *before* any row
              is read (invariant 2); its ``seq`` is the query's entry id
``release``   the noisy answer of a charge, appended after release
``budget``    a custodian raised (or lowered) the budget of a key
``reset``     a custodian reset a key: earlier charges no longer count
============  ================================================================================================

Guarantees:

* **Ordering.** :meth:`Ledger.append` inside :meth:`Ledger.transaction` commits before returning; a crash
  between a charge and its release leaves the budget charged and the answer unreleased.
* **Concurrency.** :meth:`Ledger.transaction` is ``BEGIN IMMEDIATE``: one writer at a time.  The accountant
  reads every event appended by other processes *inside* that transaction before it decides, so two kernels
  bound to the same key can never together overspend.
* **Tamper evidence.** ``hash = sha256(prev | seq | key | kind | created | body)``; :func:`verify` recomputes the
  chain and checks that sequence numbers are contiguous and that the head recorded in ``meta`` matches, so an
  edited, deleted or reordered event is detected.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import hashlib
import html
import io
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Ledger",
    "LedgerEntry",
    "LedgerEvent",
    "EntryFold",
    "default_ledger_path",
    "verify",
    "GENESIS",
]

GENESIS = "0" * 64

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY,
    ledger_key TEXT NOT NULL,
    kind TEXT NOT NULL,
    created REAL NOT NULL,
    body TEXT NOT NULL,
    prev TEXT NOT NULL,
    hash TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_key ON events (ledger_key, seq);
"""


def default_ledger_path() -> Path:
    """``$DPMAGIC_LEDGER`` if set, else ``$XDG_DATA_HOME/dpmagic/ledger.sqlite`` (``~/.local/share/...``)."""
    env = os.environ.get("DPMAGIC_LEDGER")
    if env:
        return Path(env).expanduser()
    base = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share"))
    return base / "dpmagic" / "ledger.sqlite"


def _hash(prev: str, seq: int, key: str, kind: str, created: float, body: str) -> str:
    blob = f"{prev}|{seq}|{key}|{kind}|{created!r}|{body}".encode()
    return hashlib.sha256(blob).hexdigest()


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_json_default)


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


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


class Ledger:
    """An append-only, hash-chained event log in sqlite (a file in WAL mode, or in memory)."""

    def __init__(self, path: str | Path | None = None) -> None:
        if path is not None and str(path) in ("", ":memory:", "memory"):
            path = None
        self.path = None if path is None else Path(path).expanduser()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        target = ":memory:" if self.path is None else str(self.path)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False, timeout=60.0)
        self._depth = 0
        if self.path is not None:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA busy_timeout=60000")
        self._conn.executescript(_SCHEMA)

    @property
    def durable(self) -> bool:
        return self.path is not None

    # -- transactions -----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``: one writer at a time across processes; nested use joins it."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            for attempt in range(200):
                try:
                    self._conn.execute("BEGIN IMMEDIATE")
                    break
                except sqlite3.OperationalError as exc:  # busy beyond the timeout: try again
                    if "locked" not in str(exc) or attempt == 199:
                        raise
                    time.sleep(0.05)
            self._depth = 1
            try:
                yield
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            else:
                self._conn.execute("COMMIT")
            finally:
                self._depth = 0

    # -- writing ------------------------------------------------------------------------------------------
    def append(self, key: str, kind: str, body: dict[str, Any]) -> int:
        """Append one chained event (inside a transaction; opens one if needed); returns its seq."""
        return self.append_event(key, kind, body).seq

    def append_event(self, key: str, kind: str, body: dict[str, Any]) -> LedgerEvent:
        """Append one chained event and return it as stored."""
        with self.transaction():
            row = self._conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
            seq, prev = (1, GENESIS) if row is None else (int(row[0]) + 1, str(row[1]))
            created = time.time()
            text = _dumps(body)
            digest = _hash(prev, seq, key, kind, created, text)
            self._conn.execute(
                "INSERT INTO events (seq, ledger_key, kind, created, body, prev, hash) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (seq, key, kind, created, text, prev, digest),
            )
            self._conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('head', ?)", (_dumps({"seq": seq, "hash": digest}),)
            )
        return LedgerEvent(seq, key, kind, created, json.loads(text), prev, digest)

    # -- reading ---------------------------------------------------------------------------------------
    def events(self, key: str | None = None, *, after: int = 0) -> list[LedgerEvent]:
        """Events (of one key, or all) with ``seq > after``, in order."""
        if key is None:
            rows = self._conn.execute(
                "SELECT seq, ledger_key, kind, created, body, prev, hash FROM events WHERE seq > ? ORDER BY seq",
                (after,),
            ).fetchall()
        else:
            rows = self._conn.execute(
                "SELECT seq, ledger_key, kind, created, body, prev, hash FROM events "
                "WHERE ledger_key = ? AND seq > ? ORDER BY seq",
                (key, after),
            ).fetchall()
        return [LedgerEvent(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5], r[6]) for r in rows]

    def ledger_keys(self) -> list[str]:
        return [r[0] for r in self._conn.execute("SELECT DISTINCT ledger_key FROM events ORDER BY ledger_key")]

    def opening(self, key: str) -> dict[str, Any] | None:
        """The ``open`` event's body of a key (None if the key was never bound)."""
        row = self._conn.execute(
            "SELECT body FROM events WHERE ledger_key = ? AND kind = 'open' ORDER BY seq LIMIT 1", (key,)
        ).fetchone()
        return None if row is None else json.loads(row[0])

    def budget_of(self, key: str) -> float | None:
        """The key's current budget: the last ``budget`` event, else the ``open`` one."""
        row = self._conn.execute(
            "SELECT body FROM events WHERE ledger_key = ? AND kind IN ('open', 'budget') ORDER BY seq DESC LIMIT 1",
            (key,),
        ).fetchone()
        return None if row is None else float(json.loads(row[0])["budget"])

    def entries(self, key: str | None = None) -> list[LedgerEntry]:
        """The charges counting toward a key's budget now (after its last reset), with their releases."""
        return entries_from_events(self.events(key))

    def __len__(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM events WHERE kind = 'charge'").fetchone()[0])

    def close(self) -> None:
        self._conn.close()

    # -- custodian actions --------------------------------------------------------------------------------
    def set_budget(self, key: str, total: float, *, reason: str = "") -> int:
        """Record a custodian's new budget for ``key``."""
        if self.opening(key) is None:
            raise KeyError(f"no ledger key {key!r} in this file")
        return self.append(key, "budget", {"budget": float(total), "by": "custodian", "reason": reason})

    def reset(self, key: str, *, reason: str = "") -> int:
        """Record a custodian's reset of ``key``: its earlier charges stop counting toward the budget."""
        if self.opening(key) is None:
            raise KeyError(f"no ledger key {key!r} in this file")
        return self.append(key, "reset", {"by": "custodian", "reason": reason})

    # -- export ----------------------------------------------------------------------------------------------
    def export(self, fmt: str) -> str:
        """All charges of every key as ``csv``, ``json`` or a self-contained ``html`` report."""
        rows = []
        for key in self.ledger_keys():
            opening = self.opening(key) or {}
            for e in entries_from_events(self.events(key), keep_reset=True):
                rows.append(
                    {
                        "ledger_key": key,
                        "dataset": opening.get("dataset", ""),
                        "definition": opening.get("definition", ""),
                        "id": e.id,
                        "time": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e.created)),
                        "sql": " ".join(e.sql.split()),
                        "predicates": _coverage_text(e.coverage),
                        "cost": e.cost,
                        "weight": e.weight,
                        "bound": e.bound,
                        "charged_after": e.charged_after,
                        "noise": _noise_text(e.details),
                        "status": e.status,
                        "counted": not e.extra.get("reset", False),
                    }
                )
        if fmt == "json":
            return json.dumps(rows, indent=2)
        if fmt == "csv":
            buf = io.StringIO()
            fields = list(rows[0]) if rows else ["ledger_key", "id", "sql", "cost"]
            w = csv.DictWriter(buf, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)
            return buf.getvalue()
        if fmt == "html":
            return _html_report(self, rows)
        raise ValueError(f"unknown export format {fmt!r}: use csv, json or html")


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


def verify(path: str | Path) -> tuple[bool, list[str]]:
    """Recompute the hash chain of a ledger file: (intact?, list of problems)."""
    p = Path(path)
    if not p.is_file():
        return False, [f"{p} does not exist"]
    try:
        conn = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        rows = conn.execute(
            "SELECT seq, ledger_key, kind, created, body, prev, hash FROM events ORDER BY seq"
        ).fetchall()
        head_row = conn.execute("SELECT value FROM meta WHERE key = 'head'").fetchone()
        conn.close()
    except sqlite3.DatabaseError as exc:
        return False, [f"not a readable dpmagic ledger: {exc}"]
    problems: list[str] = []
    prev = GENESIS
    expected_seq = 1
    for seq, key, kind, created, body, prev_stored, digest in rows:
        if seq != expected_seq:
            problems.append(f"event {expected_seq} is missing (next is {seq}): deleted or reordered")
        if prev_stored != prev:
            problems.append(f"event {seq}: its link to the previous event is broken (deleted, inserted or reordered)")
        if _hash(prev_stored, seq, key, kind, created, body) != digest:
            problems.append(f"event {seq} ({kind}): its content does not match its hash (edited)")
        prev = digest
        expected_seq = seq + 1
    if head_row is not None:
        head = json.loads(head_row[0])
        last = rows[-1] if rows else None
        if last is None or head["seq"] != last[0] or head["hash"] != last[6]:
            problems.append(
                f"the ledger's head is event {head['seq']}, but the log ends elsewhere: events were removed"
            )
    elif rows:
        problems.append("the ledger's head record is missing")
    return (not problems), problems


def _coverage_text(coverage: dict[str, Any]) -> str:
    if not coverage:
        return "whole domain"
    parts = []
    for c, spec in sorted(coverage.items()):
        if "values" in spec:
            parts.append(f"{c} ∈ {{{', '.join(map(str, spec['values']))}}}")
        else:
            ivs = [f"{'[' if lc else '('}{lo:g}, {hi:g}{']' if hc else ')'}" for lo, hi, lc, hc in spec["intervals"]]
            parts.append(f"{c} ∈ {' ∪ '.join(ivs) or '∅'}")
    return " AND ".join(parts)


def _noise_text(details: dict[str, Any]) -> str:
    parts = []
    if "count_noise" in details:
        n = details["count_noise"]
        parts.append(f"count: {n['kind']} scale {n['scale']:.4g}")
    for col, n in details.get("sum_noise", {}).items():
        parts.append(f"sum({col}): {n['kind']} scale {n['scale']:.4g}")
    return "; ".join(parts)


def _html_report(ledger: Ledger, rows: list[dict[str, Any]]) -> str:
    ok = "intact" if ledger.path is None or verify(ledger.path)[0] else "BROKEN"
    head = ["id", "time", "sql", "predicates", "cost", "bound", "charged_after", "noise", "status", "counted"]
    body = "\n".join("<tr>" + "".join(f"<td>{html.escape(str(r[h]))}</td>" for h in head) + "</tr>" for r in rows)
    keys = "".join(
        f"<li><code>{html.escape(k)}</code>: {html.escape(str((ledger.opening(k) or {}).get('dataset', '')))}, "
        f"{html.escape(str((ledger.opening(k) or {}).get('definition', '')))} budget {ledger.budget_of(k)}</li>"
        for k in ledger.ledger_keys()
    )
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>dpmagic ledger report</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;font-size:0.9em}}th{{background:#f0f0f0}}</style></head>
<body><h1>dpmagic ledger report</h1>
<p>File: <code>{html.escape(str(ledger.path or ":memory:"))}</code>; hash chain: <b>{ok}</b>; {len(rows)} charged queries.</p>
<ul>{keys}</ul>
<table><tr>{"".join(f"<th>{h}</th>" for h in head)}</tr>
{body}
</table></body></html>
"""
