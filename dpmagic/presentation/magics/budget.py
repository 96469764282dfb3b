"""``%dpbudget`` and ``%dpplot``: where the budget went (the budget and plots family)."""

from __future__ import annotations

import os
import weakref
from typing import Any

from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display

from dpmagic.errors import ConfigurationError
from dpmagic.presentation.budget_report import BudgetReport, budget_summary, panel_view
from dpmagic.presentation.magic_cells import unquote
from dpmagic.presentation.magics.base import MagicCall, MagicsBase, friendly, routed

__all__ = ["BudgetMagics", "FRONTEND_ENV", "PANEL_CHOICES", "frontend", "one_view", "panel_place", "show_panel"]


def one_view(args: Any) -> None:
    """``%dpbudget`` shows one thing: refuse two of ``--json``, ``--map``, ``--afford``, ``--widget``."""
    chosen = [f"--{k}" for k in ("json", "map", "afford", "widget") if getattr(args, k)]
    if len(chosen) > 1:
        raise ConfigurationError(f"{chosen[0]} and {chosen[1]} together: %dpbudget shows one of them per call")


#: the sessions that already print a progress line in a terminal (subscribed once each)
_TERMINAL_PROGRESS: weakref.WeakSet[Any] = weakref.WeakSet()


#: set in a kernel's environment by dpmagic's JupyterLab extension (labextension/src/index.ts): the frontend that
#: shows the kernel, ``lab`` (JupyterLab 4: has a side panel) or ``notebook`` (Notebook 7: has none)
FRONTEND_ENV = "DPMAGIC_FRONTEND"
#: what ``DPMagic.panel`` / ``--panel`` accept
PANEL_CHOICES = ("auto", "side", "inline", "none")


def frontend(shell: Any) -> str:
    """The frontend showing this kernel: ``terminal`` (no kernel: terminal IPython), ``lab`` or ``notebook`` (as
    dpmagic's JupyterLab extension told the kernel through :data:`FRONTEND_ENV`), else ``unknown`` (the
    extension is not installed, another frontend such as VS Code, or a cell ran before the kernel was told)."""
    if getattr(shell, "kernel", None) is None:
        return "terminal"
    told = os.environ.get(FRONTEND_ENV, "").strip().lower()
    return told if told in ("lab", "notebook") else "unknown"


def has_sidecar() -> bool:
    """Whether the ``sidecar`` package (JupyterLab's side panel for widgets) can be imported."""
    try:
        import sidecar  # noqa: F401
    except ImportError:
        return False
    return True


def panel_place(where: str, front: str, sidecar: bool) -> tuple[str, str]:
    """Where the panel goes — ``side``, ``inline``, ``text`` (terminal IPython) or ``none`` — and the message that
    says where it is (``""`` for none and text).

    ``auto`` (the default) uses the side panel only when the frontend is known to be JupyterLab and ``sidecar`` is
    installed, else the panel stays under the cell.  ``side`` is honoured unless the frontend is known to be
    Notebook 7 (a sidecar there shows nowhere) or ``sidecar`` is missing: then the panel stays under the cell and
    the message says why."""
    if where not in PANEL_CHOICES:
        raise ConfigurationError(f"DPMagic.panel must be one of {', '.join(PANEL_CHOICES)}, not {where!r}")
    if where == "none":
        return "none", ""
    if front == "terminal":
        return "text", ""
    inline = "dpmagic: the live budget panel is under this cell and updates after every query"
    every = "; a budget line also follows every answer"
    if front == "notebook" and where != "inline":
        return "inline", f"{inline} (Notebook 7 has no side panel){every}"
    if where == "side" or (where == "auto" and front == "lab"):
        if not sidecar:
            why = " (the side panel needs the sidecar package: pip install sidecar)" if where == "side" else ""
            return "inline", f"{inline}{why}{every}"
        return "side", (
            "dpmagic: the live budget panel is in JupyterLab's right side bar (drag its edge to resize it, click its "
            f"tab to hide it){every} (%dpsession ... --panel inline keeps the panel under this cell)"
        )
    return "inline", inline + every


