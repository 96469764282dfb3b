"""Issue 30: the budget panel everywhere — JupyterLab's side bar, Notebook 7 and the inline fallback.

Driven through a real IPython shell.  The shell gets a stand-in ``kernel`` attribute (a notebook kernel, as far as
the magics can tell) and the ``sidecar`` module is replaced by a recorder, so that the tests see where the panel
went: into a sidecar (JupyterLab's side bar) or displayed under the cell (a widget display in the cell's output).
The frontend is what dpmagic's JupyterLab extension tells the kernel (``DPMAGIC_FRONTEND``).
"""

from __future__ import annotations

import itertools
import sys
import types
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from tests_support import run_cell as run

import dpmagic
from dpmagic.presentation.magics.budget import FRONTEND_ENV, PANEL_CHOICES, frontend, panel_place

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


class RecordingSidecar:
    """Stands in for ``sidecar.Sidecar``: records each side panel opened and each display into it."""

    made: list[RecordingSidecar] = []

    def __init__(self, title: str = "", anchor: str = "right") -> None:
        self.title, self.anchor, self.entered = title, anchor, 0
        RecordingSidecar.made.append(self)

    def __enter__(self) -> RecordingSidecar:
        self.entered += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


@pytest.fixture
def notebook_kernel(ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> InteractiveShell:
    """The shell as a notebook kernel with ``sidecar`` installed (a recorder) and the Adult data bound to names."""
    monkeypatch.setattr(ip, "kernel", object(), raising=False)
    monkeypatch.setitem(sys.modules, "sidecar", types.SimpleNamespace(Sidecar=RecordingSidecar))
    monkeypatch.delenv(FRONTEND_ENV, raising=False)
    RecordingSidecar.made = []
    df, schema = dpmagic.load_adult()
    ip.user_ns.update(adult=df, schema=schema)
    return ip


def bind(ip: InteractiveShell, extra: str = "") -> tuple[Any, Any]:
    result, cap = run(ip, f"%dpsession adult --schema schema --budget epsilon=1 --ledger memory {extra}")
    assert result.success, cap.stderr
    return result, cap


def inline_panels(cap: Any) -> int:
    return sum(WIDGET_MIME in out.data for out in cap.outputs)


@pytest.mark.parametrize("extra", ["", "--panel auto", "--panel side"])
def test_notebook7_shows_the_panel_under_the_cell_never_in_a_sidecar(
    notebook_kernel: InteractiveShell, monkeypatch: pytest.MonkeyPatch, extra: str
) -> None:
    monkeypatch.setenv(FRONTEND_ENV, "notebook")
    _, cap = bind(notebook_kernel, extra)
    assert RecordingSidecar.made == [], "a sidecar in Notebook 7 shows nowhere"
    assert inline_panels(cap) == 1, [o.data.keys() for o in cap.outputs]
    assert "panel is under this cell" in cap.stdout and "Notebook 7 has no side panel" in cap.stdout
    assert "side bar" not in cap.stdout and "side panel (right)" not in cap.stdout


def test_jupyterlab_shows_the_panel_in_the_right_side_bar(
    notebook_kernel: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FRONTEND_ENV, "lab")
    _, cap = bind(notebook_kernel)
    assert len(RecordingSidecar.made) == 1
    side = RecordingSidecar.made[0]
    # the right side bar (resizable, collapsible), not a split that takes half of the notebook's width
    assert side.anchor == "right" and side.entered == 1 and "adult" in side.title
    assert inline_panels(cap) == 1  # the recorder does not capture: the one display went into the side bar
    assert "JupyterLab's right side bar" in cap.stdout and "under this cell" in cap.stdout  # and how to keep it here
    _, cap = bind(notebook_kernel, "--panel inline")
    assert len(RecordingSidecar.made) == 1 and inline_panels(cap) == 1
    assert "panel is under this cell" in cap.stdout and "side bar" not in cap.stdout


def test_unknown_frontend_falls_back_inline(notebook_kernel: InteractiveShell) -> None:
    """No extension told the kernel (VS Code, or the extension is not built): the panel stays in sight here."""
    _, cap = bind(notebook_kernel)
    assert RecordingSidecar.made == [] and inline_panels(cap) == 1
    assert "panel is under this cell" in cap.stdout


def test_side_without_sidecar_says_why(notebook_kernel: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FRONTEND_ENV, "lab")
    monkeypatch.setitem(sys.modules, "sidecar", None)  # import sidecar raises ImportError
    _, cap = bind(notebook_kernel, "--panel side")
    assert inline_panels(cap) == 1 and "pip install sidecar" in cap.stdout


def test_panel_none_and_config(notebook_kernel: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FRONTEND_ENV, "lab")
    _, cap = bind(notebook_kernel, "--panel none")
    assert RecordingSidecar.made == [] and inline_panels(cap) == 0 and "budget panel" not in cap.stdout
    try:
        run(notebook_kernel, "%config DPMagic.panel = 'inline'")
        _, cap = bind(notebook_kernel)
        assert RecordingSidecar.made == [] and inline_panels(cap) == 1
    finally:
        run(notebook_kernel, "%config DPMagic.panel = 'auto'")
    result, cap = run(
        notebook_kernel, "%dpsession adult --schema schema --budget epsilon=1 --ledger memory --panel top"
    )
    assert not result.success or "invalid choice" in cap.stderr


def test_terminal_prints_a_text_panel(ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FRONTEND_ENV, "lab")  # a stale variable does not matter: no kernel, no widgets
    df, schema = dpmagic.load_adult()
    ip.user_ns.update(adult=df, schema=schema)
    assert frontend(ip) == "terminal"
    _, cap = bind(ip)
    assert "dpmagic budget — adult" in cap.stdout and inline_panels(cap) == 0


FRONTS = ("lab", "notebook", "unknown", "terminal")


@pytest.mark.parametrize(("where", "front", "sidecar"), itertools.product(PANEL_CHOICES, FRONTS, (True, False)))
def test_panel_place_every_combination(where: str, front: str, sidecar: bool) -> None:
    """Exhaustive over the options, frontends and sidecar's presence: the side bar only where it shows."""
    place, message = panel_place(where, front, sidecar)
    if where == "none":
        assert (place, message) == ("none", "")
    elif front == "terminal":
        assert (place, message) == ("text", "")
    elif place == "side":
        assert front != "notebook" and sidecar, (where, front)
        assert where == "side" or front == "lab"  # auto: only where the extension reported JupyterLab
        assert "right side bar" in message
    else:
        assert place == "inline" and "panel is under this cell" in message
        assert not (sidecar and (front == "lab" and where == "auto" or where == "side" and front != "notebook"))
    if front == "notebook":
        assert place != "side"


def test_panel_place_refuses_an_unknown_place() -> None:
    with pytest.raises(dpmagic.errors.ConfigurationError, match="DPMagic.panel must be one of"):
        panel_place("top", "lab", True)
