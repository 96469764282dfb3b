"""``%dpbudget`` and ``%dpplot``: where the budget went (the budget and plots family)."""

from __future__ import annotations

import weakref
from typing import Any

from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display

from dpmagic.errors import ConfigurationError
from dpmagic.presentation.budget_report import BudgetReport, budget_summary, panel_view
from dpmagic.presentation.magic_cells import unquote
from dpmagic.presentation.magics.base import MagicCall, MagicsBase, friendly, routed

__all__ = ["BudgetMagics", "one_view", "show_panel"]


def one_view(args: Any) -> None:
    """``%dpbudget`` shows one thing: refuse two of ``--json``, ``--map``, ``--afford``, ``--widget``."""
    chosen = [f"--{k}" for k in ("json", "map", "afford", "widget") if getattr(args, k)]
    if len(chosen) > 1:
        raise ConfigurationError(f"{chosen[0]} and {chosen[1]} together: %dpbudget shows one of them per call")


#: the sessions that already print a progress line in a terminal (subscribed once each)
_TERMINAL_PROGRESS: weakref.WeakSet[Any] = weakref.WeakSet()


def show_panel(magic: MagicsBase, session: Any, where: str) -> None:
    """The panel in the side panel (sidecar), inline, or as text where widgets cannot render."""
    if where not in ("side", "inline"):
        raise ConfigurationError(f"DPMagic.panel must be 'side', 'inline' or 'none', not {where!r}")
    view = panel_view(session)
    if getattr(magic.shell, "kernel", None) is None:  # terminal IPython: no widget frontend
        print(view)
        if session not in _TERMINAL_PROGRESS:  # a line while the accountant works > 0.5 s
            from dpmagic.session.progress import terminal_progress

            session.subscribe(terminal_progress())
            _TERMINAL_PROGRESS.add(session)
        return
    if where == "side":
        try:
            from sidecar import Sidecar
        except ImportError:  # optional: without it the panel stays under this cell
            where = "inline"
        else:
            if session.sidecar is None:
                session.sidecar = Sidecar(title=f"dpmagic budget — {session.schema.table}", anchor="split-right")
            with session.sidecar:
                display(view)
            print(
                "dpmagic: the live budget panel is in JupyterLab's side panel (right); a budget line follows "
                "every answer (%dpsession ... --panel inline keeps the panel here)"
            )
            return
    display(view)


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
