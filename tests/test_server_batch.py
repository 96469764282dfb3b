"""Batches against a live ``dpmagic serve`` (issue 31): estimates kept on the server per analyst (``%%dpbatch
--keep NAME``, then ``%dpbatch --from NAME ...``) answered for free, only to their owner; and a batch's dry run
that predicts a refusal by the analyst's quota.  A real IPython shell and plain HTTP against a real server
process on 127.0.0.1.  No statistical assertions."""

from __future__ import annotations

import re
from typing import Any

import pandas as pd
import pytest
from IPython.core.interactiveshell import InteractiveShell
from server_support import DATA, TOKENS, Server, write_config
from tests_support import run_cell as run

import dpmagic
from dpmagic.batch.estimate import DerivedAnswer
from dpmagic.presentation.magics import current_session


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    srv = Server(write_config(tmp_path_factory.mktemp("srv")))  # global ε = 1, quotas 0.6 (carol 0.25)
    yield srv
    srv.stop()


def ledgers(server: Server, who: str) -> tuple[Any, ...]:
    """Everything a charge would change: the global audit (entries, spent) and the analyst's own budget."""
    audit = server.audit()
    with server.client(who) as c:
        quota = c.get("/v1/datasets/pums/budget").json()["quota"]
    return len(audit["entries"]), audit["spent"], quota["spent"], quota["queries"]


def bind(ip: InteractiveShell, server: Server, who: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPMAGIC_TOKEN", TOKENS[who])
    result, cap = run(ip, f"%dpsession --server {server.url} --dataset pums --panel none")
    assert result.success, cap.stderr


def shape(text: str) -> str:
    """A follow-up's text with its numbers (noisy values, entry ids) blanked: what local and remote share."""
    return re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "N", text)


