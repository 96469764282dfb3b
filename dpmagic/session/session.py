"""A dpmagic session: sensitive data + public schema + budget + accountant, usable without IPython.

>>> import dpmagic
>>> s = dpmagic.Session(df, "adult.schema.json", "epsilon=1.0")          # doctest: +SKIP
>>> r = s.query("SELECT sex, COUNT(*) FROM adult GROUP BY sex", epsilon=0.1)  # doctest: +SKIP
>>> r.df                                                                  # doctest: +SKIP

Order of operations for every query (invariant 2): parse and validate the SQL against the schema → plan the
noise → check the cost against the budget and commit the charge to the ledger → only then read the rows →
draw the noise → record the release.  Any error before the commit spends nothing and changes nothing.

Threads: a session may be called from several threads (a server).  Admission and charge are one critical
section under :attr:`Session.lock` (its accountant's re-entrant lock): two threads are never admitted on the
same remaining budget, and the overlap engine holds exactly the ledger's charges.  The data reads happen
outside it, one at a time (:attr:`Session._read_lock`: backends are not required to be thread-safe), so a
long read never delays another query's admission nor the time it reports.

Time: the ledger records a query's time when it is charged, before its data is read; its release carries that
same time, and a release that reads several times (a decision query) records the time it was asked on every
charge.  No clock read after a data read is recorded or shown (invariant 5; docs/threat-model.md).

Orchestration only (under 500 lines, most of them the public API's docstrings): parsing is
:mod:`dpmagic.query`, costs :mod:`dpmagic.session.costs`, the re-run cache :mod:`dpmagic.session.cache`, events
:mod:`dpmagic.session.events`, the ledger binding :mod:`dpmagic.accountant.binding`, releases :mod:`dpmagic.releases`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from dpmagic.accountant import tables
from dpmagic.accountant.accountant import CHARGE_BOUNDS, Accountant, Charge, ChargeBound, Neighbors
from dpmagic.accountant.binding import ledger_key, open_binding
from dpmagic.accountant.bounds import BoundsSummary
from dpmagic.accountant.currency import Budget, Currency, check_cost, parse_budget
from dpmagic.accountant.ledger import Ledger
from dpmagic.backends.bind import backend_for
from dpmagic.domain.schema import OutOfRangePolicy, Schema
from dpmagic.errors import BudgetError, BudgetExceededError, ConfigurationError, DPMagicError
from dpmagic.query.composed import split_conditions
from dpmagic.query.model import Query
from dpmagic.query.regions import EmptyRegionWarning, empty_region_message, warn_if_empty
from dpmagic.query.scalar import scalar_subquery
from dpmagic.query.sql import parse_query
from dpmagic.query.where import check_categories
from dpmagic.releases import Mechanism, QueryMechanism
from dpmagic.releases.postprocess import check_postprocess, tidy
from dpmagic.session.admission import current_admission
from dpmagic.session.cache import ReleaseCache, cache_key
from dpmagic.session.costs import CostSpec, parse_cost, session_cost
from dpmagic.session.events import EventBus, Listener
from dpmagic.session.progress import Ticker
from dpmagic.session.rendering import numbered, plural, query_numbers
from dpmagic.session.results import Preview, PublicResult, QueryResult, Released

if TYPE_CHECKING:
    from dpmagic.session.batch import BatchPreview, BatchResult
    from dpmagic.session.decide import DecisionAnswer

# re-exported: their homes are dpmagic.query.regions and dpmagic.accountant.binding
__all__ = ["Session", "QueryResult", "Preview", "EmptyRegionWarning", "empty_region_message", "ledger_key"]


class Session:
    """Holds the sensitive DataFrame, its public schema, the privacy definition, the budget and the accountant.

    Parameters
    ----------
    data:
        the sensitive table, validated against ``schema`` on binding: a pandas DataFrame, a Parquet/CSV path,
        glob or list of paths or a DuckDB relation (DuckDB: :mod:`dpmagic.backends.duckdb`), or a Spark
        DataFrame (:mod:`dpmagic.backends.spark`); see :func:`dpmagic.backends.bind.backend_for`.
    schema:
        a :class:`Schema`, a path to its JSON file, or its parsed JSON object.
    budget:
        ``"epsilon=1.0"`` (pure DP), ``"rho=0.5"`` (zCDP), ``"mu=1.0"`` (GDP), a dict, a :class:`Budget`, or a
        bare number (ε of pure DP, as ``%dpsession --budget 1``).
    bound:
        which upper bound on the maximum overlap is charged: ``exact`` (default), ``clique``, ``chromatic``
        or ``sequential``.
    default_cost:
        the cost of a query that does not name one (default: a tenth of the budget).
    out_of_range:
        ``"error"`` (default) or ``"clamp"``: what to do with numbers outside the declared bounds.
    ledger:
        a :class:`Ledger` or a path of a durable sqlite ledger file; ``None`` (default for the Python API) keeps
        it in memory for the life of the session.  The magics default to a durable file
        (:func:`~dpmagic.accountant.ledger.default_ledger_path`).
    table_names:
        further names FROM may give the bound table (the magics pass the notebook variable's name); the
        schema's ``table`` and schema-qualified forms (``PUMS.PUMS``) are always accepted, other tables refused.
    neighbors:
        ``"add-remove"`` (default: one person's row is added or removed) or ``"replace"`` (bounded DP: one
        row is changed; the charged loss is the worst *pair* of rows and sensitivities follow
        :mod:`dpmagic.noise.sensitivity`).
    diagnostics:
        the data custodian's switch for fixing the data: binding errors then show the first undeclared
        category values and the number of values out of bounds.  Off by default: binding errors name the column
        and the problem only, so that binding by a server, or under an analyst's schema, reads nothing.
    """

    def __init__(
        self,
        data: Any,
        schema: Schema | str | Path | Mapping[str, Any],
        budget: str | float | Budget | dict[str, float],
        *,
        bound: ChargeBound = "exact",
        default_cost: float | None = None,
        out_of_range: OutOfRangePolicy = "error",
        ledger: Ledger | str | Path | None = None,
        time_limit: float = 10.0,
        delta: float = 1e-6,
        neighbors: Neighbors = "add-remove",
        table_names: tuple[str, ...] | list[str] | None = None,
        diagnostics: bool = False,
    ) -> None:
        self.schema = Schema.of(schema)
        if isinstance(budget, bool):
            raise BudgetError(f"a budget must be like 'epsilon=1.0', got {budget!r}")
        if isinstance(budget, (int, float)):
            budget = {"epsilon": budget}  # a bare number is ε of pure DP, as `%dpsession --budget 1`
        self.budget = parse_budget(budget, delta=delta)
        if bound not in CHARGE_BOUNDS:
            raise ConfigurationError(f"unknown bound {bound!r}: choose one of {', '.join(CHARGE_BOUNDS)}")
        self.default_cost = (
            self.budget.total / 10.0
            if default_cost is None
            else check_cost(default_cost, f"the default {self.budget.currency.parameter}")
        )
        # pandas DataFrame → PandasBackend; Parquet/CSV path, glob or list, DuckDB relation → DuckDB; Spark → Spark
        self.backend = backend_for(data, self.schema, out_of_range=out_of_range, diagnostics=diagnostics)
        #: the validated frame (pandas backend only; engine backends keep the rows in the engine)
        self.data = getattr(self.backend, "df", None)
        #: the names FROM may use for the bound table (schema-qualified forms such as PUMS.PUMS included)
        self.table_names = tuple(dict.fromkeys([self.schema.table, *(table_names or ())]))
        if not isinstance(ledger, Ledger):
            ledger = Ledger(ledger)
        self.ledger = ledger
        self.ledger_key = ledger_key(self.schema)
        open_binding(ledger, self.ledger_key, self.schema, self.budget, neighbors)
        self.accountant = Accountant(
            self.budget,
            self.schema,
            bound=bound,
            ledger=ledger,
            time_limit=time_limit,
            neighbors=neighbors,
            key=self.ledger_key,
        )
        #: backend reads, one at a time (outside :attr:`lock`: a read never delays an admission)
        self._read_lock = threading.Lock()
        self.results: list[QueryResult] = []
        #: batch estimates kept by name (``Session.batch(..., keep=NAME)``): follow-up queries from them are free
        self.estimates: dict[str, Any] = {}
        self.cache = ReleaseCache()
        self.events = EventBus()
        self.panel: Any = None  # the live budget widget, once the magics display it
        self.sidecar: Any = None  # JupyterLab side panel holding it (sidecar package), if used

    # -- events ------------------------------------------------------------------------------------------
    def subscribe(self, callback: Listener) -> None:
        """Call ``callback(kind, info)`` on every event: ``computing``, ``progress`` (every 0.25 s once the
        accounting took 0.5 s: ``elapsed``, ``limit`` in seconds), ``charged``, ``cached``, ``refused``, ``failed``."""
        self.events.subscribe(callback)

    def _emit(self, kind: str, **info: Any) -> None:
        self.events.emit(kind, **info)

    # -- properties ------------------------------------------------------------------------------------
    @property
    def lock(self) -> Any:
        """The re-entrant lock of admission and charge (the accountant's): hold it to make several steps atomic."""
        return self.accountant.lock

    @property
    def currency(self) -> Currency:
        return self.budget.currency

    @property
    def spent(self) -> float:
        """Privacy loss charged so far, in the session's parameter (ε, ρ or μ)."""
        return self.accountant.spent

    @property
    def remaining(self) -> float:
        return self.accountant.remaining

    @property
    def bound(self) -> ChargeBound:
        return self.accountant.bound

    @property
    def neighbors(self) -> Neighbors:
        return self.accountant.neighbors

    # -- queries -----------------------------------------------------------------------------------------
    def parse(self, sql: str) -> Query:
        """Parse and validate ``sql`` against the schema (no data, no budget); a comparison with a category the
        schema does not declare is refused (:func:`~dpmagic.query.where.check_categories`)."""
        # a schema that declares no table name ("data", the default) accepts any one name in FROM
        names = None if self.table_names == ("data",) else self.table_names
        q = parse_query(sql, self.schema, tables=names)
        check_categories(q, self.schema)  # a category that is not declared is a typo: refused, with the nearest
        return q

    def affordable(self, sql_or_query: str | Query) -> float:
        """The largest cost a query could be given now: budget minus the maximum current load on its region.

        Queries on fresh regions can still get the full budget even when others are exhausted.  Reads no data.
        """
        q = self.parse(sql_or_query) if isinstance(sql_or_query, str) else sql_or_query
        left = self.accountant.affordable(q.coverage)
        extra = current_admission()  # a server's per-analyst quota (dpmagic.session.admission)
        return left if extra is None else min(left, extra.affordable(q.coverage))

    def preview(
        self,
        sql: str,
        cost: CostSpec = None,
        *,
        epsilon: CostSpec = None,
        rho: CostSpec = None,
        mu: CostSpec = None,
        ci: float | None = None,
        min_rows: int | None = None,
    ) -> Preview | PublicResult:
        """Dry run: what the query would add to the charged bound, which registered queries it overlaps, which
        row would become the worst case, and its noise — without reading data or spending anything.  A SELECT of
        GROUP BY keys alone is public: its answer (:class:`PublicResult`) is returned, as it costs nothing.  A
        scalar subquery gives both dry runs (:class:`~dpmagic.session.results.ScalarPreview`)."""
        sq = scalar_subquery(sql)
        if sq is not None:
            from dpmagic.session.scalar import scalar_preview

            return scalar_preview(  # type: ignore[return-value]
                self, sq, cost=cost, epsilon=epsilon, rho=rho, mu=mu, ci=ci, min_rows=min_rows
            )
        comp = split_conditions(sql)
        if comp is not None:
            from dpmagic.session.composed import composed_preview

            named = {"epsilon": epsilon, "rho": rho, "mu": mu}
            return composed_preview(self, comp, cost, named, min_rows=min_rows)  # type: ignore[return-value]
        q = self.parse(sql)
        if q.is_public:
            return self.public_answer(q)
        spec = parse_cost(self.currency, cost, {"epsilon": epsilon, "rho": rho, "mu": mu})
        warn_if_empty(q)
        cached = self.cache.get(cache_key(q, self.currency, spec, ci, min_rows), self) is not None
        c = session_cost(self, q, spec, ci=ci, min_rows=min_rows)
        mech = self._mechanism(q, c)
        ch = self.dry_run(mech)
        noise = mech.noise
        return Preview(
            query=q,
            cost=c,
            currency=self.currency,
            charge=ch,
            affordable=self.affordable(q),
            overlapping=numbered(tables.overlapping_frame(self.accountant, ch.neighbors), query_numbers(self)),
            noise=noise,
            halfwidth={k: v.ci_halfwidth(0.95) for k, v in noise.items()},
            cached=cached,
            spent=self.spent,
            budget=self.budget.total,
        )

    def query(
        self,
        sql: str,
        cost: CostSpec = None,
        *,
        epsilon: CostSpec = None,
        rho: CostSpec = None,
        mu: CostSpec = None,
        ci: float | None = None,
        min_rows: int | None = None,
        fresh: bool = False,
        postprocess: tuple[str, ...] | list[str] = (),
    ) -> QueryResult | PublicResult:
        """Answer one SQL query with noise, charging its cost first.

        ``epsilon`` / ``rho`` / ``mu`` (or ``cost``) is a number or ``"max"`` (everything affordable on the
        query's region); ``ci`` asks instead for the smallest cost whose 95% interval half-width is ≤ ``ci``
        (``min_rows`` is needed for AVG).  Re-running an identical query (same normalised SQL and cost option)
        returns the stored answer and charges nothing, unless ``fresh=True``.  ``postprocess`` switches on free
        post-processing of the released values (``"integer"``, ``"nonnegative"``: :func:`dpmagic.releases.postprocess.tidy`).
        A WHERE clause that matches no row of the declared domain raises an :class:`EmptyRegionWarning` before
        anything is charged (the query is still answered: its true values are 0).

        Raises a :class:`~dpmagic.errors.DPMagicError` subclass, spending nothing, on bad SQL, a bad cost or
        an exhausted budget.

        A scalar subquery (``WHERE age > (SELECT AVG(age) FROM t)``) is two releases in sequence, each at the cost
        given (:mod:`dpmagic.session.scalar`): the inner one first, then the outer with the inner's noisy value as
        a constant; the answer's notes say so, and an error of the outer says that the inner stays charged.
        """
        sq = scalar_subquery(sql)
        if sq is not None:
            from dpmagic.session.scalar import scalar_query

            named = {"epsilon": epsilon, "rho": rho, "mu": mu}
            return scalar_query(self, sq, cost, named, ci=ci, min_rows=min_rows, fresh=fresh, postprocess=postprocess)
        comp = split_conditions(sql)  # conditional aggregates of different conditions: one release per condition
        if comp is not None:
            from dpmagic.session.composed import composed_query

            named = {"epsilon": epsilon, "rho": rho, "mu": mu}
            return composed_query(  # type: ignore[return-value]
                self, comp, cost, named, ci=ci, min_rows=min_rows, fresh=fresh, postprocess=postprocess
            )
        t0 = time.perf_counter()
        q = self.parse(sql)
        spec = parse_cost(self.currency, cost, {"epsilon": epsilon, "rho": rho, "mu": mu})
        if q.is_public:  # GROUP BY keys alone: public, free, nothing read (a cost option is accepted and unused)
            return self.public_answer(q)
        check_postprocess(postprocess)  # unknown options fail here, before any charge
        key = cache_key(q, self.currency, spec, ci, min_rows)
        if not fresh:
            hit = self.cache.get(key, self)
            if hit is not None:
                hit.df = tidy(hit.df, q, self.schema, postprocess)
                self.results.append(hit)
                self._emit("cached", entry=hit.entry_id)
                return hit
        warn_if_empty(q)  # before charging: the WHERE box is empty on the declared domain (schema only)
        cells = q.n_cells
        self._emit(
            "computing",
            message=f"checking the maximum overlap with {len(self.accountant)} registered queries"
            + (f", then answering {cells:,} cells" if cells > 1 else ""),
        )
        try:
            c = session_cost(self, q, spec, ci=ci, min_rows=min_rows)
            mech = self._mechanism(q, c)
        except DPMagicError as exc:
            self._emit("refused" if isinstance(exc, BudgetExceededError) else "failed", message=str(exc))
            raise
        released = self.run(mech, sql=sql, canonical=q.canonical, details={"cache_key": key}, started=t0)
        entry_id, charge, df, seconds = released.entry_id, released.charge, released.df, released.seconds
        result = QueryResult(
            query=q,
            df=tidy(df, q, self.schema, postprocess),
            cost=c,
            currency=self.currency,
            charge=charge,
            noise=mech.noise,
            entry_id=entry_id,
            seconds=seconds,
            spent=self.spent,
            budget=self.budget.total,
            number=len(self.accountant),
            default_cost=spec is None and ci is None,
            drawn=getattr(mech, "drawn", None),
        )
        self.cache.put(key, result)
        self.results.append(result)
        return result

    def public_answer(self, q: Query) -> PublicResult:
        """The answer of a SELECT of GROUP BY keys alone: the declared keys inside the WHERE region, with the
        query's aliases, ORDER BY and LIMIT applied (:func:`dpmagic.query.outputs.finish`).  From the schema and
        the query only: no data is read, nothing is charged or recorded (invariant 1: the keys are public)."""
        from dpmagic.query.outputs import finish

        keys = q.region_keys()
        frame = pd.DataFrame({g: [k[i] for k in keys] for i, g in enumerate(q.group_by)})
        return PublicResult(query=q, df=finish(q, frame).reset_index(drop=True))

    def _mechanism(self, q: Query, cost: float) -> QueryMechanism:
        """The release of ``q`` at ``cost``, its noise planned (no data read)."""
        return QueryMechanism(q, self.schema, self.currency, cost, replace_one=self.neighbors == "replace")

    def dry_run(self, mechanism: Mechanism) -> Charge:
        """:meth:`run` without the charge and the read: the exact :class:`Charge` that running ``mechanism`` now
        would make (``admissible`` False when the run would be refused).  The same admission checks as :meth:`run`:
        what the backend cannot answer raises here as there (public information only), then the accountant's
        preview and a further admission's (a server's per-analyst quota).  Reads no data, changes nothing."""
        return self.dry_run_refusal(mechanism)[0]

    def dry_run_refusal(self, mechanism: Mechanism) -> tuple[Charge, str | None]:
        """:meth:`dry_run`, and the refusal of the installed further admission (a server's per-analyst quota,
        :mod:`dpmagic.session.admission`) when the budget itself would admit the run but it would not (else
        None): the message :meth:`run` would raise."""
        with self.lock:
            mechanism.check(self.backend)
            ch = self.accountant.preview(mechanism.coverage, mechanism.cost)
            extra = current_admission()
            if extra is None or not ch.admissible:
                return ch, None
            try:
                extra.admit(mechanism.coverage, mechanism.cost)
            except BudgetExceededError as exc:
                return dataclasses.replace(ch, admissible=False), str(exc)
            return ch, None

    def run(
        self,
        mechanism: Mechanism,
        *,
        sql: str,
        canonical: str,
        details: Mapping[str, Any] | None = None,
        started: float | None = None,
        asked_at: float | None = None,
    ) -> Released:
        """Charge ``mechanism`` and release it: the one path every kind of release takes.

        The mechanism's coverage and cost are checked against the budget and the charge is recorded durably
        (with ``mechanism.describe()`` and ``details``) before :meth:`Mechanism.release` may read any row;
        a refused or invalid charge raises and changes nothing.  After the charge, any failure reaches the
        caller as one fixed, data-independent :class:`~dpmagic.errors.DPMagicError` (the charge stays, nothing
        is released).  ``seconds`` of the result is the time from ``started`` to the data read: public work only.
        ``asked_at``: the wall-clock time recorded with the charge (and its release); a caller that reads several
        times passes the time it was asked, taken before its first read, so that no recorded time follows a
        read (default: now, before this release's read).

        Thread-safe: the preview and the charge are one critical section under :attr:`lock`; the read is
        outside it, under the session's read lock.
        """
        t0 = time.perf_counter() if started is None else started
        computing = f"checking the maximum overlap with {len(self.accountant)} registered queries"
        tick = Ticker(lambda s: self._emit("progress", elapsed=s, message=computing, limit=self.accountant.time_limit))
        try:
            # accounting only (public): the data is read after it; the lock is released before the ticker's thread
            # is joined (a progress listener may read the session)
            with tick, self.lock:
                mechanism.check(self.backend)  # what the backend cannot answer is refused here, before the charge
                # one overlap computation, outside the ledger's write lock but under the session's: committed
                # as is (no other thread can charge in between; another process may, then it is recomputed)
                pre = self.accountant.preview(mechanism.coverage, mechanism.cost)
                extra = current_admission()  # a server's per-analyst quota: checked first, charged with it
                if extra is not None:
                    extra.admit(mechanism.coverage, mechanism.cost)
                with self.ledger.transaction() if extra is not None else contextlib.nullcontext():
                    entry_id, charge = self.accountant.charge(
                        mechanism.coverage,
                        mechanism.cost,
                        sql=sql,
                        canonical=canonical,
                        details={
                            "kind": mechanism.kind,
                            **mechanism.describe(),
                            **(details or {}),
                            **(extra.details() if extra is not None else {}),
                        },
                        preview=pre,
                        created=asked_at,
                    )
                    if extra is not None:  # same transaction: both charges are durable together, or neither
                        extra.commit(
                            mechanism.coverage, mechanism.cost, sql=sql, canonical=canonical, entry_id=entry_id
                        )
        except BudgetExceededError as exc:
            self._emit("refused", message=str(exc))
            raise
        except DPMagicError as exc:
            self._emit("failed", message=str(exc))
            raise
        # ---- charged and recorded: only now is the data read ----
        # Timing shown to the analyst stops here: parsing, planning and the overlap check (public), never the
        # data read or the noise, whose duration could depend on the rows.
        seconds = time.perf_counter() - t0
        released = False
        try:
            with self._read_lock:
                df = mechanism.release(self.backend)
            self.accountant.record_release(entry_id, {"columns": list(df.columns), "data": df.to_numpy().tolist()})
            released = True
        except Exception:
            pass
        if not released:
            # After the data was read, no exception text may leave (it could carry an exact aggregate), and the
            # message must not depend on the rows: one generic error, the budget stays charged, nothing released.
            # Raised outside the handler, so that not even its __context__ holds the original exception.
            self._emit("failed", message=_POST_CHARGE_ERROR)
            raise DPMagicError(_POST_CHARGE_ERROR) from None
        # every kind of release (query, batch, decision read) tells the panel the same way
        self._emit("charged", entry=entry_id, number=len(self.accountant), seconds=seconds)
        return Released(entry_id, charge, df, seconds)

    def batch(
        self,
        workload: str,
        *,
        where: str | None = None,
        strategy: str = "auto",
        cost: CostSpec = None,
        epsilon: CostSpec = None,
        rho: CostSpec = None,
        mu: CostSpec = None,
        rmse: float | None = None,
        dry_run: bool = False,
        keep: str | None = None,
        kept: dict[str, Any] | None = None,
    ) -> BatchPreview | BatchResult:
        """Answer a whole workload at once (issue 15): ``prefix(age) * identity(sex)``, ``marginals([a, b], 2)``
        ... (:mod:`dpmagic.batch.spec`) within ``where``, by the matrix mechanism with the strategy of smallest
        expected RMSE (or ``strategy``), or several ``SELECT COUNT(*) ... WHERE <box>`` measured with noise of
        their exact batch sensitivity.  One charge (coverage: the WHERE box), through :meth:`run`.  ``rmse``
        asks for the smallest cost whose expected RMSE is at most it; ``dry_run`` previews the strategies,
        their expected RMSE and the charge, reading nothing (:mod:`dpmagic.batch.release`).  ``keep`` names the
        released estimate (:class:`dpmagic.batch.estimate.BatchEstimate`, also ``result.estimate``): any linear
        query of the batch's columns is then answered from it for free, ``session.estimate(NAME).range(lo, hi)``.
        One column has no query limit (all ranges over 4,096 values: 8.4M queries, answered implicitly).
        ``kept``: where the kept estimate goes instead of :attr:`estimates` (a custodian server keeps each
        analyst's own)."""
        from dpmagic.session.batch import run_batch

        spec = parse_cost(self.currency, cost, {"epsilon": epsilon, "rho": rho, "mu": mu})
        return run_batch(
            self,
            workload,
            where=where,
            strategy=strategy,
            cost_spec=spec,
            rmse_target=rmse,
            dry_run=dry_run,
            keep=keep,
            kept=kept,
        )

    def estimate(self, name: str) -> Any:
        """The batch estimate kept as ``name`` (``batch(..., keep=name)``); its follow-up queries cost nothing."""
        from dpmagic.session.batch import kept_estimate

        return kept_estimate(self.estimates, name)

    def consistent(self, level: float = 0.95) -> pd.DataFrame:
        """Every included COUNT / SUM / AVG released so far, raw and made consistent: the best linear unbiased
        estimate given *all* the session's releases (:mod:`dpmagic.releases.consistency`), with proven intervals.
        Free post-processing of noisy values: reads no data, charges and records nothing."""
        from dpmagic.releases.consistency import consistent_table

        if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0.0 < level < 1.0:
            raise ConfigurationError(f"the confidence level must be a number between 0 and 1, got {level!r}")
        seen: dict[int, QueryResult] = {}
        for r in self.results:  # a cached re-run is the same release: once
            if isinstance(r, QueryResult) and r.drawn is not None and r.entry_id not in seen:
                seen[r.entry_id] = r
        return consistent_table([(r.number, r.query, r.drawn) for r in seen.values()], self.schema, level)

    def decide(
        self,
        sql: str,
        *,
        fnr: float,
        fpr: float | None,
        max_epsilon: float | None = None,
        dry_run: bool = False,
        max_group_size: int | None = None,
    ) -> DecisionAnswer:
        """Answer a GROUP BY … HAVING decision query with false-negative target ``fnr`` (proven) and
        false-positive target ``fpr`` (ProBE's estimate), each read charged through :meth:`run`.

        ``max_group_size`` is a public bound on a group's size (default: the schema's ``max_group_size``);
        ``max_epsilon`` caps the pure-ε loss of a row; ``dry_run`` shows the planned Phase One cost and reads
        nothing.  Returns a
        :class:`dpmagic.session.decide.DecisionAnswer` (see ``docs/decision-queries.md``).
        """
        from dpmagic.session.decide import decide

        return decide(
            self, sql, fnr=fnr, fpr=fpr, max_epsilon=max_epsilon, dry_run=dry_run, max_group_size=max_group_size
        )

    def budget_map(self, first: str, second: str) -> pd.DataFrame:
        """Current load (in the session's parameter) of every (first, second) cell, maximised over the other
        columns: where the budget has gone.  Rows are ``first``'s values, columns ``second``'s."""
        return tables.budget_map(self.accountant, first, second)

    # -- reporting ---------------------------------------------------------------------------------------
    def ledger_frame(self) -> pd.DataFrame:
        """One row per charged query: SQL, cost, the bound charged after it, status."""
        return tables.ledger_frame(self.accountant)

    def bounds(self) -> BoundsSummary:
        """All four bounds (in the session's parameter), the charged one, the saving and the worst-case row."""
        return self.accountant.summary()

    def bounds_summary(self) -> dict[str, Any]:
        """:meth:`bounds` as a JSON-able dict (:meth:`BoundsSummary.to_dict`)."""
        return self.bounds().to_dict()

    def approx_dp(self) -> tuple[float, float]:
        """The (ε, δ) equivalent of the charged loss (δ = the session's delta; δ = 0 for pure DP)."""
        cur = self.currency
        eps = cur.approx_dp(self.accountant.charged_weight, self.budget.delta)
        return eps, (0.0 if cur.definition == "pure" else self.budget.delta)

    def __repr__(self) -> str:
        cur = self.currency
        return (
            f"<dpmagic.Session table={self.schema.table!r} "
            f"{cur.parameter}: {self.spent:.4g} of {self.budget.total:.4g} charged ({self.bound}), "
            f"{plural(len(self.accountant), 'query', 'queries')}>"
        )


#: The one message of any failure after a query was charged (data-independent by construction).
_POST_CHARGE_ERROR = "internal error while answering: the query stays charged and nothing was released"
