"""The custodian's state behind ``dpmagic serve``: the data sets' sessions, the analysts' quotas, tokens, and
the idempotency records.  No HTTP here (:mod:`dpmagic.presentation.server.app` is the HTTP layer).

Budgets.  Each data set is ONE :class:`~dpmagic.Session` whose accountant is the *global* overlap accountant over
everyone's queries: analysts who collude still cannot together push the maximum overlap past the global budget.
Each analyst also has a *quota*: their own overlap accountant (ledger key ``<data set key>|analyst|<id>``, in the
same ledger file).  A query goes through the session's one release path (:meth:`Session.query` →
:meth:`Session.run`) with the analyst's :class:`QuotaAdmission` installed (:mod:`dpmagic.session.admission`):
under the session's lock both accountants admit it, both charges are written in one ledger transaction, and only
then is a row read.  A refusal by either changes nothing.

Idempotency.  The record of what was charged is the ledger: a query asked with an ``Idempotency-Key`` carries
the key, the analyst and a digest of the request in its global charge (written before any row is read), and the
server keeps an index of them (rebuilt from the ledger at start).  Its response — the answer, or the fixed
post-read error — is stored with the key (``server.sqlite``) once it exists; a retry gets it back, charged nothing.
A key charged without a stored response (the server died in between) is answered from the ledger: the answer it
recorded, or — the process died between the charge and the release — the fixed error :data:`LOST`, stored, and
never a second charge.  A key with no charge is asked anew (nothing was spent); a refused query stores nothing.
The same key with another request is refused (422); a retry while the first is running gets 409.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from dpmagic.accountant.accountant import Accountant, Charge
from dpmagic.accountant.binding import ledger_key, open_binding
from dpmagic.accountant.currency import Budget, parse_budget
from dpmagic.accountant.ledger import Ledger, key_from_env, set_journal_mode, verify
from dpmagic.accountant.tables import overlapping_frame
from dpmagic.domain.schema import Schema
from dpmagic.domain.sets import Box
from dpmagic.errors import BudgetExceededError, ConfigurationError, DPMagicError, QueryError
from dpmagic.presentation.server.config import (
    DatasetConfig,
    ServerConfig,
    check_id,
    hash_token,
    new_token,
    token_matches,
)
from dpmagic.presentation.server.wire import (
    answer_to_wire,
    batch_to_wire,
    coverage_to_wire,
    decision_to_wire,
    error_body,
    frame_to_wire,
    result_to_wire,
)
from dpmagic.query.model import Query
from dpmagic.session.admission import admitting
from dpmagic.session.batch import check_keep_name, kept_estimate
from dpmagic.session.cache import ReleaseCache, cache_key
from dpmagic.session.costs import parse_cost
from dpmagic.session.session import Session

__all__ = ["Custodian", "QuotaAdmission", "AFTER_READ", "LOST", "Reply"]

#: the one body of any failure after a query was charged (data-independent by construction)
AFTER_READ = {
    "error": {
        "type": "DPMagicError",
        "message": "internal error while answering: the query stays charged and nothing was released",
        "hint": None,
    }
}
#: a retried request whose charge survived a server restart but whose answer was never released
LOST = {
    "error": {
        "type": "DPMagicError",
        "message": "this request was charged, but the server stopped before its answer was released: it stays "
        "charged and nothing was released (it is never charged twice)",
        "hint": None,
    }
}
#: env var of the fault tests: ``after-charge`` (exit once charged, at the read), ``after-release`` (exit before
#: the response is stored) or ``raise-after-charge`` (the read raises an exception carrying "row data")
CRASH_ENV = "DPMAGIC_SERVER_TEST_CRASH"

#: (HTTP status, JSON body, whether rows were read)
Reply = tuple[int, dict[str, Any], bool]

QUERY_FIELDS = {"sql", "epsilon", "rho", "mu", "ci", "min_rows", "dry_run", "fresh", "postprocess"}
#: a decision query (``--fnr``): :meth:`Session.decide`'s options
DECISION_FIELDS = {"fnr", "fpr", "max_epsilon", "max_group_size"}
#: a batch (``%%dpbatch``): :meth:`Session.batch`'s options (``workload`` instead of ``sql``)
BATCH_FIELDS = {"workload", "where", "strategy", "rmse", "keep"}
#: the follow-ups a kept batch estimate answers (:class:`~dpmagic.batch.estimate.BatchEstimate`'s methods) and the
#: number of arguments each takes
FOLLOW_UPS = {"range": 2, "prefix": 1, "point": 1, "query": 1, "ranges": 1}


class QuotaAdmission:
    """One analyst's quota for one request (:class:`dpmagic.session.admission.Admission`)."""

    def __init__(
        self,
        accountant: Accountant,
        analyst: str,
        idempotency_key: str | None,
        request: str | None = None,
        on_commit: Callable[[int], None] | None = None,
    ) -> None:
        self.accountant, self.analyst, self.idempotency_key = accountant, analyst, idempotency_key
        self.request, self.on_commit = request, on_commit
        #: set once both charges are durable: from then on rows may be read
        self.charged = False
        #: the quota's admission of this request (:meth:`admit`), reused by :meth:`commit` when still valid
        self._admitted: Charge | None = None

    def affordable(self, coverage: Box) -> float:
        return self.accountant.affordable(coverage)

    def admit(self, coverage: Box, cost: float) -> None:
        ch = self.accountant.preview(coverage, cost)
        self._admitted = ch
        if not ch.admissible:
            cur = self.accountant.currency
            left = self.accountant.affordable(coverage)
            raise BudgetExceededError(
                f"refused by your quota: this query costs {cur.format(cost)} and would raise your charged loss "
                f"from {cur.cost(ch.before):.4g} to {cur.cost(ch.after):.4g}, above your quota "
                f"{cur.parameter}={self.accountant.budget.total:g}; at most {cur.format(left)} is left for you on "
                "this part of the domain",
                hint="lower the cost, ask about a region where your quota is not spent, or ask the custodian",
            )

    def details(self) -> dict[str, Any]:
        out: dict[str, Any] = {"analyst": self.analyst, "idempotency_key": self.idempotency_key}
        return out | ({"request": self.request} if self.request is not None else {})

    def commit(self, coverage: Box, cost: float, *, sql: str, canonical: str, entry_id: int) -> None:
        self.accountant.charge(
            coverage,
            cost,
            sql=sql,
            canonical=canonical,
            details={"global_entry": entry_id, "idempotency_key": self.idempotency_key},
            # the overlap solved in admit(): the accountant reuses it only if it is still the admission of this
            # (coverage, cost) on an unchanged engine (Accountant._reuse), else it solves again: the same bound
            preview=self._admitted,
        )
        self.charged = True
        if self.on_commit is not None:
            self.on_commit(entry_id)


