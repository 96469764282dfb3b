"""The ledger's chain and the custodian key: how each event is chained to the previous one and checked.

Unkeyed, ``hash = sha256(prev | seq | key | kind | created | body)`` (detects accidents only: anyone can
recompute it); keyed, an HMAC-SHA256 under the custodian key, with a MAC on the head record (detects any change
by someone without the key).  See :mod:`dpmagic.accountant.ledger` for the file and its guarantees.

A keyed ledger begins with a MAC'd *genesis* event (seq 0, kind ``genesis``, written by ``dpmagic ledger init``
with the key): without it an emptied file, or a file swapped for an empty database or for one holding only the
tables, cannot be told apart from a fresh ledger, since every check of an empty chain passes.  With it, a valid
keyed ledger holds at least one event only the key holder can write, and a MAC'd head that names the last one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from dpmagic.errors import ConfigurationError

__all__ = [
    "GENESIS",
    "GENESIS_KEY",
    "GENESIS_KIND",
    "LEDGER_FORMAT",
    "KEY_ENV",
    "KEY_FILE_ENV",
    "MIN_KEY_BYTES",
    "chain_hash",
    "check_chain",
    "check_key",
    "head_mac",
    "is_keyed",
    "key_check_value",
    "key_from_env",
    "load_key",
    "read_chain",
    "verify",
]

#: the ``prev`` of a chain's first event
GENESIS = "0" * 64
#: the kind and the ledger key of a keyed ledger's first event (seq 0); no data set's key is this string
GENESIS_KIND = "genesis"
GENESIS_KEY = "ledger"
#: the ``format`` of a genesis written by this version (a keyed ledger without a genesis is format 1)
LEDGER_FORMAT = 2

#: the custodian key itself (text, at least :data:`MIN_KEY_BYTES` bytes) …
KEY_ENV = "DPMAGIC_LEDGER_KEY"
#: … or the path of a file holding it (``dpmagic ledger keygen FILE`` writes one)
KEY_FILE_ENV = "DPMAGIC_LEDGER_KEY_FILE"
MIN_KEY_BYTES = 16
_KEY_CHECK = b"dpmagic ledger key check v1"


def load_key(path: str | Path) -> bytes:
    """Read a custodian key file (surrounding whitespace ignored); one clear error if it is missing or short."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigurationError(f"no custodian key file at {p}", hint="create one with: dpmagic ledger keygen FILE")
    return check_key(p.read_bytes().strip(), f"the key in {p}")


def check_key(key: bytes, what: str) -> bytes:
    if len(key) < MIN_KEY_BYTES:
        raise ConfigurationError(
            f"{what} is too short ({len(key)} bytes; at least {MIN_KEY_BYTES})",
            hint="use a random key: dpmagic ledger keygen FILE",
        )
    return key


def key_from_env() -> bytes | None:
    """The custodian key from ``$DPMAGIC_LEDGER_KEY`` or the file named by ``$DPMAGIC_LEDGER_KEY_FILE``."""
    text = os.environ.get(KEY_ENV)
    if text:
        return check_key(text.strip().encode(), f"${KEY_ENV}")
    path = os.environ.get(KEY_FILE_ENV)
    if path:
        return load_key(path)
    return None


def key_check_value(key: bytes) -> str:
    return hmac.new(key, _KEY_CHECK, hashlib.sha256).hexdigest()


def chain_hash(
    prev: str, seq: int, key: str, kind: str, created: float, body: str, mac_key: bytes | None = None
) -> str:
    """The chain value of one event: SHA-256 (unkeyed ledger) or HMAC-SHA256 under the custodian key."""
    blob = f"{prev}|{seq}|{key}|{kind}|{created!r}|{body}".encode()
    if mac_key is None:
        return hashlib.sha256(blob).hexdigest()
    return hmac.new(mac_key, blob, hashlib.sha256).hexdigest()


def head_mac(mac_key: bytes, seq: int, digest: str) -> str:
    return hmac.new(mac_key, f"head|{seq}|{digest}".encode(), hashlib.sha256).hexdigest()


