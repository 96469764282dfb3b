"""The live budget panel of a server session (issue 31): the widget model against a stand-in session, and the
panel through a real IPython shell against a live ``dpmagic serve`` on 127.0.0.1 (your quota and the global budget
as the server reports them, your own queries only, refreshed after each query and on demand)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from IPython.core.interactiveshell import InteractiveShell
from server_support import TOKENS, Server, write_config
from tests_support import run_cell as run

from dpmagic.accountant.currency import currency_for
from dpmagic.errors import DPMagicError
from dpmagic.presentation.budget_report import panel_view
from dpmagic.presentation.magics import current_session
from dpmagic.presentation.widgets import RemoteBudgetWidget
from dpmagic.session.events import EventBus


class FakeRemote:
    """What the panel reads from a RemoteSession: its currency, data set, URL, events and ``budget_view``."""

    def __init__(self) -> None:
        self.currency = currency_for("pure")
        self.dataset, self.url = "pums", "http://127.0.0.1:1"
        self.events = EventBus()
        self.panel: Any = None
        self.down = False
        self.quota = {"budget": 0.6, "spent": 0.0, "remaining": 0.6, "queries": 0, "delta": 1e-6}
        self.glob = {"budget": 1.0, "spent": 0.0, "remaining": 1.0}
        self.entries: list[dict[str, Any]] = []

    def subscribe(self, cb: Any) -> None:
        self.events.subscribe(cb)

    def charge(self, sql: str, cost: float, global_after: float) -> int:
        entry = 100 + len(self.entries)
        after = self.quota["spent"] + cost
        self.entries.append(
            {"number": len(self.entries) + 1, "entry": entry, "time": 0.0, "sql": sql, "cost": cost}
            | {"charged_after": after, "bound": "exact"}
        )
        self.quota |= {"spent": after, "remaining": 0.6 - after, "queries": len(self.entries)}
        self.glob |= {"spent": global_after, "remaining": 1.0 - global_after}
        self.events.emit("charged", entry=entry)
        return entry

    def budget_view(self) -> dict[str, Any]:
        if self.down:
            raise DPMagicError("the dpmagic server at http://127.0.0.1:1 did not answer")
        view = {"definition": "pure", "parameter": "epsilon", "dataset": "pums", "entries": list(self.entries)}
        return view | {"quota": dict(self.quota), "global": dict(self.glob)}


def test_remote_widget_model_follows_the_server_view() -> None:
    s = FakeRemote()
    panel = RemoteBudgetWidget(s)
    assert "your quota: charged 0.00 of 0.60 ε" in panel.numbers.value
    assert "global budget" in panel.global_numbers.value and "charged 0.00 of 1.00 ε" in panel.global_numbers.value
    assert panel.widget._dom_classes[0] == "dpmagic-budget" and "dpmagic-global" in panel.global_progress._dom_classes
    s.charge("SELECT COUNT(*) FROM pums WHERE age < 30", 0.2, 0.2)
    assert panel.progress.value == pytest.approx(0.2) and panel.progress.max == pytest.approx(0.6)
    assert panel.progress.bar_style == "success" and "✓ query #1 answered" in panel.status.value
    assert "age &lt; 30" in panel.queries.value
    s.charge("SELECT COUNT(*) FROM pums WHERE sex = 1", 0.3, 0.9)  # 0.5 of 0.6 yours; 0.9 of 1 globally
    assert panel.progress.bar_style == "warning" and "nearly spent" in panel.numbers.value
    assert panel.global_progress.value == pytest.approx(0.9) and panel.global_progress.bar_style == "warning"
    assert panel.queries.value.index("sex = 1") < panel.queries.value.index("age &lt; 30")  # newest first
    s.glob |= {"spent": 1.0, "remaining": 0.0}  # someone else's query: seen on demand
    assert panel.global_progress.bar_style == "warning"
    panel.button.click()
    assert panel.global_progress.bar_style == "danger" and "exhausted" in panel.global_numbers.value
    s.events.emit("refused", message="refused by your quota: …")
    assert panel.progress.bar_style == "danger" and panel.status.value.count("refused") == 1
    s.down = True  # the server does not answer: said once, the last view kept
    s.events.emit("charged", entry=1)
    assert "could not refresh" in panel.status.value and "0.50 of 0.60" in panel.numbers.value
    s.panel = panel  # the session's one panel: what the magics display
    text = repr(panel_view(s))
    assert "your quota" in text and "global (everyone's queries)" in text and "#2" in text


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    srv = Server(write_config(tmp_path_factory.mktemp("srv")))  # global ε = 1, quotas 0.6
    yield srv
    srv.stop()


def test_live_panel_against_a_server(ip: InteractiveShell, server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """%dpsession --server shows the panel (as text in terminal IPython); it follows every %%dpquery, shows only
    alice's queries, picks up bob's global spend on refresh, and %dpbudget --widget shows it again."""
    monkeypatch.setenv("DPMAGIC_TOKEN", TOKENS["alice"])
    result, cap = run(ip, f"%dpsession --server {server.url} --dataset pums")
    assert result.success, cap.stderr
    assert "dpmagic budget — data set pums" in cap.stdout and "global (everyone's queries)" in cap.stdout
    session = current_session()
    panel = session.panel
    assert isinstance(panel, RemoteBudgetWidget) and "charged 0.00 of 0.60 ε" in panel.numbers.value
    sql = "SELECT COUNT(*) FROM pums WHERE age < 40"
    result, cap = run(ip, f"%%dpquery --epsilon 0.2\n{sql}\n")
    assert result.success, cap.stderr
    assert "charged 0.20 of 0.60 ε" in panel.numbers.value and "✓ query #1 answered" in panel.status.value
    assert "age &lt; 40" in panel.queries.value and "charged 0.20 of 1.00 ε" in panel.global_numbers.value
    result, _ = run(ip, f"%%dpquery --epsilon 0.2\n{sql}\n")  # a re-run: free, said so
    assert result.success and "re-run of query #1" in panel.status.value
    with server.client("bob") as b:  # bob, elsewhere: the global budget moves, alice's quota does not
        bob_sql = "SELECT COUNT(*) FROM pums WHERE age < 30"
        assert b.post("/v1/datasets/pums/query", json={"sql": bob_sql, "epsilon": 0.5}).status_code == 200
    panel.refresh()
    assert "charged 0.70 of 1.00 ε" in panel.global_numbers.value and "charged 0.20 of 0.60" in panel.numbers.value
    assert "age &lt; 30" not in panel.queries.value  # bob's query is his own
    result, cap = run(ip, "%%dpquery --epsilon 0.5\nSELECT COUNT(*) FROM pums WHERE age < 40\n")
    assert not result.success and "✗ refused by your quota" in panel.status.value
    assert panel.progress.bar_style == "danger"
    result, cap = run(ip, "%dpbudget --widget")
    assert result.success and result.result is None and "your quota" in cap.stdout
    assert current_session().panel is panel  # one panel per session


def test_budget_view_is_authenticated_and_own_entries_only(server: Server) -> None:
    with server.client("carol") as c:
        assert c.post("/v1/datasets/pums/query", json={"sql": "SELECT COUNT(*) FROM pums", "epsilon": 0.1}).is_success
        mine = c.get("/v1/datasets/pums/budget/view").json()
    assert [e["sql"] for e in mine["entries"]] == ["SELECT COUNT(*) FROM pums"]
    assert mine["quota"]["spent"] == pytest.approx(0.1) and mine["quota"]["budget"] == pytest.approx(0.25)
    assert set(mine["entries"][0]) == {"number", "entry", "time", "sql", "cost", "charged_after", "bound"}
    with server.client("bob") as b:
        theirs = b.get("/v1/datasets/pums/budget/view").json()
    assert all(e["sql"] != "SELECT COUNT(*) FROM pums" for e in theirs["entries"])  # never carol's
    assert httpx.get(f"{server.url}/v1/datasets/pums/budget/view").status_code == 401
    with server.client("nobody-token") as x:
        assert x.get("/v1/datasets/pums/budget/view").status_code == 401
    with server.client("carol") as c:
        assert c.get("/v1/datasets/nope/budget/view").status_code == 404
