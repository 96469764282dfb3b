"""Audit issue 10, items 5, 6, 7 and 10: data-set identity, no row fingerprint, keyed chain, no WAL-only charges."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from tests_support import DATA, load_table

import dpmagic
from dpmagic import Session
from dpmagic.accountant.ledger import Ledger, verify
from dpmagic.domain.schema import Schema
from dpmagic.errors import ConfigurationError
from dpmagic.presentation.cli import main as cli_main

QUERIES = ["SELECT COUNT(*) FROM pums WHERE age < 30", "SELECT COUNT(*) FROM pums WHERE age >= 30 AND sex = 1"]


def pums_frame() -> pd.DataFrame:
    return load_table("pums")[0]


def pums_spec() -> dict[str, Any]:
    return json.loads((DATA / "pums.schema.json").read_text())


# ---------------------------------------------------------------------------------------------------------------
# item 5: the budget belongs to the data set's declared identity, not to a hash of the bound frame


def _variant(kind: str, spec: dict[str, Any], df: pd.DataFrame) -> tuple[dict[str, Any], pd.DataFrame]:
    spec, df = json.loads(json.dumps(spec)), df.copy()
    if kind == "reordered-columns":
        spec["columns"] = dict(reversed(list(spec["columns"].items())))
        df = df[list(reversed(df.columns))]
    elif kind == "renamed-table":
        spec["table"] = "census_sample"
    elif kind == "edited-privacy-unit":
        spec["privacy_unit"] = "one person (edited)"
        spec["description"] = "another description"
    elif kind == "zero-as-float":
        spec["columns"]["age"]["lower"] = 0.0
        spec["columns"]["income"]["lower"] = float(spec["columns"]["income"]["lower"])
    elif kind == "reordered-categories":
        spec["columns"]["race"]["values"] = list(reversed(spec["columns"]["race"]["values"]))
    elif kind == "dropped-row":
        df = df.iloc[1:]
    elif kind == "duplicated-row":
        df = pd.concat([df, df.iloc[[0]]], ignore_index=True)
    elif kind == "changed-row":
        df.loc[0, "age"] = (int(df.loc[0, "age"]) + 1) % 100
    else:  # pragma: no cover
        raise AssertionError(kind)
    return spec, df


VARIANTS = [
    "reordered-columns",
    "renamed-table",
    "edited-privacy-unit",
    "zero-as-float",
    "reordered-categories",
    "dropped-row",
    "duplicated-row",
    "changed-row",
]


@pytest.mark.parametrize("declared", [True, False], ids=["with-dataset-id", "domain-only"])
@pytest.mark.parametrize("kind", VARIANTS)
def test_rebinding_an_edited_schema_or_frame_resumes_the_same_budget(tmp_path: Path, kind: str, declared: bool) -> None:
    path = tmp_path / "l.sqlite"
    spec, df = pums_spec(), pums_frame()
    if declared:
        spec["dataset"] = "pums-2026-v1"
    else:
        spec.pop("dataset", None)
    s = Session(df, spec, "epsilon=1", ledger=path)
    s.query(QUERIES[0], epsilon=0.5)
    spec2, df2 = _variant(kind, spec, df)
    again = Session(df2, spec2, "epsilon=1", ledger=path)
    assert again.ledger_key == s.ledger_key
    assert again.spent == pytest.approx(0.5)


def test_different_dataset_ids_and_domains_have_their_own_budgets(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    spec, df = pums_spec(), pums_frame()
    spec["dataset"] = "pums-a"
    Session(df, spec, "epsilon=1", ledger=path).query(QUERIES[0], epsilon=0.5)
    # the custodian declares another data set: a budget of its own
    assert Session(df, {**spec, "dataset": "pums-b"}, "epsilon=1", ledger=path).spent == 0.0
    # without ids, an int column and a float column over the same bounds are different domains
    plain = {k: v for k, v in spec.items() if k != "dataset"}
    as_float = json.loads(json.dumps(plain))
    as_float["columns"]["age"]["type"] = "float"
    a, b = Schema.from_dict(plain), Schema.from_dict(as_float)
    assert a.domain_fingerprint() != b.domain_fingerprint()
    assert Schema.from_dict({**plain, "table": "x"}).domain_fingerprint() == a.domain_fingerprint()
    # the same id with another domain is refused (its recorded charges are about the old domain)
    wider = json.loads(json.dumps(spec))
    wider["columns"]["age"]["upper"] = 120
    with pytest.raises(ConfigurationError, match="pums-a"):
        Session(df, wider, "epsilon=1", ledger=path)


def test_shipped_schemas_declare_dataset_ids() -> None:
    _, schema = dpmagic.load_adult()
    assert schema.dataset == "uci-adult"
    assert Schema.from_json(DATA / "pums.schema.json").dataset == "pums-sample"
    assert Schema.from_json(DATA / "adult.schema.json").to_dict()["dataset"] == "uci-adult"
    with pytest.raises(dpmagic.SchemaError, match="dataset"):
        Schema.from_dict({**pums_spec(), "dataset": ""})


# ---------------------------------------------------------------------------------------------------------------
# item 6: nothing stored, shown or exported is a function of the rows


def _ledger_after_binding(tmp_path: Path, name: str, df: pd.DataFrame, monkeypatch, **env: str) -> dict[str, Any]:
    """Bind ``df``, charge two queries (no data read), and collect every byte the ledger stores or shows."""
    import dpmagic.accountant.ledger as ledger_mod

    clock = iter(1_700_000_000.25 + 0.5 * i for i in range(10_000))
    monkeypatch.setattr(ledger_mod.time, "time", lambda: next(clock))
    path = tmp_path / f"{name}.sqlite"
    s = Session(df, pums_spec(), "epsilon=1", ledger=path)
    for sql in QUERIES:
        q = s.parse(sql)
        s.accountant.charge(q.coverage, 0.1, sql=sql, canonical=q.canonical, details={})
    shown = {"repr": repr(s), "frame": s.ledger_frame().to_string()}
    s.ledger.close()
    conn = sqlite3.connect(path)
    shown["dump"] = "\n".join(conn.iterdump())
    bodies = [json.loads(b) for (b,) in conn.execute("SELECT body FROM events")]
    conn.close()
    shown["bytes"] = path.read_bytes()
    for fmt in ("csv", "json", "html"):
        out = tmp_path / f"{name}.{fmt}"
        assert cli_main(["ledger", "export", str(path), "--format", fmt, "-o", str(out)]) == 0
        shown[fmt] = out.read_text().replace(str(path), "PATH")
    return {"shown": shown, "bodies": bodies, "path": path}


def _numbers(obj: Any) -> list[float]:
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _numbers(v)]
    if isinstance(obj, list):
        return [x for v in obj for x in _numbers(v)]
    return [obj] if isinstance(obj, (int, float)) and not isinstance(obj, bool) else []


def test_ledger_stores_and_shows_no_function_of_the_rows(tmp_path: Path, monkeypatch, capsys) -> None:
    df = pums_frame()
    neighbours = {
        "D": df,
        "minus-one": df.iloc[1:],
        "changed-one": df.assign(income=df["income"].where(df.index != 5, 0)),
    }
    seen = {name: _ledger_after_binding(tmp_path, name, frame, monkeypatch) for name, frame in neighbours.items()}
    for name in ("minus-one", "changed-one"):
        for what, text in seen["D"]["shown"].items():
            assert seen[name]["shown"][what] == text, f"{what} differs between D and {name}"
    for rec, frame in zip(seen.values(), neighbours.values()):
        assert len(frame) not in _numbers(rec["bodies"]), "an exact row count is stored"
        assert str(len(frame)) not in rec["shown"]["repr"]
        capsys.readouterr()
        assert cli_main(["ledger", "show", str(rec["path"])]) == 0
        out = capsys.readouterr().out
        assert f"({len(frame)} rows)" not in out and "rows" not in out
    outs = []
    for rec in seen.values():
        capsys.readouterr()
        cli_main(["ledger", "show", str(rec["path"])])
        outs.append(capsys.readouterr().out.replace(str(rec["path"]), "PATH"))
    assert outs[0] == outs[1] == outs[2]


# ---------------------------------------------------------------------------------------------------------------
# item 7: a custodian key makes the chain an HMAC chain; custodian actions need it


def _keyed_setup(tmp_path: Path, monkeypatch, *init: str) -> tuple[Path, Path, Session]:
    keyfile = tmp_path / "custodian.key"
    path = tmp_path / "keyed.sqlite"
    assert cli_main(["ledger", "keygen", str(keyfile)]) == 0
    assert cli_main(["ledger", "init", str(path), "--key-file", str(keyfile), *init]) == 0
    monkeypatch.setenv("DPMAGIC_LEDGER_KEY_FILE", str(keyfile))
    s = Session(pums_frame(), pums_spec(), "epsilon=1", ledger=path)
    for sql in QUERIES + ["SELECT COUNT(*) FROM pums WHERE age >= 30 AND sex = 0"]:
        s.query(sql, epsilon=0.3)
    s.ledger.close()
    monkeypatch.delenv("DPMAGIC_LEDGER_KEY_FILE")
    return path, keyfile, s


def _rechain(path: Path, drop_kind: str = "charge", *, mac_key: bytes | None = None) -> None:
    """The attack of the audit: delete the charges, recompute every link and hash, fix the head."""
    import hmac

    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM events WHERE kind IN (?, 'release')", (drop_kind,))
    rows = conn.execute("SELECT seq, ledger_key, kind, created, body FROM events ORDER BY seq").fetchall()
    conn.execute("DELETE FROM events")
    prev = "0" * 64
    for new_seq, (_, key, kind, created, body) in enumerate(rows, 1):
        blob = f"{prev}|{new_seq}|{key}|{kind}|{created!r}|{body}".encode()
        digest = (
            hashlib.sha256(blob).hexdigest() if mac_key is None else hmac.new(mac_key, blob, hashlib.sha256).hexdigest()
        )
        conn.execute(
            "INSERT INTO events (seq, ledger_key, kind, created, body, prev, hash) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (new_seq, key, kind, created, body, prev, digest),
        )
        prev = digest
    conn.execute(
        "INSERT OR REPLACE INTO meta (key, value) VALUES ('head', ?)",
        (json.dumps({"seq": len(rows), "hash": prev}, sort_keys=True, separators=(",", ":")),),
    )
    conn.commit()
    conn.close()


def test_unkeyed_chain_is_not_tamper_evident_and_says_so(tmp_path: Path, capsys) -> None:
    path = tmp_path / "plain.sqlite"
    s = Session(pums_frame(), pums_spec(), "epsilon=1", ledger=path)
    s.query(QUERIES[0], epsilon=0.5)
    s.ledger.close()
    _rechain(path)
    capsys.readouterr()
    assert cli_main(["ledger", "verify", str(path)]) == 0  # documented: anyone can re-chain an unkeyed ledger
    assert "not tamper-evident" in capsys.readouterr().out


@pytest.mark.parametrize("forgery", ["sha256", "wrong-key", "drop-key-record"])
def test_keyed_ledger_detects_a_rechained_forgery(tmp_path: Path, monkeypatch, forgery: str) -> None:
    path, keyfile, s = _keyed_setup(tmp_path, monkeypatch)
    assert cli_main(["ledger", "verify", str(path), "--key-file", str(keyfile)]) == 0
    if forgery == "drop-key-record":
        conn = sqlite3.connect(path)
        conn.execute("DELETE FROM meta WHERE key != 'head'")
        conn.commit()
        conn.close()
    _rechain(path, mac_key=b"guessed key" if forgery == "wrong-key" else None)
    assert cli_main(["ledger", "verify", str(path), "--key-file", str(keyfile)]) == 1
    assert not verify(path, key=keyfile.read_bytes().strip())[0]
    # and a kernel holding the key refuses to bind to the forged ledger (no fresh budget)
    monkeypatch.setenv("DPMAGIC_LEDGER_KEY_FILE", str(keyfile))
    with pytest.raises(ConfigurationError):
        Session(pums_frame(), pums_spec(), "epsilon=1", ledger=path)


def test_keyed_ledger_custodian_actions_need_the_key(tmp_path: Path, monkeypatch, capsys) -> None:
    path, keyfile, s = _keyed_setup(tmp_path, monkeypatch)
    key = s.ledger_key
    n_events = len(Ledger(path).events())
    assert cli_main(["ledger", "reset", str(path), "--key", key, "--yes"]) == 2
    assert cli_main(["ledger", "set-budget", str(path), "--key", key, "--to", "5", "--yes"]) == 2
    with pytest.raises(ConfigurationError, match="key"):
        Ledger(path).reset(key)
    assert len(Ledger(path).events()) == n_events  # nothing changed
    # a session without the key cannot charge a keyed ledger either
    with pytest.raises(ConfigurationError, match="key"):
        Session(pums_frame(), pums_spec(), "epsilon=1", ledger=path)
    # a wrong key is refused, with one clear message
    bad = tmp_path / "bad.key"
    bad.write_text("x" * 64)
    assert cli_main(["ledger", "reset", str(path), "--key", key, "--yes", "--key-file", str(bad)]) == 2
    assert len(Ledger(path).events()) == n_events
    # with the key: recorded, and the chain still verifies
    args = ["--yes", "--key-file", str(keyfile)]
    assert cli_main(["ledger", "set-budget", str(path), "--key", key, "--to", "2", *args]) == 0
    assert cli_main(["ledger", "reset", str(path), "--key", key, *args]) == 0
    assert cli_main(["ledger", "verify", str(path), "--key-file", str(keyfile)]) == 0
    # show and export need no key and print no MAC
    capsys.readouterr()
    assert cli_main(["ledger", "show", str(path)]) == 0
    assert "keyed" in capsys.readouterr().out


def test_a_kernel_with_a_key_never_creates_a_ledger(tmp_path: Path, monkeypatch) -> None:
    keyfile = tmp_path / "k"
    assert cli_main(["ledger", "keygen", str(keyfile)]) == 0
    monkeypatch.setenv("DPMAGIC_LEDGER_KEY_FILE", str(keyfile))
    with pytest.raises(ConfigurationError, match="init"):
        Session(pums_frame(), pums_spec(), "epsilon=1", ledger=tmp_path / "deleted.sqlite")
    assert not (tmp_path / "deleted.sqlite").exists()


# ---------------------------------------------------------------------------------------------------------------
# item 10: every charge is in the main database file, not only in the WAL


def test_plain_copy_of_the_ledger_file_mid_session_holds_every_charge(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    s = Session(pums_frame(), pums_spec(), "epsilon=1", ledger=path)
    for sql in QUERIES:
        s.query(sql, epsilon=0.45)
    copy = tmp_path / "copy.sqlite"
    shutil.copyfile(path, copy)  # the session is still open; the -wal file is not copied
    assert not (tmp_path / "copy.sqlite-wal").exists()
    ledger = Ledger(copy)
    assert len(ledger) == 2
    assert [e.cost for e in ledger.entries(s.ledger_key)] == [0.45, 0.45]
    assert ledger.entries(s.ledger_key)[0].released  # answers follow with the next charge's checkpoint
    ledger.close()
    assert verify(copy)[0]
    assert Session(pums_frame(), pums_spec(), "epsilon=1", ledger=copy).spent == pytest.approx(s.spent)


def test_ledger_backup_command(tmp_path: Path, capsys) -> None:
    path = tmp_path / "ledger.sqlite"
    s = Session(pums_frame(), pums_spec(), "epsilon=1", ledger=path)
    s.query(QUERIES[0], epsilon=0.3)
    dest = tmp_path / "backup.sqlite"
    assert cli_main(["ledger", "backup", str(path), str(dest)]) == 0  # while the session is open
    assert verify(dest)[0]
    assert len(Ledger(dest).events()) == len(s.ledger.events())
    assert cli_main(["ledger", "backup", str(path), str(dest)]) == 2  # never overwrites
    assert cli_main(["ledger", "backup", str(tmp_path / "missing.sqlite"), str(tmp_path / "x.sqlite")]) == 2


def test_a_running_keyed_session_ignores_no_forged_event(tmp_path: Path, monkeypatch) -> None:
    """An event inserted without the key (here: a budget raise) is refused at the kernel's next decision."""
    keyfile = tmp_path / "k"
    path = tmp_path / "keyed.sqlite"
    assert cli_main(["ledger", "keygen", str(keyfile)]) == 0
    assert cli_main(["ledger", "init", str(path), "--key-file", str(keyfile)]) == 0
    monkeypatch.setenv("DPMAGIC_LEDGER_KEY_FILE", str(keyfile))
    s = Session(pums_frame(), pums_spec(), "epsilon=1", ledger=path)
    s.query(QUERIES[0], epsilon=0.9)
    conn = sqlite3.connect(path)
    seq, prev = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
    body = json.dumps({"budget": 100.0, "by": "custodian", "reason": ""})
    blob = f"{prev}|{seq + 1}|{s.ledger_key}|budget|1.0|{body}".encode()
    conn.execute(
        "INSERT INTO events VALUES (?, ?, 'budget', 1.0, ?, ?, ?)",
        (seq + 1, s.ledger_key, body, prev, hashlib.sha256(blob).hexdigest()),
    )
    conn.commit()
    conn.close()
    with pytest.raises(ConfigurationError, match="MAC"):
        s.query(QUERIES[0].replace("< 30", "< 20"), epsilon=0.5)
    assert s.remaining == pytest.approx(0.1)


