"""IPython magics: ``%dpsession``, ``%%dpquery``, ``%dpbudget``, ``%dpplot`` (the thin presentation layer).

Conventions follow JupySQL: options through ``magic_arguments`` (so ``%dpquery?`` shows real help),
defaults through traitlets (``%config DPMagic.default_bound = "chromatic"``), and ``name <<`` at the start of
a ``%%dpquery`` line assigns the answer's DataFrame to a variable.  Errors are shown as one readable
message (IPython's ``UsageError``, no traceback) unless ``%config DPMagic.debug = True``.

One module over 400 lines because IPython's ``Magics`` class holds every magic as one method with its option
declarations (the help ``%dpquery?`` shows); the text parsing is in :mod:`dpmagic.presentation.magic_cells` and what
``%dpbudget`` displays in :mod:`dpmagic.presentation.budget_report`.
"""

from __future__ import annotations

import functools
import sys
import warnings
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import pandas as pd
from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display
from traitlets import Bool, CaselessStrEnum, Float, TraitError, Unicode, validate
from traitlets.config import Configurable

from dpmagic.accountant.ledger import default_ledger_path
from dpmagic.backends.bind import is_file_source
from dpmagic.domain.schema import Schema
from dpmagic.errors import ConfigurationError, DPMagicError
from dpmagic.presentation.budget_report import BudgetReport, SPBudgetReport, budget_summary, panel_view
from dpmagic.presentation.magic_cells import ASSIGN, SELECT, cost_arg, split_batch_cell, unquote
from dpmagic.query.regions import EmptyRegionWarning, empty_region_message
from dpmagic.releases.postprocess import POSTPROCESS_OPTIONS
from dpmagic.session.session import Session

# budget_summary and split_batch_cell are re-exported (their homes: dpmagic.presentation.budget_report, dpmagic.presentation.magic_cells)
__all__ = ["DPMagic", "current_session", "budget_summary", "split_batch_cell"]

P = ParamSpec("P")
R = TypeVar("R")

_STATE: dict[str, Any] = {"session": None}

#: the sessions that already print a progress line in a terminal (subscribed once each)
_TERMINAL_PROGRESS: weakref.WeakSet[Session] = weakref.WeakSet()


def current_session() -> Any:
    """The session bound by the last ``%dpsession`` in this kernel (a :class:`Session`, or a
    :class:`~dpmagic.statistical.StatisticalSession` after ``--privacy statistical``)."""
    s = _STATE["session"]
    if s is None:
        raise ConfigurationError(
            "no dpmagic session yet", hint="bind one first: %dpsession df --schema schema.json --budget epsilon=1"
        )
    return s