def check_chain(
    rows: list[tuple[Any, ...]],
    head: dict[str, Any] | None,
    auth: dict[str, Any] | None,
    key: bytes | None,
    *,
    require_genesis: bool = True,
) -> list[str]:
    """Problems of a chain of event rows against its head record (empty if intact).  O(events).

    With ``key`` the ledger must be keyed under it and (unless ``require_genesis`` is false: only to check a
    format-1 ledger before :func:`~dpmagic.accountant.ledger.upgrade` adds its genesis) begin with a MAC'd
    genesis event and end at a MAC'd head.  An unkeyed chain starts at seq 1 (or at a genesis, seq 0).
    """
    problems: list[str] = []
    mac_key: bytes | None = None
    if key is not None:
        if auth is None:
            return [
                "this ledger has no custodian key record: it is not keyed (or its key record was removed and its "
                "chain recomputed), so it is not the custodian's keyed ledger"
            ]
        if not hmac.compare_digest(str(auth.get("check", "")), key_check_value(key)):
            return ["the given key is not this ledger's custodian key"]
        mac_key = key
        if require_genesis and not rows:
            return [
                "this keyed ledger holds no event, not even the genesis that 'dpmagic ledger init' writes: it was "
                "emptied or replaced by someone without the key (a keyed ledger is never empty)"
            ]
        if require_genesis and (rows[0][0] != 0 or rows[0][2] != GENESIS_KIND):
            problems.append(
                "this keyed ledger has no genesis event (seq 0): it was emptied, truncated at its start or replaced "
                "by someone without the key, or it was made by a dpmagic older than the genesis; only in that last "
                "case the custodian upgrades it once, after checking it: dpmagic ledger upgrade PATH --key-file KEY"
            )
    prev = GENESIS
    expected_seq = 0 if rows and rows[0][0] == 0 else 1
    for seq, lkey, kind, created, body, prev_stored, digest in rows:
        if (seq == 0) != (kind == GENESIS_KIND) or (seq == 0 and lkey != GENESIS_KEY):
            problems.append(f"event {seq} ({kind}): only the first event (seq 0) is the ledger's genesis")
        if seq != expected_seq:
            problems.append(f"event {expected_seq} is missing (next is {seq}): deleted or reordered")
        if prev_stored != prev:
            problems.append(f"event {seq}: its link to the previous event is broken (deleted, inserted or reordered)")
        if not hmac.compare_digest(chain_hash(prev_stored, seq, lkey, kind, created, body, mac_key), str(digest)):
            problems.append(
                f"event {seq} ({kind}): its content does not match its "
                + ("MAC (edited, or re-chained without the custodian key)" if mac_key else "hash (edited)")
            )
        prev = digest
        expected_seq = seq + 1
    if head is not None:
        last = rows[-1] if rows else None
        if last is None or head.get("seq") != last[0] or head.get("hash") != last[6]:
            problems.append(
                f"the ledger's head is event {head.get('seq')}, but the log ends elsewhere: events were removed"
            )
        elif mac_key is not None and not hmac.compare_digest(
            str(head.get("mac", "")), head_mac(mac_key, int(head["seq"]), str(head["hash"]))
        ):
            problems.append("the ledger's head record does not carry the custodian's MAC: events were removed")
    elif rows:
        problems.append("the ledger's head record is missing (removed, with events after it, or edited)")
    return problems


def read_chain(path: str | Path) -> tuple[list[tuple[Any, ...]], dict[str, Any] | None, dict[str, Any] | None]:
    """The event rows, head and key record of a ledger file, read without changing it (``mode=ro``).

    Raises :class:`sqlite3.DatabaseError` if it is not a readable dpmagic ledger (e.g. no ``events`` table).
    """
    conn = sqlite3.connect(f"file:{Path(path)}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT seq, ledger_key, kind, created, body, prev, hash FROM events ORDER BY seq"
        ).fetchall()
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    finally:
        conn.close()
    head = json.loads(meta["head"]) if "head" in meta else None
    auth = json.loads(meta["auth"]) if "auth" in meta else None
    return rows, head, auth


def verify(path: str | Path, key: bytes | None = None) -> tuple[bool, list[str]]:
    """Recompute the chain of a ledger file: (intact?, list of problems).

    With ``key`` (the custodian key) the file must be a keyed ledger under that key, begin with its MAC'd genesis
    and end at its MAC'd head, and every MAC must match: any deletion, edit, reordering, truncation or
    re-chaining by someone without the key is detected, and so is an emptied file or one swapped for an empty
    database.  (A whole earlier state of the file — a rollback — is a valid ledger of the past: compare the head
    that ``dpmagic ledger verify`` prints.)  A keyed ledger checked without the key reports that its MACs were
    not checked.  An unkeyed ledger's SHA-256 chain only detects accidental changes (anyone can recompute it).
    """
    p = Path(path)
    if not p.is_file():
        return False, [f"{p} does not exist"]
    try:
        rows, head, auth = read_chain(p)
    except sqlite3.DatabaseError as exc:
        return False, [f"not a readable dpmagic ledger: {exc}"]
    if key is not None:
        key = check_key(key, "the custodian key")
    problems = check_chain(rows, head, auth, key)
    if auth is not None and key is None:
        problems.append("this ledger is keyed: its MACs can only be checked with the custodian key (--key-file)")
    return (not problems), problems


def is_keyed(path: str | Path) -> bool:
    """Whether the ledger file at ``path`` records a custodian key (False if unreadable)."""
    try:
        conn = sqlite3.connect(f"file:{Path(path)}?mode=ro", uri=True)
        row = conn.execute("SELECT 1 FROM meta WHERE key = 'auth'").fetchone()
        conn.close()
    except sqlite3.DatabaseError:
        return False
    return row is not None
