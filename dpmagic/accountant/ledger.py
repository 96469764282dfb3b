"""The durable record of what sessions have charged and released (sqlite3), hash-chained or HMAC-chained.

One ledger file (a custodian-chosen path; :func:`default_ledger_path` otherwise) holds an append-only log of
*events*, each chained to the previous one.  Events belong to a *ledger key*: the identity of a data set (the
schema's declared ``dataset`` id, else its canonical domain — never the rows) and a privacy definition.  Kinds:

============  ================================================================================================
``open``      first binding of a key: data-set id, table name, domain fingerprint, definition, budget, δ,
              neighbouring relation (nothing computed from the rows: no row hash, no row count)
``charge``    one admitted query: SQL, coverage, cost, weight, the bound charged — committed *before* any row
              is read (invariant 2); its ``seq`` is the query's entry id
``release``   the noisy answer of a charge, appended after release; its time is its charge's (never a clock
              read after the data was read: the difference would time the read)
``budget``    a custodian raised (or lowered) the budget of a key
``reset``     a custodian reset a key: earlier charges no longer count
``genesis``   a keyed ledger's first event (seq 0, ledger key ``ledger``), written with the custodian key by
              ``dpmagic ledger init``: the format, a random ledger id and (if the custodian named them) the
              data-set ids the ledger is for; a keyed ledger without it is invalid
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
  record carries its own MAC, ``meta`` records that the ledger is keyed (with a key-check value), and the
  chain begins with a MAC'd ``genesis`` event written by ``dpmagic ledger init``.  Without the key nobody can
  append, re-chain, truncate, empty, replace, reset or change a budget undetected; every process that appends
  (a kernel charging queries, a custodian's ``set-budget``) needs the key, and a keyed ledger is verified
  whenever it is opened with the key: an invalid one is refused before anything is written to the file.  A
  process holding the key never creates or adopts a ledger (only ``ledger init`` does).  Restoring an entire
  earlier copy of the file (a rollback, or a truncated tail with the head record of that time) cannot be
  detected from the file alone: a running kernel refuses a ledger whose log went backwards, and the custodian
  can compare the head printed by ``dpmagic ledger verify``.
* **Threads.** One :class:`Ledger` may be used from several threads: its connection is used under one
  re-entrant lock (:meth:`Ledger.transaction` and every read).

Size: one module (≈ 670 lines) because it is one file format — the event table, its transactions and
checkpoints, the chain's head and the keyed genesis — whose invariants every method must keep together.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import math
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dpmagic.accountant.chain import (  # re-exported: the chain and the key live in dpmagic.accountant.chain
    GENESIS,
    GENESIS_KEY,
    GENESIS_KIND,
    KEY_ENV,
    KEY_FILE_ENV,
    LEDGER_FORMAT,
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
    "upgrade",
    "is_keyed",
    "GENESIS",
    "GENESIS_KEY",
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


def set_journal_mode(conn: sqlite3.Connection, journal_mode: str, *, timeout: float = 60.0) -> str:
    """Switch the database of ``conn`` to ``journal_mode`` and return the mode it is in (upper case).

    Changing the journal mode takes an exclusive lock, and SQLite may answer "database is locked" at once, without
    calling the busy handler, when several processes open a new file at the same moment (each trying the
    conversion; seen in CI).  The mode is therefore read first (nothing to do when another process already
    converted the file) and the switch retried for up to ``timeout`` seconds."""
    want = journal_mode.upper()
    deadline = time.monotonic() + timeout
    while True:
        try:
            current = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).upper()
            if current == want:
                return current
            return str(conn.execute(f"PRAGMA journal_mode={journal_mode}").fetchone()[0]).upper()
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


class Ledger:
    """An append-only, chained event log in sqlite (a file, or in memory); keyed if its custodian made it so.

    ``key``: the custodian key (bytes); by default :func:`key_from_env`.  Opening a *keyed* ledger with the key
    checks the key and verifies the whole chain (O(events) HMACs) — its MAC'd genesis, every event, its MAC'd
    head — and refuses, with one error and before writing anything to the file, a ledger that is not intact;
    without the key it can be read but nothing can be appended.  With a key, a ledger is only created when
    ``create=True`` (``dpmagic ledger init``, which writes the genesis; ``datasets``: the declared data-set ids
    the ledger is for, ``None`` for any): a process holding the key never creates or adopts a ledger in place
    of a deleted, emptied or replaced one, and never starts an in-memory one (a fresh budget nobody keeps).
    """

    #: sqlite journal mode of ledger files (see the module docstring; ``benchmarks/bench_ledger.py``)
    journal_mode = "WAL"
    #: checkpoint the WAL into the main file after every commit that wrote a charge, an opening, a budget or a
    #: reset (``False``: only for the benchmark)
    checkpoint_every_commit = True

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        key: bytes | None = None,
        create: bool = False,
        datasets: list[str] | tuple[str, ...] | None = None,
    ) -> None:
        if path is not None and str(path) in ("", ":memory:", "memory"):
            path = None
        self.path = None if path is None else Path(path).expanduser()
        if key is None:
            key = key_from_env()
        elif not isinstance(key, bytes):
            raise ConfigurationError("a custodian key must be bytes (use load_key(FILE))")
        else:
            key = check_key(key, "the custodian key")
        if datasets is not None:
            datasets = _check_datasets(datasets, key)
        existed = self.path is not None and self.path.is_file() and self.path.stat().st_size > 0
        if self.path is None and key is not None and not create:
            raise ConfigurationError(
                "with a custodian key, the ledger is the custodian's file: an in-memory ledger would be a fresh "
                "budget that nobody keeps, so a process holding the key never starts one",
                hint="use the custodian's ledger ($DPMAGIC_LEDGER or --ledger PATH), or unset "
                f"${KEY_FILE_ENV} / ${KEY_ENV} for a throw-away session",
            )
        if self.path is not None:
            if key is not None and not existed and not create:
                raise ConfigurationError(
                    f"no ledger at {self.path}: with a custodian key, a ledger is created only by the custodian "
                    "(dpmagic ledger init)",
                    hint=f"dpmagic ledger init {self.path} --key-file KEY",
                )
            if not existed:
                self.path.parent.mkdir(parents=True, exist_ok=True)
        target = ":memory:" if self.path is None else str(self.path)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False, timeout=60.0)
        self._depth = 0
        self._checkpoint = False
        self._budget_written = False
        self._key: bytes | None = None
        #: the genesis body of a keyed ledger opened with its key (its ``datasets`` restrict the openings)
        self._genesis: dict[str, Any] | None = None
        #: the last seq this object has read or written: the log of a ledger never goes back
        self._high = -1
        self._conn.execute("PRAGMA busy_timeout=60000")
        if key is not None and existed:
            try:  # checked on this very connection before anything is written: a refused file is left as it was
                self._genesis = self._check_keyed(key)
            except BaseException:
                self._conn.close()
                raise
        if self.path is not None:
            mode = set_journal_mode(self._conn, self.journal_mode)
            self._checkpoint = mode == "WAL" and self.checkpoint_every_commit
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA secure_delete=ON")  # an overwritten head record leaves no trace
        self._conn.executescript(_SCHEMA)
        if key is not None and not existed:  # `dpmagic ledger init` (create=True): a new keyed ledger
            self._start_keyed(key, datasets)
        self._key = key

    def _where(self) -> str:
        return str(self.path or ":memory:")

    def _check_keyed(self, key: bytes) -> dict[str, Any]:
        """Check an existing file opened with the key: a keyed ledger under this key, intact from its genesis to
        its MAC'd head.  Raises one :class:`ConfigurationError` otherwise; returns the genesis body.  Reads only."""
        where = self._where()
        verify_hint = f"the custodian should investigate: dpmagic ledger verify {where} --key-file KEY"
        try:
            auth = self._auth()
            head = self._meta_json("head")
            rows = self._conn.execute(
                "SELECT seq, ledger_key, kind, created, body, prev, hash FROM events ORDER BY seq"
            ).fetchall()
        except (sqlite3.DatabaseError, ValueError) as exc:
            raise ConfigurationError(
                f"the file at {where} is not a keyed dpmagic ledger ({exc}); a process holding the custodian key "
                "never adopts a file as its ledger",
                hint=f"{verify_hint}; a keyed ledger is started only by: dpmagic ledger init NEW_PATH --key-file KEY",
            ) from None
        if auth is None:
            if rows:
                raise ConfigurationError(
                    f"the ledger at {where} was started without a custodian key; its history is not "
                    "authenticated, so it cannot be used with a key",
                    hint="start a keyed ledger with: dpmagic ledger init NEW_PATH --key-file KEY",
                )
            raise ConfigurationError(
                f"the file at {where} is not a keyed ledger: it has no custodian key record and no genesis event "
                "(an emptied or replaced file?); a process holding the custodian key never adopts a file as its "
                "ledger",
                hint=f"{verify_hint}; a keyed ledger is started only by: dpmagic ledger init NEW_PATH --key-file KEY",
            )
        if not hmac.compare_digest(str(auth.get("check", "")), key_check_value(key)):
            raise ConfigurationError(
                f"the custodian key does not match the ledger at {where}",
                hint="use the key this ledger was created with (dpmagic ledger init)",
            )
        problems = check_chain(rows, head, auth, key)
        if problems:
            raise ConfigurationError(
                f"the keyed ledger at {where} is not intact ({problems[0]}); it is not used and nothing was "
                "written to it",
                hint=verify_hint,
            )
        self._high = int(rows[-1][0])
        return dict(json.loads(rows[0][4]))

    def _start_keyed(self, key: bytes, datasets: list[str] | None) -> None:
        """A new keyed ledger: the key record, then the MAC'd genesis (seq 0) — with the key, in one transaction."""
        with self.transaction():
            if self._auth() is not None or self._conn.execute("SELECT 1 FROM events LIMIT 1").fetchone():
                raise ConfigurationError(f"{self._where()} already holds a ledger: init starts a new one")
            self._conn.execute(
                "INSERT INTO meta (key, value) VALUES ('auth', ?)",
                (_dumps({"mac": "hmac-sha256", "check": key_check_value(key)}),),
            )
            self._key = key
            self._genesis = _genesis_body(datasets, by="dpmagic ledger init")
            self._insert(GENESIS_KEY, GENESIS_KIND, self._genesis, time.time(), None, key)

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
        with self._lock:
            return self._auth() is not None

    @property
    def genesis(self) -> dict[str, Any] | None:
        """The genesis body of a keyed ledger (format, ledger id, data sets), as read with the key or written."""
        return None if self._genesis is None else dict(self._genesis)

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
    def append(self, key: str, kind: str, body: dict[str, Any], *, created: float | None = None) -> int:
        """Append one chained event (inside a transaction; opens one if needed); returns its seq."""
        return self.append_event(key, kind, body, created=created).seq

    def append_event(self, key: str, kind: str, body: dict[str, Any], *, created: float | None = None) -> LedgerEvent:
        """Append one chained event and return it as stored.

        ``created``: the event's time (default: now).  A release passes its charge's time, so that no clock is
        read after the data was (:meth:`Accountant.record_release`).  Refused, changing nothing, if the log went
        backwards since this object last read it (events deleted, or an earlier copy of the file restored), and
        on a keyed ledger if its last event or its head does not carry the custodian's MAC, or if the event opens
        a data set its genesis does not name.
        """
        if key == GENESIS_KEY or kind == GENESIS_KIND:
            raise ConfigurationError("a ledger's genesis is written only when it is started (dpmagic ledger init)")
        if created is None:
            created = time.time()
        elif not (isinstance(created, float) and math.isfinite(created)):
            raise ConfigurationError(f"an event's time must be a finite float, got {created!r}")
        with self.transaction():
            mac_key = None
            if self._auth() is not None:  # read inside the transaction: a custodian may have keyed it since
                if self._key is None:
                    raise ConfigurationError(
                        f"the ledger at {self._where()} is keyed by its custodian: recording a {kind} "
                        "needs the custodian key",
                        hint=f"set ${KEY_FILE_ENV} (or pass --key-file to the dpmagic ledger command)",
                    )
                mac_key = self._key
            row = self._conn.execute(
                "SELECT seq, ledger_key, kind, created, body, prev, hash FROM events ORDER BY seq DESC LIMIT 1"
            ).fetchone()
            self._check_tail(row, mac_key)
            if mac_key is not None and kind in ("open", "sp-open"):
                self._check_dataset(body.get("dataset"))
            return self._insert(key, kind, body, created, row, mac_key)

    def _insert(
        self,
        key: str,
        kind: str,
        body: dict[str, Any],
        created: float,
        last: tuple[Any, ...] | None,
        mac_key: bytes | None,
    ) -> LedgerEvent:
        """Insert the event after ``last`` (seq 0 for a keyed ledger's genesis, else 1 on an empty log) and
        move the head to it.  Inside a transaction."""
        if last is None:
            seq, prev = (0 if kind == GENESIS_KIND else 1), GENESIS
        else:
            seq, prev = int(last[0]) + 1, str(last[6])
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
        self._high = max(self._high, seq)
        # every event that counts toward a budget is checkpointed into the main file at commit; a release
        # (the answer of a charge already there) follows with the next one
        self._budget_written = self._budget_written or kind != "release"
        return LedgerEvent(seq, key, kind, created, json.loads(text), prev, digest)

    def _check_tail(self, last: tuple[Any, ...] | None, mac_key: bytes | None) -> None:
        """Before appending: the log did not go backwards; keyed, its last event and head carry the MAC."""
        where = self._where()
        hint = f"the custodian should investigate: dpmagic ledger verify {where} --key-file KEY"
        last_seq = -1 if last is None else int(last[0])
        if last_seq < self._high:
            raise ConfigurationError(
                f"the ledger at {where} went backwards: its last event is now {last_seq}, but this process has "
                f"already seen event {self._high} (events were deleted, or an earlier copy of the file was "
                "restored); nothing more is recorded",
                hint=hint,
            )
        if mac_key is None:
            return
        if last is None:
            raise ConfigurationError(
                f"the keyed ledger at {where} holds no event, not even its genesis: it was emptied or replaced; "
                "nothing more is recorded",
                hint=hint,
            )
        head = self._meta_json("head")
        if (
            not hmac.compare_digest(
                chain_hash(last[5], last[0], last[1], last[2], last[3], last[4], mac_key), str(last[6])
            )
            or head is None
            or head.get("seq") != last[0]
            or head.get("hash") != last[6]
            or not hmac.compare_digest(str(head.get("mac", "")), head_mac(mac_key, int(last[0]), str(last[6])))
        ):
            raise ConfigurationError(
                f"the keyed ledger at {where} was altered: its last event or its head record does not carry the "
                "custodian's MAC (events or the head were removed or edited); nothing more is recorded",
                hint=hint,
            )

    def _check_dataset(self, dataset: Any) -> None:
        """A keyed ledger whose genesis names data sets opens no other one."""
        named = None if self._genesis is None else self._genesis.get("datasets")
        if named is not None and dataset not in named:
            raise ConfigurationError(
                f"the keyed ledger at {self._where()} is for data set{'s' if len(named) > 1 else ''} "
                f"{', '.join(map(repr, named))} (named by its custodian at 'dpmagic ledger init'), not "
                f"{dataset!r}: it is not bound here",
                hint="bind that data set's schema (its declared 'dataset' id), or the custodian starts a ledger for "
                "this one: dpmagic ledger init NEW_PATH --key-file KEY --dataset ID",
            )

    # -- reading ---------------------------------------------------------------------------------------
    def events(self, key: str | None = None, *, after: int = -1) -> list[LedgerEvent]:
        """Events (of one key, or all) with ``seq > after`` (default: all), in order (a keyed ledger's genesis is
        seq 0)."""
        with self._lock:
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
            if rows:
                self._high = max(self._high, int(rows[-1][0]))
        return [LedgerEvent(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5], r[6]) for r in rows]

    def ledger_keys(self) -> list[str]:
        """The data sets' ledger keys (not the genesis's)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT DISTINCT ledger_key FROM events WHERE ledger_key != ? ORDER BY ledger_key", (GENESIS_KEY,)
            ).fetchall()
        return [r[0] for r in rows]

    def opening(self, key: str) -> dict[str, Any] | None:
        """The ``open`` event's body of a key (None if the key was never bound)."""
        with self._lock:
            row = self._conn.execute(
                "SELECT body FROM events WHERE ledger_key = ? AND kind = 'open' ORDER BY seq LIMIT 1", (key,)
            ).fetchone()
        return None if row is None else json.loads(row[0])

    def budget_of(self, key: str) -> float | None:
        """The key's current budget: the last ``budget`` event, else the ``open`` one."""
        with self._lock:
            row = self._conn.execute(
                "SELECT body FROM events WHERE ledger_key = ? AND kind IN ('open', 'budget') ORDER BY seq DESC LIMIT 1",
                (key,),
            ).fetchone()
        return None if row is None else float(json.loads(row[0])["budget"])

    def entries(self, key: str | None = None) -> list[LedgerEntry]:
        """The charges counting toward a key's budget now (after its last reset), with their releases."""
        return entries_from_events(self.events(key))

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM events WHERE kind = 'charge'").fetchone()[0])

    def close(self) -> None:
        with self._lock:
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


