"""The magics on a statistical-privacy session (Breutigam & Reischuk's secret-partition statistical privacy,
which is NOT differential privacy): ``%dpsession --privacy statistical`` binds one, and
:func:`~dpmagic.presentation.magics.base.routed` sends every other magic here when it is the bound session.

Each function has the name of the magic it stands in for and takes ``(magic, call, session)``; options that
only mean something under differential privacy are refused before anything is charged.
"""

from __future__ import annotations

from typing import Any

from IPython.display import display

from dpmagic.errors import ConfigurationError
from dpmagic.presentation.budget_report import SPBudgetReport
from dpmagic.presentation.magic_cells import unquote
from dpmagic.presentation.magics.base import MagicCall, MagicsBase, bind
from dpmagic.presentation.magics.queries import ANSWER_OPTIONS, DECISION_OPTIONS, given

__all__ = ["bind_session", "dpquery", "dpbatch", "dpbudget", "dpplot"]

#: %dpsession options of a differential-privacy session only
_DP_SESSION_ONLY = ("budget", "bound", "default_cost", "neighbors")


def bind_session(magic: MagicsBase, args: Any, data: Any, schema: Any, ledger: str) -> None:
    """``%dpsession … --privacy statistical``: a :class:`~dpmagic.statistical.sp_session.StatisticalSession`."""
    import pandas as pd

    from dpmagic.statistical.sp_session import StatisticalSession

    if not isinstance(data, pd.DataFrame):
        raise ConfigurationError(f"{args.data!r} is a {type(data).__name__}, not a pandas DataFrame")
    wrong = [f"--{k.replace('_', '-')}" for k in _DP_SESSION_ONLY if getattr(args, k) is not None]
    if wrong:
        raise ConfigurationError(
            f"{wrong[0]} applies only to differential privacy",
            hint="a statistical-privacy session takes --prior, --parts, --epsilon and --delta",
        )
    missing = [f"--{k}" for k in ("prior", "parts", "epsilon", "delta") if getattr(args, k) is None]
    if missing:
        raise ConfigurationError(
            f"--privacy statistical needs {', '.join(missing)}",
            hint='e.g. --prior "bernoulli(0.5)" --parts 32 --epsilon 0.05 --delta 0.13',
        )
    session = StatisticalSession(
        data,
        schema,
        unquote(args.prior),
        parts=args.parts,
        epsilon=args.epsilon,
        delta=args.delta,
        column=unquote(args.column) if args.column else None,
        ledger=ledger,
        out_of_range="clamp" if args.clamp else "error",
    )
    bind(session)
    print(
        f"dpmagic STATISTICAL-PRIVACY session — {session.label}.\n"
        f"  table {session.schema.table!r}"
        + (f" (data set {session.schema.dataset!r})" if session.schema.dataset else "")
        + f"; n = {session.n} rows (disclosed: the part sizes derive from it); {session.parts} secret parts, "
        f"one %%dpquery COUNT(*) each; δ(ε={session.epsilon:g}) target {session.delta_target:g}, already "
        f"charged {session.delta_spent:.4g}; ledger: {session.ledger.path or 'in memory'} (key {session.ledger_key}, "
        "separate from any DP budget)" + (f"\n  no further queries: {session.locked}" if session.locked else "")
    )


def dpquery(magic: MagicsBase, call: MagicCall, session: Any) -> Any:
    """``%%dpquery`` on a statistical-privacy session: the next secret part answers it (NOT DP)."""
    args = call.args
    dp_only = given(args, ANSWER_OPTIONS + DECISION_OPTIONS)
    if dp_only:
        raise ConfigurationError(
            f"{dp_only[0]} does not apply to a statistical-privacy session: each query's cost is fixed by the "
            "prior and its part",
            hint="%%dpquery [--dry-run] [--out name] with one SELECT COUNT(*) ... WHERE ...",
        )
    sql = call.body or ""
    if args.dry_run:
        return magic.preview(session.preview(sql), call.target)
    return magic.deliver(session.query(sql), call.target)


def dpbatch(magic: MagicsBase, call: MagicCall, session: Any) -> Any:
    raise ConfigurationError("%%dpbatch needs a differential-privacy session (not statistical privacy)")


def dpbudget(magic: MagicsBase, call: MagicCall, session: Any) -> Any:
    """``%dpbudget`` of a statistical-privacy session: its δ and the charged parts."""
    args = call.args
    if args.map or args.afford or args.widget:
        raise ConfigurationError(
            "a statistical-privacy session has no overlap map, affordability or widget",
            hint="%dpbudget (or --json) shows its δ and the charged parts",
        )
    if args.json:
        return {
            "notion": session.label,
            "epsilon": session.epsilon,
            "delta_target": session.delta_target,
            "delta_spent": session.delta_spent,
            "parts": session.parts,
            "parts_left": session.parts_left,
            "n": session.n,
        }
    display(SPBudgetReport(session))
    return None


def dpconsistent(magic: MagicsBase, call: MagicCall, session: Any) -> Any:
    raise ConfigurationError(
        "%dpconsistent refines differentially private releases; a statistical-privacy session's are not included",
        hint="bind a DP session with %dpsession to use it",
    )


def dpplot(magic: MagicsBase, call: MagicCall, session: Any) -> Any:
    raise ConfigurationError(
        "%dpplot draws the DP overlap accounting; a statistical-privacy session has none",
        hint="%dpbudget shows its δ and the charged parts",
    )
