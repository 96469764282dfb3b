"""A dpmagic session: sensitive data + public schema + budget + accountant, usable without IPython.

>>> import dpmagic
>>> s = dpmagic.Session(df, "adult.schema.json", "epsilon=1.0")          # doctest: +SKIP
>>> r = s.query("SELECT sex, COUNT(*) FROM adult GROUP BY sex", epsilon=0.1)  # doctest: +SKIP
>>> r.df                                                                  # doctest: +SKIP

Order of operations for every query (invariant 2): parse and validate the SQL against the schema → plan the
noise → check the cost against the budget and commit the charge to the ledger → only then read the rows →
draw the noise → record the release.  Any error before the commit spends nothing and changes nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import html
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dpmagic import display
from dpmagic.accountant.accountant import CHARGE_BOUNDS, Accountant, Charge, ChargeBound, Neighbors
from dpmagic.accountant.currency import Budget, Currency, check_cost, parse_budget
from dpmagic.accountant.ledger import Ledger
from dpmagic.backends.pandas import PandasBackend
from dpmagic.errors import BudgetError, BudgetExceededError, ConfigurationError, DPMagicError
from dpmagic.mechanisms import Noise
from dpmagic.postprocess import answer_notes, tidy
from dpmagic.progress import Ticker
from dpmagic.query.model import Query
from dpmagic.query.sql import parse_query
from dpmagic.release import ReleasePlan, cost_for_target, plan_noise, release, units_of
from dpmagic.schema import OutOfRangePolicy, Schema

__all__ = ["Session", "QueryResult", "Preview", "EmptyRegionWarning"]

CostSpec = float | str | None


@dataclass
class QueryResult:
    """A released answer: the noisy values with 95% intervals, and what it cost."""

    query: Query
    df: pd.DataFrame
    cost: float
    currency: Currency
    charge: Charge
    noise: dict[str, Noise]
    entry_id: int
    #: seconds spent before the data was read (parsing, planning, overlap check): never data-dependent
    seconds: float
    spent: float
    budget: float
    cached: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    number: int = 0  # the query's number as the analyst sees it (1..n in charging order; 0 = unknown)
    default_cost: bool = False  # no cost was named: the session's default was spent

    @property
    def notes(self) -> list[str]:
        """Plain-language notes on the answer (an AVG not shown, a negative count…), from released values only."""
        return answer_notes(self.query, self.df)

    def summary(self) -> str:
        """The one-line cost summary shown under a cell's result."""
        return display.result_summary(self)

    def noise_description(self) -> str:
        return "; ".join(f"{k}: {v}" for k, v in self.noise.items())

    def _repr_html_(self) -> str:
        return display.result_html(self)

    def __repr__(self) -> str:
        return display.result_text(self)


@dataclass
class Preview:
    """What a query would cost and do, computed without reading data or spending anything."""

    query: Query
    cost: float
    currency: Currency
    charge: Charge
    affordable: float
    overlapping: pd.DataFrame
    noise: dict[str, Noise]
    halfwidth: dict[str, float]
    cached: bool
    spent: float
    budget: float

    @property
    def admissible(self) -> bool:
        return self.charge.admissible

    @property
    def increase(self) -> float:
        """How much the charged loss would grow, in the session's parameter."""
        cur = self.currency
        return cur.cost(self.charge.after) - cur.cost(self.charge.before)

    def summary(self) -> str:
        cur = self.currency
        if self.cached:
            return "dry run: this exact query was already answered; re-running it returns the stored answer for free"
        verdict = "would be admitted" if self.admissible else "would be REFUSED (over budget)"
        row = ", ".join(f"{k}={v!r}" for k, v in (self.charge.worst_row or {}).items()) or "any row"
        return (
            f"dry run ({cur.symbol}={self.cost:.4g}): {verdict}; charged loss {cur.cost(self.charge.before):.4g} → "
            f"{cur.cost(self.charge.after):.4g} (+{self.increase:.4g}, {self.charge.charged_as}); overlaps "
            f"{self.charge.overlaps} registered quer{'y' if self.charge.overlaps == 1 else 'ies'}; worst-case row "
            f"after it: {row}; at most {cur.symbol}={self.affordable:.4g} is affordable on this query's region. "
            "Nothing was spent and no data was read."
        )

    def _repr_html_(self) -> str:
        noise = "; ".join(f"{k}: {v} (95% ±{self.halfwidth[k]:.4g})" for k, v in self.noise.items())
        table = self.overlapping.to_html(index=False) if len(self.overlapping) else "<p>no overlapping queries</p>"
        return f"<div><b>{html.escape(self.summary())}</b><br>noise: {html.escape(noise)}</div>{table}"

    def __repr__(self) -> str:
        return self.summary()