def _check_datasets(datasets: list[str] | tuple[str, ...], key: bytes | None) -> list[str]:
    if key is None:
        raise ConfigurationError("only a keyed ledger names its data sets (dpmagic ledger init --key-file KEY)")
    if isinstance(datasets, str) or not all(isinstance(d, str) and d.strip() for d in datasets) or not datasets:
        raise ConfigurationError(f"the data sets of a ledger are non-empty 'dataset' ids, got {datasets!r}")
    return sorted(set(datasets))


def _genesis_body(datasets: list[str] | None, *, by: str, **extra: Any) -> dict[str, Any]:
    """A genesis: the format, a random ledger id (to tell two keyed ledgers apart) and the data sets, if named."""
    return {"format": LEDGER_FORMAT, "ledger": secrets.token_hex(16), "datasets": datasets, "by": by, **extra}


def upgrade(path: str | Path, key: bytes, *, datasets: list[str] | tuple[str, ...] | None = None) -> dict[str, Any]:
    """Custodian, with the key: give a keyed ledger made before the genesis existed (format 1) its genesis.

    The old ledger must be intact under the key — every MAC, and a MAC'd head naming its last event — and hold
    at least one event: an empty keyed ledger without a genesis cannot be told apart from one emptied by someone
    without the key, so it is refused (start a new one with ``dpmagic ledger init``).  The genesis is inserted as
    seq 0 and the chain's links and MACs are recomputed with the key (bodies, times and seqs unchanged, so entry
    ids stay), in one transaction.  Returns the genesis body.  This is the only way a format-1 ledger is used
    again: kernels and ``verify`` refuse it, and nothing adopts it silently.
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"no ledger file at {p}")
    key = check_key(key, "the custodian key")
    if datasets is not None:
        datasets = _check_datasets(datasets, key)
    conn = sqlite3.connect(str(p), isolation_level=None, timeout=60.0)
    try:
        conn.execute("PRAGMA busy_timeout=60000")
        conn.execute("BEGIN IMMEDIATE")
        try:
            try:
                rows = conn.execute(
                    "SELECT seq, ledger_key, kind, created, body, prev, hash FROM events ORDER BY seq"
                ).fetchall()
                meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            except sqlite3.DatabaseError as exc:
                raise ConfigurationError(f"{p} is not a dpmagic ledger ({exc}): nothing to upgrade") from None
            auth = json.loads(meta["auth"]) if "auth" in meta else None
            head = json.loads(meta["head"]) if "head" in meta else None
            if auth is None:
                raise ConfigurationError(f"{p} is not a keyed ledger: only a keyed ledger has a genesis to add")
            if not hmac.compare_digest(str(auth.get("check", "")), key_check_value(key)):
                raise ConfigurationError(f"the custodian key does not match the ledger at {p}")
            if rows and rows[0][0] == 0 and rows[0][2] == GENESIS_KIND:
                raise ConfigurationError(f"{p} already begins with its genesis: nothing to upgrade")
            if not rows:
                raise ConfigurationError(
                    f"{p} holds no event: an empty keyed ledger without a genesis cannot be told apart from one "
                    "emptied by someone without the key, so it is not upgraded",
                    hint="if it was never used, start a new one: dpmagic ledger init NEW_PATH --key-file KEY",
                )
            problems = check_chain(rows, head, auth, key, require_genesis=False)
            if problems:
                raise ConfigurationError(
                    f"the keyed ledger at {p} is not intact ({problems[0]}): it is not upgraded",
                    hint=f"investigate: dpmagic ledger verify {p} --key-file KEY",
                )
            assert head is not None  # check_chain reports a missing head of a non-empty chain
            genesis = _genesis_body(
                datasets, by="dpmagic ledger upgrade", upgraded={"events": len(rows), "head": str(head["hash"])}
            )
            text = _dumps(genesis)
            created = time.time()
            prev = chain_hash(GENESIS, 0, GENESIS_KEY, GENESIS_KIND, created, text, key)
            conn.execute(
                "INSERT INTO events (seq, ledger_key, kind, created, body, prev, hash) VALUES (0, ?, ?, ?, ?, ?, ?)",
                (GENESIS_KEY, GENESIS_KIND, created, text, GENESIS, prev),
            )
            for seq, lkey, kind, ev_created, body, _, _ in rows:
                digest = chain_hash(prev, seq, lkey, kind, ev_created, body, key)
                conn.execute("UPDATE events SET prev = ?, hash = ? WHERE seq = ?", (prev, digest, seq))
                prev = digest
            last = int(rows[-1][0])
            conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('head', ?)",
                (_dumps({"seq": last, "hash": prev, "mac": head_mac(key, last, prev)}),),
            )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        with contextlib.suppress(sqlite3.DatabaseError):
            conn.execute("PRAGMA wal_checkpoint(FULL)").fetchone()
    finally:
        conn.close()
    return genesis


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
