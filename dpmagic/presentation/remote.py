"""The analyst's end of a custodian server: :class:`RemoteSession`, what ``%dpsession --server URL --dataset ID``
binds.  It has the interface the magics use — ``parse``, ``query``, ``preview``, ``affordable``, ``budget``,
``decide``, ``batch``, ``estimate``, ``subscribe`` — so ``%%dpquery`` (every answered-query option, ``--dry-run``,
``--epsilon max``, ``--ci``, ``--fnr``), ``%%dpbatch`` (``--keep``, and ``%dpbatch --from`` follow-ups),
``%dpbudget`` and the live panel (:class:`~dpmagic.presentation.widgets.RemoteBudgetWidget`, refreshed on the
session's events) run unchanged; the rows never leave the server.

The schema is fetched from the server and queries are parsed here too (the same parser, the same public schema):
a query the server would refuse for its SQL is refused before any request, and the empty-region warning is shown
as locally.  Each query carries a fresh ``Idempotency-Key``; a request that fails in transit is retried with the
same key, so the server charges it at most once and a retry returns the stored answer.
"""

from __future__ import annotations

import html
import os
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pandas as pd

from dpmagic.accountant import tables
from dpmagic.accountant.accountant import Accountant
from dpmagic.accountant.currency import Budget, Currency, currency_for
from dpmagic.domain.schema import Schema
from dpmagic.domain.sets import box_from_json
from dpmagic.errors import BudgetExceededError, ConfigurationError, DPMagicError
from dpmagic.presentation.server.wire import decision_from_wire, frame_from_wire, raise_error
from dpmagic.query.model import Query
from dpmagic.query.sql import parse_query
from dpmagic.query.where import check_categories
from dpmagic.releases.postprocess import answer_notes
from dpmagic.session import rendering
from dpmagic.session.events import EventBus, Listener

__all__ = ["RemoteSession", "RemoteAnswer", "RemoteBudget", "TOKEN_ENV", "token_from"]

#: the environment variable holding an analyst's token (never the notebook)
TOKEN_ENV = "DPMAGIC_TOKEN"
#: the environment variable naming a file that holds it (a JupyterHub spawner's secret mount)
TOKEN_FILE_ENV = "DPMAGIC_TOKEN_FILE"


def token_from(token_file: str | Path | None) -> str:
    """The analyst's token: the first line of ``token_file`` (else of ``$DPMAGIC_TOKEN_FILE``), else
    ``$DPMAGIC_TOKEN``."""
    if token_file is None and os.environ.get(TOKEN_FILE_ENV):
        token_file = os.environ[TOKEN_FILE_ENV]
    if token_file is not None:
        p = Path(token_file).expanduser()
        if not p.is_file():
            raise ConfigurationError(f"--token-file {str(p)!r} does not exist")
        text = p.read_text().strip()
        token = text.splitlines()[0].strip() if text else ""
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise ConfigurationError(
            "no token for the server",
            hint=f"set ${TOKEN_ENV} or ${TOKEN_FILE_ENV}, or give --token-file FILE (never the token itself)",
        )
    return token