def show_panel(magic: MagicsBase, session: Any, where: str) -> str:
    """Show the session's panel where :func:`panel_place` says (the side panel, inline, or as text where widgets
    cannot render), print where it is, and return the place."""
    front = frontend(magic.shell)
    place, message = panel_place(where, front, front != "terminal" and has_sidecar())
    if place == "none":
        return place
    view = panel_view(session)
    if place == "text":  # terminal IPython: no widget frontend
        print(view)
        if session not in _TERMINAL_PROGRESS:  # a line while the accountant works > 0.5 s
            from dpmagic.session.progress import terminal_progress

            session.subscribe(terminal_progress())
            _TERMINAL_PROGRESS.add(session)
        return place
    if place == "side":
        from sidecar import Sidecar

        if session.sidecar is None:
            # the right side bar (not a split of the main area): the notebook keeps its width, and the bar is
            # resizable and collapsible
            session.sidecar = Sidecar(title=f"dpmagic budget — {session.schema.table}", anchor="right")
        with session.sidecar:
            display(view)
    else:
        display(view)
    print(message)
    return place


@magics_class
class BudgetMagics(MagicsBase):
    """``%dpbudget`` and ``%dpplot``."""

    @magic_arguments()
    @argument("--json", action="store_true", help="Return the summary as a dict instead of displaying it.")
    @argument("--map", nargs=2, metavar=("COL1", "COL2"), default=None, help="Return the budget map of two columns.")
    @argument("--afford", default=None, metavar="SQL", help="How much a query (quoted SQL) could still be given.")
    @argument("--widget", action="store_true", help="Display the live budget panel (it updates after every query).")
    @line_magic
    @friendly
    @routed()
    def dpbudget(self, call: MagicCall, session: Any) -> Any:
        """Show spent / remaining budget, the four overlap bounds and the list of queries with costs.

        ``--map COL1 COL2`` returns the current load of every (COL1, COL2) cell as a DataFrame (where the budget
        has gone); ``--afford "SELECT ..."`` how much a query could still be given; ``--json`` the summary as a
        dict; ``--widget`` the live panel here.
        """
        args = call.args
        one_view(args)
        if args.map:
            return session.budget_map(*args.map)
        if args.afford:
            return round(session.affordable(unquote(args.afford)), 10)  # drop float-slack digits from the display
        if args.widget:
            show_panel(self, session, "inline")
            return None
        summary = budget_summary(session)
        if args.json:
            return summary
        display(BudgetReport(session, summary))
        return None

    @magic_arguments()
    @argument("--level", type=float, default=0.95, help="Confidence level of the intervals (default 0.95).")
    @line_magic
    @friendly
    @routed()
    def dpconsistent(self, call: MagicCall, session: Any) -> Any:
        """Every COUNT / SUM / AVG released so far, as released and made consistent (the best linear unbiased
        estimate given all the session's releases: :meth:`dpmagic.Session.consistent`), with both intervals.
        Free post-processing: reads no data and charges nothing."""
        return session.consistent(call.args.level)

    @magic_arguments()
    @argument(
        "what",
        choices=["graph", "budget", "map"],
        help="graph: the query graph; budget: charged over time; map: heat map.",
    )
    @argument("columns", nargs="*", help="For 'map': the two columns.")
    @line_magic
    @friendly
    @routed()
    def dpplot(self, call: MagicCall, session: Any) -> Any:
        """Plot the session's accounting: ``%dpplot graph``, ``%dpplot budget``, ``%dpplot map COL1 COL2``."""
        from dpmagic.presentation import plots

        args = call.args
        if args.what != "map" and args.columns:
            raise ConfigurationError(f"%dpplot {args.what} takes no column names (only %dpplot map COL1 COL2 does)")
        if args.what == "graph":
            return plots.plot_graph(session)
        if args.what == "budget":
            return plots.plot_budget(session)
        if len(args.columns) != 2:
            raise ConfigurationError("%dpplot map needs two column names: %dpplot map COL1 COL2")
        return plots.plot_map(session, *args.columns)