def _friendly(func: Callable[Concatenate[DPMagic, P], R]) -> Callable[Concatenate[DPMagic, P], R]:
    """Turn dpmagic errors into one readable message (no traceback) unless DPMagic.debug is set."""

    @functools.wraps(func)
    def wrapper(self: DPMagic, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(self, *args, **kwargs)
        except DPMagicError as exc:
            if self.debug:
                raise
            hint = f"\n  hint: {exc.hint}" if getattr(exc, "hint", None) else ""
            raise UsageError(f"{type(exc).__name__}: {exc}{hint}") from None

    return wrapper


@magics_class
class DPMagic(Magics, Configurable):
    """Differentially private queries on a DataFrame, inside a hard budget."""

    default_bound = CaselessStrEnum(
        ["exact", "clique", "chromatic", "sequential"],
        default_value="exact",
        help="Bound charged by new sessions: exact, clique, chromatic or sequential.",
    ).tag(config=True)
    time_limit = Float(
        10.0, help="Seconds the exact overlap search may take before the proven upper bound is charged."
    ).tag(config=True)
    debug = Bool(False, help="Show full tracebacks instead of one-line errors.").tag(config=True)
    widget = Bool(True, help="Display the live budget panel when %dpsession binds a session.").tag(config=True)
    panel = CaselessStrEnum(
        ["side", "inline", "none"],
        default_value="side",
        help="Where the live budget panel goes: 'side' (JupyterLab's side panel via the sidecar package, so it "
        "stays in sight; falls back to 'inline' without sidecar), 'inline' (under the %dpsession cell) or 'none'. "
        "Where widgets cannot render (terminal IPython) a text panel is printed.",
    ).tag(config=True)
    postprocess = Unicode(
        "",
        help="Free post-processing of every answer (noisy values and declared bounds only, no charge): a comma "
        "list of 'integer' (counts as whole numbers) and 'nonnegative' (counts and non-negative SUMs clipped at 0).",
    ).tag(config=True)
    default_definition = CaselessStrEnum(
        ["pure", "zcdp", "gdp"],
        default_value="pure",
        help="Privacy definition of a bare --budget number: pure (ε), zcdp (ρ) or gdp (μ).",
    ).tag(config=True)
    default_budget = Unicode("", help="Budget used when %dpsession gets no --budget, e.g. 'epsilon=1.0'.").tag(
        config=True
    )
    ledger = Unicode(
        "",
        help="Ledger file for new sessions ('' = $DPMAGIC_LEDGER or ~/.local/share/dpmagic/ledger.sqlite; "
        "'memory' = not durable, for demos and tests).",
    ).tag(config=True)

    @validate("time_limit")
    def _check_time_limit(self, proposal: Any) -> float:
        value = proposal["value"]
        if not (value > 0 and value < float("inf")):
            raise TraitError(f"DPMagic.time_limit must be a positive number of seconds, got {value!r}")
        return value

    @validate("postprocess")
    def _check_postprocess(self, proposal: Any) -> str:
        options = [o.strip().lower() for o in proposal["value"].split(",") if o.strip()]
        wrong = [o for o in options if o not in ("integer", "nonnegative")]
        if wrong:
            raise TraitError(f"DPMagic.postprocess: unknown option {wrong[0]!r}; use 'integer' and/or 'nonnegative'")
        return ",".join(options)

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        Magics.__init__(self, shell=shell)
        Configurable.__init__(self, config=shell.config if shell is not None else None, **kwargs)
        if shell is not None:
            shell.configurables.append(self)

    # -- %dpsession -------------------------------------------------------------------------------------
    @magic_arguments()
    @argument(
        "data",
        help="The sensitive rows: a variable holding a pandas DataFrame, a DuckDB relation or a Spark DataFrame, "
        "or a Parquet/CSV path or glob (bound through DuckDB, without loading the rows into the kernel).",
    )
    @argument("--schema", "-s", required=True, help="Schema JSON file, or the name of a Schema / dict variable.")
    @argument(
        "--budget",
        "-b",
        default=None,
        help="Total budget: epsilon=1.0 (pure DP), rho=0.5 (zCDP), mu=1.0 (GDP), or a number in "
        "DPMagic.default_definition (default: DPMagic.default_budget).",
    )
    @argument("--bound", default=None, help="Bound to charge: exact (default), clique, chromatic or sequential.")
    @argument("--default-cost", type=float, default=None, help="Cost of a query that names none (default: budget/10).")
    @argument(
        "--clamp", action="store_true", help="Clamp numbers outside the declared bounds instead of refusing the data."
    )
    @argument(
        "--ledger",
        default=None,
        help="Ledger file (default: DPMagic.ledger, else ~/.local/share/dpmagic/ledger.sqlite); 'memory' for a throw-away one.",
    )
    @argument(
        "--delta",
        type=float,
        default=None,
        help="δ used to report the (ε, δ) equivalent of zCDP/GDP sessions (default 1e-6); with --privacy "
        "statistical: the δ target.",
    )
    @argument(
        "--privacy",
        choices=["differential", "statistical"],
        default="differential",
        help="differential (default), or statistical: Breutigam & Reischuk's secret-partition statistical "
        "privacy, which is NOT differential privacy (needs --prior, --parts, --epsilon, --delta).",
    )
    @argument(
        "--prior", default=None, help="Statistical privacy: the i.i.d. prior, 'bernoulli(p)' or 'categorical(p1, ...)'."
    )
    @argument(
        "--parts", type=int, default=None, help="Statistical privacy: the number m of secret parts (one query each)."
    )
    @argument("--epsilon", type=float, default=None, help="Statistical privacy: the ε at which δ is accounted.")
    @argument(
        "--column", default=None, help="Statistical privacy: the column the prior describes (default: the only one)."
    )
    @argument(
        "--panel",
        choices=["side", "inline", "none"],
        default=None,
        help="Where the budget panel goes (default: DPMagic.panel = side, JupyterLab's side panel).",
    )
    @line_magic
    @_friendly
    def dpsession(self, line: str) -> None:
        """Bind a DataFrame, its public schema and a privacy budget: ``%dpsession df --schema s.json --budget epsilon=1``."""
        args = parse_argstring(self.dpsession, line)
        ns = self.shell.user_ns if self.shell is not None else {}
        data, table_name = _data_arg(args.data, ns)
        schema_arg = unquote(args.schema)
        schema: Any = ns.get(schema_arg) if schema_arg in ns else schema_arg
        if isinstance(schema, str) and not Path(schema).is_file():
            raise ConfigurationError(f"--schema {schema_arg!r} is neither a variable nor an existing file")
        if not isinstance(schema, (Schema, dict, str, Path)):
            raise ConfigurationError(
                f"--schema {schema_arg!r} is a {type(schema).__name__}, not a Schema, dict or path"
            )
        ledger = unquote(args.ledger or self.ledger or str(default_ledger_path()))
        if args.privacy == "statistical":
            if not isinstance(data, pd.DataFrame):
                raise ConfigurationError(f"{args.data!r} is a {type(data).__name__}, not a pandas DataFrame")
            self._bind_statistical(args, data, schema, ledger)
            return
        sp_only = [f"--{k}" for k in ("prior", "parts", "epsilon", "column") if getattr(args, k) is not None]
        if sp_only:
            raise ConfigurationError(
                f"{sp_only[0]} applies only to --privacy statistical", hint="a DP session takes --budget"
            )
        session = Session(
            data,
            schema,
            self._budget_spec(args.budget),
            bound=args.bound or self.default_bound,
            default_cost=args.default_cost,
            out_of_range="clamp" if args.clamp else "error",
            ledger=ledger,
            time_limit=self.time_limit,
            delta=1e-6 if args.delta is None else args.delta,
            table_names=(table_name,),
        )
        _STATE["session"] = session
        cur = session.currency
        where = args.panel or self.panel
        if self.widget and where != "none":
            self._show_panel(session, where)
        print(
            f"dpmagic session: table {session.schema.table!r}"
            + (f" (data set {session.schema.dataset!r})" if session.schema.dataset else "")
            + f", budget "
            f"{cur.parameter}={session.budget.total:g} ({cur.definition}), charging the {session.bound} bound; "
            f"{cur.parameter} already charged: {session.spent:.4g}; ledger: {session.ledger.path or 'in memory'}"
        )

    def _bind_statistical(self, args: Any, data: pd.DataFrame, schema: Any, ledger: str) -> None:
        """``%dpsession … --privacy statistical``: a :class:`~dpmagic.statistical.StatisticalSession` (NOT DP)."""
        from dpmagic.statistical.sp_session import StatisticalSession

        wrong = [f"--{k}" for k in ("budget", "bound", "default_cost") if getattr(args, k) is not None]
        if wrong:
            raise ConfigurationError(
                f"{wrong[0].replace('_', '-')} applies only to differential privacy",
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
        _STATE["session"] = session
        print(
            f"dpmagic STATISTICAL-PRIVACY session — {session.label}.\n"
            f"  table {session.schema.table!r}"
            + (f" (data set {session.schema.dataset!r})" if session.schema.dataset else "")
            + f"; n = {session.n} rows (disclosed: the part sizes derive from it); {session.parts} secret parts, "
            f"one %%dpquery COUNT(*) each; δ(ε={session.epsilon:g}) target {session.delta_target:g}, already "
            f"charged {session.delta_spent:.4g}; ledger: {session.ledger.path or 'in memory'} (key {session.ledger_key}, "
            "separate from any DP budget)" + (f"\n  no further queries: {session.locked}" if session.locked else "")
        )

    def _show_panel(self, session: Session, where: str) -> None:
        """The panel in the side panel (sidecar), inline, or as text where widgets cannot render."""
        if where not in ("side", "inline"):
            raise ConfigurationError(f"DPMagic.panel must be 'side', 'inline' or 'none', not {where!r}")
        view = panel_view(session)
        if getattr(self.shell, "kernel", None) is None:  # terminal IPython: no widget frontend
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

    def _budget_spec(self, given: str | None) -> str:
        spec = unquote(given) if given else self.default_budget
        if not spec:
            raise ConfigurationError(
                "%dpsession needs --budget (e.g. --budget epsilon=1.0), or set %config DPMagic.default_budget"
            )
        try:
            float(spec)
        except ValueError:
            return spec
        from dpmagic.accountant.currency import currency_for

        return f"{currency_for(self.default_definition).parameter}={spec}"

    # -- %%dpquery --------------------------------------------------------------------------------------
    @magic_arguments()
    @argument(
        "--epsilon", "-e", default=None, help="Cost in ε (pure-DP sessions), or 'max' for all that is affordable here."
    )
    @argument("--rho", "-r", default=None, help="Cost in ρ (zCDP sessions), or 'max'.")
    @argument("--mu", "-m", default=None, help="Cost in μ (GDP sessions), or 'max'.")
    @argument(
        "--ci",
        type=float,
        default=None,
        help="Accuracy first: target half-width of the 95%% interval, in the answer's units.",
    )
    @argument("--min-rows", type=int, default=None, help="With --ci on AVG: a public lower bound on each group's size.")
    @argument(
        "--dry-run",
        action="store_true",
        help="Preview the cost, the overlapping queries and the worst-case row; spend nothing.",
    )
    @argument(
        "--fresh", action="store_true", help="Draw (and charge) anew even if this exact query was answered before."
    )
    @argument("--out", "-o", default=None, help="Assign the answer's DataFrame to this variable (same as 'name <<').")
    @argument(
        "--nonneg",
        action="store_true",
        help="Free post-processing: clip counts (and SUMs of non-negative columns) and their intervals at 0.",
    )
    @argument("--integer", action="store_true", help="Free post-processing: counts as whole numbers.")
    @argument("--fnr", type=float, default=None, help="Decision query (GROUP BY … HAVING): false-negative target β.")
    @argument("--fpr", type=float, default=None, help="Decision query: false-positive target α (ProBE's estimate).")
    @argument("--max-epsilon", type=float, default=None, help="Decision query: cap on the pure-ε loss of a row.")
    @argument("--max-group-size", type=int, default=None, help="Decision query: public bound on a group's size.")
    @line_cell_magic
    @_friendly
    def dpquery(self, line: str, cell: str | None = None) -> Any:
        """Answer a SQL query with differential privacy.

        ::

            %%dpquery [name <<] [--epsilon E | --rho R | --mu M] [--out name]
            SELECT sex, COUNT(*) AS n, AVG(age) FROM adult WHERE age >= 30 GROUP BY sex

        Supported SQL: SELECT [group columns,] COUNT(*) / SUM(col) / AVG(col) FROM t [WHERE ...]
        [GROUP BY categorical columns]; WHERE is an AND of per-column predicates (=, <>, <, <=, >, >=,
        BETWEEN, IN, NOT IN, NOT) with OR allowed between predicates on the same column.  The cost is
        charged before any row is read; a query that would exceed the budget is refused and costs nothing.
        Re-running an identical cell returns the stored answer for free (``--fresh`` draws anew).
        """
        target = None
        m = ASSIGN.match(line)
        if m:
            target, line = m.group(1), m.group(2)
        if cell is None:
            sm = SELECT.search(line)
            if sm is None:
                raise ConfigurationError("%dpquery needs a SELECT statement (use %%dpquery for a cell)")
            line, sql = line[: sm.start()], line[sm.start() :]
        else:
            sql = cell
        args = parse_argstring(self.dpquery, line)
        target = args.out or target
        session = current_session()
        if _is_statistical(session):
            return self._sp_query(session, args, sql, target)
        if args.fnr is not None or args.fpr is not None or args.max_epsilon is not None:
            if args.fnr is None:
                raise ConfigurationError("a decision query needs --fnr (its false-negative target β)")
            if any(getattr(args, k) is not None for k in ("epsilon", "rho", "mu", "ci")):
                raise ConfigurationError(
                    "a decision query (--fnr/--fpr) sets its own cost: drop --epsilon/--rho/--mu/--ci",
                    hint="cap it with --max-epsilon",
                )
            answer = session.decide(
                sql,
                fnr=args.fnr,
                fpr=args.fpr,
                max_epsilon=args.max_epsilon,
                dry_run=args.dry_run,
                max_group_size=args.max_group_size,
            )
            return self._deliver(answer, target)
        costs = {k: cost_arg(getattr(args, k), k) for k in ("epsilon", "rho", "mu")}
        # public check before anything is charged: a WHERE clause empty on the declared domain (schema only)
        empty = empty_region_message(session.parse(sql))
        if empty is not None:
            print(f"⚠ warning: {empty}", file=sys.stderr, flush=True)
        if args.dry_run:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", EmptyRegionWarning)
                preview = session.preview(sql, ci=args.ci, min_rows=args.min_rows, **costs)
            if target is not None and self.shell is not None:
                self.shell.user_ns[target] = preview
            return preview
        options = [o.strip() for o in self.postprocess.split(",") if o.strip()]
        options += [o for o, on in (("nonnegative", args.nonneg), ("integer", args.integer)) if on]
        bad = [o for o in options if o not in POSTPROCESS_OPTIONS]
        if bad:
            raise ConfigurationError(
                f"DPMagic.postprocess: unknown option(s) {bad}; choose from {', '.join(POSTPROCESS_OPTIONS)}"
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", EmptyRegionWarning)  # already said above, before the charge
            result = session.query(
                sql, ci=args.ci, min_rows=args.min_rows, fresh=args.fresh, postprocess=tuple(options), **costs
            )
        return self._deliver(result, target)

    def _deliver(self, result: Any, target: str | None) -> Any:
        """Return the answer to the cell, or (``name <<`` / ``--out``) store its DataFrame and display it."""
        if target is None:
            return result
        if self.shell is not None:
            self.shell.user_ns[target] = result.df
        display(result)
        return None

    def _sp_query(self, session: Any, args: Any, sql: str, target: str | None) -> Any:
        """``%%dpquery`` on a statistical-privacy session: the next secret part answers it (NOT DP)."""
        dp_only = [
            f"--{k.replace('_', '-')}"
            for k in ("epsilon", "rho", "mu", "ci", "min_rows")
            if getattr(args, k) is not None
        ] + [f"--{k}" for k in ("fresh", "nonneg", "integer") if getattr(args, k)]
        if dp_only:
            raise ConfigurationError(
                f"{dp_only[0]} does not apply to a statistical-privacy session: each query's cost is fixed by the "
                "prior and its part",
                hint="%%dpquery [--dry-run] [--out name] with one SELECT COUNT(*) ... WHERE ...",
            )
        if args.dry_run:
            preview = session.preview(sql)
            if target is not None and self.shell is not None:
                self.shell.user_ns[target] = preview
            return preview
        result = session.query(sql)
        return self._deliver(result, target)

    # -- %%dpbatch --------------------------------------------------------------------------------------
    @magic_arguments()
    @argument("--epsilon", "-e", default=None, help="Cost in ε (pure-DP sessions), or 'max'.")
    @argument("--rho", "-r", default=None, help="Cost in ρ (zCDP sessions), or 'max'.")
    @argument("--mu", "-m", default=None, help="Cost in μ (GDP sessions), or 'max'.")
    @argument(
        "--strategy",
        "-s",
        default="auto",
        help="auto (smallest expected RMSE), identity, workload, hierarchical, opt, opt_gaussian (zCDP/GDP, one ordered column).",
    )
    @argument("--rmse", type=float, default=None, help="Accuracy first: the smallest cost with expected RMSE ≤ this.")
    @argument("--dry-run", action="store_true", help="Preview strategies, expected RMSE and the charge; spend nothing.")
    @argument("--out", "-o", default=None, help="Assign the answer's DataFrame to this variable (same as 'name <<').")
    @cell_magic
    @_friendly
    def dpbatch(self, line: str, cell: str) -> Any:
        """Answer a whole workload at once (matrix mechanism, HDMM strategies; one charge).

        ::

            %%dpbatch [name <<] [--epsilon E | --rho R | --mu M] [--strategy S] [--rmse T] [--dry-run]
            prefix(age) * identity(sex) + marginals([race, education], 1)
            WHERE "hours-per-week" >= 40

        or several ``SELECT COUNT(*) FROM t WHERE <box>;`` statements (measured with noise calibrated to their
        exact batch sensitivity).  Workload language: :mod:`dpmagic.batch.spec`.
        """
        target = None
        m = ASSIGN.match(line)
        if m:
            target, line = m.group(1), m.group(2)
        args = parse_argstring(self.dpbatch, line)
        target = args.out or target
        session = current_session()
        if _is_statistical(session):
            raise ConfigurationError("%%dpbatch needs a differential-privacy session (not statistical privacy)")
        costs = {k: cost_arg(getattr(args, k), k) for k in ("epsilon", "rho", "mu")}
        workload, where = split_batch_cell(cell)
        out = session.batch(
            workload, where=where, strategy=args.strategy, rmse=args.rmse, dry_run=args.dry_run, **costs
        )
        if args.dry_run:
            if target is not None and self.shell is not None:
                self.shell.user_ns[target] = out
            return out
        return self._deliver(out, target)

    # -- %dpbudget ---------------------------------------------------------------------------------------
    @magic_arguments()
    @argument("--json", action="store_true", help="Return the summary as a dict instead of displaying it.")
    @argument("--map", nargs=2, metavar=("COL1", "COL2"), default=None, help="Return the budget map of two columns.")
    @argument("--afford", default=None, metavar="SQL", help="How much a query (quoted SQL) could still be given.")
    @argument("--widget", action="store_true", help="Display the live budget panel (it updates after every query).")
    @line_magic
    @_friendly
    def dpbudget(self, line: str) -> Any:
        """Show spent / remaining budget, the four overlap bounds and the list of queries with costs.

        ``--map COL1 COL2`` returns the current load of every (COL1, COL2) cell as a DataFrame (where the budget
        has gone); ``--json`` returns the summary as a dict.
        """
        args = parse_argstring(self.dpbudget, line)
        session = current_session()
        if _is_statistical(session):
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
        if args.map:
            return session.budget_map(*args.map)
        if args.afford:
            return round(session.affordable(unquote(args.afford)), 10)  # drop float-slack digits from the display
        if args.widget:
            self._show_panel(session, "inline")
            return None
        summary = budget_summary(session)
        if args.json:
            return summary
        display(BudgetReport(session, summary))
        return None

    # -- %dpplot ------------------------------------------------------------------------------------------
    @magic_arguments()
    @argument(
        "what",
        choices=["graph", "budget", "map"],
        help="graph: the query graph; budget: charged over time; map: heat map.",
    )
    @argument("columns", nargs="*", help="For 'map': the two columns.")
    @line_magic
    @_friendly
    def dpplot(self, line: str) -> Any:
        """Plot the session's accounting: ``%dpplot graph``, ``%dpplot budget``, ``%dpplot map COL1 COL2``."""
        from dpmagic.presentation import plots

        args = parse_argstring(self.dpplot, line)
        session = current_session()
        if _is_statistical(session):
            raise ConfigurationError(
                "%dpplot draws the DP overlap accounting; a statistical-privacy session has none",
                hint="%dpbudget shows its δ and the charged parts",
            )
        if args.what == "graph":
            return plots.plot_graph(session)
        if args.what == "budget":
            return plots.plot_budget(session)
        if len(args.columns) != 2:
            raise ConfigurationError("%dpplot map needs two column names: %dpplot map COL1 COL2")
        return plots.plot_map(session, *args.columns)


def _is_statistical(session: object) -> bool:
    from dpmagic.statistical.sp_session import StatisticalSession

    return isinstance(session, StatisticalSession)


def _data_arg(arg: str, ns: Mapping[str, Any]) -> tuple[Any, str]:
    """The data ``%dpsession`` binds and the table name FROM may use: a notebook variable (pandas, DuckDB or
    Spark), else a Parquet/CSV path or glob (a DuckDB binding; a missing file is named by the binding)."""
    if arg in ns:
        data = ns[arg]
        if isinstance(data, (str, Path)):
            return data, Path(str(data)).name.split(".")[0] or arg
        kind = f"{type(data).__module__}.{type(data).__name__}"
        pair = (  # (a DuckDB connection or a SparkSession, "table"), as Session and backend_for take it
            isinstance(data, tuple)
            and len(data) == 2
            and isinstance(data[1], str)
            and type(data[0]).__module__.lstrip("_").startswith(("duckdb", "pyspark."))
        )
        if pair or (isinstance(data, list) and is_file_source(data)):  # a list of Parquet/CSV paths
            return data, arg
        if not (isinstance(data, pd.DataFrame) or kind.lstrip("_").startswith(("duckdb", "pyspark."))):
            raise ConfigurationError(
                f"{arg!r} is a {type(data).__name__}, not a pandas DataFrame",
                hint="bind a DataFrame, a DuckDB relation, a Spark DataFrame or a Parquet/CSV file path",
            )
        return data, arg
    text = unquote(arg)
    low = text.lower()
    if any(ch in text for ch in "/\\*?[") or low.endswith((".parquet", ".pq", ".csv", ".tsv", ".csv.gz")):
        return text, Path(text).name.split(".")[0] or "data"
    raise ConfigurationError(
        f"no variable named {arg!r} in the notebook",
        hint="name a DataFrame variable, or give a Parquet/CSV file path (bound through DuckDB)",
    )