class RemoteAnswer:
    """A released answer (or a public one, or a dry run) from the server; ``df`` is the released table.

    A plain answer (``"render": "client"``) is rendered here, with :mod:`dpmagic.session.rendering` as a local
    :class:`~dpmagic.session.results.QueryResult` is: its notes come from the released values and ``query`` (parsed
    here from the same SQL and public schema).  Anything else carries the server's own rendering."""

    def __init__(self, body: dict[str, Any], query: Query | None = None, currency: Currency | None = None) -> None:
        self.body = body
        self.kind: str = body["kind"]
        self.df = frame_from_wire(body) if "columns" in body else pd.DataFrame()
        self.cost: float = float(body.get("cost", 0.0))
        self.cached: bool = bool(body.get("cached", False))
        self.entry_id: int | None = body.get("entry_id")
        self.query, self.currency = query, currency
        self.spent: float = float(body.get("spent", 0.0))
        self.budget: float = float(body.get("budget", 0.0))
        self._client = body.get("render") == "client" and query is not None and currency is not None

    @property
    def notes(self) -> list[str]:
        """Plain-language notes on the answer, from the released values only (computed when shown, as locally)."""
        if self._client:
            return answer_notes(self.query, self.df)  # type: ignore[arg-type]
        return list(self.body.get("notes", []))

    @property
    def admissible(self) -> bool:
        return bool(self.body.get("admissible", True))

    def summary(self) -> str:
        return str(self.body.get("summary") or self.body.get("text", ""))

    def noise_description(self) -> str:
        return str(self.body.get("noise", ""))

    def _repr_html_(self) -> str:
        if self._client:
            note = self.body.get("rerun_note")
            return (f"<p>{html.escape(note)}</p>" if note else "") + rendering.result_html(self)  # type: ignore[arg-type]
        return str(self.body.get("html") or f"<pre>{html.escape(repr(self))}</pre>")

    def __repr__(self) -> str:
        if self._client:
            note = self.body.get("rerun_note")
            return (f"{note}\n" if note else "") + rendering.result_text(self)  # type: ignore[arg-type]
        return str(self.body.get("text", ""))


class RemoteBudget:
    """``%dpbudget`` on a server session: your quota and the data set's global budget."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    def __repr__(self) -> str:
        b, p = self.body, self.body["parameter"]
        q, g = b["quota"], b["global"]
        return (
            f"your quota: {q['spent']:.4g} of {q['budget']:.4g} {p} charged ({q['queries']} queries), "
            f"{q['remaining']:.4g} left\n"
            f"global budget (everyone's queries, by their maximum overlap): {g['spent']:.4g} of {g['budget']:.4g} "
            f"{p} charged, {g['remaining']:.4g} left"
        )

    def _repr_html_(self) -> str:
        return "<pre>" + html.escape(repr(self)) + "</pre>"

    def summary(self) -> dict[str, Any]:
        """``%dpbudget --json``: the keys of a local summary for YOUR quota (``spent``, ``remaining``,
        ``budget``, ``queries``, ``parameter``, ``definition``), and the data set's ``global`` budget."""
        b = self.body
        return {"definition": b["definition"], "parameter": b["parameter"], **b["quota"], "global": b["global"]}


class OwnAccounting:
    """Your own accounting on a server data set, replayed on your side: what ``%dpplot`` and ``%dpbudget
    --map / --widget`` draw for a server session.

    The server sends your own charges only (their regions, from your SQL and the public schema, and their costs:
    nothing from the rows); they are charged in order into an exact overlap accountant over the public schema with
    your quota as its budget — the accountant your quota is on the server, so the same bounds.  Everyone else's
    queries stay on the server: the global budget is in ``%dpbudget``.  It has the attributes
    :mod:`dpmagic.presentation.plots` and the panel read from a :class:`~dpmagic.Session`."""

    def __init__(self, remote: RemoteSession) -> None:
        quota = remote.budget().body["quota"]
        entries = remote._call("GET", "/ledger")["entries"]
        self.schema, self.currency = remote.schema, remote.currency
        self.bound: str = "exact"
        # a quota lowered below what is charged: drawn against what is charged (every replayed charge then fits)
        total = max(float(quota["budget"]), float(quota["spent"]))
        self.budget = Budget(self.currency, total, float(quota.get("delta", 1e-6)))
        self.accountant = Accountant(self.budget, self.schema, bound="exact", neighbors=remote.neighbors)  # type: ignore[arg-type]
        for e in entries:
            box = box_from_json(e["coverage"], self.schema)
            self.accountant.charge(box, float(e["cost"]), sql=str(e["sql"]), canonical=str(e["canonical"]))

    @property
    def spent(self) -> float:
        return self.accountant.spent

    @property
    def remaining(self) -> float:
        return self.accountant.remaining

    def budget_map(self, first: str, second: str) -> pd.DataFrame:
        return tables.budget_map(self.accountant, first, second)

    def ledger_frame(self) -> pd.DataFrame:
        return tables.ledger_frame(self.accountant)

    def bounds(self) -> Any:
        return self.accountant.summary()


