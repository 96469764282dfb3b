"""The magics against a live ``dpmagic serve`` (issue 31), in a real IPython shell; and the SQL corpus answered
remotely with the same released shapes and the same charges as locally.  No statistical assertions."""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from server_support import DATA, TOKENS, Server, write_config
from sql_corpus import PUMS
from tests_support import run_cell as run

import dpmagic
from dpmagic.errors import DPMagicError
from dpmagic.presentation.magics import current_session
from dpmagic.presentation.remote import RemoteSession


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    srv = Server(write_config(tmp_path_factory.mktemp("srv"), budget="epsilon=1000.0", quota=500.0))
    yield srv
    srv.stop()


@pytest.fixture
def remote(ip: InteractiveShell, server: Server, monkeypatch: pytest.MonkeyPatch) -> InteractiveShell:
    monkeypatch.setenv("DPMAGIC_TOKEN", TOKENS["alice"])
    result, cap = run(ip, f"%dpsession --server {server.url} --dataset pums")
    assert result.success, cap.stderr
    assert "your quota" in cap.stdout and "pums" in cap.stdout
    return ip


def test_dpquery_and_dpbudget_through_the_server(remote: InteractiveShell, server: Server) -> None:
    cell = "%%dpquery by_sex << --epsilon 0.1\nSELECT sex, COUNT(*) AS n FROM pums GROUP BY sex\n"
    result, cap = run(remote, cell)
    assert result.success, cap.stderr
    df = remote.user_ns["by_sex"]
    assert list(df.columns[:2]) == ["sex", "n"] and list(df["sex"]) == [0, 1]
    before = len(server.audit()["entries"])
    result, cap = run(remote, cell)  # an identical cell: the stored answer, charged nothing
    assert result.success and remote.user_ns["by_sex"].equals(df)
    assert len(server.audit()["entries"]) == before
    result, _ = run(remote, "%%dpquery --dry-run --epsilon 0.2\nSELECT COUNT(*) FROM pums WHERE age < 30\n")
    assert result.success and "dry run" in repr(result.result) and len(server.audit()["entries"]) == before
    result, _ = run(remote, "%%dpquery --ci 50 --nonneg --integer\nSELECT educ, COUNT(*) FROM pums GROUP BY educ\n")
    assert result.success and len(result.result.df) == 16
    region = "SELECT COUNT(*) FROM pums WHERE income > 400000"
    result, _ = run(remote, f'%dpbudget --afford "{region}"')
    assert result.success and 0 < result.result < 500.0 - 0.1
    left = result.result
    result, _ = run(remote, f"%%dpquery --epsilon max\n{region}\n")
    assert result.success and result.result.cost == pytest.approx(left, rel=1e-9)  # what --afford said
    result, _ = run(remote, f'%dpbudget --afford "{region}"')
    assert result.success and result.result == pytest.approx(0.0, abs=1e-9)
    result, cap = run(remote, "%dpbudget")
    assert result.success and "your quota" in repr(result.result) and "global budget" in repr(result.result)
    result, _ = run(remote, "%dpquery --epsilon 0.1 SELECT AVG(age) FROM pums WHERE income < 100000")  # the line form
    assert result.success and "avg_age" in result.result.df.columns


def test_refusals_are_one_line(remote: InteractiveShell) -> None:
    result, cap = run(remote, "%%dpquery --epsilon 600\nSELECT COUNT(*) FROM pums\n")
    assert not result.success and "BudgetExceededError: refused by your quota" in cap.stderr + str(result.error_in_exec)
    result, cap = run(remote, "%%dpquery --epsilon 1\nSELECT * FROM pums\n")
    assert not result.success