def bind_budget(ledger: Ledger, key: str, schema: Schema, budget: Budget, neighbors: str, what: str) -> Budget:
    """:func:`open_binding` of ``key``, returning the budget in force: the ledger's once it holds one (the
    configuration only seeds a first binding; later changes are custodian actions recorded in the ledger: the
    admin endpoint or ``dpmagic ledger set-budget``), else ``budget``.  A differing configured value is reported
    on the server's console, never applied silently."""
    recorded = ledger.budget_of(key)
    if recorded is not None:
        if abs(recorded - budget.total) > 1e-12 * max(1.0, recorded):
            print(
                f"dpmagic serve: {what}: the ledger's budget {budget.currency.parameter}={recorded:g} is in force, "
                f"not the configured {budget.total:g} (change it with POST /v1/admin/datasets/ID/budget)",
                file=sys.stderr,
            )
        budget = Budget(budget.currency, recorded, budget.delta)
    open_binding(ledger, key, schema, budget, neighbors)
    return budget


class DatasetHost:
    """One served data set: its session (the global accountant) and its analysts' quota accountants."""

    def __init__(self, cfg: DatasetConfig, ledger: Ledger, spark_master: str = "local[2]") -> None:
        self.cfg = cfg
        schema = Schema.of(cfg.schema)
        budget = bind_budget(
            ledger, ledger_key(schema), schema, parse_budget(cfg.budget), cfg.neighbors, f"data set {cfg.id!r}"
        )
        data: Any = str(cfg.data)
        if cfg.backend == "pandas":
            data = pd.read_parquet(cfg.data) if cfg.data.suffix in (".parquet", ".pq") else pd.read_csv(cfg.data)
        elif cfg.backend == "spark":  # read in place by Spark (SparkBackend), as the duckdb backend reads its file
            data = spark_session(spark_master).read.parquet(str(cfg.data))
        self.session = Session(
            data,
            schema,
            budget,
            bound=cfg.bound,  # type: ignore[arg-type]
            ledger=ledger,
            neighbors=cfg.neighbors,  # type: ignore[arg-type]
            table_names=(cfg.id,),
        )
        # re-runs are per analyst (Custodian._stored): the session's shared cache and history would only grow
        self.session.cache = _NoCache()
        self.session.results = _NoHistory()
        # a request's SQL is parsed once: the re-run key and the release path both ask the session to parse it
        self._parsed: dict[str, Query] = {}
        self._parse_lock = threading.Lock()
        self._parse = self.session.parse
        self.session.parse = self.parse  # type: ignore[method-assign]
        self._quotas: dict[str, Accountant] = {}
        self._lock = threading.Lock()
        #: (analyst, Idempotency-Key) → (global entry id, request digest) of every charge made with a key: from the
        #: ledger at start (the charges of earlier runs), then kept as this process charges
        self.charged_keys: dict[tuple[str, str], tuple[int, str | None]] = {
            (e.details["analyst"], e.details["idempotency_key"]): (e.id, e.details.get("request"))
            for e in self.session.accountant.entries()
            if e.details.get("analyst") is not None and e.details.get("idempotency_key") is not None
        }

    #: parsed queries kept (the oldest dropped first): Query is immutable, a function of the SQL and the schema
    PARSED = 512

    def parse(self, sql: str) -> Query:
        """:meth:`Session.parse`, memoised on the SQL text (the schema is fixed for the host; errors not kept)."""
        with self._parse_lock:
            q = self._parsed.get(sql)
        if q is None:
            q = self._parse(sql)
            with self._parse_lock:
                if len(self._parsed) >= self.PARSED:
                    del self._parsed[next(iter(self._parsed))]
                self._parsed[sql] = q
        return q

    def quota_key(self, analyst: str) -> str:
        return f"{self.session.ledger_key}|analyst|{analyst}"

    def quota(self, analyst: str, configured: float | None) -> Accountant:
        """The analyst's own overlap accountant (opened on first use with ``configured`` or the data set's quota)."""
        with self._lock:
            acct = self._quotas.get(analyst)
            if acct is None:
                s = self.session
                key = self.quota_key(analyst)
                total = configured or self.cfg.analyst_quota or s.budget.total
                budget = bind_budget(
                    s.ledger,
                    key,
                    s.schema,
                    Budget(s.currency, total, s.budget.delta),
                    s.neighbors,
                    f"analyst {analyst!r} on data set {self.cfg.id!r}",
                )
                acct = Accountant(budget, s.schema, bound="exact", ledger=s.ledger, neighbors=s.neighbors, key=key)
                self._quotas[analyst] = acct
            return acct