class Session:
    """Holds the sensitive DataFrame, its public schema, the privacy definition, the budget and the accountant.

    Parameters
    ----------
    data:
        the sensitive table; validated against ``schema`` on binding.
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
    neighbors:
        ``"add-remove"`` (default: one person's row is added or removed) or ``"replace"`` (bounded DP: one
        row is changed; the charged loss is the worst *pair* of rows and sensitivities follow
        :mod:`dpmagic.sensitivity`).
    """

    def __init__(
        self,
        data: pd.DataFrame,
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
    ) -> None:
        if isinstance(schema, Schema):
            self.schema = schema
        elif isinstance(schema, Mapping):
            self.schema = Schema.from_dict(schema)
        else:
            self.schema = Schema.from_json(schema)
        if isinstance(budget, (int, float)) and not isinstance(budget, bool):
            budget = {"epsilon": budget}  # a bare number is ε of pure DP, as `%dpsession --budget 1`
        self.budget = parse_budget(budget, delta=delta)
        if bound not in CHARGE_BOUNDS:
            raise ConfigurationError(f"unknown bound {bound!r}: choose one of {', '.join(CHARGE_BOUNDS)}")
        self.default_cost = (
            self.budget.total / 10.0
            if default_cost is None
            else check_cost(default_cost, f"the default {self.budget.currency.parameter}")
        )
        self.data = self.schema.validate(data, out_of_range=out_of_range)
        self.backend = PandasBackend(self.data, self.schema)
        if not isinstance(ledger, Ledger):
            ledger = Ledger(ledger)
        self.ledger = ledger
        self.ledger_key = ledger_key(self.schema)
        self._open_ledger(neighbors)
        self.accountant = Accountant(
            self.budget,
            self.schema,
            bound=bound,
            ledger=ledger,
            time_limit=time_limit,
            neighbors=neighbors,
            key=self.ledger_key,
        )
        self.results: list[QueryResult] = []
        self._cache: dict[str, QueryResult] = {}
        self._listeners: list[Callable[[str, dict[str, Any]], None]] = []
        self.panel: Any = None  # the live budget widget, once the magics display it
        self.sidecar: Any = None  # JupyterLab side panel holding it (sidecar package), if used

    def _open_ledger(self, neighbors: str) -> None:
        """Record the first binding of this data set, or check that this binding matches the recorded one.

        The ledger key is the data set's identity: the schema's declared ``dataset`` id, else its canonical
        domain (:func:`ledger_key`) — never the bound rows, so dropping, duplicating or editing a row, or
        editing the schema's free text, cannot hand out a fresh budget for the same people.  Its privacy
        definition, budget and neighbouring relation are fixed by its first binding; binding it with another
        definition or budget is refused: changing the budget is a custodian action (``dpmagic ledger
        set-budget`` / ``reset``), recorded in the ledger.  Nothing computed from the rows (no hash, no row
        count) is written: the ledger file and its exports are not private data.
        """
        cur = self.currency
        domain = self.schema.domain_fingerprint()
        if not self.ledger.can_append:
            raise ConfigurationError(
                f"the ledger at {self.ledger.path} is keyed by its custodian: a session charging it needs the "
                "custodian key",
                hint="the custodian provides it to the kernel: $DPMAGIC_LEDGER_KEY_FILE",
            )
        with self.ledger.transaction():
            opening = self.ledger.opening(self.ledger_key)
            if opening is None:
                self.ledger.append(
                    self.ledger_key,
                    "open",
                    {
                        "dataset": self.schema.dataset,
                        "table": self.schema.table,
                        "domain": domain,
                        "definition": cur.definition,
                        "parameter": cur.parameter,
                        "budget": self.budget.total,
                        "delta": self.budget.delta,
                        "neighbors": neighbors,
                    },
                )
                return
        if opening.get("domain") != domain:
            raise ConfigurationError(
                f"data set {self.schema.dataset!r} was first bound in this ledger with another domain (columns, "
                "categories or bounds); its recorded charges are about that domain",
                hint="bind the schema it was opened with, or have the custodian declare a new 'dataset' id",
            )
        if opening["definition"] != cur.definition:
            raise BudgetError(
                f"this data set's ledger is kept in {opening['parameter']} ({opening['definition']}); it cannot be "
                f"re-bound under {cur.definition}",
                hint=f"bind with --budget {opening['parameter']}=...",
            )
        recorded = self.ledger.budget_of(self.ledger_key)
        if recorded is not None and abs(recorded - self.budget.total) > 1e-12 * max(1.0, recorded):
            raise BudgetError(
                f"this data set's ledger has a budget of {cur.parameter}={recorded:g}, not {self.budget.total:g}: "
                "changing a budget is a custodian action",
                hint=f"bind with --budget {cur.parameter}={recorded:g}, or ask the custodian (dpmagic ledger set-budget)",
            )
        if opening.get("neighbors", "add-remove") != neighbors:
            raise ConfigurationError(
                f"this data set's ledger uses {opening.get('neighbors')} neighbours, not {neighbors}"
            )

    # -- events ------------------------------------------------------------------------------------------
    def subscribe(self, callback: Callable[[str, dict[str, Any]], None]) -> None:
        """Call ``callback(kind, info)`` on every event: ``computing``, ``progress`` (every 0.25 s once the
        accounting took 0.5 s: ``elapsed``, ``limit`` in seconds), ``charged``, ``cached``, ``refused``, ``failed``."""
        self._listeners.append(callback)

    def _emit(self, kind: str, **info: Any) -> None:
        for cb in list(self._listeners):
            with contextlib.suppress(Exception):  # a display problem must never affect accounting
                cb(kind, info)

    # -- properties ------------------------------------------------------------------------------------
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
        """Parse and validate ``sql`` against the schema (no data, no budget)."""
        return parse_query(sql, self.schema)

    def _spec(self, cost: CostSpec, named: Mapping[str, CostSpec]) -> CostSpec:
        """The cost as the user gave it: a number, ``"max"`` or None (default), in the session's parameter."""
        given = {k: v for k, v in named.items() if v is not None}
        if cost is not None:
            given[self.currency.parameter] = cost
        wrong = [k for k in given if k != self.currency.parameter]
        if wrong:
            raise BudgetError(
                f"this session's budget is in {self.currency.parameter} ({self.currency.definition}); "
                f"a cost in {wrong[0]} does not apply"
            )
        value = given.get(self.currency.parameter)
        if isinstance(value, str):
            if value.strip().lower() == "max":
                return "max"
            raise BudgetError(f"the query's {self.currency.parameter} must be a number or 'max', got {value!r}")
        if value is not None:
            return check_cost(value, f"the query's {self.currency.parameter}")
        return None

    def _resolve(self, q: Query, spec: CostSpec, ci: float | None, min_rows: int | None) -> float:
        """The numeric cost of a query (no data read): explicit, default, ``max`` (affordable) or accuracy-first."""
        cur = self.currency
        if ci is not None:
            if spec is not None:
                raise ConfigurationError(f"give either --ci or --{cur.parameter}, not both")
            if min_rows is not None and (isinstance(min_rows, bool) or not isinstance(min_rows, int) or min_rows < 1):
                raise ConfigurationError(f"--min-rows must be a positive whole number, got {min_rows!r}")
            need = cost_for_target(q, self.schema, cur, ci, min_rows=min_rows, replace_one=self.neighbors == "replace")
            left = self.affordable(q)
            if need > left * (1.0 + 1e-9):
                raise BudgetExceededError(
                    f"refused: a 95% half-width of ±{ci:g} needs {cur.format(need)}, but at most "
                    f"{cur.format(left)} is affordable on this query's region",
                    hint="accept a wider interval, or ask about a region with more budget left",
                )
            return need
        if spec == "max":
            left = self.affordable(q)
            if left <= self.budget.total * 1e-12:
                raise BudgetExceededError(
                    f"refused: no budget is left on this query's region ({cur.parameter} affordable: 0)",
                    hint="ask about a part of the domain where the budget is not yet spent",
                )
            return left
        if spec is None:
            return self.default_cost
        return float(spec)

    def _cache_key(self, q: Query, spec: CostSpec, ci: float | None, min_rows: int | None) -> str:
        cost = "default" if spec is None and ci is None else (f"ci={ci!r},min_rows={min_rows!r}" if ci else repr(spec))
        return f"{q.key}|{self.currency.parameter}={cost}"

    def _cached(self, key: str) -> QueryResult | None:
        hit = self._cache.get(key)
        if hit is None:
            e = self.accountant.released_entry(key)  # answered before a restart, or by another kernel
            if e is not None:
                q = self.parse(e.sql)
                hit = QueryResult(
                    query=q,
                    df=pd.DataFrame(e.answer["data"], columns=e.answer["columns"]),
                    cost=e.cost,
                    currency=self.currency,
                    charge=self.accountant.preview(q.coverage, e.cost),
                    noise={},
                    entry_id=e.id,
                    seconds=0.0,
                    spent=self.spent,
                    budget=self.budget.total,
                )
                self._cache[key] = hit
        if hit is None:
            return None
        return dataclasses.replace(
            hit,
            df=hit.df.copy(),
            seconds=0.0,
            spent=self.spent,
            budget=self.budget.total,
            cached=True,
            number=display.query_numbers(self).get(hit.entry_id, 0),
        )

    def affordable(self, sql_or_query: str | Query) -> float:
        """The largest cost a query could be given now: budget minus the maximum current load on its region.

        Queries on fresh regions can still get the full budget even when others are exhausted.  Reads no data.
        """
        q = self.parse(sql_or_query) if isinstance(sql_or_query, str) else sql_or_query
        return self.accountant.affordable(q.coverage)

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
    ) -> Preview:
        """Dry run: what the query would add to the charged bound, which registered queries it overlaps, which
        row would become the worst case, and its noise — without reading data or spending anything."""
        q = self.parse(sql)
        spec = self._spec(cost, {"epsilon": epsilon, "rho": rho, "mu": mu})
        warn_if_empty(q)
        cached = self._cached(self._cache_key(q, spec, ci, min_rows)) is not None
        c = self._resolve(q, spec, ci, min_rows)
        plan = plan_noise(q, self.schema, self.currency, c, replace_one=self.neighbors == "replace")
        ch = self.accountant.preview(q.coverage, c)
        overlapping = pd.DataFrame(
            [
                {"id": i, "sql": e.sql.strip(), "cost": e.cost}
                for i in ch.neighbors
                if (e := self.accountant.entry(i)) is not None
            ],
            columns=["id", "sql", "cost"],
        )
        noise = _noise_of(plan)
        return Preview(
            query=q,
            cost=c,
            currency=self.currency,
            charge=ch,
            affordable=self.affordable(q),
            overlapping=overlapping,
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
    ) -> QueryResult:
        """Answer one SQL query with noise, charging its cost first.

        ``epsilon`` / ``rho`` / ``mu`` (or ``cost``) is a number or ``"max"`` (everything affordable on the
        query's region); ``ci`` asks instead for the smallest cost whose 95% interval half-width is ≤ ``ci``
        (``min_rows`` is needed for AVG).  Re-running an identical query (same normalised SQL and cost option)
        returns the stored answer and charges nothing, unless ``fresh=True``.  ``postprocess`` switches on free
        post-processing of the released values (``"integer"``, ``"nonnegative"``: :func:`dpmagic.postprocess.tidy`).
        A WHERE clause that matches no row of the declared domain raises an :class:`EmptyRegionWarning` before
        anything is charged (the query is still answered: its true values are 0).

        Raises a :class:`~dpmagic.errors.DPMagicError` subclass, spending nothing, on bad SQL, a bad cost or
        an exhausted budget.
        """
        t0 = time.perf_counter()
        q = self.parse(sql)
        spec = self._spec(cost, {"epsilon": epsilon, "rho": rho, "mu": mu})
        tidy(pd.DataFrame(), q, self.schema, postprocess)  # unknown options fail here, before any charge
        key = self._cache_key(q, spec, ci, min_rows)
        if not fresh:
            hit = self._cached(key)
            if hit is not None:
                hit.df = tidy(hit.df, q, self.schema, postprocess)
                self.results.append(hit)
                self._emit("cached", entry=hit.entry_id)
                return hit
        warn_if_empty(q)  # before charging: the WHERE box is empty on the declared domain (schema only)
        cells = 1
        for g in q.group_by:
            cells *= self.schema[g].size  # type: ignore[union-attr]
        computing = f"checking the maximum overlap with {len(self.accountant)} registered queries"
        self._emit("computing", message=computing + (f", then answering {cells:,} cells" if cells > 1 else ""))
        tick = Ticker(lambda s: self._emit("progress", elapsed=s, message=computing, limit=self.accountant.time_limit))
        try:
            with tick:  # accounting only (public): the data is read after it
                c = self._resolve(q, spec, ci, min_rows)
                plan = plan_noise(q, self.schema, self.currency, c, replace_one=self.neighbors == "replace")
                details = {**_plan_details(plan), "cache_key": key}
                # one overlap computation, outside the ledger's write lock; committed as is unless one was added since
                pre = self.accountant.preview(q.coverage, c)
                entry_id, charge = self.accountant.charge(
                    q.coverage, c, sql=sql, canonical=q.canonical, details=details, preview=pre
                )
        except BudgetExceededError as exc:
            self._emit("refused", message=str(exc))
            raise
        except DPMagicError as exc:
            self._emit("failed", message=str(exc))
            raise
        # ---- charged and recorded: only now is the data read ----
        # Timing shown to the analyst stops here: it covers parsing, planning and the overlap check (public),
        # never the data read or the noise, whose duration could depend on the rows.
        seconds = time.perf_counter() - t0
        try:
            evaluated = self.backend.evaluate(q, units_of(plan))
            df = release(q, evaluated, plan, self.schema)
            self.accountant.record_release(entry_id, {"columns": list(df.columns), "data": df.to_numpy().tolist()})
        except Exception:
            # After the data was read, no exception text may leave (it could carry an exact aggregate), and the
            # message must not depend on the rows: one generic error, the budget stays charged, nothing released.
            self._emit("failed", message=_POST_CHARGE_ERROR)
            raise DPMagicError(_POST_CHARGE_ERROR) from None
        result = QueryResult(
            query=q,
            df=tidy(df, q, self.schema, postprocess),
            cost=c,
            currency=self.currency,
            charge=charge,
            noise=_noise_of(plan),
            entry_id=entry_id,
            seconds=seconds,
            spent=self.spent,
            budget=self.budget.total,
            number=len(self.accountant),
            default_cost=spec is None and ci is None,
        )
        self._emit("charged", entry=entry_id, number=result.number, seconds=result.seconds)
        self._cache[key] = result
        self.results.append(result)
        return result

    def budget_map(self, first: str, second: str) -> pd.DataFrame:
        """Current load (in the session's parameter) of every (first, second) cell, maximised over the other
        columns: where the budget has gone.  Rows are ``first``'s values, columns ``second``'s."""
        rows, cols, grid = self.accountant.load_map(first, second)
        cur = self.currency
        data = [[cur.cost(max(0.0, v)) for v in line] for line in grid]
        frame = pd.DataFrame(data, index=pd.Index(rows, name=first), columns=pd.Index(cols, name=second))
        return frame

    # -- reporting ---------------------------------------------------------------------------------------
    def ledger_frame(self) -> pd.DataFrame:
        """One row per charged query: SQL, cost, the bound charged after it, status."""
        rows = [
            {
                "id": e.id,
                "sql": e.sql.strip(),
                "cost": e.cost,
                "charged after": self.currency.cost(e.charged_after),
                "bound": e.bound,
                "status": e.status,
                "time": pd.Timestamp(e.created, unit="s"),
            }
            for e in self.accountant.entries()
        ]
        return pd.DataFrame(rows, columns=["id", "sql", "cost", "charged after", "bound", "status", "time"])

    def bounds_summary(self) -> dict[str, Any]:
        """All four bounds (in the session's parameter), the charged one, and the savings."""
        cur = self.currency
        if len(self.accountant) == 0:
            return {
                "sequential": 0.0,
                "chromatic": 0.0,
                "clique": 0.0,
                "overlap_lower": 0.0,
                "overlap_upper": 0.0,
                "overlap_exact": True,
                "clique_exact": True,
                "witness": None,
                "charged": 0.0,
                "saving": 0.0,
            }
        b = self.accountant.bounds()
        charged = self.accountant.charged_weight
        return {
            "sequential": cur.cost(b.sequential),
            "chromatic": cur.cost(b.chromatic),
            "clique": cur.cost(b.clique),
            "clique_exact": b.clique_exact,
            "overlap_lower": cur.cost(b.overlap.lower),
            "overlap_upper": cur.cost(b.overlap.upper),
            "overlap_exact": b.overlap.exact,
            "witness": b.overlap.witness,
            "charged": cur.cost(charged),
            "saving": 0.0 if b.sequential <= 0 else 1.0 - charged / b.sequential,
        }

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
            f"{len(self.accountant)} queries>"
        )


