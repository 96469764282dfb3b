"""``dpmagic serve`` (issue 31): the real server in a subprocess on 127.0.0.1, driven over plain HTTP.

Budgets, tokens, idempotency, concurrency and bad payloads; the faults (a server killed after the charge) are in
``test_server_faults.py`` and the magics against a live server in ``test_server_magics.py``.  Statistical
statements: none (every assertion is on charges, status codes and shapes, exact by construction).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from server_support import Server, write_config

from dpmagic.errors import ConfigurationError
from dpmagic.presentation.server.app import padded
from dpmagic.presentation.server.config import hash_token, load_config, token_matches

SQL = "SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex"


@pytest.fixture
def server(tmp_path: Path):
    srv = Server(write_config(tmp_path))
    yield srv
    srv.stop()


def ask(c, sql: str = SQL, key: str | None = None, **options):
    headers = {"Idempotency-Key": key} if key else {}
    return c.post("/v1/datasets/pums/query", json={"sql": sql, **options}, headers=headers)


def test_query_schema_budget_and_own_ledger(server: Server) -> None:
    with server.client("alice") as a:
        schema = a.get("/v1/datasets/pums/schema").json()
        assert schema["schema"]["table"] == "pums" and schema["parameter"] == "epsilon"
        r = ask(a, epsilon=0.25)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["columns"][:2] == ["sex", "n"] and [row[0] for row in body["data"]] == [0, 1]
        assert "n_ci_low" in body["columns"]  # every released value carries its interval
        b = a.get("/v1/datasets/pums/budget").json()
        assert b["quota"]["spent"] == pytest.approx(0.25) and b["global"]["spent"] == pytest.approx(0.25)
        dry = ask(a, "SELECT COUNT(*) FROM pums WHERE age < 30", epsilon=0.3, dry_run=True).json()
        assert dry["kind"] == "preview" and dry["admissible"] and "Nothing was spent" in dry["text"]
        over = ask(a, "SELECT COUNT(*) FROM pums WHERE age < 30", epsilon=0.5, dry_run=True).json()
        assert not over["admissible"]  # 0.25 + 0.5 is over alice's quota 0.6 (not the global budget 1.0)
        mx = ask(a, "SELECT COUNT(*) FROM pums WHERE age < 30", epsilon="max")
        assert mx.json()["cost"] == pytest.approx(0.35)  # the quota caps max: 0.6 - 0.25, not 1.0 - 0.25
        ci = ask(a, "SELECT COUNT(*) FROM pums WHERE age >= 60", ci=200.0)
        assert ci.status_code == 200, ci.text
        assert ci.json()["cost"] < 0.35
        mine = a.get("/v1/datasets/pums/ledger").json()["entries"]
        assert [e["sql"] for e in mine][0] == SQL and all(e["released"] for e in mine)
    with server.client("bob") as b:
        assert b.get("/v1/datasets/pums/ledger").json()["entries"] == []  # never alice's entries
        assert b.get("/v1/admin/datasets/pums/audit").status_code == 401  # not the custodian
    assert [e["analyst"] for e in server.audit()["entries"]] == ["alice"] * 3


def test_rerun_is_free_and_per_analyst(server: Server) -> None:
    with server.client("alice") as a, server.client("bob") as b:
        first = ask(a, epsilon=0.25).json()
        again = ask(a, epsilon=0.25).json()
        assert again["cached"] and again["data"] == first["data"]
        dry = ask(b, epsilon=0.25, dry_run=True).json()
        assert "already answered" not in dry["text"]  # alice's answer is not bob's (nor is it revealed)
        other = ask(b, epsilon=0.25).json()
        assert not other["cached"]
    assert len(server.audit()["entries"]) == 2


def test_wrong_and_revoked_tokens(server: Server) -> None:
    with server.client("nobody") as x:
        assert ask(x, epsilon=0.1).status_code == 401
        assert x.get("/v1/datasets/pums/schema").status_code == 401
    with server.client("admin") as adm:
        assert adm.post("/v1/admin/analysts/bob/revoke").status_code == 200
        new = adm.post("/v1/admin/analysts/alice/rotate").json()["token"]
        made = adm.post("/v1/admin/analysts", json={"id": "dave", "quotas": {"pums": 0.1}}).json()
        assert adm.post("/v1/admin/analysts", json={"id": "dave"}).status_code == 400
        listed = {a["id"]: a for a in adm.get("/v1/admin/analysts").json()["analysts"]}
        assert listed["bob"]["revoked"] and not listed["alice"]["revoked"]
        assert all("token" not in a and "hash" not in json.dumps(a) for a in listed.values())
    with server.client("bob") as b, server.client("alice") as old:
        assert ask(b, epsilon=0.1).status_code == 401
        assert ask(old, epsilon=0.1).status_code == 401  # the rotated-out token
    with server.client(new) as a, server.client(made["token"]) as d:
        assert ask(a, epsilon=0.1).status_code == 200
        refused = ask(d, epsilon=0.2)
        assert refused.status_code == 409 and "your quota" in refused.json()["error"]["message"]
    assert len(server.audit()["entries"]) == 1
    state = (server.log.parent / "state" / "server.sqlite").read_bytes()
    assert b"alice-token" not in state and made["token"].encode() not in state  # hashed at rest


def test_colluding_analysts_cannot_exceed_the_global_budget(server: Server) -> None:
    """Global ε=1, quotas 0.6: alice spends 0.6 on age < 50; bob's 0.6 on the overlapping age < 70 fits his
    quota but would put the rows 0–49 at 1.2 > 1: refused, nothing charged.  On the disjoint age ≥ 50 it is
    admitted (parallel composition); splitting further overlapping queries between them never passes 1."""
    with server.client("alice") as a, server.client("bob") as b, server.client("carol") as c:
        assert ask(a, "SELECT COUNT(*) FROM pums WHERE age < 50", epsilon=0.6).status_code == 200
        r = ask(b, "SELECT COUNT(*) FROM pums WHERE age < 70", epsilon=0.6)
        assert r.status_code == 409 and r.json()["error"]["type"] == "BudgetExceededError"
        assert b.get("/v1/datasets/pums/budget").json()["quota"]["spent"] == 0
        assert ask(b, "SELECT COUNT(*) FROM pums WHERE age >= 50", epsilon=0.6).status_code == 200
        statuses = [
            ask(who, f"SELECT COUNT(*) FROM pums WHERE age BETWEEN {lo} AND {lo + 30}", epsilon=0.25).status_code
            for who, lo in ((a, 20), (c, 30), (b, 40), (c, 10))
        ]
        assert 409 in statuses
    audit = server.audit()
    assert audit["spent"] <= 1.0 + 1e-12
    assert {e["analyst"] for e in audit["entries"]} <= {"alice", "bob", "carol"}


def test_replayed_idempotency_key_charges_once(server: Server) -> None:
    with server.client("alice") as a:
        first = ask(a, key="k-1", epsilon=0.25)
        second = ask(a, key="k-1", epsilon=0.25)
        assert first.status_code == second.status_code == 200
        assert first.json() == second.json()
        assert ask(a, key="k-1", epsilon=0.5).status_code == 422  # same key, another request
        assert ask(a, key="k-2", fresh=True, epsilon=0.25).status_code == 200
    with server.client("bob") as b:  # keys are per analyst: bob's k-1 is his own request
        assert ask(b, key="k-1", epsilon=0.25).status_code == 200
    entries = server.audit()["entries"]
    assert [e["analyst"] for e in entries] == ["alice", "alice", "bob"]


def test_concurrent_requests_never_overspend(server: Server) -> None:
    """16 concurrent requests of ε=0.125 on one region by carol (quota 0.25): exactly two are admitted; 8 more
    with ONE idempotency key by alice: charged once."""
    codes: list[int] = []
    lock = threading.Lock()

    def one(who: str, key: str | None) -> None:
        with server.client(who) as c:
            r = ask(c, "SELECT COUNT(*) FROM pums WHERE age < 40", key=key, fresh=True, epsilon=0.125)
        with lock:
            codes.append(r.status_code)

    threads = [threading.Thread(target=one, args=("carol", None)) for _ in range(16)]
    threads += [threading.Thread(target=one, args=("alice", "same")) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entries = server.audit()["entries"]
    assert sum(e["analyst"] == "carol" for e in entries) == 2
    assert sum(e["analyst"] == "alice" for e in entries) == 1
    assert set(codes) <= {200, 409}
    assert server.audit()["spent"] <= 1.0


def test_oversized_and_malformed_payloads_change_nothing(server: Server) -> None:
    with server.client("alice") as a:
        big = a.post("/v1/datasets/pums/query", content=b'{"sql": "' + b"x" * 20000 + b'"}')
        assert big.status_code == 413
        chunked = a.post("/v1/datasets/pums/query", content=iter([b'{"sql": "', b"x" * 20000, b'"}']))
        assert chunked.status_code == 413  # no Content-Length: counted as it streams
        cases = [
            (b'{"sql": ', "not valid JSON"),
            (b"[1, 2]", "JSON object"),
            (b'{"sql": "SELECT COUNT(*) FROM pums", "epsilon": true}', "'epsilon'"),
            (b'{"sql": "SELECT COUNT(*) FROM pums", "bogus": 1}', "bogus"),
            (b'{"sql": 3}', "'sql'"),
            (b'{"sql": "SELECT * FROM pums"}', ""),
            (b'{"sql": "SELECT COUNT(*) FROM pums", "epsilon": -1}', "epsilon"),
            (b'{"sql": "SELECT COUNT(*) FROM other", "epsilon": 0.1}', ""),
        ]
        for raw, fragment in cases:
            r = a.post("/v1/datasets/pums/query", content=raw, headers={"content-type": "application/json"})
            assert r.status_code == 400, (raw, r.text)
            assert fragment in r.json()["error"]["message"], (raw, r.text)
        assert a.get("/v1/datasets/nope/schema").status_code == 404
        assert a.post("/v1/datasets/pums/afford", json=[1]).status_code == 400
        assert a.post("/v1/datasets/pums/afford", content=b"{").status_code == 400
    assert server.audit()["entries"] == []


def test_rate_limit(tmp_path: Path) -> None:
    srv = Server(write_config(tmp_path, rate=3))
    try:
        with srv.client("alice") as a:
            codes = [a.get("/v1/datasets/pums/budget").status_code for _ in range(6)]
        assert codes[:3] == [200, 200, 200] and 429 in codes[3:]
        with srv.client("bob") as b:  # per analyst
            assert b.get("/v1/datasets/pums/budget").status_code == 200
    finally:
        srv.stop()


def test_error_after_the_read_is_one_fixed_body(tmp_path: Path) -> None:
    """The read raises an exception whose text holds "row data": the analyst gets the fixed body only, the
    query stays charged, nothing is released, and the ledger verifies."""
    from dpmagic.presentation.server.state import AFTER_READ

    srv = Server(write_config(tmp_path), env={"DPMAGIC_SERVER_TEST_CRASH": "raise-after-charge"})
    try:
        with srv.client("alice") as a:
            r = ask(a, key="x", epsilon=0.25)
            assert r.status_code == 500 and r.json() == AFTER_READ
            assert "12345" not in r.text
            assert ask(a, key="x", epsilon=0.25).json() == AFTER_READ  # the retry: the same, no second charge
        entries = srv.audit()["entries"]
        assert len(entries) == 1 and not entries[0]["released"]
        with srv.client("admin") as adm:
            assert adm.get("/v1/admin/ledger/verify").json()["ok"]
    finally:
        srv.stop()


def test_config_errors_name_the_problem(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    assert set(load_config(cfg).analysts) == {"alice", "bob", "carol"}
    assert token_matches("alice-token", hash_token("alice-token")) and not token_matches("x", hash_token("y"))
    text = cfg.read_text()
    for bad, fragment in [
        (text.replace('backend = "pandas"', 'backend = "oracle"'), "backend"),
        (text.replace(hash_token("alice-token"), "plain-token"), "token_hash"),
        (text.replace("analyst_quota = 0.6", "analyst_quota = -1"), "analyst_quota"),
        (text + '\n[[analysts]]\nid = "alice"\ntoken_hash = "' + hash_token("z") + '"\n', "twice"),
        ("[server\n", "TOML"),
    ]:
        cfg.write_text(bad)
        with pytest.raises(ConfigurationError, match=fragment):
            load_config(cfg)


def test_admin_budgets_are_recorded_and_survive_a_restart(tmp_path: Path) -> None:
    """The custodian raises the global budget and lowers a quota: recorded in the ledger, in force at once and
    after a restart (the configuration only seeds the first binding)."""
    cfg = write_config(tmp_path, budget="epsilon=0.5")
    srv = Server(cfg)
    try:
        with srv.client("alice") as a, srv.client("admin") as adm:
            assert ask(a, epsilon=0.5).status_code == 200
            assert ask(a, "SELECT COUNT(*) FROM pums", epsilon=0.1).status_code == 409  # global 0.5 spent
            assert adm.post("/v1/admin/datasets/pums/budget", json={"total": 2.0}).status_code == 200
            assert adm.post("/v1/admin/datasets/pums/budget", json={"analyst": "bob", "total": 0.1}).status_code == 200
            assert adm.post("/v1/admin/datasets/pums/budget", json={"total": -1}).status_code == 400
            assert adm.post("/v1/admin/datasets/pums/budget", json={"analyst": "zed", "total": 1}).status_code == 404
            assert ask(a, "SELECT COUNT(*) FROM pums", epsilon=0.1).status_code == 200
    finally:
        srv.stop()
    srv = Server(cfg)
    try:
        with srv.client("bob") as b:
            budget = b.get("/v1/datasets/pums/budget").json()
            assert budget["global"]["budget"] == 2.0 and budget["quota"]["budget"] == 0.1
            assert ask(b, epsilon=0.2).status_code == 409
    finally:
        srv.stop()


@given(st.floats(min_value=0.0, max_value=100.0), st.sampled_from([0.05, 0.25, 1.0]))
def test_padded_time_is_a_multiple_of_the_floor_not_below_the_work(elapsed: float, floor: float) -> None:
    """The padded response time depends on the work's duration only through ceil(elapsed / floor): at least the
    work, a whole multiple of the floor, and the floor itself for any work within it."""
    t = padded(elapsed, floor)
    k = round(t / floor)
    assert k >= 1 and t == pytest.approx(k * floor, rel=1e-12)  # a whole multiple of the floor
    assert t >= elapsed * (1 - 1e-12)  # never before the work is done
    assert k == 1 or (k - 1) * floor < elapsed * (1 + 1e-12)  # the first multiple that is
    if elapsed <= floor:
        assert t == floor


def test_duckdb_backend(tmp_path: Path) -> None:
    """A data set read in place through DuckDB (the CSV is never loaded into the server's memory)."""
    cfg = write_config(tmp_path)
    cfg.write_text(cfg.read_text().replace('backend = "pandas"', 'backend = "duckdb"'))
    srv = Server(cfg)
    try:
        with srv.client("alice") as a:
            r = ask(a, epsilon=0.25)
            assert r.status_code == 200, r.text
            assert [row[0] for row in r.json()["data"]] == [0, 1]
    finally:
        srv.stop()


def test_cli_serve_help_hash_token_and_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dpmagic.presentation.cli import main

    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert "--config" in capsys.readouterr().out
    assert main(["serve", "hash-token"]) == 0
    out = capsys.readouterr().out
    token = out.split("it is not stored): ")[1].split()[0]
    assert f'token_hash = "{hash_token(token)}"' in out
    assert main(["serve", "--config", str(tmp_path / "missing.toml")]) == 2
    assert "no configuration file" in capsys.readouterr().err
    assert main(["serve"]) == 2


def test_decision_query_over_http_is_charged_once_and_replayed(server: Server) -> None:
    """A decision query (fnr) through plain HTTP: both ledgers charged before the reads, the same Idempotency-Key
    returns the stored answer with no second charge; its options are checked before anything is charged."""
    body = {"sql": "SELECT race FROM pums GROUP BY race HAVING COUNT(*) > 50", "fnr": 0.05, "fpr": 0.2}
    body |= {"max_group_size": 2000}
    with server.client("alice") as c:
        before = len(server.audit()["entries"])
        r = c.post("/v1/datasets/pums/query", json=body, headers={"Idempotency-Key": "decide-1"})
        assert r.status_code == 200, r.text
        answer = r.json()["answer"]
        # Phase Two may be denied (its noise can leave groups uncertain at the budget): random, both are answers
        assert answer["cost"] > 0 and (answer["denied"] or isinstance(answer["groups"], list))
        charged = server.audit()["entries"][before:]
        assert charged and all(e["analyst"] == "alice" for e in charged)
        quota = c.get("/v1/datasets/pums/budget").json()["quota"]
        again = c.post("/v1/datasets/pums/query", json=body, headers={"Idempotency-Key": "decide-1"})
        assert again.status_code == 200 and again.json() == r.json()
        assert len(server.audit()["entries"]) == before + len(charged)
        assert c.get("/v1/datasets/pums/budget").json()["quota"] == quota
        bad = c.post("/v1/datasets/pums/query", json={**body, "fnr": "x"})
        assert bad.status_code == 400 and "'fnr' must be a number" in bad.text
        stray = c.post("/v1/datasets/pums/query", json={"sql": body["sql"], "fpr": 0.1, "epsilon": 0.1})
        assert stray.status_code == 400 and "give 'fnr'" in stray.text
    assert len(server.audit()["entries"]) == before + len(charged)


def test_batch_over_http_is_charged_once_and_replayed(server: Server) -> None:
    """A batch through plain HTTP: one charge before the read, the same Idempotency-Key returns the stored answer
    with no second charge; a field that belongs to a query is refused before anything is charged."""
    body = {"workload": "identity(sex)", "where": "age < 40", "epsilon": 0.1}
    with server.client("alice") as c:
        before = len(server.audit()["entries"])
        r = c.post("/v1/datasets/pums/query", json=body, headers={"Idempotency-Key": "batch-1"})
        assert r.status_code == 200, r.text
        assert r.json()["kind"] == "batch" and len(r.json()["data"]) == 2
        again = c.post("/v1/datasets/pums/query", json=body, headers={"Idempotency-Key": "batch-1"})
        assert again.status_code == 200 and again.json() == r.json()
        assert len(server.audit()["entries"]) == before + 1
        bad = c.post("/v1/datasets/pums/query", json={**body, "ci": 5})
        assert bad.status_code == 400 and "do not apply to a batch" in bad.text
        dry = c.post("/v1/datasets/pums/query", json={**body, "dry_run": True})
        assert dry.status_code == 200 and dry.json()["kind"] == "batch-preview"
    assert len(server.audit()["entries"]) == before + 1