def spark_session(master: str) -> Any:
    """The server's one SparkSession (Spark allows one per process): bound to loopback, no UI, quiet (its log is
    the custodian's console, never an analyst's answer).  One error naming what is missing otherwise."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise ConfigurationError(
            'backend = "spark" needs pyspark (and a Java 17 runtime)', hint="pip install 'dpmagic[spark]'"
        ) from None
    spark = (
        SparkSession.builder.master(master)
        .appName("dpmagic-serve")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class _NoCache(ReleaseCache):
    """The server's sessions keep no shared re-run cache (another analyst's answer is never theirs)."""

    def put(self, key: str, result: Any) -> None:
        return None

    def get(self, key: str, session: Any) -> None:
        return None


class _NoHistory(list[Any]):
    """A session's list of results that keeps nothing (a long-running server would only accumulate them)."""

    def append(self, item: Any) -> None:
        return None


class Store:
    """``server.sqlite``: analysts (token hashes only), idempotency records, each analyst's stored answers."""

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=60.0)
        set_journal_mode(self._conn, "WAL")  # retried: several workers may create the file at once
        # NORMAL: durable when the process dies; a power cut may lose the last stored responses, and then the
        # ledger (synchronous=FULL) still says which keys were charged (Custodian._recover): never a second charge
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.executescript(
            """
            CREATE TABLE IF NOT EXISTS analysts (id TEXT PRIMARY KEY, token_hash TEXT NOT NULL,
                revoked INTEGER NOT NULL DEFAULT 0, quotas TEXT NOT NULL DEFAULT '{}');
            CREATE TABLE IF NOT EXISTS responses (analyst TEXT, dataset TEXT, key TEXT, request TEXT NOT NULL,
                status INTEGER NOT NULL, response TEXT NOT NULL, PRIMARY KEY (analyst, dataset, key));
            CREATE TABLE IF NOT EXISTS answers (analyst TEXT, dataset TEXT, key TEXT, response TEXT NOT NULL,
                PRIMARY KEY (analyst, dataset, key));
            CREATE TABLE IF NOT EXISTS estimates (analyst TEXT, dataset TEXT, name TEXT, entry_id INTEGER NOT NULL,
                estimate BLOB NOT NULL, PRIMARY KEY (analyst, dataset, name));
            CREATE TABLE IF NOT EXISTS followups (analyst TEXT, dataset TEXT, name TEXT, request TEXT NOT NULL,
                created REAL NOT NULL);
            """
        )

    def execute(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._conn.execute(sql, args).fetchall()

    def many(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        """Several writes in one transaction (one commit, one sync)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for sql, args in statements:
                    self._conn.execute(sql, args)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")


class Custodian:
    """Everything ``dpmagic serve`` holds: configuration, ledger, data sets, analysts, idempotency records."""

    def __init__(self, cfg: ServerConfig) -> None:
        self.cfg = cfg
        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        self.ledger_path = cfg.state_dir / "ledger.sqlite"
        self.ledger = Ledger(self.ledger_path)
        self.store = Store(cfg.state_dir / "server.sqlite")
        for a in cfg.analysts.values():  # the state is authoritative once seeded: revocations and rotations persist
            self.store.execute(
                "INSERT OR IGNORE INTO analysts (id, token_hash, quotas) VALUES (?, ?, ?)",
                (a.id, a.token_hash, json.dumps(a.quotas)),
            )
        self.hosts = {d.id: DatasetHost(d, self.ledger, cfg.spark_master) for d in cfg.datasets.values()}
        self._inflight: set[tuple[str, str, str]] = set()
        self._inflight_lock = threading.Lock()
        #: (analyst, data set) → that analyst's kept batch estimates by name (loaded from the store on first use)
        self._kept: dict[tuple[str, str], dict[str, Any]] = {}
        #: (analyst, data set, name) of kept batches being answered: a second one with the same name is refused
        self._keeping: set[tuple[str, str, str]] = set()
        self._kept_lock = threading.Lock()
        self.crash = os.environ.get(CRASH_ENV, "")
        if self.crash in ("after-charge", "raise-after-charge"):  # fault tests only: once charged, at the read
            for h in self.hosts.values():
                h.session.backend.evaluate = _crash if self.crash == "after-charge" else _raise  # type: ignore[method-assign]

    # -- who is asking -----------------------------------------------------------------------------------
    def analyst_for(self, token: str) -> str | None:
        """The analyst holding ``token`` (not revoked), or None.  Compares every stored hash (constant-time each)."""
        found = None
        for aid, stored, revoked in self.store.execute("SELECT id, token_hash, revoked FROM analysts"):
            if token_matches(token, stored) and not revoked:
                found = aid
        return found

    def is_admin(self, token: str) -> bool:
        return token_matches(token, self.cfg.admin_token_hash)

    def host(self, dataset: str) -> DatasetHost:
        h = self.hosts.get(dataset)
        if h is None:
            raise LookupError(dataset)
        return h

    def quota(self, analyst: str, dataset: str) -> Accountant:
        rows = self.store.execute("SELECT quotas FROM analysts WHERE id = ?", (analyst,))
        configured = json.loads(rows[0][0]).get(dataset) if rows else None
        return self.host(dataset).quota(analyst, configured)

    # -- analysts' endpoints -----------------------------------------------------------------------------
    def schema(self, dataset: str) -> dict[str, Any]:
        s = self.host(dataset).session
        return {"schema": s.schema.to_dict(), "table_names": list(s.table_names), **self._definition(s)}

    @staticmethod
    def _definition(s: Session) -> dict[str, Any]:
        cur = s.currency
        return {"definition": cur.definition, "parameter": cur.parameter, "neighbors": s.neighbors}

    def budget(self, analyst: str, dataset: str) -> dict[str, Any]:
        s = self.host(dataset).session
        acct = self.quota(analyst, dataset)
        return {
            **self._definition(s),
            "quota": {
                "budget": acct.budget.total,
                "spent": acct.spent,
                "remaining": acct.remaining,
                "queries": len(acct),
                "delta": acct.budget.delta,
            },
            "global": {"budget": s.accountant.budget.total, "spent": s.spent, "remaining": s.remaining},
        }

    #: the analyst's own queries listed by the budget view (the newest; ``queries`` counts them all)
    VIEW_ROWS = 500

    def budget_view(self, analyst: str, dataset: str) -> dict[str, Any]:
        """What the live panel shows of a server session: :meth:`budget` and the analyst's OWN charges, newest last
        (number, time asked, SQL, cost, the quota's charged bound after it) — from their quota's ledger key only,
        never anyone else's; nothing here depends on the rows."""
        acct = self.quota(analyst, dataset)
        cur = acct.currency
        entries = acct.entries()
        first = max(0, len(entries) - self.VIEW_ROWS)
        rows = [
            {"number": n, "entry": e.details.get("global_entry"), "time": e.created, "sql": e.sql, "cost": e.cost}
            | {"charged_after": cur.cost(e.charged_after), "bound": e.bound}
            for n, e in enumerate(entries[first:], first + 1)
        ]
        return self.budget(analyst, dataset) | {"dataset": dataset, "entries": rows}

    # -- kept batch estimates (%%dpbatch --keep NAME, %dpbatch --from NAME ...) ---------------------------------
    def kept(self, analyst: str, dataset: str) -> dict[str, Any]:
        """``analyst``'s own kept batch estimates on ``dataset`` by name (never anyone else's): in memory, loaded
        from the store (``server.sqlite``) on first use, so they outlive a restart."""
        self.host(dataset)
        with self._kept_lock:
            own = self._kept.get((analyst, dataset))
            if own is None:
                own = {}
                rows = self.store.execute(
                    "SELECT name, estimate FROM estimates WHERE analyst=? AND dataset=?", (analyst, dataset)
                )
                for name, blob in rows:
                    own[str(name)] = pickle.loads(blob)  # written by this server only (_keep_writes)
                self._kept[(analyst, dataset)] = own
            return own

    def estimate_info(self, analyst: str, dataset: str, name: str) -> dict[str, Any]:
        """What the client shows of ``analyst``'s estimate ``name``; one clear error (naming only their own kept
        estimates) for a name they did not keep — another analyst's is never found."""
        est = kept_estimate(self.kept(analyst, dataset), name)
        return {"name": est.name, "columns": list(est.columns), "entry_id": est.entry_id, "text": repr(est)}

    def follow_up(self, analyst: str, dataset: str, name: str, body: Any) -> dict[str, Any]:
        """A free follow-up from ``analyst``'s kept estimate ``name``: post-processing of the batch's released
        answers (no row read, nothing charged, no ledger event), recorded in the store's ``followups``."""
        if not isinstance(body, dict) or set(body) - {"kind", "args", "column"}:
            raise ConfigurationError("a follow-up is a JSON object {kind, args, column?}")
        kind, args, column = body.get("kind"), body.get("args"), body.get("column")
        if kind not in FOLLOW_UPS:
            raise ConfigurationError(f"a follow-up's kind is one of {', '.join(FOLLOW_UPS)}, got {kind!r}")
        if not isinstance(args, list) or len(args) != FOLLOW_UPS[kind]:
            raise ConfigurationError(f"a {kind} follow-up takes {FOLLOW_UPS[kind]} argument(s) in 'args'")
        if column is not None and not isinstance(column, str):
            raise ConfigurationError("'column' must be a column name")
        if kind == "ranges" and not (
            isinstance(args[0], list) and all(isinstance(p, list) and len(p) == 2 for p in args[0])
        ):
            raise ConfigurationError("a ranges follow-up takes one argument: a list of [lo, hi] pairs")
        est = kept_estimate(self.kept(analyst, dataset), name)
        if kind == "query":
            out = est.query(args[0])
        else:
            out = getattr(est, kind)(*args, column=column)
        self.store.execute(
            "INSERT INTO followups (analyst, dataset, name, request, created) VALUES (?, ?, ?, ?, ?)",
            (analyst, dataset, name, json.dumps(body)[:2000], time.time()),
        )
        if isinstance(out, pd.DataFrame):  # ranges: one row each
            return {"kind": "derived-table", **frame_to_wire(out), "cost": 0.0}
        return {"kind": "derived", **dataclasses.asdict(out), "cost": 0.0}

    def _reserve(self, analyst: str, dataset: str, keep: str | None) -> tuple[str, str, str] | None:
        """Reserve the name of an estimate to keep (checked before the charge; two requests keeping one name at
        once: the second is refused as if the first were kept)."""
        if keep is None:
            return None
        own = self.kept(analyst, dataset)
        ident = (analyst, dataset, keep)
        with self._kept_lock:
            check_keep_name(own.keys() | {k for a, d, k in self._keeping if (a, d) == (analyst, dataset)}, keep)
            self._keeping.add(ident)
        return ident

    @staticmethod
    def _keep_writes(analyst: str, dataset: str, keep: str | None, out: Any) -> list[tuple[str, tuple[Any, ...]]]:
        """The write that makes a kept estimate outlive a restart (none if it cannot be stored: kept in memory)."""
        est = getattr(out, "estimate", None)
        if keep is None or est is None:
            return []
        try:
            blob = pickle.dumps(est)
        except Exception:
            return []
        put = "INSERT OR REPLACE INTO estimates (analyst, dataset, name, entry_id, estimate) VALUES (?, ?, ?, ?, ?)"
        return [(put, (analyst, dataset, keep, int(est.entry_id), blob))]

    def own_ledger(self, analyst: str, dataset: str) -> dict[str, Any]:
        """The analyst's own charges (from their quota key) with their released answers; never anyone else's."""
        s = self.host(dataset).session
        released = {e.id: e for e in s.accountant.entries()}
        out = []
        for e in self.quota(analyst, dataset).entries():
            g = released.get(int(e.details.get("global_entry", -1)))
            answer = g.answer if g is not None and g.released else None
            out.append(
                {"entry": e.details.get("global_entry"), "time": e.created, "sql": e.sql, "cost": e.cost}
                | {"released": answer is not None, "answer": answer_to_wire(answer)}
                # the query's region (from its SQL and the public schema): the client replays its own accounting
                | {"coverage": coverage_to_wire(e.coverage), "canonical": e.canonical}
            )
        return {"entries": out}

    def afford(self, analyst: str, dataset: str, body: Any) -> dict[str, Any]:
        sql = body.get("sql") if isinstance(body, dict) else None
        if not isinstance(sql, str):
            raise QueryError("the request needs 'sql' (a string)")
        s = self.host(dataset).session
        with admitting(QuotaAdmission(self.quota(analyst, dataset), analyst, None)):
            return {"affordable": s.affordable(sql)}

    def query(self, analyst: str, dataset: str, body: Any, idem: str | None) -> Reply:
        """Answer (or dry-run) one query for ``analyst``; see the module docstring for the idempotency rules."""
        host = self.host(dataset)
        req = check_request(body)
        if req.get("dry_run") and "workload" in req:  # the strategies and the charge: reads and charges nothing
            with admitting(QuotaAdmission(self.quota(analyst, host.cfg.id), analyst, None)):
                out = self._batch(host.session, req, self.kept(analyst, dataset))
                return 200, batch_to_wire(out), False
        if req.get("dry_run") and req.get("fnr") is not None:  # the planned cost: reads and charges nothing
            with admitting(QuotaAdmission(self.quota(analyst, host.cfg.id), analyst, None)):
                return 200, decision_to_wire(self._decide(host.session, req)), False
        if req.get("dry_run"):
            return self._preview(host, analyst, req)
        if idem is None:
            status, reply, read, keep = self._run(host, analyst, req, None)
            if keep:
                self.store.many(keep)
            return status, reply, read
        if len(idem) > 200:
            raise ConfigurationError("an Idempotency-Key is at most 200 characters")
        digest = hashlib.sha256(json.dumps(req, sort_keys=True).encode()).hexdigest()
        ident = (analyst, dataset, idem)
        with self._inflight_lock:
            if ident in self._inflight:
                return 409, _err("a request with this Idempotency-Key is still being answered; retry later"), False
            rows = self.store.execute(
                "SELECT request, status, response FROM responses WHERE analyst=? AND dataset=? AND key=?", ident
            )
            charged = host.charged_keys.get((analyst, idem))
            asked = rows[0][0] if rows else (charged[1] if charged is not None else None)
            if asked is not None and asked != digest:
                return 422, _err("this Idempotency-Key was used with another request"), False
            if rows:
                return int(rows[0][1]), json.loads(rows[0][2]), False
            self._inflight.add(ident)
        try:
            if charged is not None and req.get("fnr") is not None:  # a decision is several reads: one read's
                status, reply = 500, LOST  # recorded answer is not the decision; charged, never twice
                read, keep = False, []
            elif charged is not None:  # charged by an earlier run that stored no response: the ledger's record
                status, reply = self._recover(host, charged[0])
                read, keep = False, []
            else:
                status, reply, read, keep = self._run(host, analyst, req, idem, digest)
            if read or charged is not None:  # charged: this is the request's response for good
                put = "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?)"
                self.store.many([*keep, (put, (*ident, digest, status, json.dumps(reply)))])
            return status, reply, read
        finally:
            with self._inflight_lock:
                self._inflight.discard(ident)

    def _recover(self, host: DatasetHost, entry_id: int) -> tuple[int, dict[str, Any]]:
        """The response of a request charged (global entry ``entry_id``) by a run that stored none: the answer the
        ledger recorded, or — the process died between the charge and the release — the fixed :data:`LOST`."""
        e = next((e for e in host.session.accountant.entries() if e.id == entry_id), None)
        if e is None or not e.released or not isinstance(e.answer, dict):
            return 500, LOST
        df = pd.DataFrame(e.answer["data"], columns=e.answer["columns"])
        note = "answer restored from the ledger after a server restart (charged once)"
        reply = {"kind": "result", **frame_to_wire(df), "cost": e.cost, "cached": False}
        reply |= {"summary": note, "notes": [], "entry_id": e.id}
        reply |= {"text": f"{df.to_string(index=False)}\n{note}", "html": df.to_html(index=False) + note}
        return 200, reply

    def _preview(self, host: DatasetHost, analyst: str, req: dict[str, Any]) -> Reply:
        s = host.session
        acct = self.quota(analyst, host.cfg.id)
        costs = {k: req.get(k) for k in ("epsilon", "rho", "mu")}
        s.parse(req["sql"])  # what the query path refuses (a scalar subquery, several conditions), refused alike
        with admitting(QuotaAdmission(acct, analyst, None)):
            p = s.preview(req["sql"], ci=req.get("ci"), min_rows=req.get("min_rows"), **costs)
        from dpmagic.session.results import Preview

        if isinstance(p, Preview):  # "already answered" means by you (the shared cache is everyone's); whether
            # your quota would refuse it: Session.dry_run asked the installed QuotaAdmission
            p = replace(p, cached=self._stored(host, analyst, req) is not None)
            # per-analyst isolation: the dry run shows your own quota's charge — its overlapping queries (their
            # SQL) and worst-case row are yours; the global accountant's would show other analysts' SQL and regions.
            # Admissible only if both your quota and the global budget admit it.
            own = acct.preview(p.query.coverage, p.cost)
            charge = replace(own, admissible=bool(own.admissible and p.charge.admissible))
            p = replace(p, charge=charge, overlapping=overlapping_frame(acct, own.neighbors))
        return 200, result_to_wire(p), False

    @staticmethod
    def _batch(s: Session, req: dict[str, Any], kept: dict[str, Any]) -> Any:
        """The batch of ``req``; an estimate kept (``keep``) goes to ``kept``, the asking analyst's own."""
        return s.batch(
            req["workload"],
            where=req.get("where"),
            strategy=req.get("strategy") or "auto",
            rmse=req.get("rmse"),
            dry_run=bool(req.get("dry_run")),
            keep=req.get("keep"),
            kept=kept,
            **{k: req.get(k) for k in ("epsilon", "rho", "mu")},
        )

    @staticmethod
    def _decide(s: Session, req: dict[str, Any]) -> Any:
        return s.decide(
            req["sql"],
            fnr=req["fnr"],
            fpr=req.get("fpr"),
            max_epsilon=req.get("max_epsilon"),
            dry_run=bool(req.get("dry_run")),
            max_group_size=req.get("max_group_size"),
        )

    @staticmethod
    def _answer_key(s: Session, req: dict[str, Any]) -> str | None:
        """The re-run key of a request (the session's :func:`cache_key` and the post-processing), None if public
        or a decision query (each is asked anew, as locally)."""
        if req.get("fnr") is not None or "workload" in req:
            return None
        q = s.parse(req["sql"])
        if q.is_public:
            return None
        spec = parse_cost(s.currency, None, {k: req.get(k) for k in ("epsilon", "rho", "mu")})
        post = ",".join(req.get("postprocess") or ())
        return cache_key(q, s.currency, spec, req.get("ci"), req.get("min_rows")) + "|" + post

    def _stored(self, host: DatasetHost, analyst: str, req: dict[str, Any]) -> dict[str, Any] | None:
        """This analyst's stored answer of the same request, if any."""
        key = self._answer_key(host.session, req)
        if key is None:
            return None
        rows = self.store.execute(
            "SELECT response FROM answers WHERE analyst=? AND dataset=? AND key=?", (analyst, host.cfg.id, key)
        )
        return json.loads(rows[0][0]) if rows else None

    def _run(
        self, host: DatasetHost, analyst: str, req: dict[str, Any], idem: str | None, digest: str | None = None
    ) -> tuple[int, dict[str, Any], bool, list[tuple[str, tuple[Any, ...]]]]:
        """Run the query: (status, body, rows read?, the writes that store its answer for free re-runs)."""
        s = host.session
        costs = {k: req.get(k) for k in ("epsilon", "rho", "mu")}
        post = tuple(req.get("postprocess") or ())
        key = self._answer_key(s, req)
        stored = None if req.get("fresh") or key is None else self._stored(host, analyst, req)
        if stored is not None:  # this analyst's own earlier answer: free, as a local re-run
            note = "(re-run: your stored answer, charged nothing)"
            if "text" in stored:  # rendered here (a scalar or composed answer)
                stored |= {"text": f"{note}\n{stored['text']}", "html": f"<p>{note}</p>{stored['html']}"}
            else:  # rendered by the client, which shows the note first
                stored["rerun_note"] = note
            stored["cached"] = True
            return 200, stored, False, []

        def remember(entry_id: int) -> None:  # inside the charge: the key is known charged before any read
            if idem is not None:
                host.charged_keys[(analyst, idem)] = (entry_id, digest)

        admission = QuotaAdmission(self.quota(analyst, host.cfg.id), analyst, idem, digest, remember)
        keep: list[tuple[str, tuple[Any, ...]]] = []
        reserved = None
        try:
            with admitting(admission):
                if "workload" in req:  # a batch: one charge through Session.run
                    reserved = self._reserve(analyst, host.cfg.id, req.get("keep"))
                    out = self._batch(s, req, self.kept(analyst, host.cfg.id))
                    reply = batch_to_wire(out)
                    keep += self._keep_writes(analyst, host.cfg.id, req.get("keep"), out)
                elif req.get("fnr") is not None:  # a decision query: every read charged through Session.run
                    reply = decision_to_wire(self._decide(s, req))
                else:
                    result = s.query(
                        req["sql"],
                        ci=req.get("ci"),
                        min_rows=req.get("min_rows"),
                        fresh=True,  # re-runs are per analyst (above): never another analyst's answer
                        postprocess=post,
                        **costs,
                    )
                    reply = result_to_wire(result)
        except Exception as exc:
            if admission.charged:  # after the read: one fixed body, whatever happened
                return 500, AFTER_READ, True, []
            if isinstance(exc, DPMagicError):
                return (409 if isinstance(exc, BudgetExceededError) else 400), error_body(exc), False, []
            return 500, _err("internal error before the query was charged: nothing was charged or read"), False, []
        finally:
            if reserved is not None:
                with self._kept_lock:
                    self._keeping.discard(reserved)
        if self.crash == "after-release" and admission.charged:  # fault test only: die before storing the response
            os._exit(18)
        if admission.charged and key is not None:
            keep.append(
                (
                    "INSERT OR REPLACE INTO answers (analyst, dataset, key, response) VALUES (?, ?, ?, ?)",
                    (analyst, host.cfg.id, key, json.dumps(reply)),
                )
            )
        return 200, reply, admission.charged, keep

    # -- the custodian's endpoints -----------------------------------------------------------------------
    def analysts(self) -> list[dict[str, Any]]:
        rows = self.store.execute("SELECT id, revoked, quotas FROM analysts ORDER BY id")
        return [{"id": a, "revoked": bool(r), "quotas": json.loads(q)} for a, r, q in rows]

    def add_analyst(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ConfigurationError("the request must be a JSON object {id, quotas?}")
        aid = check_id(body.get("id"), "the analyst's id")
        quotas = body.get("quotas", {})
        if not isinstance(quotas, dict) or not all(
            ds in self.hosts and not isinstance(v, bool) and isinstance(v, (int, float)) and v > 0
            for ds, v in quotas.items()
        ):
            raise ConfigurationError(f"quotas must map served data sets to positive numbers, got {quotas!r}")
        if self.store.execute("SELECT 1 FROM analysts WHERE id = ?", (aid,)):
            raise ConfigurationError(f"analyst {aid!r} exists (rotate their token instead)")
        token = new_token()
        self.store.execute(
            "INSERT INTO analysts (id, token_hash, quotas) VALUES (?, ?, ?)",
            (aid, hash_token(token), json.dumps(quotas)),
        )
        return {"id": aid, "token": token}

    def _existing(self, aid: str) -> None:
        if not self.store.execute("SELECT 1 FROM analysts WHERE id = ?", (aid,)):
            raise LookupError(aid)

    def revoke(self, aid: str) -> dict[str, Any]:
        self._existing(aid)
        self.store.execute("UPDATE analysts SET revoked = 1 WHERE id = ?", (aid,))
        return {"id": aid, "revoked": True}

    def rotate(self, aid: str) -> dict[str, Any]:
        self._existing(aid)
        token = new_token()
        self.store.execute("UPDATE analysts SET token_hash = ?, revoked = 0 WHERE id = ?", (hash_token(token), aid))
        return {"id": aid, "token": token}

    def set_budget(self, dataset: str, body: Any) -> dict[str, Any]:
        host = self.host(dataset)
        total = body.get("total") if isinstance(body, dict) else None
        if isinstance(total, bool) or not isinstance(total, (int, float)) or not total > 0:
            raise ConfigurationError("the request needs 'total': a positive number")
        analyst = body.get("analyst")
        s = host.session
        if analyst is None:
            s.ledger.set_budget(s.ledger_key, float(total), reason="custodian (server admin)")
            s.budget = Budget(s.currency, float(total), s.budget.delta)
            return {"dataset": dataset, "budget": float(total)}
        self._existing(str(analyst))
        acct = self.quota(str(analyst), dataset)
        s.ledger.set_budget(acct.key, float(total), reason="custodian (server admin)")
        rows = self.store.execute("SELECT quotas FROM analysts WHERE id = ?", (analyst,))
        quotas = json.loads(rows[0][0]) | {dataset: float(total)}
        self.store.execute("UPDATE analysts SET quotas = ? WHERE id = ?", (json.dumps(quotas), analyst))
        return {"dataset": dataset, "analyst": analyst, "quota": float(total)}

    def audit(self, dataset: str) -> dict[str, Any]:
        s = self.host(dataset).session
        return {
            "dataset": dataset,
            **self._definition(s),
            "budget": s.accountant.budget.total,
            "spent": s.spent,
            "entries": [
                {
                    "entry": e.id,
                    "time": e.created,
                    "analyst": e.details.get("analyst"),
                    "sql": e.sql,
                    "cost": e.cost,
                    "charged_after": e.charged_after,
                    "released": e.released,
                }
                for e in s.accountant.entries()
            ],
            # free follow-ups answered from kept batch estimates: no row read, nothing charged, listed for the audit
            "followups": [
                {"time": created, "analyst": who, "estimate": name, "request": _json_or_text(request)}
                for who, name, request, created in self.store.execute(
                    "SELECT analyst, name, request, created FROM followups WHERE dataset = ? ORDER BY created",
                    (dataset,),
                )
            ],
        }

    def verify(self) -> dict[str, Any]:
        ok, problems = verify(self.ledger_path, key_from_env())
        return {"ok": ok, "problems": problems, "checked_at": time.time()}


def _json_or_text(text: str) -> Any:
    """A stored request: its JSON, or the text itself where it was cut at the stored length."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _crash(*args: Any, **kwargs: Any) -> Any:
    os._exit(17)


def _raise(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("exact count 12345 in row 7")  # the text a post-read error must never carry out


def _err(message: str) -> dict[str, Any]:
    return {"error": {"type": "DPMagicError", "message": message, "hint": None}}


def check_request(body: Any) -> dict[str, Any]:
    """The query request, checked for shape before anything else (one error naming the first problem)."""
    if not isinstance(body, dict):
        raise ConfigurationError("the request must be a JSON object with 'sql'")
    unknown = set(body) - QUERY_FIELDS - DECISION_FIELDS - BATCH_FIELDS
    if unknown:
        raise ConfigurationError(f"unknown field(s) in the request: {sorted(unknown)}")
    if "workload" in body:
        return check_batch(body)
    if not isinstance(body.get("sql"), str) or not body["sql"].strip():
        raise QueryError("the request needs 'sql': one SELECT statement")
    for k in ("epsilon", "rho", "mu"):
        v = body.get(k)
        if v is not None and not (isinstance(v, str) or (isinstance(v, (int, float)) and not isinstance(v, bool))):
            raise ConfigurationError(f"{k!r} must be a number or 'max', got {v!r}")
    for k in ("ci",):
        v = body.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise ConfigurationError(f"{k!r} must be a number, got {v!r}")
    v = body.get("min_rows")
    if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
        raise ConfigurationError(f"'min_rows' must be a whole number, got {v!r}")
    for k in ("dry_run", "fresh"):
        if not isinstance(body.get(k, False), bool):
            raise ConfigurationError(f"{k!r} must be true or false")
    for k in ("fnr", "fpr", "max_epsilon"):
        v = body.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise ConfigurationError(f"{k!r} must be a number, got {v!r}")
    v = body.get("max_group_size")
    if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
        raise ConfigurationError(f"'max_group_size' must be a whole number, got {v!r}")
    if body.get("fnr") is None and any(body.get(k) is not None for k in DECISION_FIELDS):
        raise ConfigurationError("'fpr', 'max_epsilon' and 'max_group_size' belong to a decision query: give 'fnr'")
    post = body.get("postprocess", [])
    if not isinstance(post, list) or not all(isinstance(x, str) for x in post):
        raise ConfigurationError("'postprocess' must be a list of strings")
    return dict(body)


def check_batch(body: dict[str, Any]) -> dict[str, Any]:
    """A batch request (``workload``, ``where``, ``strategy``, a cost or ``rmse``, ``dry_run``), checked for shape."""
    allowed = BATCH_FIELDS | {"epsilon", "rho", "mu", "dry_run"}
    stray = set(body) - allowed
    if stray:
        raise ConfigurationError(f"field(s) {sorted(stray)} do not apply to a batch (it takes {sorted(allowed)})")
    if not isinstance(body.get("workload"), str) or not body["workload"].strip():
        raise QueryError("the batch needs 'workload': the workload text of %%dpbatch")
    for k in ("where", "strategy", "keep"):
        if body.get(k) is not None and not isinstance(body[k], str):
            raise ConfigurationError(f"{k!r} must be a string")
    for k in ("epsilon", "rho", "mu"):
        v = body.get(k)
        if v is not None and not (isinstance(v, str) or (isinstance(v, (int, float)) and not isinstance(v, bool))):
            raise ConfigurationError(f"{k!r} must be a number or 'max', got {v!r}")
    v = body.get("rmse")
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
        raise ConfigurationError(f"'rmse' must be a number, got {v!r}")
    if not isinstance(body.get("dry_run", False), bool):
        raise ConfigurationError("'dry_run' must be true or false")
    return dict(body)
