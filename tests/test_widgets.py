"""The live budget panel, the plots and auto-loading."""

from __future__ import annotations

import subprocess
import sys

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from matplotlib.figure import Figure

from dpmagic import BudgetExceededError, Session
from dpmagic.presentation.plots import plot_budget, plot_graph, plot_map
from dpmagic.presentation.widgets import BudgetWidget


@pytest.fixture
def session(adult) -> Session:
    df, schema = adult
    return Session(df, schema, "epsilon=1.0")


def test_panel_updates_in_place(session: Session) -> None:
    panel = BudgetWidget(session)
    assert "charged 0.00 of 1.00 ε" in panel.numbers.value
    assert panel.widget._dom_classes[0] == "dpmagic-budget"
    session.query("SELECT COUNT(*) FROM adult WHERE age < 30", epsilon=0.3)
    assert "charged 0.30 of 1.00 ε" in panel.numbers.value
    assert panel.progress.value == pytest.approx(0.3) and panel.progress.bar_style == "success"
    assert "✓ query" in panel.status.value
    session.query("SELECT COUNT(*) FROM adult WHERE age >= 30", epsilon=0.5)
    assert "charged 0.50" in panel.numbers.value  # parallel: max, not sum
    assert "saving" in panel.bounds.value and "37.5%" in panel.bounds.value
    session.query("SELECT COUNT(*) FROM adult WHERE sex = 'Male'", epsilon=0.35)
    assert panel.progress.bar_style == "warning" and "nearly spent" in panel.numbers.value
    with pytest.raises(BudgetExceededError):
        session.query("SELECT COUNT(*) FROM adult", epsilon=0.5)
    assert panel.progress.bar_style == "danger" and "refused" in panel.status.value
    # issue 30, friction 6: the word once, a glyph DejaVu/Liberation have (not ⛔), no mid-word breaks
    status = panel.status.value
    assert status.count("refused") == 1 and "⛔" not in status and "✗ refused: " in status, status
    assert "word-break:normal" in status
    assert "worst-case row" in panel.worst.value and "sex=&#x27;Male&#x27;" in panel.worst.value
    # newest first in the query table
    table = panel.queries.value
    assert table.index("sex = &#x27;Male&#x27;") < table.index("age &lt; 30")
    session.query("SELECT COUNT(*) FROM adult WHERE age < 30", epsilon=0.3)  # a free re-run
    assert "re-run" in panel.status.value


def test_panel_shows_approx_dp_for_zcdp(adult) -> None:
    s = Session(adult[0], adult[1], "rho=0.5")
    panel = BudgetWidget(s)
    s.query("SELECT COUNT(*) FROM adult", rho=0.1)
    assert "-DP" in panel.approx.value


def test_panel_scales_to_hundreds_of_queries(adult) -> None:
    s = Session(adult[0], adult[1], "epsilon=1000")
    panel = BudgetWidget(s)
    for i in range(300):
        s.query(f"SELECT COUNT(*) FROM adult WHERE age = {17 + i % 74} AND sex = 'Male'", epsilon=1.0, fresh=True)
    assert panel.queries.value.count("<tr") == 301  # header + every query
    assert "overflow-y:auto" in panel.queries.value


def test_plots(session: Session) -> None:
    for q in ["age < 30", "age >= 30", "sex = 'Male'", "race = 'Black' AND age < 40"]:
        session.query(f"SELECT COUNT(*) FROM adult WHERE {q}", epsilon=0.2)
    g = plot_graph(session)
    assert isinstance(g, Figure) and "4 queries" in g.axes[0].get_title()
    b = plot_budget(session)
    assert len(b.axes[0].get_lines()) == 3
    m = plot_map(session, "sex", "race")
    assert m.axes[0].images[0].get_array().shape == (2, 5)


def test_magics_widget_and_plots(adult) -> None:
    ip = InteractiveShell.instance()
    ip.run_cell("%load_ext dpmagic")
    ip.user_ns.update(adult=adult[0], schema=adult[1])
    with capture_output() as cap:
        ip.run_cell("%dpsession adult --schema schema --budget epsilon=1.0")
        ip.run_cell("%%dpquery --epsilon 0.1\nSELECT COUNT(*) FROM adult WHERE age < 30\n")
        r = ip.run_cell("%dpbudget --widget")
        assert r.success
        for line in ["%dpplot graph", "%dpplot budget", "%dpplot map age sex"]:
            r = ip.run_cell(line)
            assert r.success and isinstance(r.result, Figure), line
        r = ip.run_cell("%dpplot map age")
        assert not r.success
    assert "needs two column names" in cap.stderr + cap.stdout


def test_autoload_on_off(tmp_path) -> None:
    env = {"IPYTHONDIR": str(tmp_path / "ipython"), "PATH": "/usr/bin:/bin"}
    run = [sys.executable, "-m", "dpmagic.presentation.cli", "autoload"]
    assert "on for profile" not in subprocess.run([*run, "status"], capture_output=True, text=True, env=env).stdout
    subprocess.run([*run, "on"], check=True, capture_output=True, env=env)
    probe = "print('dpquery' in get_ipython().magics_manager.magics['cell'])"
    out = subprocess.run(
        [sys.executable, "-m", "IPython", "--no-banner", "-c", probe], capture_output=True, text=True, env=env
    )
    assert out.stdout.strip().endswith("True"), out.stderr
    subprocess.run([*run, "off"], check=True, capture_output=True, env=env)
    out = subprocess.run(
        [sys.executable, "-m", "IPython", "--no-banner", "-c", probe], capture_output=True, text=True, env=env
    )
    assert out.stdout.strip().endswith("False")
