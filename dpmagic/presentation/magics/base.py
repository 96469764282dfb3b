"""What every magic family shares: the bound session, one readable error, the parsed call, and the one dispatch
between privacy notions.

* :func:`current_session` / :func:`bind`: the session the last ``%dpsession`` bound in this kernel.
* :func:`friendly`: a :class:`~dpmagic.errors.DPMagicError` becomes one line (IPython's ``UsageError``, no
  traceback) unless ``%config DPMagic.debug = True``; a hint that names a Python keyword argument is shown
  with the magic option that does the same (``out_of_range='clamp'`` → ``--clamp``).
* :class:`MagicCall`: a magic line (and cell) parsed before anything else happens: ``name <<``, the options
  (each given at most once), ``--out`` checked as a variable name, the SQL or cell body.
* :func:`routed`: the one place where a magic goes to its statistical-privacy variant
  (:mod:`dpmagic.presentation.magics.statistical`) when the bound session is one; the decorated method is the
  differential-privacy body.
* :func:`compose_magics`: IPython's ``@magics_class`` collects only the magics declared in the body of the
  class it decorates; each family class is decorated itself, and the composed class merges their tables.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from IPython.core.error import UsageError
from IPython.core.magic import Magics, magics_class
from IPython.display import display

from dpmagic.errors import ConfigurationError, DPMagicError
from dpmagic.presentation.magic_cells import ASSIGN, SELECT, check_name, parse_options

__all__ = ["MagicCall", "MagicsBase", "bind", "compose_magics", "current_session", "friendly", "routed"]

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)

_STATE: dict[str, Any] = {"session": None}

#: Python keyword arguments named in library hints → the magic option that does the same.
_OPTION_SPELLINGS = {
    "out_of_range='clamp'": "--clamp (%dpsession)",
    'out_of_range="clamp"': "--clamp (%dpsession)",
    "fresh=True": "--fresh",
    "dry_run=True": "--dry-run",
    "the budget map shows where": "%dpbudget --map COL1 COL2 shows where",
}


def current_session() -> Any:
    """The session bound by the last ``%dpsession`` in this kernel (a :class:`~dpmagic.session.session.Session`,
    or a :class:`~dpmagic.statistical.sp_session.StatisticalSession` after ``--privacy statistical``)."""
    s = _STATE["session"]
    if s is None:
        raise ConfigurationError(
            "no dpmagic session yet", hint="bind one first: %dpsession df --schema schema.json --budget epsilon=1"
        )
    return s


def bind(session: Any) -> None:
    """Make ``session`` the one the magics use (``%dpsession``)."""
    _STATE["session"] = session


def as_options(text: str) -> str:
    """``text`` with the Python keyword arguments it names replaced by the magic options (for magics' errors)."""
    for api, option in _OPTION_SPELLINGS.items():
        text = text.replace(api, option)
    return text


def friendly(func: F) -> F:
    """Turn dpmagic errors into one readable message (no traceback) unless ``DPMagic.debug`` is set."""

    @functools.wraps(func)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return func(self, *args, **kwargs)
        except DPMagicError as exc:
            if getattr(self, "debug", False):
                raise
            hint = f"\n  hint: {as_options(exc.hint)}" if exc.hint else ""
            raise UsageError(f"{type(exc).__name__}: {as_options(str(exc))}{hint}") from None

    return wrapper  # type: ignore[return-value]


@dataclass(frozen=True)
class MagicCall:
    """One magic invocation, parsed: its options, the variable to assign (``name <<`` / ``--out``), its body."""

    args: argparse.Namespace
    target: str | None
    body: str | None


def variant_for(session: object) -> Any:
    """The statistical-privacy variants of the magics when ``session`` is a statistical-privacy session, else None
    (imported on use: a differential-privacy kernel never loads them)."""
    from dpmagic.statistical.sp_session import StatisticalSession

    if isinstance(session, StatisticalSession):
        from dpmagic.presentation.magics import statistical

        return statistical
    return None


def routed(*, assign: bool = False, sql_in_line: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Make ``func(self, call, session)`` a magic ``(self, line, cell=None)``: parse the call (:meth:`MagicsBase.parse`),
    take the bound session, and answer with the statistical-privacy variant of the same name when the session is
    one (the only dispatch between privacy notions), else with ``func`` (the differential-privacy body)."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def magic(self: MagicsBase, line: str, cell: str | None = None) -> Any:
            call = self.parse(func.__name__, line, cell, assign=assign, sql_in_line=sql_in_line)
            session = current_session()
            if func.__name__ != "dpquery" and type(session).__name__ == "RemoteSession":
                from dpmagic.presentation.remote import remote_magic  # a custodian server's session

                return remote_magic(func.__name__, call, session, lambda own: func(self, call, own))
            variant = variant_for(session)
            if variant is not None:
                return getattr(variant, func.__name__)(self, call, session)
            return func(self, call, session)

        return magic

    return decorate


class MagicsBase(Magics):
    """Helpers of every family (the traits live on the composed :class:`~dpmagic.presentation.magics.DPMagic`)."""

    if TYPE_CHECKING:  # DPMagic's configurable traits, as the families read them
        default_bound: str
        time_limit: float
        debug: bool
        widget: bool
        panel: str
        postprocess: str
        default_definition: str
        default_budget: str
        ledger: str

    def parse(
        self, name: str, line: str, cell: str | None = None, *, assign: bool = False, sql_in_line: bool = False
    ) -> MagicCall:
        """The call of magic ``name``: ``name <<`` (if ``assign``), the SQL after the options on a line magic (if
        ``sql_in_line``), the options (each at most once), ``--out`` a usable variable name — all before any
        session is asked anything."""
        target = None
        if assign:
            m = ASSIGN.match(line)
            if m:
                target, line = check_name(m.group(1), "the name before <<"), m.group(2)
        body = cell
        if sql_in_line and cell is None:
            sm = SELECT.search(line)
            if sm is None:
                raise ConfigurationError(f"%{name} needs a SELECT statement (use %%{name} for a cell)")
            line, body = line[: sm.start()], line[sm.start() :]
        args = parse_options(getattr(self, name).parser, line)
        out = getattr(args, "out", None)
        if out is not None:
            out = check_name(out, "--out")
            if target is not None and target != out:
                raise ConfigurationError(f"two names for the answer ({target} << and --out {out}): give one")
            target = out
        return MagicCall(args, target, body)

    def store(self, target: str | None, value: Any) -> None:
        """Assign ``value`` to the notebook variable ``target`` (if any)."""
        if target is not None and self.shell is not None:
            self.shell.user_ns[target] = value

    def deliver(self, result: Any, target: str | None) -> Any:
        """Return the answer to the cell, or (``name <<`` / ``--out``) store its DataFrame and display it."""
        if target is None:
            return result
        self.store(target, result.df)
        display(result)
        return None

    def preview(self, preview: Any, target: str | None) -> Any:
        """A dry run's preview: stored whole under ``target`` (if any) and returned to the cell."""
        self.store(target, preview)
        return preview


def compose_magics(cls: C) -> C:
    """``@magics_class`` for a class composed of family classes: the magics of every ``@magics_class``-decorated
    base (in method-resolution order, nearer bases winning) and of ``cls``'s own body."""
    table: dict[str, dict[str, str]] = {"line": {}, "cell": {}}
    for base in reversed(cls.__mro__[1:]):
        own = base.__dict__.get("magics")
        if base.__dict__.get("registered") and isinstance(own, dict):
            for kind in table:
                table[kind].update(own.get(kind, {}))
    magics_class(cls)  # collects the magics declared in cls's own body (and clears IPython's pending table)
    for kind in table:
        table[kind].update(cls.magics[kind])  # type: ignore[attr-defined]
    cls.magics = table  # type: ignore[attr-defined]
    return cls
