"""``%dpsession``: bind the sensitive data, its public schema and a privacy budget (the session binding family).

``--privacy statistical`` binds a statistical-privacy session instead (NOT differential privacy): its options
and its binding are in :mod:`dpmagic.presentation.magics.statistical`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from dpmagic.accountant.ledger import default_ledger_path
from dpmagic.errors import ConfigurationError
from dpmagic.presentation.magic_cells import unquote
from dpmagic.presentation.magics.base import MagicsBase, bind, friendly
from dpmagic.presentation.magics.budget import PANEL_CHOICES, show_panel

__all__ = ["SessionMagics"]

#: options of a statistical-privacy session only (refused in a differential-privacy one)
SP_ONLY = ("prior", "parts", "epsilon", "column")


@magics_class
class SessionMagics(MagicsBase):
    """``%dpsession``."""

    @magic_arguments()
    @argument(
        "data",
        nargs="?",
        default=None,
        help="The sensitive rows: a variable holding a pandas DataFrame, a DuckDB relation or a Spark DataFrame, "
        "or a Parquet/CSV path or glob (bound through DuckDB, without loading the rows into the kernel).",
    )
    @argument("--schema", "-s", default=None, help="Schema JSON file, or the name of a Schema / dict variable.")
    @argument(
        "--server",
        default=None,
        help="A custodian server's URL (dpmagic serve): the data, ledger and budgets stay there; needs --dataset.",
    )
    @argument("--dataset", default=None, help="With --server: the served data set's id.")
    @argument(
        "--token-file",
        default=None,
        help="With --server: a file holding your token (default: $DPMAGIC_TOKEN_FILE, else $DPMAGIC_TOKEN; never "
        "the token itself in a notebook).",
    )
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
        "--neighbors",
        choices=["add-remove", "replace"],
        default=None,
        help="Neighbouring datasets: add-remove (default: one person's row is added or removed) or replace "
        "(bounded DP: one row is changed; the charged loss is the worst pair of rows).",
    )
    @argument(
        "--clamp", action="store_true", help="Clamp numbers outside the declared bounds instead of refusing the data."
    )
    @argument(
        "--ledger",
        default=None,
        help="Ledger file (default: DPMagic.ledger, else ~/.local/share/dpmagic/ledger.sqlite); 'memory' for a "
        "throw-away one.",
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
        choices=list(PANEL_CHOICES),
        default=None,
        help="Where the live budget panel goes (default: DPMagic.panel = auto: JupyterLab's right side bar in "
        "JupyterLab, under this cell in Notebook 7 and elsewhere); side, inline (under this cell) or none.",
    )
    @line_magic
    @friendly
    def dpsession(self, line: str) -> None:
        """Bind a DataFrame, its public schema and a privacy budget: ``%dpsession df --schema s.json --budget epsilon=1``."""
        from dpmagic.session.session import Session

        args = self.parse("dpsession", line).args
        if args.server is not None or args.dataset is not None or args.token_file is not None:
            remote = bind_remote(args)
            where = args.panel or self.panel
            if self.widget and where != "none":  # the budgets as the server reports them, refreshed after each query
                show_panel(self, remote, where)
            return
        if args.data is None or args.schema is None:
            raise ConfigurationError(
                "%dpsession needs the data and --schema",
                hint="%dpsession df --schema schema.json --budget epsilon=1, or %dpsession --server URL --dataset ID",
            )
        ns: Mapping[str, Any] = self.shell.user_ns if self.shell is not None else {}
        data, table_name = data_arg(args.data, ns)
        schema = schema_arg(args.schema, ns)
        ledger = unquote(args.ledger or self.ledger or str(default_ledger_path()))
        if args.privacy == "statistical":
            from dpmagic.presentation.magics import statistical

            statistical.bind_session(self, args, data, schema, ledger)
            return
        sp_only = [f"--{k}" for k in SP_ONLY if getattr(args, k) is not None]
        if sp_only:
            raise ConfigurationError(
                f"{sp_only[0]} applies only to --privacy statistical", hint="a DP session takes --budget"
            )
        session = Session(
            data,
            schema,
            self.budget_spec(args.budget),
            bound=args.bound or self.default_bound,  # type: ignore[arg-type]
            default_cost=args.default_cost,
            out_of_range="clamp" if args.clamp else "error",
            ledger=ledger,
            time_limit=self.time_limit,
            delta=1e-6 if args.delta is None else args.delta,
            neighbors=args.neighbors or "add-remove",
            table_names=(table_name,),
        )
        bind(session)
        cur = session.currency
        where = args.panel or self.panel
        if self.widget and where != "none":
            show_panel(self, session, where)
        print(
            f"dpmagic session: table {session.schema.table!r}"
            + (f" (data set {session.schema.dataset!r})" if session.schema.dataset else "")
            + f", budget {cur.parameter}={session.budget.total:g} ({cur.definition}), charging the {session.bound} "
            "bound"
            + (", replace-one neighbours" if session.neighbors == "replace" else "")
            + (f"; privacy unit: {session.schema.unit_label}" if session.schema.person_unit is not None else "")
            + f"; {cur.parameter} already charged: {session.spent:.4g}; ledger: {session.ledger.path or 'in memory'}"
        )

    def budget_spec(self, given: str | None) -> str:
        """``--budget`` (or ``DPMagic.default_budget``); a bare number is in ``DPMagic.default_definition``."""
        spec = unquote(given) if given else self.default_budget
        if not spec:
            raise ConfigurationError(
                "%dpsession needs --budget (e.g. --budget epsilon=1.0), or set %config DPMagic.default_budget"
            )
        try:
            float(spec)
        except ValueError:
            return str(spec)
        from dpmagic.accountant.currency import currency_for

        return f"{currency_for(self.default_definition).parameter}={spec}"


#: options of a local binding, refused with --server (the custodian fixed them on the server)
LOCAL_ONLY = ("data", "schema", "budget", "bound", "default_cost", "neighbors", "ledger", "delta", "prior", "parts")


def bind_remote(args: Any) -> Any:
    """``%dpsession --server URL --dataset ID [--token-file FILE]``: bind a custodian server's data set."""
    from dpmagic.presentation.remote import RemoteSession, token_from

    if args.server is None or args.dataset is None:
        raise ConfigurationError("a server session needs both --server URL and --dataset ID")
    local = [k for k in LOCAL_ONLY if getattr(args, k) not in (None, False)]
    if local or args.clamp or args.privacy != "differential":
        what = local[0].replace("_", "-") if local else ("clamp" if args.clamp else "privacy")
        raise ConfigurationError(
            f"--{what} does not apply to a server session: the custodian fixed the data, schema and budgets"
            if what != "data"
            else "a server session takes no data: the rows stay on the server"
        )
    session = RemoteSession(unquote(args.server), unquote(args.dataset), token_from(args.token_file))
    bind(session)
    print(
        f"{session.budget()!r}".replace(
            "your quota",
            f"dpmagic server session {session.url}, data set "
            f"{session.dataset!r} ({session.definition}, {session.parameter}); your quota",
            1,
        )
    )
    return session


def schema_arg(arg: str, ns: Mapping[str, Any]) -> Any:
    """``--schema``: a notebook variable holding a Schema or dict, or the path of a schema JSON file."""
    from dpmagic.domain.schema import Schema

    name = unquote(arg)
    schema: Any = ns.get(name) if name in ns else name
    if isinstance(schema, str) and not Path(schema).is_file():
        raise ConfigurationError(f"--schema {name!r} is neither a variable nor an existing file")
    if not isinstance(schema, (Schema, dict, str, Path)):
        raise ConfigurationError(f"--schema {name!r} is a {type(schema).__name__}, not a Schema, dict or path")
    return schema


def data_arg(arg: str, ns: Mapping[str, Any]) -> tuple[Any, str]:
    """The data ``%dpsession`` binds and the table name FROM may use: a notebook variable (pandas, DuckDB or
    Spark), else a Parquet/CSV path or glob (a DuckDB binding; a missing file is named by the binding)."""
    import pandas as pd

    from dpmagic.backends.bind import is_file_source

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
