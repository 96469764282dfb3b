"""What a new analyst meets (issue 14): answers that must not mislead, the panel, plots, set-up.

Magics run through a real IPython shell (InteractiveShell, and a terminal ``ipython`` subprocess).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from IPython.core.interactiveshell import InteractiveShell
from tests_support import load_table
from tests_support import run_cell as run

import dpmagic
from dpmagic import Session
from dpmagic.errors import DataValidationError
from dpmagic.presentation.magics import budget_summary, current_session
from dpmagic.presentation.widgets import BudgetWidget, panel_text
from dpmagic.releases.postprocess import ratio_estimate, tidy
from dpmagic.session.session import EmptyRegionWarning

REPO = Path(__file__).resolve().parents[1]


def pums() -> tuple[pd.DataFrame, dpmagic.Schema]:
    return load_table("pums")


@pytest.fixture
def bound(ip: InteractiveShell) -> InteractiveShell:
    df, schema = dpmagic.load_adult()
    ip.user_ns.update(adult=df, schema=schema)
    result, cap = run(ip, "%dpsession adult --schema schema --budget epsilon=1.0 --ledger memory")
    assert result.success, cap.stderr
    return ip


# -- answers -------------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    s=st.lists(st.floats(-1e7, 1e7), min_size=1, max_size=8),
    c=st.lists(st.floats(-500, 5000), min_size=8, max_size=8),
    hs=st.floats(0.01, 1e6),
    hc=st.floats(0.01, 300),
)
def test_ratio_interval_is_never_zero_width_and_nan_when_count_too_small(s, c, hs, hc) -> None:
    s_arr = np.array(s)
    c_arr = np.array(c[: len(s)])
    est, low, high = ratio_estimate(s_arr, hs, c_arr, hc, 0.0, 99999.0)
    assert np.all(high > low)  # a noisy value never gets a zero-width interval
    assert np.all((low >= 0.0) & (high <= 99999.0))
    small = c_arr - hc < 1.0
    assert np.all(np.isnan(est[small])) and not np.any(np.isnan(est[~small]))
    assert np.all(low[small] == 0.0) and np.all(high[small] == 99999.0)  # the whole declared range


def test_ratio_interval_collapsed_by_clamping_is_the_whole_range() -> None:
    # the quickstart's Prof-school case: a noisy SUM far below 0 clamps every corner to 0
    est, low, high = ratio_estimate(np.array([-5e6]), 4e6, np.array([400.0]), 60.0, 0.0, 99999.0)
    assert est[0] == 0.0 and (low[0], high[0]) == (0.0, 99999.0)


def test_avg_over_empty_group_is_nan_with_a_note() -> None:
    df, schema = pums()
    s = Session(df, schema, "epsilon=1.0")
    # true count 0: the noisy count's 95% interval reaches below one row unless the noise exceeds ~3 scales
    # (probability 0.5·e⁻³ ≈ 2.5% a draw), so the first of up to 20 fresh draws that shows NaN is checked
    sql = "SELECT COUNT(*) AS n, AVG(income) AS avg_inc FROM pums WHERE age < 18"
    r = s.query(sql, epsilon=0.05)
    for _ in range(19):
        if math.isnan(r.df["avg_inc"][0]):
            break
        r = s.query(sql, epsilon=0.05, fresh=True)
    assert math.isnan(r.df["avg_inc"][0])  # the ratio means nothing
    assert (r.df["avg_inc_ci_low"][0], r.df["avg_inc_ci_high"][0]) == (0.0, 500000.0)
    assert any("not shown (NaN)" in n for n in r.notes)
    assert "note: avg_inc: not shown (NaN)" in repr(r) and "⚠ note" in r._repr_html_()


def test_counts_display_as_integers_and_tidy_is_free(bound: InteractiveShell) -> None:
    sess = current_session()
    r1, cap = run(bound, "%%dpquery --epsilon 0.1\nSELECT race, COUNT(*) AS n FROM adult GROUP BY race\n")
    assert r1.success
    html = r1.result._repr_html_()
    assert ".00<" not in html.split("<div")[0]  # counts shown as whole numbers
    spent = sess.spent
    # free post-processing of a re-run: same charge, clipped and rounded values
    r2, cap = run(
        bound, "%%dpquery --epsilon 0.1 --nonneg --integer\nSELECT race, COUNT(*) AS n FROM adult GROUP BY race\n"
    )
    assert r2.success and sess.spent == spent
    df = r2.result.df
    assert df["n"].dtype == np.int64 and (df["n"] >= 0).all() and (df["n_ci_low"] >= 0).all()
    # and on a fresh draw it is charged only the query's cost
    r3, _ = run(
        bound,
        "%%dpquery --epsilon 0.1 --nonneg\nSELECT COUNT(*) AS n FROM adult WHERE age = 90 AND sex = 'Female' AND race = 'Other'\n",
    )
    assert r3.success and r3.result.df["n"][0] >= 0


def test_tidy_never_reads_rows_and_keeps_valid_intervals() -> None:
    df, schema = pums()
    q = dpmagic.parse_query("SELECT COUNT(*) AS n, SUM(income) AS s FROM pums", schema)
    released = pd.DataFrame(
        {"n": [-3.4], "n_ci_low": [-20.2], "n_ci_high": [13.6], "s": [-7.0], "s_ci_low": [-9.0], "s_ci_high": [5.0]}
    )
    out = tidy(released, q, schema, ["integer", "nonnegative"])
    assert out.to_dict("records") == [
        {"n": 0, "n_ci_low": 0, "n_ci_high": 14, "s": 0.0, "s_ci_low": 0.0, "s_ci_high": 5.0}
    ]
    with pytest.raises(dpmagic.DPMagicError, match="unknown post-processing"):
        tidy(released, q, schema, ["round"])


@pytest.mark.parametrize(
    "where, column",
    [("age BETWEEN 60 AND 30", "age"), ('"capital-gain" > 1000000', "capital-gain")],
)
def test_empty_where_warns_before_charging(bound: InteractiveShell, where: str, column: str) -> None:
    sess = current_session()
    events: list[str] = []
    sess.subscribe(lambda kind, info: events.append(kind))
    result, cap = run(bound, f"%%dpquery --epsilon 0.1\nSELECT COUNT(*) AS n FROM adult WHERE {where}\n")
    assert result.success  # warned, and still answered
    assert "matches no row of the declared domain" in cap.stderr and repr(column) in cap.stderr
    # the API warns (a Python warning) before anything is charged
    order: list[str] = []
    sess.subscribe(lambda kind, info: order.append(kind))
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmptyRegionWarning)
        with pytest.raises(EmptyRegionWarning):
            sess.query(f"SELECT COUNT(*) FROM adult WHERE {where}", epsilon=0.2, fresh=True)
    assert "charged" not in order and "computing" not in order
    # a dry run says it too
    result, cap = run(bound, f"%%dpquery --dry-run --epsilon 0.1\nSELECT COUNT(*) AS n FROM adult WHERE {where}\n")
    assert "matches no row" in cap.stderr


def test_default_cost_is_named_in_the_cost_line(bound: InteractiveShell) -> None:
    result, _ = run(bound, "%%dpquery\nSELECT COUNT(*) FROM adult WHERE age < 25\n")
    assert "no cost named: the session's default, 0.1 ε" in result.result.summary()
    result, _ = run(bound, "%%dpquery --epsilon 0.05\nSELECT COUNT(*) FROM adult WHERE age > 70\n")
    assert "default" not in result.result.summary()


def test_bare_number_budget_and_nan_hint() -> None:
    df, schema = dpmagic.load_adult()
    s = Session(df, schema, 1.0)
    assert s.currency.parameter == "epsilon" and s.budget.total == 1.0
    bad = df.copy()
    bad.loc[3, "age"] = np.nan
    with pytest.raises(DataValidationError) as exc:
        Session(bad, schema, 1.0)
    assert "dropna" in exc.value.hint and "sentinel category" in exc.value.hint


# -- panel, numbering, rounding --------------------------------------------------------------------------


def test_exhausted_budget_is_red_says_so_and_rounds_leftovers() -> None:
    df, schema = dpmagic.load_adult()
    s = Session(df, schema, "epsilon=1.0", bound="sequential")
    panel = BudgetWidget(s)
    for i in range(10):  # 10 × 0.1 sums to 0.9999999999999999 in floats
        s.query(f"SELECT COUNT(*) FROM adult WHERE age = {20 + i}", epsilon=0.1)
    assert panel.progress.bar_style == "danger"
    assert "budget exhausted" in panel.numbers.value and "nearly spent" not in panel.numbers.value
    assert "data-state='exhausted'" in panel.numbers.value
    assert "e-1" not in panel.numbers.value and "remaining 0.00" in panel.numbers.value
    summary = budget_summary(s)
    assert summary["spent"] == 1.0 and summary["remaining"] == 0.0
    text = panel_text(s)
    assert "1 of 1 ε charged (100%), 0 left — budget exhausted" in text


def test_one_numbering_and_plain_labels(bound: InteractiveShell) -> None:
    for k, sql in enumerate(
        ["SELECT COUNT(*) FROM adult WHERE age < 30", "SELECT COUNT(*) FROM adult WHERE age >= 30"], 1
    ):
        result, _ = run(bound, f"%%dpquery --epsilon 0.1\n{sql}\n")
        assert result.result.summary().startswith(f"query #{k}:"), result.result.summary()
    sess = current_session()
    assert [e.id for e in sess.accountant.entries()] != [1, 2]  # ledger ids differ from what is shown
    result, cap = run(bound, "%dpbudget")
    html = cap.outputs[0].data["text/html"]
    assert "<td>1</td>" in html and "<td>2</td>" in html
    assert "disjoint groups" in html and "title='colouring (chromatic) bound" in html
    panel = BudgetWidget(sess)
    assert "disjoint groups" in panel.bounds.value and "clique bound" in panel.bounds.value
    assert ">colouring<" not in panel.bounds.value and ">clique<" not in panel.bounds.value
    assert "word-break:normal" in panel.queries.value and "max-height:420px" in panel.queries.value


def test_session_panel_is_text_in_a_plain_shell(bound: InteractiveShell) -> None:
    result, cap = run(bound, "%dpsession adult --schema schema --budget epsilon=1.0 --ledger memory")
    assert result.success
    assert "VBox(" not in cap.stdout and "dpmagic budget — adult, pure" in cap.stdout


def test_terminal_ipython_prints_a_text_panel(tmp_path: Path) -> None:
    script = tmp_path / "demo.ipy"
    script.write_text(
        "import dpmagic\n%load_ext dpmagic\nadult, schema = dpmagic.load_adult()\n"
        "%dpsession adult --schema schema --budget epsilon=1 --ledger memory\n"
        "%dpbudget --widget\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(
        [sys.executable, "-m", "IPython", "--no-banner", "--colors=NoColor", str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "VBox(" not in out.stdout and "HTML(value" not in out.stdout
    assert out.stdout.count("dpmagic budget — adult, pure") == 2, out.stdout


# -- plots --------------------------------------------------------------------------------------------------


def test_graph_with_an_isolated_query_keeps_the_rest_readable() -> None:
    from dpmagic.presentation.plots import _layout, plot_graph, plot_map

    df, schema = pums()
    s = Session(df, schema, "epsilon=10")
    for a in range(20, 90, 3):
        s.query(f"SELECT COUNT(*) FROM pums WHERE age >= {a} AND age < {a + 8}", epsilon=0.05)
    s.query("SELECT COUNT(*) FROM pums WHERE age = 5", epsilon=0.05)  # isolated
    import networkx as nx

    from dpmagic.overlap import overlap_adjacency

    g = nx.from_scipy_sparse_array(overlap_adjacency(s.accountant.engine.store))
    g.remove_edges_from(nx.selfloop_edges(g))
    pos = _layout(g)
    xy = np.array([pos[i] for i in range(len(s.accountant) - 1)])
    span = xy.max(axis=0) - xy.min(axis=0)
    everything = np.array(list(pos.values()))
    total = everything.max(axis=0) - everything.min(axis=0)
    assert span[0] >= 0.5 * total[0]  # connected queries spread over the plot, not a small ball
    fig = plot_graph(s)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("group of disjoint queries" in t for t in legend) and any("size: cost" in t for t in legend)
    labels = {t.get_text() for t in fig.axes[0].texts}
    assert {"1", str(len(s.accountant))} <= labels  # numbered 1..n
    m = plot_map(s, "sex", "race")
    ax, cbar = m.axes[0], m.axes[1]
    assert len(ax.texts) == 2 * 6  # one label per cell
    assert cbar.get_ylabel() == "charged ε"
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(m)
    canvas.draw()
    r = canvas.get_renderer()
    ax_h = ax.get_window_extent(r).height
    assert cbar.get_window_extent(r).height <= ax_h + 1.0  # the colour bar is as tall as the axes
    assert cbar.yaxis.label.get_window_extent(r).height < ax_h  # and its label fits beside it


# -- set-up ---------------------------------------------------------------------------------------------------


def test_python_m_dpmagic() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "dpmagic", "--help"], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and "overlap" in out.stdout and "ledger" in out.stdout


def test_notebooks_do_not_depend_on_path() -> None:
    for src in (REPO / "notebooks").glob("*.md"):
        text = src.read_text()
        assert "!dpmagic" not in text, f"{src.name} calls the dpmagic script through PATH"


@pytest.mark.slow
def test_custodian_notebook_runs_with_a_kernel_path_without_the_scripts(tmp_path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    path = REPO / "notebooks" / "custodian.ipynb"
    nb = nbformat.read(path, as_version=4)
    env = {**os.environ, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}  # no environment scripts on PATH
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    with client.setup_kernel(env=env):  # the kernel starts with this environment
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
    text = "\n".join(
        str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    )
    assert "not found" not in text and "FileNotFoundError" not in text
    assert "bytes to open in a browser" in text and "chain" in text.lower()


def test_run_notebook_prints_sql_noise_and_budget_lines(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    import nbformat
    import run_notebook

    out = nbformat.v4.new_output(
        "execute_result",
        data={"text/plain": "dpmagic budget — adult, pure\nbudget ▕░▏", "application/vnd.jupyter.widget-view+json": {}},
    )
    assert run_notebook.text_of(out).startswith("dpmagic budget")