# ---------------------------------------------------------------------------------------------------------------
# audit issue 24, finding 2: a keyed ledger begins with a MAC'd genesis and ends at a MAC'd head; a process
# holding the key never adopts an emptied or replaced file (kernel and `ledger verify --key-file` alike)

_LEDGER_TABLES = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE events (seq INTEGER PRIMARY KEY, ledger_key TEXT NOT NULL, kind TEXT NOT NULL, created REAL NOT NULL,
                     body TEXT NOT NULL, prev TEXT NOT NULL, hash TEXT NOT NULL);
"""


def _sql(path: Path, script: str) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(script)
    conn.commit()
    conn.close()


def _replace_file(path: Path, script: str | None) -> None:
    """Swap the ledger for a new sqlite file built by ``script`` (``None``: a zero-byte file)."""
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        p.unlink(missing_ok=True)
    if script is None:
        path.write_bytes(b"")
    else:
        _sql(path, script)


def _auth_row(path: Path) -> str:
    conn = sqlite3.connect(path)
    (value,) = conn.execute("SELECT value FROM meta WHERE key = 'auth'").fetchone()
    conn.close()
    return value.replace("'", "''")


def _head(path: Path) -> str:
    conn = sqlite3.connect(path)
    (value,) = conn.execute("SELECT value FROM meta WHERE key = 'head'").fetchone()
    conn.close()
    return value


def _attack(name: str, path: Path, tmp_path: Path, keyfile: Path, early_head: str) -> None:
    if name == "zero-byte-file":
        _replace_file(path, None)
    elif name == "empty-sqlite-db":
        _replace_file(path, "PRAGMA user_version = 7;")
    elif name == "one-create-table":  # the audit's swap
        _replace_file(path, "CREATE TABLE t (x);")
    elif name == "only-the-tables":
        _replace_file(path, _LEDGER_TABLES)
    elif name == "tables-and-key-record":
        auth = _auth_row(path)
        _replace_file(path, _LEDGER_TABLES + f"INSERT INTO meta VALUES ('auth', '{auth}');")
    elif name == "emptied-in-place":  # the audit's: DELETE FROM events, and the head row
        _sql(path, "DELETE FROM events; DELETE FROM meta WHERE key = 'head';")
    elif name == "events-deleted-head-kept":
        _sql(path, "DELETE FROM events;")
    elif name == "head-deleted":
        _sql(path, "DELETE FROM meta WHERE key = 'head';")
    elif name == "tail-truncated":
        _sql(path, "DELETE FROM events WHERE seq > (SELECT MAX(seq) - 2 FROM events);")
    elif name == "head-rolled-back":  # an earlier (MAC'd) head, the events left in place
        _sql(path, f"UPDATE meta SET value = '{early_head}' WHERE key = 'head';")
    elif name == "genesis-deleted":
        _sql(path, "DELETE FROM events WHERE seq = 0;")
    elif name == "genesis-replaced-unkeyed":  # a new genesis under SHA-256, the chain re-linked without the key
        conn = sqlite3.connect(path)
        rows = conn.execute("SELECT seq, ledger_key, kind, created, body FROM events ORDER BY seq").fetchall()
        prev = "0" * 64
        for seq, key, kind, created, body in rows:
            if seq == 0:
                body = json.dumps({"format": 2, "ledger": "f" * 32, "datasets": None, "by": "attacker"})
            blob = f"{prev}|{seq}|{key}|{kind}|{created!r}|{body}".encode()
            digest = hashlib.sha256(blob).hexdigest()
            conn.execute("UPDATE events SET body = ?, prev = ?, hash = ? WHERE seq = ?", (body, prev, digest, seq))
            prev = digest
        head = json.dumps({"seq": rows[-1][0], "hash": prev})
        conn.execute("UPDATE meta SET value = ? WHERE key = 'head'", (head,))
        conn.commit()
        conn.close()
    elif name == "unkeyed-ledger-swapped-in":
        other = tmp_path / "plain.sqlite"
        Ledger(other, key=None).close()  # an unkeyed ledger with its tables (and no event)
        _replace_file(path, None)
        shutil.copyfile(other, path)
    elif name == "another-keyed-ledger":  # the custodian's keyed ledger of another data set, same key
        other = tmp_path / "other.sqlite"
        assert cli_main(["ledger", "init", str(other), "--key-file", str(keyfile), "--dataset", "other-set"]) == 0
        spec = {**pums_spec(), "dataset": "other-set"}
        s = Session(pums_frame(), spec, "epsilon=1", ledger=Ledger(other, key=keyfile.read_bytes().strip()))
        s.query(QUERIES[0], epsilon=0.1)
        s.ledger.close()
        _replace_file(path, None)
        shutil.copyfile(other, path)
    else:  # pragma: no cover
        raise AssertionError(name)


GENESIS_ATTACKS = [
    "zero-byte-file",
    "empty-sqlite-db",
    "one-create-table",
    "only-the-tables",
    "tables-and-key-record",
    "emptied-in-place",
    "events-deleted-head-kept",
    "head-deleted",
    "tail-truncated",
    "head-rolled-back",
    "genesis-deleted",
    "genesis-replaced-unkeyed",
    "unkeyed-ledger-swapped-in",
    "another-keyed-ledger",
]


@pytest.mark.parametrize("attack", GENESIS_ATTACKS)
def test_a_keyed_ledger_cannot_be_reset_without_the_key(tmp_path: Path, monkeypatch, capsys, attack: str) -> None:
    """Issue 24, finding 2: every way of emptying, truncating or replacing a spent keyed ledger without the key is
    refused by a kernel holding the key (one error, the file unchanged, no fresh budget) and reported broken by
    ``dpmagic ledger verify --key-file`` (exit 1)."""
    path, keyfile, _ = _keyed_setup(tmp_path, monkeypatch, "--dataset", "pums-sample")
    early_head = _head(path)  # noted before the last query: a MAC'd head of an earlier state
    monkeypatch.setenv("DPMAGIC_LEDGER_KEY_FILE", str(keyfile))
    s = Session(pums_frame(), pums_spec(), "epsilon=1", ledger=path)
    assert s.spent == pytest.approx(0.3)
    s.query("SELECT COUNT(*) FROM pums WHERE age >= 30 AND sex = 1 AND educ = 9", epsilon=0.05)
    s.ledger.close()
    monkeypatch.delenv("DPMAGIC_LEDGER_KEY_FILE")
    capsys.readouterr()
    assert cli_main(["ledger", "verify", str(path), "--key-file", str(keyfile)]) == 0
    assert "intact" in capsys.readouterr().out
    _attack(attack, path, tmp_path, keyfile, early_head)
    before = path.read_bytes()
    key = keyfile.read_bytes().strip()
    # verify: broken, exit 1 (except a whole other valid ledger: intact, but its id and data set are not ours)
    capsys.readouterr()
    code = cli_main(["ledger", "verify", str(path), "--key-file", str(keyfile)])
    out = capsys.readouterr().out
    if attack == "another-keyed-ledger":
        assert code == 0 and "other-set" in out and "pums-sample" not in out
    else:
        assert code == 1 and not verify(path, key)[0], out
    # the kernel holding the key: one clear error, nothing written, no fresh budget
    monkeypatch.setenv("DPMAGIC_LEDGER_KEY_FILE", str(keyfile))
    with pytest.raises(ConfigurationError) as err:
        Session(pums_frame(), pums_spec(), "epsilon=1", ledger=path)
    assert str(path) in str(err.value)
    if attack != "another-keyed-ledger":  # that one is a valid ledger: only binding our data set to it is refused
        with pytest.raises(ConfigurationError):
            Ledger(path, key=key)
    assert path.read_bytes() == before
    # and the custodian's commands holding the key refuse it too
    args = ["--key", "pums-sample", "--to", "5", "--yes", "--key-file", str(keyfile)]
    assert cli_main(["ledger", "set-budget", str(path), *args]) == 2
    assert path.read_bytes() == before


def test_verify_of_an_emptied_keyed_ledger_fails_from_the_command_line(tmp_path: Path, monkeypatch) -> None:
    """The console command itself (a subprocess), on the audit's in-place reset."""
    path, keyfile, _ = _keyed_setup(tmp_path, monkeypatch)
    _attack("emptied-in-place", path, tmp_path, keyfile, "")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run(
        [sys.executable, "-m", "dpmagic.presentation.cli", "ledger", "verify", str(path), "--key-file", str(keyfile)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 1 and "genesis" in out.stdout, out.stdout + out.stderr


def test_a_keyed_ledger_begins_with_its_genesis(tmp_path: Path, monkeypatch, capsys) -> None:
    keyfile = tmp_path / "k"
    path = tmp_path / "keyed.sqlite"
    assert cli_main(["ledger", "keygen", str(keyfile)]) == 0
    capsys.readouterr()
    assert cli_main(["ledger", "init", str(path), "--key-file", str(keyfile)]) == 0
    assert "any data set" in capsys.readouterr().out
    (genesis,) = Ledger(path).events()
    assert (genesis.seq, genesis.key, genesis.kind) == (0, "ledger", "genesis")
    assert genesis.body["format"] == 2 and genesis.body["datasets"] is None and len(genesis.body["ledger"]) == 32
    assert Ledger(path).ledger_keys() == []  # the genesis is no data set's key
    assert verify(path, keyfile.read_bytes().strip()) == (True, [])
    # an unused keyed ledger is valid: a kernel with the key binds it, and its first charge is still event 2
    monkeypatch.setenv("DPMAGIC_LEDGER_KEY_FILE", str(keyfile))
    s = Session(pums_frame(), pums_spec(), "epsilon=1", ledger=path)
    assert s.query(QUERIES[0], epsilon=0.1).entry_id == 2
    # nothing appends a second genesis
    with pytest.raises(ConfigurationError, match="genesis"):
        s.ledger.append("ledger", "genesis", {})
    # a kernel holding the key starts no in-memory ledger either (a fresh budget nobody keeps) …
    with pytest.raises(ConfigurationError, match="in-memory"):
        Session(pums_frame(), pums_spec(), "epsilon=1", ledger="memory")
    with pytest.raises(ConfigurationError, match="in-memory"):
        Session(pums_frame(), pums_spec(), "epsilon=1")
    # … unless asked explicitly (create=True, as init): then it gets its genesis too
    mem = Ledger(key=keyfile.read_bytes().strip(), create=True)
    assert [e.kind for e in mem.events()] == ["genesis"] and mem.genesis is not None


def test_a_keyed_ledger_named_for_a_data_set_opens_no_other(tmp_path: Path, monkeypatch, capsys) -> None:
    path, keyfile, s = _keyed_setup(tmp_path, monkeypatch, "--dataset", "pums-sample")
    monkeypatch.setenv("DPMAGIC_LEDGER_KEY_FILE", str(keyfile))
    n = len(Ledger(path).events())
    with pytest.raises(ConfigurationError, match="pums-sample"):
        Session(pums_frame(), {**pums_spec(), "dataset": "pums-other"}, "epsilon=1", ledger=path)
    no_id = {k: v for k, v in pums_spec().items() if k != "dataset"}
    with pytest.raises(ConfigurationError, match="pums-sample"):
        Session(pums_frame(), no_id, "epsilon=1", ledger=path)
    assert len(Ledger(path).events()) == n  # nothing written
    assert Session(pums_frame(), pums_spec(), "epsilon=1", ledger=path).spent == pytest.approx(0.3)
    capsys.readouterr()
    assert cli_main(["ledger", "verify", str(path), "--key-file", str(keyfile)]) == 0
    assert "for data set(s) pums-sample" in capsys.readouterr().out
    with pytest.raises(ConfigurationError, match="keyed"):
        Ledger(tmp_path / "plain.sqlite", datasets=["x"])  # only a keyed ledger names its data sets


def test_a_running_kernel_refuses_a_ledger_that_went_backwards(tmp_path: Path, monkeypatch, capsys) -> None:
    """The tail truncated *and* the head record of that earlier moment restored is, in the file alone, a valid
    ledger of the past (a rollback, documented); a kernel that has seen the later events refuses it, and the head
    that `verify` prints differs from the one the custodian noted: ``verify --expect-head`` with it fails."""
    path, keyfile, _ = _keyed_setup(tmp_path, monkeypatch)
    monkeypatch.setenv("DPMAGIC_LEDGER_KEY_FILE", str(keyfile))
    s = Session(pums_frame(), pums_spec(), "epsilon=1", ledger=path)
    capsys.readouterr()
    assert cli_main(["ledger", "verify", str(path), "--key-file", str(keyfile)]) == 0
    noted = capsys.readouterr().out
    early_head = _head(path)
    (last_before,) = [e.seq for e in s.ledger.events()][-1:]
    earlier = noted.split("--expect-head ")[1].split(")")[0]
    s.query("SELECT COUNT(*) FROM pums WHERE age >= 30 AND sex = 1 AND educ = 9", epsilon=0.05)
    capsys.readouterr()
    assert cli_main(["ledger", "verify", str(path), "--key-file", str(keyfile)]) == 0
    later = capsys.readouterr().out.split("--expect-head ")[1].split(")")[0]
    _sql(
        path,
        f"DELETE FROM events WHERE seq > {last_before}; UPDATE meta SET value = '{early_head}' WHERE key = 'head';",
    )
    with pytest.raises(ConfigurationError, match="went backwards"):
        s.query("SELECT COUNT(*) FROM pums WHERE age < 10", epsilon=0.05)
    capsys.readouterr()
    cli_main(["ledger", "verify", str(path), "--key-file", str(keyfile)])
    assert "head: event" in noted and noted == capsys.readouterr().out  # the rollback is the earlier state …
    # … and the head the custodian noted after the last query is not in it
    assert cli_main(["ledger", "verify", str(path), "--key-file", str(keyfile), "--expect-head", later]) == 1
    assert "rollback" in capsys.readouterr().out
    assert cli_main(["ledger", "verify", str(path), "--key-file", str(keyfile), "--expect-head", earlier]) == 0
    assert cli_main(["ledger", "verify", str(path), "--expect-head", "3:abc"]) == 2  # one clear error


def _to_format1(path: Path, key: bytes) -> None:
    """A keyed ledger as dpmagic wrote it before the genesis: no seq 0, first prev 0…0, MAC'd chain and head."""
    import hmac

    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM events WHERE seq = 0")
    rows = conn.execute("SELECT seq, ledger_key, kind, created, body FROM events ORDER BY seq").fetchall()
    prev = "0" * 64
    for seq, lkey, kind, created, body in rows:
        digest = hmac.new(key, f"{prev}|{seq}|{lkey}|{kind}|{created!r}|{body}".encode(), hashlib.sha256).hexdigest()
        conn.execute("UPDATE events SET prev = ?, hash = ? WHERE seq = ?", (prev, digest, seq))
        prev = digest
    last = rows[-1][0] if rows else None
    if last is None:
        conn.execute("DELETE FROM meta WHERE key = 'head'")
    else:
        mac = hmac.new(key, f"head|{last}|{prev}".encode(), hashlib.sha256).hexdigest()
        head = json.dumps({"seq": last, "hash": prev, "mac": mac}, sort_keys=True, separators=(",", ":"))
        conn.execute("UPDATE meta SET value = ? WHERE key = 'head'", (head,))
    conn.commit()
    conn.close()


def test_a_keyed_ledger_from_before_the_genesis_is_upgraded_only_by_the_custodian(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    path, keyfile, s = _keyed_setup(tmp_path, monkeypatch)
    key = keyfile.read_bytes().strip()
    ids = [e.id for e in Ledger(path).entries(s.ledger_key)]
    _to_format1(path, key)
    # refused by the kernel and by verify, with the way out named
    monkeypatch.setenv("DPMAGIC_LEDGER_KEY_FILE", str(keyfile))
    with pytest.raises(ConfigurationError, match="dpmagic ledger upgrade"):
        Session(pums_frame(), pums_spec(), "epsilon=1", ledger=path)
    capsys.readouterr()
    assert cli_main(["ledger", "verify", str(path), "--key-file", str(keyfile)]) == 1
    assert "genesis" in capsys.readouterr().out
    # the upgrade needs the key, and checks the old chain first
    monkeypatch.delenv("DPMAGIC_LEDGER_KEY_FILE")
    assert cli_main(["ledger", "upgrade", str(path)]) == 2
    bad = tmp_path / "bad.key"
    bad.write_text("y" * 64)
    assert cli_main(["ledger", "upgrade", str(path), "--key-file", str(bad)]) == 2
    tampered = tmp_path / "tampered.sqlite"
    shutil.copyfile(path, tampered)
    _sql(tampered, "DELETE FROM events WHERE seq = (SELECT MAX(seq) FROM events);")
    assert cli_main(["ledger", "upgrade", str(tampered), "--key-file", str(keyfile)]) == 2
    emptied = tmp_path / "emptied.sqlite"
    shutil.copyfile(path, emptied)
    _sql(emptied, "DELETE FROM events; DELETE FROM meta WHERE key = 'head';")
    capsys.readouterr()
    assert cli_main(["ledger", "upgrade", str(emptied), "--key-file", str(keyfile)]) == 2
    assert "emptied" in capsys.readouterr().err
    # with the key: upgraded, verified, and the budget resumes where it was (entry ids unchanged)
    assert cli_main(["ledger", "upgrade", str(path), "--key-file", str(keyfile)]) == 0
    assert verify(path, key) == (True, [])
    assert cli_main(["ledger", "upgrade", str(path), "--key-file", str(keyfile)]) == 2  # once
    monkeypatch.setenv("DPMAGIC_LEDGER_KEY_FILE", str(keyfile))
    again = Session(pums_frame(), pums_spec(), "epsilon=1", ledger=path)
    assert again.spent == pytest.approx(0.3)
    assert [e.id for e in again.accountant.entries()] == ids


# ---------------------------------------------------------------------------------------------------------------
# audit issue 24, finding 4 (the ledger's part): nothing recorded after a data read carries a clock

_TIME_LIKE = {"time", "times", "seconds", "elapsed", "duration", "created", "released_at", "timestamp", "at"}


def _keys(obj: Any) -> set[str]:
    if isinstance(obj, dict):
        return set(obj) | {k for v in obj.values() for k in _keys(v)}
    if isinstance(obj, list):
        return {k for v in obj for k in _keys(v)}
    return set()


def test_no_event_recorded_after_a_read_carries_a_clock(tmp_path: Path, monkeypatch, capsys) -> None:
    """The release time minus the charge time timed the data read (600,000 rows in a MEDIAN's box against none,
    6 of 6).  With a clock that moves at every reading, every event written after a charge — the release of a
    query, of a MEDIAN, of a batch, the later phases of a decision query charged after the earlier ones read —
    carries the time of the charge taken before the first read; bodies hold no time, ``show`` prints none and
    ``export`` prints only the charges' times."""
    import itertools
    import re
    import time as time_mod

    from dpmagic.presentation.reports import export_ledger

    ticks = itertools.count()
    monkeypatch.setattr(time_mod, "time", lambda: 1_700_000_000.0 + next(ticks))
    path = tmp_path / "l.sqlite"
    s = Session(pums_frame(), pums_spec(), "epsilon=5", ledger=path)
    s.query("SELECT COUNT(*), SUM(income) FROM pums WHERE age < 30", epsilon=0.5)
    s.query("SELECT MEDIAN(income) FROM pums WHERE age >= 30", epsilon=0.5)
    s.batch("SELECT COUNT(*) FROM pums WHERE age < 40; SELECT COUNT(*) FROM pums WHERE age >= 40", epsilon=0.5)
    groups = {"g": {"type": "categorical", "values": ["A", "B"]}, "x": {"type": "int", "lower": 0, "upper": 10}}
    frame = pd.DataFrame({"g": ["A"] * 1000 + ["B"] * 10, "x": [9] * 1010})
    d = Session(frame, {"dataset": "decision-toy", "table": "t", "columns": groups}, "epsilon=5", ledger=path)
    ans = d.decide(
        "SELECT g, COUNT(*) FROM t GROUP BY g HAVING COUNT(*) > 500 AND SUM(x) > 4000",
        fnr=1e-12,
        fpr=0.1,
        max_group_size=1000,
    )
    assert len(ans.reads) >= 2  # phase two is charged after phase one read the data
    s.ledger.close()
    d.ledger.close()
    events = Ledger(path).events()
    charges = {e.seq: e for e in events if e.kind == "charge"}
    releases = [e for e in events if e.kind == "release"]
    assert len(releases) == len(charges) == 3 + len(ans.reads)
    for r in releases:
        assert r.created == charges[r.body["entry"]].created, "a release carries a clock read after the data read"
    decision = [e for e in charges.values() if "decision" in e.body["details"]]
    assert len(decision) == len(ans.reads) and len({e.created for e in decision}) == 1
    assert not _keys([e.body for e in events]) & _TIME_LIKE
    rows = json.loads(export_ledger(Ledger(path), "json"))
    assert len(rows) == len(charges)
    for row in rows:
        assert row["time"] == time_mod.strftime("%Y-%m-%d %H:%M:%S", time_mod.gmtime(charges[row["id"]].created))
        assert not set(row) & (_TIME_LIKE - {"time"})
    capsys.readouterr()
    assert cli_main(["ledger", "show", str(path)]) == 0
    assert not re.search(r"\d:\d\d|\b1700000", capsys.readouterr().out)