class RemoteEstimate:
    """A batch estimate kept on the server for you (:meth:`RemoteSession.estimate`): the methods of a local
    :class:`~dpmagic.batch.estimate.BatchEstimate`, each answered there from the released estimate — post-processing,
    charged nothing — and returned as the same :class:`~dpmagic.batch.estimate.DerivedAnswer` (or DataFrame)."""

    def __init__(self, session: RemoteSession, info: dict[str, Any]) -> None:
        self.session, self.info = session, info
        self.name: str = info["name"]
        self.columns: tuple[str, ...] = tuple(info["columns"])
        self.entry_id: int = int(info["entry_id"])

    def _ask(self, kind: str, args: list[Any], column: str | None = None) -> Any:
        from dpmagic.batch.estimate import DerivedAnswer

        body = {"kind": kind, "args": [_plain(a) for a in args], "column": column}
        reply = self.session._call("POST", f"/estimates/{quote(self.name, safe='')}", body)
        if reply["kind"] == "derived-table":
            return frame_from_wire(reply)
        return DerivedAnswer(**{k: reply[k] for k in ("query", "count", "ci_low", "ci_high", "variance", "source")})

    def range(self, lo: object, hi: object, column: str | None = None) -> Any:
        """The count with lo ≤ column ≤ hi, from the estimate: no charge."""
        return self._ask("range", [lo, hi], column)

    def prefix(self, value: object, column: str | None = None) -> Any:
        """The count with column ≤ value, from the estimate: no charge."""
        return self._ask("prefix", [value], column)

    def point(self, value: object, column: str | None = None) -> Any:
        """The count with column = value, from the estimate: no charge."""
        return self._ask("point", [value], column)

    def query(self, vector: Any) -> Any:
        """qᵀx̂ for a vector q over the estimate's cells, from the estimate: no charge."""
        return self._ask("query", [vector])

    def ranges(self, pairs: Any, column: str | None = None) -> pd.DataFrame:
        """Many ranges [(lo, hi), ...] at once (one row each), from the estimate: no charge."""
        return self._ask("ranges", [[list(p) for p in pairs]], column)

    def __repr__(self) -> str:
        return str(self.info["text"])


def _plain(v: Any) -> Any:
    """A follow-up argument as JSON (numpy numbers and arrays as plain numbers and lists)."""
    tolist = getattr(v, "tolist", None)
    return tolist() if callable(tolist) else v


