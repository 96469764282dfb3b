"""The durable record of what sessions have charged and released (sqlite3), hash-chained or HMAC-chained.

One ledger file (a custodian-chosen path; :func:`default_ledger_path` otherwise) holds an append-only log of
*events*, each chained to the previous one.  Events belong to a *ledger key*: the identity of a data set (the
schema's declared ``dataset`` id, else its canonical domain — never the rows) and a privacy definition.  Kinds:

============  ================================================================================================
``open``      first binding of a key: data-set id, table name, domain fingerprint, definition, budget, δ,
              neighbouring relation (nothing computed from the rows: no row hash, no row count)
``charge``    one admitted query: SQL, coverage, cost, weight, the bound charged — committed *before* any row
              is read (invariant 2); its ``seq`` is the query's entry id
``release``   the noisy answer of a charge, appended after release
``budget``    a custodian raised (or lowered) the budget of a key
``reset``     a custodian reset a key: earlier charges no longer count
``sp-open``   statistical privacy (NOT DP; :mod:`dpmagic.statistical.sp_session`), only under an ``sp|…`` key: one
              SP session's public parameters (column, prior, n, part sizes, ε, δ target, a random session token)
``sp-charge`` one SP query charged before its secret part is read: SQL, part index and size, p, δ_k, δ after;
              never the partition or an answer.  DP accounting never reads ``sp|…`` keys, SP never reads DP keys
============  ================================================================================================

Guarantees:

* **Ordering.** :meth:`Ledger.append` inside :meth:`Ledger.transaction` commits before returning; a crash
  between a charge and its release leaves the budget charged and the answer unreleased.
* **In the main file.** The file is in WAL mode with ``synchronous=FULL`` (a commit is durable when it
  returns), and every commit that wrote a charge (or an opening, budget or reset) is checkpointed into ``ledger.sqlite``
  before the transaction returns (:meth:`Ledger._copy_to_main_file`): a charge never sits only in
  ``ledger.sqlite-wal``, so a plain copy of the file taken between queries holds every charge (the noisy
  answer of the last one may follow with the next checkpoint; losing it in a copy spends nothing).  ``dpmagic ledger backup`` (sqlite's online
  backup API) copies a live ledger consistently at any moment.
* **Concurrency.** :meth:`Ledger.transaction` is ``BEGIN IMMEDIATE``: one writer at a time.  The accountant
  reads every event appended by other processes *inside* that transaction before it decides, so two kernels
  bound to the same key can never together overspend.
* **Chain.** Unkeyed: ``hash = sha256(prev | seq | key | kind | created | body)``.  :func:`verify` detects
  *accidental* edits, deletions and reorderings, but the function is public: anyone who can write the file
  can delete events and recompute the chain, so an unkeyed ledger is **not tamper-evident**.
  Keyed (a custodian key, :func:`load_key`): ``hash = HMAC-SHA256(key, …)`` over the same fields, the head
  record carries its own MAC, and ``meta`` records that the ledger is keyed (with a key-check value).  Without
  the key nobody can append, re-chain, truncate, reset or change a budget undetected; every process that
  appends (a kernel charging queries, a custodian's ``set-budget``) needs the key, and a keyed ledger is
  verified whenever it is opened with the key.  Restoring an entire earlier copy of the file (a rollback) cannot
  be detected from the file alone: the custodian can compare the head printed by ``dpmagic ledger verify``.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dpmagic.accountant.chain import (  # re-exported: the chain and the key live in dpmagic.accountant.chain
    GENESIS,
    KEY_ENV,
    KEY_FILE_ENV,
    chain_hash,
    check_chain,
    check_key,
    head_mac,
    is_keyed,
    key_check_value,
    key_from_env,
    load_key,
    verify,
)
from dpmagic.accountant.entries import (  # re-exported: the events' fold lives in dpmagic.accountant.entries
    EntryFold,
    LedgerEntry,
    LedgerEvent,
    entries_from_events,
)
from dpmagic.errors import ConfigurationError

__all__ = [
    "KEY_ENV",
    "KEY_FILE_ENV",
    "load_key",
    "key_from_env",
    "Ledger",
    "LedgerEntry",
    "LedgerEvent",
    "EntryFold",
    "default_ledger_path",
    "verify",
    "backup",
    "is_keyed",
    "GENESIS",
]

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


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_json_default)


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


class Ledger:
    """An append-only, chained event log in sqlite (a file, or in memory); keyed if its custodian made it so.

    ``key``: the custodian key (bytes); by default :func:`key_from_env`.  Opening a *keyed* ledger with the key
    checks the key and verifies the whole chain (O(events) HMACs), refusing a ledger that was altered; without
    the key it can be read but nothing can be appended.  With a key, a ledger file is only created when
    ``create=True`` (``dpmagic ledger init``): a kernel never silently starts a fresh keyed ledger in place of a
    deleted one.
    """

    #: sqlite journal mode of ledger files (see the module docstring; ``benchmarks/bench_ledger.py``)
    journal_mode = "WAL"
    #: checkpoint the WAL into the main file after every commit that wrote a charge, an opening, a budget or a
    #: reset (``False``: only for the benchmark)
    checkpoint_every_commit = True

    def __init__(self, path: str | Path | None = None, *, key: bytes | None = None, create: bool = False) -> None:
        if path is not None and str(path) in ("", ":memory:", "memory"):
            path = None
        self.path = None if path is None else Path(path).expanduser()
        if key is None:
            key = key_from_env()
        elif not isinstance(key, bytes):
            raise ConfigurationError("a custodian key must be bytes (use load_key(FILE))")
        else:
            key = check_key(key, "the custodian key")
        if self.path is not None:
            existed = self.path.is_file() and self.path.stat().st_size > 0
            if key is not None and not existed and not create:
                raise ConfigurationError(
                    f"no ledger at {self.path}: with a custodian key, a ledger is created only by the custodian "
                    "(dpmagic ledger init)",
                    hint=f"dpmagic ledger init {self.path} --key-file KEY",
                )
            self.path.parent.mkdir(parents=True, exist_ok=True)
        target = ":memory:" if self.path is None else str(self.path)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False, timeout=60.0)
        self._depth = 0
        self._checkpoint = False
        self._budget_written = False
        self._conn.execute("PRAGMA busy_timeout=60000")
        if self.path is not None:
            mode = str(self._conn.execute(f"PRAGMA journal_mode={self.journal_mode}").fetchone()[0]).upper()
            self._checkpoint = mode == "WAL" and self.checkpoint_every_commit
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA secure_delete=ON")  # an overwritten head record leaves no trace
        self._conn.executescript(_SCHEMA)
        self._key: bytes | None = None
        auth = self._auth()
        if auth is None and key is not None:
            with self.transaction():
                if self._auth() is None:
                    if self._conn.execute("SELECT 1 FROM events LIMIT 1").fetchone() is not None:
                        raise ConfigurationError(
                            f"the ledger at {self.path or ':memory:'} was started without a custodian key; its "
                            "history is not authenticated, so it cannot be used with a key",
                            hint="start a keyed ledger with: dpmagic ledger init NEW_PATH --key-file KEY",
                        )
                    self._conn.execute(
                        "INSERT INTO meta (key, value) VALUES ('auth', ?)",
                        (_dumps({"mac": "hmac-sha256", "check": key_check_value(key)}),),
                    )
            auth = self._auth()
        if auth is not None and key is not None:
            if not hmac.compare_digest(str(auth.get("check", "")), key_check_value(key)):
                raise ConfigurationError(
                    f"the custodian key does not match the ledger at {self.path or ':memory:'}",
                    hint="use the key this ledger was created with (dpmagic ledger init)",
                )
            self._key = key
            rows = self._conn.execute(
                "SELECT seq, ledger_key, kind, created, body, prev, hash FROM events ORDER BY seq"
            ).fetchall()
            problems = check_chain(rows, self._meta_json("head"), auth, key)
            if problems:
                raise ConfigurationError(
                    f"the keyed ledger at {self.path} was altered ({problems[0]}); it is not used",
                    hint=f"the custodian should investigate: dpmagic ledger verify {self.path} --key-file KEY",
                )

    def _meta_json(self, name: str) -> dict[str, Any] | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (name,)).fetchone()
        return None if row is None else json.loads(row[0])

    def _auth(self) -> dict[str, Any] | None:
        return self._meta_json("auth")

    @property
    def can_append(self) -> bool:
        """False for a keyed ledger opened without its custodian key (it can be read, not written)."""
        return self._key is not None or not self.keyed

    @property
    def keyed(self) -> bool:
        """Whether the ledger's chain is an HMAC chain under a custodian key (read from the file)."""
        return self._auth() is not None

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
            self._budget_written = False
            try:
                yield
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            else:
                self._conn.execute("COMMIT")
            finally:
                self._depth = 0
            if self._checkpoint and self._budget_written:
                self._copy_to_main_file()

    def _copy_to_main_file(self) -> None:
        """Checkpoint the WAL into the main database file, so that the file alone holds every committed event.

        ``PASSIVE`` first (it never waits, and completes unless another process is reading an older snapshot);
        if frames remain, ``FULL``, which waits (bounded by the busy timeout) for such readers.  Called after
        the commit, outside the write lock: the event is already durable in the WAL (``synchronous=FULL``).
        """
        busy, log, done = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if log != done:
            self._conn.execute("PRAGMA wal_checkpoint(FULL)").fetchone()

    # -- writing ------------------------------------------------------------------------------------------
    def append(self, key: str, kind: str, body: dict[str, Any]) -> int:
        """Append one chained event (inside a transaction; opens one if needed); returns its seq."""
        return self.append_event(key, kind, body).seq

    def append_event(self, key: str, kind: str, body: dict[str, Any]) -> LedgerEvent:
        """Append one chained event and return it as stored."""
        with self.transaction():
            mac_key = None
            if self._auth() is not None:  # read inside the transaction: a custodian may have keyed it since
                if self._key is None:
                    raise ConfigurationError(
                        f"the ledger at {self.path or ':memory:'} is keyed by its custodian: recording a {kind} "
                        "needs the custodian key",
                        hint=f"set ${KEY_FILE_ENV} (or pass --key-file to the dpmagic ledger command)",
                    )
                mac_key = self._key
            row = self._conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
            seq, prev = (1, GENESIS) if row is None else (int(row[0]) + 1, str(row[1]))
            created = time.time()
            text = _dumps(body)
            digest = chain_hash(prev, seq, key, kind, created, text, mac_key)
            self._conn.execute(
                "INSERT INTO events (seq, ledger_key, kind, created, body, prev, hash) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (seq, key, kind, created, text, prev, digest),
            )
            head: dict[str, Any] = {"seq": seq, "hash": digest}
            if mac_key is not None:
                head["mac"] = head_mac(mac_key, seq, digest)
            self._conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('head', ?)", (_dumps(head),))
            # every event that counts toward a budget is checkpointed into the main file at commit; a release
            # (the answer of a charge already there) follows with the next one
            self._budget_written = self._budget_written or kind != "release"
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
        if self._key is not None:  # a keyed ledger read with its key: no event without the custodian's MAC
            for r in rows:
                if not hmac.compare_digest(chain_hash(r[5], r[0], r[1], r[2], r[3], r[4], self._key), str(r[6])):
                    raise ConfigurationError(
                        f"event {r[0]} of the keyed ledger at {self.path} does not carry the custodian's MAC: "
                        "the file was altered; nothing more is recorded",
                        hint=f"the custodian should investigate: dpmagic ledger verify {self.path} --key-file KEY",
                    )
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


def backup(src: str | Path, dest: str | Path) -> int:
    """Copy a (possibly live) ledger file consistently with sqlite's online backup API; returns its events.

    Never overwrites ``dest``.  The copy is a self-contained file (rollback journal).
    """
    s, d = Path(src).expanduser(), Path(dest).expanduser()
    if not s.is_file():
        raise FileNotFoundError(f"no ledger file at {s}")
    if d.exists():
        raise FileExistsError(f"{d} already exists: a backup never overwrites a file")
    d.parent.mkdir(parents=True, exist_ok=True)
    source = sqlite3.connect(str(s), timeout=60.0)
    target = sqlite3.connect(str(d))
    try:
        source.execute("PRAGMA busy_timeout=60000")
        source.backup(target)
        target.execute("PRAGMA journal_mode=DELETE")
        n = int(target.execute("SELECT COUNT(*) FROM events").fetchone()[0])
    finally:
        target.close()
        source.close()
    return n