def test_kept_estimate_follow_ups_are_free_and_read_as_locally(
    ip: InteractiveShell, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    bind(ip, server, "alice", monkeypatch)
    result, cap = run(ip, "%%dpbatch --keep ages --epsilon 0.1\nall_range(age)\nWHERE sex = 1\n")
    assert result.success, (cap.stderr, result.error_in_exec)
    said = repr(result.result)
    assert "kept as 'ages'" in said and "%dpbatch --from ages range LO HI" in said
    before = ledgers(server, "alice")
    answers = {}
    for line in ("range 20 40", "prefix 65", "point 30"):
        result, cap = run(ip, f"%dpbatch --from ages {line}")
        assert result.success, (line, cap.stderr, result.error_in_exec)
        assert isinstance(result.result, DerivedAnswer) and "no further charge" in repr(result.result)
        answers[line] = result.result
    result, cap = run(ip, "%dpbatch part << --from ages range 20 40")  # assigned as locally
    assert result.success and list(ip.user_ns["part"].columns) == ["query", "count", "count_ci_low", "count_ci_high"]
    est = current_session().estimate("ages")
    assert "101 cells over age" in repr(est)
    q = est.query([1.0] * 101)  # every cell: the batch's region total
    assert q.ci_low <= q.count <= q.ci_high
    many = est.ranges([(0, 10), (20, 40)])
    assert list(many["query"]) == ["age BETWEEN 0 AND 10", "age BETWEEN 20 AND 40"]
    assert many["count"].iloc[1] == pytest.approx(answers["range 20 40"].count)  # one estimate: consistent
    assert ledgers(server, "alice") == before  # nothing charged, globally or to the quota
    # the custodian's audit export lists the free follow-ups (not as ledger entries)
    followups = server.audit()["followups"]
    assert [f["analyst"] for f in followups] == ["alice"] * len(followups) and len(followups) >= 5
    assert {f["estimate"] for f in followups} == {"ages"} and followups[0]["request"]["kind"] == "range"
    # the same lines on a local session over the same data: the same text, up to the noisy numbers
    local = dpmagic.Session(pd.read_csv(DATA / "pums.csv"), DATA / "pums.schema.json", "epsilon=1.0")
    local.batch("all_range(age)", where="sex = 1", epsilon=0.1, keep="ages")
    e = local.estimate("ages")
    mine = {"range 20 40": e.range(20, 40), "prefix 65": e.prefix(65), "point 30": e.point(30)}
    for line, ans in answers.items():
        assert shape(repr(ans)) == shape(repr(mine[line])), line
        assert ans.variance == pytest.approx(mine[line].variance, rel=1e-9)  # same strategy, same cost


def test_kept_estimates_are_their_owners_only(
    ip: InteractiveShell, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    with server.client("carol") as c:
        body = {"workload": "identity(race)", "epsilon": 0.05, "keep": "races"}
        assert c.post("/v1/datasets/pums/query", json=body, headers={"Idempotency-Key": "k1"}).status_code == 200
        assert c.get("/v1/datasets/pums/estimates/races").status_code == 200
    bob_before = ledgers(server, "bob")
    with server.client("bob") as b:
        for r in (
            b.get("/v1/datasets/pums/estimates/races"),
            b.post("/v1/datasets/pums/estimates/races", json={"kind": "point", "args": [1]}),
        ):
            assert r.status_code == 400
            err = r.json()["error"]
            assert err["message"] == "no batch estimate named 'races' in this session"
            assert "races" not in (err["hint"] or "")  # carol's names are never listed to bob
        # bob's own namespace: he may keep the same name; it is his estimate, not carol's
        body = {"workload": "identity(race)", "epsilon": 0.05, "keep": "races"}
        assert b.post("/v1/datasets/pums/query", json=body).status_code == 200
        theirs = b.post("/v1/datasets/pums/estimates/races", json={"kind": "point", "args": [1]}).json()
    with server.client("carol") as c:
        hers = c.post("/v1/datasets/pums/estimates/races", json={"kind": "point", "args": [1]}).json()
    assert "ledger entry" in hers["source"] and hers["source"] != theirs["source"]  # two batches, two entries
    assert ledgers(server, "bob")[2] == pytest.approx(bob_before[2] + 0.05)  # his own batch only
    import httpx

    assert httpx.get(f"{server.url}/v1/datasets/pums/estimates/races").status_code == 401
    # through the magics: bob's wrong name is one clear error naming only his own kept estimate
    bind(ip, server, "bob", monkeypatch)
    result, _ = run(ip, "%dpbatch --from ages range 1 2")
    msg = str(result.error_in_exec)
    assert not result.success and "no batch estimate named 'ages' in this session" in msg and "kept: races" in msg
    before = ledgers(server, "bob")
    result, _ = run(ip, "%%dpbatch --keep races --epsilon 0.05\nidentity(race)\n")  # a name he kept: refused
    assert not result.success and "already kept" in str(result.error_in_exec)
    result, _ = run(ip, "%dpbatch --from races range 1 2")  # a categorical column has no ranges: one error
    assert not result.success and "categorical" in str(result.error_in_exec)
    result, _ = run(ip, "%%dpbatch --keep 'not a name' --epsilon 0.05\nidentity(race)\n")
    assert not result.success and "identifier" in str(result.error_in_exec)
    assert ledgers(server, "bob") == before  # refused follow-ups and batches charged nothing


def test_kept_estimate_outlives_a_restart(tmp_path: Any) -> None:
    cfg = write_config(tmp_path)
    srv = Server(cfg)
    try:
        with srv.client("alice") as c:
            body = {"workload": "prefix(age)", "epsilon": 0.1, "keep": "cdf"}
            assert c.post("/v1/datasets/pums/query", json=body).status_code == 200
            first = c.post("/v1/datasets/pums/estimates/cdf", json={"kind": "prefix", "args": [50]}).json()
    finally:
        srv.stop()
    srv = Server(cfg)
    try:
        with srv.client("alice") as c:
            again = c.post("/v1/datasets/pums/estimates/cdf", json={"kind": "prefix", "args": [50]}).json()
            bad = c.post("/v1/datasets/pums/estimates/cdf", json={"kind": "median", "args": []})
        assert again == first  # the same released estimate: the same answer, nothing drawn anew
        assert bad.status_code == 400 and "kind is one of" in bad.json()["error"]["message"]
    finally:
        srv.stop()


def test_batch_dry_run_predicts_a_refusal_by_the_quota(
    ip: InteractiveShell, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """carol's quota is 0.25 (the global budget 1): a batch dry run at 0.3 says her quota would refuse it, as the
    run then does; --epsilon max is what both admit; a dry run over the global budget says so too."""
    bind(ip, server, "carol", monkeypatch)
    before = ledgers(server, "carol")
    cell = "identity(sex)\nWHERE educ = 12\n"
    result, cap = run(ip, f"%%dpbatch --dry-run --epsilon 0.3\n{cell}")
    assert result.success, (cap.stderr, result.error_in_exec)
    said = repr(result.result)
    assert "would be REFUSED by your quota" in said and "above your quota epsilon=0.25" in said
    assert not result.result.admissible
    result, _ = run(ip, f"%%dpbatch --epsilon 0.3\n{cell}")  # the run: refused as the dry run said
    assert not result.success and "refused by your quota" in str(result.error_in_exec)
    spent = ledgers(server, "carol")[2]
    result, cap = run(ip, f"%%dpbatch --dry-run --epsilon max\n{cell}")
    assert result.success and result.result.admissible
    assert result.result.cost == pytest.approx(0.25 - spent)  # her quota caps max, not the global budget
    result, _ = run(ip, f"%%dpbatch --dry-run --epsilon 0.1\n{cell}")
    assert result.success and result.result.admissible and "would be charged" in repr(result.result)
    assert ledgers(server, "carol") == before  # dry runs and the refusal charged nothing
    with server.client("admin") as adm:  # a quota above the global budget: the global budget refuses
        assert adm.post("/v1/admin/analysts", json={"id": "gina", "quotas": {"pums": 50}}).status_code == 200
        token = adm.post("/v1/admin/analysts/gina/rotate").json()["token"]
    with server.client(token) as g:
        body = {"workload": "identity(sex)", "where": "educ = 12", "epsilon": 5, "dry_run": True}
        out = g.post("/v1/datasets/pums/query", json=body).json()
    assert out["admissible"] is False and "above the budget" in out["text"] and "quota" not in out["text"]