def test_plots_and_budget_map_from_your_own_charges(
    ip: InteractiveShell, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """%dpplot and %dpbudget --map on a server session draw your own charges (replayed on your side from their
    regions and costs): the replay's bound is your quota's on the server; nothing is charged by drawing."""
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.setenv("DPMAGIC_TOKEN", TOKENS["carol"])  # carol: quota 0.25, untouched by the other tests
    result, cap = run(ip, f"%dpsession --server {server.url} --dataset pums")
    assert result.success, cap.stderr
    remote = ip
    for sql in (
        "SELECT COUNT(*) FROM pums WHERE sex = 1 AND age < 40",
        "SELECT COUNT(*) FROM pums WHERE sex = 0",
        "SELECT COUNT(*) FROM pums WHERE age < 30",
    ):
        result, cap = run(remote, f"%%dpquery --epsilon 0.05\n{sql}\n")
        assert result.success, cap.stderr
    session = current_session()
    own = session.own_accounting()
    quota = session.budget().summary()
    assert own.spent == pytest.approx(quota["spent"], rel=1e-12) and len(own.accountant) == quota["queries"]
    before = len(server.audit()["entries"])
    result, _ = run(remote, "%dpbudget --map sex educ")
    assert result.success and result.result.shape == (2, 16)
    assert result.result.to_numpy().max() <= own.spent + 1e-12
    for what in ("budget", "graph", "map sex age"):
        result, cap = run(remote, f"%dpplot {what}")
        assert result.success, (what, cap.stderr, result.error_in_exec)
        assert type(result.result).__name__ == "Figure"
    assert len(server.audit()["entries"]) == before


def test_decision_query_through_the_server(
    ip: InteractiveShell, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """%%dpquery --fnr against the server: the dry run charges nothing; the answer is the local DecisionAnswer
    (rendered here), every read charged on the server to the asking analyst, within their quota."""
    from dpmagic.session.decide import DecisionAnswer

    monkeypatch.setenv("DPMAGIC_TOKEN", TOKENS["bob"])
    result, cap = run(ip, f"%dpsession --server {server.url} --dataset pums")
    assert result.success, cap.stderr
    sql = "SELECT educ FROM pums GROUP BY educ HAVING COUNT(*) > 100"
    before = server.audit()["entries"]
    result, cap = run(ip, f"%%dpquery --fnr 0.05 --fpr 0.2 --max-group-size 2000 --dry-run\n{sql}\n")
    assert result.success, (cap.stderr, result.error_in_exec)
    assert isinstance(result.result, DecisionAnswer) and result.result.dry_run and result.result.groups is None
    assert server.audit()["entries"] == before
    result, cap = run(ip, f"%%dpquery found << --fnr 0.05 --fpr 0.2 --max-group-size 2000\n{sql}\n")
    assert result.success, (cap.stderr, result.error_in_exec)
    assert list(ip.user_ns["found"].columns) == ["educ"]
    new = server.audit()["entries"][len(before) :]
    assert new and all(e["analyst"] == "bob" for e in new)
    quota = current_session().budget().summary()
    assert 0 < quota["spent"] <= quota["budget"]


def test_batch_through_the_server(ip: InteractiveShell, server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """%%dpbatch against the server: the dry run charges nothing; the batch is one charge on the server (to the
    asking analyst) and its released table is assigned as locally."""
    monkeypatch.setenv("DPMAGIC_TOKEN", TOKENS["bob"])
    result, cap = run(ip, f"%dpsession --server {server.url} --dataset pums")
    assert result.success, cap.stderr
    before = server.audit()["entries"]
    result, cap = run(ip, "%%dpbatch --epsilon 0.05 --dry-run\nprefix(age) * identity(sex)\nWHERE educ = 9\n")
    assert result.success, (cap.stderr, result.error_in_exec)
    assert "dry run of batch" in repr(result.result) and server.audit()["entries"] == before
    result, cap = run(ip, "%%dpbatch res << --epsilon 0.05\nidentity(sex)\nWHERE educ = 9\n")
    assert result.success, (cap.stderr, result.error_in_exec)
    assert len(ip.user_ns["res"]) == 2
    new = server.audit()["entries"][len(before) :]
    assert len(new) == 1 and new[0]["analyst"] == "bob" and new[0]["cost"] == pytest.approx(0.05)


def test_own_ledger_has_regions_never_anyone_elses(server: Server) -> None:
    import httpx

    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKENS['bob']}"}) as c:
        r = c.post("/v1/datasets/pums/query", json={"sql": "SELECT COUNT(*) FROM pums WHERE age > 90", "epsilon": 0.1})
        assert r.status_code == 200
        mine = c.get("/v1/datasets/pums/ledger").json()["entries"]
    assert mine and all(set(e["coverage"]) <= {"age", "sex", "educ", "race", "income", "married"} for e in mine)
    assert all(e["sql"] != "SELECT COUNT(*) FROM pums WHERE sex = 0" for e in mine)  # alice's query, not bob's


def test_session_options_and_token_file(
    ip: InteractiveShell, server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DPMAGIC_TOKEN", raising=False)
    result, _ = run(ip, f"%dpsession --server {server.url} --dataset pums")
    assert not result.success and "DPMAGIC_TOKEN" in str(result.error_in_exec)
    token = tmp_path / "token"
    token.write_text(TOKENS["bob"] + "\n")
    result, _ = run(ip, f"%dpsession --server {server.url} --dataset pums --token-file {token}")
    assert result.success and isinstance(current_session(), RemoteSession)
    result, _ = run(ip, f"%dpsession --server {server.url} --dataset pums --budget epsilon=1 --token-file {token}")
    assert not result.success and "--budget does not apply" in str(result.error_in_exec)
    monkeypatch.setenv("DPMAGIC_TOKEN_FILE", str(token))  # a JupyterHub spawner's secret mount
    result, _ = run(ip, f"%dpsession --server {server.url} --dataset pums")
    assert result.success and isinstance(current_session(), RemoteSession)
    monkeypatch.delenv("DPMAGIC_TOKEN_FILE")
    token.write_text("wrong-token\n")
    result, _ = run(ip, f"%dpsession --server {server.url} --dataset pums --token-file {token}")
    assert not result.success and "token" in str(result.error_in_exec)


@pytest.mark.filterwarnings("ignore::dpmagic.query.regions.EmptyRegionWarning")
def test_sql_corpus_same_shapes_and_charges_as_locally(server: Server, tmp_path: Path) -> None:
    """Every PUMS corpus query at ε=0.5, locally (a fresh in-memory session) and through the server (a new
    analyst added by the custodian): the same refusals, columns, row count and cost, and the same charged bound
    (her quota's overlap accountant against the local one)."""
    import pandas as pd

    with server.client("admin") as adm:
        assert adm.post("/v1/admin/analysts", json={"id": "erin"}).status_code == 200
        token = adm.post("/v1/admin/analysts/erin/rotate").json()["token"]
    local = dpmagic.Session(pd.read_csv(DATA / "pums.csv"), DATA / "pums.schema.json", "epsilon=1000.0")
    remote = RemoteSession(server.url, "pums", token)
    checked = 0
    for sql, _ in PUMS:
        try:
            mine = local.query(sql, epsilon=0.5, fresh=True)
        except DPMagicError as exc:
            with pytest.raises(type(exc)):
                remote.query(sql, epsilon=0.5, fresh=True)
            continue
        theirs = remote.query(sql, epsilon=0.5, fresh=True)
        assert list(theirs.df.columns) == list(mine.df.columns), sql
        if "HAVING" not in sql.upper():  # HAVING keeps the groups whose NOISY values pass: a count of draws
            assert len(theirs.df) == len(mine.df), sql
        assert theirs.cost == pytest.approx(mine.cost), sql
        checked += 1
    assert checked >= 10
    # erin's quota accountant is the overlap accountant of her queries alone: the local session's charged bound
    assert remote.budget().body["quota"]["spent"] == pytest.approx(local.spent, rel=1e-9)
    remote.close()


QUICKSTART = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.md"


def test_quickstart_runs_against_a_server(
    ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quickstart's cells in a real IPython shell against a live server serving Adult (global budget and
    quota ε = 1, as the local quickstart binds): the one change is the binding line (the %dpplot cells draw your own charges,
    replayed on your side).  Every cell succeeds, the one tagged
    raises-exception is refused by the budget, and the final %dpbudget --json summary reads as locally."""
    import re
    import shutil

    shutil.copy(DATA / "adult.csv", tmp_path / "adult.csv")
    shutil.copy(DATA / "adult.schema.json", tmp_path / "adult.schema.json")
    cfg = write_config(tmp_path, quota=1.0)
    text = cfg.read_text().replace('id = "pums"', 'id = "adult"').replace("pums.", "adult.")
    cfg.write_text(text.replace("quotas = { pums = 0.25 }", "quotas = { adult = 0.25 }"))
    srv = Server(cfg)
    try:
        monkeypatch.setenv("DPMAGIC_TOKEN", TOKENS["alice"])
        cells = re.findall(r"```\{code-cell\}\n(.*?)```", QUICKSTART.read_text(), re.S)
        ran = 0
        for cell in cells:
            raises = cell.startswith(":tags: [raises-exception]")
            code = cell.replace(":tags: [raises-exception]\n", "").strip()
            code = re.sub(r"^%dpsession .*$", f"%dpsession --server {srv.url} --dataset adult", code, flags=re.M)
            result, cap = run(ip, code)
            if raises:
                assert not result.success and "BudgetExceededError" in str(result.error_in_exec), code
            else:
                assert result.success, (code, cap.stderr, result.error_in_exec)
            ran += 1
        assert ran >= 20
        summary = ip.user_ns["summary"]
        assert 0 < summary["spent"] <= 1.0 and summary["global"]["spent"] <= 1.0
        assert len(srv.audit("adult")["entries"]) == summary["queries"]
    finally:
        srv.stop()


@pytest.mark.slow
def test_quickstart_notebook_runs_against_a_server_in_a_real_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """notebooks/quickstart.ipynb executed in a real Jupyter kernel (nbclient) against a live server serving Adult:
    only the binding line changed, no cell skipped.  No cell errs except the one tagged raises-exception (refused
    by the budget, one readable line); the three %dpplot cells draw figures; the server charged what the final
    summary says."""
    import re
    import shutil

    import nbformat
    from nbclient import NotebookClient

    shutil.copy(DATA / "adult.csv", tmp_path / "adult.csv")
    shutil.copy(DATA / "adult.schema.json", tmp_path / "adult.schema.json")
    cfg = write_config(tmp_path, quota=1.0)
    text = cfg.read_text().replace('id = "pums"', 'id = "adult"').replace("pums.", "adult.")
    cfg.write_text(text.replace("quotas = { pums = 0.25 }", "quotas = { adult = 0.25 }"))
    srv = Server(cfg)
    try:
        monkeypatch.setenv("DPMAGIC_TOKEN", TOKENS["alice"])  # the kernel inherits it: never in the notebook
        monkeypatch.setenv("PYTHONPATH", str(QUICKSTART.parents[1]))  # the kernel imports this checkout
        nb = nbformat.read(QUICKSTART.with_suffix(".ipynb"), as_version=4)
        binding = [c for c in nb.cells if c.cell_type == "code" and re.search(r"^%dpsession ", c.source, re.M)]
        assert len(binding) == 1
        binding[0].source = re.sub(
            r"^%dpsession .*$", f"%dpsession --server {srv.url} --dataset adult", binding[0].source, flags=re.M
        )
        NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
        ).execute()
        code = [c for c in nb.cells if c.cell_type == "code"]
        errors = [
            (c.source, o.get("evalue"))
            for c in code
            if "raises-exception" not in c.metadata.get("tags", [])
            for o in c.get("outputs", [])
            if o.output_type == "error" or (o.output_type == "stream" and o.name == "stderr" and "Error" in o.text)
        ]
        assert not errors, errors
        refused = [o for c in code if "raises-exception" in c.metadata.get("tags", []) for o in c.get("outputs", [])]
        assert any("BudgetExceededError" in str(o.get("text", "")) + str(o.get("evalue", "")) for o in refused)
        plots = [c for c in code if c.source.startswith("%dpplot")]
        assert len(plots) == 3
        assert all(any("image/png" in o.get("data", {}) for o in c.get("outputs", [])) for c in plots)
        entries = srv.audit("adult")["entries"]
        assert entries and all(e["analyst"] == "alice" for e in entries)
        printed = "".join(str(o.get("text", "")) for c in code for o in c.get("outputs", []))
        said = re.search(r"spent ε = ([0-9.]+), remaining ε = [0-9.]+, queries = (\d+)", printed)
        assert said is not None and int(said.group(2)) == len(entries) and 0 < float(said.group(1)) <= 1.0
    finally:
        srv.stop()


@pytest.mark.slow
def test_collusion_notebook_refuses_bob_and_keeps_the_global_budget() -> None:
    """notebooks/server-collusion.ipynb in a real kernel against the live server it starts: Bob's overlapping query
    is refused (one readable line), his disjoint one admitted, and the audit's global charge is within ε = 1."""
    import nbformat
    from nbclient import NotebookClient

    path = QUICKSTART.parent / "server-collusion.ipynb"
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3").execute()
    outputs = [(c, o) for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    refused = [o for c, o in outputs if "raises-exception" in c.metadata.get("tags", [])]
    assert any("BudgetExceededError" in (o.get("text", "") + str(o.get("evalue", ""))) for o in refused)
    text = "".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", "")) for _, o in outputs)
    assert "global ε charged: 0.6 of 1" in text and "ledger verifies: True" in text