class RemoteSession:
    """A session whose data, ledger and budgets are held by a custodian server (``dpmagic serve``)."""

    #: retries of a request that failed in transit (same Idempotency-Key: charged at most once)
    retries = 3

    def __init__(self, url: str, dataset: str, token: str, *, timeout: float = 120.0) -> None:
        import httpx

        self.url, self.dataset = url.rstrip("/"), dataset
        self._client = httpx.Client(
            base_url=f"{self.url}/v1/datasets/{dataset}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
        )
        info = self._call("GET", "/schema")
        self.schema = Schema.of(info["schema"])
        self.table_names: tuple[str, ...] = tuple(info["table_names"])
        self.definition: str = info["definition"]
        self.parameter: str = info["parameter"]
        self.neighbors: str = info["neighbors"]
        self.currency = currency_for(self.parameter)
        self.panel: Any = None
        self.sidecar: Any = None
        #: display events (``charged``, ``cached``, ``refused``, ``failed``) after each request that may charge:
        #: the live panel (:class:`~dpmagic.presentation.widgets.RemoteBudgetWidget`) refreshes on them
        self.events = EventBus()

    def subscribe(self, callback: Listener) -> None:
        """Call ``callback(kind, info)`` after every request that may charge (as :meth:`Session.subscribe`):
        ``charged`` / ``cached`` (``entry``: the server's entry id) , ``refused`` / ``failed`` (``message``)."""
        self.events.subscribe(callback)

    def _charging(self, body: Any, headers: dict[str, str] | None) -> Any:
        """``POST /query`` of a request that may charge, followed by its display event."""
        try:
            reply = self._call("POST", "/query", body, headers)
        except BudgetExceededError as exc:
            self.events.emit("refused", message=str(exc))
            raise
        except DPMagicError as exc:
            self.events.emit("failed", message=str(exc))
            raise
        if isinstance(reply, dict):
            self.events.emit("cached" if reply.get("cached") else "charged", entry=reply.get("entry_id"))
        return reply

    def _call(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        import httpx

        for attempt in range(self.retries + 1):
            try:
                r = self._client.request(method, path, json=body, headers=headers)
                break
            except httpx.TransportError as exc:
                if attempt == self.retries:
                    raise ConfigurationError(f"the dpmagic server at {self.url} did not answer: {exc}") from None
                time.sleep(0.5 * (attempt + 1))
        try:
            payload = r.json()
        except ValueError:
            payload = None
        if r.status_code != 200:
            raise_error(payload, r.status_code)
        return payload

    # -- what the magics call ------------------------------------------------------------------------------
    def parse(self, sql: str) -> Query:
        """Parse and validate ``sql`` against the server's public schema (no request)."""
        names = None if self.table_names == ("data",) else self.table_names
        q = parse_query(sql, self.schema, tables=names)
        check_categories(q, self.schema)
        return q

    def _request(self, sql: str, cost: Any, named: dict[str, Any], **options: Any) -> tuple[dict[str, Any], Query]:
        q = self.parse(sql)  # refused here, before any request, as the server would
        body: dict[str, Any] = {"sql": sql, **{k: v for k, v in options.items() if v not in (None, False, ())}}
        if cost is not None:
            body[self.parameter] = cost
        body |= {k: v for k, v in named.items() if v is not None}
        return body, q

    def query(
        self,
        sql: str,
        cost: Any = None,
        *,
        epsilon: Any = None,
        rho: Any = None,
        mu: Any = None,
        ci: float | None = None,
        min_rows: int | None = None,
        fresh: bool = False,
        postprocess: tuple[str, ...] | list[str] = (),
    ) -> RemoteAnswer:
        """Ask the server; charged there (your quota and the global budget) before any row is read."""
        named = {"epsilon": epsilon, "rho": rho, "mu": mu}
        body, q = self._request(sql, cost, named, ci=ci, min_rows=min_rows, fresh=fresh, postprocess=list(postprocess))
        reply = self._charging(body, {"Idempotency-Key": uuid.uuid4().hex})
        return RemoteAnswer(reply, q, self.currency)

    def preview(
        self,
        sql: str,
        cost: Any = None,
        *,
        epsilon: Any = None,
        rho: Any = None,
        mu: Any = None,
        ci: float | None = None,
        min_rows: int | None = None,
    ) -> RemoteAnswer:
        """A dry run on the server: reads nothing, charges nothing."""
        named = {"epsilon": epsilon, "rho": rho, "mu": mu}
        body, q = self._request(sql, cost, named, ci=ci, min_rows=min_rows, dry_run=True)
        return RemoteAnswer(self._call("POST", "/query", body), q, self.currency)

    def affordable(self, sql: str) -> float:
        """The largest cost your quota and the global budget both admit on this query's region now."""
        self.parse(sql)
        return float(self._call("POST", "/afford", {"sql": sql})["affordable"])

    def budget(self) -> RemoteBudget:
        return RemoteBudget(self._call("GET", "/budget"))

    def budget_view(self) -> dict[str, Any]:
        """What the live panel shows: your quota, the global budget and your own queries (``GET /budget/view``)."""
        return dict(self._call("GET", "/budget/view"))

    def ledger_frame(self) -> pd.DataFrame:
        """Your own charges on this data set (never anyone else's)."""
        rows = self._call("GET", "/ledger")["entries"]
        return pd.DataFrame(rows, columns=["entry", "time", "sql", "cost", "released"])

    def own_accounting(self) -> OwnAccounting:
        """Your own charges replayed on your side (:class:`OwnAccounting`): for plots and the budget map."""
        return OwnAccounting(self)

    def decide(
        self,
        sql: str,
        *,
        fnr: float,
        fpr: float | None,
        max_epsilon: float | None = None,
        dry_run: bool = False,
        max_group_size: int | None = None,
    ) -> Any:
        """A decision query (``--fnr``) on the server: each read charged there (your quota and the global budget)
        before it is made; the :class:`~dpmagic.session.decide.DecisionAnswer` is rebuilt and rendered here."""
        body: dict[str, Any] = {"sql": sql, "fnr": fnr, "fpr": fpr, "max_epsilon": max_epsilon}
        body |= {"max_group_size": max_group_size, "dry_run": dry_run}
        body = {k: v for k, v in body.items() if v is not None and v is not False}
        if dry_run:
            return decision_from_wire(self._call("POST", "/query", body))
        return decision_from_wire(self._charging(body, {"Idempotency-Key": uuid.uuid4().hex}))

    def batch(
        self,
        workload: str,
        *,
        where: str | None = None,
        strategy: str = "auto",
        cost: Any = None,
        epsilon: Any = None,
        rho: Any = None,
        mu: Any = None,
        rmse: float | None = None,
        dry_run: bool = False,
        keep: str | None = None,
    ) -> RemoteAnswer:
        """A batch (``%%dpbatch``) on the server: one charge there (your quota and the global budget) before any
        read; a dry run reads and charges nothing.  ``keep``: the server keeps the released estimate under this
        name for you alone; :meth:`estimate` answers follow-ups from it for free."""
        body: dict[str, Any] = {"workload": workload, "where": where, "strategy": strategy, "rmse": rmse}
        body["keep"] = keep
        body |= {"epsilon": epsilon, "rho": rho, "mu": mu, "dry_run": dry_run}
        if cost is not None:
            body[self.parameter] = cost
        body = {k: v for k, v in body.items() if v is not None and v is not False}
        if dry_run:
            return RemoteAnswer(self._call("POST", "/query", body))
        return RemoteAnswer(self._charging(body, {"Idempotency-Key": uuid.uuid4().hex}))

    def estimate(self, name: str) -> RemoteEstimate:
        """Your batch estimate kept as ``name`` on the server (``batch(..., keep=name)``, ``%%dpbatch --keep``):
        its follow-ups (``range``, ``prefix``, ``point``, ``query``, ``ranges``) are answered there from the
        released estimate, for free.  A name you did not keep: one error listing the names you kept."""
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(f"no batch estimate named {name!r} in this session")
        return RemoteEstimate(self, self._call("GET", f"/estimates/{quote(name, safe='')}"))

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        return f"<dpmagic.RemoteSession {self.url} data set {self.dataset!r} ({self.parameter})>"


def remote_magic(name: str, call: Any, session: RemoteSession, local: Any = None) -> Any:
    """The magics other than ``%%dpquery`` on a server session: ``%dpbudget`` (your quota and the global budget;
    ``--afford SQL``; ``--json``; ``--map``: your own charges, :class:`OwnAccounting`; ``--widget``: the live
    panel, by the local magic's body), ``%dpplot`` (drawn from your own charges by the local magic's body,
    ``local``) and ``%%dpbatch`` (the local body: :meth:`RemoteSession.batch` and :meth:`RemoteSession.estimate`
    ask the server); the rest are refused with one message naming what is not served."""
    args = call.args
    if name == "dpplot" and local is not None:
        return local(session.own_accounting())
    if name == "dpbatch" and local is not None:  # the magic's own body: RemoteSession.batch asks the server
        return local(session)
    if name == "dpbudget":
        if getattr(args, "afford", None):
            from dpmagic.presentation.magic_cells import unquote

            return round(session.affordable(unquote(args.afford)), 10)
        if getattr(args, "map", None):
            return session.own_accounting().budget_map(*args.map)
        if getattr(args, "widget", None) and local is not None:  # the magic's own body shows the live panel
            return local(session)
        report = session.budget()
        return report.summary() if getattr(args, "json", False) else report
    raise ConfigurationError(f"%{name} is not available on a server session (served: %%dpquery and %dpbudget)")