#: The one message of any failure after a query was charged (data-independent by construction).
_POST_CHARGE_ERROR = "internal error while answering: the query stays charged and nothing was released"


def ledger_key(schema: Schema) -> str:
    """The ledger key of a data set: from its declared ``dataset`` id, else from its canonical domain only.

    Never from the rows: the budget protects the people of the data set, whatever frame is bound under its
    id.  Without an id, two data sets with the same domain share one budget (conservative) unless the
    custodian declares different ids.
    """
    identity = f"dataset|{schema.dataset}" if schema.dataset is not None else f"domain|{schema.domain_fingerprint()}"
    return hashlib.sha256(identity.encode()).hexdigest()[:24]


class EmptyRegionWarning(UserWarning):
    """A query's WHERE clause matches no row of the declared domain (found from the schema alone)."""


def empty_region_message(q: Query) -> str | None:
    """Why ``q``'s WHERE clause is empty on the declared domain (public: the query's box and the schema), or None."""
    if not q.is_empty:
        return None
    cols = [c for c, s in q.where.constraints.items() if s.is_empty()]
    return (
        f"the WHERE clause matches no row of the declared domain (on {', '.join(map(repr, cols))}): every true "
        "value is 0, so the answer will be pure noise — check the condition against the schema's declared "
        "bounds and categories"
    )


def warn_if_empty(q: Query) -> None:
    msg = empty_region_message(q)
    if msg is not None:
        warnings.warn(msg, EmptyRegionWarning, stacklevel=3)


def _noise_of(plan: ReleasePlan) -> dict[str, Noise]:
    noise = {"count": plan.count} if plan.count is not None else {}
    noise.update({f"sum({k})": v for k, v in plan.sums.items()})
    return noise


def _plan_details(plan: ReleasePlan) -> dict[str, Any]:
    d: dict[str, Any] = {"share_cost": plan.share_cost, "releases_per_cell": plan.releases_per_cell}
    if plan.count is not None:
        d["count_noise"] = {"kind": plan.count.kind, "scale": plan.count.scale}
    d["sum_noise"] = {k: {"kind": v.kind, "scale": v.scale, "sensitivity": v.sensitivity} for k, v in plan.sums.items()}
    return d
