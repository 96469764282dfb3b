"""Audit issue 10, items 5, 6, 7 and 10: data-set identity, no row fingerprint, keyed chain, no WAL-only charges."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import dpmagic
from dpmagic import Session
from dpmagic.accountant.ledger import Ledger, verify
from dpmagic.domain.schema import Schema
from dpmagic.errors import ConfigurationError
from dpmagic.presentation.cli import main as cli_main

DATA = Path(dpmagic.__file__).resolve().parent / "data"
QUERIES = ["SELECT COUNT(*) FROM pums WHERE age < 30", "SELECT COUNT(*) FROM pums WHERE age >= 30 AND sex = 1"]


def pums_frame() -> pd.DataFrame:
    return pd.read_csv(DATA / "pums.csv")


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


def _keyed_setup(tmp_path: Path, monkeypatch) -> tuple[Path, Path, Session]:
    keyfile = tmp_path / "custodian.key"
    path = tmp_path / "keyed.sqlite"
    assert cli_main(["ledger", "keygen", str(keyfile)]) == 0
    assert cli_main(["ledger", "init", str(path), "--key-file", str(keyfile)]) == 0
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
